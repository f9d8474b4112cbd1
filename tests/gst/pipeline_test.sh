#!/bin/bash
# Pipeline tests of h3videosrc, run by meson: each runs a script of pipelines/
# on a small clip of the tiny default model and checks what came out.
# Usage: pipeline_test.sh mp4|mp4-interrupt|fmp4|rtp|mp4-av|webm-av|rtp-av|mp4-av-causal|endless-av|mosaic|
#        shared-app|app|inspect|linkage
#        BUILD_DIR SOURCE_DIR
#        (inspect also takes the expected LICENSE and ORIGIN)
set -euo pipefail
what=$1
build=$2
src=$3
frames=22 width=80 height=48
export H3_PROPS="num-frames=$frames width=$width height=$height"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# Ctrl-C on the `gst-launch-1.0 -e` of pid $1 once its file $2 holds more than $3 bytes (a muxer
# writes once the first encoded frames arrive); it must then stop by itself and exit 0.
interrupt_when_written() {
  local pid=$1 file=$2 size=$3 rc=0
  for _ in $(seq 1 1200); do
    [ "$(stat -c %s "$file" 2>/dev/null || echo 0)" -gt "$size" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -INT "$pid"
  timeout 120 tail --pid="$pid" -f /dev/null ||
    { kill -9 "$pid"; echo "gst-launch did not stop after SIGINT" >&2; exit 1; }
  wait "$pid" || rc=$?
  [ "$rc" -eq 0 ] || { echo "gst-launch -e exited $rc after SIGINT" >&2; exit 1; }
}

case "$what" in
  mp4)
    bash "$src/pipelines/mp4.sh" "$build" "$out/clip.mp4"
    bash "$src/pipelines/check-mp4.sh" "$out/clip.mp4" "$frames" "$width" "$height"
    # Duration: 22 frames at 24/1.
    dur=$(ffprobe -v error -show_entries format=duration -of default=nw=1:nk=1 "$out/clip.mp4")
    python3 -c "import sys; d=float('$dur'); sys.exit(0 if abs(d - $frames/24) < 0.05 else 1)" ||
      { echo "duration $dur s, expected $(python3 -c "print($frames/24)") s" >&2; exit 1; }
    # The prompt went into the file's tags (title / comment).
    ffprobe -v error -show_entries format_tags=title -of default=nw=1:nk=1 "$out/clip.mp4" | grep -q 'a red circle moving right on a black background' ||
      { echo "the MP4 has no title tag with the prompt" >&2; exit 1; }
    ;;
  mp4-interrupt)
    # Ctrl-C on `gst-launch-1.0 -e` mid-clip: the application's EOS must still give a
    # finalised, playable MP4 of the frames made so far.
    # shellcheck source=pipelines/env.sh
    . "$src/pipelines/env.sh"
    h3_pipeline_env "$build"
    long=240
    gst-launch-1.0 -e -q h3videosrc num-frames=$long width=$width height=$height ! videoconvert ! \
      video/x-raw,format=I420 ! x264enc ! mp4mux ! filesink location="$out/cut.mp4" &
    interrupt_when_written $! "$out/cut.mp4" 0
    bash "$src/pipelines/check-mp4.sh" "$out/cut.mp4" "" "$width" "$height" | tee "$out/check.txt"
    n=$(sed -n 's/.*, \([0-9]*\) frames,.*/\1/p' "$out/check.txt")
    [ "$n" -lt $long ] || { echo "the interrupted clip has all $n frames: it was not cut short" >&2; exit 1; }
    ;;
  fmp4)
    FRAGMENT_MS=300 bash "$src/pipelines/fmp4.sh" "$build" "$out/frag.mp4"
    bash "$src/pipelines/check-mp4.sh" "$out/frag.mp4" "$frames" "$width" "$height"
    ;;
  mp4-av|webm-av)
    # h3src's soundtrack muxed beside the video; av.sh checks both streams and their durations.
    bash "$src/pipelines/av.sh" "$build" "${what%-av}" "$out/clip.${what%-av}"
    ;;
  mp4-av-causal)
    # h3src with the chunk-causal sampler (docs/causal.md), both streams muxed: 39 frames in
    # three chunks; without a LoRA (allowed, with a warning).
    H3_PROPS="num-frames=39 width=$width height=$height sampler=causal sink=1 window=1" \
      bash "$src/pipelines/av.sh" "$build" mp4 "$out/causal.mp4" | tee "$out/av.txt"
    grep -q 'video ends at 1.62' "$out/av.txt" || { echo "the causal clip is not 39 frames long" >&2; exit 1; }
    # A LoRA that is not there: an error naming it, no hang.
    # shellcheck source=pipelines/env.sh
    . "$src/pipelines/env.sh"
    h3_pipeline_env "$build"
    rc=0
    timeout 120 gst-launch-1.0 h3src sampler=causal lora="$out/no-such-lora" $H3_PROPS name=s s.video ! fakesink \
      s.audio ! fakesink >"$out/bad.txt" 2>&1 || rc=$?
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { echo "a missing LoRA gave rc $rc" >&2; cat "$out/bad.txt" >&2; exit 1; }
    grep -q "no-such-lora" "$out/bad.txt" || { echo "the error does not name the LoRA" >&2; cat "$out/bad.txt" >&2; exit 1; }
    ;;
  endless-av)
    # An endless causal h3src (num-frames -1) muxed to MP4, ended by Ctrl-C on `gst-launch-1.0 -e`:
    # the file is finalised with whole 17-frame chunks and the soundtrack that goes with them.
    # shellcheck source=pipelines/env.sh
    . "$src/pipelines/env.sh"
    h3_pipeline_env "$build"
    gst-launch-1.0 -e -q h3src sampler=causal width=$width height=$height name=s \
      s.video ! queue ! videoconvert ! x264enc ! mux. s.audio ! queue ! audioconvert ! avenc_aac ! mux. \
      mp4mux name=mux ! filesink location="$out/endless.mp4" &
    interrupt_when_written $! "$out/endless.mp4" 20000
    streams=$(ffprobe -v error -show_entries stream=codec_type,nb_frames,duration -of csv=p=0 "$out/endless.mp4")
    echo "$streams"
    n=$(echo "$streams" | awk -F, '$1=="video"{print $3}')
    [ "$n" -gt 0 ] && [ $((n % 17)) -eq 0 ] || { echo "the endless clip has $n frames, not whole chunks" >&2; exit 1; }
    vdur=$(echo "$streams" | awk -F, '$1=="video"{print $2}')
    adur=$(echo "$streams" | awk -F, '$1=="audio"{print $2}')
    python3 -c "import sys; sys.exit(0 if abs($vdur - $adur) <= 1/24 + 0.03 else 1)" ||
      { echo "video $vdur s and audio $adur s differ by more than a frame (and AAC's priming)" >&2; exit 1; }
    ;;
  rtp-av)
    PORT=${PORT:-5010} bash "$src/pipelines/rtp-av.sh" "$build" "$frames"
    ;;
  rtp)
    # The sender is live (the script's default), as a real RTP sender is.
    PORT=${PORT:-5004} EXPECT_SIZE="${width}x$height" bash "$src/pipelines/rtp.sh" "$build" "$frames"
    ;;
  mosaic)
    # Four sources, one engine (the script checks the loads), 2x2 into one MP4.
    H3_TILE=${width}x${height} bash "$src/pipelines/mosaic.sh" "$build" "$out/mosaic.mp4"
    bash "$src/pipelines/check-mp4.sh" "$out/mosaic.mp4" "$frames" $((2 * width)) $((2 * height))
    ;;
  shared-app)
    # Two pipelines on one engine through the h3.engine context; a prompt change while both play.
    # shellcheck source=pipelines/env.sh
    . "$src/pipelines/env.sh"
    h3_pipeline_env "$build"
    "$build/pipelines/h3-shared-app" --frames 90 --change-at 5 | tee "$out/shared.txt"
    grep -qx "first: 90 frames" "$out/shared.txt" || { echo "the first stream is not 90 frames" >&2; exit 1; }
    grep -qx "second: 90 frames" "$out/shared.txt" || { echo "the second stream is not 90 frames" >&2; exit 1; }
    grep -qx "model loads: 1" "$out/shared.txt" || { echo "the two pipelines did not share one engine" >&2; exit 1; }
    grep -qx "engine handed over through the context: yes" "$out/shared.txt" ||
      { echo "the second pipeline did not get the engine through the context" >&2; exit 1; }
    grep -q "^new prompt applied from chunk: [1-9]" "$out/shared.txt" ||
      { echo "the prompt change was not applied" >&2; exit 1; }
    ;;
  app)
    # shellcheck source=pipelines/env.sh
    . "$src/pipelines/env.sh"
    h3_pipeline_env "$build"
    "$build/pipelines/h3-gst-app" --frames "$frames" --format I420 | tee "$out/app.txt"
    grep -qx "frames: $frames" "$out/app.txt" || { echo "the app did not count $frames frames" >&2; exit 1; }
    grep -q '^first frame at: [0-9]' "$out/app.txt"
    grep -q '^last frame at: [0-9]' "$out/app.txt"
    ;;
  inspect)
    # shellcheck source=pipelines/env.sh
    . "$src/pipelines/env.sh"
    h3_pipeline_env "$build"
    gst-inspect-1.0 h3videosrc > "$out/inspect.txt"
    for p in model prompt prompt-embeds seed steps width height num-frames framerate ranks tp-size device \
             queue-chunks is-live timeout compute-dtype; do
      grep -q "^  $p " "$out/inspect.txt" || { echo "gst-inspect does not show $p" >&2; exit 1; }
    done
    n=$(grep -c 'changeable only in NULL or READY state' "$out/inspect.txt")
    [ "$n" -ge 15 ] || { echo "only $n properties say when they may change" >&2; exit 1; }
    # h3src: the same properties (the same code), and its three always pads (the prompt track's too).
    gst-inspect-1.0 h3src > "$out/inspect-av.txt"
    for p in model prompt prompt-embeds seed steps width height num-frames framerate ranks tp-size device \
             queue-chunks is-live timeout compute-dtype; do
      grep -q "^  $p " "$out/inspect-av.txt" || { echo "gst-inspect h3src does not show $p" >&2; exit 1; }
    done
    for pad in video audio prompts; do
      grep -q "^  SRC: '$pad'" "$out/inspect-av.txt" || { echo "h3src has no '$pad' source pad" >&2; exit 1; }
    done
    # h3mark, the marking after mp4mux / qtmux: an MP4 byte stream in and out.
    gst-inspect-1.0 h3mark > "$out/inspect-mark.txt"
    [ "$(grep -c '^      video/quicktime$' "$out/inspect-mark.txt")" = 2 ] ||
      { echo "h3mark does not take and give video/quicktime" >&2; exit 1; }
    grep -q 'format: { (string)F32LE, (string)S16LE }' "$out/inspect-av.txt" ||
      { echo "h3src's audio pad does not offer F32LE and S16LE" >&2; exit 1; }
    # Each property's line (its name in 24 columns, then its blurb) fits two lines of an 80-column
    # terminal: the details are docs/element.md's.
    for f in inspect inspect-av; do
      sed -n '/^Element Properties:/,$p' "$out/$f.txt" | grep '^  [a-z][a-z0-9-]* *: ' > "$out/$f-props.txt" || true
      n=$(wc -l < "$out/$f-props.txt")
      [ "$n" -ge 32 ] || { echo "$f: only $n property lines found" >&2; exit 1; }
      if awk 'length($0) > 160 { print; bad = 1 } END { exit !bad }' "$out/$f-props.txt" >&2; then
        echo "$f: the property lines above run over two 80-column lines" >&2; exit 1
      fi
    done
    # The plugin declares the licence of LICENSE (MIT, "MIT/X11" in GStreamer's spelling) and
    # the origin the build was configured with (arguments 4 and 5).
    licence=$(sed -n 's/^  License  *//p' "$out/inspect.txt")
    origin=$(sed -n 's/^  Origin URL  *//p' "$out/inspect.txt")
    [ "$licence" = "$4" ] || { echo "gst-inspect shows License '$licence', expected '$4'" >&2; exit 1; }
    [ "$origin" = "$5" ] || { echo "gst-inspect shows Origin URL '$origin', expected '$5'" >&2; exit 1; }
    [ "$licence" = MIT/X11 ] && [ "$(head -n 1 "$src/LICENSE")" = "MIT License" ] ||
      { echo "the plugin's licence '$licence' is not the one in $src/LICENSE" >&2; exit 1; }
    ;;
  linkage)
    # The plugin GStreamer scans must not pull LibTorch in; the engine module must
    # really link it (Meson drops TorchConfig's --no-as-needed entries silently).
    if readelf -d "$build/gst/libgsth3.so" | grep -E 'NEEDED.*(torch|c10)'; then
      echo "libgsth3.so links LibTorch" >&2; exit 1
    fi
    module="$build/gst-engine/libgsth3-engine.so"
    if [ -f "$module" ]; then
      readelf -d "$module" | grep 'NEEDED.*libtorch_cpu' >/dev/null || { echo "the engine module does not link libtorch_cpu" >&2; exit 1; }
      readelf --dyn-syms -W "$module" | grep ' h3gst_engine_module$' >/dev/null || { echo "the engine module does not export h3gst_engine_module" >&2; exit 1; }
    fi
    ;;
  *) echo "unknown pipeline test $what" >&2; exit 2 ;;
esac
echo "pipeline test $what: ok"
