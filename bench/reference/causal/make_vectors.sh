#!/bin/bash
# Writes the chunk-causal (RAVEN-Streaming) reference vectors: tests/data/causal.
#
#   bench/reference/causal/make_vectors.sh RAVEN [OUT]      (OUT defaults to tests/data/causal)
#   bench/reference/causal/make_vectors.sh RAVEN --check-only
#
# RAVEN is a copy of github YanzuoLu/ComfyUI-MiniMax-H3-RAVEN-Streaming: either a folder holding its
# raven_streaming/ package at commit bcfa381, or a (bare) git directory of the repository, from which
# raven_streaming/ at bcfa381 is archived into a temporary folder. Nothing of it is copied into this tree;
# make_vectors.py checks the files' sha256 against bcfa381's.
#
# Python: the reference virtual environment of scripts/bench-reference.sh ($H3_CACHE/reference-venv: torch
# pinned by scripts/torch-pin.sh, diffusers 0.42.1, transformers 5.24.0, accelerate 1.15.0), made here the same
# way when it is missing. One thread; about 10 s.
set -euo pipefail
cd "$(dirname "$0")/../../.."
. scripts/torch-pin.sh

[ $# -ge 1 ] || { echo "usage: $0 RAVEN [OUT | --check-only]" >&2; exit 2; }
SRC=$1
OUT=tests/data/causal
EXTRA=()
if [ "${2:-}" = "--check-only" ]; then EXTRA=(--check-only); elif [ -n "${2:-}" ]; then OUT=$2; fi
RAVEN_COMMIT=bcfa381

. scripts/reference-venv.sh  # VENV, PY: the same as scripts/bench-reference.sh

tmp=$(mktemp -d "${TMPDIR:-/tmp}/h3-raven.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
if [ -d "$SRC/raven_streaming" ]; then
  RAVEN=$SRC
elif git --git-dir="$SRC" rev-parse -q --verify "$RAVEN_COMMIT^{commit}" >/dev/null 2>&1; then
  git --git-dir="$SRC" archive "$RAVEN_COMMIT" raven_streaming | tar -x -C "$tmp"
  RAVEN=$tmp
else
  echo "make_vectors: $SRC holds neither raven_streaming/ nor a git history with $RAVEN_COMMIT" >&2
  exit 2
fi

export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1
if [ ${#EXTRA[@]} -eq 0 ]; then
  mkdir -p "$OUT"
  rm -f "$OUT"/case_*.safetensors "$OUT"/dense_check.safetensors "$OUT"/dense_lora.safetensors "$OUT"/cases.json
fi
"$PY" bench/reference/causal/make_vectors.py --raven "$RAVEN" --out "$OUT" "${EXTRA[@]}"
[ ${#EXTRA[@]} -gt 0 ] || chmod -R a+rX "$OUT"
