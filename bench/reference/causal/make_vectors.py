"""Reference vectors for the chunk-causal (RAVEN-Streaming) sampler.

    python make_vectors.py --raven DIR [--transformer DIR] --out DIR [--check-only]

DIR given to --raven holds RAVEN-Streaming's `raven_streaming/` package (commit bcfa381, materialised from a
fetched copy; see make_vectors.sh). Its torch-only modules run here as they are: `consistency.sample_streaming`
(the chunk-major sampler and its RNG contract), `cache.ChunkKVCache` (the KV cache, sink/window eviction),
`layout` (chunk cut, positions) and, for reading the LoRA file, `lora.manifest_from_file`. They drive the causal
lane of causal_lane.py, written on diffusers' MiniMax-H3 modules. Nothing of RAVEN's is copied into this tree.

Steps:
1. The random LoRA (PEFT layout on RAVEN's module paths) is written to OUT/lora/ and read back through RAVEN's own
   parser; it is attached to diffusers' modules as fp32 activation residuals.
2. The transcription is checked against diffusers' own dense forward (MiniMaxH3Transformer3DModel.forward, with
   the visibility the cache gives expressed as an attention mask on its blocks): a single whole-clip chunk with a
   cache holding everything (noise role, distinct video/audio/text timesteps), and multi-chunk clean fills with
   the cache holding everything and with sink/window eviction. Each prints max |diff| and must be <= 1e-5.
3. The cases: RAVEN's sampler over the lane; per chunk and step the predicted x0 of both streams, the whole-clip
   noise draws and the final latents are written to OUT/case_<name>.safetensors, described in OUT/cases.json.
4. The LoRA on the ordinary dense model: diffusers' non-causal forward on the inputs of the golden h3_dit case
   DENSE_LORA_CASE, without the LoRA (must reproduce that case's velocities) and with it, written to
   OUT/dense_lora.safetensors in that case's convention, so that a test of the dense engine with the LoRA attached
   compares its forward of the golden case's inputs directly.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

REPO = Path(__file__).resolve().parents[3]

# sha256 of RAVEN's files at bcfa381, so that a different checkout cannot silently produce other vectors
RAVEN_COMMIT = "bcfa381"
RAVEN_FILES = {
    "raven_streaming/__init__.py": "c8325e18deca4724245471193a6f24a3a4dbfb072ee7e8aa7852340bc8048447",
    "raven_streaming/consistency.py": "43e92ce388cfc3120b01c0ca80c394fdaffe91e95acae56a9b97048df1036dfd",
    "raven_streaming/cache.py": "6ee8e7108b93a9e98ceaea292d9c01693a202f54b89d74f1b800c6a9afffecf3",
    "raven_streaming/layout.py": "eec5f1ab4174be51228098f134868493c9cf22fe5a1ce6cbb0004064423b15fd",
    "raven_streaming/contracts.py": "c9fd787b4b80fea83b4dbb8eabdfce59a174024e1515ddf1b060cd33e63aa643",
    "raven_streaming/lora.py": "c797701dba2c2aaeaa27a073f22c0be738084a000aff1491ed1ce4d664bee4a0",
    "raven_streaming/runtime_linear.py": "efe1dd0339c520046b28016ea4892199247a15e1a859d697a1cebb21c7d36f78",
}

LORA_RANK, LORA_ALPHA, LORA_SEED = 4, 8.0, 2028
PEFT_PREFIX = "base_model.model.dit."
DENSE_TOL = 1e-5
# Step 4's inputs: a golden h3_dit forward case (tests/data/golden/README.md) made on the same tiny transformer
DENSE_LORA_CASE = "tests/data/golden/h3_dit/case_tiny_t7_h6w8_L17.safetensors"

# name, k (frames = 17k + 5), width, height, text rows, seed, steps, video shift, audio shift, sink, window
CASES = [
    ("k1_sink2_window2", 1, 64, 64, 5, 42, 4, 12.0, 3.0, 2, 2),
    ("k1_sink1_window0", 1, 64, 64, 5, 43, 4, 12.0, 3.0, 1, 0),
    ("k2_sink2_window2", 2, 96, 64, 7, 44, 4, 12.0, 3.0, 2, 2),
    ("k2_sink1_window0", 2, 96, 64, 7, 45, 4, 12.0, 3.0, 1, 0),
    ("k4_sink2_window2", 4, 64, 64, 9, 46, 4, 12.0, 3.0, 2, 2),
    ("k4_sink1_window0", 4, 64, 64, 9, 47, 4, 12.0, 3.0, 1, 0),
    ("k2_sink1_window1_steps3", 2, 64, 96, 6, 48, 3, 5.0, 2.0, 1, 1),
]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def import_raven(root: Path, allow_other: bool):
    for rel, digest in RAVEN_FILES.items():
        got = sha256(root / rel)
        if got != digest:
            msg = f"{root / rel}: sha256 {got} is not the file at RAVEN {RAVEN_COMMIT}"
            if not allow_other:
                raise SystemExit(msg + " (--allow-other-raven to go on)")
            print("WARNING: " + msg, file=sys.stderr)
    sys.path.insert(0, str(root))
    from raven_streaming import cache, consistency, layout, lora  # noqa: E402  torch-only, no ComfyUI
    assert "comfy" not in sys.modules, "RAVEN's torch-only modules imported ComfyUI"
    return SimpleNamespace(cache=cache, consistency=consistency, layout=layout, lora=lora)


# --- the LoRA ---------------------------------------------------------------------------------------------
def lora_inventory(cfg) -> dict:
    """RAVEN's 266-module target list (lora.py:350-382), for these dimensions: path -> (out, in)."""
    h, inner, ffn = cfg.hidden_size, cfg.num_attention_heads * cfg.attention_head_dim, cfg.ffn_dim
    vp = cfg.in_channels * math.prod(cfg.patch_size)
    inv = {"video_patch_proj": (h, vp), "audio_patch_proj": (h, cfg.audio_in_channels),
           "condition_proj": (h, cfg.text_dim), "time_embedder.proj_in": (cfg.time_embed_hidden_dim, cfg.freq_dim),
           "time_embedder.proj_out": (cfg.time_embed_dim, cfg.time_embed_hidden_dim)}

    def attn_mlp(prefix):
        inv[f"{prefix}.attn.qkv_proj"] = (3 * inner, h)
        inv[f"{prefix}.attn.out_proj"] = (h, inner)
        inv[f"{prefix}.mlp.fc1"] = (2 * ffn, h)
        inv[f"{prefix}.mlp.fc2"] = (h, ffn)

    for i in range(cfg.num_refiner_layers):
        attn_mlp(f"token_refiner.blocks.{i}")
    for i in range(cfg.num_layers):
        attn_mlp(f"blocks.{i}")
        inv[f"blocks.{i}.adaln_proj.linear"] = (6 * h * 3, cfg.time_embed_dim)
    inv["final_layer.adaln_proj.linear"] = (2 * h, cfg.time_embed_dim)
    inv["final_layer.video_out"] = (vp, h)
    inv["final_layer.audio_out"] = (cfg.audio_in_channels, h)
    return inv


def write_lora(cfg, folder: Path) -> dict:
    """Seeded random A [r, in] ~ N(0, 1/in) and B [out, r] ~ N(0, 0.05^2), fp32, every target module."""
    from safetensors.torch import save_file
    gen = torch.Generator().manual_seed(LORA_SEED)
    tensors = {}
    inv = lora_inventory(cfg)
    for path, (out_f, in_f) in inv.items():
        a = torch.randn(LORA_RANK, in_f, generator=gen) / math.sqrt(in_f)
        b = torch.randn(out_f, LORA_RANK, generator=gen) * 0.05
        tensors[f"{PEFT_PREFIX}{path}.lora_A.weight"] = a.contiguous()
        tensors[f"{PEFT_PREFIX}{path}.lora_B.weight"] = b.contiguous()
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    config = {
        "peft_type": "LORA", "r": LORA_RANK, "lora_alpha": LORA_ALPHA, "lora_dropout": 0.0, "bias": "none",
        "fan_in_fan_out": False, "use_rslora": False, "use_dora": False, "init_lora_weights": False,
        "base_model_name_or_path": "tests/data/golden/h3_dit/transformer_tiny (random weights)",
        "target_modules": list(inv),
    }
    (folder / "adapter_config.json").write_text(json.dumps(config, indent=1) + "\n")
    return inv


def read_lora(raven, cfg, folder: Path):
    """Read the file back with RAVEN's own parser (lora.py:520-720), dimensions set to the tiny model."""
    base = raven.lora.RavenBaseConfig(
        hidden_size=cfg.hidden_size, num_layers=cfg.num_layers, token_refiner_num_layers=cfg.num_refiner_layers,
        num_attention_heads=cfg.num_attention_heads, attention_head_dim=cfg.attention_head_dim,
        ffn_hidden_size=cfg.ffn_dim, latents_dim=cfg.in_channels, audio_latents_dim=cfg.audio_in_channels,
        patch_size=tuple(cfg.patch_size), text_dim=cfg.text_dim, timestep_input_dim=cfg.freq_dim,
        time_embed_hidden_size=cfg.time_embed_hidden_dim, time_embed_dim=cfg.time_embed_dim)
    counts = {"core": 4 * (cfg.num_refiner_layers + cfg.num_layers), "adaln": cfg.num_layers + 1, "time": 2,
              "boundary": 5}
    path = str(folder / "adapter_model.safetensors")
    manifest = raven.lora.manifest_from_file(path, base, expected_counts=counts)
    weights = raven.lora.load_lora_weights(path, manifest)
    return manifest, weights, counts


# --- diffusers' dense forward, with the cache's visibility as a mask ---------------------------------------
def dense_forward(model, text, video, audio, t_text, t_video, t_audio, chunk_of_latent, visible):
    """diffusers' MiniMaxH3Transformer3DModel.forward on [text | audio | video] (its modular pipeline's t2va
    layout). `chunk_of_latent(kind, index)` gives a media row's chunk and `visible(c)` the earlier chunks chunk c
    sees; text rows see text only, media rows see text, their own chunk and the visible ones."""
    from diffusers.models.transformers.transformer_minimax_h3 import MiniMaxH3AttnProcessor
    from diffusers.modular_pipelines.minimax_h3.before_denoise import (MiniMaxH3PrepareLayoutStep,
                                                                      patchify_video_latents)
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from causal_lane import pack_audio, unpack_audio, unpatchify_video

    L = text.shape[1]
    _, c, T, H, W = video.shape
    A = audio.shape[-1]
    patch = tuple(model.config.patch_size)
    pos, tags, vi, ai, ti, _, _ = MiniMaxH3PrepareLayoutStep.build_packed_sequence(
        torch.ones(L, dtype=torch.long), T, H, W, A, patch, 2, 2, 0)
    S = pos.shape[0]
    unique = sorted({t_text, t_video, t_audio})
    index = {v: i for i, v in enumerate(unique)}
    ts_idx = torch.full((S,), index[t_video], dtype=torch.long)
    ts_idx[ai] = index[t_audio]
    ts_idx[ti] = index[t_text]

    chunk = torch.full((S,), -1, dtype=torch.long)
    frame_rows = (H // 2) * (W // 2)
    for r, row in enumerate(vi.tolist()):
        chunk[row] = chunk_of_latent("video", r // frame_rows)
    for r, row in enumerate(ai.tolist()):
        chunk[row] = chunk_of_latent("audio", r % A)
    n_chunks = int(chunk.max()) + 1
    see = torch.zeros(n_chunks + 1, n_chunks + 1, dtype=torch.bool)  # [query chunk + 1, key chunk + 1]
    see[0, 0] = True
    for q in range(n_chunks):
        see[q + 1, 0] = True
        see[q + 1, q + 1] = True
        for k in visible(q):
            see[q + 1, k + 1] = True
    mask = see[chunk + 1][:, chunk + 1]

    class Masked(MiniMaxH3AttnProcessor):
        def __call__(self, attn, hidden_states, rotary_emb=None, attention_mask=None):
            return super().__call__(attn, hidden_states, rotary_emb, mask)

    for block in model.transformer_blocks:
        block.attn.set_processor(Masked())
    try:
        with torch.no_grad(), sdpa_kernel([SDPBackend.MATH]):
            v_rows, a_rows = model(
                hidden_states=patchify_video_latents(video, patch)[None], audio_hidden_states=pack_audio(audio)[None],
                encoder_hidden_states=text, timestep=torch.tensor(unique, dtype=torch.float32),
                timestep_indices=ts_idx, token_tags=tags, position_ids=pos.to(torch.float32), video_indices=vi,
                audio_indices=ai, text_indices=ti, return_dict=False)
    finally:
        for block in model.transformer_blocks:
            block.attn.set_processor(MiniMaxH3AttnProcessor())
    return unpatchify_video(v_rows[0], c, T, H, W), unpack_audio(a_rows[0])


def retained_before(sink, window, c):
    """Media chunks chunk c attends besides itself: cache records [0, sink) | [max(sink, n - window), n) of the
    n = c + 1 committed (record 0 = text, record j = media chunk j - 1); window None keeps all (cache.py:11-20)."""
    n = c + 1
    keep = range(n) if window is None else list(range(min(sink, n))) + list(range(max(min(sink, n), n - window), n))
    return [r - 1 for r in keep if r >= 1]


def dense_checks(lane, raven, model, out_tensors: dict, report: list) -> None:
    """Step 2 of the module docstring."""
    from causal_lane import fp32_one_minus, fp32_scalar
    lay = raven.layout
    gen = torch.Generator().manual_seed(7)

    def maxdiff(a, b):
        return float((a - b).abs().max())

    # (a) one chunk holding the whole clip (22 frames at 96x64: 7 x 4 x 6 latents, A = 37), noise role
    L, frames, width, height = 6, 22, 96, 64
    base = lay.T2VALayout.from_request(text_len=L, frames=frames, width=width, height=height)
    whole = lay.Chunk(index=0, video_start=0, video_stop=base.latent_t, audio_start=0, audio_stop=base.audio_t,
                      frame_rows=base.frame_rows)
    one = lay.T2VALayout(text_len=L, frames=frames, width=width, height=height, latent_t=base.latent_t,
                         latent_h=base.latent_h, latent_w=base.latent_w, audio_t=base.audio_t, chunks=(whole,))
    text = torch.randn(1, L, model.config.text_dim, generator=gen)
    video = torch.randn(1, 24, base.latent_t, base.latent_h, base.latent_w, generator=gen)
    audio = torch.randn(1, 32, 2, base.audio_t, generator=gen)
    sigma_v, sigma_a = 0.7, 0.35
    cache = raven.cache.ChunkKVCache(len(model.transformer_blocks), sink=1, window=None)
    lane.prefill_text(text, cache=cache, compute_dtype=torch.float32)
    cv, ca = lane.forward_chunk(video_latent=video, audio_latent=audio, layout=one, chunk_index=0, cache=cache,
                                role="noise", video_sigma=sigma_v, audio_sigma=sigma_a, compute_dtype=torch.float32)
    dv, da = dense_forward(model, text, video, audio, fp32_scalar(0.999), fp32_one_minus(sigma_v),
                           fp32_one_minus(sigma_a), lambda kind, i: 0, lambda c: [])
    d = max(maxdiff(cv, dv), maxdiff(ca, da))
    report.append({"check": "single whole-clip chunk, noise role, cache = text (holds everything)",
                   "clip": [base.latent_t, base.latent_h, base.latent_w, base.audio_t], "text_rows": L,
                   "sigma_video": sigma_v, "sigma_audio": sigma_a, "max_abs_diff_video": maxdiff(cv, dv),
                   "max_abs_diff_audio": maxdiff(ca, da), "velocity_absmax": float(dv.abs().max())})
    print(f"dense check (a) single chunk, noise: max|diff| video {maxdiff(cv, dv):.3e} audio {maxdiff(ca, da):.3e}")
    assert d <= DENSE_TOL, d
    out_tensors.update({"single.text": text, "single.video_xt": video, "single.audio_xt": audio,
                        "single.velocity_video": cv.contiguous(), "single.velocity_audio": ca.contiguous()})

    # (b) every chunk of a k = 4 clip committed clean, in order; each clean forward's velocities against the dense
    # forward of the whole clean clip under the chunk-causal mask the cache policy implies
    L, frames, width, height = 5, 73, 64, 64
    lo = lay.T2VALayout.from_request(text_len=L, frames=frames, width=width, height=height)
    text = torch.randn(1, L, model.config.text_dim, generator=gen)
    x0_v = torch.randn(1, 24, lo.latent_t, lo.latent_h, lo.latent_w, generator=gen)
    x0_a = torch.randn(1, 32, 2, lo.audio_t, generator=gen)
    eps_v = torch.randn(x0_v.shape, generator=gen)
    eps_a = torch.randn(x0_a.shape, generator=gen)
    t = fp32_scalar(0.999)
    mix_v = t * x0_v + fp32_one_minus(t) * eps_v
    mix_a = t * x0_a + fp32_one_minus(t) * eps_a

    def chunk_of(kind, i):
        for ch in lo.chunks:
            lo_, hi_ = (ch.video_start, ch.video_stop) if kind == "video" else (ch.audio_start, ch.audio_stop)
            if lo_ <= i < hi_:
                return ch.index
        raise AssertionError

    for sink, window in ((1, None), (2, 2), (1, 0), (2, 1)):
        cache = raven.cache.ChunkKVCache(len(model.transformer_blocks), sink=sink, window=window)
        lane.prefill_text(text, cache=cache, compute_dtype=torch.float32)
        dv, da = dense_forward(model, text, mix_v, mix_a, t, t, t, chunk_of,
                               lambda c: retained_before(sink, window, c))
        worst_v = worst_a = 0.0
        for ch in lo.chunks:
            sl_v = (slice(None), slice(None), slice(ch.video_start, ch.video_stop))
            sl_a = (slice(None), slice(None), slice(None), slice(ch.audio_start, ch.audio_stop))
            expect = [r - 1 for r in cache.retained_index_set(ch.index + 1) if r >= 1]
            assert expect == retained_before(sink, window, ch.index), (expect, sink, window)
            cv, ca = lane.forward_chunk(video_latent=x0_v[sl_v], audio_latent=x0_a[sl_a], layout=lo,
                                        chunk_index=ch.index, cache=cache, role="clean", video_eps=eps_v[sl_v],
                                        audio_eps=eps_a[sl_a], compute_dtype=torch.float32)
            worst_v, worst_a = max(worst_v, maxdiff(cv, dv[sl_v])), max(worst_a, maxdiff(ca, da[sl_a]))
        label = f"sink {sink} window {window}"
        print(f"dense check (b) {lo.num_chunks} chunks all clean, {label}: max|diff| video {worst_v:.3e} "
              f"audio {worst_a:.3e}")
        report.append({"check": f"{lo.num_chunks} chunks committed clean in order, {label}, against the dense "
                                "forward under the chunk-causal mask",
                       "clip": [lo.latent_t, lo.latent_h, lo.latent_w, lo.audio_t], "text_rows": L,
                       "sink": sink, "window": window, "max_abs_diff_video": worst_v, "max_abs_diff_audio": worst_a})
        assert max(worst_v, worst_a) <= DENSE_TOL, (sink, window, worst_v, worst_a)


# --- the LoRA on diffusers' ordinary dense forward, on a golden h3_dit case -----------------------------------
def golden_dense_forward(model, case: dict):
    """diffusers' MiniMaxH3Transformer3DModel.forward, non-causal, on a golden h3_dit case's inputs in that case's
    own convention (tests/data/golden/README.md; the same call as bench/reference/run_reference.py's dit runner):
    `text` [L, 64], `video` [1, 24, T, h, w], `audio` as the DiT's rows [2A, 32] (left channel's A rows, then the
    right's), `t_video`/`t_audio` 0-d with t = 1 - sigma. The t2va layout [text | audio | video], text rows at
    t_video and attending every row, no mask. Returns the model's outputs as they are (no negation, the sign
    tests/core/dit/golden_test.cpp compares Transformer::forward with): [1, 24, T, h, w] and [2A, 32] rows."""
    from diffusers.modular_pipelines.minimax_h3.before_denoise import (MiniMaxH3PrepareLayoutStep,
                                                                      patchify_video_latents)
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from causal_lane import unpatchify_video

    text, video, audio = case["text"], case["video"], case["audio"]
    _, c, T, H, W = video.shape
    A = audio.shape[0] // 2
    patch = tuple(model.config.patch_size)
    pos, tags, vi, ai, ti, _, _ = MiniMaxH3PrepareLayoutStep.build_packed_sequence(
        torch.ones(text.shape[0], dtype=torch.long), T, H, W, A, patch, 2, 2, 0)
    t_video, t_audio = float(case["t_video"]), float(case["t_audio"])
    unique = sorted({t_video, t_audio})
    ts_idx = torch.full((pos.shape[0],), unique.index(t_video), dtype=torch.long)   # text and video rows
    ts_idx[ai] = unique.index(t_audio)
    with torch.no_grad(), sdpa_kernel([SDPBackend.MATH]):
        v_rows, a_rows = model(
            hidden_states=patchify_video_latents(video, patch)[None], audio_hidden_states=audio[None],
            encoder_hidden_states=text[None], timestep=torch.tensor(unique, dtype=torch.float32),
            timestep_indices=ts_idx, token_tags=tags, position_ids=pos.to(torch.float32), video_indices=vi,
            audio_indices=ai, text_indices=ti, return_dict=False)
    return unpatchify_video(v_rows[0], c, T, H, W).contiguous(), a_rows[0].contiguous()


# --- the cases ----------------------------------------------------------------------------------------------
class _Nested:
    """Duck type of ComfyUI's NestedTensor as contracts.py:321-338 reads it."""
    is_nested = True

    def __init__(self, tensors):
        self.tensors = tuple(tensors)


def run_case(lane, raven, model, spec, out: Path) -> dict:
    from safetensors.torch import save_file
    name, k, width, height, L, seed, steps, shift_v, shift_a, sink, window = spec
    cons, lay = raven.consistency, raven.layout
    frames = 17 * k + 5
    layout = lay.T2VALayout.from_request(text_len=L, frames=frames, width=width, height=height)
    text = torch.randn(1, L, model.config.text_dim, generator=torch.Generator().manual_seed(1000 + seed))
    video0 = torch.zeros(layout.video_latent_shape(24))
    audio0 = torch.zeros(layout.audio_latent_shape(32))

    records, delivered = [], []
    lane.record = lambda kind, **kw: records.append((kind, kw))
    patcher = SimpleNamespace(model=SimpleNamespace(diffusion_model=lane), model_options={"transformer_options": {}},
                              load_device=torch.device("cpu"), offload_device=torch.device("cpu"))
    config = cons.SamplerConfig(steps=steps, video_shift=shift_v, audio_shift=shift_a, sink=sink, window=window,
                                seed=seed, kv_cache_storage="cpu")
    result = cons.sample_streaming(model=patcher, positive=[[text, {}]], latent={"samples": _Nested((video0, audio0))},
                                   config=config, on_chunk=delivered.append, device="cpu",
                                   compute_dtype=torch.float32, load_models=lambda *a, **kw: None,
                                   require_upstream_class=False, warn_experimental=False)
    lane.record = None
    final_v, final_a = result.latent["samples"].tensors

    # Replay the generator from the draw log: every draw, in order, with its shape.
    gen = torch.Generator().manual_seed(seed)
    draws = [(d, torch.randn(d.shape, generator=gen, dtype=torch.float32)) for d in result.draws]
    labels = [d.label for d, _ in draws]
    assert labels[:4] == ["video_initial_noise", "audio_initial_noise", "video_clean_eps", "audio_clean_eps"]
    whole = {d.label: x for d, x in draws[:4]}
    step_eps = {(d.chunk, d.step, d.label): x for d, x in draws[4:]}
    assert len(step_eps) == 2 * steps * layout.num_chunks
    assert [(d.chunk, d.step, d.label) for d, _ in draws[4:]] == [
        (c, s, lab) for c in range(layout.num_chunks) for s in range(steps)
        for lab in ("video_step_eps", "audio_step_eps")]

    noise = [kw for kind, kw in records if kind == "noise"]
    clean = [kw for kind, kw in records if kind == "clean"]
    assert records[0][0] == "prefill" and len(noise) == steps * layout.num_chunks
    assert len(clean) == layout.num_chunks - 1        # the last chunk is never committed (consistency.py:651-655)
    tensors = {"text": text.contiguous()}
    tensors.update({"noise_video": whole["video_initial_noise"], "noise_audio": whole["audio_initial_noise"],
                    "clean_eps_video": whole["video_clean_eps"], "clean_eps_audio": whole["audio_clean_eps"]})
    vsig, asig = cons.shifted_trailing_sigmas(steps, shift_v), cons.shifted_trailing_sigmas(steps, shift_a)
    vpairs, apairs = cons.step_pairs(vsig), cons.step_pairs(asig)
    chunks_json = []
    for ch in layout.chunks:
        c = ch.index
        sl_v = (slice(None), slice(None), slice(ch.video_start, ch.video_stop))
        sl_a = (slice(None), slice(None), slice(None), slice(ch.audio_start, ch.audio_stop))
        for s in range(steps):
            r = noise[c * steps + s]
            assert r["chunk_index"] == c and r["video_sigma"] == vpairs[s][0] and r["audio_sigma"] == apairs[s][0]
            if s == 0:  # each chunk starts from its slice of the whole-clip initial noise
                assert torch.equal(r["video_x"], whole["video_initial_noise"][sl_v])
                assert torch.equal(r["audio_x"], whole["audio_initial_noise"][sl_a])
            # x0 = x_t + sigma * v, exactly consistency.py:613-615
            x0_v = r["video_x"] + r["video_sigma"] * r["video_v"]
            x0_a = r["audio_x"] + r["audio_sigma"] * r["audio_v"]
            tensors[f"chunk{c}.step{s}.x0_video"] = x0_v.contiguous()
            tensors[f"chunk{c}.step{s}.x0_audio"] = x0_a.contiguous()
            nv, na = vpairs[s][1], apairs[s][1]
            xn_v = (1.0 - nv) * x0_v + nv * step_eps[(c, s, "video_step_eps")]
            xn_a = (1.0 - na) * x0_a + na * step_eps[(c, s, "audio_step_eps")]
            if s + 1 < steps:   # the next forward's input is (1 - s') x0 + s' eps_fresh (consistency.py:628-629)
                assert torch.equal(noise[c * steps + s + 1]["video_x"], xn_v)
                assert torch.equal(noise[c * steps + s + 1]["audio_x"], xn_a)
            else:               # s' = 0: the committed chunk is that last x0, bit for bit
                assert torch.equal(delivered[c].video_x0, xn_v) and torch.equal(delivered[c].audio_x0, xn_a)
                assert torch.equal(xn_v, x0_v) and torch.equal(xn_a, x0_a)
                assert torch.equal(final_v[sl_v], x0_v) and torch.equal(final_a[sl_a], x0_a)
        if c < layout.num_chunks - 1:   # the clean fill: the committed x0 and the clean eps slice
            cr = clean[c]
            assert cr["chunk_index"] == c and torch.equal(cr["video_x"], delivered[c].video_x0)
        chunks_json.append({"index": c, "video_latents": [ch.video_start, ch.video_stop],
                            "audio_latents": [ch.audio_start, ch.audio_stop], "rows": ch.rows,
                            "audio_rows": ch.audio_rows, "video_rows": ch.video_rows,
                            "committed_to_cache": c < layout.num_chunks - 1,
                            "attends_media_chunks": retained_before(sink, window, c),
                            "first_position_t": float(layout.chunk_position_ids(c)[0, 0])})
    tensors["final_video"] = final_v.contiguous()
    tensors["final_audio"] = final_a.contiguous()
    tensors = {key: v.to(torch.float32).contiguous() for key, v in tensors.items()}
    file = out / f"case_{name}.safetensors"
    save_file(tensors, str(file))

    return {
        "name": name, "file": file.name,
        "request": {"frames": frames, "k": k, "width": width, "height": height, "text_rows": L},
        "sampler": {"seed": seed, "steps": steps, "video_shift": shift_v, "audio_shift": shift_a, "sink": sink,
                    "window": window, "video_sigmas": list(vsig), "audio_sigmas": list(asig),
                    "video_steps": [list(p) for p in vpairs], "audio_steps": [list(p) for p in apairs],
                    "video_t_h3": [float(1.0 - torch.tensor(s, dtype=torch.float32)) for s in vsig],
                    "audio_t_h3": [float(1.0 - torch.tensor(s, dtype=torch.float32)) for s in asig]},
        "layout": {"latent_t": layout.latent_t, "latent_h": layout.latent_h, "latent_w": layout.latent_w,
                   "audio_t": layout.audio_t, "frame_rows": layout.frame_rows, "num_chunks": layout.num_chunks,
                   "chunks": chunks_json},
        "forwards": {"noise": len(noise), "clean": len(clean), "prefill": 1},
        "draws": [{"label": d.label, "shape": list(d.shape), "chunk": d.chunk, "step": d.step}
                  for d in result.draws],
        "kv_cache_end": {k2: v for k2, v in result.kv_cache.items()
                         if k2 in ("committed_chunks", "retained_chunks", "retained_rows", "sink", "window")},
        "shapes": {key: list(v.shape) for key, v in tensors.items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--raven", type=Path, required=True, help="folder holding raven_streaming/ at bcfa381")
    ap.add_argument("--transformer", type=Path, default=REPO / "tests/data/golden/h3_dit/transformer_tiny")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--check-only", action="store_true", help="the dense checks only; writes nothing")
    ap.add_argument("--allow-other-raven", action="store_true")
    a = ap.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(0)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    raven = import_raven(a.raven.resolve(), a.allow_other_raven)
    import diffusers
    from diffusers import MiniMaxH3Transformer3DModel
    from causal_lane import CausalLane, attach_lora

    model = MiniMaxH3Transformer3DModel.from_pretrained(str(a.transformer), torch_dtype=torch.float32).eval()
    cfg = model.config
    lane = CausalLane(model, raven.layout, torch.float32)
    report: list = []
    dense_tensors: dict = {}

    print("dense checks, base weights (no LoRA):")
    dense_checks(lane, raven, model, {}, report)
    for r in report:
        r["lora"] = False

    # Step 4 without the LoRA (before it is attached; the hooks are never removed): the golden case's own
    # velocities, recomputed, tie this model and call to the convention the golden files were made in.
    from safetensors.torch import load_file
    golden = load_file(str(REPO / DENSE_LORA_CASE))
    base_v, base_a = golden_dense_forward(model, golden)
    golden_v = float((base_v - golden["velocity_video"]).abs().max())
    golden_a = float((base_a - golden["velocity_audio"]).abs().max())
    print(f"dense forward, no LoRA, against {Path(DENSE_LORA_CASE).name}: max|diff| video {golden_v:.3e} "
          f"audio {golden_a:.3e}")
    assert max(golden_v, golden_a) <= DENSE_TOL, (golden_v, golden_a)

    lora_dir = a.out / "lora" if not a.check_only else Path(os.environ.get("TMPDIR", "/tmp")) / "h3-causal-lora"
    inventory = write_lora(cfg, lora_dir)
    manifest, weights, counts = read_lora(raven, cfg, lora_dir)
    assert manifest.rank == LORA_RANK and manifest.alpha == LORA_ALPHA and len(weights) == len(inventory)
    attach_lora(model, weights, manifest.alpha, manifest.rank)
    print(f"LoRA: {len(weights)} modules {manifest.counts}, rank {manifest.rank}, alpha {manifest.alpha}")

    print("dense checks, with the LoRA:")
    before = len(report)
    dense_checks(lane, raven, model, dense_tensors, report)
    for r in report[before:]:
        r["lora"] = True

    lora_v, lora_a = golden_dense_forward(model, golden)
    effect_v = float((lora_v - base_v).abs().max())
    effect_a = float((lora_a - base_a).abs().max())
    print(f"dense forward with the LoRA, {Path(DENSE_LORA_CASE).name}: max|with - without| video {effect_v:.3e} "
          f"audio {effect_a:.3e}")
    # A LoRA that moved nothing (a target missed, alpha 0) would make the file a copy of the golden case.
    assert min(effect_v, effect_a) > 100 * DENSE_TOL, (effect_v, effect_a)
    if a.check_only:
        return

    a.out.mkdir(parents=True, exist_ok=True)
    from safetensors.torch import save_file
    save_file({k: v.contiguous() for k, v in dense_tensors.items()}, str(a.out / "dense_check.safetensors"))
    dense_lora = {key: golden[key].contiguous() for key in ("text", "video", "audio", "t_video", "t_audio")}
    dense_lora.update({"velocity_video": lora_v, "velocity_audio": lora_a, "velocity_video_base": base_v,
                       "velocity_audio_base": base_a})
    save_file(dense_lora, str(a.out / "dense_lora.safetensors"))
    cases = []
    for spec in CASES:
        case = run_case(lane, raven, model, spec, a.out)
        print(f"case {case['name']}: {case['layout']['num_chunks']} chunks, {case['forwards']['noise']} noise + "
              f"{case['forwards']['clean']} clean forwards, final video {case['shapes']['final_video']} "
              f"audio {case['shapes']['final_audio']}")
        cases.append(case)

    meta = {
        "what": "reference vectors of the chunk-causal (RAVEN-Streaming) sampler; README.md",
        "made_by": "bench/reference/causal/make_vectors.sh (make_vectors.py, causal_lane.py)",
        "versions": {"torch": torch.__version__, "diffusers": diffusers.__version__, "python": sys.version.split()[0],
                     "raven_commit": RAVEN_COMMIT, "raven_files_sha256": RAVEN_FILES},
        "transformer": "tests/data/golden/h3_dit/transformer_tiny (diffusers layout, random weights)",
        "lora": {"file": "lora/adapter_model.safetensors", "config": "lora/adapter_config.json", "rank": LORA_RANK,
                 "alpha": LORA_ALPHA, "seed": LORA_SEED, "modules": len(inventory), "counts": counts,
                 "key": PEFT_PREFIX + "<RAVEN/ComfyUI module path>.lora_A.weight | .lora_B.weight",
                 "apply": "out = base(x) + B(A(x.float())) * alpha / r, fp32, never merged",
                 "targets": {p: list(s) for p, s in inventory.items()}},
        "dtype": "float32 everywhere, CPU, SDPA math kernel, 1 thread",
        "tolerance": {"x0_and_latents_max_abs": 1e-4, "dense_check_max_abs": DENSE_TOL},
        "dense_checks": {"file": "dense_check.safetensors", "results": report},
        "dense_lora": {
            "file": "dense_lora.safetensors", "case": DENSE_LORA_CASE,
            "what": "diffusers' ordinary (non-causal) MiniMaxH3Transformer3DModel.forward on the case's inputs, t2va "
                    "layout [text | audio | video], text rows at t_video, no mask; velocity_* with the LoRA above, "
                    "velocity_*_base without it",
            "convention": "the golden h3_dit case's: t = 1 - sigma (0-d), audio as the DiT's rows [2A, 32] (left "
                          "channel's A rows, then the right's), velocities the model's outputs as they are (no "
                          "negation)",
            "t_video": float(golden["t_video"]), "t_audio": float(golden["t_audio"]),
            "shapes": {key: list(v.shape) for key, v in dense_lora.items()},
            "base_vs_golden_max_abs_diff_video": golden_v, "base_vs_golden_max_abs_diff_audio": golden_a,
            "base_vs_golden_bound": DENSE_TOL,
            "lora_effect_max_abs_video": effect_v, "lora_effect_max_abs_audio": effect_a,
            "velocity_absmax": float(max(lora_v.abs().max(), lora_a.abs().max())),
        },
        "cases": cases,
    }
    (a.out / "cases.json").write_text(json.dumps(meta, indent=1) + "\n")
    total = sum(f.stat().st_size for f in a.out.rglob("*") if f.is_file())
    print(f"wrote {a.out}: {total} bytes")


if __name__ == "__main__":
    main()
