# Sourced by scripts/bench-reference.sh and bench/reference/causal/make_vectors.sh: the Python
# virtual environment of the reference implementations, made once in $H3_CACHE/reference-venv —
# torch pinned to the project's LibTorch version (scripts/torch-pin.sh, sourced before this),
# without its CUDA wheels (gigabytes; only its CPU side runs here), then diffusers and its helpers
# at the pins below (about 700 MB from PyPI). Sets VENV and PY, and LD_LIBRARY_PATH for the torch
# wheel's CPU library, which needs the CUDA runtime (install-torch.sh put it beside the project's
# LibTorch, or the CUDA toolkit has it).
DIFFUSERS_VERSION=0.42.1      # has MiniMax-H3: AutoencoderKLMiniMaxH3, MiniMaxH3Transformer3DModel
TRANSFORMERS_VERSION=5.24.0   # diffusers' MiniMax-H3 modular pipeline imports it
ACCELERATE_VERSION=1.15.0     # diffusers' from_pretrained needs it for the fp32-pinned modules
TORCHVISION_VERSION=0.26.0    # the one for torch 2.11: transformers' Qwen3-VL video processor needs it
AV_VERSION=18.1.0             # PyAV: diffusers' encode_video (the end-to-end race's MP4)
TORCHAUDIO_VERSION=2.11.0     # the one for torch 2.11: diffusers' ref2va resamples a reference's sound with it
VENV=$H3_CACHE/reference-venv
PY=$VENV/bin/python
export LD_LIBRARY_PATH=$TORCH_DIR/torch/lib:${H3_CUDA_ROOT:-/usr/local/cuda}/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if [ ! -f "$VENV/.complete" ]; then
  echo "reference-venv: making $VENV (torch $TORCH_VERSION, diffusers $DIFFUSERS_VERSION)" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --no-deps "torch==$TORCH_VERSION"
  "$VENV/bin/pip" install --quiet typing-extensions sympy networkx jinja2 fsspec filelock numpy safetensors \
    "diffusers==$DIFFUSERS_VERSION" "transformers==$TRANSFORMERS_VERSION" "accelerate==$ACCELERATE_VERSION" \
    2>&1 | grep -v "requires\|dependency resolver" >&2 || true
  "$PY" -c "import torch, diffusers; assert torch.__version__.split('+')[0] == '$TORCH_VERSION'"
  touch "$VENV/.complete"
fi
# The end-to-end race (bench-reference.sh e2e) loads the pipeline's Qwen3VLProcessor, whose video
# processor needs torchvision (without its dependencies: torch is pinned above), and writes the MP4
# with diffusers' encode_video, which needs PyAV (about 40 MB downloaded, 130 MB installed). Added to a
# venv made before them too.
if [ ! -f "$VENV/.complete-e2e" ]; then
  echo "reference-venv: adding torchvision $TORCHVISION_VERSION and av $AV_VERSION to $VENV" >&2
  "$VENV/bin/pip" install --quiet --no-deps "torchvision==$TORCHVISION_VERSION"
  "$VENV/bin/pip" install --quiet "av==$AV_VERSION"
  "$PY" -c "import torchvision, av"
  touch "$VENV/.complete-e2e"
fi
# The Ref2VA vectors with sound (bench/reference/ref2va/make_pipeline_vectors.py): diffusers puts a
# reference's soundtrack onto the audio VAE's rate with torchaudio (without its dependencies).
if [ ! -f "$VENV/.complete-audio" ]; then
  echo "reference-venv: adding torchaudio $TORCHAUDIO_VERSION to $VENV" >&2
  "$VENV/bin/pip" install --quiet --no-deps "torchaudio==$TORCHAUDIO_VERSION"
  "$PY" -c "import torchaudio"
  touch "$VENV/.complete-audio"
fi
