"""What the end-to-end pipeline references share: bench/reference/fl2va/make_pipeline_vectors.py
(tests/data/fl2va_pipeline) and bench/reference/ref2va/make_pipeline_vectors.py (tests/data/ref2va_pipeline), both
diffusers' own MiniMax-H3 modular pipeline run on the tiny conditioning model of `h3 make-tiny --conditioning`, fp32
on the CPU, with SDPA's math kernel.

Not run by itself: the two scripts put bench/reference on sys.path and import it. It holds what they do alike: the
command line, the seeded pictures, the model folder (made or copied, hashed, given what diffusers' ModularPipeline
needs beyond the engine's layout), the pipeline subclass and its loading, the recording of the text encoder's inputs
and of the noise draws, the checks of the draws and of the prompt embeddings, and the parts of cases.json that read
the same. No diffusers or transformers code is copied: it calls the installed packages.
"""

import argparse
import contextlib
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

REPO = Path(__file__).resolve().parents[2]
PROMPT = "a red kite over a green hill"
NUM_INFERENCE_STEPS = 3  # sigma grid points, terminal 0 included: 2 transformer evaluations
GENERATOR_SEED = 7
TINY_SEED = 20260801  # h3 make-tiny's default

# Qwen3-VL's vision patching, the same in its published preprocessor_config.json (pictures) and
# video_preprocessor_config.json (videos): patch 16, temporal patch 2, merge 2, mean = std = 0.5; and the steps both
# take (resize, rescale, normalize, RGB).
QWEN3VL_PATCHING = dict(
    patch_size=16,
    temporal_patch_size=2,
    merge_size=2,
    image_mean=[0.5, 0.5, 0.5],
    image_std=[0.5, 0.5, 0.5],
)
QWEN3VL_STEPS = dict(do_resize=True, do_rescale=True, do_normalize=True, do_convert_rgb=True)

# Qwen3-VL's published preprocessor_config.json (the H3 release's processor/ folder is not among our reference files,
# so these are Qwen3-VL's values, not checked against H3's own): QWEN3VL_PATCHING, size.shortest_edge 256 * 256 and
# size.longest_edge 4096 * 4096 pixels (the engine's ImageProcessorConfig in core/text/vision_config.h holds the same
# numbers).
IMAGE_PROCESSOR = dict(QWEN3VL_PATCHING, size={"shortest_edge": 65536, "longest_edge": 16777216}, **QWEN3VL_STEPS)

RUN_SETTINGS = {  # how the scripts run the pipeline, as cases.json records it
    "dtype": "float32", "device": "cpu", "attention": "SDPA math kernel", "threads": 1,
    "num_inference_steps_means": "sigma grid points, terminal 0 included: N points, N - 1 evaluations "
                                 "(the engine's steps)",
}
PROMPT_EMBEDS_LAYOUT = "[L, text_dim]: hidden_states[text_encoder_layer][0] of the Qwen3-VL text model"


class TinyMiniMaxH3Pipeline(MiniMaxH3ModularPipeline):
    """diffusers' MiniMax-H3 pipeline with two of its model constants set for the tiny model.

    - `text_encoder_layer`: which Qwen3-VL hidden state conditions the transformer. diffusers hard-codes the
      release's 50 as a read-only property of MiniMaxH3ModularPipeline (it ignores model_index.json's
      `text_encoder_layer`), and get_qwen3vl_prompt_embeds refuses an encoder of 50 layers or fewer. The tiny
      encoder has 3 layers and its model_index.json says 2 (what the engine reads), so the blocks read
      `components.text_encoder_layer` = 2 here: prompt_embeds = hidden_states[2].
    - `min_duration`: diffusers refuses a clip shorter than the release's 5 s (120 frames): fl2va in the layout
      step, ref2va in its setup step (on the aligned frame count). 22 frames (one VAE chunk: 17 + 5 frames, 7 latent
      frames; the engine's shortest generated clip) keep the references small, so the floor is lowered to that one
      chunk. Nothing else reads it.
    """

    @property
    def text_encoder_layer(self):
        return self._tiny_text_encoder_layer

    @property
    def min_duration(self):
        return (17 + 5) / 24


def start(doc: str, default_out: Path) -> argparse.Namespace:
    """Reads the scripts' command line, `[--h3 H3 | --model DIR] [OUT]` (the description: the first paragraph of
    `doc`), sets torch to one thread and makes OUT."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--h3", type=Path, default=REPO / "build" / "tools" / "h3", help="the h3 binary (make-tiny)")
    src.add_argument("--model", type=Path, help="a folder `h3 make-tiny --conditioning` wrote (copied, not changed)")
    ap.add_argument("out", type=Path, nargs="?", default=default_out)
    a = ap.parse_args()
    torch.set_num_threads(1)
    a.out.mkdir(parents=True, exist_ok=True)
    return a


def picture(width: int, height: int, seed: int) -> np.ndarray:
    """A smooth colour gradient plus seeded noise, uint8 [height, width, 3]."""
    g = torch.Generator().manual_seed(seed)
    y = torch.linspace(0, 1, height, dtype=torch.float32)[:, None, None]
    x = torch.linspace(0, 1, width, dtype=torch.float32)[None, :, None]
    base = 255 * (0.5 + 0.4 * torch.sin(5 * x + 3 * y + torch.tensor([0.0, 2.0, 4.0])))
    noisy = base + torch.randn(height, width, 3, generator=g) * 30
    return noisy.round().clamp(0, 255).to(torch.uint8).numpy()


def save_pictures(out: Path, pictures: list, seed: int) -> dict:
    """Saves every (name, width, height) of `pictures` as OUT/<name>.png (the i-th: `picture` seeded seed + i) and
    returns them read back, name: RGB image, as a caller hands a decoded file to the pipeline."""
    images = {}
    for i, (name, w, h) in enumerate(pictures):
        Image.fromarray(picture(w, h, seed + i)).save(out / f"{name}.png", format="PNG", optimize=False)
        images[name] = Image.open(out / f"{name}.png").convert("RGB")
    return images


def pictures_info(pictures: list, seed: int) -> list:
    """cases.json's record of the pictures `save_pictures` wrote."""
    return [{"file": f"{n}.png", "width": w, "height": h, "seed": seed + i} for i, (n, w, h) in enumerate(pictures)]


def make_tiny(h3: Path, out: Path) -> None:
    subprocess.run([str(h3), "make-tiny", "--conditioning", "--seed", str(TINY_SEED), "--quiet", "--out", str(out)],
                   check=True)


@contextlib.contextmanager
def tiny_model(args: argparse.Namespace, workflow: str):
    """A temporary folder holding the tiny conditioning model: a copy of --model DIR, or what
    `h3 make-tiny --conditioning` writes. Yields the folder, where the model came from (cases.json's `origin`) and
    the sha256 of its weight files, as written (before the scripts add to the folder)."""
    with tempfile.TemporaryDirectory(prefix=f"h3-{workflow}-pipeline-") as tmp:
        model = Path(tmp) / "model"
        if args.model is not None:
            shutil.copytree(args.model, model)
            origin = f"--model {args.model}"
        else:
            make_tiny(args.h3, model)
            origin = f"h3 make-tiny --conditioning --seed {TINY_SEED}"
        weights = {p.relative_to(model).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                   for p in sorted(model.rglob("*.safetensors"))}
        yield model, origin, weights


def canvas_configs(model: Path) -> tuple[dict, dict]:
    """The folder's model_index.json, and the pipeline configs `canvas_short_edge` and `canvas_max_pixels` (the
    release's 768 and 768 x 1344) set to the canvas rule the engine derives from the model's defaults
    (core/engine/model/model.cpp plan_keyframes: short edge min(default_width, default_height), area
    default_width x default_height; the tiny model: 160 and 256 x 160)."""
    index = json.loads((model / "model_index.json").read_text())
    defaults = index["gst_h3"]
    width, height = int(defaults["default_width"]), int(defaults["default_height"])
    return index, dict(canvas_short_edge=min(width, height), canvas_max_pixels=width * height)


def add_pipeline_files(model: Path, components: dict, configs: dict, video_processor: dict | None = None) -> None:
    """Writes into a copy of an `h3 make-tiny --conditioning` folder what diffusers' ModularPipeline needs beyond the
    engine's layout: processor/ (a Qwen3VLProcessor over the folder's tokenizer: Qwen2VLImageProcessor with
    IMAGE_PROCESSOR, Qwen3VLVideoProcessor with `video_processor`, its class defaults when None) and
    modular_model_index.json (`components`, name: (library, class), each in the subfolder of its name, and the
    pipeline `configs`; model_index.json, which the engine reads, is kept)."""
    tokenizer = AutoTokenizer.from_pretrained(model / "tokenizer")
    processor = Qwen3VLProcessor(image_processor=Qwen2VLImageProcessor(**IMAGE_PROCESSOR), tokenizer=tokenizer,
                                 video_processor=Qwen3VLVideoProcessor(**(video_processor or {})))
    processor.save_pretrained(model / "processor")

    entries = {name: [lib, cls, {"subfolder": name, "type_hint": [lib, cls]}]
               for name, (lib, cls) in components.items()}
    modular = {"_class_name": "MiniMaxH3ModularPipeline", "_blocks_class_name": "MiniMaxH3Blocks", **configs,
               **entries}
    (model / "modular_model_index.json").write_text(json.dumps(modular, indent=2) + "\n")


def workflow_blocks(workflow: str) -> str:
    """What `load_pipeline` runs of a workflow, as cases.json says it."""
    return f"MiniMaxH3Blocks().get_workflow('{workflow}') less decode.video and decode.audio"


def load_pipeline(model: Path, workflow: str, components: dict, text_encoder_layer: int) -> TinyMiniMaxH3Pipeline:
    """The workflow's blocks, as ModularPipeline.from_pretrained(model, workflow=workflow) prunes them, less the two
    decode blocks (`decode.video`, `decode.audio`): the request stops at the final latents. The components are
    loaded in fp32, as the engine computes on a CPU (the tiny text encoder is stored in bf16)."""
    blocks = MiniMaxH3Blocks().get_workflow(workflow)
    for name in [n for n in blocks.sub_blocks if n.startswith("decode.")]:
        blocks.sub_blocks.pop(name)
    pipe = TinyMiniMaxH3Pipeline(blocks=blocks, pretrained_model_name_or_path=str(model))
    pipe._tiny_text_encoder_layer = text_encoder_layer
    pipe.load_components(names=list(components), dtype=torch.float32)
    missing = [name for name in components if getattr(pipe, name, None) is None]
    assert not missing, f"components not loaded: {missing}"
    pipe.set_progress_bar_config(disable=True)
    assert pipe.text_encoder.config.text_config.num_hidden_layers > text_encoder_layer
    return pipe


class Recorder:
    """Observes calls the blocks make, passing everything through unchanged: the token ids and vision inputs the
    text step gives the conditioner (encoders.get_qwen3vl_prompt_embeds) and every noise draw
    (before_denoise.randn_tensor, the only draws off the request's generator), in call order. A subclass observes
    more by extending __enter__ and __exit__."""

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


def run_pipeline(pipe, recorder: Recorder, **kwargs):
    """One request (`kwargs`, and a generator seeded GENERATOR_SEED), observed by `recorder`, with SDPA's math kernel
    and no autograd; returns the pipeline's state."""
    with recorder, sdpa_kernel([SDPBackend.MATH]), torch.no_grad():
        return pipe(generator=torch.Generator().manual_seed(GENERATOR_SEED), **kwargs)


def check_draws(draws: list, conditions: list, video: torch.Tensor, audio: torch.Tensor,
                num_audio_latents: int) -> list:
    """Checks a request's noise draws and returns their shapes. The draws: one per condition (keyframe or reference)
    in order (its noise for the conditioning level 0.999), then the video noise, then the audio noise (rows:
    2 channel-major blocks of A latents x 32 channels), all off the request's generator. Replaying the seed in that
    order gives the same numbers: the draw order is the generator's order."""
    n = len(conditions)
    shapes = [tuple(d.shape) for d in draws]
    assert len(draws) == n + 2, shapes
    assert all(shapes[i] == tuple(conditions[i].shape) for i in range(n)), shapes
    assert shapes[n] == tuple(video.shape), shapes
    assert shapes[n + 1] == (2 * num_audio_latents, audio.shape[1]), shapes
    replay = torch.Generator().manual_seed(GENERATOR_SEED)
    for d in draws:
        assert torch.equal(torch.randn(d.shape, generator=replay, dtype=torch.float32), d)
    return shapes


def text_outputs(get, token_ids: list) -> tuple[torch.Tensor, torch.Tensor]:
    """The state's prompt embeddings [1, L, text_dim] (fp32) and text token tags [L], checked against the L token
    ids the text step gave the conditioner."""
    embeds = get("prompt_embeds")
    assert embeds.shape[0] == 1 and embeds.dtype == torch.float32, (embeds.shape, embeds.dtype)
    tags = get("text_token_tags")
    assert len(token_ids) == embeds.shape[1] == tags.shape[0]
    return embeds, tags


def geometry_info(get, num_audio_latents: int, num_text_tokens: int) -> dict:
    """A case's resolved sizes, as cases.json records them."""
    return {
        "height": int(get("height")),
        "width": int(get("width")),
        "num_frames": int(get("num_frames")),
        "num_latent_frames": int(get("num_latent_frames")),
        "latent_height": int(get("latent_height")),
        "latent_width": int(get("latent_width")),
        "num_audio_latents": num_audio_latents,
        "num_text_tokens": num_text_tokens,
    }


def schedule_info(get, draw_shapes: list, tensors: dict) -> dict:
    """A case's schedules, draws and stored tensors, as cases.json records them."""
    return {
        "evaluations": int(get("timesteps").numel()),
        "timesteps": [float(t) for t in get("timesteps")],
        "audio_timesteps": [float(t) for t in get("audio_timesteps")],
        "draws": [list(s) for s in draw_shapes],
        "shapes": {k: list(v.shape) for k, v in sorted(tensors.items())},
        "dtypes": {k: str(v.dtype).replace("torch.", "") for k, v in sorted(tensors.items())},
    }


def save_case(out: Path, tensors: dict, info: dict) -> dict:
    """Writes a case's tensors to OUT/<info["file"]>; returns its info."""
    save_file(tensors, str(out / info["file"]))
    return info


def latent_layouts(dropped: str) -> dict:
    """cases.json's layouts of the final latents and of the audio noise; `dropped`: what the conditioning rows are
    (keyframe, reference)."""
    return {
        "latents": f"[1, 24, T, h, w]: the generated video latents (normalised), {dropped} rows dropped",
        "audio_latents": "[2, 32, A]: stereo channel = batch item, then latent channel, then time (the "
                         "pipeline's after-denoise layout, what the mono audio VAE decodes)",
        "audio_noise": "[2 * A, 32]: rows, channel-major (left channel's A rows, then the right's)",
    }


def index_head(script: str, origin: str, weights: dict, pipe, facts: dict) -> dict:
    """The head of cases.json: the script (its path in the repository), the package versions and the model."""
    return {
        "script": Path(script).resolve().relative_to(REPO).as_posix(),
        "versions": {"diffusers": diffusers.__version__, "transformers": transformers.__version__,
                     "torch": torch.__version__, "Pillow": Image.__version__},
        "model": {"origin": origin, "seed": TINY_SEED, "safetensors_sha256": weights,
                  "text_encoder_layers": int(pipe.text_encoder.config.text_config.num_hidden_layers), **facts},
    }


def overrides(pipe, facts: dict) -> dict:
    """cases.json's record of what TinyMiniMaxH3Pipeline sets."""
    return {"text_encoder_layer": facts["text_encoder_layer"], "min_duration_s": pipe.min_duration}


def write_index(out: Path, index: dict) -> None:
    (out / "cases.json").write_text(json.dumps(index, indent=1) + "\n")
