#!/bin/sh
# Fuzzes the safetensors header parser briefly with libFuzzer and reports the
# number of executions. Needs clang++ with its fuzzer runtime (Debian:
# clang-14 + libclang-rt-14-dev); without them it says so and exits 0, unless
# FUZZ_REQUIRED=1 (then it fails).
#
#   scripts/fuzz-safetensors.sh [SECONDS]   default 20 s
#   FUZZ_BIN=build/tests/fuzz/fuzz_safetensors_header scripts/fuzz-safetensors.sh   reuse the meson-built target
#
# Exit status: 0 when no input crashed, non-zero otherwise (libFuzzer leaves
# the crashing input as crash-* in the work folder, whose path is printed).
set -eu

here=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-20}
cxx=${CLANGXX:-$(command -v clang++ || command -v clang++-14 || true)}
work=$(mktemp -d /tmp/h3-fuzz-XXXXXX)

bin=${FUZZ_BIN:-}
if [ -n "$bin" ]; then
  bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")  # the run below changes folder
else
  if [ -z "$cxx" ] || ! "$here/scripts/build-fuzzer.sh" --probe "$cxx" >/dev/null 2>&1; then
    echo "fuzz-safetensors: clang++ with -fsanitize=fuzzer is not available; skipped"
    rm -rf "$work"
    [ "${FUZZ_REQUIRED:-0}" = 1 ] && exit 1
    exit 0
  fi
  bin=$work/fuzz_safetensors_header
  echo "fuzz-safetensors: building with $cxx"
  "$here/scripts/build-fuzzer.sh" "$cxx" "$bin" "$here"
fi

# Seeds: small valid and near-valid files (length prefix < 256 bytes).
mkdir -p "$work/corpus"
seed() {  # seed NAME HEADER DATA
  len=$(printf '%s' "$2" | wc -c)
  { printf "\\$(printf '%03o' "$len")\\000\\000\\000\\000\\000\\000\\000"; printf '%s%s' "$2" "$3"; } > "$work/corpus/$1"
}
seed valid '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"format":"pt"}}' 'abcdefgh'
seed two '{"a":{"dtype":"BF16","shape":[1,2],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[],"data_offsets":[4,5]}}' 'abcde'
seed empty '{"e":{"dtype":"BOOL","shape":[0],"data_offsets":[0,0]}}' ''
seed overlap '{"a":{"dtype":"I16","shape":[2],"data_offsets":[0,4]},"b":{"dtype":"I8","shape":[2],"data_offsets":[2,4]}}' 'abcd'
seed meta '{"__metadata__":{}}' ''

echo "fuzz-safetensors: running for ${seconds}s in $work"
log=$work/fuzz.log
status=0
(cd "$work" && "$bin" -max_total_time="$seconds" -print_final_stats=1 -max_len=4096 \
  -dict="$here/tests/fuzz/safetensors.dict" "$work/corpus") >"$log" 2>&1 || status=$?
runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
tail -n 25 "$log"
if [ "$status" -ne 0 ]; then
  echo "fuzz-safetensors: FAILED after ${runs:-?} executions (status $status); inputs kept in $work"
  exit "$status"
fi
echo "fuzz-safetensors: ${runs:-?} executions in ${seconds}s, no crash"
rm -rf "$work"
