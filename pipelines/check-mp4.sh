#!/bin/bash
# Checks an MP4 written by the pipelines: container, codec, profile, pixel
# format, size, frame count and duration, with ffprobe (decoding every frame).
# Usage: bash pipelines/check-mp4.sh FILE [EXPECTED_FRAMES [WIDTH HEIGHT]]
# Prints one summary line; exits non-zero when the file is not a playable H.264 MP4
# or does not match what was expected.
set -euo pipefail
f=$1
want_frames=${2:-}
want_w=${3:-}
want_h=${4:-}
[ -s "$f" ] || { echo "check-mp4: $f is missing or empty" >&2; exit 1; }
info=$(ffprobe -v error -count_frames -select_streams v:0 \
  -show_entries format=format_name,duration:stream=codec_name,profile,pix_fmt,width,height,r_frame_rate,nb_read_frames \
  -of default=noprint_wrappers=1 "$f") || { echo "check-mp4: ffprobe cannot read $f" >&2; exit 1; }
get() { echo "$info" | sed -n "s/^$1=//p" | head -1; }
fmt=$(get format_name); codec=$(get codec_name); profile=$(get profile); pix=$(get pix_fmt)
w=$(get width); h=$(get height); rate=$(get r_frame_rate); frames=$(get nb_read_frames); dur=$(get duration)
echo "check-mp4: $f: container $fmt, $codec ($profile, $pix) ${w}x${h} at $rate, $frames frames, ${dur} s"
fail=0
case "$fmt" in *mp4*) ;; *) echo "check-mp4: not an MP4 container" >&2; fail=1 ;; esac
[ "$codec" = h264 ] || { echo "check-mp4: codec $codec, expected h264" >&2; fail=1; }
[ "$pix" = yuv420p ] || { echo "check-mp4: pixel format $pix, expected yuv420p" >&2; fail=1; }
[ "${frames:-0}" -gt 0 ] 2>/dev/null || { echo "check-mp4: no decodable frame" >&2; fail=1; }
if [ -n "$want_frames" ] && [ "$frames" != "$want_frames" ]; then
  echo "check-mp4: $frames frames, expected $want_frames" >&2; fail=1
fi
if [ -n "$want_w" ] && { [ "$w" != "$want_w" ] || [ "$h" != "$want_h" ]; }; then
  echo "check-mp4: ${w}x${h}, expected ${want_w}x${want_h}" >&2; fail=1
fi
if command -v gst-discoverer-1.0 >/dev/null; then
  gst-discoverer-1.0 "$f" >/dev/null 2>&1 || { echo "check-mp4: gst-discoverer-1.0 cannot read $f" >&2; fail=1; }
fi
exit $fail
