#!/bin/bash
# An endless causal h3src (docs/causal.md "Live") as low-latency HLS, watched in a browser:
# one pipeline generates and writes 1-second segments, paced to real time (clocksync: h3src is not
# a live source, and a playlist that ran ahead of its viewers would drop segments before they play;
# the engine waits for the pipeline, its memory bounded by queue-chunks) (H.264 + AAC in MPEG-TS, hlssink2, the last
# 6 kept), and http://127.0.0.1:PORT/ serves a page whose <video> plays the playlist (browsers with
# native HLS: Chromium, Safari; nothing is fetched from elsewhere) to any number of viewers.
# Ctrl-C ends both.
# Usage: bash pipelines/live-hls.sh BUILD_DIR [PORT] [H3SRC_PROPERTIES]
#   e.g. bash pipelines/live-hls.sh build 8080 "width=256 height=160 lora=raven/ prompt='a fox in snow'"
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=pipelines/env.sh
. "$here/env.sh"
h3_pipeline_env "${1:-build}"
port=${2:-8080}
props=${3:-width=256 height=160}
hls=$(mktemp -d "${TMPDIR:-/tmp}/h3-hls.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -INT "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$hls"
}
trap cleanup EXIT
trap 'exit 0' INT TERM
# shellcheck disable=SC2086
eval gst-launch-1.0 -q h3src name=s sampler=causal $props \
  s.video ! queue ! clocksync ! videoconvert ! x264enc tune=zerolatency speed-preset=veryfast key-int-max=24 ! h264parse ! h.video \
  s.audio ! queue ! clocksync ! audioconvert ! avenc_aac ! aacparse ! h.audio \
  hlssink2 name=h target-duration=1 playlist-length=6 max-files=8 \
  location="\"$hls/segment%05d.ts\"" playlist-location="\"$hls/live.m3u8\"" &
pids+=($!)
/usr/bin/python3 "$here/live_server.py" --port "$port" --hls "$hls" &
pids+=($!)
wait -n "${pids[@]}"
