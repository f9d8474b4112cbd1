#!/bin/bash
# Trains the tiny model of train/tiny/README.md (the embedded default, data/default) and writes it to
# BUILD/trained-tiny, its chunk-causal adapter (causal-lora/) included.
#
#   bash train/tiny/run.sh [--force] [--out DIR] [--seed S] [--smoke] [--vae-from DIR]
#       --vae-from data/default: the video decoder from a finished model instead of its stage (5 min)
#       --endless-clips: the DiT's clips at a random phase of their endless motion (README, run 8; not
#       the embedded default's recipe)
#   bash train/tiny/run.sh --causal-only [--base DIR] [--out DIR] [--force]
#       only the adapter's stage, from a finished model (default: the committed data/default): OUT is
#       that model with causal-lora/ made again and the manifest updated (its 300 steps: 10 min on
#       a busy 2-core machine)
#
# Uses the reference virtual environment (scripts/reference-venv.sh: torch at the project's LibTorch
# version, diffusers and transformers at pinned versions, on the CPU) and the built `h3` (for the
# frozen text encoder's prompt rows; built here if missing). Refuses to replace an existing model
# folder unless --force is given. Stage results are cached in OUT.work, so an interrupted run resumes.
# Not part of the build or of CI: about an hour on a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/torch-pin.sh
. scripts/reference-venv.sh  # VENV, PY
BUILD=${BUILD:-build}
out=$BUILD/trained-tiny
args=()
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$2; shift 2 ;;
    --seed) args+=(--seed "$2"); shift 2 ;;
    --base) args+=(--base "$(realpath "$2")"); shift 2 ;;
    --vae-from) args+=(--vae-from "$(realpath "$2")"); shift 2 ;;
    --force|--smoke|--causal-only|--endless-clips) args+=("$1"); shift ;;
    *) echo "run.sh: unknown option '$1' (--force, --out DIR, --seed S, --smoke, --causal-only, --base DIR)" >&2
       exit 2 ;;
  esac
done
if [ ! -x "$BUILD/tools/h3" ]; then
  [ -f "$BUILD/build.ninja" ] || meson setup "$BUILD" >&2
  meson compile -C "$BUILD" h3 >&2
fi
out=$(realpath -m "$out")
h3=$(realpath "$BUILD/tools/h3")
start=$(date +%s)
(cd train/tiny && OMP_NUM_THREADS=2 MKL_NUM_THREADS=2 "$PY" recipe.py --h3 "$h3" --out "$out" "${args[@]}")
echo "train/tiny: $out written in $(( $(date +%s) - start )) s"
