#!/bin/bash
# docs/causal.md's contact sheet of an endless stream, and what the default-model checks measure of
# it: h3videosrc on the embedded default model (data/default; a causal request takes its causal
# adapter, causal-lora/, unless the properties say otherwise), sampler=causal, num-frames=-1, "a red
# circle moving right on a black background", seed 3, switched at chunk 100 (70.8 s) to "a blue
# square moving left on a white background" (a combination the model never saw in training): the
# stream of tests/core/engine/default_causal_test.cpp. The sheet: three frames (0, 8 and 16 of 17)
# of chunks 0, 100 (the first of the new prompt), 500 and 1,000, a row a chunk, at full size
# (256 x 160), one PNG; real engine output, nothing retouched but the palette. The checks
# (scripts/endless_look.py, those of the test) on chunks 5-7 and 96-98 (red circle), 102-104,
# 105-107, 108-110, 200-202, 500-502 and 1,000-1,002 (blue square). The stream ends by num-buffers
# after chunk 1,002 (17,051 frames).
#
#   bash scripts/endless-sheet.sh [OUT.png] [ELEMENT PROPERTIES...]
#       OUT default docs/endless-sheet.png ("-": no sheet, the checks only); BUILD=build;
#       e.g. lora=none for the model without its adapter
set -euo pipefail
cd "$(dirname "$0")/.."
here=$(pwd)
. scripts/torch-pin.sh
. scripts/reference-venv.sh  # PY: numpy for endless_look.py
# shellcheck source=pipelines/env.sh
. pipelines/env.sh
h3_pipeline_env "${BUILD:-build}"
out=${1:-docs/endless-sheet.png}
shift || true
CHUNKS=(0 100 500 1000)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/h3-endless.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
printf '70.82 a blue square moving left on a white background\n' >"$tmp/timeline.txt"
picks=()
for c in "${CHUNKS[@]}"; do
  for f in 0 8 16; do picks+=(--frame $((c * 17 + f))); done
done
start=$(date +%s)
gst-launch-1.0 -q h3videosrc model="$here/data/default" sampler=causal num-frames=-1 seed=3 \
  prompt="a red circle moving right on a black background" prompt-timeline="$tmp/timeline.txt" \
  num-buffers=$((1003 * 17)) "$@" ! video/x-raw,format=RGB,width=256,height=160 ! fdsink fd=1 |
  "$PY" scripts/endless_look.py --window 5:3:red:black --window 96:3:red:black --window 102:3:blue:white \
    --window 105:3:blue:white --window 108:3:blue:white --window 200:3:blue:white --window 500:3:blue:white \
    --window 1000:3:blue:white "${picks[@]}" --out "$tmp"
echo "endless-sheet: the stream took $(( $(date +%s) - start )) s"
[ "$out" = - ] && exit 0
inputs=()
for c in "${CHUNKS[@]}"; do
  for f in 0 8 16; do inputs+=(-f rawvideo -pix_fmt rgb24 -s 256x160 -i "$tmp/$((c * 17 + f)).rgb"); done
done
n=$(( ${#CHUNKS[@]} * 3 ))
# One 256-colour palette, no dithering (the model's flat colours come through exact to a level or two).
ffmpeg -v error -y "${inputs[@]}" -filter_complex \
  "$(for i in $(seq 0 $((n - 1))); do printf '[%d:v]' "$i"; done)xstack=inputs=$n:grid=3x${#CHUNKS[@]},split[a][b];[a]palettegen=max_colors=256[p];[b][p]paletteuse=dither=none" \
  "$out"
echo "endless-sheet: $out ($(du -h "$out" | cut -f1)), chunks ${CHUNKS[*]}"
