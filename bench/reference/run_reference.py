"""Times diffusers' MiniMax-H3 on the files make_inputs.py wrote; the reference side of
scripts/bench-reference.sh.

    python run_reference.py vae|dit DIR --threads N --out FILE [--repeat R]

Loads the model (not timed), runs one warm-up on a small input, then R timed runs on the real
input, printing `seconds S` for each, and writes the output for compare.py:
  vae: `frames_f32` [T, H, W, 3] in [0, 1] (diffusers' tiled decode as released: 256-px tiles,
       64-px minimum overlap, then ImageNet de-normalisation and clamping, as the engine does);
  dit: `velocity_video` [1, 24, T, h, w] and `velocity_audio` [2A, 32].
"""

import argparse
import time
from pathlib import Path

import torch
from diffusers import AutoencoderKLMiniMaxH3, MiniMaxH3Transformer3DModel
from diffusers.modular_pipelines.minimax_h3.before_denoise import (
    MiniMaxH3PrepareLayoutStep,
    patchify_video_latents,
)
from safetensors.torch import load_file, save_file

import common


def vae_runner(folder: Path):
    vae = AutoencoderKLMiniMaxH3.from_pretrained(folder / "vae").eval()
    assert vae.use_tiling and vae.tile_sample_min_height == 256 and vae.tile_sample_min_overlap_height == 64
    mean = torch.tensor(vae.config.latents_mean, dtype=torch.float32).view(1, -1, 1, 1, 1)
    std = torch.tensor(vae.config.latents_std, dtype=torch.float32).view(1, -1, 1, 1, 1)
    px_mean = torch.tensor(common.IMAGENET_MEAN).view(1, 3, 1, 1, 1)
    px_std = torch.tensor(common.IMAGENET_STD).view(1, 3, 1, 1, 1)
    inputs = load_file(str(folder / "vae_latents.safetensors"))

    def run(latents: torch.Tensor) -> dict:
        sample = vae.decode(latents * std + mean).sample
        pixels = (sample * px_std + px_mean).clamp(0, 1)
        return {"frames_f32": pixels[0].permute(1, 2, 3, 0).contiguous()}

    return lambda: run(inputs["warmup"]), lambda: run(inputs["latents"])


def unpatchify(rows: torch.Tensor, shape) -> torch.Tensor:
    """Inverse of diffusers' patchify_video_latents for patch (1, 2, 2)."""
    b, c, t, h, w = shape
    x = rows.reshape(b, t, h // 2, w // 2, c, 1, 2, 2)
    return x.permute(0, 4, 1, 5, 2, 6, 3, 7).reshape(b, c, t, h, w)


def dit_runner(folder: Path):
    model = MiniMaxH3Transformer3DModel.from_pretrained(folder / "transformer").eval()
    patch = tuple(model.config.patch_size)

    def prepare(path: Path) -> tuple:
        x = load_file(str(path))
        video, audio, text = x["video"], x["audio"], x["text"]
        _, _, t, h, w = video.shape
        audio_latents = audio.shape[0] // 2
        # The t2va layout of diffusers' modular pipeline: [text | audio | video], text tagged 1,
        # audio 2 (channel-major, 2 channels), video 0; text and video rows at t_video.
        position_ids, tags, video_idx, audio_idx, text_idx, _, _ = MiniMaxH3PrepareLayoutStep.build_packed_sequence(
            torch.ones(text.shape[0], dtype=torch.long), t, h, w, audio_latents, patch, 2, 2, 0
        )
        ts = torch.tensor([float(x["t_video"]), float(x["t_audio"])])
        unique, inverse = torch.unique(ts, sorted=True, return_inverse=True)
        timestep_indices = torch.full((position_ids.shape[0],), int(inverse[0]), dtype=torch.long)
        timestep_indices[audio_idx] = int(inverse[1])
        kwargs = dict(
            hidden_states=patchify_video_latents(video, patch)[None],
            audio_hidden_states=audio[None],
            encoder_hidden_states=text[None],
            timestep=unique,
            timestep_indices=timestep_indices,
            token_tags=tags,
            position_ids=position_ids.to(torch.float32),
            video_indices=video_idx,
            audio_indices=audio_idx,
            text_indices=text_idx,
            return_dict=False,
        )
        return kwargs, video.shape

    def run(prepared) -> dict:
        kwargs, shape = prepared
        video_rows, audio_rows = model(**kwargs)
        return {"velocity_video": unpatchify(video_rows[0], shape).contiguous(), "velocity_audio": audio_rows[0]}

    warm, real = prepare(folder / "dit_warmup.safetensors"), prepare(folder / "dit_inputs.safetensors")
    return lambda: run(warm), lambda: run(real)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["vae", "dit"])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    common.set_threads(a.threads)
    with torch.inference_mode():
        warmup, run = (vae_runner if a.what == "vae" else dit_runner)(a.folder)
        warmup()
        out = None
        for _ in range(a.repeat):
            t0 = time.perf_counter()
            out = run()
            print(f"seconds {time.perf_counter() - t0:.4f}", flush=True)
    if a.out:
        save_file({k: v.float().contiguous() for k, v in out.items()}, str(a.out))


if __name__ == "__main__":
    main()
