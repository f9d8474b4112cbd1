# Sourced by scripts/demo.sh and scripts/test.sh: their phases, each timed on one line, with its
# output in a log under the build folder that a failure names; configure and build resume where
# an interrupted run stopped.
#   h3_phase NAME LOG COMMAND...   runs COMMAND with its output in LOG
#   h3_configure BUILD LOG [meson setup options...]
#   h3_build BUILD LOG [TARGET...]  meson compile, with a progress line every 20 s
#   h3_total                        the whole run's time

# Precompiled headers (core/pch/torch_pch.h) through ccache: allowed when ccache is told that
# the .gch's defines and time macros are the compiler's business.
export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}

H3_WHO=${H3_WHO:-$(basename "$0" .sh)}
H3_T0=$(date +%s)

h3_say() { echo "$H3_WHO: $*" >&2; }

h3_elapsed() {
  local s=$1
  if [ "$s" -ge 60 ]; then printf '%d min %02d s' $((s / 60)) $((s % 60)); else printf '%d s' "$s"; fi
}

h3_phase() {
  local name=$1 log=$2
  shift 2
  mkdir -p "$(dirname "$log")"
  local t0
  t0=$(date +%s)
  h3_say "$name ..."
  if ! "$@" >"$log" 2>&1; then
    tail -n 25 "$log" >&2
    h3_say "$name FAILED after $(h3_elapsed $(($(date +%s) - t0))); the whole log: $log"
    exit 1
  fi
  h3_say "$name: done in $(h3_elapsed $(($(date +%s) - t0)))"
}

h3_configure() {
  local build=$1 log=$2
  shift 2
  if [ -f "$build/build.ninja" ]; then
    h3_say "configure: $build is configured already"
  elif [ -d "$build/meson-private" ]; then
    # A configure that was interrupted: start it again in place.
    h3_phase configure "$log" meson setup --wipe "$build" "$@"
  else
    h3_phase configure "$log" meson setup "$build" "$@"
  fi
}

# Ninja resumes an interrupted build by itself: only what is missing or out of date is compiled.
h3_build() {
  local build=$1 log=$2
  shift 2
  mkdir -p "$(dirname "$log")"
  local t0 what=${*:-everything}
  t0=$(date +%s)
  h3_say "build ($what) ..."
  meson compile -C "$build" "$@" >"$log" 2>&1 &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      sleep 2
      kill -0 "$pid" 2>/dev/null || break 2
    done
    local step
    step=$(grep -o '^\[[0-9]*/[0-9]*\]' "$log" | tail -n 1)
    h3_say "build: ${step:-starting} after $(h3_elapsed $(($(date +%s) - t0)))"
  done
  if ! wait "$pid"; then
    grep -A 12 '^FAILED' "$log" | head -n 40 >&2 || tail -n 25 "$log" >&2
    h3_say "build FAILED after $(h3_elapsed $(($(date +%s) - t0))); the whole log: $log"
    exit 1
  fi
  local steps
  steps=$(grep -c '^\[[0-9]*/[0-9]*\]' "$log" || true)
  h3_say "build: done in $(h3_elapsed $(($(date +%s) - t0))) ($steps steps)"
}

h3_total() {
  h3_say "total: $(h3_elapsed $(($(date +%s) - H3_T0)))"
}
