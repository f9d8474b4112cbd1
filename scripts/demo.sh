#!/bin/bash
# README command 1: the main job. Installs what is missing, builds only what the job runs (the
# plugin and the engine module: `meson compile demo`), and runs the product on the embedded default
# model (data/default, committed). One line per phase with its time; a failed phase names its log.
# Usage: scripts/demo.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
H3_WHO=demo
. scripts/build-steps.sh
logs=$BUILD/logs

h3_phase "packages (Debian)" "$logs/packages.log" bash scripts/install-deps.sh --packages-only
h3_phase "LibTorch (the pinned torch wheel)" "$logs/libtorch.log" bash scripts/install-torch.sh
# The same options as scripts/test.sh, which then builds the rest into the same folder.
h3_configure "$BUILD" "$logs/configure.log" -Dwerror=true
h3_build "$BUILD" "$logs/build-demo.log" demo

# The clip and its soundtrack: h3src's video pad through x264enc and its audio pad
# through avenc_aac into one MP4, on the embedded default model (data/default, trained on
# procedural clips: train/tiny); checks the two streams with ffprobe and prints where the file is.
# The prompt is one a newcomer can check by eye: a red circle crossing a black frame from left to
# right, to a 440 Hz tone (a circle's).
PROMPT="a red circle moving right on a black background"
export H3_PROPS=${H3_PROPS:-prompt=\"$PROMPT\"}
h3_phase "generate (h3src ! x264enc + avenc_aac ! mp4mux)" "$logs/generate.log" \
  bash pipelines/av.sh "$BUILD" mp4 "$BUILD/h3-demo.mp4"
sed 's/^/  /' "$logs/generate.log" >&2
h3_total
out=$BUILD/h3-demo.mp4
echo "demo: $out: $(ffprobe -v error -show_entries format=duration -of csv=p=0 "$out" | cut -c1-5) s of H.264 video and AAC audio ($(du -h "$out" | cut -f1)), from the embedded default model"
echo "demo: the element's properties: $H3_PROPS"
case $H3_PROPS in
  *"$PROMPT"*) echo "demo: expect a red circle crossing a black frame from left to right, and a 440 Hz tone (a circle's)" ;;
esac
