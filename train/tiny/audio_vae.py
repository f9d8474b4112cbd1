"""The tiny audio VAE: diffusers' AutoencoderKLMiniMaxH3Audio at small widths (the release's hop of 800
samples, 40 latents/s at 32 kHz, its BigVGAN decoder with one AMP kernel per stage), trained on the clips'
soundtracks: half-second mono segments, waveform L1 plus a multi-resolution STFT loss.
"""

from __future__ import annotations

import numpy as np
import torch

import data
from video_vae import cosine_lr

CONFIG = dict(
    encoder_dim=4,
    latent_dim=32,
    latent_channels=32,
    num_attention_heads=2,
    decoder_dim=128,
    resblock_kernel_sizes=(3,),
    resblock_dilation_sizes=((1, 3, 5),),
)
HOP = 800
SEGMENT_LATENTS = 20  # 0.5 s
# The posterior mean with a fixed small noise (its learned variance would spend the short schedule
# shrinking), and a light L2 that keeps the latents bounded.
LATENT_NOISE = 0.1
LATENT_L2 = 1e-4
STFT_SIZES = (256, 1024, 2048)
# The loss: mostly spectral magnitude (the waveform's phase is not learnable early, and an L1 on the
# waveform alone pulls the output to silence), a little waveform L1.
LOSS = {"l1": 0.1, "log_eps": 1e-3}


def build() -> torch.nn.Module:
    from diffusers import AutoencoderKLMiniMaxH3Audio
    return AutoencoderKLMiniMaxH3Audio(**CONFIG)


def stft_loss(y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    total = y.new_zeros(())
    for n in STFT_SIZES:
        window = torch.hann_window(n)
        sy = torch.stft(y, n, n // 4, window=window, return_complex=True).abs()
        sx = torch.stft(x, n, n // 4, window=window, return_complex=True).abs()
        eps = LOSS["log_eps"]
        total = total + (sy - sx).norm() / sx.norm().clamp_min(1e-5) + (torch.log(sy + eps) - torch.log(sx + eps)).abs().mean()
    return total / len(STFT_SIZES)


def random_segments(rng: np.random.Generator, specs: list, clips: int) -> torch.Tensor:
    """[2 * clips, SEGMENT_LATENTS * HOP]: both channels of half-second soundtracks."""
    samples = SEGMENT_LATENTS * HOP
    frames = int(np.ceil(samples / data.SAMPLE_RATE * data.FPS)) + 1
    out = []
    for _ in range(clips):
        spec = specs[rng.integers(len(specs))]
        track = data.make_track(spec, frames, rng)
        out.append(torch.from_numpy(data.render_audio(spec, track, samples, rng)))
    return torch.cat(out)


def train(vae, steps: int, seed: int, log) -> list[float]:
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    specs = data.training_specs()
    # The decoder clamps its output to [-1, 1], and a clamped sample passes no gradient: at its random
    # initialisation the output saturates nearly everywhere, so its last convolution starts 100 times
    # quieter (the weight-norm magnitude), far inside the clamp.
    with torch.no_grad():
        vae.decoder.conv_post.weight_g.mul_(0.01)
    opt = torch.optim.AdamW(vae.parameters(), lr=3e-3, betas=(0.8, 0.99), weight_decay=0.0)
    losses = []
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = cosine_lr(step, steps, 3e-3, 50)
        x = random_segments(rng, specs, 2)
        post = vae.encode(x[:, None]).latent_dist
        mean = post.mean
        y = vae.decode(mean + LATENT_NOISE * torch.randn_like(mean)).sample[:, 0]
        rec = (y - x).abs().mean()
        spectral = stft_loss(y, x)
        loss = LOSS["l1"] * rec + spectral + LATENT_L2 * mean.pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(vae.parameters(), 1.0)
        opt.step()
        losses.append(float(rec + spectral))
        log("audio-vae", step, steps, l1=float(rec), stft=float(spectral))
    return losses


@torch.no_grad()
def encode(vae, waveform: np.ndarray) -> torch.Tensor:
    """[2, samples] -> the posterior means [2, 32, A] (H3 encodes with the mean)."""
    return vae.encode(torch.from_numpy(waveform)[:, None]).latent_dist.mean
