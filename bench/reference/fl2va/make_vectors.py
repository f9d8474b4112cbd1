"""Writes the FL2VA keyframe reference vectors (tests/data/fl2va): diffusers' own layout step and
transformer on the tiny golden transformer (tests/data/golden/h3_dit/transformer_tiny), for keyframes
anchored at the first latent frame, the last one, and both.

    python make_vectors.py GOLDEN_TRANSFORMER OUT

Per case: the text [L, 64], the generated video latents [1, 24, T, h, w] and audio rows [2A, 32], the
clean keyframe latents [1, 24, 1, h, w] each and the noise each is mixed with (the scheduler's
`scale_noise` at the keyframe level 0.999, as diffusers' FL2VA step does), the noised keyframes, the
packed positions and tags of diffusers' `build_packed_sequence` (for the record), the row timesteps of
its `build_row_timesteps` (keyframe rows at max(t_video, 0.999)), the transformer's velocities of the
generated rows, and one Euler step of the generated rows on a 2-point grid through diffusers' scheduler.
Attention runs through SDPA's math kernel, as the project's other reference vectors do.
"""

import json
import sys
from pathlib import Path

import torch
from diffusers import MiniMaxH3Transformer3DModel
from diffusers.modular_pipelines.minimax_h3.before_denoise import (
    MiniMaxH3PrepareLayoutStep,
    patchify_video_latents,
)
from diffusers.schedulers.scheduling_minimax_h3 import MiniMaxH3Scheduler
from safetensors.torch import save_file
from torch.nn.attention import SDPBackend, sdpa_kernel

KEYFRAME_T = 0.999  # diffusers' components.keyframe_noise_aug


def unpatchify(rows: torch.Tensor, c: int, t: int, h: int, w: int) -> torch.Tensor:
    """[t * h/2 * w/2, c * 4] -> [1, c, t, h, w] (the inverse of patchify_video_latents)."""
    return rows.reshape(t, h // 2, w // 2, c, 2, 2).permute(3, 0, 1, 4, 2, 5).reshape(1, c, t, h, w)


def run_case(model, name: str, anchors: tuple, t_video: float, t_audio: float, seed: int) -> dict:
    gen = torch.Generator().manual_seed(seed)
    L, T, H, W, A = 5, 7, 4, 6, 37
    text = torch.randn(L, model.config.text_dim, generator=gen)
    # As diffusers draws them: the keyframes' noise first (one draw per keyframe), then the media.
    clean = [torch.randn(1, 24, 1, H, W, generator=gen) for _ in anchors]
    noise = [torch.randn(1, 24, 1, H, W, generator=gen) for _ in anchors]
    video = torch.randn(1, 24, T, H, W, generator=gen)
    audio = torch.randn(2 * A, 32, generator=gen)
    sched = MiniMaxH3Scheduler(shift=12.0)
    noised = [sched.scale_noise(z, KEYFRAME_T, n) for z, n in zip(clean, noise)]

    patch = tuple(model.config.patch_size)
    pos, tags, vi, ai, ti, n_cond, n_cond_audio = MiniMaxH3PrepareLayoutStep.build_packed_sequence(
        torch.ones(L, dtype=torch.long), T, H, W, A, patch, 2, 2, 0, keyframe_anchors=anchors)
    assert n_cond_audio == 0
    cond_t = max(float(torch.tensor(t_video, dtype=torch.float32)), KEYFRAME_T)
    row_t = torch.full((pos.shape[0],), t_video, dtype=torch.float32)
    row_t[vi[:n_cond]] = cond_t
    row_t[ai] = t_audio
    unique, index = torch.unique(row_t, sorted=True, return_inverse=True)
    rows = torch.cat([patchify_video_latents(k, patch) for k in noised] + [patchify_video_latents(video, patch)])
    with torch.no_grad(), sdpa_kernel([SDPBackend.MATH]):
        v_rows, a_rows = model(
            hidden_states=rows[None], audio_hidden_states=audio[None], encoder_hidden_states=text[None],
            timestep=unique, timestep_indices=index, token_tags=tags, position_ids=pos.to(torch.float32),
            video_indices=vi, audio_indices=ai, text_indices=ti, return_dict=False)
    velocity_video = unpatchify(v_rows[0, n_cond:], 24, T, H, W).contiguous()
    velocity_audio = a_rows[0].contiguous()

    # One Euler step of the generated rows on a 2-point grid (one evaluation, from its own t).
    step = MiniMaxH3Scheduler(shift=12.0)
    step.set_timesteps(2)
    out = {
        "text": text, "video": video, "audio": audio,
        "t_video": torch.tensor(t_video, dtype=torch.float32), "t_audio": torch.tensor(t_audio, dtype=torch.float32),
        "positions": pos, "tags": tags, "row_timesteps": row_t,
        "velocity_video": velocity_video, "velocity_audio": velocity_audio,
    }
    for i, (z, n, k) in enumerate(zip(clean, noise, noised)):
        out[f"keyframe{i}_clean"], out[f"keyframe{i}_noise"], out[f"keyframe{i}_noised"] = z, n, k
    if name == "first_last":
        t0 = step.timesteps[0]
        out["step_t"] = torch.tensor(float(t0), dtype=torch.float32)
        out["step_video"] = step.step(velocity_video, t0, video, return_dict=False)[0].contiguous()
    return out


def main() -> None:
    golden, out_dir = Path(sys.argv[1]), Path(sys.argv[2])
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    model = MiniMaxH3Transformer3DModel.from_pretrained(str(golden), torch_dtype=torch.float32).eval()
    cases = [
        ("first", ("first",), 0.3, 0.6, 1),
        ("last", ("last",), 0.3, 0.6, 2),
        ("first_last", ("first", "last"), 0.0, 0.0, 3),
        ("first_late", ("first",), 0.9995, 0.5, 4),  # t_video above the keyframe level: max() takes it
    ]
    index = []
    for name, anchors, tv, ta, seed in cases:
        tensors = run_case(model, name, anchors, tv, ta, seed)
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(out_dir / f"case_{name}.safetensors"))
        index.append({"name": name, "anchors": list(anchors), "t_video": tv, "t_audio": ta, "seed": seed,
                      "file": f"case_{name}.safetensors"})
        print(f"{name}: rows {tensors['positions'].shape[0]}, |v| {tensors['velocity_video'].abs().max():.3f}")
    (out_dir / "cases.json").write_text(json.dumps({"keyframe_t": KEYFRAME_T, "cases": index}, indent=1) + "\n")


if __name__ == "__main__":
    main()
