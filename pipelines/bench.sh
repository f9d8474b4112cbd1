#!/bin/bash
# Benchmark (prints): h3videosrc ! fakesink frames/s against the engine alone
# on the same request, and when the first buffer reaches the sink against the
# end of denoising and the whole clip; with --av 1, h3src with both pads, and
# when its first audio buffer arrives against its first video buffer.
# Usage: bash pipelines/bench.sh BUILD_DIR [h3-gst-bench options: --frames N --width W --height H
#        --steps S --seed S --model DIR --runs R --queue-chunks Q --av 0|1]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=pipelines/env.sh
. "$here/env.sh"
h3_pipeline_env "${1:-build}"
shift || true
bench="$H3_BUILD/pipelines/h3-gst-bench"
[ -x "$bench" ] || { echo "bench: $bench is missing (it is built once core/engine exists)" >&2; exit 1; }
exec "$bench" "$@"
