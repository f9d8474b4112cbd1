# The project's one LibTorch: the `torch` wheel from PyPI at this version (a CUDA 13.0 build).
# Sourced by install-torch.sh and torch-root.sh; docs/building.md says why this version.
TORCH_VERSION=2.11.0
TORCH_LOCAL=cu130
H3_CACHE=${H3_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gst-h3}
TORCH_DIR=$H3_CACHE/torch-$TORCH_VERSION
