"""Writes the Ref2VA image-reference vectors (tests/data/ref2va): diffusers' own layout and row-timestep
steps and its transformer on the tiny golden transformer (tests/data/golden/h3_dit/transformer_tiny), for
image references, each one latent frame at its own latent size, ahead of the generated audio and video.

    python make_vectors.py GOLDEN_TRANSFORMER [OUT]      (OUT defaults to tests/data/ref2va)

Per case: the text [L, 64] and its tags [L] (some rows tagged 0, as a reference's vision block is), the
generated video latents [1, 24, T, h, w] and audio rows [2A, 32], every image reference's clean latents
[1, 24, 1, h_i, w_i], the noise it is mixed with and the mix (the scheduler's `scale_noise` at the
conditioning level 0.999, as diffusers' MiniMaxH3PrepareConditionLatentsStep does), the packed positions
and tags of diffusers' `build_ref2va_packed_sequence`, the row timesteps of its `build_row_timesteps` (with
the arguments MiniMaxH3SetTimestepsStep passes: reference rows at max(t_video, 0.999), reference audio at
1.0), the transformer's velocities of the generated rows, and one Euler step of the generated video on the
2-point grid that starts at the case's own t (sigmas [1 - t_video, 0], through diffusers' scheduler).
Attention runs through SDPA's math kernel, as the project's other reference vectors do.
"""

import json
import os
import sys
from pathlib import Path

import torch
from diffusers import MiniMaxH3Transformer3DModel
from diffusers.modular_pipelines.minimax_h3 import MiniMaxH3ModularPipeline
from diffusers.modular_pipelines.minimax_h3.before_denoise import (
    MiniMaxH3Ref2VAPrepareLayoutStep,
    MiniMaxH3SetTimestepsStep,
    patchify_video_latents,
)
from diffusers.modular_pipelines.minimax_h3.references import MiniMaxH3ImageReference
from diffusers.schedulers.scheduling_minimax_h3 import MiniMaxH3Scheduler
from PIL import Image
from safetensors.torch import save_file
from torch.nn.attention import SDPBackend, sdpa_kernel

# The pipeline's constants, read from diffusers' own properties rather than restated.
_PIPE = MiniMaxH3ModularPipeline.__new__(MiniMaxH3ModularPipeline)
CONDITION_T = MiniMaxH3ModularPipeline.keyframe_noise_aug.fget(_PIPE)  # 0.999
AUDIO_CHANNELS = MiniMaxH3ModularPipeline.audio_channels.fget(_PIPE)  # 2
AUDIO_TAG = MiniMaxH3ModularPipeline.audio_tag.fget(_PIPE)  # 2
VIDEO_TAG = MiniMaxH3ModularPipeline.video_tag.fget(_PIPE)  # 0
REFERENCE_AUDIO_T = 1.0  # what MiniMaxH3SetTimestepsStep passes as condition_audio_timestep (no audio refs here)


def unpatchify(rows: torch.Tensor, c: int, t: int, h: int, w: int) -> torch.Tensor:
    """[t * h/2 * w/2, c * 4] -> [1, c, t, h, w] (the inverse of patchify_video_latents)."""
    return rows.reshape(t, h // 2, w // 2, c, 2, 2).permute(3, 0, 1, 4, 2, 5).reshape(1, c, t, h, w)


def run_case(model, case: dict) -> dict:
    gen = torch.Generator().manual_seed(case["seed"])
    text_tags = torch.tensor(case["text_tags"], dtype=torch.long)
    L = text_tags.shape[0]
    T, H, W, A = case["video"]
    sizes = case["references"]
    # Draw order: text, the clean references, each reference's noise (one draw per reference, in packed order,
    # as the condition step draws them, before the generated rows' noise), then the generated video and audio.
    text = torch.randn(L, model.config.text_dim, generator=gen)
    clean = [torch.randn(1, 24, 1, h, w, generator=gen) for h, w in sizes]
    noise = [torch.randn(1, 24, 1, h, w, generator=gen) for h, w in sizes]
    video = torch.randn(1, 24, T, H, W, generator=gen)
    audio = torch.randn(AUDIO_CHANNELS * A, 32, generator=gen)
    sched = MiniMaxH3Scheduler(shift=12.0)
    noised = [sched.scale_noise(z, CONDITION_T, n) for z, n in zip(clean, noise)]

    # build_ref2va_packed_sequence reads only `.kind` of a reference; the geometry comes from the latents.
    references = [MiniMaxH3ImageReference(image=Image.new("RGB", (2, 2))) for _ in sizes]
    patch = tuple(model.config.patch_size)
    pos, tags, vi, ai, ti, n_cond, n_cond_audio = MiniMaxH3Ref2VAPrepareLayoutStep.build_ref2va_packed_sequence(
        text_tags, references, noised, [], T, H, W, A, patch, AUDIO_CHANNELS, AUDIO_TAG, VIDEO_TAG)
    assert n_cond_audio == 0
    assert n_cond == sum((h // patch[1]) * (w // patch[2]) for h, w in sizes)

    # The arguments MiniMaxH3SetTimestepsStep.__call__ passes: the timesteps are float32 schedule entries.
    t_video = float(torch.tensor(case["t_video"], dtype=torch.float32))
    t_audio = float(torch.tensor(case["t_audio"], dtype=torch.float32))
    unique, index = MiniMaxH3SetTimestepsStep.build_row_timesteps(
        vi, ai, n_cond, n_cond_audio, ti.numel(), t_video, t_audio, max(t_video, CONDITION_T), REFERENCE_AUDIO_T)
    row_t = unique[index]

    rows = torch.cat([patchify_video_latents(k, patch) for k in noised] + [patchify_video_latents(video, patch)])
    with torch.no_grad(), sdpa_kernel([SDPBackend.MATH]):
        v_rows, a_rows = model(
            hidden_states=rows[None], audio_hidden_states=audio[None], encoder_hidden_states=text[None],
            timestep=unique, timestep_indices=index, token_tags=tags, position_ids=pos,
            video_indices=vi, audio_indices=ai, text_indices=ti, return_dict=False)
    velocity_video = unpatchify(v_rows[0, n_cond:], 24, T, H, W).contiguous()
    velocity_audio = a_rows[0, n_cond_audio:].contiguous()

    # One Euler step of the generated video on a 2-point grid that starts where the velocity was evaluated
    # (sigmas [1 - t_video, 0]; the step reads sigma from the timestep it is given, exactly t_video).
    step = MiniMaxH3Scheduler(shift=12.0)
    step.set_timesteps(sigmas=[1.0 - t_video, 0.0])
    step.set_begin_index(0)
    step_video = step.step(velocity_video, torch.tensor(t_video, dtype=torch.float32), video, return_dict=False)[0]

    out = {
        "text": text, "tags": text_tags, "video": video, "audio": audio,
        "t_video": torch.tensor(t_video, dtype=torch.float32), "t_audio": torch.tensor(t_audio, dtype=torch.float32),
        "positions": pos, "token_tags": tags, "row_timesteps": row_t,
        "velocity_video": velocity_video, "velocity_audio": velocity_audio,
        "step_video": step_video.contiguous(),
    }
    for i, (z, n, k) in enumerate(zip(clean, noise, noised)):
        out[f"reference_{i}_clean"], out[f"reference_{i}_noise"], out[f"reference_{i}"] = z, n, k
    layout = {"num_rows": int(pos.shape[0]), "num_reference_video_rows": int(n_cond),
              "video_indices_first": int(vi[0]), "target_audio_first": int(ai[0]),
              "target_video_first": int(vi[n_cond])}
    return out, layout


CASES = [
    {"name": "two_images", "seed": 11, "text_tags": [1, 1, 0, 0, 1], "video": [7, 4, 6, 37],
     "references": [[6, 4], [4, 8]], "t_video": 0.3, "t_audio": 0.5},
    # t_video above the conditioning level: max() takes it, so the reference rows follow t_video.
    {"name": "one_image", "seed": 12, "text_tags": [1, 1, 0, 0, 1], "video": [7, 4, 6, 37],
     "references": [[8, 6]], "t_video": 0.9995, "t_audio": 0.2},
]


def main() -> None:
    golden = Path(sys.argv[1])
    out_dir = Path(sys.argv[2]) if len(sys.argv) > 2 else Path("tests/data/ref2va")
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    model = MiniMaxH3Transformer3DModel.from_pretrained(str(golden), torch_dtype=torch.float32).eval()
    index = []
    for case in CASES:
        tensors, layout = run_case(model, case)
        path = out_dir / f"case_{case['name']}.safetensors"
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(path))
        os.chmod(path, 0o644)
        index.append({**case, **layout, "file": path.name})
        pos, n_text = tensors["positions"], len(case["text_tags"])
        ref_t = sorted(set(pos[n_text:n_text + layout["num_reference_video_rows"], 0].tolist()))
        print(f"{case['name']}: rows {layout['num_rows']}, reference rows' t {ref_t}, "
              f"target audio first position {pos[layout['target_audio_first']].tolist()}, "
              f"target video first position {pos[layout['target_video_first']].tolist()}, "
              f"row timesteps {sorted(set(tensors['row_timesteps'].tolist()))}, "
              f"|v| {tensors['velocity_video'].abs().max():.3f}, {path.stat().st_size} bytes")
    meta = {"condition_t": CONDITION_T, "reference_audio_t": REFERENCE_AUDIO_T,
            "video_layout": "[T, h, w, A]: video latents [1, 24, T, h, w], audio rows [2A, 32]",
            "references_layout": "[h, w] of each image reference's latents [1, 24, 1, h, w]", "cases": index}
    (out_dir / "cases.json").write_text(json.dumps(meta, indent=1) + "\n")


if __name__ == "__main__":
    main()
