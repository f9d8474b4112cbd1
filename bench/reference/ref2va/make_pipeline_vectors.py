"""Writes the end-to-end Ref2VA reference vectors (tests/data/ref2va_pipeline): diffusers' own MiniMax-H3 modular
pipeline, workflow `ref2va` with image and video references, run on the tiny conditioning model of
`h3 make-tiny --conditioning`.

    ~/.cache/gst-h3/reference-venv/bin/python bench/reference/ref2va/make_pipeline_vectors.py \
        [--h3 build/core/h3 | --model DIR] [OUT]

OUT defaults to tests/data/ref2va_pipeline. The model is written by `h3 make-tiny --conditioning` into a temporary
folder (or taken from --model DIR, a folder that command wrote, which is copied and left untouched). The copy gets
what diffusers' ModularPipeline needs beyond the engine's layout (see `prepare_folder`). Three seeded pictures are
saved as OUT/a.png (96 x 72), OUT/b.png (64 x 80) and OUT/c.png (50 x 120, whose 96 short-edge scaling rounds), and
two seeded videos are made in memory (`video_frames`: v1, 48 frames of 80 x 64 said to run at 30 fps; v2, 40 frames
of 96 x 54 at 24 fps; each frame a colour gradient whose phase moves from frame to frame, plus seeded noise), then
the pipeline runs six times, fp32 on the CPU, with SDPA's math kernel:

- `one`: `references` = [a.png], height and width unset, num_frames 22;
- `two`: `references` = [a.png, b.png], height and width unset, num_frames 22;
- `three_sized`: `references` = [b.png, c.png, a.png], height 192 and width 224 passed, num_frames 22;
- `video`: `references` = [v1], height and width unset, num_frames 39;
- `image_video`: `references` = [a.png, v2], height and width unset, num_frames 39;
- `video_image`: `references` = [v1, a.png], height 192 and width 224 passed, num_frames 39;

every picture a `MiniMaxH3ImageReference(image=Image.open(png).convert("RGB"))`, every video a
`MiniMaxH3VideoReference(frames=<uint8 [N, H, W, 3] array>, fps=<its rate>)` (no soundtrack: the audio VAE encoder
is not part of the engine), all with the prompt PROMPT, num_inference_steps 3 (sigma grid points: 2 transformer
evaluations) and `generator=torch.Generator().manual_seed(7)`. 39 frames (17 * 2 + 5) make a video reference long
enough for the conditioner's 2 fps reading to take 4 frames, i.e. 2 vision blocks. Unset, the canvas is the model's
16:9 rule (diffusers' `resolve_canvas_size(16, 9, ...)` over the canvas configs below: references never bind the
generated geometry). The pipeline is diffusers' own `ref2va` workflow (`MiniMaxH3Blocks().get_workflow("ref2va")`,
exactly what `ModularPipeline.from_pretrained(..., workflow="ref2va")` builds) without its two decode blocks: the
request ends at `denoise.after_denoise`, whose `latents` / `audio_latents` are the final latents before decoding (the
pipeline has no `output_type="latent"`; its decode steps take only pil / np / pt).

The audio VAE. The ref2va reference-encoder step reads `components.audio_vae.config.latents_mean` / `latents_std`
before it looks at the references, so it needs an `audio_vae` component even for references without sound, which
never reach it; and the tiny audio VAE is in the native layout (decoder only), which diffusers'
AutoencoderKLMiniMaxH3Audio does not load. So after loading, the script gives the pipeline a stand-in through
`update_components(audio_vae=...)` (see `audio_vae_stand_in`): a diffusers AutoencoderKLMiniMaxH3Audio *constructed*
from the tiny audio VAE's own config.json values that diffusers reads off `.config` (latent_channels 32, its
sample_rate 32000 as `sampling_rate`, its latents_mean / latents_std) and the decoder geometry its metadata.json
records, with a 2-wide encoder (the tiny one has none). Its random weights (made under a forked global RNG, so no
other draw moves) never run: no reference carries sound, so the step encodes no audio; the script asserts that
`audio_condition_latents` is empty and that no reference audio rows were packed. The only other reads of the
component are `audio_latent_channels` (32 either way: the generated audio noise's width) and `audio_sampling_rate`
(read only for a reference soundtrack), so no number of the request depends on the stand-in.

The processors. The pipeline takes its Qwen3-VL processor from the model folder's processor/, which the engine's
folder does not have and which the H3 release's files among our references do not include either; the script writes
one with Qwen3-VL's published values: preprocessor_config.json for pictures (IMAGE_PROCESSOR) and
video_preprocessor_config.json for videos (VIDEO_PROCESSOR: size.shortest_edge 4096 and size.longest_edge 25,165,824
pixels for the whole clip, patch 16, temporal patch 2, merge 2, mean = std = 0.5, bicubic). That is the decision:
H3's conditioner is Qwen3-VL, and its published settings are the only ones we can read; they are not checked against
H3's own. At these sizes the video processor leaves the frames as they are (recorded per case).

Per case OUT/case_<name>.safetensors holds what the pipeline's state holds after the run (the layout included:
rotary positions, tags, row indices and every step's row timesteps), plus recordings of calls the blocks make (the
token ids and vision inputs they give the text encoder, the frames the conditioner samples from a video reference,
and every noise draw off the request's generator, in order); OUT/cases.json lists the settings and shapes. To keep
the folder small, each video is stored once, OUT/video_<name>.safetensors (`frames`, uint8 [N, H, W, 3]: what the
cases give the pipeline, read back from that file), and a video reference's normalized frames are not stored: the
case file keeps their first and last frame (`reference<i>_first`, `reference<i>_last`) and cases.json the sha256 of
the whole [T, H, W, 3] uint8 tensor and of every frame; the video processor's patches (`pixel_values_videos`) are not
stored either: they are a function of the sampled normalized frames (checked against a rebuild; cases.json keeps
their shape and sha256). What this script shares with bench/reference/fl2va/make_pipeline_vectors.py (the pictures,
the model folder, the pipeline subclass and its loading, the recording and the checks) is in
bench/reference/pipeline_common.py. No diffusers or transformers code is copied: the scripts call the installed
packages. The same inputs give the same bytes.
"""

import dataclasses
import hashlib
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from safetensors.torch import load_file, save_file

from diffusers import AutoencoderKLMiniMaxH3Audio
from diffusers.modular_pipelines.minimax_h3 import before_encoder, encoders
from diffusers.modular_pipelines.minimax_h3.references import MiniMaxH3ImageReference, MiniMaxH3VideoReference
from torchvision.transforms.v2 import functional as tvF

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/reference, for pipeline_common
from pipeline_common import (  # noqa: E402
    GENERATOR_SEED, IMAGE_PROCESSOR, NUM_INFERENCE_STEPS, PROMPT, PROMPT_EMBEDS_LAYOUT, QWEN3VL_PATCHING, QWEN3VL_STEPS,
    REPO, RUN_SETTINGS, Recorder, add_pipeline_files, canvas_configs, check_draws, geometry_info, index_head,
    latent_layouts, load_pipeline, overrides, pictures_info, run_pipeline, save_case, save_pictures, schedule_info,
    start, text_outputs, tiny_model, workflow_blocks, write_index)

NUM_FRAMES = 22  # the image-only cases
NUM_FRAMES_VIDEO = 39  # the cases with a video reference: 17 * 2 + 5, long enough for 2 vision blocks
PICTURE_SEED = 20260821
# name, width, height (as "96x72": width x height). c's 96 short edge scales 120 to 230.4, which rounds to 224.
PICTURES = [("a", 96, 72), ("b", 64, 80), ("c", 50, 120)]
VIDEO_SEED = 20260831
# name, width, height, number of frames, the frame rate the reference says its frames run at. v1's 30 fps is
# resampled onto 24 fps (48 frames to 38); v2's 96 x 54 is not a multiple of 32 (the canvas rule and LANCZOS).
VIDEOS = [("v1", 80, 64, 48, 30.0), ("v2", 96, 54, 40, 24.0)]
# name, references (in packed order), (height, width) or None for the unset canvas, num_frames
CASES = [
    ("one", ("a",), None, NUM_FRAMES),
    ("two", ("a", "b"), None, NUM_FRAMES),
    ("three_sized", ("b", "c", "a"), (192, 224), NUM_FRAMES),
    ("video", ("v1",), None, NUM_FRAMES_VIDEO),
    ("image_video", ("a", "v2"), None, NUM_FRAMES_VIDEO),
    ("video_image", ("v1", "a"), (192, 224), NUM_FRAMES_VIDEO),
]
WORKFLOW = "ref2va"

# Qwen3-VL's published video_preprocessor_config.json, kept as they are (the decision): the image processor's patch
# (16), temporal patch (2), merge (2), mean and std (0.5) (pipeline_common's QWEN3VL_PATCHING, IMAGE_PROCESSOR), but
# size.shortest_edge 4096 and size.longest_edge 25,165,824 pixels, which the video smart_resize compares with the
# *whole clip's* pixels (frames x height x width), and bicubic resampling (3). Why these: diffusers' pipeline takes its
# processor from the model folder's processor/, and the H3 release's processor/ folder is not among our reference
# files, so H3's own video settings cannot be read; H3's conditioner is Qwen3-VL, and these are Qwen3-VL's published
# values (the engine's ImageProcessorConfig, in core/text/vision_config.h, holds the same video bounds).
# `cap_pixels_per_frame` is not in the published file: transformers 5.24 reads it unset as False (no per-frame cap; at
# these sizes the cap, 768 x 32 x 32 pixels a frame, would not bind either). `fps` / `min_frames` / `max_frames` are
# not read: the pipeline samples the frames itself and calls the processor with do_sample_frames=False. (The class's
# own defaults, Qwen3VLVideoProcessor() bare, are another size: 131,072 to 786,432 pixels; not the published file's.)
# A video reference's frames are on a canvas (multiples of 32) and the tiny model's clips are far inside the budget, so
# the processor leaves them as they are (torchvision's resize returns its input; cases.json records each resize).
VIDEO_PROCESSOR = dict(QWEN3VL_PATCHING, size={"shortest_edge": 4096, "longest_edge": 25165824}, resample=3,
                       **QWEN3VL_STEPS, fps=2, min_frames=4, max_frames=768)

COMPONENTS = {  # name: (library, class). audio_vae is a stand-in set after loading (audio_vae_stand_in).
    "text_encoder": ("transformers", "Qwen3VLForConditionalGeneration"),
    "tokenizer": ("transformers", "Qwen2TokenizerFast"),
    "processor": ("transformers", "Qwen3VLProcessor"),
    "transformer_ref": ("diffusers", "MiniMaxH3Transformer3DModel"),
    "vae": ("diffusers", "AutoencoderKLMiniMaxH3"),
    "scheduler": ("diffusers", "MiniMaxH3Scheduler"),
    "audio_scheduler": ("diffusers", "MiniMaxH3Scheduler"),
}


def video_frames(width: int, height: int, num_frames: int, seed: int) -> np.ndarray:
    """A colour gradient whose phase moves by 0.3 radians a frame, plus seeded noise, uint8 [num_frames, height,
    width, 3]."""
    g = torch.Generator().manual_seed(seed)
    y = torch.linspace(0, 1, height, dtype=torch.float32)[:, None, None]
    x = torch.linspace(0, 1, width, dtype=torch.float32)[None, :, None]
    channel = torch.tensor([0.0, 2.0, 4.0])
    frames = []
    for k in range(num_frames):
        base = 255 * (0.5 + 0.4 * torch.sin(4 * x - 2 * y + channel - 0.3 * k))
        noisy = base + torch.randn(height, width, 3, generator=g) * 30
        frames.append(noisy.round().clamp(0, 255).to(torch.uint8))
    return torch.stack(frames).numpy()


def prepare_folder(model: Path) -> dict:
    """Adds to a copy of an `h3 make-tiny --conditioning` folder what diffusers' ModularPipeline needs, and returns
    the engine-side facts the pipeline is configured with.

    - modular_model_index.json: ModularPipeline resolves components and configs from it (model_index.json, which
      the engine reads, is kept). Its components are the ones the ref2va request loads (the DiT is
      `transformer_ref`, the folder's second DiT); `canvas_short_edge` and `canvas_max_pixels` (pipeline configs)
      are set to the canvas rule the engine derives from the model's defaults (`canvas_configs`: the tiny model's
      160 and 256 x 160), and `reference_image_short_edge` (the release's 2048) to model_index.json's
      gst_h3.reference_short_edge (the tiny model: 96).
    - processor/: a Qwen3VLProcessor (Qwen2VLImageProcessor with Qwen3-VL's published preprocessor_config.json
      values, IMAGE_PROCESSOR, and Qwen3VLVideoProcessor with Qwen3-VL's published video_preprocessor_config.json
      values, VIDEO_PROCESSOR, over the folder's tokenizer): the text step takes the vision patches and the token type
      ids from it; the engine's folder has no processor, and the H3 release's processor/ is not among our reference
      files, so Qwen3-VL's published values stand in for it.
    """
    index, configs = canvas_configs(model)
    configs["reference_image_short_edge"] = int(index["gst_h3"]["reference_short_edge"])
    add_pipeline_files(model, COMPONENTS, configs, VIDEO_PROCESSOR)
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


class Ref2VARecorder(Recorder):
    """Observes, besides what Recorder does (the token ids and vision inputs the text step gives the conditioner, and
    every noise draw), the frames the text step samples from every video reference
    (MiniMaxH3Ref2VATextEncoderStep._sample_video_condition_frames) and the video processor's resizes (torchvision's
    resize as transformers calls it, and the smart_resize sizes it asks for), in call order, passing everything
    through unchanged."""

    def __init__(self, video_processor_class):
        super().__init__()
        self.samples, self.resizes = [], []
        self._step = encoders.MiniMaxH3Ref2VATextEncoderStep
        self._sample = self._step.__dict__["_sample_video_condition_frames"]
        self._vp, self._vp_resize = video_processor_class, video_processor_class.__dict__["resize"]
        self._tv_resize = tvF.resize

    def __enter__(self):
        super().__enter__()

        def sample(frames, fps, sample_fps, temporal_patch):
            picked, timestamps = self._sample.__func__(frames, fps, sample_fps, temporal_patch)
            # The sampled frames are views of the normalized reference: their offsets in it are the indices read.
            base, stride = frames.__array_interface__["data"][0], frames.strides[0]
            indices = []
            for f in picked:
                assert np.shares_memory(f, frames) and f.strides == frames.strides[1:]
                offset = f.__array_interface__["data"][0] - base
                assert offset % stride == 0
                indices.append(offset // stride)
                assert np.array_equal(frames[indices[-1]], f)
            self.samples.append(dict(frames=frames, fps=fps, sample_fps=sample_fps, temporal_patch=temporal_patch,
                                     indices=indices, timestamps=list(timestamps)))
            return picked, timestamps

        def vp_resize(processor, videos, size, resample, factor, temporal_factor, cap_pixels_per_frame=None, **kw):
            entry = dict(input=list(videos.shape), dtype=str(videos.dtype).replace("torch.", ""),
                         factor=factor, temporal_factor=temporal_factor, cap_pixels_per_frame=cap_pixels_per_frame,
                         resample=int(resample), tv=[])
            self.resizes.append(entry)
            out = self._vp_resize(processor, videos, size, resample, factor, temporal_factor,
                                  cap_pixels_per_frame=cap_pixels_per_frame, **kw)
            entry["output"] = list(out.shape)
            entry["unchanged"] = bool(out.shape == videos.shape and torch.equal(out, videos))
            return out

        def tv_resize(image, size, *args, **kwargs):
            out = self._tv_resize(image, size, *args, **kwargs)
            if self.resizes and "output" not in self.resizes[-1]:  # inside a video processor resize
                self.resizes[-1]["tv"].append(dict(
                    size=list(size), interpolation=str(kwargs.get("interpolation")),
                    antialias=kwargs.get("antialias"), dtype=str(image.dtype).replace("torch.", ""),
                    returned_input=out is image))
            return out

        self._step._sample_video_condition_frames = staticmethod(sample)
        self._vp.resize = vp_resize
        tvF.resize = tv_resize
        return self

    def __exit__(self, *exc):
        super().__exit__(*exc)
        self._step._sample_video_condition_frames = self._sample
        self._vp.resize = self._vp_resize
        tvF.resize = self._tv_resize


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


def read_presentation(token_ids: list, tokenizer, kinds: list, image_grids, video_grids, video_timestamps,
                      merge: int, prompt: str) -> tuple[list, list]:
    """Walks a ref2va presentation, checking it token by token against its documented form (per reference in packed
    order: `"<Picture i>: "` and an image block, or `"<Video k>: "` and per vision block `"<{t:.1f} seconds>"` and a
    video block; then the prompt), and returns per reference its labels (text, ids, position) and vision blocks, and
    the list of all vision blocks."""
    ids = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    vs, ve, ipad, vpad = (tokenizer.convert_tokens_to_ids(t) for t in
                          ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"))
    pos, refs, blocks = 0, [], []

    def take(text: str) -> dict:
        nonlocal pos
        want = ids(text)
        assert token_ids[pos:pos + len(want)] == want, (text, token_ids[pos:pos + len(want)], want)
        assert tokenizer.decode(want) == text, (tokenizer.decode(want), text)
        label = {"text": text, "ids": want, "start": pos}
        pos += len(want)
        return label

    def block(pad: int, n: int, grid: list, ref: int, **extra) -> dict:
        nonlocal pos
        want = [vs] + [pad] * n + [ve]
        assert token_ids[pos:pos + len(want)] == want, (ref, pos)
        b = {"start": pos, "pads": n, "pad_token": tokenizer.convert_ids_to_tokens(pad), "grid_thw": grid,
             "reference": ref, **extra}
        if pad == ipad:
            b["image_pads"] = n
        pos += len(want)
        blocks.append(b)
        return b

    counts = {"image": 0, "video": 0}
    for i, kind in enumerate(kinds):
        counts[kind] += 1
        if kind == "image":
            grid = [int(v) for v in image_grids[counts["image"] - 1]]
            labels = [take(f"<Picture {counts['image']}>: ")]
            rb = [block(ipad, grid[0] * grid[1] * grid[2] // merge, grid, i)]
        else:
            t, h, w = (int(v) for v in video_grids[counts["video"] - 1])
            stamps = video_timestamps[counts["video"] - 1]
            assert len(stamps) == t, (stamps, t)
            labels, rb = [take(f"<Video {counts['video']}>: ")], []
            for j, stamp in enumerate(stamps):
                labels.append(take(f"<{stamp:.1f} seconds>"))
                rb.append(block(vpad, h * w // merge, [1, h, w], i, block=j, timestamp=stamp,
                                timestamp_text=labels[-1]["text"]))
        refs.append({"labels": labels, "blocks": rb})
    tail = take(prompt)
    assert tail["start"] + len(tail["ids"]) == len(token_ids)
    assert [(b["start"], b["pads"]) for b in blocks] == vision_blocks(token_ids, tokenizer)
    return refs, blocks


def resampled_from(pipe, frames: np.ndarray, fps: float, num_frames: int, normalized: np.ndarray) -> list:
    """Which given frame every normalized frame of a video reference shows: the setup step's own normalization run on
    a probe of the same length, rate and size whose frame k is the constant k (Pillow's LANCZOS keeps a constant
    frame constant, checked)."""
    n, h, w, _ = frames.shape
    assert n <= 256
    probe = np.ascontiguousarray(np.broadcast_to(np.arange(n, dtype=np.uint8)[:, None, None, None], (n, h, w, 3)))
    out = before_encoder.MiniMaxH3Ref2VASetupStep._normalize_video_condition(
        probe, fps, num_frames, pipe.canvas_multiple, pipe.config.canvas_short_edge, pipe.config.canvas_max_pixels,
        float(pipe.fps))
    assert out.shape == normalized.shape, (out.shape, normalized.shape)
    assert bool((out == out[:, :1, :1, :1]).all())
    return [int(v) for v in out[:, 0, 0, 0]]


def sha256(array: np.ndarray) -> str:
    """sha256 hex of an array's bytes, C-contiguous (row-major)."""
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def video_patches(frames: np.ndarray, patch: int, temporal: int, merge: int) -> torch.Tensor:
    """Qwen3-VL's video patches of uint8 frames [n, H, W, 3] (n a multiple of the temporal patch, H and W multiples
    of patch * merge): (x - 127.5) / 127.5 in fp32, flattened per patch as (channel, frame, row, column), patches in
    time block, then merge block (2 x 2 patches consecutive) order: [n / temporal * H / patch * W / patch,
    3 * temporal * patch * patch]. The rebuild the stored `pixel_values_videos` was dropped for (checked per case)."""
    n, h, w, c = frames.shape
    x = (torch.from_numpy(np.ascontiguousarray(frames)).to(torch.float32) - 127.5) / 127.5
    x = x.permute(0, 3, 1, 2)  # [n, C, H, W]
    gt, gh, gw = n // temporal, h // patch, w // patch
    x = x.reshape(gt, temporal, c, gh // merge, merge, patch, gw // merge, merge, patch)
    x = x.permute(0, 3, 6, 4, 7, 2, 1, 5, 8)  # t, h-block, w-block, h-in-block, w-in-block, C, frame, row, column
    return x.reshape(gt * gh * gw, c * temporal * patch * patch)


def make_reference(name: str, media: dict):
    item = media[name]
    if isinstance(item, Image.Image):
        return MiniMaxH3ImageReference(image=item)
    frames, fps = item
    return MiniMaxH3VideoReference(frames=frames, fps=fps)


def run_case(pipe, name: str, refs: tuple, canvas, num_frames: int, media: dict) -> tuple[dict, dict]:
    references = [make_reference(r, media) for r in refs]
    kinds = [r.kind for r in references]
    has_video = "video" in kinds
    kwargs = dict(prompt=PROMPT, references=references, num_frames=num_frames, num_inference_steps=NUM_INFERENCE_STEPS)
    if canvas is not None:
        kwargs["height"], kwargs["width"] = canvas
    rec = Ref2VARecorder(type(pipe.processor.video_processor))
    state = run_pipeline(pipe, rec, **kwargs)
    get = state.get

    normalized = get("normalized_references")
    assert [r.kind for r in normalized] == kinds, normalized
    # The references as the setup step normalized them: an image [H, W, 3], a video's frames [T, H, W, 3].
    images = [np.array(r.image.convert("RGB"), dtype=np.uint8) if r.kind == "image" else r.frames
              for r in normalized]
    assert all(im.dtype == np.uint8 for im in images)
    assert not any(r.has_audio for r in normalized)
    conditions = get("condition_latents")
    # No reference carries sound: nothing reached the audio VAE stand-in, and no reference audio rows were packed.
    assert list(get("audio_condition_latents")) == [], get("audio_condition_latents")
    assert int(get("num_condition_audio_rows")) == 0
    video, audio = get("latents"), get("audio_latents")
    n_ref = len(conditions)
    assert n_ref == len(refs)
    # The draws: one per reference in packed order, then the video noise, then the audio noise (check_draws).
    a = int(get("num_audio_latents"))
    shapes = check_draws(rec.draws, conditions, video, audio, a)

    embeds, tags = text_outputs(get, rec.token_ids)
    L = embeds.shape[1]
    merge = pipe.processor.image_processor.merge_size ** 2
    grids = rec.vision_inputs["image_grid_thw"].to(torch.int64) if "image" in kinds else None
    video_grids = rec.vision_inputs["video_grid_thw"].to(torch.int64) if has_video else None
    # The video references the text step sampled, in packed order (one call each), and what it read off them.
    assert len(rec.samples) == kinds.count("video"), rec.samples
    video_refs = [i for i, k in enumerate(kinds) if k == "video"]
    for i, smp in zip(video_refs, rec.samples):
        assert smp["frames"] is normalized[i].frames
    presented, blocks = read_presentation(
        rec.token_ids, pipe.tokenizer, kinds, grids, video_grids, [smp["timestamps"] for smp in rec.samples],
        merge, PROMPT)

    # The packed layout: [text | reference blocks | target audio | target video].
    positions = get("position_ids")
    assert positions.dtype == torch.float64, positions.dtype
    video_idx, audio_idx, text_idx = get("video_indices"), get("audio_indices"), get("text_indices")
    n_cond = int(get("num_condition_video_rows"))
    patch = pipe.patch_size
    ref_rows = [int(c.shape[2] * (c.shape[3] // patch[1]) * (c.shape[4] // patch[2])) for c in conditions]
    assert n_cond == sum(ref_rows), (n_cond, ref_rows)
    # Every reference block's rotary time: constant over each of its latent frames (an image has one).
    ref_times, ref_frame_times, row = [], [], L
    for c, rows in zip(conditions, ref_rows):
        times = positions[row:row + rows, 0].reshape(int(c.shape[2]), -1)
        assert bool((times == times[:, :1]).all()), times
        ref_times.append(float(times[0, 0]))
        ref_frame_times.append([float(v) for v in times[:, 0]])
        row += rows
    target_origin = float(positions[L + n_cond, 0])  # the first target audio row
    # How far every reference block moves the rotary clock: the next block's start (the target's, after the last),
    # as a float64 difference. The clock itself adds a picture's 1 or a video's span, the float64 sum, taken in
    # order, of 5/3 * (1, 4, 4, 4, 4, 1, 4, ...) over its latent frames (checked here: start + span is the next start).
    ref_advances = [nxt - cur for cur, nxt in zip(ref_times, ref_times[1:] + [target_origin])]
    ref_spans = [1.0 if c.shape[2] == 1 else sum(5.0 / 3.0 * (1, 4, 4, 4, 4)[k % 5] for k in range(int(c.shape[2])))
                 for c in conditions]
    assert all(cur + span == nxt for cur, span, nxt in zip(ref_times, ref_spans, ref_times[1:] + [target_origin]))
    # The row timestep of every row at every evaluation, as the transformer is handed it.
    plan = get("row_timestep_plan")
    row_timesteps = torch.stack([unique[index] for unique, index in plan]).to(torch.float32)
    ref_row_timesteps = [sorted({float(v) for v in r[video_idx[:n_cond]]}) for r in row_timesteps]

    tensors = {
        "height": torch.tensor(int(get("height")), dtype=torch.int64),
        "width": torch.tensor(int(get("width")), dtype=torch.int64),
        "input_ids": torch.tensor(rec.token_ids, dtype=torch.int64),
    }
    if grids is not None:
        tensors["image_grid_thw"] = grids
    tensors |= {
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
        if kinds[i] == "image":
            tensors[f"reference{i}"] = torch.from_numpy(im)
        else:
            # A video's normalized frames: only the first and the last are stored (cases.json: their sha256).
            tensors[f"reference{i}_first"] = torch.from_numpy(np.ascontiguousarray(im[0]))
            tensors[f"reference{i}_last"] = torch.from_numpy(np.ascontiguousarray(im[-1]))
        tensors[f"condition_latents{i}"] = c
        tensors[f"reference{i}_noise"] = rec.draws[i]
    mrope = None
    pixel_values_videos = None
    if has_video:
        # The video processor's patches, not stored: a function of the sampled normalized frames (rebuilt here).
        pv = rec.vision_inputs["pixel_values_videos"]
        vp = pipe.processor.video_processor
        rebuilt = torch.cat([video_patches(smp["frames"][smp["indices"]], vp.patch_size, vp.temporal_patch_size,
                                           vp.merge_size) for smp in rec.samples])
        assert rebuilt.shape == pv.shape and pv.dtype == torch.float32, (rebuilt.shape, pv.shape, pv.dtype)
        rebuilt_diff = float((rebuilt - pv).abs().max())
        assert rebuilt_diff <= 1e-6, rebuilt_diff
        pixel_values_videos = {"shape": list(pv.shape), "dtype": "float32",
                               "sha256": sha256(pv.detach().cpu().contiguous().numpy()),
                               "rebuilt_from_sampled_frames_max_abs_diff": rebuilt_diff}
        tensors["video_grid_thw"] = video_grids
        for i, smp in zip(video_refs, rec.samples):
            tensors[f"reference{i}_sampled_indices"] = torch.tensor(smp["indices"], dtype=torch.int64)
        # The conditioner's M-RoPE (t, h, w) position of every presentation token, as transformers' Qwen3-VL model
        # derives it from the same inputs (get_rope_index; the text encoder's forward computes exactly this).
        ids = torch.tensor([rec.token_ids], dtype=torch.int64)
        mm = torch.tensor(pipe.processor.create_mm_token_type_ids([rec.token_ids]), dtype=torch.int64)
        mrope, _ = pipe.text_encoder.model.get_rope_index(ids, mm_token_type_ids=mm, image_grid_thw=grids,
                                                          video_grid_thw=video_grids)
        tensors["mrope_position_ids"] = mrope[:, 0].to(torch.int64)
    tensors = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}

    details = []
    for i, (r, c) in enumerate(zip(references, conditions)):
        d = {"index": i, "kind": r.kind, "name": f"{refs[i]}.png" if r.kind == "image" else refs[i],
             "labels": [{"text": lab["text"], "ids": lab["ids"], "start": lab["start"]}
                        for lab in presented[i]["labels"]],
             "vision_blocks": presented[i]["blocks"],
             "condition_latents_shape": list(c.shape),
             "rows": ref_rows[i],
             "rotary_start": ref_times[i],
             "rotary_frame_times": ref_frame_times[i],
             "rotary_advance": ref_advances[i],
             "rotary_span": ref_spans[i]}
        if r.kind == "image":
            d["normalized_size"] = [int(images[i].shape[0]), int(images[i].shape[1])]
        else:
            smp = rec.samples[video_refs.index(i)]
            frames = media[refs[i]][0]
            d.update({
                "video_file": f"video_{refs[i]}.safetensors",
                "fps_given": float(r.fps),
                "frames_given": int(frames.shape[0]),
                "size_given": [int(frames.shape[1]), int(frames.shape[2])],  # [height, width]
                "normalized_frames": int(images[i].shape[0]),
                "normalized_size": [int(images[i].shape[1]), int(images[i].shape[2])],
                # sha256 of the normalized frames, uint8 [T, H, W, 3] row-major, whole and frame by frame
                "normalized_sha256": sha256(images[i]),
                "normalized_frame_sha256": [sha256(f) for f in images[i]],
                "normalized_fps": float(normalized[i].fps),
                "normalized_from": resampled_from(pipe, frames, float(r.fps), num_frames, images[i]),
                "encoded_frames": int((c.shape[2] - 2) // 5 * 17 + 5),
                "sample_fps": float(smp["sample_fps"]),
                "sampled_indices": smp["indices"],
                "block_timestamps": smp["timestamps"],
                "timestamp_texts": [b["timestamp_text"] for b in presented[i]["blocks"]],
                "video_grid_thw": [int(v) for v in video_grids[video_refs.index(i)]],
            })
        details.append(d)

    info = {
        "name": name,
        "file": f"case_{name}.safetensors",
        "references": [f"{r}.png" if k == "image" else r for r, k in zip(refs, kinds)],
        "call_height": None if canvas is None else canvas[0],
        "call_width": None if canvas is None else canvas[1],
        "call_num_frames": num_frames,
        **geometry_info(get, a, int(L)),
        # [height, width] of each normalized reference (a video's frames)
        "reference_sizes": [[int(im.shape[-3]), int(im.shape[-2])] for im in images],
        "reference_latent_sizes": [[int(c.shape[3]), int(c.shape[4])] for c in conditions],
        "reference_rows": ref_rows,
        "vision_blocks": blocks if has_video else [
            {"start": b["start"], "image_pads": b["pads"], "grid_thw": b["grid_thw"]} for b in blocks],
        "num_condition_video_rows": n_cond,
        "num_condition_audio_rows": int(get("num_condition_audio_rows")),
        "sequence_length": int(positions.shape[0]),
        "reference_rotary_times": ref_times,
        "target_rotary_origin": target_origin,
        "reference_row_timesteps": ref_row_timesteps,
        **schedule_info(get, shapes, tensors),
    }
    if has_video:
        info["reference_kinds"] = kinds
        info["reference_details"] = details
        info["reference_rotary_advances"] = ref_advances
        info["reference_rotary_spans"] = ref_spans
        info["video_processor_resizes"] = rec.resizes
        info["pixel_values_videos"] = pixel_values_videos
        info["mrope_blocks"] = [
            {"start": b["start"], "pad_token": b["pad_token"],
             "t": sorted({int(v) for v in mrope[0, 0, b["start"] + 1:b["start"] + 1 + b["pads"]]}),
             "h": [int(mrope[1, 0, b["start"] + 1:b["start"] + 1 + b["pads"]].min()),
                   int(mrope[1, 0, b["start"] + 1:b["start"] + 1 + b["pads"]].max())],
             "w": [int(mrope[2, 0, b["start"] + 1:b["start"] + 1 + b["pads"]].min()),
                   int(mrope[2, 0, b["start"] + 1:b["start"] + 1 + b["pads"]].max())],
             "vision_end": int(mrope[0, 0, b["start"] + 1 + b["pads"]])}
            for b in blocks]
    else:
        assert not rec.resizes
    return tensors, info


def main() -> None:
    a = start(__doc__, REPO / "tests" / "data" / "ref2va_pipeline")
    media = save_pictures(a.out, PICTURES, PICTURE_SEED)
    for i, (name, w, h, n, fps) in enumerate(VIDEOS):
        # Stored once, as frames; the cases are given the frames read back from the file.
        path = a.out / f"video_{name}.safetensors"
        save_file({"frames": torch.from_numpy(video_frames(w, h, n, VIDEO_SEED + i))}, str(path))
        frames = load_file(str(path))["frames"].numpy()
        assert frames.dtype == np.uint8 and frames.shape == (n, h, w, 3), (frames.dtype, frames.shape)
        media[name] = (frames, fps)

    with tiny_model(a, WORKFLOW) as (model, origin, weights):
        facts = prepare_folder(model)
        pipe = load_pipeline(model, WORKFLOW, COMPONENTS, facts["text_encoder_layer"])
        audio_vae, audio_vae_args = audio_vae_stand_in(model)
        pipe.update_components(audio_vae=audio_vae)
        assert pipe.audio_vae is audio_vae and pipe.audio_latent_channels == 32

        vp = pipe.processor.video_processor
        video_processor = {k: getattr(vp, k) for k in (
            "size", "patch_size", "temporal_patch_size", "merge_size", "image_mean", "image_std", "resample",
            "do_resize", "do_rescale", "rescale_factor", "do_normalize", "do_convert_rgb", "cap_pixels_per_frame",
            "max_video_tokens", "fps", "min_frames", "max_frames", "do_sample_frames")}
        video_processor = json.loads(json.dumps(
            video_processor, default=lambda v: {k: w for k, w in dataclasses.asdict(v).items() if w is not None}
            if dataclasses.is_dataclass(v) else int(v)))
        video_processor["class"] = type(vp).__name__

        cases = []
        for name, refs, canvas, num_frames in CASES:
            info = save_case(a.out, *run_case(pipe, name, refs, canvas, num_frames, media))
            cases.append(info)
            print(f"{name}: canvas {info['height']}x{info['width']}, references {info['reference_sizes']}, "
                  f"text {info['num_text_tokens']}, latents {info['shapes']['latents']}, "
                  f"audio {info['shapes']['audio_latents']}")

    index = {
        **index_head(__file__, origin, weights, pipe, facts),
        "pipeline": {
            "workflow": WORKFLOW,
            "blocks": workflow_blocks(WORKFLOW),
            "transformer": "transformer_ref",
            "call": {"prompt": PROMPT,
                     "references": "per case, in packed order: MiniMaxH3ImageReference(image=Image.open(png)"
                                   ".convert('RGB')) for a picture, MiniMaxH3VideoReference(frames=<uint8 [N, H, W, "
                                   "3] array>, fps=<its rate>) for a video (no audio)",
                     "num_frames": f"{NUM_FRAMES} (cases with a video reference: {NUM_FRAMES_VIDEO})",
                     "num_inference_steps": NUM_INFERENCE_STEPS,
                     "generator": f"torch.Generator().manual_seed({GENERATOR_SEED})",
                     "height": "None (cases three_sized, video_image: 192)",
                     "width": "None (cases three_sized, video_image: 224)"},
            **RUN_SETTINGS,
            "reference_noise_level": float(pipe.keyframe_noise_aug),
            "reference_encode_seed": int(pipe.keyframe_encode_seed),
            "image_processor": IMAGE_PROCESSOR,
            "image_processor_source": "Qwen3-VL's published preprocessor_config.json (the H3 release's processor/ "
                                      "is not among our reference files)",
            "video_processor": video_processor,
            "video_processor_source": "Qwen3-VL's published video_preprocessor_config.json (the H3 release's "
                                      "processor/ is not among our reference files)",
            "video_processor_call": "processor.video_processor(videos=[<the sampled frames, uint8 [n, H, W, 3]>, "
                                    "...], do_sample_frames=False, return_tensors='pt'), one video per video "
                                    "reference, batched in packed order (diffusers' ref2va text step)",
            "video_sample_fps": 2.0,
            "overrides": overrides(pipe, facts),
            "audio_vae": {
                "what": "a stand-in set with update_components after loading: diffusers' AutoencoderKLMiniMaxH3Audio "
                        "constructed (random weights, never run) from the tiny audio VAE's config.json "
                        "(latent_channels, sample_rate, latents_mean, latents_std) and metadata.json (decoder "
                        "geometry); the ref2va reference-encoder step reads its config's latents_mean / latents_std "
                        "unconditionally; no reference carries sound, so nothing is encoded by it "
                        "(audio_condition_latents == [], asserted)",
                "args": {k: v for k, v in audio_vae_args.items() if k not in ("latents_mean", "latents_std")},
            },
        },
        "pictures": pictures_info(PICTURES, PICTURE_SEED),
        "videos": [{"name": n, "file": f"video_{n}.safetensors", "tensor": "frames", "dtype": "uint8",
                    "shape": [f, h, w, 3], "width": w, "height": h, "frames": f, "fps": fps, "seed": VIDEO_SEED + i,
                    "made": "in memory by video_frames(): 255 * (0.5 + 0.4 * sin(4x - 2y + (0, 2, 4) - 0.3 k)) over "
                            "x, y = linspace(0, 1) for frame k, plus torch.randn * 30 off one torch.Generator seeded "
                            "`seed` (frame by frame, [H, W, 3] each), rounded and clamped to uint8"}
                   for i, (n, w, h, f, fps) in enumerate(VIDEOS)],
        "layouts": {
            "input_ids": "[L]: the presentation the conditioner gets: per reference in packed order, for a picture "
                         "'<Picture i>: ' then <|vision_start|>, image pads, <|vision_end|>; for a video '<Video k>: ' "
                         "then per vision block '<{t:.1f} seconds>', <|vision_start|>, video pads, <|vision_end|> "
                         "(i, k counted per modality from 1); then the prompt (no special tokens)",
            "image_grid_thw": "[n, 3]: Qwen3-VL's patch grid (t, h, w) of every picture reference, as the processor "
                              "made it; a vision block holds h * w / 4 pads (absent without pictures)",
            "reference<i>_sampled_indices": "[n] int64: the frames of reference<i> (normalized) the conditioner "
                                            "reads (2 fps: every 12th of the 24 fps frames), in order",
            "video_grid_thw": "[number of video references, 3]: the video processor's grid (t, h, w) per video; "
                              "t vision blocks of h * w / 4 pads each",
            "mrope_position_ids": "[3, L] int64: the conditioner's M-RoPE (t, h, w) position of every presentation "
                                  "token (transformers' Qwen3VLModel.get_rope_index on these inputs)",
            "prompt_embeds": PROMPT_EMBEDS_LAYOUT,
            "text_token_tags": "[L]: 1 text, 0 (video) for the rows of a vision block",
            "reference<i>": "a picture reference only: [H, W, 3] uint8, the reference as the setup step normalized "
                            "it (Pillow LANCZOS to short edge reference_image_short_edge, each side round(side * "
                            "scale / 32) * 32, at least 32)",
            "reference<i>_first": "a video reference only: [H, W, 3] uint8, frame 0 of its normalized frames (the "
                                  "frames given, resampled onto 24 fps, truncated to num_frames and put (Pillow "
                                  "LANCZOS) on the canvas of its own aspect ratio), [T, H, W, 3], which are not "
                                  "stored: reference_details gives normalized_sha256 (sha256 of the whole uint8 "
                                  "tensor's bytes, row-major) and normalized_frame_sha256 (one per frame)",
            "reference<i>_last": "a video reference only: [H, W, 3] uint8, frame T - 1 of its normalized frames",
            "video_<name>.safetensors": "frames: [N, H, W, 3] uint8, the frames given to every video reference "
                                        "named <name> (reference_details: video_file, fps_given)",
            "pixel_values_videos": "not stored: the video processor's patches [sum of t * h * w, 3 * 2 * 16 * 16] "
                                   "fp32, a function of the sampled normalized frames ((x - 127.5) / 127.5, flattened "
                                   "per patch as (channel, frame, row, column), merge-block order; video_patches() "
                                   "rebuilds them); per case its shape and sha256",
            "condition_latents<i>": "[1, 24, t, h, w]: the clean normalised reference latents (t = 1 for a picture; "
                                    "a video's first 17 n + 5 frames, n = max(1, (T - 5) // 17), give 5 n + 2)",
            "reference<i>_noise": "[1, 24, t, h, w]: the reference's noise draw (mixed in at t = 0.999)",
            "condition_rows": "[sum of reference rows, 96]: the noised references, patchified and concatenated in "
                              "packed order (the leading video rows of the sequence)",
            **latent_layouts("reference"),
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
    write_index(a.out, index)
    written = [f"{n}.png" for n, _, _ in PICTURES] + [f"video_{n}.safetensors" for n, *_ in VIDEOS] + \
        [c["file"] for c in cases] + ["cases.json"]
    for f in written:
        (a.out / f).chmod(0o644)


if __name__ == "__main__":
    main()
