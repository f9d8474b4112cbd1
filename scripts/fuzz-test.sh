#!/bin/sh
# A fuzzer as a bounded meson test: runs scripts/fuzz.sh TARGET for SECONDS on the fuzzer meson
# built (FUZZER), or exits 77 (meson's "skipped") where there is none: no clang++ with its
# libFuzzer runtime (tests/fuzz/meson.build then builds no fuzzer). Any failure is exit status 1.
#
#   scripts/fuzz-test.sh TARGET SECONDS [FUZZER]
#
# H3_FUZZ_SECONDS, when set (.ci/run sets 20), replaces SECONDS: CI fuzzes longer than a local
# `meson test`, and each fuzzer once.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
target=${1:?usage: scripts/fuzz-test.sh TARGET SECONDS [FUZZER]}
seconds=${2:?usage: scripts/fuzz-test.sh TARGET SECONDS [FUZZER]}
seconds=${H3_FUZZ_SECONDS:-$seconds}
bin=${3:-}
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
  echo "fuzz $target: no fuzzer built (clang++ with -fsanitize=fuzzer is not available); skipped"
  exit 77
fi
status=0
FUZZ_BIN=$bin "$here/scripts/fuzz.sh" "$target" "$seconds" || status=$?
# libFuzzer reports a crash with its own exit status 77, which meson would count as skipped.
[ "$status" -eq 0 ] || exit 1
