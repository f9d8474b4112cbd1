"""Writes the end-to-end FL2VA reference vectors (tests/data/fl2va_pipeline): diffusers' own MiniMax-H3 modular
pipeline, workflow `fl2va`, run on the tiny conditioning model of `h3 make-tiny --conditioning`.

    ~/.cache/gst-h3/reference-venv/bin/python bench/reference/fl2va/make_pipeline_vectors.py \
        [--h3 build/tools/h3 | --model DIR] [OUT]

OUT defaults to tests/data/fl2va_pipeline. The model is written by `h3 make-tiny --conditioning` into a temporary
folder (or taken from --model DIR, a folder that command wrote, which is copied and left untouched). The copy gets
what diffusers' ModularPipeline needs beyond the engine's layout (see `prepare_folder`). Two seeded pictures are
saved as OUT/first.png and OUT/last.png, then the pipeline runs twice, fp32 on the CPU, with SDPA's math kernel:

- `first`: `image` = first.png;
- `first_last`: `image` = first.png, `last_image` = last.png;

both with the prompt PROMPT, num_frames 22, num_inference_steps 3 (sigma grid points: 2 transformer evaluations),
height and width unset (the canvas follows the first picture) and `generator=torch.Generator().manual_seed(7)`.
The pipeline is diffusers' own `fl2va` workflow (`MiniMaxH3Blocks().get_workflow("fl2va")`, exactly what
`ModularPipeline.from_pretrained(..., workflow="fl2va")` builds) without its two decode blocks: the request ends at
`denoise.after_denoise`, whose `latents` / `audio_latents` are the final latents before decoding (the pipeline has
no `output_type="latent"`; its decode steps take only pil / np / pt, and the tiny audio VAE is in the native
layout, which diffusers' AutoencoderKLMiniMaxH3Audio does not load).

Per case OUT/case_<name>.safetensors holds what the pipeline's state holds after the run, plus two recordings of
calls the blocks make (the token ids they give the text encoder, and every noise draw off the request's generator,
in order); OUT/cases.json lists the settings and shapes. What this script shares with
bench/reference/ref2va/make_pipeline_vectors.py (the pictures, the model folder, the pipeline subclass and its loading,
the recording and the checks) is in bench/reference/pipeline_common.py. No diffusers or transformers code is copied:
the scripts call the installed packages. The same inputs give the same bytes.
"""

import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/reference, for pipeline_common
from pipeline_common import (  # noqa: E402
    GENERATOR_SEED, IMAGE_PROCESSOR, NUM_INFERENCE_STEPS, PROMPT, PROMPT_EMBEDS_LAYOUT, REPO, RUN_SETTINGS, Recorder,
    add_pipeline_files, canvas_configs, check_draws, geometry_info, index_head, latent_layouts, load_pipeline,
    overrides, pictures_info, run_pipeline, save_case, save_pictures, schedule_info, start, text_outputs, tiny_model,
    workflow_blocks, write_index)

NUM_FRAMES = 22
PICTURE_SEED = 20260811
# name, width, height (as "96x72": width x height)
PICTURES = [("first", 96, 72), ("last", 64, 80)]
CASES = [("first", ("first",)), ("first_last", ("first", "last"))]
WORKFLOW = "fl2va"

COMPONENTS = {  # name: (library, class). No audio_vae: the decode steps that need it do not run.
    "text_encoder": ("transformers", "Qwen3VLForConditionalGeneration"),
    "tokenizer": ("transformers", "Qwen2TokenizerFast"),
    "processor": ("transformers", "Qwen3VLProcessor"),
    "transformer": ("diffusers", "MiniMaxH3Transformer3DModel"),
    "vae": ("diffusers", "AutoencoderKLMiniMaxH3"),
    "scheduler": ("diffusers", "MiniMaxH3Scheduler"),
    "audio_scheduler": ("diffusers", "MiniMaxH3Scheduler"),
}


def prepare_folder(model: Path) -> dict:
    """Adds to a copy of an `h3 make-tiny --conditioning` folder what diffusers' ModularPipeline needs, and returns
    the engine-side facts the pipeline is configured with.

    - modular_model_index.json: ModularPipeline resolves components and configs from it (model_index.json, which
      the engine reads, is kept). Its components are the ones the fl2va request loads; `canvas_short_edge` and
      `canvas_max_pixels` (pipeline configs) are set to the canvas rule the engine derives from the model's
      defaults (`canvas_configs`: the tiny model's 160 and 256 x 160), so both put a keyframe on the same canvas.
    - processor/: a Qwen3VLProcessor (Qwen2VLImageProcessor with Qwen3-VL's settings, IMAGE_PROCESSOR, over the
      folder's tokenizer): the text step takes the vision patches and the token type ids from it; the engine's
      folder has no processor.
    """
    index, canvas = canvas_configs(model)
    add_pipeline_files(model, COMPONENTS, canvas)
    return dict(canvas, text_encoder_layer=int(index["text_encoder_layer"]))


def run_case(pipe, name: str, anchors: tuple, pictures: dict) -> tuple[dict, dict]:
    kwargs = dict(prompt=PROMPT, num_frames=NUM_FRAMES, num_inference_steps=NUM_INFERENCE_STEPS)
    kwargs["image"] = pictures["first"]
    if "last" in anchors:
        kwargs["last_image"] = pictures["last"]
    rec = Recorder()
    state = run_pipeline(pipe, rec, **kwargs)
    get = state.get

    assert tuple(get("keyframe_anchors")) == anchors, get("keyframe_anchors")
    keyframes = [np.array(k.convert("RGB"), dtype=np.uint8) for k in get("keyframes")]
    conditions = get("condition_latents")
    video, audio = get("latents"), get("audio_latents")
    n_cond = len(conditions)
    a = int(get("num_audio_latents"))
    shapes = check_draws(rec.draws, conditions, video, audio, a)
    embeds, tags = text_outputs(get, rec.token_ids)

    tensors = {
        "height": torch.tensor(int(get("height")), dtype=torch.int64),
        "width": torch.tensor(int(get("width")), dtype=torch.int64),
        "input_ids": torch.tensor(rec.token_ids, dtype=torch.int64),
        "prompt_embeds": embeds[0],
        "text_token_tags": tags.to(torch.int64),
        "latents": video,
        "audio_latents": audio,
        "video_noise": rec.draws[n_cond],
        "audio_noise": rec.draws[n_cond + 1],
        "timesteps": get("timesteps").to(torch.float32),
        "audio_timesteps": get("audio_timesteps").to(torch.float32),
    }
    for i, (k, c) in enumerate(zip(keyframes, conditions)):
        tensors[f"keyframe{i}"] = torch.from_numpy(k)
        tensors[f"condition_latents{i}"] = c
        tensors[f"keyframe{i}_noise"] = rec.draws[i]
    tensors = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    info = {
        "name": name,
        "file": f"case_{name}.safetensors",
        "image": "first.png",
        "last_image": "last.png" if "last" in anchors else None,
        "keyframe_anchors": list(anchors),
        **geometry_info(get, a, int(embeds.shape[1])),
        "num_condition_video_rows": int(get("num_condition_video_rows")),
        **schedule_info(get, shapes, tensors),
    }
    return tensors, info


def main() -> None:
    a = start(__doc__, REPO / "tests" / "data" / "fl2va_pipeline")
    pictures = save_pictures(a.out, PICTURES, PICTURE_SEED)

    with tiny_model(a, WORKFLOW) as (model, origin, weights):
        facts = prepare_folder(model)
        pipe = load_pipeline(model, WORKFLOW, COMPONENTS, facts["text_encoder_layer"])

        cases = []
        for name, anchors in CASES:
            info = save_case(a.out, *run_case(pipe, name, anchors, pictures))
            cases.append(info)
            print(f"{name}: canvas {info['height']}x{info['width']}, text {info['num_text_tokens']}, "
                  f"latents {info['shapes']['latents']}, audio {info['shapes']['audio_latents']}")

    index = {
        **index_head(__file__, origin, weights, pipe, facts),
        "pipeline": {
            "workflow": WORKFLOW,
            "blocks": workflow_blocks(WORKFLOW),
            "call": {"prompt": PROMPT, "image": "first.png", "last_image": "last.png (case first_last)",
                     "num_frames": NUM_FRAMES, "num_inference_steps": NUM_INFERENCE_STEPS,
                     "generator": f"torch.Generator().manual_seed({GENERATOR_SEED})", "height": None, "width": None},
            **RUN_SETTINGS,
            "keyframe_noise_level": float(pipe.keyframe_noise_aug),
            "keyframe_encode_seed": int(pipe.keyframe_encode_seed),
            "image_processor": IMAGE_PROCESSOR,
            "overrides": overrides(pipe, facts),
        },
        "pictures": pictures_info(PICTURES, PICTURE_SEED),
        "layouts": {
            "prompt_embeds": PROMPT_EMBEDS_LAYOUT,
            **latent_layouts("keyframe"),
            "keyframe<i>": "[H, W, 3] uint8: the keyframe on the canvas (first: stretched, last: cover-cropped)",
            "condition_latents<i>": "[1, 24, 1, h, w]: the clean normalised keyframe latents",
        },
        "cases": cases,
    }
    write_index(a.out, index)


if __name__ == "__main__":
    main()
