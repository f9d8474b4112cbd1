#!/bin/bash
# README command 2: installs what is missing, builds everything and runs every test.
# The last line it prints is "N passed, N failed, N skipped", counted per gtest case.
# Usage: scripts/test.sh [BUILD_DIR] [extra meson setup options...]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
shift || true

bash scripts/install-deps.sh
if [ ! -f "$BUILD/build.ninja" ]; then
  meson setup "$BUILD" -Dwerror=true "$@"
fi
meson compile -C "$BUILD"
# meson reuses a crashed gtest binary's old XML report: remove them all first.
find "$BUILD" -maxdepth 4 -name '*.xml' ! -path '*/meson-*' -delete
rm -f "$BUILD/meson-logs/testlog.junit.xml"
set +e
meson test -C "$BUILD" --print-errorlogs --num-processes "${H3_TEST_JOBS:-2}"
rc=$?
set -e
if [ -f "$BUILD/meson-logs/testlog.junit.xml" ]; then
  python3 scripts/junit_summary.py "$BUILD/meson-logs/testlog.junit.xml"
else
  echo "0 passed, 1 failed, 0 skipped"
  rc=1
fi
exit $rc
