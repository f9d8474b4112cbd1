"""The tiny video VAE: diffusers' AutoencoderKLMiniMaxH3 at small widths, its ViT decoder (the part the
engine runs) trained on the procedural clips.

Its encoder is a fixed pooling (pool_clip) in the release's geometry (16 x 16 x 4 compression,
17-frame clips, the 3 trailing latents dropped), not the release's causal 3D CNN: a CNN at these
widths, trained on crops for speed, lost the shapes' colours at the whole canvas (its per-frame
GroupNorm sees other statistics there), and trained at the whole canvas it did not fit this recipe's
time. Pooled latents keep every colour by construction, so the DiT learns latents that carry the
prompt's colour, and the decoder learns to turn them back into sharp shapes.
"""

from __future__ import annotations

import math

import numpy as np
import torch

import data

# (block_out_channels ... norm_num_groups describe the CNN encoder the config schema has; this model's
# file holds no encoder tensors: it encodes with pool_clip.)
CONFIG = dict(
    block_out_channels=(8, 16, 32, 32, 32, 32),
    layers_per_block=1,
    norm_num_groups=8,
    decoder_num_layers=2,
    decoder_num_attention_heads=4,
    decoder_attention_head_dim=32,
)
# ImageNet normalisation: the space the H3 VAE encodes from and decodes to
MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1, 1)
CLIP_FRAMES = 22  # 17 + 5: one encoder clip plus the decoder's overlap, the smallest whole geometry
# A fixed small noise on the latents the decoder learns from keeps it tolerant of the DiT's imperfect ones.
LATENT_NOISE = 0.1
FOREGROUND_WEIGHT = 10.0


def build() -> torch.nn.Module:
    from diffusers import AutoencoderKLMiniMaxH3
    vae = AutoencoderKLMiniMaxH3(**CONFIG)
    vae.use_tiling = False  # the canvas is one tile
    return vae


def to_model_space(frames: np.ndarray) -> torch.Tensor:
    """[F, H, W, 3] sRGB 0..1 -> [3, F, H, W] ImageNet-normalised."""
    return (torch.from_numpy(frames).permute(3, 0, 1, 2) - MEAN) / STD


def cosine_lr(step: int, steps: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup))))


def foreground_weight(frames: torch.Tensor, background: str) -> torch.Tensor:
    """[3, F, H, W] model-space frames -> [1, F, H, W]: FOREGROUND_WEIGHT where a pixel is not the
    background colour, else 1 (the shape is a tenth of the canvas; unweighted, the reconstruction
    learns the backgrounds and greys the shapes out)."""
    bg = (torch.tensor(data.BACKGROUNDS[background], dtype=torch.float32).view(3, 1, 1, 1) / 255.0 - MEAN) / STD
    away = (frames - bg).abs().amax(dim=0, keepdim=True) > 0.2
    return 1.0 + (FOREGROUND_WEIGHT - 1.0) * away.to(frames.dtype)


def pool_clip(x: torch.Tensor) -> torch.Tensor:
    """The encoder of this model: a fixed pooling in place of the CNN's `_encode_clip` (same geometry:
    17 frames -> 5 latents, the first of frame 0 alone, each other of the next 4 frames). A latent's 24
    channels are the mean colour (model space) of its 2 x 2 sub-blocks of 8 x 8 pixels in the two
    temporal halves of its frames: 3 x 4 x 2. Returned as posterior moments (mean, log-variance 0)."""
    b, c, f, h, w = x.shape
    groups = [x[:, :, :1]] + [x[:, :, 4 * k - 3: 4 * k + 1] for k in range(1, (f + 3) // 4)]
    latents = []
    for g in groups:
        n = g.shape[2]
        halves = [g[:, :, : max(1, n // 2)], g[:, :, n // 2:] if n > 1 else g]
        parts = []
        for half in halves:
            m = torch.nn.functional.avg_pool2d(half.mean(dim=2), 8)              # [b, 3, h/8, w/8]
            m = m.view(b, c, h // 16, 2, w // 16, 2).permute(0, 1, 3, 5, 2, 4)  # [b, 3, 2, 2, h/16, w/16]
            parts.append(m.reshape(b, c * 4, h // 16, w // 16))
        latents.append(torch.cat(parts, dim=1))
    mean = torch.stack(latents, dim=2)
    return torch.cat([mean, torch.zeros_like(mean)], dim=1)


def use_pooling_encoder(vae) -> None:
    """Routes the VAE's clip encoder through pool_clip (the CNN encoder's weights are then unused)."""
    vae._encode_clip = pool_clip


def random_clip(rng: np.random.Generator, specs: list, frames: int):
    spec = specs[rng.integers(len(specs))]
    x = to_model_space(data.render_video(spec, data.make_track(spec, frames, rng, data.WIDE)))
    return x, foreground_weight(x, spec.background)


def train_decoder(vae, steps: int, seed: int, log) -> list[float]:
    """The ViT decoder (and post_quant_conv) from scratch on whole-canvas 22-frame clips, from the
    pooled latents (noised), foreground-weighted MSE."""
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    specs = data.training_specs()
    params = list(vae.decoder.parameters()) + list(vae.post_quant_conv.parameters())
    opt = torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.99), weight_decay=0.0)
    losses = []
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = cosine_lr(step, steps, 1e-3, 100)
        x, w = random_clip(rng, specs, CLIP_FRAMES)
        x, w = x[None], w[None]
        with torch.no_grad():
            mean = vae._encode(x).chunk(2, dim=1)[0]
        y = vae._decode(mean + LATENT_NOISE * torch.randn_like(mean))[:, :, : x.shape[2]]
        rec = (w * (y - x).pow(2)).mean() / w.mean()
        opt.zero_grad(set_to_none=True)
        rec.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        losses.append(float(rec))
        log("vae-decoder", step, steps, rec=float(np.mean(losses[-50:])))
    return losses


@torch.no_grad()
def encode_clip(vae, frames: np.ndarray) -> torch.Tensor:
    """A whole clip's posterior mean [24, T, h, w]."""
    return vae._encode(to_model_space(frames)[None])[0].chunk(2, dim=0)[0]
