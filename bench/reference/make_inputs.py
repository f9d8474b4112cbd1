"""Writes the random weights and inputs both sides of the reference benchmark load.

    python make_inputs.py DIR

DIR/vae/ and DIR/transformer/ are diffusers folders (config.json + diffusion_pytorch_model.safetensors)
saved by diffusers itself, so they are in the layout the release's vae/ and transformer/ folders have
and that the engine's loaders read; DIR/vae_latents.safetensors and DIR/dit_inputs.safetensors hold
the inputs in the formats of `h3 decode --latents` and `h3 dit-forward --inputs`.
"""

import math
import sys
from pathlib import Path

import torch
from diffusers import AutoencoderKLMiniMaxH3, MiniMaxH3Transformer3DModel
from safetensors.torch import save_file

import common


def randomize(model: torch.nn.Module, gen: torch.Generator) -> None:
    """Every parameter drawn from `gen`: diffusers' own init leaves layer scales, register tokens and
    AdaLN projections at zero, which would make most of the network an identity."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
            elif "register_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=gen))
            elif name.endswith(("scale1", "scale2")):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
            elif p.dim() == 1:  # norm weights
                p.copy_(1.0 + torch.randn(p.shape, generator=gen) * 0.1)
            else:
                fan_in = math.prod(p.shape[1:])
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(fan_in))


def make_vae(out: Path, gen: torch.Generator) -> None:
    mean = (torch.randn(24, generator=gen, dtype=torch.float64) * 0.5).tolist()
    std = (torch.rand(24, generator=gen, dtype=torch.float64) + 0.5).tolist()
    # A small encoder (decode never runs it; the engine's loader skips its tensors).
    vae = AutoencoderKLMiniMaxH3(
        block_out_channels=(32, 32, 32, 32, 32, 32),
        latents_mean=tuple(mean),
        latents_std=tuple(std),
        **common.VAE_DECODER,
    )
    randomize(vae, gen)
    vae.save_pretrained(out / "vae", safe_serialization=True)
    save_file(
        {
            "latents": torch.randn(common.VAE_LATENT, generator=gen),
            "warmup": torch.randn(common.VAE_WARMUP_LATENT, generator=gen),
        },
        str(out / "vae_latents.safetensors"),
    )


def dit_inputs(gen: torch.Generator, video_shape) -> dict:
    cfg = common.DIT_CONFIG
    return {
        "video": torch.randn(video_shape, generator=gen),
        "audio": torch.randn(2 * common.DIT_AUDIO_LATENTS, 32, generator=gen),
        "text": torch.randn(common.DIT_TEXT_ROWS, cfg["text_dim"], generator=gen),
        "t_video": torch.tensor(common.T_VIDEO, dtype=torch.float32),
        "t_audio": torch.tensor(common.T_AUDIO, dtype=torch.float32),
    }


def make_dit(out: Path, gen: torch.Generator) -> None:
    dit = MiniMaxH3Transformer3DModel(**common.DIT_CONFIG)
    randomize(dit, gen)
    dit.save_pretrained(out / "transformer", safe_serialization=True)
    save_file(dit_inputs(gen, common.DIT_VIDEO), str(out / "dit_inputs.safetensors"))
    save_file(dit_inputs(gen, common.DIT_WARMUP_VIDEO), str(out / "dit_warmup.safetensors"))


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    make_vae(out, torch.Generator().manual_seed(2026))
    make_dit(out, torch.Generator().manual_seed(2027))
    (out / ".complete").write_text("ok\n")


if __name__ == "__main__":
    main()
