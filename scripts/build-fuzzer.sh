#!/bin/sh
# Builds the safetensors-header libFuzzer target with clang++ (the project itself
# compiles with g++, and libFuzzer needs clang's -fsanitize=fuzzer runtime).
#
#   scripts/build-fuzzer.sh --probe CLANGXX        exit 0 when CLANGXX can link a fuzzer
#   scripts/build-fuzzer.sh CLANGXX OUTPUT SRCDIR [TORCH_ROOT]  build OUTPUT from the sources in SRCDIR
#
# Called by tests/fuzz/meson.build (option -Dfuzzers) and by scripts/fuzz-safetensors.sh.
set -eu

if [ "${1:-}" = "--probe" ]; then
  cxx=$2
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  printf '%s\n' '#include <cstdint>' '#include <cstddef>' \
    'extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }' > "$tmp/p.cpp"
  exec "$cxx" -fsanitize=fuzzer "$tmp/p.cpp" -o "$tmp/p"
fi

cxx=$1
out=$2
src=$3
# The project's LibTorch (scripts/torch-root.sh) unless a 4th argument names one.
torch=${4:-$("$src/scripts/torch-root.sh")}
[ -n "$torch" ] || { echo "build-fuzzer: no LibTorch (run scripts/install-deps.sh)" >&2; exit 1; }
# c10 headers (ScalarType) come from LibTorch's include folder; libc10 resolves
# the few out-of-line helpers they reference. Only the parser is instrumented.
"$cxx" -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -D_GLIBCXX_USE_CXX11_ABI=1 -I"$src/core" -isystem "$torch/include" \
  "$src/tests/fuzz/safetensors_header_fuzz.cpp" "$src/core/io/safetensors_header.cpp" \
  "$src/core/io/json_strict.cpp" "$src/core/common/error.cpp" "$src/core/common/shape.cpp" \
  -L"$torch/lib" -Wl,-rpath,"$torch/lib" -lc10 -o "$out"
