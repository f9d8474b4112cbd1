#!/bin/bash
# README command 1: the main job. Installs what is missing, builds, and runs
# the product on the embedded default model.
# Usage: scripts/demo.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}

bash scripts/install-deps.sh
if [ ! -f "$BUILD/build.ninja" ]; then
  meson setup "$BUILD"
fi
meson compile -C "$BUILD"

# The clip and its soundtrack: h3src's video pad through x264enc and its audio pad
# through avenc_aac into one MP4, on the tiny default model; checks the two
# streams with ffprobe and prints where the file is.
exec bash pipelines/av.sh "$BUILD" mp4 "$BUILD/h3-demo.mp4"
