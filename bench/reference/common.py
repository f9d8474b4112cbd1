"""Shared settings of the reference benchmark (bench/reference/, run by scripts/bench-reference.sh).

The medium models and inputs that both sides run: diffusers' MiniMax-H3 classes here, the C++
engine through `h3 bench vae` / `h3 bench dit` on the very same files.
"""

import os

import torch

# The medium video decoder (docs/performance.md): 4 layers x 512 (8 heads of 64), the release's 256-px tiles
# with a 64-px minimum overlap; latent [1, 24, 12, 16, 16] = 2 temporal clips of one tile each.
VAE_DECODER = dict(decoder_num_layers=4, decoder_num_attention_heads=8, decoder_attention_head_dim=64)
VAE_LATENT = (1, 24, 12, 16, 16)
VAE_WARMUP_LATENT = (1, 24, 7, 4, 4)  # one clip of 4 x 4 latents: first-touch costs, not timed

# A medium DiT: hidden 512, 4 blocks + 2 refiner blocks, 4 heads x 128, SwiGLU 1536, with text,
# audio and video rows: 64 text + 74 audio (2 channels x 37) + 7 x 16 x 24 video = 2826 rows.
DIT_CONFIG = dict(
    num_attention_heads=4,
    attention_head_dim=128,
    hidden_size=512,
    num_layers=4,
    num_refiner_layers=2,
    ffn_dim=1536,
    text_dim=256,
    time_embed_hidden_dim=512,
    time_embed_dim=256,
)
DIT_TEXT_ROWS, DIT_AUDIO_LATENTS = 64, 37
DIT_VIDEO = (1, 24, 7, 32, 48)
DIT_WARMUP_VIDEO = (1, 24, 2, 4, 4)
T_VIDEO, T_AUDIO = 0.3, 0.6

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def set_threads(n: int) -> None:
    """n intra-op threads, as `h3 bench --threads n` sets in the engine."""
    os.environ["OMP_NUM_THREADS"] = str(n)
    os.environ["MKL_NUM_THREADS"] = str(n)
    torch.set_num_threads(n)
    torch.set_num_interop_threads(1)
