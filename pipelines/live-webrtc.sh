#!/bin/bash
# An endless causal h3src that viewers watch and steer in a browser (docs/causal.md, "Watched and
# steered over WebRTC"): one pipeline, its video encoded once (H.264 constrained baseline, zerolatency) and its
# sound once (Opus), fanned out to one webrtcbin per viewer (WHEP-style signalling, a data channel
# back to the page); the same H.264 also goes out as HLS at /hls/ (the sound in AAC) for viewers
# at scale. http://127.0.0.1:PORT/ serves the page (pipelines/live/webrtc.html). Ctrl-C ends it.
# Usage: bash pipelines/live-webrtc.sh BUILD_DIR [PORT] [H3SRC_PROPERTIES] [SERVER_OPTIONS...]
#   e.g. bash pipelines/live-webrtc.sh build 8080 "width=256 height=160 queue-chunks=0" --max-viewers 4
#   SERVER_OPTIONS: --listen 0.0.0.0 (steering then needs the printed token), --max-viewers N,
#   --prompts-per-second N, --max-prompt-bytes N, --max-sdp-bytes N, --stun stun://HOST:PORT
#   (BUILD_DIR/pipelines/h3-live-webrtc --help lists them all).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=pipelines/env.sh
. "$here/env.sh"
h3_pipeline_env "${1:-build}"
port=${2:-8080}
# queue-chunks=0: the engine begins each chunk just in time, so a prompt change waits behind the
# chunk on screen and the next one, not two more (docs/causal.md).
props=${3:-width=256 height=160 queue-chunks=0}
server="$H3_BUILD/pipelines/h3-live-webrtc"
if [ ! -x "$server" ]; then
  echo "$server is missing: it is built when libsoup-3.0-dev and libgstreamer-plugins-bad1.0-dev are" \
    "installed (scripts/install-deps.sh) and the build reconfigured (meson setup --reconfigure $1)" >&2
  exit 1
fi
hls=$(mktemp -d "${TMPDIR:-/tmp}/h3-webrtc-hls.XXXXXX")
trap 'rm -rf "$hls"' EXIT
"$server" --port "$port" --page-dir "$here/live" --hls "$hls" --properties "$props" "${@:4}" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null || true' INT TERM
wait $pid || status=$?
wait $pid 2>/dev/null || true
exit "${status:-0}"
