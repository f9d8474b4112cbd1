#!/bin/bash
# The engine against diffusers' MiniMax-H3 on the same random weights, inputs, LibTorch version and
# thread count: VAE decode (tiled as released) and DiT forward. Prints, per comparison,
#   ratio <what> threads=<n> reference=<s> ours=<s> <reference/ours>
# after checking that the outputs agree (1e-4). A benchmark, not a test (docs/performance.md).
#
#   scripts/bench-reference.sh [vae-decode] [dit-forward]    (default: both)
#   THREADS="1 2" ROUNDS=2 BUILD=build (environment)
#
# First run: makes a Python virtual environment in $H3_CACHE/reference-venv (scripts/reference-venv.sh:
# torch pinned to the project's LibTorch version, diffusers and its helpers; about 700 MB from
# PyPI) and writes the weights and inputs once to $H3_CACHE/reference-bench
# (bench/reference/make_inputs.py). h3 must be built (meson compile -C $BUILD h3).
#
# Each comparison alternates the two sides, ROUNDS times each, one process per run: the model is
# loaded and warmed up (untimed), then one run is timed; the figure of each side is its fastest run,
# so that both see the same load on a shared machine. The load average is printed with the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/torch-pin.sh

DATA=$H3_CACHE/reference-bench
BUILD=${BUILD:-build}
H3=$BUILD/core/h3
THREADS=${THREADS:-1 2}
ROUNDS=${ROUNDS:-2}
WHAT=("$@")
[ ${#WHAT[@]} -gt 0 ] || WHAT=(vae-decode dit-forward)
. scripts/reference-venv.sh  # VENV, PY (made on the first run)
if [ ! -f "$DATA/.complete" ]; then
  echo "bench-reference: writing the random weights and inputs to $DATA" >&2
  (cd bench/reference && "$PY" make_inputs.py "$DATA")
fi
[ -x "$H3" ] || { echo "bench-reference: $H3 is missing: meson compile -C $BUILD h3" >&2; exit 1; }

out=$(mktemp -d "${TMPDIR:-/tmp}/h3-bench-reference.XXXXXX")
trap 'rm -rf "$out"' EXIT

# fastest "seconds S" line of a run's output
fastest() { awk '/^seconds /{ if (best == "" || $2 < best) best = $2 } END { print best }' "$1"; }

echo "bench-reference: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) at $(date -u +%H:%M:%S) UTC"
status=0
for threads in $THREADS; do
  export OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads
  for what in "${WHAT[@]}"; do
    case $what in
      vae-decode)
        ref_cmd=("$PY" bench/reference/run_reference.py vae "$DATA")
        our_cmd=("$H3" bench vae --vae "$DATA/vae" --latents "$DATA/vae_latents.safetensors" --repeat 1) ;;
      dit-forward)
        ref_cmd=("$PY" bench/reference/run_reference.py dit "$DATA")
        our_cmd=("$H3" bench dit --transformer "$DATA/transformer" --inputs "$DATA/dit_inputs.safetensors"
                 --warmup "$DATA/dit_warmup.safetensors") ;;
      *) echo "bench-reference: unknown comparison '$what' (vae-decode, dit-forward)" >&2; exit 2 ;;
    esac
    ref=() ours=()
    for round in $(seq "$ROUNDS"); do
      "${ref_cmd[@]}" --threads "$threads" --out "$out/ref.safetensors" > "$out/ref.log"
      ref+=("$(fastest "$out/ref.log")")
      "${our_cmd[@]}" --threads "$threads" --out "$out/ours.safetensors" > "$out/ours.log"
      ours+=("$(fastest "$out/ours.log")")
    done
    grep -v '^seconds ' "$out/ours.log" | sed "s/^/  ours: /" || true
    echo "  $what threads=$threads runs: reference ${ref[*]} s, ours ${ours[*]} s (alternating)"
    "$PY" bench/reference/compare.py "$out/ref.safetensors" "$out/ours.safetensors" 1e-4 | sed 's/^/  /' ||
      { echo "  $what threads=$threads: OUTPUTS DISAGREE" >&2; status=1; }
    best_ref=$(printf '%s\n' "${ref[@]}" | sort -g | head -1)
    best_ours=$(printf '%s\n' "${ours[@]}" | sort -g | head -1)
    echo "ratio $what threads=$threads reference=$best_ref ours=$best_ours $(awk -v r="$best_ref" -v o="$best_ours" 'BEGIN { printf "%.2f", r / o }')"
  done
done
echo "bench-reference: load average $(cut -d' ' -f1-3 /proc/loadavg) at $(date -u +%H:%M:%S) UTC"
exit $status
