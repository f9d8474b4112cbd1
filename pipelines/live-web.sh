#!/bin/bash
# An endless causal h3src (docs/causal.md "Live") watched in a browser: serves a page at
# http://127.0.0.1:PORT/ whose <video> plays the stream as live WebM (VP8 + Opus). Every viewer
# gets its own generation, which stops when the viewer leaves. Ctrl-C ends the server.
# Usage: bash pipelines/live-web.sh BUILD_DIR [PORT] [H3SRC_PROPERTIES]
#   e.g. bash pipelines/live-web.sh build 8080 "width=256 height=160 lora=raven/ prompt='a fox in snow'"
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=pipelines/env.sh
. "$here/env.sh"
h3_pipeline_env "${1:-build}"
exec /usr/bin/python3 "$here/live_server.py" --port "${2:-8080}" --props "${3:-width=256 height=160}"
