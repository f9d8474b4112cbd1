#!/bin/bash
# Runs one `h3 bench` command with two builds, alternating (A, B, A, B, ...), so that load changes
# on a shared machine hit both alike; prints every run's output under a header naming the build.
#   scripts/bench-pair.sh A_H3 B_H3 ROUNDS BENCH_ARGS...
#   e.g. scripts/bench-pair.sh build-deb/tools/h3 build/tools/h3 2 bench vae --no-rss
set -euo pipefail
a=$1 b=$2 rounds=$3
shift 3
for ((i = 1; i <= rounds; i++)); do
  for h3 in "$a" "$b"; do
    echo "=== round $i: $h3 $*"
    "$h3" "$@"
  done
done
