#!/bin/bash
# RTP over loopback: h3videosrc (live) -> H.264 -> RTP -> udpsink, and a
# receiver udpsrc -> depay -> decode that stops by itself after the expected
# number of frames. Both run under a timeout. Checked: the sender pushed exactly
# FRAMES frames, the receiver decoded exactly as many, at the element's size.
# Usage: bash pipelines/rtp.sh BUILD_DIR [FRAMES]
# PORT (default 5004); H3_PROPS for more element properties; TIMEOUT_S (default 120);
# LIVE (default true): is-live of the sender
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=pipelines/env.sh
. "$here/env.sh"
h3_pipeline_env "${1:-build}"
frames=${2:-25}
port=${PORT:-5004}
limit=${TIMEOUT_S:-120}
props=${H3_PROPS:-}
live=${LIVE:-true}
log=$(mktemp)
sent_log=$(mktemp)
trap 'rm -f "$log" "$sent_log"' EXIT

caps="application/x-rtp,media=video,clock-rate=90000,encoding-name=H264,payload=96"
# The receiver first; identity counts decoded frames and ends the stream after the last one.
timeout "$limit" gst-launch-1.0 -v udpsrc address=127.0.0.1 port="$port" caps="$caps" ! \
  rtpjitterbuffer latency=200 ! rtph264depay ! h264parse ! avdec_h264 ! \
  identity name=count eos-after="$frames" silent=false ! fakesink sync=false > "$log" 2>&1 &
receiver=$!
sleep 1

set +e
# identity (verbose) reports every raw frame the element pushed, and its caps.
# shellcheck disable=SC2086
eval timeout "$limit" gst-launch-1.0 -v h3videosrc is-live="$live" num-frames="$frames" $props ! \
  identity name=sent silent=false ! \
  videoconvert ! video/x-raw,format=I420 ! x264enc tune=zerolatency key-int-max=10 ! \
  rtph264pay config-interval=1 pt=96 ! udpsink host=127.0.0.1 port="$port" > "$sent_log" 2>&1
sender_rc=$?
# A failed sender sends nothing more: do not wait for the receiver's timeout.
[ "$sender_rc" -eq 0 ] || kill "$receiver" 2>/dev/null
wait "$receiver"
receiver_rc=$?
set -e
sent=$(grep -c 'sent: last-message = chain' "$sent_log" || true)
# identity reports each buffer but the one it ends the stream on.
got=$(grep -c 'count: last-message = chain' "$log" || true)
got=$((got + (receiver_rc == 0)))
echo "rtp: sender rc $sender_rc, receiver rc $receiver_rc; the sender pushed $sent and the receiver decoded $got of $frames frames"
if [ "$sender_rc" -ne 0 ]; then
  echo "rtp: the sender failed (rc $sender_rc)" >&2
  tail -20 "$sent_log" >&2
  exit 1
fi
if [ "$receiver_rc" -ne 0 ]; then
  echo "rtp: the receiver did not get all $frames frames (rc $receiver_rc; 124 = timed out)" >&2
  tail -20 "$log" >&2
  exit 1
fi
if [ "$sent" -ne "$frames" ] || [ "$got" -ne "$frames" ]; then
  echo "rtp: $frames frames asked for, $sent sent, $got received" >&2
  exit 1
fi
# The size the receiver decoded is the size the element sent (the caps each identity saw).
size_of() {
  sed -n "s/.*GstIdentity:$1\.GstPad:sink: caps = .*width=(int)\([0-9]*\), height=(int)\([0-9]*\).*/\1x\2/p" "$2" | tail -1
}
sent_size=$(size_of sent "$sent_log")
got_size=$(size_of count "$log")
echo "rtp: sent ${sent_size:-?}, received ${got_size:-?}"
if [ -z "$sent_size" ] || [ "$sent_size" != "$got_size" ]; then
  echo "rtp: the receiver decoded ${got_size:-no} frames of size ${sent_size:-unknown} sent" >&2
  exit 1
fi
if [ -n "${EXPECT_SIZE:-}" ] && [ "$got_size" != "$EXPECT_SIZE" ]; then
  echo "rtp: received $got_size, expected $EXPECT_SIZE" >&2
  exit 1
fi
