"""The tiny audio VAE: diffusers' AutoencoderKLMiniMaxH3Audio at small widths (the release's hop of 800
samples, 40 latents/s at 32 kHz, its BigVGAN decoder with one AMP kernel per stage), whose decoder is
**constructed**, not trained: an additive synthesiser of 40-Hz harmonics.

Why constructed: trained from magnitude losses on the CPU (the first recipe: 1,500 steps, a
multi-resolution STFT loss, DAC encoder of width 4) the decoder collapsed to one quiet hum whatever
the latents, and shorter runs from a fixed spectral encoder did not move off silence either
(train/tiny/README.md). A BigVGAN decoder with its residual branches at zero and its SnakeBeta
activations at a vanishing amplitude is a chain of linear transposed convolutions, the upsampling
digits of one latent's 800 samples (5 x 5 x 2^5). Such a chain can hold any set of per-hop patterns
whose rank across each digit cut fits the channels there: a tensor-train. The patterns here are the
cosine and sine of 16 harmonics of 40 Hz (whole periods in one hop, so a latent held constant plays
a seamless tone): the soundtrack's three tones (data.TONE_HZ) and the band of its bounce click. The
encoder is their Fourier projection over each hop, so encode -> decode returns a steady tone exactly
(a click comes back spread over its hop). What is learnt is the DiT's audio rows: which tone a
prompt sounds, where it is panned, when a bounce clicks.
"""

from __future__ import annotations

import math

import numpy as np
import torch

import data

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
RATES = (5, 5, 2, 2, 2, 2, 2)  # the release's decoder rates (800 = their product)
# Multiples of SAMPLE_RATE / HOP = 40 Hz: the three tones (240, 440, 640 Hz) and 1,560-2,040 Hz
# around the click's 1,800 Hz; two channels (cosine, sine) each: the 32 latent channels.
HARMONICS = tuple(round(hz * HOP / data.SAMPLE_RATE) for hz in sorted(data.TONE_HZ.values())) + tuple(range(39, 52))
# SnakeBeta adds sin^2(a x) / e^beta: at beta = 30 that term is below 1e-13 of the signal's scale.
SNAKE_OFF_BETA = 30.0
# The encoder's modules (DAC stack, attention projection, posterior heads) are not used: the export drops them.
ENCODER_PREFIXES = ("encoder.", "pre_block.", "mean_proj.", "logs_proj.")

assert len(HARMONICS) * 2 == CONFIG["latent_channels"]
assert all(abs(hz * HOP / data.SAMPLE_RATE - round(hz * HOP / data.SAMPLE_RATE)) < 1e-9 for hz in data.TONE_HZ.values()), \
    "every tone must be a multiple of 40 Hz (whole periods in one latent hop)"


def patterns() -> torch.Tensor:
    """[32, HOP] float64: latent channel c's contribution to its hop's samples."""
    j = torch.arange(HOP, dtype=torch.float64)
    rows = []
    for k in HARMONICS:
        rows += [torch.cos(2 * math.pi * k * j / HOP), torch.sin(2 * math.pi * k * j / HOP)]
    return torch.stack(rows)


def tensor_train(p: torch.Tensor) -> list[torch.Tensor]:
    """p [C, HOP] as cores G_i [r_{i-1}, RATES[i], r_i] (r_0 = C, last r = 1) with
    p[c, j] = (G_0[c, d_0] G_1[:, d_1] ... G_6[:, d_6]) for j's digits d (most significant first)."""
    cores = []
    left = p.shape[0]
    rest = p.reshape(left, -1)
    for rate in RATES[:-1]:
        u, s, vh = torch.linalg.svd(rest.reshape(left * rate, -1), full_matrices=False)
        rank = int((s > 1e-10 * s[0]).sum())
        cores.append(u[:, :rank].reshape(left, rate, rank))
        rest = s[:rank, None] * vh[:rank]
        left = rank
    cores.append(rest.reshape(left, RATES[-1], 1))
    return cores


def set_weight_normed(module: torch.nn.Module, weight: torch.Tensor) -> None:
    """A weight-norm module's (g, v) so that g * v / |v| == weight (rows of zeros: g = 0, v = 1)."""
    dims = tuple(range(1, weight.dim()))
    norm = weight.norm(dim=dims, keepdim=True)
    module.weight_v.copy_(torch.where(norm > 0, weight, torch.ones_like(weight)))
    direction_norm = module.weight_v.norm(dim=dims, keepdim=True)
    module.weight_g.copy_(torch.where(norm > 0, direction_norm, torch.zeros_like(norm)).view_as(module.weight_g))


@torch.no_grad()
def build() -> torch.nn.Module:
    """The audio VAE with its decoder set to the synthesiser of patterns()."""
    from diffusers import AutoencoderKLMiniMaxH3Audio
    vae = AutoencoderKLMiniMaxH3Audio(**CONFIG)
    assert tuple(vae.config.decoder_rates) == RATES
    dec = vae.decoder
    for name, p in dec.named_parameters():
        if name.endswith(("weight_g", "bias")):
            p.zero_()  # residual branches off (their g stays 0), no biases
    channels = CONFIG["latent_channels"]
    vae.dec_in_proj.weight.zero_()
    vae.dec_in_proj.weight[:, :, 0] = torch.eye(channels)
    vae.dec_in_proj.bias.zero_()
    pre = torch.zeros_like(dec.conv_pre.weight_v)
    pre[:channels, :channels, pre.shape[2] // 2] = torch.eye(channels)
    set_weight_normed(dec.conv_pre, pre)
    for i, core in enumerate(tensor_train(patterns())):
        up = dec.ups[i][0]
        w = torch.zeros_like(up.weight_v)  # [in, out, kernel]
        r_in, rate, r_out = core.shape
        assert r_in <= w.shape[0] and r_out <= w.shape[1], f"stage {i}: rank {core.shape} > channels {w.shape}"
        # output sample rate * m + d reads tap d + padding; the other taps (overlap) stay 0
        for d in range(rate):
            w[:r_in, :r_out, d + up.padding[0]] = core[:, d, :].to(w.dtype)
        set_weight_normed(up, w)
    for module in dec.modules():
        if type(module).__name__ == "MiniMaxH3AudioSnakeBeta":
            module.beta.fill_(SNAKE_OFF_BETA)
    post = torch.zeros_like(dec.conv_post.weight_v)
    post[0, 0, post.shape[2] // 2] = 1.0
    set_weight_normed(dec.conv_post, post)
    return vae.eval()


def encode(waveform: np.ndarray) -> torch.Tensor:
    """[2, samples] (a multiple of HOP) -> [2, 32, samples / HOP]: each hop's Fourier coefficients."""
    x = torch.from_numpy(waveform).to(torch.float64)
    hops = x.view(x.shape[0], -1, HOP)
    return (2.0 / HOP * torch.einsum("bmj,cj->bcm", hops, patterns())).to(torch.float32)


@torch.no_grad()
def round_trip_error(vae, waveform: np.ndarray) -> float:
    """Mean absolute difference of decode(encode(x)) and x (the recipe records it)."""
    y = vae.decode(encode(waveform)).sample[:, 0]
    return float((y - torch.from_numpy(waveform)).abs().mean())
