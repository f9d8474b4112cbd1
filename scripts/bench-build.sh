#!/bin/bash
# Build-time figures from a fresh clone, one line each (docs/performance.md, "Build and CI"):
#   demo-cold    scripts/demo.sh, packages and LibTorch present, an empty compile cache
#   test-after-demo  scripts/test.sh in the same folder: the rest of the build, then every test
#   touch-cpp    rebuild after an edit of one core .cpp (core/engine/stages/stage_decode.cpp; no cache)
#   touch-header rebuild after an edit of a widely included header (include/h3/error.h; no cache)
#   demo-ccache  scripts/demo.sh in a second fresh clone with the compile cache the first one filled
#   ci-cold      .ci/run in a third fresh clone, an empty compile cache (with --ci)
# Not part of the test suite: it takes about 40 minutes on a 2-core machine. The clones go under
# $TMPDIR and are removed afterwards; the compile caches are temporary ones (a fresh machine's).
# Each run's log is kept in $H3_BENCH_LOGS (default: bench-build-logs/ in this clone, git-ignored)
# and its phase lines are printed under its figure.
# Usage: scripts/bench-build.sh [--ci] [COMMIT]   (default: HEAD of this clone)
set -euo pipefail
cd "$(dirname "$0")/.."
ci=0
if [ "${1:-}" = --ci ]; then
  ci=1
  shift
fi
rev=$(git rev-parse "${1:-HEAD}")
work=$(mktemp -d "${TMPDIR:-/tmp}/h3-bench-build.XXXXXX")
logs=${H3_BENCH_LOGS:-$(pwd)/bench-build-logs}
mkdir -p "$logs"
trap 'cp "$work"/*.log "$logs"/ 2>/dev/null; rm -rf "$work"' EXIT
export CCACHE_DIR=$work/ccache  # a cache of our own, empty at first, as on a fresh machine
src=$(pwd)

clone() {
  git clone -q --no-checkout "$src" "$work/$1"
  git -C "$work/$1" checkout -q "$rev"
}
# Seconds a command takes; its output goes to $work/NAME.log.
timed() {
  local name=$1
  shift
  local t0 t1
  t0=$(date +%s.%N)
  if ! "$@" >"$work/$name.log" 2>&1; then
    tail -n 30 "$work/$name.log" >&2
    echo "bench-build: $name failed (log above)" >&2
    exit 1
  fi
  t1=$(date +%s.%N)
  python3 -c "import sys; s=float(sys.argv[2])-float(sys.argv[1]); print('%d min %04.1f s' % (s//60, s%60))" "$t0" "$t1"
}
line() {
  printf 'bench-build: %-16s %-14s %s\n' "$1" "$2" "$3"
  grep -hE '^(demo|test): .*(done|total|tests:)' "$work/$1.log" 2>/dev/null | sed 's/^/    /' || true
}

echo "bench-build: commit $rev, $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
clone a
t=$(timed demo-cold bash "$work/a/scripts/demo.sh")
line demo-cold "$t" \
  "scripts/demo.sh from a fresh clone, packages and LibTorch present, empty compile cache ($(grep -o 'build: done in .*' "$work/demo-cold.log"))"
t=$(timed test-after-demo bash "$work/a/scripts/test.sh")
line test-after-demo "$t" \
  "scripts/test.sh after it ($(grep -o 'build: done in .*' "$work/test-after-demo.log"); $(grep -o 'tests: .*' "$work/test-after-demo.log")): $(tail -n 1 "$work/test-after-demo.log")"
touch "$work/a/core/engine/stage_decode.cpp"
t=$(CCACHE_DISABLE=1 timed touch-cpp meson compile -C "$work/a/build")
line touch-cpp "$t" \
  "rebuild after touching core/engine/stages/stage_decode.cpp"
touch "$work/a/core/common/error.h"
t=$(CCACHE_DISABLE=1 timed touch-header meson compile -C "$work/a/build")
line touch-header "$t" \
  "rebuild after touching include/h3/error.h ($(grep -rl 'h3/error.h' "$work/a/core" "$work/a/tests" "$work/a/gst" | wc -l) files include it)"

# The compile cache the first clone filled, in a fresh clone.
clone c
t=$(timed demo-ccache bash "$work/c/scripts/demo.sh")
line demo-ccache "$t" \
  "scripts/demo.sh from a fresh clone, the compile cache warm ($(grep -o 'build: done in .*' "$work/demo-ccache.log"))"
rm -rf "$work/c"

if [ "$ci" = 1 ]; then
  clone d
  export CCACHE_DIR=$work/ccache-ci
  t=$(timed ci-cold bash "$work/d/.ci/run")
  line ci-cold "$t" \
    ".ci/run from a fresh clone, an empty compile cache: $(tail -n 1 "$work/ci-cold.log")"
fi
