#!/bin/bash
# A clip with its soundtrack from h3src, muxed with both streams, and checked with ffprobe:
#   mp4:  H.264 + AAC in MP4 (the command of docs/element.md, as written there)
#   webm: VP8 + Opus in WebM (Matroska); Opus takes 48 kHz, so the audio is resampled
# Checked: two streams of the expected codecs, and their durations within one frame (1/24 s).
# Usage: bash pipelines/av.sh BUILD_DIR mp4|webm [OUT]
# Extra element properties: H3_PROPS="num-frames=73 seed=7"
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=pipelines/env.sh
. "$here/env.sh"
h3_pipeline_env "${1:-build}"
kind=${2:-mp4}
props=${H3_PROPS:-}

case "$kind" in
  mp4)
    out=${3:-$H3_BUILD/h3-demo-av.mp4}
    want_video=h264 want_audio=aac
    rm -f "$out"
    # shellcheck disable=SC2086
    eval gst-launch-1.0 -q h3src name=s $props s.video ! queue ! videoconvert ! x264enc ! mux. \
      s.audio ! queue ! audioconvert ! avenc_aac ! mux. mp4mux name=mux ! filesink location="\"$out\""
    ;;
  webm)
    out=${3:-$H3_BUILD/h3-demo-av.webm}
    want_video=vp8 want_audio=opus
    rm -f "$out"
    # shellcheck disable=SC2086
    eval gst-launch-1.0 -q h3src name=s $props s.video ! queue ! videoconvert ! vp8enc deadline=1 ! mux. \
      s.audio ! queue ! audioconvert ! audioresample ! opusenc ! mux. webmmux name=mux ! \
      filesink location="\"$out\""
    ;;
  *) echo "av: unknown kind $kind (mp4 or webm)" >&2; exit 2 ;;
esac

[ -s "$out" ] || { echo "av: $out is missing or empty" >&2; exit 1; }
# Per stream: codec and duration (the container's stream duration, else the last packet's end).
streams=$(ffprobe -v error -show_entries stream=index,codec_type,codec_name,duration -of csv=p=0 "$out")
echo "av: $out:"
echo "$streams" | sed 's/^/  /'
vcodec=$(echo "$streams" | awk -F, '$3=="video"{print $2}')
acodec=$(echo "$streams" | awk -F, '$3=="audio"{print $2}')
n=$(echo "$streams" | grep -c .)
[ "$n" -eq 2 ] || { echo "av: $n streams, expected 2" >&2; exit 1; }
[ "$vcodec" = "$want_video" ] || { echo "av: video codec ${vcodec:-none}, expected $want_video" >&2; exit 1; }
[ "$acodec" = "$want_audio" ] || { echo "av: audio codec ${acodec:-none}, expected $want_audio" >&2; exit 1; }
# Matroska keeps no per-stream duration: take each stream's last packet end instead.
stream_end() {
  ffprobe -v error -select_streams "$1" -show_entries packet=pts_time,duration_time -of csv=p=0 "$out" |
    awk -F, '$1!="N/A"{e=$1+($2=="N/A"?0:$2); if(e>m)m=e} END{printf "%.6f", m}'
}
vdur=$(stream_end v:0)
adur=$(stream_end a:0)
echo "av: video ends at $vdur s, audio at $adur s"
python3 -c "import sys; sys.exit(0 if abs($vdur - $adur) <= 1/24 + 1e-6 else 1)" ||
  { echo "av: the streams' durations differ by more than one frame (1/24 s)" >&2; exit 1; }
