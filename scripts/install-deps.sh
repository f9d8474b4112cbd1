#!/bin/bash
# Installs what gst-h3 needs, and only what is missing: Debian 12 packages, then the pinned LibTorch
# (the PyPI torch wheel, unpacked into ~/.cache/gst-h3 by scripts/install-torch.sh).
# Idempotent: a second run installs nothing and takes well under a second.
# Usage: scripts/install-deps.sh [--packages-only]   (--packages-only: not LibTorch)
set -euo pipefail

PKGS=(
  meson ninja-build pkg-config g++ python3 python3-pip
  libgloo-dev nlohmann-json3-dev
  libicu-dev libpcre2-dev
  libssl-dev
  libgtest-dev libgmock-dev
  libgstreamer1.0-dev libgstreamer-plugins-base1.0-dev
  gstreamer1.0-tools gstreamer1.0-plugins-base gstreamer1.0-plugins-good
  gstreamer1.0-plugins-bad gstreamer1.0-plugins-ugly gstreamer1.0-libav
  gstreamer1.0-plugins-base-apps ffmpeg
  python3-gi gir1.2-gstreamer-1.0
  ccache
  chromium chromium-driver python3-selenium
  libsoup-3.0-dev libgstreamer-plugins-bad1.0-dev gstreamer1.0-nice
  libimage-exiftool-perl
)
# libgloo-dev carries the gloo/ headers c10d's ProcessGroupGloo.hpp includes (the wheel has none).
# python3-pip only downloads the wheels (nothing is installed into any Python).
# libssl-dev: libcrypto (HMAC-SHA256, AES-GCM) for the token of a process world (core/admission/door.h).
# libicu-dev (NFC) and libpcre2-dev (\p{L}/\p{N} in the pre-tokenizer): the H3 tokenizer.
# python3-gi, gir1.2-gstreamer-1.0: the PyGObject application pipelines/app/h3_prompt_app.py (and its
# test, gst_prompt_app), on Debian's /usr/bin/python3.
# chromium, chromium-driver, python3-selenium: the live page's test drives a headless browser
# (tests/web/live_page_test.py; pipelines/live-web.sh).
# libsoup-3.0-dev, libgstreamer-plugins-bad1.0-dev (webrtcbin's library, the SDP and RTP helpers
# come with base), gstreamer1.0-nice (webrtcbin's ICE): the interactive live server
# (pipelines/live-webrtc.sh); the build skips it where they are missing.
# libimage-exiftool-perl: the marking test reads the XMP h3mark writes back with exiftool
# (tests/gst/element_marking_test.cpp).
# ccache: meson compiles through it when it is there, so a second build folder or a fresh clone
# (CI) reuses what an earlier build compiled (docs/building.md, "Build times").

missing=()
for p in "${PKGS[@]}"; do
  # A python3 that already has pip (pyenv, a venv) needs no Debian pip.
  if [ "$p" = python3-pip ] && python3 -m pip --version >/dev/null 2>&1; then continue; fi
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}" >&2
  SUDO=()
  if [ "$(id -u)" -ne 0 ]; then SUDO=(sudo); fi
  export DEBIAN_FRONTEND=noninteractive
  "${SUDO[@]}" apt-get update -qq
  "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
[ "${1:-}" = --packages-only ] && exit 0
bash "$(dirname "$0")/install-torch.sh"
