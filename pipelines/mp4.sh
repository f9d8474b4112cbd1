#!/bin/bash
# The README demo: generates a clip with h3videosrc and the embedded default
# (tiny) model, encodes it as H.264 (I420) in MP4, and checks the file.
# Usage: bash pipelines/mp4.sh BUILD_DIR [OUT.mp4]
# Extra element properties: H3_PROPS="num-frames=73 seed=7 prompt='a red kite'"
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=pipelines/env.sh
. "$here/env.sh"
h3_pipeline_env "${1:-build}"
out=${2:-$H3_BUILD/h3-demo.mp4}
props=${H3_PROPS:-}

echo "mp4: generating with h3videosrc ${props:-(defaults: the embedded tiny model and prompt)}" >&2
rm -f "$out"
start=$(date +%s%N)
# shellcheck disable=SC2086
eval gst-launch-1.0 -q h3videosrc $props ! videoconvert ! video/x-raw,format=I420 ! \
  x264enc ! mp4mux ! filesink location="\"$out\""
end=$(date +%s%N)

bash "$here/check-mp4.sh" "$out"
ms=$(( (end - start) / 1000000 ))
printf 'mp4: wrote %s (pipeline ran %d.%03d s)\n' "$out" $((ms / 1000)) $((ms % 1000))
