"""Writes the end-to-end Ref2VA reference vectors (tests/data/ref2va_pipeline): diffusers' own MiniMax-H3 modular
pipeline, workflow `ref2va` with image, video and sound references (and a video with its soundtrack), run on the tiny
conditioning model of `h3 make-tiny --conditioning`.

    ~/.cache/gst-h3/reference-venv/bin/python bench/reference/ref2va/make_pipeline_vectors.py \
        [--h3 build/tools/h3 | --model DIR] [OUT]

(the venv's torch needs LD_LIBRARY_PATH=$TORCH_DIR/torch/lib:/usr/local/cuda/lib64 where TORCH_DIR is
~/.cache/gst-h3/torch-2.11.0, as scripts/reference-venv.sh sets it). OUT defaults to tests/data/ref2va_pipeline. The
model is written by `h3 make-tiny --conditioning` into a temporary folder (or taken from --model DIR, a folder that
command wrote, which is copied and left untouched). The copy gets what diffusers' ModularPipeline needs beyond the
engine's layout (see `prepare_folder`). Three seeded pictures are saved as OUT/a.png (96 x 72), OUT/b.png (64 x 80)
and OUT/c.png (50 x 120, whose 96 short-edge scaling rounds), and three seeded videos are made in memory
(`video_frames`: v1, 48 frames of 80 x 64 said to run at 30 fps; v2, 40 frames of 96 x 54 at 24 fps; v3, 20 frames of
64 x 48 at 30 fps, 16 at 24 fps, shorter than one 22-frame encode; each frame a colour gradient whose phase moves from
frame to frame, plus seeded noise) and three seeded sounds are saved as
OUT/sound_<name>.safetensors (`sound_wave`, two seeded-phase sines plus seeded noise, float32: s1 mono 44,100 Hz
1.5 s; s2 stereo 48,000 Hz 2.0 s; s3 stereo 16,000 Hz 0.5 s, shorter than any clip), then the pipeline runs ten times,
fp32 on the CPU, with SDPA's math kernel:

- `one`: `references` = [a.png], height and width unset, num_frames 22;
- `two`: `references` = [a.png, b.png], height and width unset, num_frames 22;
- `three_sized`: `references` = [b.png, c.png, a.png], height 192 and width 224 passed, num_frames 22;
- `video`: `references` = [v1], height and width unset, num_frames 39;
- `image_video`: `references` = [a.png, v2], height and width unset, num_frames 39;
- `video_image`: `references` = [v1, a.png], height 192 and width 224 passed, num_frames 39;
- `image_audio`: `references` = [a.png, s1], height and width unset, num_frames 22;
- `video_sound`: `references` = [v1 with s2 as its soundtrack] (named "v1+s2"), height and width unset, num_frames 39;
- `audio_video_image`: `references` = [s3, v2, a.png], height 192 and width 224 passed, num_frames 39;
- `short_video`: `references` = [v3, a.png], height and width unset, num_frames 22;

every picture a `MiniMaxH3ImageReference(image=Image.open(png).convert("RGB"))`, every video a
`MiniMaxH3VideoReference(frames=<uint8 [N, H, W, 3] array>, fps=<its rate>)` (v1+s2 adds `audio=<s2's wave>,
sample_rate=48000`), every sound a `MiniMaxH3AudioReference(audio=<float32 [C, N] wave>, sample_rate=<its rate>)`
(frames and waves read back from their files), all with the prompt PROMPT, num_inference_steps 3 (sigma grid points: 2
transformer evaluations) and `generator=torch.Generator().manual_seed(7)`. 39 frames (17 * 2 + 5) make a video
reference long enough for the conditioner's 2 fps reading to take 4 frames, i.e. 2 vision blocks. Unset, the canvas is
the model's 16:9 rule (diffusers' `resolve_canvas_size(16, 9, ...)` over the canvas configs below: references never
bind the generated geometry). The pipeline is diffusers' own `ref2va` workflow
(`MiniMaxH3Blocks().get_workflow("ref2va")`, exactly what `ModularPipeline.from_pretrained(..., workflow="ref2va")`
builds) without its two decode blocks: the request ends at `denoise.after_denoise`, whose `latents` / `audio_latents`
are the final latents before decoding (the pipeline has no `output_type="latent"`; its decode steps take only
pil / np / pt).

The audio VAE. `h3 make-tiny --conditioning` writes the tiny audio VAE in the native layout (audio_vae/: config.json,
metadata.json, model.safetensors in bf16), encoder included, which diffusers' from_pretrained does not read; so after
loading, the script loads it itself and sets it with `update_components(audio_vae=...)` (see `load_audio_vae`):
AutoencoderKLMiniMaxH3Audio constructed from config.json (latent_channels 32, sample_rate 32000 as `sampling_rate`,
latents_mean / latents_std) and metadata.json's kwargs (encoder_dim 4, encoder_rates (2, 4, 4, 5, 5), latent_dim 32,
num_attention_heads 2, the decoder geometry), then `load_state_dict(strict=True)` of every tensor of
model.safetensors converted to fp32, under the file's own names (asserted: no key missing or unexpected, every shape
equal). Its encoder is what encodes a reference's sound: the reference-encoder step takes the posterior *mean* of the
wave the setup step normalised (cut to int(num_frames / 24 * rate) samples at its own rate, a mono wave upmixed by
repeating its channel, then `torchaudio.transforms.Resample(rate, 32000)` once; each channel right-padded inside
`encode` to a multiple of 800 samples), as [2A, 32] normalised channel-major rows that ride clean (t = 1.0) ahead of
the reference's video rows; the script redoes both (the normalisation, and the rows with `audio_condition_rows`) and
asserts they are what the state holds. Its decoder never runs (the request stops at the latents). A request without
sound reads only the component's config (latents_mean / latents_std, audio_latent_channels), so the six cases
without sound are what they were with the earlier stand-in, byte for byte. A sound draws no noise: the draws are one
per picture or video reference in packed order, then the video noise, then the audio noise. The after-denoise step
drops the reference audio rows, so a case's `audio_latents` are the generated audio only (asserted [2, 32, A]).

Two more files test the audio input path on its own: OUT/audio_encoder.safetensors (`write_audio_encoder`: a seeded
stereo 32 kHz wave of 41,000 samples, not a multiple of 800, `wave` [2, 41000]; `posterior_mean` =
audio_vae.encode(wave[:, None]).latent_dist.mode() [2, 32, 52]; `rows` = ((mean.transpose(1, 2) - latents_mean) /
latents_std).reshape(-1, 32) [104, 32], as the reference-encoder step makes them) and OUT/resample.safetensors
(`write_resample`: for r in 8000, 16000, 44100, 48000, `in_<r>` a seeded stereo [2, round(0.37 r)] float32 wave and
`out_<r>` = torchaudio.transforms.Resample(r, 32000)(in_<r>), the setup step's call).

The processors. The pipeline takes its Qwen3-VL processor from the model folder's processor/, which the engine's
folder does not have and which the H3 release's files among our references do not include either; the script writes
one with Qwen3-VL's published values: preprocessor_config.json for pictures (IMAGE_PROCESSOR) and
video_preprocessor_config.json for videos (VIDEO_PROCESSOR: size.shortest_edge 4096 and size.longest_edge 25,165,824
pixels for the whole clip, patch 16, temporal patch 2, merge 2, mean = std = 0.5, bicubic). That is the decision:
H3's conditioner is Qwen3-VL, and its published settings are the only ones we can read; they are not checked against
H3's own. At these sizes the video processor leaves the frames as they are (recorded per case).

Per case OUT/case_<name>.safetensors holds what the pipeline's state holds after the run (the layout included: rotary
positions, tags, row indices and every step's row timesteps), plus recordings of calls the blocks make (the token ids
and vision inputs they give the text encoder, the frames the conditioner samples from a video reference, and every
noise draw off the request's generator, in order); OUT/cases.json lists the settings and shapes. To keep the folder
small, each video is stored once, OUT/video_<name>.safetensors (`frames`, uint8 [N, H, W, 3]: what the cases give the
pipeline, read back from that file), and a video reference's normalized frames are not stored: the case file keeps
their first and last frame (`reference<i>_first`, `reference<i>_last`) and cases.json the sha256 of the whole
[T, H, W, 3] uint8 tensor and of every frame; each sound is stored once too, OUT/sound_<name>.safetensors (`wave`
float32 [C, N], `rate` int64), and a case keeps only the rows its reference's sound became
(`reference<i>_sound_rows`, i the reference's index in packed order); the video processor's patches
(`pixel_values_videos`) are not stored either: they are a function of the sampled normalized frames (checked against
a rebuild; cases.json keeps their shape and sha256). What this script shares with
bench/reference/fl2va/make_pipeline_vectors.py (the pictures, the model folder, the pipeline subclass and its loading,
the recording and the checks) is in bench/reference/pipeline_common.py. No diffusers or transformers code is copied:
the scripts call the installed packages. The same inputs give the same bytes.
"""

import dataclasses
import hashlib
import json
import math
import sys
import warnings
from pathlib import Path

import numpy as np
import torch
import torchaudio
from PIL import Image
from safetensors.torch import load_file, save_file
from torch.nn.attention import SDPBackend, sdpa_kernel

from diffusers import AutoencoderKLMiniMaxH3Audio
from diffusers.modular_pipelines.minimax_h3 import before_encoder, encoders
from diffusers.modular_pipelines.minimax_h3.references import (
    MiniMaxH3AudioReference, MiniMaxH3ImageReference, MiniMaxH3VideoReference)
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
# resampled onto 24 fps (48 frames to 38); v2's 96 x 54 is not a multiple of 32 (the canvas rule and LANCZOS); v3's
# 20 frames at 30 fps are 16 at 24 fps, fewer than one 22-frame encode: encoded whole (one clip of 17, the last frame
# repeated), 2 latent frames.
VIDEOS = [("v1", 80, 64, 48, 30.0), ("v2", 96, 54, 40, 24.0), ("v3", 64, 48, 20, 30.0)]
SOUND_SEED = 20260901
# name, channels, sample rate, samples (`sound_wave`). s1 (mono, 1.5 s at 44.1 kHz) is upmixed and resampled; s2
# (stereo, 2 s at 48 kHz) is cut to the 39-frame clip's 1.625 s, then resampled; s3 (stereo, 0.5 s at 16 kHz) is
# shorter than the clip: kept whole.
SOUNDS = [("s1", 1, 44100, 66150), ("s2", 2, 48000, 96000), ("s3", 2, 16000, 8000)]
# name, references (in packed order), (height, width) or None for the unset canvas, num_frames. A reference is a
# picture (a.png), a video (v1), a sound (s1: a MiniMaxH3AudioReference) or a video with its soundtrack (v1+s2).
CASES = [
    ("one", ("a",), None, NUM_FRAMES),
    ("two", ("a", "b"), None, NUM_FRAMES),
    ("three_sized", ("b", "c", "a"), (192, 224), NUM_FRAMES),
    ("video", ("v1",), None, NUM_FRAMES_VIDEO),
    ("image_video", ("a", "v2"), None, NUM_FRAMES_VIDEO),
    ("video_image", ("v1", "a"), (192, 224), NUM_FRAMES_VIDEO),
    ("image_audio", ("a", "s1"), None, NUM_FRAMES),
    ("video_sound", ("v1+s2",), None, NUM_FRAMES_VIDEO),
    ("audio_video_image", ("s3", "v2", "a"), (192, 224), NUM_FRAMES_VIDEO),
    ("short_video", ("v3", "a"), None, NUM_FRAMES),
]
# The two small vector files of the audio VAE's input path (written once, not per case): audio_encoder.safetensors
# (the tiny audio VAE's encoder on a stereo 32 kHz waveform of ENCODER_SAMPLES samples, not a multiple of the
# 800-sample hop) and resample.safetensors (torchaudio's Resample onto 32 kHz from each RESAMPLE_RATES rate, of
# RESAMPLE_SECONDS seconds of stereo signal).
ENCODER_SEED, ENCODER_SAMPLES = 20260911, 41000
RESAMPLE_SEED, RESAMPLE_RATES, RESAMPLE_SECONDS = 20260921, (8000, 16000, 44100, 48000), 0.37
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

COMPONENTS = {  # name: (library, class). audio_vae is loaded by the script and set after loading (load_audio_vae).
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


def sound_wave(channels: int, rate: int, samples: int, seed: int) -> torch.Tensor:
    """A sum of two sines (440 Hz, amplitude 0.3; 1250 Hz, amplitude 0.2) with seeded phases, plus seeded noise
    (sigma 0.01), float32 [channels, samples]. Off one torch.Generator seeded `seed`: the phases first (torch.rand
    [channels, 2] float64, times 2 pi: each channel's own), then the noise (torch.randn [channels, samples] float64);
    computed in float64 over t = k / rate, then rounded to float32."""
    g = torch.Generator().manual_seed(seed)
    phases = torch.rand(channels, 2, generator=g, dtype=torch.float64) * (2 * math.pi)
    t = torch.arange(samples, dtype=torch.float64) / rate
    wave = (0.3 * torch.sin(2 * math.pi * 440 * t + phases[:, :1])
            + 0.2 * torch.sin(2 * math.pi * 1250 * t + phases[:, 1:]))
    wave = wave + 0.01 * torch.randn(channels, samples, generator=g, dtype=torch.float64)
    return wave.to(torch.float32)


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


def load_audio_vae(model: Path) -> tuple[AutoencoderKLMiniMaxH3Audio, dict, dict]:
    """The tiny audio VAE (native layout: audio_vae/config.json, metadata.json, model.safetensors) loaded into
    diffusers' AutoencoderKLMiniMaxH3Audio: the class constructed from config.json (latent_channels, sample_rate as
    `sampling_rate`, latents_mean, latents_std) and metadata.json's `metadata.kwargs` (encoder_dim, encoder_rates,
    latent_dim, num_attention_heads, the decoder geometry), then `load_state_dict(strict=True)` of every tensor of
    model.safetensors (bf16, as written) converted to fp32, names as they are (checked: no key missing, none
    unexpected, every shape equal). Returns it (fp32, eval), the arguments it was built with and a record of the
    load."""
    config = json.loads((model / "audio_vae" / "config.json").read_text())
    native = json.loads((model / "audio_vae" / "metadata.json").read_text())["metadata"]["kwargs"]
    assert int(native["vae_latent_channels"]) == int(config["latent_channels"]), (native, config)
    assert int(native["sample_rate"]) == int(config["sample_rate"]), (native, config)
    args = dict(
        encoder_dim=int(native["encoder_dim"]),
        encoder_rates=tuple(int(r) for r in native["encoder_rates"]),
        latent_dim=int(native["latent_dim"]),
        latent_channels=int(config["latent_channels"]),
        num_attention_heads=int(native["num_attention_heads"]),
        decoder_dim=int(native["decoder_dim"]),
        decoder_rates=tuple(int(r) for r in native["decoder_rates"]),
        decoder_kernel_sizes=tuple(int(k) for k in native["decoder_kernel_sizes"]),
        resblock_kernel_sizes=tuple(int(k) for k in native["resblock_kernel_sizes"]),
        resblock_dilation_sizes=tuple(tuple(int(d) for d in ds) for ds in native["resblock_dilation_sizes"]),
        sampling_rate=int(config["sample_rate"]),
        latents_mean=[float(v) for v in config["latents_mean"]],
        latents_std=[float(v) for v in config["latents_std"]],
    )
    assert len(args["latents_mean"]) == len(args["latents_std"]) == args["latent_channels"]
    # Constructed under a forked global RNG (its random initialisation, overwritten below, moves no other draw).
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch's weight_norm deprecation, in diffusers' audio VAE
        vae = AutoencoderKLMiniMaxH3Audio(**args)
    stored = load_file(str(model / "audio_vae" / "model.safetensors"))
    own = vae.state_dict()
    missing, unexpected = sorted(set(own) - set(stored)), sorted(set(stored) - set(own))
    assert not missing and not unexpected, f"audio VAE keys: missing {missing}, unexpected {unexpected}"
    mismatched = [k for k in own if tuple(own[k].shape) != tuple(stored[k].shape)]
    assert not mismatched, f"audio VAE shapes differ: {mismatched}"
    dtypes = sorted({str(v.dtype).replace("torch.", "") for v in stored.values()})
    result = vae.load_state_dict({k: v.to(torch.float32) for k, v in stored.items()}, strict=True)
    assert not result.missing_keys and not result.unexpected_keys, result
    vae = vae.eval()
    assert all(v.dtype == torch.float32 for v in vae.state_dict().values())
    assert vae.hop_length == math.prod(args["encoder_rates"]) == 800, vae.hop_length
    load = {"file": "audio_vae/model.safetensors", "tensors": len(stored), "stored_dtypes": dtypes,
            "encoder_tensors": sum(k.startswith("encoder.") for k in stored),
            "buffers": sorted({k.rsplit(".", 1)[-1] for k, _ in vae.named_buffers()}),
            "hop_length": int(vae.hop_length)}
    return vae, args, load


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


def read_presentation(token_ids: list, tokenizer, kinds: list, sounded: list, image_grids, video_grids,
                      video_timestamps, merge: int, prompt: str) -> tuple[list, list]:
    """Walks a ref2va presentation, checking it token by token against its documented form (per reference in packed
    order: `"<Audio j>: "` first if it carries sound (a sound reference: that label alone); then `"<Picture i>: "`
    and an image block for a picture, or `"<Video k>: "` and per vision block `"<{t:.1f} seconds>"` and a video
    block for a video; then the prompt; i, j, k counted per modality from 1), and returns per reference its labels
    (text, ids, position) and vision blocks, and the list of all vision blocks."""
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

    counts = {"image": 0, "video": 0, "audio": 0}
    for i, (kind, sound) in enumerate(zip(kinds, sounded)):
        assert sound or kind != "audio"
        labels, rb = [], []
        if sound:
            counts["audio"] += 1
            labels.append(take(f"<Audio {counts['audio']}>: "))
        if kind == "image":
            counts[kind] += 1
            grid = [int(v) for v in image_grids[counts["image"] - 1]]
            labels.append(take(f"<Picture {counts['image']}>: "))
            rb = [block(ipad, grid[0] * grid[1] * grid[2] // merge, grid, i)]
        elif kind == "video":
            counts[kind] += 1
            t, h, w = (int(v) for v in video_grids[counts["video"] - 1])
            stamps = video_timestamps[counts["video"] - 1]
            assert len(stamps) == t, (stamps, t)
            labels.append(take(f"<Video {counts['video']}>: "))
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


@dataclasses.dataclass
class Sound:
    """A sound as the cases give it: `wave` float32 [channels, samples] at `rate` Hz (read back from its file)."""
    wave: torch.Tensor
    rate: int


def make_reference(name: str, media: dict):
    """The reference a CASES name stands for: a picture, a video, a sound (MiniMaxH3AudioReference) or, for
    `<video>+<sound>`, a video carrying that sound as its soundtrack."""
    visual, _, soundtrack = name.partition("+")
    item = media[visual]
    if isinstance(item, Sound):
        assert not soundtrack
        return MiniMaxH3AudioReference(audio=item.wave, sample_rate=item.rate)
    if isinstance(item, Image.Image):
        assert not soundtrack
        return MiniMaxH3ImageReference(image=item)
    frames, fps = item
    if soundtrack:
        sound = media[soundtrack]
        return MiniMaxH3VideoReference(frames=frames, fps=fps, audio=sound.wave, sample_rate=sound.rate)
    return MiniMaxH3VideoReference(frames=frames, fps=fps)


def sound_of(name: str) -> str | None:
    """The sound a CASES reference name carries, if any: `s1` for a sound reference, `s2` for `v1+s2`."""
    visual, _, soundtrack = name.partition("+")
    if soundtrack:
        return soundtrack
    return visual if visual in {s[0] for s in SOUNDS} else None


def resampler(rate: int, target: int) -> dict:
    """What torchaudio.transforms.Resample(rate, target), the call diffusers' setup step makes, is built with."""
    r = torchaudio.transforms.Resample(rate, target)
    return {"call": f"torchaudio.transforms.Resample({rate}, {target})", "orig_freq": int(r.orig_freq),
            "new_freq": int(r.new_freq), "gcd": int(r.gcd), "resampling_method": r.resampling_method,
            "lowpass_filter_width": int(r.lowpass_filter_width), "rolloff": float(r.rolloff),
            "kernel_shape": list(r.kernel.shape), "kernel_dtype": str(r.kernel.dtype).replace("torch.", ""),
            "width": int(r.width)}


def audio_condition_rows(vae, wave: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A stereo waveform at the audio VAE's rate, [2, n] float32, encoded as diffusers' ref2va reference-encoder step
    encodes a reference's sound: the posterior mean `vae.encode(wave[:, None]).latent_dist.mode()` [2, 32, A]
    (the channels as a batch of 2 mono waveforms, each right-padded to A * 800 samples), and its rows
    ((mean.transpose(1, 2) - latents_mean) / latents_std).reshape(-1, 32) [2A, 32] (channel-major: the left
    channel's A rows, then the right's). SDPA's math kernel, no autograd."""
    with sdpa_kernel([SDPBackend.MATH]), torch.no_grad():
        mean = vae.encode(wave[:, None]).latent_dist.mode()
    latents_mean = torch.tensor(vae.config.latents_mean).view(1, 1, -1)
    latents_std = torch.tensor(vae.config.latents_std).view(1, 1, -1)
    rows = ((mean.float().cpu().transpose(1, 2) - latents_mean) / latents_std).reshape(-1, vae.config.latent_channels)
    return mean, rows


def run_case(pipe, name: str, refs: tuple, canvas, num_frames: int, media: dict) -> tuple[dict, dict]:
    references = [make_reference(r, media) for r in refs]
    kinds = [r.kind for r in references]
    sounded = [bool(r.has_audio) for r in references]
    assert [sound_of(r) is not None for r in refs] == sounded, (refs, sounded)
    has_video = "video" in kinds
    has_sound = any(sounded)
    kwargs = dict(prompt=PROMPT, references=references, num_frames=num_frames, num_inference_steps=NUM_INFERENCE_STEPS)
    if canvas is not None:
        kwargs["height"], kwargs["width"] = canvas
    rec = Ref2VARecorder(type(pipe.processor.video_processor))
    state = run_pipeline(pipe, rec, **kwargs)
    get = state.get

    normalized = get("normalized_references")
    assert [r.kind for r in normalized] == kinds, normalized
    assert [bool(r.has_audio) for r in normalized] == sounded, normalized
    # The references as the setup step normalized them: an image [H, W, 3], a video's frames [T, H, W, 3] (a sound
    # reference has none).
    images = [np.array(r.image.convert("RGB"), dtype=np.uint8) if r.kind == "image" else
              r.frames if r.kind == "video" else None for r in normalized]
    assert all(im.dtype == np.uint8 for im in images if im is not None)
    # The visual references (pictures and videos) have condition latents and a noise draw each, in packed order; a
    # sound reference has neither.
    n_ref = len(refs)
    visual = [i for i, k in enumerate(kinds) if k != "audio"]
    conditions = get("condition_latents")
    assert len(conditions) == len(visual), (len(conditions), visual)
    n_vis = len(visual)
    condition_of = dict(zip(visual, conditions))
    # The sound of every reference that carries one, as the reference-encoder step encoded it: one [2A, 32] block of
    # normalised rows per sound-bearing reference, in packed order.
    sound_refs = [i for i in range(n_ref) if sounded[i]]
    sound_rows = list(get("audio_condition_latents"))
    assert len(sound_rows) == len(sound_refs), (len(sound_rows), sound_refs)
    rows_of = dict(zip(sound_refs, sound_rows))
    n_cond_audio = int(get("num_condition_audio_rows"))
    assert n_cond_audio == sum(int(r.shape[0]) for r in sound_rows), (n_cond_audio, [r.shape for r in sound_rows])
    video, audio = get("latents"), get("audio_latents")
    a = int(get("num_audio_latents"))
    # The after-denoise step drops the reference audio rows: the state's audio latents are the generated audio only.
    assert tuple(audio.shape) == (2, pipe.audio_latent_channels, a), (audio.shape, a)
    # The draws: one per visual reference in packed order, then the video noise, then the audio noise (check_draws);
    # a reference's sound draws nothing (its rows ride clean).
    shapes = check_draws(rec.draws, conditions, video, audio, a)
    draw_of = dict(zip(visual, rec.draws[:n_vis]))

    sounds = {}
    vae_rate = int(pipe.audio_sampling_rate)
    hop = int(pipe.audio_vae.hop_length)
    duration = int(get("num_frames")) / pipe.fps  # the setup step's max_duration: the aligned clip's seconds
    for i in sound_refs:
        sound = media[sound_of(refs[i])]
        wave = normalized[i].audio
        assert normalized[i].sample_rate == vae_rate and wave.dtype == torch.float32 and wave.shape[0] == 2, wave.shape
        # What the setup step does to a reference's sound, redone here with the same calls: cut at the given rate to
        # int(clip seconds * rate) samples, a mono sound upmixed by repeating its channel, then resampled once onto
        # the audio VAE's 32 kHz with torchaudio's Resample (not at all when the rate is 32 kHz already).
        kept = int(duration * sound.rate)
        redone = sound.wave.to(torch.float32)[:, :kept]
        redone = redone.expand(2, -1).contiguous() if redone.shape[0] == 1 else redone
        if sound.rate != vae_rate:
            redone = torchaudio.transforms.Resample(sound.rate, vae_rate)(redone)
        assert torch.equal(redone, wave), (refs[i], redone.shape, wave.shape)
        num = min(kept, int(sound.wave.shape[1]))
        if sound.rate != vae_rate:
            g = math.gcd(sound.rate, vae_rate)
            assert wave.shape[1] == math.ceil(vae_rate // g * num / (sound.rate // g)), (wave.shape, num)
        latents = math.ceil(int(wave.shape[1]) / hop)
        rows = rows_of[i]
        assert tuple(rows.shape) == (2 * latents, pipe.audio_latent_channels), (rows.shape, latents)
        # The rows are the audio VAE's posterior mean of that waveform, normalised (the reference-encoder step).
        _, rebuilt = audio_condition_rows(pipe.audio_vae, wave)
        assert torch.equal(rebuilt, rows), float((rebuilt - rows).abs().max())
        sounds[i] = {"sound": sound_of(refs[i]), "kept": kept, "samples": int(wave.shape[1]), "latents": latents}

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
        rec.token_ids, pipe.tokenizer, kinds, sounded, grids, video_grids,
        [smp["timestamps"] for smp in rec.samples], merge, PROMPT)

    # The packed layout: [text | reference blocks | target audio | target video], a reference block being its sound's
    # audio rows (2 channel-major runs of A rows), if it has sound, then its video rows, if it is a picture or a video.
    positions = get("position_ids")
    assert positions.dtype == torch.float64, positions.dtype
    video_idx, audio_idx, text_idx = get("video_indices"), get("audio_indices"), get("text_indices")
    token_tags = get("token_tags")
    assert pipe.audio_tag == 2 and bool((token_tags[audio_idx] == pipe.audio_tag).all())
    n_cond = int(get("num_condition_video_rows"))
    patch = pipe.patch_size
    ref_rows = [0] * n_ref  # video rows (none for a sound reference)
    for i, c in condition_of.items():
        ref_rows[i] = int(c.shape[2] * (c.shape[3] // patch[1]) * (c.shape[4] // patch[2]))
    ref_audio_rows = [int(rows_of[i].shape[0]) if sounded[i] else 0 for i in range(n_ref)]
    assert n_cond == sum(ref_rows), (n_cond, ref_rows)
    # The target's first latent frame: its rotary w extremes pin a sound reference's audio rows.
    target_rows = int(get("latent_height")) // patch[1] * (int(get("latent_width")) // patch[2])
    target_w = positions[L + n_cond + n_cond_audio + 2 * a:][:target_rows, 2]
    # Every reference block's rotary time: constant over each of its latent frames (an image has one); its sound's
    # rows count A latents up from the same time, once per channel.
    ref_times, ref_frame_times, row = [], [], L
    ref_video_rows, ref_audio_idx, sound_layout = [], [], {}
    for i in range(n_ref):
        t0 = float(positions[row, 0])
        if sounded[i]:
            A = ref_audio_rows[i] // 2
            block = positions[row:row + 2 * A]
            assert torch.equal(block[:, 0], (t0 + torch.arange(A, dtype=torch.float64)).repeat(2)), block[:, 0]
            assert bool((block[:, 1] == 0).all())
            # w: the two extremes of its own block's width grid (the video's for a soundtrack, the target's for a
            # sound reference), left channel at the first, right at the last.
            c = condition_of.get(i)
            own_w = target_w if c is None else positions[row + 2 * A:][:(c.shape[3] // patch[1]) * (
                c.shape[4] // patch[2]), 2]
            assert float(own_w[0]) == float(own_w.min()) and float(own_w[-1]) == float(own_w.max())
            w = [float(own_w[0]), float(own_w[-1])]
            assert bool((block[:A, 2] == w[0]).all()) and bool((block[A:, 2] == w[1]).all()), block[:, 2]
            sound_layout[i] = {"row_start": row, "rotary_w": w}
            ref_audio_idx.append(torch.arange(row, row + 2 * A))
            row += 2 * A
        if i in condition_of:
            c, rows = condition_of[i], ref_rows[i]
            times = positions[row:row + rows, 0].reshape(int(c.shape[2]), -1)
            assert bool((times == times[:, :1]).all()), times
            assert float(times[0, 0]) == t0
            ref_frame_times.append([float(v) for v in times[:, 0]])
            ref_video_rows.append(torch.arange(row, row + rows))
            row += rows
        else:
            ref_frame_times.append([])
        ref_times.append(t0)
    assert row == L + n_cond + n_cond_audio, (row, L, n_cond, n_cond_audio)
    assert torch.equal(video_idx[:n_cond].cpu(), torch.cat(ref_video_rows)), video_idx[:n_cond]
    if n_cond_audio:
        assert torch.equal(audio_idx[:n_cond_audio].cpu(), torch.cat(ref_audio_idx)), audio_idx[:n_cond_audio]
    assert int(audio_idx[n_cond_audio]) == row
    target_origin = float(positions[row, 0])  # the first target audio row
    # How far every reference block moves the rotary clock: the next block's start (the target's, after the last),
    # as a float64 difference. The clock itself adds a picture's 1, a video's span, the float64 sum, taken in order,
    # of 5/3 * (1, 4, 4, 4, 4, 1, 4, ...) over its latent frames, a sound reference's A, and for a video with sound
    # max(A, its span) (checked here: start + span is the next start).
    ref_advances = [nxt - cur for cur, nxt in zip(ref_times, ref_times[1:] + [target_origin])]
    ref_spans = []
    for i in range(n_ref):
        c = condition_of.get(i)
        span = None if c is None else 1.0 if c.shape[2] == 1 else sum(
            5.0 / 3.0 * (1, 4, 4, 4, 4)[k % 5] for k in range(int(c.shape[2])))
        if sounded[i]:
            span = float(ref_audio_rows[i] // 2) if span is None else max(float(ref_audio_rows[i] // 2), span)
        ref_spans.append(span)
    assert all(cur + span == nxt for cur, span, nxt in zip(ref_times, ref_spans, ref_times[1:] + [target_origin]))
    # The row timestep of every row at every evaluation, as the transformer is handed it.
    plan = get("row_timestep_plan")
    row_timesteps = torch.stack([unique[index] for unique, index in plan]).to(torch.float32)
    ref_row_timesteps = [sorted({float(v) for v in r[video_idx[:n_cond]]}) for r in row_timesteps]
    # A reference's sound rows: t = 1.0 at every evaluation.
    ref_audio_row_timesteps = [sorted({float(v) for v in r[audio_idx[:n_cond_audio]]}) for r in row_timesteps]
    if n_cond_audio:
        assert ref_audio_row_timesteps == [[1.0]] * len(row_timesteps), ref_audio_row_timesteps

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
        "video_noise": rec.draws[n_vis],
        "audio_noise": rec.draws[n_vis + 1],
        "condition_rows": get("condition_rows"),
        "timesteps": get("timesteps").to(torch.float32),
        "audio_timesteps": get("audio_timesteps").to(torch.float32),
        "position_ids": positions,
        "token_tags": token_tags.to(torch.int64),
        "video_indices": video_idx.to(torch.int64),
        "audio_indices": audio_idx.to(torch.int64),
        "text_indices": text_idx.to(torch.int64),
        "row_timesteps": row_timesteps,
    }
    for i, im in enumerate(images):
        if kinds[i] == "image":
            tensors[f"reference{i}"] = torch.from_numpy(im)
        elif kinds[i] == "video":
            # A video's normalized frames: only the first and the last are stored (cases.json: their sha256).
            tensors[f"reference{i}_first"] = torch.from_numpy(np.ascontiguousarray(im[0]))
            tensors[f"reference{i}_last"] = torch.from_numpy(np.ascontiguousarray(im[-1]))
        if i in condition_of:
            tensors[f"condition_latents{i}"] = condition_of[i]
            tensors[f"reference{i}_noise"] = draw_of[i]
        if sounded[i]:
            tensors[f"reference{i}_sound_rows"] = rows_of[i]
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
    for i, r in enumerate(references):
        d = {"index": i, "kind": r.kind, "name": f"{refs[i]}.png" if r.kind == "image" else refs[i],
             "labels": [{"text": lab["text"], "ids": lab["ids"], "start": lab["start"]}
                        for lab in presented[i]["labels"]],
             "vision_blocks": presented[i]["blocks"]}
        if i in condition_of:
            d["condition_latents_shape"] = list(condition_of[i].shape)
        d.update({
            "rows": ref_rows[i],
            "rotary_start": ref_times[i],
            "rotary_frame_times": ref_frame_times[i],
            "rotary_advance": ref_advances[i],
            "rotary_span": ref_spans[i]})
        if r.kind == "image":
            d["normalized_size"] = [int(images[i].shape[0]), int(images[i].shape[1])]
        elif r.kind == "video":
            smp = rec.samples[video_refs.index(i)]
            visual_name = refs[i].partition("+")[0]
            frames = media[visual_name][0]
            d.update({
                "video_file": f"video_{visual_name}.safetensors",
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
                # what the reference-encoder step hands the VAE: max(1, (n - 5) // 17) * 17 + 5 of the n frames
                "encoded_frames": min(int(images[i].shape[0]), max(1, (int(images[i].shape[0]) - 5) // 17) * 17 + 5),
                "sample_fps": float(smp["sample_fps"]),
                "sampled_indices": smp["indices"],
                "block_timestamps": smp["timestamps"],
                "timestamp_texts": [b["timestamp_text"] for b in presented[i]["blocks"]],
                "video_grid_thw": [int(v) for v in video_grids[video_refs.index(i)]],
            })
        if sounded[i]:
            si = sounds[i]
            sound, A = media[si["sound"]], si["latents"]
            first = sum(ref_audio_rows[:i])  # its rows' place among the reference audio rows (packed order)
            rows = audio_idx[first:first + 2 * A]
            d["sound"] = {
                "sound": si["sound"],
                "sound_file": f"sound_{si['sound']}.safetensors",
                "rate_given": int(sound.rate),
                "channels_given": int(sound.wave.shape[0]),
                "samples_given": int(sound.wave.shape[1]),
                "upmixed": int(sound.wave.shape[0]) == 1,
                # int(num_frames / 24 * rate): what the setup step cuts the sound to, at the given rate (a shorter
                # sound is kept whole: samples_used)
                "samples_kept": si["kept"],
                "samples_used": min(si["kept"], int(sound.wave.shape[1])),
                "resample": None if sound.rate == vae_rate else resampler(sound.rate, vae_rate),
                "resampled_rate": vae_rate,
                "resampled_samples": si["samples"],
                "padded_samples": A * hop,
                "audio_latents": A,
                "audio_rows": 2 * A,
                "row_start": sound_layout[i]["row_start"],
                "rotary_start": ref_times[i],
                "rotary_times": [ref_times[i], ref_times[i] + (A - 1)],
                "rotary_w": sound_layout[i]["rotary_w"],
                # how far the reference moves the clock: A for a sound reference, max(A, the video's span) for a
                # video with sound
                "rotary_advance": ref_advances[i],
                "rotary_span": ref_spans[i],
                "row_timesteps": [sorted({float(v) for v in step[rows]}) for step in row_timesteps],
                "sound_rows_key": f"reference{i}_sound_rows",
            }
            assert d["sound"]["row_timesteps"] == [[1.0]] * len(row_timesteps), d["sound"]["row_timesteps"]
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
        "reference_sizes": [None if im is None else [int(im.shape[-3]), int(im.shape[-2])] for im in images],
        "reference_latent_sizes": [[int(condition_of[i].shape[3]), int(condition_of[i].shape[4])]
                                   if i in condition_of else None for i in range(n_ref)],
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
    if has_sound:
        info["reference_sounds"] = [sound_of(r) for r in refs]
        info["reference_audio_rows"] = ref_audio_rows
        info["reference_audio_row_timesteps"] = ref_audio_row_timesteps
        info["audio_latents_source"] = (
            "the state's audio_latents after denoise.after_denoise: the generated rows only (the step drops the "
            f"{n_cond_audio} leading reference audio rows, num_condition_audio_rows, before unpacking; asserted "
            f"[2, 32, {a}])")
    if has_video or has_sound:
        info["reference_kinds"] = kinds
        info["reference_details"] = details
        info["reference_rotary_advances"] = ref_advances
        info["reference_rotary_spans"] = ref_spans
    if has_video:
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




def write_audio_encoder(out: Path, vae) -> dict:
    """OUT/audio_encoder.safetensors: the tiny audio VAE's encoder on a seeded stereo waveform at its own rate
    (`sound_wave(2, 32000, ENCODER_SAMPLES, ENCODER_SEED)`, a length that is not a multiple of the hop): `wave`
    [2, n], `posterior_mean` [2, 32, A] and `rows` [2A, 32], as `audio_condition_rows` makes them. Returns its
    cases.json record."""
    rate, hop = int(vae.config.sampling_rate), int(vae.hop_length)
    wave = sound_wave(2, rate, ENCODER_SAMPLES, ENCODER_SEED)
    mean, rows = audio_condition_rows(vae, wave)
    latents = math.ceil(ENCODER_SAMPLES / hop)
    assert ENCODER_SAMPLES % hop != 0
    assert mean.dtype == torch.float32 and tuple(mean.shape) == (2, vae.config.latent_channels, latents), mean.shape
    assert tuple(rows.shape) == (2 * latents, vae.config.latent_channels), rows.shape
    tensors = {"wave": wave, "posterior_mean": mean.contiguous(), "rows": rows.contiguous()}
    save_file(tensors, str(out / "audio_encoder.safetensors"))
    return {"file": "audio_encoder.safetensors", "rate": rate, "samples": ENCODER_SAMPLES, "seed": ENCODER_SEED,
            "hop_length": hop, "padded_samples": latents * hop, "audio_latents": latents,
            "shapes": {k: list(v.shape) for k, v in tensors.items()},
            "made": f"wave = sound_wave(2, {rate}, {ENCODER_SAMPLES}, {ENCODER_SEED}); posterior_mean = "
                    "audio_vae.encode(wave[:, None]).latent_dist.mode() (right-padded with zeros to a multiple of "
                    "800 samples inside encode; SDPA math kernel); rows = ((posterior_mean.transpose(1, 2) - "
                    "latents_mean) / latents_std).reshape(-1, 32), latents_mean / latents_std the audio VAE "
                    "config.json's, as float32 (diffusers' ref2va reference-encoder step)"}


def write_resample(out: Path, target: int) -> dict:
    """OUT/resample.safetensors: for each rate r of RESAMPLE_RATES, `in_<r>` (`sound_wave(2, r, round(
    RESAMPLE_SECONDS * r), RESAMPLE_SEED + k)`, the k-th rate) and `out_<r>` = torchaudio.transforms.Resample(r,
    target)(in_<r>), the call diffusers' setup step makes. Returns its cases.json record."""
    tensors, rates = {}, []
    for k, rate in enumerate(RESAMPLE_RATES):
        n = round(RESAMPLE_SECONDS * rate)
        x = sound_wave(2, rate, n, RESAMPLE_SEED + k)
        y = torchaudio.transforms.Resample(rate, target)(x)
        g = math.gcd(rate, target)
        assert y.dtype == torch.float32 and tuple(y.shape) == (2, math.ceil(target // g * n / (rate // g))), y.shape
        tensors[f"in_{rate}"], tensors[f"out_{rate}"] = x, y.contiguous()
        rates.append({"rate": rate, "in": f"in_{rate}", "out": f"out_{rate}", "in_shape": list(x.shape),
                      "out_shape": list(y.shape), "seed": RESAMPLE_SEED + k, **resampler(rate, target)})
    save_file(tensors, str(out / "resample.safetensors"))
    return {"file": "resample.safetensors", "target_rate": target, "seconds": RESAMPLE_SECONDS, "rates": rates,
            "made": f"in_<r> = sound_wave(2, r, round({RESAMPLE_SECONDS} * r), {RESAMPLE_SEED} + k) for the k-th "
                    f"rate r of {list(RESAMPLE_RATES)}; out_<r> = torchaudio.transforms.Resample(r, {target})(in_<r>) "
                    "(defaults: sinc_interp_hann, lowpass_filter_width 6, rolloff 0.99; kernel made in float64, "
                    "kept as float32; length ceil(new * n / orig) over the gcd-reduced rates)"}


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
    for i, (name, channels, rate, n) in enumerate(SOUNDS):
        # Stored once, as samples and their rate; the cases are given the samples read back from the file.
        path = a.out / f"sound_{name}.safetensors"
        save_file({"wave": sound_wave(channels, rate, n, SOUND_SEED + i),
                   "rate": torch.tensor(rate, dtype=torch.int64)}, str(path))
        stored = load_file(str(path))
        wave = stored["wave"]
        assert wave.dtype == torch.float32 and tuple(wave.shape) == (channels, n), (wave.dtype, wave.shape)
        assert stored["rate"].dtype == torch.int64 and stored["rate"].shape == () and int(stored["rate"]) == rate
        media[name] = Sound(wave, int(stored["rate"]))

    with tiny_model(a, WORKFLOW) as (model, origin, weights):
        facts = prepare_folder(model)
        pipe = load_pipeline(model, WORKFLOW, COMPONENTS, facts["text_encoder_layer"])
        audio_vae, audio_vae_args, audio_vae_load = load_audio_vae(model)
        pipe.update_components(audio_vae=audio_vae)
        assert pipe.audio_vae is audio_vae and pipe.audio_latent_channels == 32
        assert pipe.audio_sampling_rate == audio_vae_args["sampling_rate"] == 32000

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
                  f"audio {info['shapes']['audio_latents']}, reference audio rows {info['num_condition_audio_rows']}")
        audio_encoder = write_audio_encoder(a.out, audio_vae)
        resample = write_resample(a.out, int(pipe.audio_sampling_rate))

    index = {
        **index_head(__file__, origin, weights, pipe, facts),
        "pipeline": {
            "workflow": WORKFLOW,
            "blocks": workflow_blocks(WORKFLOW),
            "transformer": "transformer_ref",
            "call": {"prompt": PROMPT,
                     "references": "per case, in packed order: MiniMaxH3ImageReference(image=Image.open(png)"
                                   ".convert('RGB')) for a picture (a.png), MiniMaxH3VideoReference(frames=<uint8 "
                                   "[N, H, W, 3] array>, fps=<its rate>) for a video (v1), "
                                   "MiniMaxH3AudioReference(audio=<float32 [C, N] wave>, sample_rate=<its rate>) "
                                   "for a sound (s1), MiniMaxH3VideoReference(frames=..., fps=..., audio=<wave>, "
                                   "sample_rate=<its rate>) for a video with its soundtrack (v1+s2); the frames and "
                                   "waves read back from video_<name>.safetensors / sound_<name>.safetensors",
                     "num_frames": f"{NUM_FRAMES} (cases one, two, three_sized, image_audio, short_video; the others: "
                                   f"{NUM_FRAMES_VIDEO})",
                     "num_inference_steps": NUM_INFERENCE_STEPS,
                     "generator": f"torch.Generator().manual_seed({GENERATOR_SEED})",
                     "height": "None (cases three_sized, video_image, audio_video_image: 192)",
                     "width": "None (cases three_sized, video_image, audio_video_image: 224)"},
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
                "what": "the model folder's tiny audio VAE (audio_vae/, native layout), loaded into diffusers' "
                        "AutoencoderKLMiniMaxH3Audio and set with update_components after loading: the class "
                        "constructed from config.json (latent_channels, sample_rate as sampling_rate, latents_mean, "
                        "latents_std) and metadata.json's metadata.kwargs (encoder_dim, encoder_rates, latent_dim, "
                        "num_attention_heads, the decoder geometry), then load_state_dict(strict=True) of every "
                        "tensor of model.safetensors (bf16) converted to fp32, names unchanged (no key missing or "
                        "unexpected, asserted). Its encoder (posterior mean, never sampled) encodes every reference's "
                        "sound (the ref2va reference-encoder step; checked against audio_condition_rows); the "
                        "decoder never runs (the request stops at the latents). The step reads latents_mean / "
                        "latents_std for every request, sound or not; no number of a case without sound depends on "
                        "the component",
                "args": {k: v for k, v in audio_vae_args.items() if k not in ("latents_mean", "latents_std")},
                "load": audio_vae_load,
                "sampling_rate": int(pipe.audio_sampling_rate),
                "sound_resampling": "diffusers' setup step (_normalize_audio_condition): the wave cut to "
                                    "int(num_frames / 24 * rate) samples at its own rate, a mono wave upmixed by "
                                    "repeating its channel, then torchaudio.transforms.Resample(rate, 32000) once "
                                    "(skipped at 32000); the encoder right-pads each channel with zeros to a "
                                    "multiple of 800 samples: A = ceil(samples / 800) latents",
            },
        },
        "pictures": pictures_info(PICTURES, PICTURE_SEED),
        "videos": [{"name": n, "file": f"video_{n}.safetensors", "tensor": "frames", "dtype": "uint8",
                    "shape": [f, h, w, 3], "width": w, "height": h, "frames": f, "fps": fps, "seed": VIDEO_SEED + i,
                    "made": "in memory by video_frames(): 255 * (0.5 + 0.4 * sin(4x - 2y + (0, 2, 4) - 0.3 k)) over "
                            "x, y = linspace(0, 1) for frame k, plus torch.randn * 30 off one torch.Generator seeded "
                            "`seed` (frame by frame, [H, W, 3] each), rounded and clamped to uint8"}
                   for i, (n, w, h, f, fps) in enumerate(VIDEOS)],
        "sounds": [{"name": n, "file": f"sound_{n}.safetensors", "tensors": {"wave": "float32 [C, N]",
                                                                             "rate": "int64, 0-d"},
                    "channels": c, "rate": r, "samples": k, "seconds": k / r, "seed": SOUND_SEED + i,
                    "made": "in memory by sound_wave(): 0.3 sin(2 pi 440 t + p0) + 0.2 sin(2 pi 1250 t + p1) over "
                            "t = k / rate, p = torch.rand([C, 2]) * 2 pi (per channel), plus torch.randn([C, N]) * "
                            "0.01, both off one torch.Generator seeded `seed` (phases first), in float64, then "
                            "rounded to float32"}
                   for i, (n, c, r, k) in enumerate(SOUNDS)],
        "audio_encoder": audio_encoder,
        "resample": resample,
        "layouts": {
            "input_ids": "[L]: the presentation the conditioner gets: per reference in packed order, '<Audio j>: ' "
                         "first if it carries sound (a sound reference: that label alone, no vision block); for a "
                         "picture '<Picture i>: ' then <|vision_start|>, image pads, <|vision_end|>; for a video "
                         "'<Video k>: ' then per vision block '<{t:.1f} seconds>', <|vision_start|>, video pads, "
                         "<|vision_end|> (i, j, k counted per modality from 1, j over sound references and "
                         "soundtracks together); then the prompt (no special tokens)",
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
            "sound_<name>.safetensors": "wave: [C, N] float32 and rate: int64 0-d, the samples and rate given to every "
                                        "reference with sound <name> (reference_details[i].sound: sound_file)",
            "reference<i>_sound_rows": "a reference with sound only: [2A, 32] fp32, its sound's audio condition rows "
                                       "as the reference-encoder step made them (the state's audio_condition_latents "
                                       "entry): ((mean.transpose(1, 2) - latents_mean) / latents_std).reshape(-1, "
                                       "32) of the audio VAE's posterior mean [2, 32, A] of the normalised wave, "
                                       "channel-major (left channel's A rows, then the right's); packed clean, "
                                       "t = 1.0",
            "pixel_values_videos": "not stored: the video processor's patches [sum of t * h * w, 3 * 2 * 16 * 16] "
                                   "fp32, a function of the sampled normalized frames ((x - 127.5) / 127.5, flattened "
                                   "per patch as (channel, frame, row, column), merge-block order; video_patches() "
                                   "rebuilds them); per case its shape and sha256",
            "condition_latents<i>": "a picture or video reference only: [1, 24, t, h, w]: the clean normalised "
                                    "reference latents (t = 1 for a picture; a video's first 17 n + 5 frames, "
                                    "n = max(1, (T - 5) // 17), give 5 n + 2)",
            "reference<i>_noise": "a picture or video reference only: [1, 24, t, h, w]: the reference's noise draw "
                                  "(mixed in at t = 0.999); a sound draws none",
            "condition_rows": "[sum of reference video rows, 96]: the noised picture and video references, "
                              "patchified and concatenated in packed order (the sequence's reference video rows)",
            **latent_layouts("reference"),
            "audio_latents": "[2, 32, A]: the generated audio latents only (the after-denoise step drops the "
                             "reference audio rows), stereo channel = batch item, then latent channel, then time "
                             "(the pipeline's after-denoise layout, what the mono audio VAE decodes)",
            "position_ids": "[S, 3] float64: the (t, h, w) rotary coordinate of every row of the packed sequence "
                            "[text | reference blocks | target audio | target video]; a reference block is its "
                            "sound's 2A audio rows (if it has sound: t = start + 0..A-1 per channel, h 0, w the two "
                            "extremes of its own block's width grid, the video's for a soundtrack, the target's for a "
                            "sound reference) then its video rows (a picture or video)",
            "token_tags": "[S]: the modality tag of every row (0 video, 1 text, 2 audio)",
            "video_indices": "[reference video rows + T * h/2 * w/2]: sequence positions of the video rows, "
                             "reference rows first",
            "audio_indices": "[reference audio rows + 2 * A]: sequence positions of the audio rows, reference rows "
                             "first",
            "text_indices": "[L]: sequence positions of the text rows",
            "row_timesteps": "[evaluations, S] fp32: the timestep of every row at every evaluation (reference video "
                             "rows max(t, 0.999), reference audio rows 1.0, generated audio the audio schedule, text "
                             "and generated video the video schedule)",
            "audio_encoder.safetensors": "wave [2, n] float32 at 32 kHz, posterior_mean [2, 32, A] = "
                                         "audio_vae.encode(wave[:, None]).latent_dist.mode(), rows [2A, 32] its "
                                         "normalised channel-major rows (as reference<i>_sound_rows)",
            "resample.safetensors": "in_<r> [2, n] float32 at r Hz, out_<r> = torchaudio.transforms.Resample(r, "
                                    "32000)(in_<r>), for r in 8000, 16000, 44100, 48000",
        },
        "cases": cases,
    }
    write_index(a.out, index)
    written = [f"{n}.png" for n, _, _ in PICTURES] + [f"video_{n}.safetensors" for n, *_ in VIDEOS] + \
        [f"sound_{n}.safetensors" for n, *_ in SOUNDS] + [c["file"] for c in cases] + \
        ["audio_encoder.safetensors", "resample.safetensors", "cases.json"]
    for f in written:
        (a.out / f).chmod(0o644)


if __name__ == "__main__":
    main()
