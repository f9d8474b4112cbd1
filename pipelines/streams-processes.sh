#!/bin/bash
# One process with N h3videosrc elements (one shared engine, docs/element.md "One engine, many
# elements") against N processes with one element each (an engine each): the peak resident set
# (one process's, against the sum of the N processes') and the throughput (frames per second of
# all streams together, from the first start to the last end). Figures for docs/performance.md.
# Usage: bash pipelines/streams-processes.sh BUILD_DIR [N...]   (default: 1 2 4)
# Extra element properties: H3_PROPS (default: the embedded default model's 256x160, causal, 56 frames)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=pipelines/env.sh
. "$here/env.sh"
h3_pipeline_env "${1:-build}"
shift || true
counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(1 2 4)
frames=${H3_FRAMES:-56}
props=${H3_PROPS:-"sampler=causal width=256 height=160 num-frames=$frames"}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# /usr/bin/time's "max RSS in KB, wall seconds" of one gst-launch-1.0 run of the elements given.
timed() {
  local out=$1
  shift
  /usr/bin/time -f "%M %e" -o "$out" gst-launch-1.0 -q "$@" >/dev/null
}

printf '%3s %14s %14s %14s %14s\n' N one_proc_MiB N_procs_MiB one_proc_fps N_procs_fps
for n in "${counts[@]}"; do
  args=()
  for i in $(seq 1 "$n"); do
    # shellcheck disable=SC2206
    args+=(h3videosrc $props seed="$i" "prompt=a benchmark stream $i" ! fakesink sync=false)
  done
  timed "$tmp/one.txt" "${args[@]}"
  read -r one_kb one_s < "$tmp/one.txt"
  pids=()
  t0=$(date +%s.%N)
  for i in $(seq 1 "$n"); do
    # shellcheck disable=SC2086
    timed "$tmp/p$i.txt" h3videosrc $props seed="$i" "prompt=a benchmark stream $i" ! fakesink sync=false &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  t1=$(date +%s.%N)
  sum_kb=0
  for i in $(seq 1 "$n"); do
    read -r kb _ < "$tmp/p$i.txt"
    sum_kb=$((sum_kb + kb))
  done
  awk -v n="$n" -v a="$one_kb" -v b="$sum_kb" -v s1="$one_s" -v t0="$t0" -v t1="$t1" -v f="$frames" \
    'BEGIN { printf "%3d %14.1f %14.1f %14.2f %14.2f\n", n, a / 1024, b / 1024, n * f / s1, n * f / (t1 - t0) }'
done
