"""Reference vectors for the C++ video-VAE encoder (core/vae/encoder.*, tests/core/vae/encoder_test.cpp).

    ~/.cache/gst-h3/reference-venv/bin/python bench/reference/make_vae_encoder_vectors.py [OUT]

OUT defaults to tests/data/vae_encoder. Builds a small AutoencoderKLMiniMaxH3 (diffusers' own class, the
release's layer structure and compression factors, narrow channels) with seeded random weights, saves it with
diffusers' save_pretrained as a diffusers `vae/` folder (OUT/vae/), and runs diffusers on seeded uint8 pixels:

- `moments`: the encoder + quant_conv output [1, 48, t, h, w] of `AutoencoderKLMiniMaxH3._encode` (mean | logvar;
  per-17-frame clips, the last `token_drop` latents dropped; a single frame takes the spatial path alone; tiling on,
  as released),
- `sample`: `posterior.sample(generator=torch.Generator().manual_seed(42))` (fp32),
- `latents`: what the pipeline conditions on, diffusers' `encode_vae_condition` (modular_pipelines/minimax_h3):
  ImageNet-normalised pixels, the sample above rounded to float16, then (z - latents_mean) / latents_std.

Everything runs in fp32 on the CPU. The cases are listed in OUT/cases.json.
"""

import json
import math
import sys
from pathlib import Path

import torch
from diffusers import AutoencoderKLMiniMaxH3
from diffusers.modular_pipelines.minimax_h3.encoders import encode_vae_condition
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from make_inputs import randomize  # noqa: E402

SEED = 1234
ENCODE_SEED = 42  # MiniMaxH3ModularPipeline.keyframe_encode_seed

# The release's structure (6 levels, 2 ResNet blocks each, spatial 2,2,2,2,1,1, temporal 1,2,2,1,1,1,
# reflect padding, clip 17, token drop 3, 24 latent channels, tiles 256 / 64 px) with narrow levels
# and 4 groups instead of 32 so the file stays small. The decoder is the smallest one diffusers builds.
CONFIG = dict(
    block_out_channels=(8, 16, 16, 16, 24, 24),
    layers_per_block=2,
    norm_num_groups=4,
    decoder_num_layers=1,
    decoder_num_attention_heads=1,
    decoder_attention_head_dim=8,
)

# name -> (frames, height, width)
CASES = {
    "image_h48w80": (1, 48, 80),  # one frame, one tile
    "image_h288w320": (1, 288, 320),  # one frame, 2 x 2 tiles (overlaps 224 and 192 px)
    "clip17_h32w48": (17, 32, 48),  # one clip: 5 latents, 3 dropped
    "clip34_h32w48": (34, 32, 48),  # two clips: 10 latents, 3 dropped
    "clip22_h32w48": (22, 32, 48),  # 17 + 5 frames: padded with the last frame to 34 -> 7 latents
    "clip17_h32w272": (17, 32, 272),  # one clip, 2 tiles across the width (overlap 240 px)
}


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "tests/data/vae_encoder"
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(4)
    gen = torch.Generator().manual_seed(SEED)
    mean = (torch.randn(24, generator=gen, dtype=torch.float64) * 0.5).tolist()
    std = (torch.rand(24, generator=gen, dtype=torch.float64) + 0.5).tolist()
    vae = AutoencoderKLMiniMaxH3(latents_mean=tuple(mean), latents_std=tuple(std), **CONFIG).eval()
    randomize(vae, gen)
    vae.save_pretrained(out / "vae", safe_serialization=True)
    assert vae.use_tiling and vae.tile_sample_min_height == 256 and vae.tile_sample_min_overlap_height == 64

    pixel_mean = torch.tensor(common.IMAGENET_MEAN).view(1, -1, 1, 1, 1)
    pixel_std = torch.tensor(common.IMAGENET_STD).view(1, -1, 1, 1, 1)
    cases = {}
    with torch.no_grad():
        for name, (frames, height, width) in CASES.items():
            pixels_u8 = torch.randint(0, 256, (1, 3, frames, height, width), generator=gen, dtype=torch.uint8)
            x = (pixels_u8.to(torch.float32).div(255.0) - pixel_mean) / pixel_std
            moments = vae._encode(x)
            posterior = vae.encode(x).latent_dist
            sample = posterior.sample(generator=torch.Generator().manual_seed(ENCODE_SEED))
            latents = encode_vae_condition(vae, pixels_u8, common.IMAGENET_MEAN, common.IMAGENET_STD, ENCODE_SEED)
            assert torch.equal(moments, posterior.parameters)
            save_file(
                {
                    "pixels_u8": pixels_u8[0].contiguous(),
                    "moments": moments.contiguous(),
                    "sample": sample.contiguous(),
                    "latents": latents.contiguous(),
                },
                str(out / f"case_{name}.safetensors"),
            )
            cases[name] = {
                "pixels_u8": [3, frames, height, width],
                "moments": list(moments.shape),
                "latents": list(latents.shape),
            }
            print(name, tuple(moments.shape), f"|latents| max {latents.abs().max().item():.3f}")

    (out / "cases.json").write_text(
        json.dumps(
            {
                "generator": "bench/reference/make_vae_encoder_vectors.py",
                "diffusers": __import__("diffusers").__version__,
                "torch": torch.__version__,
                "weights_seed": SEED,
                "encode_seed": ENCODE_SEED,
                "config": {k: list(v) if isinstance(v, tuple) else v for k, v in CONFIG.items()},
                "cases": cases,
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
