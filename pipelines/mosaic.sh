#!/bin/bash
# Four h3videosrc with four prompts into a 2x2 `compositor` and one MP4, on ONE engine: the four
# elements' options agree, so the first loads the model and the others share it (docs/element.md,
# "One engine, many elements"); the engine interleaves their requests chunk by chunk. The script
# counts the model loads the pipeline reports (GstProgress "loading ...") and checks the file.
# Usage: bash pipelines/mosaic.sh BUILD_DIR [OUT.mp4]
# Extra properties for every source: H3_PROPS (default: 48 frames of the embedded default model);
# each tile's size: H3_TILE=WxH (default 256x160, the embedded default's).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=pipelines/env.sh
. "$here/env.sh"
h3_pipeline_env "${1:-build}"
out=${2:-$H3_BUILD/h3-mosaic.mp4}
props=${H3_PROPS:-"num-frames=48"}
tile=${H3_TILE:-256x160}
w=${tile%x*}
h=${tile#*x}
prompts=("a red circle moving right on a black background"
         "a green square moving left on a white background"
         "a blue triangle moving down on a black background"
         "a yellow circle moving up on a white background")

sources=()
for i in 0 1 2 3; do
  # shellcheck disable=SC2206
  sources+=(h3videosrc $props width=$w height=$h seed=$((i + 1)) "prompt=${prompts[$i]}" ! mix.sink_$i)
done
mix=(compositor name=mix background=black
     sink_0::xpos=0 sink_0::ypos=0 sink_1::xpos=$w sink_1::ypos=0
     sink_2::xpos=0 sink_2::ypos=$h sink_3::xpos=$w sink_3::ypos=$h)

echo "mosaic: four prompts, one engine, 2x2 into $out" >&2
rm -f "$out"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s%N)
gst-launch-1.0 -m "${mix[@]}" ! videoconvert ! video/x-raw,format=I420,width=$((2 * w)),height=$((2 * h)) ! \
  x264enc ! mp4mux ! filesink location="$out" "${sources[@]}" > "$log"
end=$(date +%s%N)
loads=$(grep -c '^Progress: (open) loading ' "$log" || true)
echo "mosaic: the model was loaded $loads time(s) for the four sources" >&2
[ "$loads" = 1 ] || { echo "mosaic: expected one engine for four sources with the same options" >&2; exit 1; }
bash "$here/check-mp4.sh" "$out" "" $((2 * w)) $((2 * h))
ms=$(( (end - start) / 1000000 ))
printf 'mosaic: wrote %s, %dx%d (pipeline ran %d.%03d s)\n' "$out" $((2 * w)) $((2 * h)) $((ms / 1000)) $((ms % 1000))
