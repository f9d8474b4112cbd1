"""Writes the model folder of the end-to-end race (scripts/bench-reference.sh e2e): one folder that
diffusers' MiniMax-H3 modular pipeline and the engine (h3src) both load, with random weights.

    python make_e2e_model.py DIR

The sizes are the benchmarks' "medium" model (medium_spec() in tools/tiny_model.cpp): a DiT of
hidden 384, 6 blocks + 2 refiner blocks, 4 heads x 128, SwiGLU 1024, text 256, and a video decoder
of 4 layers, 4 heads x 64. Every module is written by its own library's save_pretrained from a
random init (the weights drawn by make_inputs.randomize where diffusers' init would leave most of
the network an identity), so the files are in the layout diffusers and transformers write. What the
folder needs beyond the project's own data/default layout, and why:

- modular_model_index.json (with `_blocks_class_name`): diffusers' ModularPipeline.from_pretrained
  resolves its blocks only from that file; model_index.json (which the engine reads) is kept too.
- a text encoder of 51 layers, conditioning on hidden_states[50]: diffusers' MiniMax-H3 pipeline
  reads layer 50 whatever model_index.json says (its `text_encoder_layer` is a constant), so the
  3-layer encoder of data/default cannot be used there. Width 256 (the medium DiT's text_dim),
  4 query / 2 key-value heads of 64, SwiGLU 512, the release's vocabulary; stored in bf16 as the
  release's is (both sides compute it in fp32). Its config.json also carries the release's
  `rope_scaling` / `rope_theta` keys beside transformers 5's `rope_parameters`: the engine reads
  the former.
- processor/ (Qwen3VLProcessor over data/default's tokenizer): the pipeline's text step asks it
  for the token type ids; data/default has none.
- the schedulers at the release's shifts (12 video, 3 audio).
The audio VAE and the tokenizer are data/default's (the audio VAE is already a diffusers folder).
"""

import json
import shutil
import sys
from pathlib import Path

import torch
from diffusers import AutoencoderKLMiniMaxH3, MiniMaxH3Scheduler, MiniMaxH3Transformer3DModel
from transformers import (
    AutoTokenizer,
    Qwen2VLImageProcessor,
    Qwen3VLConfig,
    Qwen3VLForConditionalGeneration,
    Qwen3VLProcessor,
    Qwen3VLVideoProcessor,
)

from make_inputs import randomize

DEFAULT_MODEL = Path(__file__).resolve().parents[2] / "data" / "default"

# medium_spec() of tools/tiny_model.cpp, in diffusers' names.
DIT_CONFIG = dict(
    num_attention_heads=4,
    attention_head_dim=128,
    hidden_size=384,
    num_layers=6,
    num_refiner_layers=2,
    ffn_dim=1024,
    text_dim=256,
    time_embed_hidden_dim=384,
    time_embed_dim=192,
)
VAE_DECODER = dict(decoder_num_layers=4, decoder_num_attention_heads=4, decoder_attention_head_dim=64)
TEXT_LAYERS, TEXT_ENCODER_LAYER = 51, 50
TEXT_CONFIG = dict(
    hidden_size=DIT_CONFIG["text_dim"],
    num_hidden_layers=TEXT_LAYERS,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    intermediate_size=512,
    vocab_size=151936,
    rms_norm_eps=1e-6,
    rope_theta=5000000.0,
    rope_scaling=dict(rope_type="default", mrope_section=[12, 10, 10], mrope_interleaved=True),
)
# A one-block vision tower: the pipeline never runs it for a text-only request, but the class builds
# one, and without a config it would build the release's (hundreds of MB of random weights at load).
VISION_CONFIG = dict(
    depth=1,
    hidden_size=32,
    intermediate_size=64,
    num_heads=2,
    out_hidden_size=DIT_CONFIG["text_dim"],
    num_position_embeddings=16,
    deepstack_visual_indexes=[],
)

COMPONENTS = {  # name: (library, class)
    "text_encoder": ("transformers", "Qwen3VLForConditionalGeneration"),
    "tokenizer": ("transformers", "Qwen2TokenizerFast"),
    "processor": ("transformers", "Qwen3VLProcessor"),
    "transformer": ("diffusers", "MiniMaxH3Transformer3DModel"),
    "vae": ("diffusers", "AutoencoderKLMiniMaxH3"),
    "audio_vae": ("diffusers", "AutoencoderKLMiniMaxH3Audio"),
    "scheduler": ("diffusers", "MiniMaxH3Scheduler"),
    "audio_scheduler": ("diffusers", "MiniMaxH3Scheduler"),
}


def make_transformer(out: Path, gen: torch.Generator) -> None:
    dit = MiniMaxH3Transformer3DModel(**DIT_CONFIG)
    randomize(dit, gen)
    dit.save_pretrained(out / "transformer", safe_serialization=True)


def make_vae(out: Path, gen: torch.Generator) -> None:
    mean = (torch.randn(24, generator=gen, dtype=torch.float64) * 0.5).tolist()
    std = (torch.rand(24, generator=gen, dtype=torch.float64) + 0.5).tolist()
    # A small encoder: a text-only request never runs it (the engine's loader skips its tensors).
    vae = AutoencoderKLMiniMaxH3(
        block_out_channels=(32, 32, 32, 32, 32, 32), latents_mean=tuple(mean), latents_std=tuple(std), **VAE_DECODER
    )
    randomize(vae, gen)
    vae.save_pretrained(out / "vae", safe_serialization=True)


def make_text_encoder(out: Path, seed: int) -> None:
    torch.manual_seed(seed)  # transformers' own init (normal 0.02, unit norms) draws from the global RNG
    config = Qwen3VLConfig(text_config=dict(TEXT_CONFIG), vision_config=dict(VISION_CONFIG), tie_word_embeddings=False)
    model = Qwen3VLForConditionalGeneration(config).to(torch.bfloat16)
    model.save_pretrained(out / "text_encoder", safe_serialization=True)
    # The release's config form beside transformers 5's: text_config.rope_scaling and rope_theta.
    path = out / "text_encoder" / "config.json"
    cfg = json.loads(path.read_text())
    text = cfg["text_config"]
    text["rope_scaling"] = dict(TEXT_CONFIG["rope_scaling"])
    text["rope_theta"] = TEXT_CONFIG["rope_theta"]
    text["dtype"] = "bfloat16"
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def copy_default(out: Path, name: str) -> None:
    shutil.copytree(DEFAULT_MODEL / name, out / name, dirs_exist_ok=True)


def make_processor(out: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(out / "tokenizer")
    processor = Qwen3VLProcessor(
        image_processor=Qwen2VLImageProcessor(), tokenizer=tokenizer, video_processor=Qwen3VLVideoProcessor()
    )
    processor.save_pretrained(out / "processor")


def make_schedulers(out: Path) -> None:
    MiniMaxH3Scheduler(shift=12.0).save_pretrained(out / "scheduler")
    MiniMaxH3Scheduler(shift=3.0).save_pretrained(out / "audio_scheduler")


def write_indexes(out: Path) -> None:
    entries = {
        name: [lib, cls, {"subfolder": name, "type_hint": [lib, cls]}] for name, (lib, cls) in COMPONENTS.items()
    }
    index = {
        "_class_name": "MiniMaxH3ModularPipeline",
        "_gst_h3_e2e": "Random medium-size weights for scripts/bench-reference.sh e2e "
        "(bench/reference/make_e2e_model.py).",
        "text_encoder_layer": TEXT_ENCODER_LAYER,
        **{k: v for k, v in entries.items() if k != "processor"},
    }
    (out / "model_index.json").write_text(json.dumps(index, indent=2) + "\n")
    modular = {"_class_name": "MiniMaxH3ModularPipeline", "_blocks_class_name": "MiniMaxH3Blocks", **entries}
    (out / "modular_model_index.json").write_text(json.dumps(modular, indent=2) + "\n")


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    make_transformer(out, torch.Generator().manual_seed(3031))
    make_vae(out, torch.Generator().manual_seed(3032))
    make_text_encoder(out, 3033)
    copy_default(out, "audio_vae")
    copy_default(out, "tokenizer")
    make_processor(out)
    make_schedulers(out)
    write_indexes(out)
    (out / ".complete").write_text("ok\n")


if __name__ == "__main__":
    main()
