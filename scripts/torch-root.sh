#!/bin/bash
# Prints the LibTorch that scripts/install-torch.sh installed (the folder holding include/ and lib/),
# or nothing when there is none. meson.build calls it when -Dtorch_root is not given.
. "$(dirname "$0")/torch-pin.sh"
[ -f "$TORCH_DIR/.complete" ] && echo "$TORCH_DIR/torch"
exit 0
