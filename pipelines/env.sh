# Sourced by the pipeline scripts: use the h3 plugin of build folder $1 without
# installing it, with a registry of that build's own.
# shellcheck shell=bash
h3_pipeline_env() {
  local build
  build=$(cd "$1" && pwd) || { echo "no build folder $1" >&2; return 1; }
  if [ ! -f "$build/gst/libgsth3.so" ]; then
    echo "$build/gst/libgsth3.so is missing: build first (meson compile -C $1)" >&2
    return 1
  fi
  export GST_PLUGIN_PATH_1_0="$build/gst${GST_PLUGIN_PATH_1_0:+:$GST_PLUGIN_PATH_1_0}"
  export GST_REGISTRY_1_0="$build/registry-pipelines.bin"
  export H3_BUILD="$build"
}
