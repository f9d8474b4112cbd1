#!/bin/bash
# Fragmented MP4: mp4mux writes a moov first, then a moof+mdat fragment every
# FRAGMENT_MS, so the file is playable while it is still being written (and a
# crash loses only the last fragment). Checks the fragments and that the file
# cut after its first fragment already decodes.
# Usage: bash pipelines/fmp4.sh BUILD_DIR [OUT.mp4]
# Extra element properties: H3_PROPS="num-frames=49 seed=3"; FRAGMENT_MS (default 500)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=pipelines/env.sh
. "$here/env.sh"
h3_pipeline_env "${1:-build}"
out=${2:-$H3_BUILD/h3-fragmented.mp4}
props=${H3_PROPS:-}
frag=${FRAGMENT_MS:-500}

rm -f "$out"
# shellcheck disable=SC2086
eval gst-launch-1.0 -q h3videosrc $props ! videoconvert ! video/x-raw,format=I420 ! \
  x264enc key-int-max=12 ! h264parse ! mp4mux fragment-duration="$frag" ! filesink location="\"$out\""

bash "$here/check-mp4.sh" "$out"

# Top-level boxes, and the byte where the first fragment ends.
read -r boxes first_end < <(python3 - "$out" <<'PY'
import struct, sys
data = open(sys.argv[1], 'rb').read()
pos, names, first_end, seen_moof = 0, [], 0, False
while pos + 8 <= len(data):
    size, kind = struct.unpack('>I4s', data[pos:pos + 8])
    kind = kind.decode('latin-1')
    if size == 1:
        size = struct.unpack('>Q', data[pos + 8:pos + 16])[0]
    if size < 8:
        break
    names.append(kind)
    if kind == 'moof':
        seen_moof = True
    if kind == 'mdat' and seen_moof and not first_end:
        first_end = pos + size
    pos += size
print(','.join(names), first_end)
PY
)
moofs=$(echo "$boxes" | tr ',' '\n' | grep -c '^moof$' || true)
echo "fmp4: top-level boxes: $boxes"
case "$boxes" in ftyp,moov,*moof,mdat,*) ;; *) echo "fmp4: expected ftyp, moov, then moof fragments" >&2; exit 1 ;; esac
[ "$moofs" -ge 2 ] || { echo "fmp4: only $moofs fragment(s); lower FRAGMENT_MS or make the clip longer" >&2; exit 1; }

# What a player sees while the muxer is still writing: the file up to the end
# of its first fragment.
part="$out.part"
head -c "$first_end" "$out" > "$part"
pframes=$(ffprobe -v error -count_frames -select_streams v:0 -show_entries stream=nb_read_frames \
  -of default=noprint_wrappers=1:nokey=1 "$part" || echo 0)
rm -f "$part"
echo "fmp4: $moofs fragments; the first fragment alone decodes to ${pframes} frames"
[ "${pframes:-0}" -gt 0 ] 2>/dev/null || { echo "fmp4: the first fragment is not playable on its own" >&2; exit 1; }
echo "fmp4: wrote $out"
