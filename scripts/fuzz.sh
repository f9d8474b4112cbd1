#!/bin/sh
# Fuzzes one of the project's parsers briefly with libFuzzer and reports the number of
# executions. Needs clang++ with its fuzzer runtime (Debian: clang-14 + libclang-rt-14-dev);
# without them it says so and exits 0, unless FUZZ_REQUIRED=1 (then it fails).
#
#   scripts/fuzz.sh TARGET [SECONDS]   TARGET: safetensors, door, timeline, lora or picture; default 20 s
#   FUZZ_BIN=build/tests/fuzz/fuzz_door_records scripts/fuzz.sh door   reuse the meson-built target
#
# Exit status: 0 when no input crashed, non-zero otherwise (libFuzzer leaves the crashing input
# as crash-* in the work folder, whose path is printed).
set -eu

here=$(cd "$(dirname "$0")/.." && pwd)
target=${1:?usage: scripts/fuzz.sh safetensors|door|timeline|lora|picture [SECONDS]}
seconds=${2:-20}
cxx=${CLANGXX:-$(command -v clang++ || command -v clang++-14 || true)}
work=$(mktemp -d /tmp/h3-fuzz-XXXXXX)
me="fuzz $target"

bin=${FUZZ_BIN:-}
if [ -n "$bin" ]; then
  bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")  # the run below changes folder
else
  if [ -z "$cxx" ] || ! "$here/scripts/build-fuzzer.sh" --probe "$cxx" >/dev/null 2>&1; then
    echo "$me: clang++ with -fsanitize=fuzzer is not available; skipped"
    rm -rf "$work"
    [ "${FUZZ_REQUIRED:-0}" = 1 ] && exit 1
    exit 0
  fi
  bin=$work/fuzz_$target
  echo "$me: building with $cxx"
  "$here/scripts/build-fuzzer.sh" "$cxx" "$target" "$bin" "$here"
fi

mkdir -p "$work/corpus"
dict=
case "$target" in
  safetensors)
    # Seeds: small valid and near-valid files (length prefix < 256 bytes).
    seed() {  # seed NAME HEADER DATA
      len=$(printf '%s' "$2" | wc -c)
      { printf "\\$(printf '%03o' "$len")\\000\\000\\000\\000\\000\\000\\000"; printf '%s%s' "$2" "$3"; } > "$work/corpus/$1"
    }
    seed valid '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"format":"pt"}}' 'abcdefgh'
    seed two '{"a":{"dtype":"BF16","shape":[1,2],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[],"data_offsets":[4,5]}}' 'abcde'
    seed empty '{"e":{"dtype":"BOOL","shape":[0],"data_offsets":[0,0]}}' ''
    seed overlap '{"a":{"dtype":"I16","shape":[2],"data_offsets":[0,4]},"b":{"dtype":"I8","shape":[2],"data_offsets":[2,4]}}' 'abcd'
    seed meta '{"__metadata__":{}}' ''
    dict="-dict=$here/tests/fuzz/safetensors.dict"
    ;;
  door)
    # Seeds: the first byte picks the record kind (door_records_fuzz.cpp), then a record or a body.
    printf '\000h3door open v1\n-\n{"run":"00","world_size":2}' > "$work/corpus/open"
    printf '\002h3door verdict v1\n-\n{"admitted":false,"reason":"x"}' > "$work/corpus/verdict"
    printf '\005{"run":"0123456789abcdef0123456789abcdef","world_size":2,"generation":1,"challenge":"0123456789abcdef0123456789abcdef","formed":false}' > "$work/corpus/open-body"
    printf '\006{"nonce":"0123456789abcdef0123456789abcdef","settings":"{}"}' > "$work/corpus/hello-body"
    printf '\007{"nonce":"nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn","admitted":true,"reason":""}' > "$work/corpus/verdict-body"
    printf '\010{"served":true}' > "$work/corpus/closed-body"
    # A store session's record, a round trip of traffic, a busy notice.
    printf '\012\000\000\000\020ciphertext......tag.............' > "$work/corpus/session-record"
    printf '\013a store request of a few bytes' > "$work/corpus/session-roundtrip"
    printf '\014H3B2\001\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000' > "$work/corpus/busy"
    dict="-dict=$here/tests/fuzz/door.dict"
    ;;
  timeline)
    # Seeds: a good file (comments, a tab, CRLF, a byte order mark) and the near misses.
    printf '# seconds prompt\n0 a red circle\n1.5\ta blue square moving left\n2.25 a storm, # no comment\n' > "$work/corpus/good"
    printf '\357\273\2770.5 a lighthouse\r\n3 a storm at night\r\n' > "$work/corpus/windows"
    printf '1 a\n1 b\n' > "$work/corpus/equal"
    printf '0 a\n-1 b\nnan c\ninf d\n0x10 e\n1e999 f\n' > "$work/corpus/times"
    printf '# only a comment\n\n' > "$work/corpus/empty"
    dict="-dict=$here/tests/fuzz/timeline.dict"
    ;;
  lora)
    # Seeds: LoRA files for the tiny DiT (tests/fuzz/lora_fuzz.cpp: the first byte odd means an
    # adapter_config.json comes first, up to a NUL). Headers of 256 bytes or more: an 8-byte length.
    st() {  # st HEADER DATA_BYTES: a safetensors file of zero data
      len=$(printf '%s' "$1" | wc -c)
      printf "\\$(printf '%03o' $((len % 256)))\\$(printf '%03o' $((len / 256)))\\000\\000\\000\\000\\000\\000"
      printf '%s' "$1"
      head -c "$2" /dev/zero
    }
    ab='"base_model.model.dit.condition_proj.lora_A.weight":{"dtype":"F32","shape":[1,64],"data_offsets":[0,256]},"base_model.model.dit.condition_proj.lora_B.weight":{"dtype":"F32","shape":[128,1],"data_offsets":[256,768]}'
    { printf '\000'; st "{$ab}" 768; } > "$work/corpus/peft"
    { printf '\001{"r":1,"lora_alpha":2,"use_rslora":true,"alpha_pattern":{"condition_proj":4}}\000'; st "{$ab}" 768; } > "$work/corpus/config"
    { printf '\000'; st "{$ab,\"__metadata__\":{\"lora_adapter_metadata\":\"{\\\"transformer.lora_alpha\\\": 3, \\\"transformer.rank_pattern\\\": {\\\"cond.*\\\": 1}}\"}}" 768; } > "$work/corpus/metadata"
    { printf '\000'; st '{"diffusion_model.blocks.0.attn.qkv_proj.lora_down.weight":{"dtype":"F32","shape":[1,128],"data_offsets":[0,512]},"diffusion_model.blocks.0.attn.qkv_proj.lora_up.weight":{"dtype":"BF16","shape":[768,1],"data_offsets":[512,2048]},"diffusion_model.blocks.0.attn.qkv_proj.alpha":{"dtype":"F32","shape":[],"data_offsets":[2048,2052]}}' 2052; } > "$work/corpus/kohya"
    dict="-dict=$here/tests/fuzz/lora.dict"
    ;;
  picture)
    # Seeds: small pictures, a video and a sound written by GStreamer; the first byte picks the
    # reader (0 a keyframe, 1 a reference).
    make() {  # make NAME PIPELINE
      gst-launch-1.0 -q $2 ! filesink location="$work/$1" >/dev/null 2>&1 || { echo "$me: gst-launch-1.0 failed for $1" >&2; exit 1; }
      { printf '\000'; cat "$work/$1"; } > "$work/corpus/k-$1"
      { printf '\001'; cat "$work/$1"; } > "$work/corpus/r-$1"
    }
    make png "videotestsrc num-buffers=1 ! video/x-raw,width=16,height=16 ! pngenc"
    make jpg "videotestsrc num-buffers=1 ! video/x-raw,width=16,height=24 ! jpegenc"
    make webp "videotestsrc num-buffers=1 ! video/x-raw,width=24,height=16 ! webpenc"
    make avi "videotestsrc num-buffers=3 ! video/x-raw,width=16,height=16,framerate=24/1 ! jpegenc ! avimux"
    make wav "audiotestsrc num-buffers=1 samplesperbuffer=256 ! audio/x-raw,rate=8000,channels=1 ! wavenc"
    # GStreamer keeps caches for the process's lifetime (registry, types): not leaks of the reader.
    export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
    extra="-timeout=60 -max_len=8192"
    ;;
  *)
    echo "$me: unknown target (safetensors, door, timeline, lora or picture)" >&2
    exit 2
    ;;
esac

echo "$me: running for ${seconds}s in $work"
log=$work/fuzz.log
status=0
(cd "$work" && "$bin" -max_total_time="$seconds" -print_final_stats=1 -max_len=4096 $dict ${extra:-} "$work/corpus") \
  >"$log" 2>&1 || status=$?
runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
tail -n 25 "$log"
if [ "$status" -ne 0 ]; then
  echo "$me: FAILED after ${runs:-?} executions (status $status); inputs kept in $work"
  exit "$status"
fi
echo "$me: ${runs:-?} executions in ${seconds}s, no crash"
rm -rf "$work"
