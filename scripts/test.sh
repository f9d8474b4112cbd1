#!/bin/bash
# README command 2: installs what is missing, builds everything and runs every test (--quick: the
# fast ones).
# The last line it prints is "N passed, N failed, N skipped", counted per gtest case.
# A build folder that scripts/demo.sh made is reused: only what the demo did not build is built.
# Usage: scripts/test.sh [--quick] [--list] [BUILD_DIR] [extra meson setup options...]
#   --quick  only the meson suite 'quick': the fast unit tests (docs/testing.md)
#   --list   prints the tests that the run would run (one "gst-h3[:SUITE] / NAME" a line) and stops; the
#            build folder must be configured already (tests/build/suites_test.py checks both flags)
set -euo pipefail
cd "$(dirname "$0")/.."
select=()
list=false
while [ $# -gt 0 ]; do
  case $1 in
    --quick) select=(--suite quick) ;;
    --list) list=true ;;
    *) break ;;
  esac
  shift
done
BUILD=${1:-build}
shift || true
if $list; then
  exec meson test -C "$BUILD" --list --no-rebuild "${select[@]}"
fi
H3_WHO=test
. scripts/build-steps.sh
logs=$BUILD/logs

h3_phase "packages and LibTorch" "$logs/deps.log" bash scripts/install-deps.sh
h3_configure "$BUILD" "$logs/configure.log" -Dwerror=true "$@"
h3_build "$BUILD" "$logs/build.log"
# meson reuses a crashed gtest binary's old XML report: remove them all first.
find "$BUILD" -maxdepth 4 -name '*.xml' ! -path '*/meson-*' -delete
rm -f "$BUILD/meson-logs/testlog.junit.xml"
t0=$(date +%s)
set +e
meson test -C "$BUILD" --print-errorlogs --num-processes "${H3_TEST_JOBS:-2}" "${select[@]}"
rc=$?
set -e
h3_say "tests: $(h3_elapsed $(($(date +%s) - t0)))"
h3_total
if [ -f "$BUILD/meson-logs/testlog.junit.xml" ]; then
  python3 scripts/junit_summary.py "$BUILD/meson-logs/testlog.junit.xml"
else
  echo "0 passed, 1 failed, 0 skipped"
  rc=1
fi
exit $rc
