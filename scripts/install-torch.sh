#!/bin/bash
# Installs the project's LibTorch: the pinned `torch` wheel from PyPI, unpacked (its lib/, include/
# and share/ only) into a cache folder outside the clone, so that every clone and CI reuse it and the
# system's site-packages stay untouched. Prints nothing and returns at once when it is already there.
#
#   H3_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/gst-h3) holds torch-<version>/, which meson finds
#   by itself (scripts/torch-root.sh); -Dtorch_root=DIR chooses another LibTorch.
#
# The wheel is a CUDA 13.0 build: even its libtorch_cpu.so needs libcudart.so.13 and libcupti.so.13,
# and libtorch_cuda.so needs the CUDA math libraries, cuDNN, NCCL, cuSPARSELt, cuFile and NVSHMEM.
# Where the CUDA toolkit (--cuda-root, default /usr/local/cuda) provides a library, that one is
# used (one NCCL: the toolkit's, the same 2.28.9 the wheel was built against); each library that
# neither the toolkit nor the system provides comes from its own NVIDIA wheel on PyPI, pinned to the
# version torch 2.11.0 requires, into torch-<version>/torch/lib/ beside the torch libraries (their
# RPATH holds $ORIGIN, so the loader finds them there for every program that loads LibTorch).
# Without a toolkit only the two the CPU library needs are fetched (the build is then CPU-only).
set -euo pipefail

. "$(dirname "$0")/torch-pin.sh"
CUDA_ROOT=${H3_CUDA_ROOT:-/usr/local/cuda}
DEST=$TORCH_DIR
[ -f "$DEST/.complete" ] && exit 0

# soname -> the PyPI wheel that carries it (the versions torch 2.11.0's metadata pins).
declare -A WHEEL_OF=(
  [libcudart.so.13]=nvidia-cuda-runtime==13.0.96
  [libcupti.so.13]=nvidia-cuda-cupti==13.0.85
  [libcublas.so.13]=nvidia-cublas==13.1.0.3
  [libcublasLt.so.13]=nvidia-cublas==13.1.0.3
  [libcufft.so.12]=nvidia-cufft==12.0.0.61
  [libcurand.so.10]=nvidia-curand==10.4.0.35
  [libcusolver.so.12]=nvidia-cusolver==12.0.4.66
  [libcusparse.so.12]=nvidia-cusparse==12.6.3.3
  [libnvJitLink.so.13]=nvidia-nvjitlink==13.0.88
  [libcufile.so.0]=nvidia-cufile==1.15.1.6
  [libcudnn.so.9]=nvidia-cudnn-cu13==9.19.0.56
  [libcusparseLt.so.0]=nvidia-cusparselt-cu13==0.8.0
  [libnccl.so.2]=nvidia-nccl-cu13==2.28.9
  [libnvshmem_host.so.3]=nvidia-nvshmem-cu13==3.4.5
)
CPU_NEEDS=(libcudart.so.13 libcupti.so.13)
CUDA_NEEDS=("${!WHEEL_OF[@]}")

PY=python3
if ! "$PY" -m pip --version >/dev/null 2>&1; then
  echo "install-torch: python3 -m pip is missing (scripts/install-deps.sh installs python3-pip)" >&2
  exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/h3-torch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)

# One wheel for any local Python: the C++ libraries do not depend on the interpreter.
fetch() {  # fetch REQUIREMENT -> path of the downloaded wheel
  local dir
  dir=$(mktemp -d "$tmp/w.XXXX")
  "$PY" -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --python-version 3.11 --implementation cp --dest "$dir" "$1" >&2
  ls "$dir"/*.whl
}

# unpack WHEEL DEST PREFIX...: the wheel's members under each PREFIX, into DEST (a wheel is a zip).
unpack() {
  "$PY" - "$@" <<'EOF'
import sys, zipfile, os
wheel, dest, prefixes = sys.argv[1], sys.argv[2], sys.argv[3:]
with zipfile.ZipFile(wheel) as z:
    for m in z.infolist():
        if any(m.filename.startswith(p) for p in prefixes) and not m.is_dir():
            z.extract(m, dest)
EOF
}

provided() {  # provided SONAME: true when the toolkit or the system's loader path has it
  [ -e "$CUDA_ROOT/lib64/$1" ] || [ -e "$CUDA_ROOT/lib/$1" ] || ldconfig -p 2>/dev/null | grep -q " $1 "
}

echo "install-torch: torch $TORCH_VERSION+$TORCH_LOCAL into $DEST" >&2
rm -rf "$DEST.partial"
mkdir -p "$DEST.partial"
wheel=$(fetch "torch==$TORCH_VERSION")
bytes=$(stat -c %s "$wheel")
unpack "$wheel" "$DEST.partial" torch/lib/ torch/include/ torch/share/ torch/version.py
# The Python bindings are not needed and are the one library that links libpython.
rm -f "$DEST.partial"/torch/lib/libtorch_python.so
rm -f "$wheel"

needs=("${CPU_NEEDS[@]}")
if [ -e "$CUDA_ROOT/include/cuda_runtime_api.h" ]; then needs=("${CUDA_NEEDS[@]}"); fi
declare -A fetched=()
extra=()
for so in "${needs[@]}"; do
  provided "$so" && continue
  req=${WHEEL_OF[$so]}
  [ -n "${fetched[$req]:-}" ] && continue
  fetched[$req]=1
  extra+=("$req")
  w=$(fetch "$req")
  bytes=$((bytes + $(stat -c %s "$w")))
  unpack "$w" "$tmp/x" nvidia/
  find "$tmp/x" -name 'lib*.so*' -exec mv -f {} "$DEST.partial/torch/lib/" \;
  rm -rf "$tmp/x" "$w"
done

rm -rf "$DEST"
mv "$DEST.partial" "$DEST"
echo "$TORCH_VERSION+$TORCH_LOCAL" > "$DEST/.complete"
echo "install-torch: $((bytes / 1048576)) MiB downloaded (torch${extra[*]:+ and ${extra[*]}}), $(($(date +%s) - start)) s; $(du -sh "$DEST" | cut -f1) on disk" >&2
