#!/bin/bash
# RTP over loopback with sound: h3src -> H.264 -> RTP (port PORT) and -> Opus -> RTP (PORT + 2),
# and one receiver with both depayloaders and decoders that stops by itself once it has decoded
# every frame and most of the soundtrack (identity eos-after on each branch). Both run under a
# timeout. Checked: the sender pushed exactly FRAMES frames, and the receiver ended by itself:
# it decoded FRAMES frames and at least 80 % of the soundtrack's 20 ms Opus frames (the last
# may still be in flight when the sender ends).
# Usage: bash pipelines/rtp-av.sh BUILD_DIR [FRAMES]
# PORT (default 5010); H3_PROPS for more element properties; TIMEOUT_S (default 300)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=pipelines/env.sh
. "$here/env.sh"
h3_pipeline_env "${1:-build}"
frames=${2:-25}
port=${PORT:-5010}
aport=$((port + 2))
limit=${TIMEOUT_S:-300}
props=${H3_PROPS:-}
log=$(mktemp)
sent_log=$(mktemp)
trap 'rm -f "$log" "$sent_log"' EXIT

# The soundtrack: 800 * round(frames * 5 / 3) samples at 32 kHz, in 20 ms Opus frames.
opus_frames=$(( (800 * ((frames * 5 + 1) / 3) + 639) / 640 ))
want_audio=$(( opus_frames * 8 / 10 ))
vcaps="application/x-rtp,media=video,clock-rate=90000,encoding-name=H264,payload=96"
acaps="application/x-rtp,media=audio,clock-rate=48000,encoding-name=OPUS,payload=97"
timeout "$limit" gst-launch-1.0 -v \
  udpsrc address=127.0.0.1 port="$port" caps="$vcaps" ! rtpjitterbuffer latency=200 ! rtph264depay ! \
    h264parse ! avdec_h264 ! identity name=vcount eos-after="$frames" ! fakesink sync=false \
  udpsrc address=127.0.0.1 port="$aport" caps="$acaps" ! rtpjitterbuffer latency=200 ! rtpopusdepay ! \
    opusdec ! identity name=acount eos-after="$want_audio" ! fakesink sync=false > "$log" 2>&1 &
receiver=$!
sleep 1

set +e
# shellcheck disable=SC2086
eval timeout "$limit" gst-launch-1.0 -v h3src name=s num-frames="$frames" $props \
  s.video ! queue ! identity name=sent silent=false ! videoconvert ! video/x-raw,format=I420 ! \
    x264enc tune=zerolatency key-int-max=10 ! rtph264pay config-interval=1 pt=96 ! \
    udpsink host=127.0.0.1 port="$port" \
  s.audio ! queue ! audioconvert ! audioresample ! opusenc ! rtpopuspay pt=97 ! \
    udpsink host=127.0.0.1 port="$aport" > "$sent_log" 2>&1
sender_rc=$?
[ "$sender_rc" -eq 0 ] || kill "$receiver" 2>/dev/null
wait "$receiver"
receiver_rc=$?
set -e
sent=$(grep -c 'sent: last-message = chain' "$sent_log" || true)
# The receiver ends by itself only once both branches' identity reached eos-after: every frame
# and want_audio Opus frames were decoded (identity's printed reports are not counted: at the
# audio's 50 buffers a second gst-launch does not print every one).
echo "rtp-av: sender rc $sender_rc, receiver rc $receiver_rc; sent $sent of $frames frames"
if [ "$sender_rc" -ne 0 ]; then
  echo "rtp-av: the sender failed (rc $sender_rc)" >&2
  tail -20 "$sent_log" >&2
  exit 1
fi
if [ "$receiver_rc" -ne 0 ]; then
  echo "rtp-av: the receiver did not decode $frames frames and $want_audio Opus frames (rc $receiver_rc;" \
    "124 = timed out)" >&2
  tail -20 "$log" >&2
  exit 1
fi
if [ "$sent" -ne "$frames" ]; then
  echo "rtp-av: $frames frames asked for, $sent sent" >&2
  exit 1
fi
echo "rtp-av: the receiver decoded all $frames frames and at least $want_audio of $opus_frames Opus frames"
