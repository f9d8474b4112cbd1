#!/bin/sh
# Builds a libFuzzer target with clang++ (the project itself compiles with g++, and libFuzzer
# needs clang's -fsanitize=fuzzer runtime). Only the parsers under test are instrumented.
#
#   scripts/build-fuzzer.sh --probe CLANGXX                          exit 0 when CLANGXX can link a fuzzer
#   scripts/build-fuzzer.sh CLANGXX TARGET OUTPUT SRCDIR [TORCH_ROOT]  build TARGET as OUTPUT
#
# TARGET: safetensors (the safetensors header parser), door (a process world's door records, its
# store front end's handshake and session records), timeline (the prompt timeline's file), lora
# (the LoRA loader on the tiny DiT's adapter slots) or picture (the keyframe / reference reader
# through GStreamer). Called by tests/fuzz/meson.build (option -Dfuzzers) and by scripts/fuzz.sh.
set -eu

if [ "${1:-}" = "--probe" ]; then
  cxx=$2
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  printf '%s\n' '#include <cstdint>' '#include <cstddef>' \
    'extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }' > "$tmp/p.cpp"
  exec "$cxx" -fsanitize=fuzzer "$tmp/p.cpp" -o "$tmp/p"
fi

cxx=$1
target=$2
out=$3
src=$4
flags="-std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -D_GLIBCXX_USE_CXX11_ABI=1"
case "$target" in
  safetensors)
    # The project's LibTorch (scripts/torch-root.sh) unless a 5th argument names one: c10
    # headers (ScalarType) come from its include folder; libc10 resolves the few out-of-line
    # helpers they reference.
    torch=${5:-$("$src/scripts/torch-root.sh")}
    [ -n "$torch" ] || { echo "build-fuzzer: no LibTorch (run scripts/install-deps.sh)" >&2; exit 1; }
    # shellcheck disable=SC2086
    "$cxx" $flags -I"$src/core" -I"$src/include" -isystem "$torch/include" \
      "$src/tests/fuzz/safetensors_header_fuzz.cpp" "$src/core/io/safetensors_header.cpp" \
      "$src/core/io/json_strict.cpp" "$src/core/types/error.cpp" "$src/core/common/shape.cpp" \
      -L"$torch/lib" -Wl,-rpath,"$torch/lib" -lc10 -o "$out"
    ;;
  door)
    # No LibTorch: the records, the handshake and the session need libcrypto and nlohmann_json only.
    d=$src/core/admission
    # shellcheck disable=SC2086
    "$cxx" $flags -I"$src/core" -I"$src/include" \
      "$src/tests/fuzz/door_records_fuzz.cpp" "$d/door_records.cpp" "$d/store_session.cpp" "$d/store_front.cpp" \
      "$d/front_end_slots.cpp" "$d/store_gate.cpp" "$d/proc_sockets.cpp" "$d/crypto.cpp" \
      "$src/core/types/error.cpp" -lcrypto -pthread -o "$out"
    ;;
  timeline)
    # The prompt timeline's parser: the standard library only.
    # shellcheck disable=SC2086
    "$cxx" $flags -I"$src/core" -I"$src/include" \
      "$src/tests/fuzz/prompt_timeline_fuzz.cpp" "$src/core/types/prompt_timeline.cpp" \
      "$src/core/types/error.cpp" -o "$out"
    ;;
  lora)
    # The loader and what it reads through (config, layout, safetensors) instrumented; LibTorch
    # (ATen's CPU ops) is the project's, as for the safetensors target.
    torch=${5:-$("$src/scripts/torch-root.sh")}
    [ -n "$torch" ] || { echo "build-fuzzer: no LibTorch (run scripts/install-deps.sh)" >&2; exit 1; }
    # shellcheck disable=SC2086
    "$cxx" $flags -I"$src/core" -I"$src/include" -isystem "$torch/include" \
      "$src/tests/fuzz/lora_fuzz.cpp" "$src/core/dit/lora.cpp" "$src/core/dit/lora_config.cpp" \
      "$src/core/dit/config.cpp" "$src/core/dit/parameters.cpp" "$src/core/dit/adapter.cpp" \
      "$src/core/io/layout.cpp" "$src/core/io/safetensors.cpp" "$src/core/io/safetensors_header.cpp" \
      "$src/core/io/json_strict.cpp" "$src/core/io/config_json.cpp" "$src/core/types/error.cpp" \
      "$src/core/common/shape.cpp" \
      -L"$torch/lib" -Wl,-rpath,"$torch/lib" -ltorch_cpu -lc10 -o "$out"
    ;;
  picture)
    # The reader instrumented; GStreamer and its plugins as installed.
    # shellcheck disable=SC2086
    "$cxx" $flags -I"$src" -I"$src/core" -I"$src/include" $(pkg-config --cflags gstreamer-app-1.0 gstreamer-video-1.0 gstreamer-tag-1.0) \
      "$src/tests/fuzz/picture_fuzz.cpp" "$src/pictures/picture_file.cpp" "$src/pictures/stored_orientation.cpp" \
      "$src/core/types/error.cpp" \
      $(pkg-config --libs gstreamer-app-1.0 gstreamer-video-1.0 gstreamer-tag-1.0) -o "$out"
    ;;
  *)
    echo "build-fuzzer: unknown target '$target' (safetensors, door, timeline, lora or picture)" >&2
    exit 2
    ;;
esac
