#!/bin/bash
# The engine against diffusers' MiniMax-H3 on the same random weights, inputs, LibTorch version and
# thread count: VAE decode (tiled as released) and DiT forward. Prints, per comparison,
#   ratio <what> threads=<n> reference=<s> ours=<s> <reference/ours> cpu="<model>" features=<list>
# after checking that the outputs agree (1e-4). A benchmark, not a test (docs/performance.md).
#
#   scripts/bench-reference.sh [vae-decode] [dit-forward] [e2e]    (default: the first two)
#   THREADS="1 2" ROUNDS=2 BUILD=build (environment)
#
# e2e, the end-to-end race: a prompt to an MP4 (H.264 + AAC) on both sides, one cold process per run,
# nothing warmed up. Ours: gst-launch-1.0 with h3src's video pad through x264enc and its audio pad
# through avenc_aac into one mp4mux ! filesink (the demo's pipeline, pipelines/av.sh); the reference:
# diffusers' modular pipeline and its encode_video (bench/reference/e2e_reference.py). Both load the
# medium random model bench/reference/make_e2e_model.py writes once to $H3_CACHE/reference-bench-e2e.
# Prints, with the reference's runs shared by both samplers of ours,
#   ratio e2e-first-frame[-causal] threads=<n> reference=<s> ours=<s> <reference/ours> cpu="<model>" features=<list>
#   ratio e2e-complete[-causal] threads=<n> reference=<s> ours=<s> <reference/ours> cpu="<model>" features=<list>
# first frame: ours, when the first encoded video buffer reaches the muxer; the reference, its whole
# file (it has none before). complete: the process's wall time (the file closed). Both sides then go
# through ffprobe (H.264 and AAC present, the frame count, the durations). The request (environment):
#   E2E_PROMPT, E2E_FRAMES=124 (the fewest diffusers' pipeline takes: 5 s at 24 fps, 17 n + 5),
#   E2E_WIDTH=320 E2E_HEIGHT=192, E2E_STEPS=21 (grid points: 20 transformer evaluations on both sides),
#   E2E_SEED=7, E2E_CAUSAL_STEPS=4 (sampler=causal: forwards per 17-frame chunk, no LoRA).
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
E2E_DATA=$H3_CACHE/reference-bench-e2e
BUILD=${BUILD:-build}
H3=$BUILD/tools/h3
THREADS=${THREADS:-1 2}
ROUNDS=${ROUNDS:-2}
WHAT=("$@")
[ ${#WHAT[@]} -gt 0 ] || WHAT=(vae-decode dit-forward)
. scripts/reference-venv.sh  # VENV, PY (made on the first run)
wants() { local w; for w in "${WHAT[@]}"; do [ "$w" = "$1" ] && return 0; done; return 1; }
if [ ! -f "$DATA/.complete" ] && { wants vae-decode || wants dit-forward; }; then
  echo "bench-reference: writing the random weights and inputs to $DATA" >&2
  (cd bench/reference && "$PY" make_inputs.py "$DATA")
fi
[ -x "$H3" ] || { echo "bench-reference: $H3 is missing: meson compile -C $BUILD h3" >&2; exit 1; }
if wants e2e; then
  if [ ! -f "$E2E_DATA/.complete" ]; then
    echo "bench-reference: writing the end-to-end model to $E2E_DATA" >&2
    (cd bench/reference && "$PY" make_e2e_model.py "$E2E_DATA")
  fi
  # shellcheck source=pipelines/env.sh
  . pipelines/env.sh
  h3_pipeline_env "$BUILD"  # the plugin of this build, with a registry of its own
  gst-inspect-1.0 h3src > /dev/null || { echo "bench-reference: no h3src in $BUILD/gst" >&2; exit 1; }
fi

out=$(mktemp -d "${TMPDIR:-/tmp}/h3-bench-reference.XXXXXX")
trap 'rm -rf "$out"' EXIT

# fastest "seconds S" line of a run's output
fastest() { awk '/^seconds /{ if (best == "" || $2 < best) best = $2 } END { print best }' "$1"; }
smallest() { printf '%s\n' "$@" | sort -g | head -1; }
# The CPU beside every ratio, so that figures from different machines are never compared blindly:
# its model and the features that decide the engine's kernels (docs/performance.md, "The CPU at
# hand"; `h3 bench cpu` prints its peak and the GEMM rates on it).
cpu_features() {
  local flags x out=""
  flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
  for x in avx2 fma avx512f avx512bw avx512_vnni avx512_bf16 avx512_fp16 amx_bf16; do
    [[ $flags == *" $x "* ]] && out+="${out:+,}$x"
  done
  echo "${out:-none}"
}
CPU_TAG="cpu=\"$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)\" features=$(cpu_features)"
ratio_line() {  # NAME THREADS REFERENCE OURS
  echo "ratio $1 threads=$2 reference=$3 ours=$4 $(awk -v r="$3" -v o="$4" 'BEGIN { printf "%.2f", r / o }') $CPU_TAG"
}

E2E_PROMPT=${E2E_PROMPT:-a red circle moving right on a black background}
E2E_FRAMES=${E2E_FRAMES:-124}
E2E_WIDTH=${E2E_WIDTH:-320}
E2E_HEIGHT=${E2E_HEIGHT:-192}
E2E_STEPS=${E2E_STEPS:-21}
E2E_SEED=${E2E_SEED:-7}
E2E_CAUSAL_STEPS=${E2E_CAUSAL_STEPS:-4}

# Reads gst-launch-1.0 -v's output and prints, once each, the seconds since $1 (an $EPOCHREALTIME)
# at which identity `raw` (h3src's video pad) and `enc` (x264enc's output, at the muxer) passed their
# first buffer (their events are reported too: only `chain` lines are buffers): `first raw S`,
# `first encoded S`.
first_buffers() {
  local t0=$1 line raw="" enc=""
  while IFS= read -r line; do
    if [ -z "$raw" ] && [[ $line == *"GstIdentity:raw: last-message = chain"* ]]; then
      raw=$EPOCHREALTIME; echo "first raw $(awk -v a="$raw" -v b="$t0" 'BEGIN { printf "%.3f", a - b }')"
    elif [ -z "$enc" ] && [[ $line == *"GstIdentity:enc: last-message = chain"* ]]; then
      enc=$EPOCHREALTIME; echo "first encoded $(awk -v a="$enc" -v b="$t0" 'BEGIN { printf "%.3f", a - b }')"
    fi
  done
}

# One run of ours: SAMPLER STEPS THREADS OUT.mp4 LOG. The log gets `first raw S`, `first encoded S`
# and `seconds S` (the process's wall time); gst-launch's own stderr goes to LOG.err. The engine's
# one rank takes its intra-op threads from OMP_NUM_THREADS.
e2e_ours() {
  local t0 t1
  t0=$EPOCHREALTIME
  OMP_NUM_THREADS=$3 MKL_NUM_THREADS=$3 \
    gst-launch-1.0 -v h3src name=s model="$E2E_DATA" prompt="$E2E_PROMPT" num-frames="$E2E_FRAMES" \
    width="$E2E_WIDTH" height="$E2E_HEIGHT" steps="$2" seed="$E2E_SEED" sampler="$1" \
    s.video ! identity name=raw silent=false ! queue ! videoconvert ! x264enc ! \
    identity name=enc silent=false ! mux. \
    s.audio ! queue ! audioconvert ! avenc_aac ! mux. \
    mp4mux name=mux ! filesink location="$4" 2> "$5.err" | first_buffers "$t0" > "$5" ||
    { echo "bench-reference: e2e ours ($1) failed:" >&2; tail -5 "$5.err" >&2; return 1; }
  t1=$EPOCHREALTIME
  echo "seconds $(awk -v a="$t1" -v b="$t0" 'BEGIN { printf "%.3f", a - b }')" >> "$5"
}

# One run of the reference: THREADS OUT.mp4 LOG (`phase NAME S` lines, generate-steps: its transformer
# evaluations alone, then `seconds S`).
e2e_reference() {
  local t0 t1
  t0=$EPOCHREALTIME
  "$PY" bench/reference/e2e_reference.py "$E2E_DATA" --prompt "$E2E_PROMPT" --frames "$E2E_FRAMES" \
    --width "$E2E_WIDTH" --height "$E2E_HEIGHT" --steps "$E2E_STEPS" --seed "$E2E_SEED" \
    --threads "$1" --out "$2" > "$3" 2> "$3.err" ||
    { echo "bench-reference: e2e reference failed:" >&2; tail -5 "$3.err" >&2; return 1; }
  t1=$EPOCHREALTIME
  echo "seconds $(awk -v a="$t1" -v b="$t0" 'BEGIN { printf "%.3f", a - b }')" >> "$3"
}

# ffprobe of one side's file: NAME FILE. Prints the streams, frame count and durations; fails without
# an H.264 stream of E2E_FRAMES frames and an AAC stream.
e2e_check() {
  local v a
  v=$(ffprobe -v error -count_frames -select_streams v:0 \
    -show_entries stream=codec_name,nb_read_frames,duration -of csv=p=0 "$2") || v=""
  a=$(ffprobe -v error -select_streams a:0 \
    -show_entries stream=codec_name,sample_rate,channels,duration -of csv=p=0 "$2") || a=""
  echo "  e2e $1: video ${v:-none} (codec,duration s,frames), audio ${a:-none} (codec,rate,channels,duration s)"
  [[ $v == h264,*,"$E2E_FRAMES" && $a == aac,* ]] ||
    { echo "  e2e $1: expected H.264 with $E2E_FRAMES frames and AAC" >&2; return 1; }
}

# The race at THREADS threads: ROUNDS rounds of reference, ours (euler), ours (causal), alternating.
run_e2e() {
  local threads=$1 ref=() eu_first=() eu_all=() ca_first=() ca_all=()
  for _ in $(seq "$ROUNDS"); do
    e2e_reference "$threads" "$out/ref.mp4" "$out/ref.log"
    ref+=("$(fastest "$out/ref.log")")
    e2e_ours euler "$E2E_STEPS" "$threads" "$out/ours.mp4" "$out/ours.log"
    eu_first+=("$(awk '/^first encoded /{ print $3 }' "$out/ours.log")")
    eu_all+=("$(fastest "$out/ours.log")")
    e2e_ours causal "$E2E_CAUSAL_STEPS" "$threads" "$out/causal.mp4" "$out/causal.log"
    ca_first+=("$(awk '/^first encoded /{ print $3 }' "$out/causal.log")")
    ca_all+=("$(fastest "$out/causal.log")")
  done
  sed "s/^/  reference: /" "$out/ref.log"
  grep -v '^seconds ' "$out/ours.log" | sed "s/^/  ours: /" || true
  grep -v '^seconds ' "$out/causal.log" | sed "s/^/  ours causal: /" || true
  echo "  e2e threads=$threads runs: reference ${ref[*]} s; ours first frame ${eu_first[*]} s," \
    "complete ${eu_all[*]} s; causal first frame ${ca_first[*]} s, complete ${ca_all[*]} s (alternating)"
  e2e_check reference "$out/ref.mp4" || status=1
  e2e_check ours "$out/ours.mp4" || status=1
  e2e_check "ours causal" "$out/causal.mp4" || status=1
  local best_ref
  best_ref=$(smallest "${ref[@]}")
  ratio_line e2e-first-frame "$threads" "$best_ref" "$(smallest "${eu_first[@]}")"
  ratio_line e2e-complete "$threads" "$best_ref" "$(smallest "${eu_all[@]}")"
  ratio_line e2e-first-frame-causal "$threads" "$best_ref" "$(smallest "${ca_first[@]}")"
  ratio_line e2e-complete-causal "$threads" "$best_ref" "$(smallest "${ca_all[@]}")"
}

echo "bench-reference: $CPU_TAG"
echo "bench-reference: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) at $(date -u +%H:%M:%S) UTC"
status=0
for threads in $THREADS; do
  export OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads
  for what in "${WHAT[@]}"; do
    if [ "$what" = e2e ]; then run_e2e "$threads"; continue; fi
    case $what in
      vae-decode)
        ref_cmd=("$PY" bench/reference/run_reference.py vae "$DATA")
        our_cmd=("$H3" bench vae --vae "$DATA/vae" --latents "$DATA/vae_latents.safetensors" --repeat 1) ;;
      dit-forward)
        ref_cmd=("$PY" bench/reference/run_reference.py dit "$DATA")
        our_cmd=("$H3" bench dit --transformer "$DATA/transformer" --inputs "$DATA/dit_inputs.safetensors"
                 --warmup "$DATA/dit_warmup.safetensors") ;;
      *) echo "bench-reference: unknown comparison '$what' (vae-decode, dit-forward, e2e)" >&2; exit 2 ;;
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
    ratio_line "$what" "$threads" "$best_ref" "$best_ours"
  done
done
echo "bench-reference: load average $(cut -d' ' -f1-3 /proc/loadavg) at $(date -u +%H:%M:%S) UTC"
exit $status
