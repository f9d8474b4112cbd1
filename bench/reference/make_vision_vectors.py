"""Reference vectors for the C++ Qwen3-VL vision tower (core/text/vision_*, tests/core/text/vision_test.cpp).

    ~/.cache/gst-h3/reference-venv/bin/python bench/reference/make_vision_vectors.py [OUT]

OUT defaults to tests/data/vision. Builds a small Qwen3VLForConditionalGeneration (transformers' own classes; the
release's vision structure: Conv3d patch embedding 16 x 16 x 2, a learned square position table resampled to the
grid, 2-D rotary embedding, pre-LayerNorm blocks with fused qkv and a tanh-GELU MLP, the 2 x 2 patch merger and
deepstack mergers; narrow widths) with seeded random weights, saves it with save_pretrained as a text_encoder/
folder (OUT/text_encoder/), and runs on seeded uint8 images:

- transformers' Qwen2VLImageProcessor (the torchvision backend Qwen3-VL uses) with Qwen3-VL's preprocessor
  settings (patch 16, merge 2, temporal patch 2, mean = std = 0.5, bicubic) and the case's min/max pixels:
  `pixel_values` [N, 3 * 2 * 16 * 16], `image_grid_thw` [1, 3], `resized` [3, h, w] (uint8, after the resize);
- the vision tower (model.model.visual): `image_embeds` [N / 4, out_hidden] (the merger's output) and
  `deepstack_<j>` [N / 4, out_hidden] for each deepstack layer;
- for the case `present`: the language model with the image presented as H3's FL2VA does (text ids, then
  <|vision_start|>, N / 4 x <|image_pad|>, <|vision_end|>, then more text ids; the tiny model's own small ids):
  `input_ids`, `position_ids` [3, L] (get_rope_index), `hidden_states` [layers + 1, L, hidden] as
  output_hidden_states gives them (the last one after the final norm), and `hidden_manual` [layers + 1, L, hidden]:
  the residual stream after each layer with the deepstack features added (what the next layer reads). transformers'
  hidden_states[i] (0 < i < layers) are the decoder layers' outputs *before* that addition (asserted here); past
  the deepstack layers the two agree.

Everything runs in fp32 on the CPU. The cases are listed in OUT/cases.json.
"""

import json
import math
import sys
from pathlib import Path

import numpy as np
import torch
import transformers
from safetensors.torch import save_file
from transformers import Qwen2VLImageProcessor, Qwen3VLConfig, Qwen3VLForConditionalGeneration

SEED = 2024

VISION = dict(
    depth=3,
    hidden_size=32,
    num_heads=4,
    intermediate_size=64,
    hidden_act="gelu_pytorch_tanh",
    in_channels=3,
    patch_size=16,
    spatial_merge_size=2,
    temporal_patch_size=2,
    out_hidden_size=64,
    num_position_embeddings=144,  # a 12 x 12 table (the release: 48 x 48)
    deepstack_visual_indexes=[0, 1],
    initializer_range=0.02,
)
TEXT = dict(
    hidden_size=64,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    intermediate_size=128,
    vocab_size=256,
    rms_norm_eps=1e-6,
    rope_theta=5000000,
    rope_scaling={"rope_type": "default", "mrope_section": [4, 2, 2], "mrope_interleaved": True},
    attention_bias=False,
    hidden_act="silu",
    max_position_embeddings=4096,
)
# The tiny model's special ids (the release: 151652, 151653, 151655, 151656).
IDS = dict(vision_start_token_id=250, vision_end_token_id=251, image_token_id=252, video_token_id=253)

# Qwen3-VL's preprocessor_config.json values; min/max pixels per case.
PROCESSOR = dict(patch_size=16, temporal_patch_size=2, merge_size=2, image_mean=[0.5, 0.5, 0.5],
                 image_std=[0.5, 0.5, 0.5], do_resize=True, do_rescale=True, do_normalize=True,
                 do_convert_rgb=True)
QWEN3VL_MIN_PIXELS, QWEN3VL_MAX_PIXELS = 65536, 16777216

CASES = [
    # name, height, width, min_pixels, max_pixels
    ("h64w96", 64, 96, QWEN3VL_MIN_PIXELS, QWEN3VL_MAX_PIXELS),  # upscaled to the minimum: 224 x 320
    ("h50w70", 50, 70, QWEN3VL_MIN_PIXELS, QWEN3VL_MAX_PIXELS),  # not a multiple of 32
    ("h64w96_exact", 64, 96, 32 * 32, 128 * 128),                # already multiples of 32: no resize
    ("h200w130_max", 200, 130, 32 * 32, 128 * 128),              # downscaled to the maximum
]
PRESENT_CASE = "h64w96_exact"
PREFIX_IDS = [17, 33, 5, 99, 7]  # stands for "<Picture 1>: "
PROMPT_IDS = [40, 41, 42, 3, 200, 9]


def randomize(model: torch.nn.Module, gen: torch.Generator) -> None:
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
            elif p.dim() == 1:  # norm weights
                p.copy_(1.0 + torch.randn(p.shape, generator=gen) * 0.1)
            elif name.endswith("pos_embed.weight") or name.endswith("embed_tokens.weight"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
            else:
                fan_in = math.prod(p.shape[1:])
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(fan_in))


def release_schema(path: Path) -> None:
    """transformers 5 writes `rope_parameters`; the release's text_encoder/config.json (written by 4.57) has
    text_config.rope_scaling and rope_theta, and no rope entry in vision_config (theta 10000 is the default)."""
    j = json.loads(path.read_text())
    t = j["text_config"]
    rp = t.pop("rope_parameters")
    t["rope_theta"] = rp.pop("rope_theta")
    t["rope_scaling"] = rp
    v = j["vision_config"]
    assert v.pop("rope_parameters") == {"rope_theta": 10000.0, "rope_type": "axial"}
    path.write_text(json.dumps(j, indent=2, sort_keys=True) + "\n")


def image(h: int, w: int, seed: int) -> np.ndarray:
    g = torch.Generator().manual_seed(seed)
    # Smooth gradients plus noise: the resize sees both edges and flat parts.
    y = torch.linspace(0, 1, h)[:, None, None]
    x = torch.linspace(0, 1, w)[None, :, None]
    base = 255 * (0.5 + 0.4 * torch.sin(6 * x + 4 * y + torch.tensor([0.0, 1.0, 2.0])))
    noisy = base + torch.randn(h, w, 3, generator=g) * 40
    return noisy.round().clamp(0, 255).to(torch.uint8).numpy()


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "tests/data/vision")
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(SEED)
    config = Qwen3VLConfig(vision_config=VISION, text_config=TEXT, tie_word_embeddings=True, **IDS)
    config._attn_implementation = "eager"
    model = Qwen3VLForConditionalGeneration(config).eval()
    randomize(model, torch.Generator().manual_seed(SEED))
    model.save_pretrained(out / "text_encoder", safe_serialization=True)
    release_schema(out / "text_encoder" / "config.json")
    (out / "text_encoder" / "generation_config.json").unlink()  # not part of a text_encoder/ folder
    # The rewritten config must describe the same model to transformers.
    again = Qwen3VLForConditionalGeneration.from_pretrained(out / "text_encoder").eval()
    assert again.config.text_config.rope_parameters == model.config.text_config.rope_parameters
    assert again.config.vision_config.rope_parameters == model.config.vision_config.rope_parameters
    visual = model.model.visual

    cases = {
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "vision_rope_inv_freq": visual.rotary_pos_emb.inv_freq.tolist(),
        "processor": PROCESSOR,
        "cases": [],
    }
    for i, (name, h, w, lo, hi) in enumerate(CASES):
        img = image(h, w, SEED + i)
        proc = Qwen2VLImageProcessor(**PROCESSOR, size={"shortest_edge": lo, "longest_edge": hi})
        feat = proc(images=[img], return_tensors="pt")
        pixel_values, grid = feat["pixel_values"], feat["image_grid_thw"]
        # The resized uint8 image, as the processor's resize step gives it.
        t = torch.from_numpy(img).permute(2, 0, 1).contiguous()
        gh, gw = int(grid[0, 1]) * 16, int(grid[0, 2]) * 16
        resized = proc.resize(t[None], size=transformers.image_utils.SizeDict(shortest_edge=lo, longest_edge=hi),
                              resample=proc.resample, factor=32)[0]
        assert resized.shape[-2:] == (gh, gw), (resized.shape, gh, gw)
        with torch.no_grad():
            vo = visual(pixel_values, grid_thw=grid, return_dict=True)
        # The patches are the resized image normalised and flattened: checked here, so that the large cases
        # need not store them (the C++ test compares its resize with `resized` and its patches with
        # `pixel_values` where stored).
        n_ = (resized.float() - 127.5) / 127.5
        gh_, gw_ = gh // 16, gw // 16
        p_ = n_.reshape(3, gh_ // 2, 2, 16, gw_ // 2, 2, 16).permute(1, 4, 2, 5, 0, 3, 6)
        p_ = p_.unsqueeze(5).expand(-1, -1, -1, -1, -1, 2, -1, -1).reshape(gh_ * gw_, -1)
        assert torch.equal(p_, pixel_values), "patchify order"
        tensors = {
            "image": torch.from_numpy(img).contiguous(),
            "resized": resized.contiguous(),
            "image_grid_thw": grid.to(torch.int64).contiguous(),
            "image_embeds": vo.pooler_output.contiguous(),
        }
        if pixel_values.shape[0] <= 32:
            tensors["pixel_values"] = pixel_values.contiguous()
        for j, f in enumerate(vo.deepstack_features):
            tensors[f"deepstack_{j}"] = f.contiguous()
        entry = dict(name=name, height=h, width=w, min_pixels=lo, max_pixels=hi,
                     grid_thw=grid[0].tolist(), merged_tokens=int(vo.pooler_output.shape[0]))
        if name == PRESENT_CASE:
            n = int(vo.pooler_output.shape[0])
            ids = PREFIX_IDS + [IDS["vision_start_token_id"]] + [IDS["image_token_id"]] * n + \
                [IDS["vision_end_token_id"]] + PROMPT_IDS
            input_ids = torch.tensor([ids])
            mm = (input_ids == IDS["image_token_id"]).to(torch.int32)
            position_ids, _ = model.model.get_rope_index(input_ids, mm_token_type_ids=mm, image_grid_thw=grid)
            with torch.no_grad():
                o = model.model(input_ids=input_ids, pixel_values=pixel_values, image_grid_thw=grid,
                                mm_token_type_ids=mm, output_hidden_states=True, return_dict=True)
                # The residual stream, layer by layer, with the deepstack additions.
                lm = model.model.language_model
                mask = input_ids[0] == IDS["image_token_id"]
                hs = lm.embed_tokens(input_ids)
                hs[0, mask] = vo.pooler_output
                manual = [hs[0].clone()]
                pe = lm.rotary_emb(hs, position_ids)
                causal = torch.full((len(ids), len(ids)), float("-inf")).triu(1)[None, None]
                for li, layer in enumerate(lm.layers):
                    hs = layer(hs, attention_mask=causal, position_embeddings=pe, position_ids=position_ids[0])
                    if li + 1 < len(o.hidden_states) - 1:  # transformers' hidden_states[li + 1] (not normed)
                        assert (hs[0] - o.hidden_states[li + 1][0]).abs().max() < 1e-5, li
                    if li < len(vo.deepstack_features):
                        hs = hs.clone()
                        hs[0, mask] = hs[0, mask] + vo.deepstack_features[li]
                    manual.append(hs[0].clone())
            tensors["input_ids"] = input_ids[0].contiguous()
            tensors["position_ids"] = position_ids[:, 0].contiguous()
            tensors["hidden_states"] = torch.stack([x[0] for x in o.hidden_states]).contiguous()
            tensors["hidden_manual"] = torch.stack(manual).contiguous()
            entry["present"] = dict(prefix_ids=PREFIX_IDS, prompt_ids=PROMPT_IDS, length=len(ids),
                                    hidden_states_vs_manual=[float((a[0] - b).abs().max())
                                                             for a, b in zip(o.hidden_states, manual)])
        save_file(tensors, str(out / f"case_{name}.safetensors"))
        cases["cases"].append(entry)
        print(name, entry)
    (out / "cases.json").write_text(json.dumps(cases, indent=2) + "\n")


if __name__ == "__main__":
    main()
