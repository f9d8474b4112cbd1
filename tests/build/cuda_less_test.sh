#!/bin/bash
# The refusals of a build without CUDA, checked from a build with CUDA: configures a build folder
# beside this one (BUILD_ROOT-cuda-less) with -Dwith_cuda=disabled and this build's other options,
# builds only what holds the refusals (tests/build/cuda_less_refusals_test, the plugin, the engine
# module and the element's error test) and runs them there. Beside, not inside: at the same depth
# the compile commands are the same (meson writes relative paths), so every source that does not
# read the generated h3_config.h comes from the compile cache (ccache) this build filled; only those
# that do (a handful in core, the two test files) are compiled. A second run reuses the folder.
# Usage: cuda_less_test.sh SOURCE_ROOT BUILD_ROOT [--gtest_output=xml:FILE]
# With --gtest_output (meson's gtest protocol passes it) FILE receives the cases that ran there, as
# the gtest binaries reported them, so that this build's test log counts each one.
set -euo pipefail
src=$1
build=$(cd "$2" && pwd)
report=
case "${3:-}" in --gtest_output=xml:*) report=${3#--gtest_output=xml:} ;; esac
cuda_less=$build-cuda-less
# As scripts/build-steps.sh: precompiled headers through ccache.
export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}
t0=$(date +%s)

# This build's options that shape a compile command, with CUDA off and without the fuzzers.
mapfile -d '' options < <(meson introspect --buildoptions "$build" | python3 -c '
import json, sys
mirror = {"buildtype", "optimization", "debug", "b_ndebug", "b_sanitize", "b_lto", "b_pie", "b_staticpic",
          "werror", "warning_level", "cpp_std", "cpp_args", "cpp_link_args", "prefix", "libdir", "datadir",
          "torch_root", "with_cuda_root", "gst", "package-name", "package-origin"}
for o in json.load(sys.stdin):
    if o["name"] in mirror and o.get("machine", "host") != "build":
        v = o["value"]
        if isinstance(v, bool):
            v = "true" if v else "false"
        elif isinstance(v, list):
            v = "[" + ",".join(repr(x) for x in v) + "]"
        sys.stdout.write("-D%s=%s\0" % (o["name"], v))
sys.stdout.write("-Dwith_cuda=disabled\0-Dfuzzers=disabled\0-Dtests=true\0")
')
if [ -f "$cuda_less/build.ninja" ]; then
  meson setup --reconfigure "$cuda_less" "$src" "${options[@]}" >"$build/meson-logs/cuda-less-setup.log" 2>&1
else
  rm -rf "$cuda_less"
  meson setup "$cuda_less" "$src" "${options[@]}" >"$build/meson-logs/cuda-less-setup.log" 2>&1
fi || { tail -n 30 "$build/meson-logs/cuda-less-setup.log"; exit 1; }
if ! grep -Eq "LibTorch has CUDA *: (False|NO)" "$build/meson-logs/cuda-less-setup.log"; then
  echo "FAIL: $cuda_less was configured with CUDA (see $build/meson-logs/cuda-less-setup.log)"
  exit 1
fi
t1=$(date +%s)
ccache -z >/dev/null 2>&1 || true
if ! meson compile -C "$cuda_less" -j 2 tests/build/cuda_less_refusals_test gst/gsth3 gst-engine/gsth3-engine \
  tests/gst/gst_element_errors_test >"$build/meson-logs/cuda-less-build.log" 2>&1; then
  grep -A 12 '^FAILED' "$build/meson-logs/cuda-less-build.log" | head -n 40 || tail -n 30 "$build/meson-logs/cuda-less-build.log"
  exit 1
fi
t2=$(date +%s)
compiled=$(grep -c 'Compiling C++ object' "$build/meson-logs/cuda-less-build.log" || true)
echo "cuda-less build: configure $((t1 - t0)) s, build $((t2 - t1)) s ($compiled compile steps; ccache: " \
  "$(ccache -s 2>/dev/null | grep -E '^ *(Hits|Misses):' | tr -s ' ' | tr '\n' ' '))"

# The CUDA-less build's tests: its core refusals, and the element's (one case of its error test).
status=0
meson test -C "$cuda_less" --no-rebuild --print-errorlogs cuda_less_refusals gst_element_errors \
  --test-args=--gtest_filter=CudaLessBuild.*:H3VideoSrcErrors.CudaInABuildWithoutCudaIsRefusedSayingSo || status=1
python3 - "$cuda_less/meson-logs/testlog.junit.xml" "$report" <<'PY'
import sys
import xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
out = ET.Element("testsuites")
for suite in root.findall("testsuite"):
    for case in suite.iter("testcase"):
        outcome = "failed" if case.find("failure") is not None or case.find("error") is not None else (
            "skipped" if case.find("skipped") is not None else "passed")
        print("cuda-less: %s.%s %s" % (case.get("classname"), case.get("name"), outcome))
    out.append(suite)
if sys.argv[2]:
    ET.ElementTree(out).write(sys.argv[2], encoding="unicode")
PY
echo "cuda-less: $(($(date +%s) - t0)) s in all"
exit $status
