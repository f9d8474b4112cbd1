#!/bin/bash
# Configure-time refusals of a LibTorch the engine cannot use: `meson setup` with -Dtorch_root
# pointing at (1) a folder without include/ and lib/, (2) a LibTorch without c10d headers,
# (3) one whose libraries lack c10d's Gloo process group. Each must fail with a message that
# says what to install or change. Usage: torch_root_test.sh SOURCE_ROOT
set -uo pipefail
src=$1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/h3-torch-root.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
status=0

expect_refusal() {  # expect_refusal NAME TORCH_ROOT PATTERN
  local out
  out=$(meson setup "$tmp/build-$1" "$src" -Dtorch_root="$2" -Dtests=false -Dgst=disabled -Dfuzzers=disabled 2>&1)
  if [ $? -eq 0 ]; then
    echo "FAIL $1: meson setup accepted torch_root=$2"; status=1; return
  fi
  if ! grep -q -- "$3" <<<"$out"; then
    echo "FAIL $1: the refusal does not say '$3':"; grep -i "error" <<<"$out" | tail -3; status=1; return
  fi
  echo "ok $1: $(grep -o "ERROR:.*" <<<"$out" | head -1 | cut -c1-200)"
}

mkdir -p "$tmp/empty"
expect_refusal no-layout "$tmp/empty" "must hold include/ and lib/ folders"

mkdir -p "$tmp/no-c10d/include/ATen" "$tmp/no-c10d/lib"
expect_refusal no-c10d "$tmp/no-c10d" "has no c10d headers"

# Headers present, but libraries built without distributed support (stub libraries here).
mkdir -p "$tmp/no-gloo/include/torch/csrc/distributed/c10d" "$tmp/no-gloo/lib"
touch "$tmp/no-gloo/include/torch/csrc/distributed/c10d/ProcessGroupGloo.hpp"
echo 'int h3_stub;' > "$tmp/stub.c"
for lib in torch_cpu c10; do cc -shared -fPIC -o "$tmp/no-gloo/lib/lib$lib.so" "$tmp/stub.c"; done
expect_refusal no-gloo "$tmp/no-gloo" "no c10d Gloo process group"

exit $status
