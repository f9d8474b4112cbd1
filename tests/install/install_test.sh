#!/bin/bash
# `meson install` into a staging root (--destdir), then, with only the installed files: the plugin
# (gst-inspect-1.0 h3src, a clip through gst-launch-1.0), the `h3` command (a clip of the default
# model), and the public API (docs/engine.md's example compiled with `pkg-config --cflags --libs
# h3-engine` against the installed headers and library, and run). Then what goes wrong: a prefix
# that cannot be written, a plugin folder that is not there, an engine module that is missing.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
frames=22 width=80 height=48
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() { echo "install test: $*" >&2; exit 1; }
# meson test points LD_LIBRARY_PATH into the build tree: nothing of it may be found.
unset LD_LIBRARY_PATH
root="$out/root"

meson install -C "$build" --destdir "$root" --no-rebuild --quiet
prefix=$(meson introspect "$build" --buildoptions | python3 -c \
  "import json,sys; o={x['name']: x['value'] for x in json.load(sys.stdin)}; print(o['prefix']); print(o['libdir']); print(o['includedir']); print(o['bindir'])")
{ read -r prefix_dir; read -r libdir; read -r includedir; read -r bindir; } <<<"$prefix"
case "$libdir" in /*) ;; *) libdir="$prefix_dir/$libdir" ;; esac
case "$includedir" in /*) ;; *) includedir="$prefix_dir/$includedir" ;; esac
case "$bindir" in /*) ;; *) bindir="$prefix_dir/$bindir" ;; esac

# --- What is installed ---------------------------------------------------------------------------
plugin="$root$libdir/gstreamer-1.0/libgsth3.so"
module="$root$libdir/gst-h3/libgsth3-engine.so"
library="$root$libdir/libh3-engine.so"
pc="$root$libdir/pkgconfig/h3-engine.pc"
for f in "$plugin" "$module" "$library" "$pc" "$root$bindir/h3"; do
  [ -e "$f" ] || fail "$f was not installed"
done
model_dir=$(sed -n 's/^#define H3_DEFAULT_MODEL_DIR "\(.*\)"$/\1/p' "$build/h3_config.h")
[ -f "$root$model_dir/model_index.json" ] || fail "the default model $model_dir was not installed"
# The licence and the notices travel with the installed plugin and data (share/doc/gst-h3).
doc_dir="$root$(dirname "$(dirname "$model_dir")")/doc/gst-h3"
for f in LICENSE NOTICE LICENSES/Apache-2.0.txt; do
  cmp -s "$src/$f" "$doc_dir/$f" || fail "$f was not installed to $doc_dir"
done
# The public headers: exactly include/h3/, byte for byte.
(cd "$src/include/h3" && ls) >"$out/headers-src.txt"
(cd "$root$includedir/h3" && ls) >"$out/headers-installed.txt"
diff "$out/headers-src.txt" "$out/headers-installed.txt" >&2 ||
  fail "the installed headers ($includedir/h3) are not include/h3/'s"
for h in $(cat "$out/headers-src.txt"); do
  cmp -s "$src/include/h3/$h" "$root$includedir/h3/$h" || fail "$includedir/h3/$h differs from include/h3/$h"
done
for f in "$plugin" "$module" "$library" "$root$bindir/h3"; do
  if readelf -d "$f" | grep -E '(RPATH|RUNPATH)' | grep -qF "$build"; then
    fail "$f keeps a run path into the build tree"
  fi
done

# --- The plugin, found through the installed folder only -----------------------------------------
gst_env=(GST_PLUGIN_PATH_1_0="$(dirname "$plugin"):$(pkg-config --variable=pluginsdir gstreamer-1.0)"
         GST_PLUGIN_SYSTEM_PATH_1_0= GST_REGISTRY_1_0="$out/registry.bin" H3_ENGINE_MODULE= H3_MODEL_DIR=)
env "${gst_env[@]}" gst-inspect-1.0 h3src >"$out/inspect.txt" 2>&1 || { cat "$out/inspect.txt" >&2; fail "gst-inspect-1.0 h3src failed"; }
grep -qE "^  Filename +$plugin\$" "$out/inspect.txt" ||
  { grep Filename "$out/inspect.txt" >&2; fail "gst-inspect-1.0 h3src did not load the installed plugin"; }
grep -qE '^  (SRC|video).*' "$out/inspect.txt" && grep -q 'SRC template: .audio.' "$out/inspect.txt" ||
  fail "gst-inspect-1.0 h3src shows no audio pad template"
env "${gst_env[@]}" GST_DEBUG=h3videosrc:5 GST_DEBUG_NO_COLOR=1 GST_DEBUG_FILE="$out/debug.log" \
  gst-launch-1.0 -q h3videosrc model="$root$model_dir" num-frames=$frames width=$width height=$height ! \
  video/x-raw,format=RGB ! filesink location="$out/frames.rgb"
grep -qF "engine module $(dirname "$plugin")/../gst-h3/libgsth3-engine.so" "$out/debug.log" ||
  { grep 'engine module' "$out/debug.log" >&2; fail "the installed plugin did not open the installed engine module"; }
# RGB rows of 80 pixels need no padding: 22 whole frames.
size=$(stat -c %s "$out/frames.rgb")
[ "$size" -eq $((frames * width * height * 3)) ] ||
  fail "the installed element wrote $size bytes, expected $((frames * width * height * 3))"

# --- The installed h3 command: a clip of the installed default model -----------------------------
H3_MODEL_DIR= "$root$bindir/h3" generate --model "$root$model_dir" --width $width --height $height \
  --frames $frames --prompt "a red circle moving right on a black background" --out "$out/clip.y4m" --quiet
header=$(head -1 "$out/clip.y4m")
[ "$header" = "YUV4MPEG2 W$width H$height F24:1 Ip A1:1 C444" ] || fail "h3 generate's clip has the header '$header'"
# 4:4:4: each frame is "FRAME\n" and three full planes.
size=$(stat -c %s "$out/clip.y4m")
[ "$size" -eq $((${#header} + 1 + frames * (6 + width * height * 3))) ] ||
  fail "h3 generate wrote $size bytes, not $frames frames of ${width}x$height"

# --- The public API: docs/engine.md's example against the installed headers and library -----------
export PKG_CONFIG_PATH="$root$libdir/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$root"
flags=$(pkg-config --cflags --libs h3-engine) || fail "pkg-config cannot read $pc"
case "$flags" in *"$build"* | *"$src"*) fail "pkg-config h3-engine names the build or source tree: $flags" ;; esac
# Every installed header on its own, with nothing but the installed include folder (torch-free).
for h in $(cat "$out/headers-src.txt"); do
  echo "#include <h3/$h>" | g++ -std=c++17 -fsyntax-only -Werror -Wall -Wextra -x c++ - \
    $(pkg-config --cflags h3-engine) 2>"$out/header.txt" || { cat "$out/header.txt" >&2; fail "h3/$h does not compile alone"; }
done
grep -lE '#include <(ATen|torch|c10)/' "$root$includedir"/h3/*.h && fail "an installed header includes LibTorch"
awk '/<!-- install test: example.cpp -->/{f=1; next} f && /^```/{if (started) exit; started=1; next} f && started' \
  "$src/docs/engine.md" >"$out/example.cpp"
[ -s "$out/example.cpp" ] || fail "docs/engine.md has no example after <!-- install test: example.cpp -->"
g++ -std=c++17 -Werror -Wall -Wextra "$out/example.cpp" -o "$out/example" $flags || fail "the example does not compile"
LD_LIBRARY_PATH="$root$libdir" H3_MODEL_DIR="$root$model_dir" "$out/example" >"$out/example.txt" ||
  { cat "$out/example.txt" >&2; fail "the example failed"; }
grep -qx "$frames frames of ${width}x$height, $((frames * width * height * 3)) bytes" "$out/example.txt" ||
  { cat "$out/example.txt" >&2; fail "the example did not deliver $frames frames of ${width}x$height"; }
# A model folder that is not there: h3::Error (kNotFound) reaches the application, naming it.
cat >"$out/missing.cpp" <<'CPP'
#include <h3/generator.h>
#include <cstdio>
int main(int, char** argv) {
  h3::EngineOptions options;
  options.model_dir = argv[1];
  try {
    h3::Generator::open(options);
  } catch (const h3::Error& e) {
    std::printf("%s: %s\n", h3::to_string(e.kind()), e.what());
    return e.kind() == h3::ErrorKind::kNotFound ? 0 : 1;
  }
  return 1;
}
CPP
g++ -std=c++17 "$out/missing.cpp" -o "$out/missing" $flags || fail "missing.cpp does not compile"
LD_LIBRARY_PATH="$root$libdir" "$out/missing" "$out/no-model" >"$out/missing.txt" ||
  { cat "$out/missing.txt" >&2; fail "a missing model folder did not throw h3::Error(kNotFound)"; }
grep -qF "$out/no-model" "$out/missing.txt" || { cat "$out/missing.txt" >&2; fail "the error does not name the folder"; }
unset PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR

# --- Bad input ------------------------------------------------------------------------------------
# A prefix this user may not write: meson install stops with an error naming the path, status
# non-zero. Root writes anywhere, so as root the folder is another user's and meson runs without
# CAP_DAC_OVERRIDE (setpriv); any other user gets a folder without write permission.
mkdir -p "$out/locked"
drop=()
if [ "$(id -u)" -eq 0 ]; then
  chown nobody "$out/locked" && chmod 755 "$out/locked"
  drop=(setpriv --bounding-set -dac_override,-dac_read_search,-fowner)
else
  chmod 555 "$out/locked"
fi
rc=0
"${drop[@]}" meson install -C "$build" --destdir "$out/locked/root" --no-rebuild --quiet >"$out/locked.txt" 2>&1 || rc=$?
[ "$rc" -ne 0 ] || fail "meson install into an unwritable prefix succeeded"
grep -q "Permission denied: '$out/locked/root" "$out/locked.txt" ||
  { cat "$out/locked.txt" >&2; fail "meson install's error does not name the unwritable path"; }
# A plugin folder that is not there: GStreamer finds no h3src, and says so.
rc=0
GST_PLUGIN_PATH_1_0="$out/no-such-folder" GST_PLUGIN_SYSTEM_PATH_1_0= GST_REGISTRY_1_0="$out/registry-none.bin" \
  gst-inspect-1.0 h3src >"$out/none.txt" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && grep -q "No such element or plugin 'h3src'" "$out/none.txt" ||
  { cat "$out/none.txt" >&2; fail "gst-inspect-1.0 without the plugin folder gave rc $rc"; }
# The engine module's folder gone: the element fails at start with an error naming where it looked.
# (Through a small PyGObject program, not gst-launch-1.0: gst-launch-1.0 sometimes stays in its
# preroll loop after an error posted this early, in 1 of about 3 runs here.)
mv "$root$libdir/gst-h3" "$root$libdir/gst-h3.away"
cat >"$out/start.py" <<'PY'
import sys
import gi
gi.require_version("Gst", "1.0")
from gi.repository import Gst
Gst.init(None)
pipeline = Gst.parse_launch(sys.argv[1])
pipeline.set_state(Gst.State.PLAYING)
msg = pipeline.get_bus().timed_pop_filtered(120 * Gst.SECOND, Gst.MessageType.ERROR | Gst.MessageType.EOS)
pipeline.set_state(Gst.State.NULL)
if msg is None or msg.type != Gst.MessageType.ERROR:
    sys.exit("no error from the pipeline")
print(msg.parse_error()[0].message)
PY
env "${gst_env[@]}" /usr/bin/python3 "$out/start.py" "h3videosrc model=$root$model_dir num-frames=$frames ! fakesink" \
  >"$out/nomodule.txt" 2>&1 || { cat "$out/nomodule.txt" >&2; fail "a missing engine module gave no error"; }
grep -qF "$(dirname "$plugin")/../gst-h3/libgsth3-engine.so: no such file" "$out/nomodule.txt" ||
  { cat "$out/nomodule.txt" >&2; fail "the error does not name the missing engine module"; }
echo "install test: ok"
