#!/bin/bash
# One prepared run on a lent GPU machine: builds core and `h3` against that machine's own torch
# (no GStreamer there) and proves the CUDA paths against the golden vectors. Under 8 minutes;
# everything it prints also goes to $OUT/gpu-check.log (or build-gpu/gpu-check.log without $OUT).
#
#   bash scripts/gpu-check.sh --prepare   here: copies the headers and sources that machine lacks
#                                         (gloo, nlohmann_json, GoogleTest) into .gpu-carry/
#   bash scripts/gpu-check.sh             there, with .gpu-carry carried along
#
# Steps: the GoogleTest cases that need a GPU (DiT forward fp32/bf16, the video and audio VAE
# decodes and encoders against the golden and reference vectors, the NCCL group's collectives at world size = GPUs present, device checks);
# `h3 generate --device cuda` on the tiny model against the CPU run (euler and causal samplers);
# `h3 bench dit|vae|generate
# --device cuda`. Exits non-zero at the first failure, and with "no GPU" where there is none.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CARRY=$ROOT/.gpu-carry

if [ "${1:-}" = --prepare ]; then
  rm -rf "$CARRY" && mkdir -p "$CARRY/include"
  cp -r /usr/include/gloo /usr/include/nlohmann "$CARRY/include/"
  cp -r /usr/src/googletest "$CARRY/googletest"
  du -sh "$CARRY"
  exit 0
fi

LOG_DIR=${OUT:-$ROOT/build-gpu}
mkdir -p "$LOG_DIR"
LOG=$LOG_DIR/gpu-check.log
exec > >(tee "$LOG") 2>&1
start=$(date +%s)
say() { echo "gpu-check [$(($(date +%s) - start)) s]: $*"; }
fail() { say "FAILED: $*"; exit 1; }

# 1. A GPU, or the reason there is none.
if ! command -v nvidia-smi >/dev/null 2>&1; then
  say "no GPU: nvidia-smi is not installed (no NVIDIA driver on this machine)"; exit 2
fi
if ! nvidia-smi -L >/dev/null 2>&1; then
  say "no GPU: nvidia-smi finds no device ($(nvidia-smi -L 2>&1 | head -1))"; exit 2
fi
nvidia-smi -L
PY=${PYTHON:-python3}
TORCH_ROOT=$("$PY" -c 'import torch, os; print(os.path.dirname(torch.__file__))' 2>/dev/null) ||
  fail "no torch in $PY: this script builds against the machine's own torch"
GPUS=$("$PY" -c 'import torch; print(torch.cuda.device_count())')
say "torch $("$PY" -c 'import torch; print(torch.__version__)') at $TORCH_ROOT; $GPUS GPU(s) visible to it"
[ "$GPUS" -ge 1 ] || { say "no GPU: torch sees none"; exit 2; }

# 2. Build core, h3 and the core tests (no GStreamer on that machine).
EXTRA=()
if [ -d "$CARRY/include" ]; then EXTRA+=("-Dcpp_args=-isystem$CARRY/include"); fi
if [ -d "$CARRY/googletest" ] && [ ! -d /usr/src/googletest ] && ! pkg-config --exists gtest 2>/dev/null; then
  cp -r "$CARRY/googletest" /usr/src/googletest  # Meson builds GoogleTest from /usr/src/googletest
fi
CUDA_ROOT=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
if [ ! -f build-gpu/build.ninja ]; then
  meson setup build-gpu -Dbuildtype=release -Dgst=disabled -Dfuzzers=disabled -Dtorch_root="$TORCH_ROOT" \
    -Dwith_cuda=enabled -Dwith_cuda_root="$CUDA_ROOT" "${EXTRA[@]}" || fail "meson setup"
fi
grep -q "LibTorch has CUDA *: *True\|LibTorch has CUDA *: *YES" build-gpu/meson-logs/meson-log.txt ||
  fail "this torch or toolkit gave no CUDA build (see build-gpu/meson-logs/meson-log.txt)"
say "building (ninja -j $(nproc))"
ninja -C build-gpu -j "$(nproc)" > "$LOG_DIR/build.log" 2>&1 || { tail -40 "$LOG_DIR/build.log"; fail "build"; }
say "built"
H3=build-gpu/tools/h3
export H3_TEST_DATA=$ROOT/tests/data

# 3. The GPU cases of the test suites (they skip, with the reason, on fewer GPUs than they need).
run_gtest() {  # run_gtest BINARY FILTER
  [ -x "$1" ] || { say "skipped $(basename "$1"): not built (no GoogleTest here)"; return; }
  "$1" --gtest_filter="$2" --gtest_brief=1 || fail "$(basename "$1") $2"
}
run_gtest build-gpu/tests/core/core_test 'Device.*'
run_gtest build-gpu/tests/core/core_test 'Cuda.*:ReleasePrecision.*'
run_gtest build-gpu/tests/core/core_test 'GoldenCuda.*:AudioGolden.OnTheGpu'
run_gtest build-gpu/tests/core/core_test 'VaeEncoderCuda.*:AudioEncoder.OnTheGpu'
run_gtest build-gpu/tests/core/core_test 'Nccl.*'
if [ "$GPUS" -ge 2 ]; then
  "$H3" bench comm --backend nccl --ranks "$GPUS" --max-mib 64 || fail "h3 bench comm --backend nccl"
else
  say "NCCL at world size 1: a communicator of one GPU moves nothing (the Nccl.* cases need 2)"
fi

# 4. The engine end to end: the tiny model's clip on the GPU against the CPU run.
TINY=build-gpu/data/tiny
"$H3" generate --model "$TINY" --prompt "a gpu check" --seed 3 --out "$LOG_DIR/tiny-cpu.y4m" --quiet ||
  fail "h3 generate on the CPU"
"$H3" generate --model "$TINY" --prompt "a gpu check" --seed 3 --device cuda --out "$LOG_DIR/tiny-cuda.y4m" \
  --quiet || fail "h3 generate --device cuda"
"$PY" - "$LOG_DIR/tiny-cpu.y4m" "$LOG_DIR/tiny-cuda.y4m" <<'EOF' || fail "CPU and CUDA clips differ"
import sys, numpy as np
a, b = (open(p, 'rb').read() for p in sys.argv[1:3])
ha, hb = a.split(b'\n', 1)[0], b.split(b'\n', 1)[0]
assert ha == hb, f"headers differ: {ha} / {hb}"
# Frames: equal sizes; the DiT runs in bf16 on the GPU (fp32 on the CPU), so pixels may differ.
fa = np.frombuffer(a, np.uint8); fb = np.frombuffer(b, np.uint8)
assert fa.size == fb.size, f"sizes differ: {fa.size} / {fb.size}"
d = np.abs(fa.astype(np.int16) - fb.astype(np.int16))
print(f"tiny clip, CPU fp32 vs CUDA (bf16 DiT): {a.count(b'FRAME')} frames, header {ha.decode()}, "
      f"max |d| {d.max()} levels, mean {d.mean():.3f}, {100.0 * (d > 8).mean():.2f} % of bytes off by > 8")
EOF
# More ranks than visible GPUs: refused before anything loads, naming both counts.
refusal=$("$H3" generate --model "$TINY" --prompt "a gpu check" --device cuda --ranks $((GPUS + 1)) \
  --out "$LOG_DIR/none.y4m" --quiet 2>&1) && fail "h3 generate --ranks $((GPUS + 1)) on $GPUS GPUs was not refused"
case "$refusal" in
  *"needs $((GPUS + 1)) GPUs (one per rank) but $GPUS are visible"*) say "ranks > GPUs refused: $refusal" ;;
  *) fail "ranks > GPUs refused with another message: $refusal" ;;
esac
if [ "$GPUS" -ge 2 ]; then
  "$H3" generate --model "$TINY" --prompt "a gpu check" --seed 3 --device cuda --ranks 2 \
    --out "$LOG_DIR/tiny-cuda-2.y4m" --quiet || fail "h3 generate --device cuda --ranks 2"
  cmp -s "$LOG_DIR/tiny-cuda.y4m" "$LOG_DIR/tiny-cuda-2.y4m" && say "2 GPU ranks: the same clip, byte for byte" ||
    say "2 GPU ranks: the clip differs from 1 rank (bf16 TP sums in another order; see the compare above)"
fi

# The chunk-causal sampler (docs/causal.md) on the GPU against the CPU run (no LoRA: the tiny model
# has none; its adapters follow the weights' device).
"$H3" generate --model "$TINY" --prompt "a gpu check" --seed 3 --frames 39 --sampler causal \
  --out "$LOG_DIR/causal-cpu.y4m" --quiet || fail "h3 generate --sampler causal on the CPU"
"$H3" generate --model "$TINY" --prompt "a gpu check" --seed 3 --frames 39 --sampler causal --device cuda \
  --out "$LOG_DIR/causal-cuda.y4m" --quiet || fail "h3 generate --sampler causal --device cuda"
cmp -s "$LOG_DIR/causal-cpu.y4m" "$LOG_DIR/causal-cuda.y4m" && say "causal: CPU and CUDA clips byte for byte" ||
  say "causal: the CUDA clip (bf16 DiT) differs from the CPU's (fp32), as the euler clip above may"

# AdaLN tables on the GPU (the default above) against the projections: the same clip, byte for byte.
"$H3" generate --model "$TINY" --prompt "a gpu check" --seed 3 --device cuda --no-adaln-tables \
  --out "$LOG_DIR/tiny-cuda-projections.y4m" --quiet || fail "h3 generate --device cuda --no-adaln-tables"
cmp -s "$LOG_DIR/tiny-cuda.y4m" "$LOG_DIR/tiny-cuda-projections.y4m" &&
  say "AdaLN tables on the GPU: the projections' clip, byte for byte" || fail "AdaLN tables changed the CUDA clip"
# The fit planner against this GPU's own memory, then a device memory nothing fits in.
"$H3" plan --model "$TINY" --ranks 1 --device-memory "$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits |
  head -1)M" || fail "h3 plan on this GPU's memory"
"$H3" generate --model "$TINY" --prompt "a gpu check" --device cuda --device-memory 1M --out "$LOG_DIR/none.y4m" \
  --quiet 2>"$LOG_DIR/fit.log" && fail "a 1 MiB device memory was not refused"
grep -q "no layout fits" "$LOG_DIR/fit.log" && say "fit refusal: $(head -1 "$LOG_DIR/fit.log")" ||
  fail "the fit refusal said something else: $(cat "$LOG_DIR/fit.log")"
if [ "$GPUS" -ge 2 ]; then
  "$H3" generate --model "$TINY" --prompt "a gpu check" --seed 3 --device cuda --ranks 2 --sp 2 \
    --out "$LOG_DIR/tiny-cuda-sp2.y4m" --quiet || fail "h3 generate --device cuda --ranks 2 --sp 2"
  say "Ulysses on 2 GPUs: $(cmp -s "$LOG_DIR/tiny-cuda-2.y4m" "$LOG_DIR/tiny-cuda-sp2.y4m" && echo "the TP 2 clip" ||
    echo "differs from the TP 2 clip (bf16 sums in another order)")"
fi

# 5. Absolute times on the GPU.
"$H3" bench dit --device cuda --dtype bf16 --hidden 1024 --heads 8 --layers 8 --max-ranks "$GPUS" ||
  fail "h3 bench dit --device cuda"
"$H3" bench dit --device cuda --dtype fp32 --hidden 1024 --heads 8 --layers 8 --max-ranks 1 ||
  fail "h3 bench dit --device cuda --dtype fp32"
"$H3" bench vae --device cuda --layers 4 --width 512 --latent-t 24 --latent-h 16 --latent-w 16 --tile 256 \
  --overlap 64 || fail "h3 bench vae --device cuda"
"$H3" bench generate --device cuda || fail "h3 bench generate --device cuda"
say "all checks passed"
