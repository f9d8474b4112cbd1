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

# h3videosrc ! videoconvert ! x264enc ! mp4mux ! filesink on the tiny default
# model; checks the file with ffprobe and prints where it is.
exec bash pipelines/mp4.sh "$BUILD"
