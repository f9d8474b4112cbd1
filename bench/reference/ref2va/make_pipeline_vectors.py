"""Writes the end-to-end Ref2VA reference vectors (tests/data/ref2va_pipeline): diffusers' own MiniMax-H3 modular
pipeline, workflow `ref2va` with image references only, run on the tiny conditioning model of
`h3 make-tiny --conditioning`.

    ~/.cache/gst-h3/reference-venv/bin/python bench/reference/ref2va/make_pipeline_vectors.py \
        [--h3 build/core/h3 | --model DIR] [OUT]

OUT defaults to tests/data/ref2va_pipeline. The model is written by `h3 make-tiny --conditioning` into a temporary
folder (or taken from --model DIR, a folder that command wrote, which is copied and left untouched). The copy gets
what diffusers' ModularPipeline needs beyond the engine's layout (see `prepare_folder`). Three seeded pictures are
saved as OUT/a.png (96 x 72), OUT/b.png (64 x 80) and OUT/c.png (50 x 120, whose 96 short-edge scaling rounds), then
the pipeline runs three times, fp32 on the CPU, with SDPA's math kernel:

- `one`: `references` = [a.png], height and width unset;
- `two`: `references` = [a.png, b.png], height and width unset;
- `three_sized`: `references` = [b.png, c.png, a.png], height 192 and width 224 passed;

every reference a `MiniMaxH3ImageReference(image=Image.open(png).convert("RGB"))`, all with the prompt PROMPT,
num_frames 22, num_inference_steps 3 (sigma grid points: 2 transformer evaluations) and
`generator=torch.Generator().manual_seed(7)`. Unset, the canvas is the model's 16:9 rule (diffusers'
`resolve_canvas_size(16, 9, ...)` over the canvas configs below: references never bind the generated geometry).
The pipeline is diffusers' own `ref2va` workflow (`MiniMaxH3Blocks().get_workflow("ref2va")`, exactly what
`ModularPipeline.from_pretrained(..., workflow="ref2va")` builds) without its two decode blocks: the request ends at
`denoise.after_denoise`, whose `latents` / `audio_latents` are the final latents before decoding (the pipeline has
no `output_type="latent"`; its decode steps take only pil / np / pt).

The audio VAE. The ref2va reference-encoder step reads `components.audio_vae.config.latents_mean` / `latents_std`
before it looks at the references, so it needs an `audio_vae` component even for image references, which never
reach it; and the tiny audio VAE is in the native layout (decoder only), which diffusers'
AutoencoderKLMiniMaxH3Audio does not load. So after loading, the script gives the pipeline a stand-in through
`update_components(audio_vae=...)` (see `audio_vae_stand_in`): a diffusers AutoencoderKLMiniMaxH3Audio *constructed*
from the tiny audio VAE's own config.json values that diffusers reads off `.config` (latent_channels 32, its
sample_rate 32000 as `sampling_rate`, its latents_mean / latents_std) and the decoder geometry its metadata.json
records, with a 2-wide encoder (the tiny one has none). Its random weights (made under a forked global RNG, so no
other draw moves) never run: with image references only, the step encodes no audio; the script asserts that
`audio_condition_latents` is empty and that no reference audio rows were packed. The only other reads of the
component are `audio_latent_channels` (32 either way: the generated audio noise's width) and `audio_sampling_rate`
(read only for a reference soundtrack), so no number of the request depends on the stand-in.

Per case OUT/case_<name>.safetensors holds what the pipeline's state holds after the run (the layout included:
rotary positions, tags, row indices and every step's row timesteps), plus recordings of calls the blocks make (the
token ids and vision grids they give the text encoder, and every noise draw off the request's generator, in order);
OUT/cases.json lists the settings and shapes. No diffusers or transformers code is copied: the script calls the
installed packages. The same inputs give the same bytes.
"""

import argparse
import hashlib
import json
import shutil
import subprocess
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from safetensors.torch import save_file
from torch.nn.attention import SDPBackend, sdpa_kernel

import diffusers
import transformers
from diffusers import AutoencoderKLMiniMaxH3Audio
from diffusers.modular_pipelines.minimax_h3 import before_denoise, encoders
from diffusers.modular_pipelines.minimax_h3.modular_blocks_minimax_h3 import MiniMaxH3Blocks
from diffusers.modular_pipelines.minimax_h3.modular_pipeline import MiniMaxH3ModularPipeline
from diffusers.modular_pipelines.minimax_h3.references import MiniMaxH3ImageReference
from transformers import AutoTokenizer, Qwen2VLImageProcessor, Qwen3VLProcessor, Qwen3VLVideoProcessor

REPO = Path(__file__).resolve().parents[3]
PROMPT = "a red kite over a green hill"
NUM_FRAMES = 22
NUM_INFERENCE_STEPS = 3  # sigma grid points, terminal 0 included: 2 transformer evaluations
GENERATOR_SEED = 7
TINY_SEED = 20260801  # h3 make-tiny's default
PICTURE_SEED = 20260821
# name, width, height (as "96x72": width x height). c's 96 short edge scales 120 to 230.4, which rounds to 224.
PICTURES = [("a", 96, 72), ("b", 64, 80), ("c", 50, 120)]
# name, references (in packed order), (height, width) or None for the unset canvas
CASES = [
    ("one", ("a",), None),
    ("two", ("a", "b"), None),
    ("three_sized", ("b", "c", "a"), (192, 224)),
]
WORKFLOW = "ref2va"

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

COMPONENTS = {  # name: (library, class). audio_vae is a stand-in set after loading (audio_vae_stand_in).
    "text_encoder": ("transformers", "Qwen3VLForConditionalGeneration"),
    "tokenizer": ("transformers", "Qwen2TokenizerFast"),
    "processor": ("transformers", "Qwen3VLProcessor"),
    "transformer_ref": ("diffusers", "MiniMaxH3Transformer3DModel"),
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
    - `min_duration`: diffusers refuses a clip shorter than the release's 5 s (120 frames) in the ref2va setup
      step (on the aligned frame count). 22 frames (one VAE chunk: 17 + 5 frames, 7 latent frames; the engine's
      shortest generated clip) keep the reference small, so the floor is lowered to that one chunk. Nothing else
      reads it.
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
      the engine reads, is kept). Its components are the ones the ref2va request loads (the DiT is
      `transformer_ref`, the folder's second DiT); `canvas_short_edge` and `canvas_max_pixels` (pipeline configs,
      the release's 768 and 768 x 1344) are set to the canvas rule the engine derives from the model's defaults
      (core/engine/model.cpp plan_keyframes: short edge min(default_width, default_height), area
      default_width x default_height; the tiny model: 160 and 256 x 160), and `reference_image_short_edge` (the
      release's 2048) to model_index.json's gst_h3.reference_short_edge (the tiny model: 96).
    - processor/: a Qwen3VLProcessor (Qwen2VLImageProcessor with Qwen3-VL's settings, IMAGE_PROCESSOR, over the
      folder's tokenizer): the text step takes the vision patches and the token type ids from it; the engine's
      folder has no processor.
    """
    index = json.loads((model / "model_index.json").read_text())
    defaults = index["gst_h3"]
    width, height = int(defaults["default_width"]), int(defaults["default_height"])
    configs = dict(canvas_short_edge=min(width, height), canvas_max_pixels=width * height,
                   reference_image_short_edge=int(defaults["reference_short_edge"]))

    tokenizer = AutoTokenizer.from_pretrained(model / "tokenizer")
    processor = Qwen3VLProcessor(image_processor=Qwen2VLImageProcessor(**IMAGE_PROCESSOR), tokenizer=tokenizer,
                                 video_processor=Qwen3VLVideoProcessor())
    processor.save_pretrained(model / "processor")

    entries = {name: [lib, cls, {"subfolder": name, "type_hint": [lib, cls]}]
               for name, (lib, cls) in COMPONENTS.items()}
    modular = {"_class_name": "MiniMaxH3ModularPipeline", "_blocks_class_name": "MiniMaxH3Blocks", **configs,
               **entries}
    (model / "modular_model_index.json").write_text(json.dumps(modular, indent=2) + "\n")
    return dict(configs, text_encoder_layer=int(index["text_encoder_layer"]))


def audio_vae_stand_in(model: Path) -> tuple[AutoencoderKLMiniMaxH3Audio, dict]:
    """The `audio_vae` component the ref2va reference-encoder step reads the config of (module docstring): diffusers'
    AutoencoderKLMiniMaxH3Audio constructed, not loaded, with the tiny audio VAE's config values and decoder
    geometry. Returns it and the arguments it was built with."""
    config = json.loads((model / "audio_vae" / "config.json").read_text())
    native = json.loads((model / "audio_vae" / "metadata.json").read_text())["metadata"]["kwargs"]
    args = dict(
        encoder_dim=2,  # the tiny audio VAE has no encoder: the narrowest one diffusers' class builds
        latent_dim=int(native["latent_dim"]),
        latent_channels=int(config["latent_channels"]),
        num_attention_heads=1,
        decoder_dim=int(native["decoder_dim"]),
        decoder_rates=tuple(native["decoder_rates"]),
        decoder_kernel_sizes=tuple(native["decoder_kernel_sizes"]),
        resblock_kernel_sizes=tuple(native["resblock_kernel_sizes"]),
        resblock_dilation_sizes=tuple(tuple(d) for d in native["resblock_dilation_sizes"]),
        sampling_rate=int(config["sample_rate"]),
        latents_mean=[float(v) for v in config["latents_mean"]],
        latents_std=[float(v) for v in config["latents_std"]],
    )
    assert len(args["latents_mean"]) == len(args["latents_std"]) == args["latent_channels"]
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch's weight_norm deprecation, in diffusers' decoder
        vae = AutoencoderKLMiniMaxH3Audio(**args).eval()
    return vae, args


def load_pipeline(model: Path, text_encoder_layer: int) -> TinyMiniMaxH3Pipeline:
    # The ref2va workflow's blocks, as ModularPipeline.from_pretrained(model, workflow="ref2va") prunes them, less
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
    """Observes two calls the blocks make, passing everything through unchanged: the token ids and vision inputs the
    text step gives the conditioner (encoders.get_qwen3vl_prompt_embeds) and every noise draw
    (before_denoise.randn_tensor, the only draws off the request's generator), in call order."""

    def __init__(self):
        self.token_ids, self.vision_inputs, self.draws = None, None, []
        self._embeds, self._randn = encoders.get_qwen3vl_prompt_embeds, before_denoise.randn_tensor

    def __enter__(self):
        def embeds(text_encoder, processor, token_ids, vision_inputs=None, *args, **kwargs):
            self.token_ids = list(token_ids)
            self.vision_inputs = dict(vision_inputs or {})
            return self._embeds(text_encoder, processor, token_ids, vision_inputs, *args, **kwargs)

        def randn(shape, *args, **kwargs):
            out = self._randn(shape, *args, **kwargs)
            self.draws.append(out.clone())
            return out

        encoders.get_qwen3vl_prompt_embeds, before_denoise.randn_tensor = embeds, randn
        return self

    def __exit__(self, *exc):
        encoders.get_qwen3vl_prompt_embeds, before_denoise.randn_tensor = self._embeds, self._randn


def vision_blocks(token_ids: list, tokenizer) -> list:
    """(start, number of pad ids) of every `<|vision_start|> pad... <|vision_end|>` block of a presentation."""
    start, end = (tokenizer.convert_tokens_to_ids(t) for t in ("<|vision_start|>", "<|vision_end|>"))
    blocks, i = [], 0
    while i < len(token_ids):
        if token_ids[i] == start:
            j = token_ids.index(end, i)
            blocks.append((i, j - i - 1))
            i = j
        i += 1
    return blocks


def run_case(pipe, name: str, refs: tuple, canvas, pictures: dict) -> tuple[dict, dict]:
    references = [MiniMaxH3ImageReference(image=pictures[r]) for r in refs]
    kwargs = dict(prompt=PROMPT, references=references, num_frames=NUM_FRAMES,
                  num_inference_steps=NUM_INFERENCE_STEPS, generator=torch.Generator().manual_seed(GENERATOR_SEED))
    if canvas is not None:
        kwargs["height"], kwargs["width"] = canvas
    with Recorder() as rec, sdpa_kernel([SDPBackend.MATH]), torch.no_grad():
        state = pipe(**kwargs)
    get = state.get

    normalized = get("normalized_references")
    assert [r.kind for r in normalized] == ["image"] * len(refs), normalized
    images = [np.array(r.image.convert("RGB"), dtype=np.uint8) for r in normalized]
    conditions = get("condition_latents")
    # Image references only: nothing reached the audio VAE stand-in, and no reference audio rows were packed.
    assert list(get("audio_condition_latents")) == [], get("audio_condition_latents")
    assert int(get("num_condition_audio_rows")) == 0
    video, audio = get("latents"), get("audio_latents")
    n_ref = len(conditions)
    assert n_ref == len(refs)
    # The draws: one per reference in packed order (its noise for the conditioning level 0.999), then the video
    # noise, then the audio noise (rows: 2 channel-major blocks of A latents x 32 channels), all off the request's
    # generator.
    shapes = [tuple(d.shape) for d in rec.draws]
    assert len(rec.draws) == n_ref + 2, shapes
    assert all(shapes[i] == tuple(conditions[i].shape) for i in range(n_ref)), shapes
    assert shapes[n_ref] == tuple(video.shape), shapes
    a = int(get("num_audio_latents"))
    assert shapes[n_ref + 1] == (2 * a, audio.shape[1]), shapes
    # Replaying the seed in that order gives the same numbers: the draw order is the generator's order.
    replay = torch.Generator().manual_seed(GENERATOR_SEED)
    for d in rec.draws:
        assert torch.equal(torch.randn(d.shape, generator=replay, dtype=torch.float32), d)

    embeds = get("prompt_embeds")
    assert embeds.shape[0] == 1 and embeds.dtype == torch.float32, (embeds.shape, embeds.dtype)
    tags = get("text_token_tags")
    L = embeds.shape[1]
    assert len(rec.token_ids) == L == tags.shape[0]
    blocks = vision_blocks(rec.token_ids, pipe.tokenizer)
    grids = rec.vision_inputs["image_grid_thw"].to(torch.int64)
    merge = pipe.processor.image_processor.merge_size ** 2
    assert [n for _, n in blocks] == [int(g.prod()) // merge for g in grids], (blocks, grids)

    # The packed layout: [text | reference blocks | target audio | target video].
    positions = get("position_ids")
    assert positions.dtype == torch.float64, positions.dtype
    video_idx, audio_idx, text_idx = get("video_indices"), get("audio_indices"), get("text_indices")
    n_cond = int(get("num_condition_video_rows"))
    patch = pipe.patch_size
    ref_rows = [int(c.shape[2] * (c.shape[3] // patch[1]) * (c.shape[4] // patch[2])) for c in conditions]
    assert n_cond == sum(ref_rows), (n_cond, ref_rows)
    ref_times, row = [], L
    for rows in ref_rows:
        times = positions[row:row + rows, 0].unique()
        assert times.numel() == 1, times
        ref_times.append(float(times[0]))
        row += rows
    target_origin = float(positions[L + n_cond, 0])  # the first target audio row
    # The row timestep of every row at every evaluation, as the transformer is handed it.
    plan = get("row_timestep_plan")
    row_timesteps = torch.stack([unique[index] for unique, index in plan]).to(torch.float32)
    ref_row_timesteps = [sorted({float(v) for v in r[video_idx[:n_cond]]}) for r in row_timesteps]

    tensors = {
        "height": torch.tensor(int(get("height")), dtype=torch.int64),
        "width": torch.tensor(int(get("width")), dtype=torch.int64),
        "input_ids": torch.tensor(rec.token_ids, dtype=torch.int64),
        "image_grid_thw": grids,
        "prompt_embeds": embeds[0],
        "text_token_tags": tags.to(torch.int64),
        "latents": video,
        "audio_latents": audio,
        "video_noise": rec.draws[n_ref],
        "audio_noise": rec.draws[n_ref + 1],
        "condition_rows": get("condition_rows"),
        "timesteps": get("timesteps").to(torch.float32),
        "audio_timesteps": get("audio_timesteps").to(torch.float32),
        "position_ids": positions,
        "token_tags": get("token_tags").to(torch.int64),
        "video_indices": video_idx.to(torch.int64),
        "audio_indices": audio_idx.to(torch.int64),
        "text_indices": text_idx.to(torch.int64),
        "row_timesteps": row_timesteps,
    }
    for i, (im, c) in enumerate(zip(images, conditions)):
        tensors[f"reference{i}"] = torch.from_numpy(im)
        tensors[f"condition_latents{i}"] = c
        tensors[f"reference{i}_noise"] = rec.draws[i]
    tensors = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    info = {
        "name": name,
        "file": f"case_{name}.safetensors",
        "references": [f"{r}.png" for r in refs],
        "call_height": None if canvas is None else canvas[0],
        "call_width": None if canvas is None else canvas[1],
        "height": int(get("height")),
        "width": int(get("width")),
        "num_frames": int(get("num_frames")),
        "num_latent_frames": int(get("num_latent_frames")),
        "latent_height": int(get("latent_height")),
        "latent_width": int(get("latent_width")),
        "num_audio_latents": a,
        "num_text_tokens": int(L),
        "reference_sizes": [[int(im.shape[0]), int(im.shape[1])] for im in images],  # [height, width]
        "reference_latent_sizes": [[int(c.shape[3]), int(c.shape[4])] for c in conditions],
        "reference_rows": ref_rows,
        "vision_blocks": [{"start": s, "image_pads": n, "grid_thw": [int(v) for v in g]}
                          for (s, n), g in zip(blocks, grids)],
        "num_condition_video_rows": n_cond,
        "num_condition_audio_rows": int(get("num_condition_audio_rows")),
        "sequence_length": int(positions.shape[0]),
        "reference_rotary_times": ref_times,
        "target_rotary_origin": target_origin,
        "reference_row_timesteps": ref_row_timesteps,
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
    ap.add_argument("out", type=Path, nargs="?", default=REPO / "tests" / "data" / "ref2va_pipeline")
    a = ap.parse_args()
    torch.set_num_threads(1)
    a.out.mkdir(parents=True, exist_ok=True)

    pictures = {}
    for i, (name, w, h) in enumerate(PICTURES):
        Image.fromarray(picture(w, h, PICTURE_SEED + i)).save(a.out / f"{name}.png", format="PNG", optimize=False)
        # As a caller hands a decoded file to the pipeline.
        pictures[name] = Image.open(a.out / f"{name}.png").convert("RGB")

    with tempfile.TemporaryDirectory(prefix="h3-ref2va-pipeline-") as tmp:
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
        audio_vae, audio_vae_args = audio_vae_stand_in(model)
        pipe.update_components(audio_vae=audio_vae)
        assert pipe.audio_vae is audio_vae and pipe.audio_latent_channels == 32
        te = pipe.text_encoder.config.text_config
        assert te.num_hidden_layers > facts["text_encoder_layer"]

        cases = []
        for name, refs, canvas in CASES:
            tensors, info = run_case(pipe, name, refs, canvas, pictures)
            save_file(tensors, str(a.out / info["file"]))
            cases.append(info)
            print(f"{name}: canvas {info['height']}x{info['width']}, references {info['reference_sizes']}, "
                  f"text {info['num_text_tokens']}, latents {info['shapes']['latents']}, "
                  f"audio {info['shapes']['audio_latents']}")

    index = {
        "script": "bench/reference/ref2va/make_pipeline_vectors.py",
        "versions": {"diffusers": diffusers.__version__, "transformers": transformers.__version__,
                     "torch": torch.__version__, "Pillow": Image.__version__},
        "model": {"origin": origin, "seed": TINY_SEED, "safetensors_sha256": weights,
                  "text_encoder_layers": int(te.num_hidden_layers), **facts},
        "pipeline": {
            "workflow": WORKFLOW,
            "blocks": "MiniMaxH3Blocks().get_workflow('ref2va') less decode.video and decode.audio",
            "transformer": "transformer_ref",
            "call": {"prompt": PROMPT,
                     "references": "[MiniMaxH3ImageReference(image=Image.open(png).convert('RGB')) per case]",
                     "num_frames": NUM_FRAMES, "num_inference_steps": NUM_INFERENCE_STEPS,
                     "generator": f"torch.Generator().manual_seed({GENERATOR_SEED})",
                     "height": "None (case three_sized: 192)", "width": "None (case three_sized: 224)"},
            "dtype": "float32", "device": "cpu", "attention": "SDPA math kernel", "threads": 1,
            "num_inference_steps_means": "sigma grid points, terminal 0 included: N points, N - 1 evaluations "
                                         "(the engine's steps)",
            "reference_noise_level": float(pipe.keyframe_noise_aug),
            "reference_encode_seed": int(pipe.keyframe_encode_seed),
            "image_processor": IMAGE_PROCESSOR,
            "overrides": {"text_encoder_layer": facts["text_encoder_layer"], "min_duration_s": pipe.min_duration},
            "audio_vae": {
                "what": "a stand-in set with update_components after loading: diffusers' AutoencoderKLMiniMaxH3Audio "
                        "constructed (random weights, never run) from the tiny audio VAE's config.json "
                        "(latent_channels, sample_rate, latents_mean, latents_std) and metadata.json (decoder "
                        "geometry); the ref2va reference-encoder step reads its config's latents_mean / latents_std "
                        "unconditionally; with image references only nothing is encoded by it "
                        "(audio_condition_latents == [], asserted)",
                "args": {k: v for k, v in audio_vae_args.items() if k not in ("latents_mean", "latents_std")},
            },
        },
        "pictures": [{"file": f"{n}.png", "width": w, "height": h, "seed": PICTURE_SEED + i}
                     for i, (n, w, h) in enumerate(PICTURES)],
        "layouts": {
            "input_ids": "[L]: the presentation the conditioner gets: per reference '<Picture i>: ' then "
                         "<|vision_start|>, image pads, <|vision_end|>; then the prompt (no special tokens)",
            "image_grid_thw": "[n, 3]: Qwen3-VL's patch grid (t, h, w) of every reference, as the processor made it; "
                              "a vision block holds h * w / 4 pads",
            "prompt_embeds": "[L, text_dim]: hidden_states[text_encoder_layer][0] of the Qwen3-VL text model",
            "text_token_tags": "[L]: 1 text, 0 (video) for the rows of a vision block",
            "reference<i>": "[H, W, 3] uint8: the reference as the setup step normalized it (Pillow LANCZOS to "
                            "short edge reference_image_short_edge, each side round(side * scale / 32) * 32, "
                            "at least 32)",
            "condition_latents<i>": "[1, 24, 1, h, w]: the clean normalised reference latents",
            "reference<i>_noise": "[1, 24, 1, h, w]: the reference's noise draw (mixed in at t = 0.999)",
            "condition_rows": "[sum of reference rows, 96]: the noised references, patchified and concatenated in "
                              "packed order (the leading video rows of the sequence)",
            "latents": "[1, 24, T, h, w]: the generated video latents (normalised), reference rows dropped",
            "audio_latents": "[2, 32, A]: stereo channel = batch item, then latent channel, then time (the "
                             "pipeline's after-denoise layout, what the mono audio VAE decodes)",
            "audio_noise": "[2 * A, 32]: rows, channel-major (left channel's A rows, then the right's)",
            "position_ids": "[S, 3] float64: the (t, h, w) rotary coordinate of every row of the packed sequence "
                            "[text | reference blocks | target audio | target video]",
            "token_tags": "[S]: the modality tag of every row (0 video, 1 text, 2 audio)",
            "video_indices": "[reference rows + T * h/2 * w/2]: sequence positions of the video rows, reference "
                             "rows first",
            "audio_indices": "[2 * A]: sequence positions of the audio rows",
            "text_indices": "[L]: sequence positions of the text rows",
            "row_timesteps": "[evaluations, S] fp32: the timestep of every row at every evaluation (reference rows "
                             "max(t, 0.999), generated audio the audio schedule, text and generated video the video "
                             "schedule)",
        },
        "cases": cases,
    }
    (a.out / "cases.json").write_text(json.dumps(index, indent=1) + "\n")


if __name__ == "__main__":
    main()
