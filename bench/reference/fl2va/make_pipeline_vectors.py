"""Writes the end-to-end FL2VA reference vectors (tests/data/fl2va_pipeline): diffusers' own MiniMax-H3 modular
pipeline, workflow `fl2va`, run on the tiny conditioning model of `h3 make-tiny --conditioning`.

    ~/.cache/gst-h3/reference-venv/bin/python bench/reference/fl2va/make_pipeline_vectors.py \
        [--h3 build/core/h3 | --model DIR] [OUT]

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
in order); OUT/cases.json lists the settings and shapes. No diffusers or transformers code is copied: the script
calls the installed packages. The same inputs give the same bytes.
"""

import argparse
import hashlib
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from safetensors.torch import save_file
from torch.nn.attention import SDPBackend, sdpa_kernel

import diffusers
import transformers
from diffusers.modular_pipelines.minimax_h3 import before_denoise, encoders
from diffusers.modular_pipelines.minimax_h3.modular_blocks_minimax_h3 import MiniMaxH3Blocks
from diffusers.modular_pipelines.minimax_h3.modular_pipeline import MiniMaxH3ModularPipeline
from transformers import AutoTokenizer, Qwen2VLImageProcessor, Qwen3VLProcessor, Qwen3VLVideoProcessor

REPO = Path(__file__).resolve().parents[3]
PROMPT = "a red kite over a green hill"
NUM_FRAMES = 22
NUM_INFERENCE_STEPS = 3  # sigma grid points, terminal 0 included: 2 transformer evaluations
GENERATOR_SEED = 7
TINY_SEED = 20260801  # h3 make-tiny's default
PICTURE_SEED = 20260811
# name, width, height (as "96x72": width x height)
PICTURES = [("first", 96, 72), ("last", 64, 80)]
CASES = [("first", ("first",)), ("first_last", ("first", "last"))]
WORKFLOW = "fl2va"

# Qwen3-VL's preprocessor_config.json (the release's processor/): patch 16, temporal patch 2, merge 2,
# mean = std = 0.5, size.shortest_edge 256 * 256 and size.longest_edge 4096 * 4096 pixels (the engine's
# ImageProcessorConfig in core/text/vision_config.h holds the same numbers).
IMAGE_PROCESSOR = dict(
    patch_size=16,
    temporal_patch_size=2,
    merge_size=2,
    image_mean=[0.5, 0.5, 0.5],
    image_std=[0.5, 0.5, 0.5],
    size={"shortest_edge": 65536, "longest_edge": 16777216},
    do_resize=True,
    do_rescale=True,
    do_normalize=True,
    do_convert_rgb=True,
)

COMPONENTS = {  # name: (library, class). No audio_vae: the decode steps that need it do not run.
    "text_encoder": ("transformers", "Qwen3VLForConditionalGeneration"),
    "tokenizer": ("transformers", "Qwen2TokenizerFast"),
    "processor": ("transformers", "Qwen3VLProcessor"),
    "transformer": ("diffusers", "MiniMaxH3Transformer3DModel"),
    "vae": ("diffusers", "AutoencoderKLMiniMaxH3"),
    "scheduler": ("diffusers", "MiniMaxH3Scheduler"),
    "audio_scheduler": ("diffusers", "MiniMaxH3Scheduler"),
}


class TinyMiniMaxH3Pipeline(MiniMaxH3ModularPipeline):
    """diffusers' MiniMax-H3 pipeline with two of its model constants set for the tiny model.

    - `text_encoder_layer`: which Qwen3-VL hidden state conditions the transformer. diffusers hard-codes the
      release's 50 as a read-only property of MiniMaxH3ModularPipeline (it ignores model_index.json's
      `text_encoder_layer`), and get_qwen3vl_prompt_embeds refuses an encoder of 50 layers or fewer. The tiny
      encoder has 3 layers and its model_index.json says 2 (what the engine reads), so the blocks read
      `components.text_encoder_layer` = 2 here: prompt_embeds = hidden_states[2].
    - `min_duration`: diffusers refuses a clip shorter than the release's 5 s (120 frames) in the layout step.
      22 frames (one VAE chunk: 17 + 5 frames, 7 latent frames; the engine's shortest generated clip) keep the
      reference small, so the floor is lowered to that one chunk. Nothing else reads it.
    """

    @property
    def text_encoder_layer(self):
        return self._tiny_text_encoder_layer

    @property
    def min_duration(self):
        return (17 + 5) / 24


def picture(width: int, height: int, seed: int) -> np.ndarray:
    """A smooth colour gradient plus seeded noise, uint8 [height, width, 3]."""
    g = torch.Generator().manual_seed(seed)
    y = torch.linspace(0, 1, height, dtype=torch.float32)[:, None, None]
    x = torch.linspace(0, 1, width, dtype=torch.float32)[None, :, None]
    base = 255 * (0.5 + 0.4 * torch.sin(5 * x + 3 * y + torch.tensor([0.0, 2.0, 4.0])))
    noisy = base + torch.randn(height, width, 3, generator=g) * 30
    return noisy.round().clamp(0, 255).to(torch.uint8).numpy()


def make_tiny(h3: Path, out: Path) -> None:
    subprocess.run([str(h3), "make-tiny", "--conditioning", "--seed", str(TINY_SEED), "--quiet", "--out", str(out)],
                   check=True)


def prepare_folder(model: Path) -> dict:
    """Adds to a copy of an `h3 make-tiny --conditioning` folder what diffusers' ModularPipeline needs, and returns
    the engine-side facts the pipeline is configured with.

    - modular_model_index.json: ModularPipeline resolves components and configs from it (model_index.json, which
      the engine reads, is kept). Its components are the ones the fl2va request loads; `canvas_short_edge` and
      `canvas_max_pixels` (pipeline configs, the release's 768 and 768 x 1344) are set to the canvas rule the
      engine derives from the model's defaults (core/engine/model.cpp plan_keyframes: short edge
      min(default_width, default_height), area default_width x default_height; the tiny model: 160 and
      256 x 160), so both put a keyframe on the same canvas.
    - processor/: a Qwen3VLProcessor (Qwen2VLImageProcessor with Qwen3-VL's settings, IMAGE_PROCESSOR, over the
      folder's tokenizer): the text step takes the vision patches and the token type ids from it; the engine's
      folder has no processor.
    """
    index = json.loads((model / "model_index.json").read_text())
    defaults = index["gst_h3"]
    width, height = int(defaults["default_width"]), int(defaults["default_height"])
    canvas = dict(canvas_short_edge=min(width, height), canvas_max_pixels=width * height)

    tokenizer = AutoTokenizer.from_pretrained(model / "tokenizer")
    processor = Qwen3VLProcessor(image_processor=Qwen2VLImageProcessor(**IMAGE_PROCESSOR), tokenizer=tokenizer,
                                 video_processor=Qwen3VLVideoProcessor())
    processor.save_pretrained(model / "processor")

    entries = {name: [lib, cls, {"subfolder": name, "type_hint": [lib, cls]}]
               for name, (lib, cls) in COMPONENTS.items()}
    modular = {"_class_name": "MiniMaxH3ModularPipeline", "_blocks_class_name": "MiniMaxH3Blocks", **canvas, **entries}
    (model / "modular_model_index.json").write_text(json.dumps(modular, indent=2) + "\n")
    return dict(canvas, text_encoder_layer=int(index["text_encoder_layer"]))


def load_pipeline(model: Path, text_encoder_layer: int) -> TinyMiniMaxH3Pipeline:
    # The fl2va workflow's blocks, as ModularPipeline.from_pretrained(model, workflow="fl2va") prunes them, less
    # the two decode blocks (`decode.video`, `decode.audio`): the request stops at the final latents.
    blocks = MiniMaxH3Blocks().get_workflow(WORKFLOW)
    for name in [n for n in blocks.sub_blocks if n.startswith("decode.")]:
        blocks.sub_blocks.pop(name)
    pipe = TinyMiniMaxH3Pipeline(blocks=blocks, pretrained_model_name_or_path=str(model))
    pipe._tiny_text_encoder_layer = text_encoder_layer
    # fp32 everywhere, as the engine computes on a CPU (the tiny text encoder is stored in bf16).
    pipe.load_components(names=list(COMPONENTS), dtype=torch.float32)
    missing = [name for name in COMPONENTS if getattr(pipe, name, None) is None]
    assert not missing, f"components not loaded: {missing}"
    pipe.set_progress_bar_config(disable=True)
    return pipe


class Recorder:
    """Observes two calls the blocks make, passing everything through unchanged: the token ids the text step
    gives the conditioner (encoders.get_qwen3vl_prompt_embeds) and every noise draw (before_denoise.randn_tensor,
    the only draws off the request's generator), in call order."""

    def __init__(self):
        self.token_ids, self.draws = None, []
        self._embeds, self._randn = encoders.get_qwen3vl_prompt_embeds, before_denoise.randn_tensor

    def __enter__(self):
        def embeds(text_encoder, processor, token_ids, *args, **kwargs):
            self.token_ids = list(token_ids)
            return self._embeds(text_encoder, processor, token_ids, *args, **kwargs)

        def randn(shape, *args, **kwargs):
            out = self._randn(shape, *args, **kwargs)
            self.draws.append(out.clone())
            return out

        encoders.get_qwen3vl_prompt_embeds, before_denoise.randn_tensor = embeds, randn
        return self

    def __exit__(self, *exc):
        encoders.get_qwen3vl_prompt_embeds, before_denoise.randn_tensor = self._embeds, self._randn


def run_case(pipe, name: str, anchors: tuple, pictures: dict) -> tuple[dict, dict]:
    kwargs = dict(prompt=PROMPT, num_frames=NUM_FRAMES, num_inference_steps=NUM_INFERENCE_STEPS,
                  generator=torch.Generator().manual_seed(GENERATOR_SEED))
    kwargs["image"] = pictures["first"]
    if "last" in anchors:
        kwargs["last_image"] = pictures["last"]
    with Recorder() as rec, sdpa_kernel([SDPBackend.MATH]), torch.no_grad():
        state = pipe(**kwargs)
    get = state.get

    assert tuple(get("keyframe_anchors")) == anchors, get("keyframe_anchors")
    keyframes = [np.array(k.convert("RGB"), dtype=np.uint8) for k in get("keyframes")]
    conditions = get("condition_latents")
    video, audio = get("latents"), get("audio_latents")
    n_cond = len(conditions)
    # The draws: one per keyframe (its noise for the keyframe level 0.999), then the video noise, then the audio
    # noise (rows: 2 channel-major blocks of A latents x 32 channels), all off the request's generator.
    shapes = [tuple(d.shape) for d in rec.draws]
    assert len(rec.draws) == n_cond + 2, shapes
    assert all(shapes[i] == tuple(conditions[i].shape) for i in range(n_cond)), shapes
    assert shapes[n_cond] == tuple(video.shape), shapes
    a = int(get("num_audio_latents"))
    assert shapes[n_cond + 1] == (2 * a, audio.shape[1]), shapes
    # Replaying the seed in that order gives the same numbers: the draw order is the generator's order.
    replay = torch.Generator().manual_seed(GENERATOR_SEED)
    for d in rec.draws:
        assert torch.equal(torch.randn(d.shape, generator=replay, dtype=torch.float32), d)

    embeds = get("prompt_embeds")
    assert embeds.shape[0] == 1 and embeds.dtype == torch.float32, (embeds.shape, embeds.dtype)
    tags = get("text_token_tags")
    assert len(rec.token_ids) == embeds.shape[1] == tags.shape[0]

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
        "height": int(get("height")),
        "width": int(get("width")),
        "num_frames": int(get("num_frames")),
        "num_latent_frames": int(get("num_latent_frames")),
        "latent_height": int(get("latent_height")),
        "latent_width": int(get("latent_width")),
        "num_audio_latents": a,
        "num_text_tokens": int(embeds.shape[1]),
        "num_condition_video_rows": int(get("num_condition_video_rows")),
        "evaluations": int(get("timesteps").numel()),
        "timesteps": [float(t) for t in get("timesteps")],
        "audio_timesteps": [float(t) for t in get("audio_timesteps")],
        "draws": [list(s) for s in shapes],
        "shapes": {k: list(v.shape) for k, v in sorted(tensors.items())},
        "dtypes": {k: str(v.dtype).replace("torch.", "") for k, v in sorted(tensors.items())},
    }
    return tensors, info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--h3", type=Path, default=REPO / "build" / "core" / "h3", help="the h3 binary (make-tiny)")
    src.add_argument("--model", type=Path, help="a folder `h3 make-tiny --conditioning` wrote (copied, not changed)")
    ap.add_argument("out", type=Path, nargs="?", default=REPO / "tests" / "data" / "fl2va_pipeline")
    a = ap.parse_args()
    torch.set_num_threads(1)
    a.out.mkdir(parents=True, exist_ok=True)

    pictures = {}
    for i, (name, w, h) in enumerate(PICTURES):
        Image.fromarray(picture(w, h, PICTURE_SEED + i)).save(a.out / f"{name}.png", format="PNG", optimize=False)
        # As a caller hands a decoded file to the pipeline.
        pictures[name] = Image.open(a.out / f"{name}.png").convert("RGB")

    with tempfile.TemporaryDirectory(prefix="h3-fl2va-pipeline-") as tmp:
        model = Path(tmp) / "model"
        if a.model is not None:
            shutil.copytree(a.model, model)
            origin = f"--model {a.model}"
        else:
            make_tiny(a.h3, model)
            origin = f"h3 make-tiny --conditioning --seed {TINY_SEED}"
        weights = {p.relative_to(model).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                   for p in sorted(model.rglob("*.safetensors"))}
        facts = prepare_folder(model)
        pipe = load_pipeline(model, facts["text_encoder_layer"])
        te = pipe.text_encoder.config.text_config
        assert te.num_hidden_layers > facts["text_encoder_layer"]

        cases = []
        for name, anchors in CASES:
            tensors, info = run_case(pipe, name, anchors, pictures)
            save_file(tensors, str(a.out / info["file"]))
            cases.append(info)
            print(f"{name}: canvas {info['height']}x{info['width']}, text {info['num_text_tokens']}, "
                  f"latents {info['shapes']['latents']}, audio {info['shapes']['audio_latents']}")

    index = {
        "script": "bench/reference/fl2va/make_pipeline_vectors.py",
        "versions": {"diffusers": diffusers.__version__, "transformers": transformers.__version__,
                     "torch": torch.__version__, "Pillow": Image.__version__},
        "model": {"origin": origin, "seed": TINY_SEED, "safetensors_sha256": weights,
                  "text_encoder_layers": int(te.num_hidden_layers), **facts},
        "pipeline": {
            "workflow": WORKFLOW,
            "blocks": "MiniMaxH3Blocks().get_workflow('fl2va') less decode.video and decode.audio",
            "call": {"prompt": PROMPT, "image": "first.png", "last_image": "last.png (case first_last)",
                     "num_frames": NUM_FRAMES, "num_inference_steps": NUM_INFERENCE_STEPS,
                     "generator": f"torch.Generator().manual_seed({GENERATOR_SEED})", "height": None, "width": None},
            "dtype": "float32", "device": "cpu", "attention": "SDPA math kernel", "threads": 1,
            "num_inference_steps_means": "sigma grid points, terminal 0 included: N points, N - 1 evaluations "
                                         "(the engine's steps)",
            "keyframe_noise_level": float(pipe.keyframe_noise_aug),
            "keyframe_encode_seed": int(pipe.keyframe_encode_seed),
            "image_processor": IMAGE_PROCESSOR,
            "overrides": {"text_encoder_layer": facts["text_encoder_layer"], "min_duration_s": pipe.min_duration},
        },
        "pictures": [{"file": f"{n}.png", "width": w, "height": h, "seed": PICTURE_SEED + i}
                     for i, (n, w, h) in enumerate(PICTURES)],
        "layouts": {
            "prompt_embeds": "[L, text_dim]: hidden_states[text_encoder_layer][0] of the Qwen3-VL text model",
            "latents": "[1, 24, T, h, w]: the generated video latents (normalised), keyframe rows dropped",
            "audio_latents": "[2, 32, A]: stereo channel = batch item, then latent channel, then time (the "
                             "pipeline's after-denoise layout, what the mono audio VAE decodes)",
            "audio_noise": "[2 * A, 32]: rows, channel-major (left channel's A rows, then the right's)",
            "keyframe<i>": "[H, W, 3] uint8: the keyframe on the canvas (first: stretched, last: cover-cropped)",
            "condition_latents<i>": "[1, 24, 1, h, w]: the clean normalised keyframe latents",
        },
        "cases": cases,
    }
    (a.out / "cases.json").write_text(json.dumps(index, indent=1) + "\n")


if __name__ == "__main__":
    main()
