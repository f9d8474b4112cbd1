#!/bin/bash
# Installs the Debian 12 packages gst-h3 needs, and only those that are missing.
# Idempotent: a second run installs nothing and takes well under a second.
set -euo pipefail

PKGS=(
  meson ninja-build pkg-config g++ python3
  libtorch-dev libgloo-dev libopenblas0-pthread nlohmann-json3-dev
  libicu-dev libpcre2-dev
  libgtest-dev libgmock-dev
  libgstreamer1.0-dev libgstreamer-plugins-base1.0-dev
  gstreamer1.0-tools gstreamer1.0-plugins-base gstreamer1.0-plugins-good
  gstreamer1.0-plugins-bad gstreamer1.0-plugins-ugly gstreamer1.0-libav
  gstreamer1.0-plugins-base-apps ffmpeg
)
# libtorch-dev's default BLAS is the reference one (28x slower matmul);
# libopenblas0-pthread takes over through update-alternatives.
# libgloo-dev carries the gloo/ headers c10d's ProcessGroupGloo.hpp includes.
# libicu-dev (NFC) and libpcre2-dev (\p{L}/\p{N} in the pre-tokenizer): the H3 tokenizer.

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "install-deps: installing ${missing[*]}" >&2
SUDO=()
if [ "$(id -u)" -ne 0 ]; then SUDO=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
