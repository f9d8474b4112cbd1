#!/bin/bash
# The README's contact sheet: four prompts through the engine on the embedded default model
# (data/default), six frames of each (frames 0, 9, 18, 27, 36, 45 of 48), one row per prompt, at
# full size (256 x 160), into one PNG. Real engine output, nothing retouched but the palette (below).
#
#   bash scripts/contact-sheet.sh [OUT.png]     (default docs/contact-sheet.png; BUILD=build)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
out=${1:-docs/contact-sheet.png}
H3=$BUILD/tools/h3
[ -x "$H3" ] || { echo "contact-sheet: $H3 is missing: meson compile -C $BUILD h3" >&2; exit 1; }
PROMPTS=(
  "a red circle moving right on a black background"
  "a green square moving down on a white background"
  "a yellow triangle moving up on a black background"
  "a purple circle growing on a gray background"
)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/h3-contact.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
inputs=()
for i in "${!PROMPTS[@]}"; do
  "$H3" generate --model data/default --prompt "${PROMPTS[$i]}" --seed 1 --quiet --out "$tmp/$i.y4m"
  ffmpeg -v error -i "$tmp/$i.y4m" -vf "select='not(mod(n\,9))',tile=6x1" -frames:v 1 "$tmp/row$i.png"
  inputs+=(-i "$tmp/row$i.png")
  echo "row $((i + 1)): ${PROMPTS[$i]}"
done
# One 256-colour palette for the sheet, no dithering (a third of the bytes of full RGB; the model's
# flat colours and its backgrounds come through exact to a level or two).
ffmpeg -v error -y "${inputs[@]}" -filter_complex \
  "vstack=inputs=${#PROMPTS[@]},split[a][b];[a]palettegen=max_colors=256[p];[b][p]paletteuse=dither=none" "$out"
echo "contact-sheet: $out ($(du -h "$out" | cut -f1))"
