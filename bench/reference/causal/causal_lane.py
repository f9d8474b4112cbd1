"""The chunk-causal lane of MiniMax-H3, written on diffusers' MiniMax-H3 transformer modules.

RAVEN-Streaming (github YanzuoLu/ComfyUI-MiniMax-H3-RAVEN-Streaming, commit bcfa381) implements its causal
lane as subclasses of ComfyUI's H3 model (raven_streaming/causal_model.py), which cannot run here. This file is
a fresh transcription of what that lane computes -- `prefill_text` and `forward_chunk` and the numerical order
RAVEN documents for them -- over the modules of diffusers' `MiniMaxH3Transformer3DModel` (diffusers 0.42.1). No
code of RAVEN's or ComfyUI's is copied here; the citations `causal_model.py:A-B` name the lines of RAVEN's file
at bcfa381 each piece transcribes, so that a reader can check the facts.

What RAVEN's own torch-only modules provide is used from the fetched copy at run time, never from this tree:
`raven_streaming.cache.ChunkKVCache` (the per-layer KV cache with sink/window eviction) and
`raven_streaming.layout` (chunk cut, absolute positions). The sampler loop is RAVEN's
`raven_streaming.consistency.sample_streaming`, which calls `prefill_text` / `forward_chunk` below (see
make_vectors.py).

Name map, ComfyUI / RAVEN (left) -> diffusers (right):
  video_patch_proj -> proj_in, audio_patch_proj -> audio_proj_in, condition_proj -> context_embedder,
  time_embedder.proj_in/proj_out -> time_embedder.linear_1/linear_2, token_refiner.blocks.i ->
  token_refiner.refiner_blocks.i, blocks.i -> transformer_blocks.i, attn.qkv_proj ([Q; K; V] rows) ->
  attn.to_q / to_k / to_v, attn.out_proj -> attn.to_out.0, q_norm/k_norm -> norm_q/norm_k, mlp.fc1 ([gate; up]
  rows) -> ff.net.0.proj ([up; gate] rows), mlp.fc2 -> ff.net.2, adaln_proj.linear -> adaln_proj.linear,
  final_layer.norm -> norm_out.norm, final_layer.adaln_proj.linear -> norm_out.linear, final_layer.video_out ->
  proj_out, final_layer.audio_out -> audio_proj_out.

Everything runs in float32 on the CPU with PyTorch's SDPA pinned to its math kernel.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from diffusers.models.transformers.transformer_minimax_h3 import _apply_rotary_emb
from diffusers.modular_pipelines.minimax_h3.before_denoise import patchify_video_latents

# AdaLN modality tags (the dense model's: docs/h3-model.md; RAVEN layout.py:106-109)
VIDEO_TAG, TEXT_TAG, AUDIO_TAG = 0, 1, 2
MODALITIES = 3
# The condition timestep of every clean (cache-writing) forward, text included: causal_model.py:294-299.
CLEAN_TIMESTEP = 0.999


class CausalLaneError(RuntimeError):
    pass


# --- RAVEN's float32 timestep arithmetic (causal_model.py:316-356) -------------------------------------------
def fp32_scalar(value: float) -> float:
    """`value` rounded to float32, carried in a Python float (exact)."""
    return float(torch.tensor(float(value), dtype=torch.float32))


def fp32_one_minus(value: float) -> float:
    """`1 - value` as one float32 subtraction of float32(value): RAVEN's sigma -> H3 t, and the clean mix's
    eps coefficient (causal_model.py:344-356)."""
    return float(1.0 - torch.tensor(float(value), dtype=torch.float32))


# --- packing (same conventions as the dense model; Comfy's pack_audio / patchify_video) -----------------------
def pack_audio(latent: torch.Tensor) -> torch.Tensor:
    """[1, 32, 2, a] -> [2a, 32] rows, channel-major: left channel's a rows, then the right channel's."""
    _, c, ch, a = latent.shape
    return latent[0].permute(1, 2, 0).reshape(ch * a, c)


def unpack_audio(rows: torch.Tensor, channels: int = 2) -> torch.Tensor:
    a = rows.shape[0] // channels
    return rows.reshape(channels, a, rows.shape[-1]).permute(2, 0, 1).unsqueeze(0)


def unpatchify_video(rows: torch.Tensor, c: int, t: int, h: int, w: int) -> torch.Tensor:
    """Inverse of diffusers' patchify_video_latents for patch (1, 2, 2): rows [t*(h/2)*(w/2), c*4]."""
    x = rows.reshape(1, t, h // 2, w // 2, c, 1, 2, 2)
    return x.permute(0, 4, 1, 5, 2, 6, 3, 7).reshape(1, c, t, h, w)


# --- the RAVEN primitives, on plain tensors ------------------------------------------------------------------
def packed_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """One packed document, RAVEN's SDPA fallback (causal_model.py:597-633, reached from 657-726 when no flash
    kernel applies, which is always the case on the CPU / in fp32): q [rows, heads, dim], k/v [kv_rows, heads,
    dim], a 3-D SDPA over [heads, rows, dim], no mask, not causal, the given scale. Pinned to the math kernel."""
    with sdpa_kernel([SDPBackend.MATH]):
        out = F.scaled_dot_product_attention(
            q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
            attn_mask=None, dropout_p=0.0, is_causal=False, scale=scale)
    return out.transpose(0, 1)


def mod_scale_shift(h: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor, segments) -> torch.Tensor:
    """Per segment (start, stop, mod_row): h * (1 + scale[row]) + shift[row], rounding the product and then the
    sum (Comfy's `_mod_scale_shift`, which RAVEN measured identical to its own: causal_model.py:257-260)."""
    out = torch.empty_like(h)
    for a, b, row in segments:
        out[a:b] = h[a:b] * (1.0 + scale[row].to(h.dtype)) + shift[row].to(h.dtype)
    return out


def mod_gate(x: torch.Tensor, gate: torch.Tensor, other: torch.Tensor, segments) -> torch.Tensor:
    """Numerical-order point 2, RAVEN's out-of-place gate: (x + gate[row] * other).to(x.dtype) -- the product is
    rounded to the compute dtype before the sum, never a fused addcmul (causal_model.py:72-75, 729-745)."""
    out = torch.empty_like(x)
    for a, b, row in segments:
        out[a:b] = (x[a:b] + gate[row].to(x.dtype) * other[a:b]).to(x.dtype)
    return out


class CausalLane:
    """`prefill_text` / `forward_chunk` of RAVEN's RavenCausalMiniMaxH3Model, over a diffusers
    MiniMaxH3Transformer3DModel. Duck-types what RAVEN's sampler (consistency.py) and its contract checks
    (contracts.py:614-698: `prefill_text`, `forward_chunk`, `blocks`, `dtype`) read of the model."""

    def __init__(self, model, layout_module, dtype: torch.dtype = torch.float32):
        self.m = model.eval()
        self.layout_mod = layout_module
        self.dtype = dtype
        self.blocks = model.transformer_blocks
        cfg = model.config
        self.hidden_size = int(cfg.hidden_size)
        self.heads = int(cfg.num_attention_heads)
        self.head_dim = int(cfg.attention_head_dim)
        self.latents_dim = int(cfg.in_channels)
        self.patch_size = tuple(cfg.patch_size)
        # Optional observer: called as record(kind, **values) after each forward (make_vectors.py uses it).
        self.record = None

    # -- pieces ------------------------------------------------------------------------------------------------
    def _time_embeddings(self, unique_t: Sequence[float], dtype):
        """Numerical-order point 1 (causal_model.py:65-71, 748-767, 1199-1235): the time embedder runs in fp32
        on the fp32 timesteps (sinusoid cos first, unscaled t), and the AdaLN input shared by every block and the
        final layer is silu(t_emb) computed in fp32 once per forward and then cast to the compute dtype; every
        AdaLN GEMM takes it as is (no SiLU of its own)."""
        t = torch.tensor(list(unique_t), dtype=torch.float32)
        t_emb = self.m.time_embedder(self.m.time_proj(t).to(torch.float32))
        return F.silu(t_emb.to(torch.float32)).to(dtype)

    def _adaln_params(self, linear, adaln_input: torch.Tensor, expand: int):
        """The AdaLN projection without its SiLU (causal_model.py:770-781): [M, t_dim] -> [M, expand*mods*H] ->
        viewed [M*mods, expand*H] -> `expand` chunks of [M*mods, H]; row = t_index*mods + tag (blocks: expand 6,
        3 modalities; final layer: expand 2 = [shift; scale], 1 modality, row = t_index)."""
        x = linear(adaln_input)
        return x.view(-1, expand * self.hidden_size).chunk(expand, dim=-1)

    def _refiner_attention(self, attn, x: torch.Tensor) -> torch.Tensor:
        """The refiner's attention (causal_model.py:784-803): qkv, per-head q/k RMSNorm, no RoPE, the packed
        SDPA over the text alone, out projection."""
        s = x.shape[0]
        q = attn.norm_q(attn.to_q(x).view(s, self.heads, self.head_dim))
        k = attn.norm_k(attn.to_k(x).view(s, self.heads, self.head_dim))
        v = attn.to_v(x).view(s, self.heads, self.head_dim)
        out = packed_attention(q, k, v, self.head_dim ** -0.5)
        return attn.to_out[0](out.reshape(s, self.heads * self.head_dim))

    def _refine_text(self, text: torch.Tensor) -> torch.Tensor:
        """Numerical-order point 4 (causal_model.py:76-78, 1237-1257): condition projection, then the refiner
        blocks replayed as x + attn(norm1(x)); x + mlp(norm2(x)) with the packed attention above; final norm."""
        h = self.m.context_embedder(text)
        for block in self.m.token_refiner.refiner_blocks:
            h = h + self._refiner_attention(block.attn, block.norm1(h))
            h = h + block.ff(block.norm2(h))
        return self.m.token_refiner.final_norm(h)

    def _attention(self, attn, x, rope, layer: int, cache, update_cache: bool) -> torch.Tensor:
        """The cached attention (causal_model.py:914-1033): qkv -> per-head q/k RMSNorm -> RoPE at the rows'
        absolute positions (rotate-half on the leading 2*3*16 channels) -> stage this chunk's rotated keys and
        raw values when the forward writes the cache -> keys/values = [retained history | this chunk] in time
        order -> one unmasked packed attention of this chunk's queries over them -> out projection."""
        s = x.shape[0]
        q = attn.norm_q(attn.to_q(x).view(s, self.heads, self.head_dim))
        k = attn.norm_k(attn.to_k(x).view(s, self.heads, self.head_dim))
        v = attn.to_v(x).view(s, self.heads, self.head_dim)
        q = _apply_rotary_emb(q[None], *rope)[0].contiguous()
        k = _apply_rotary_emb(k[None], *rope)[0].contiguous()
        v = v.contiguous()

        spec = cache.retained_spec(layer)                      # causal_model.py:959
        if update_cache:                                       # causal_model.py:960-981
            cache.stage(layer, k, v, copy_key=True, copy_value=True)
        if spec is not None:                                   # causal_model.py:982-1021
            merged_k = k.new_empty((spec.rows + s, self.heads, self.head_dim))
            merged_v = k.new_empty((spec.rows + s, self.heads, self.head_dim))
            cache.copy_retained_into(layer, merged_k[:spec.rows], merged_v[:spec.rows])
            merged_k[spec.rows:].copy_(k)
            merged_v[spec.rows:].copy_(v)
            k, v = merged_k, merged_v
        out = packed_attention(q, k, v, self.head_dim ** -0.5)  # causal_model.py:1031-1033
        return attn.to_out[0](out.reshape(s, self.heads * self.head_dim))

    def _block(self, block, layer, x, adaln_input, segments, rope, cache, update_cache):
        """RAVEN's causal block body (causal_model.py:1107-1117)."""
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = self._adaln_params(
            block.adaln_proj.linear, adaln_input, 6)
        residual = x
        h = mod_scale_shift(block.norm1(x), shift_msa, scale_msa, segments)
        h = self._attention(block.attn, h, rope, layer, cache, update_cache)
        x = mod_gate(residual, gate_msa, h, segments)
        residual = x
        h = mod_scale_shift(block.norm2(x), shift_mlp, scale_mlp, segments)
        return mod_gate(residual, gate_mlp, block.ff(h), segments)

    def _run_blocks(self, h, adaln_input, segments, rope, cache, update_cache):
        """The block loop; a failure drops the partially staged chunk (causal_model.py:1291-1331)."""
        try:
            for layer, block in enumerate(self.blocks):
                h = self._block(block, layer, h, adaln_input, segments, rope, cache, update_cache)
        except BaseException:
            if update_cache:
                cache.discard_pending()
            raise
        return h

    def _final_layer(self, h, adaln_input, video_seg, audio_seg):
        """The final layer on the shared AdaLN input (causal_model.py:1259-1286): shift, scale = the final AdaLN
        GEMM (modalities 1, row = t index), (norm(h) * (1 + scale) + shift).to(fp32) per stream, fp32 heads on
        the stream's own rows."""
        shift, scale = self._adaln_params(self.m.norm_out.linear, adaln_input, 2)

        def mod(seg):
            a, b, row = seg
            return (self.m.norm_out.norm(h[a:b]) * (1.0 + scale[row].to(scale.dtype))
                    + shift[row].to(shift.dtype)).to(torch.float32)

        return self.m.proj_out(mod(video_seg)), self.m.audio_proj_out(mod(audio_seg))

    def _rope(self, positions: torch.Tensor):
        # float64 positions -> float32 (t, h, w) angles -> cos/sin, as the dense model (causal_model.py:1288-1289)
        return self.m.rope(positions)

    # -- the causal API ----------------------------------------------------------------------------------------
    @torch.no_grad()
    def prefill_text(self, context: torch.Tensor, *, cache, transformer_options: Dict[str, Any] = {},
                     text_token_tags: Optional[torch.Tensor] = None,
                     compute_dtype: Optional[torch.dtype] = None) -> int:
        """Text alone into the cache as its chunk 0 (causal_model.py:1335-1397): the refined text rows at
        positions (i, 0, 0), i = 0..L-1 (layout.py:274-278), through every block at the clean timestep 0.999
        with the text tag, each layer staging its keys/values; one commit after the last layer. No output."""
        if cache.committed_chunks != 0:
            raise CausalLaneError("prefill_text into a non-empty cache")
        dtype = compute_dtype if compute_dtype is not None else context.dtype
        text = context[0]
        if text.shape[-1] != self.hidden_size:
            text = self._refine_text(text.to(dtype))
        h = text.to(dtype).clone()
        length = int(h.shape[0])
        rope = self._rope(self.layout_mod.text_position_ids(length))
        adaln_input = self._time_embeddings([fp32_scalar(CLEAN_TIMESTEP)], dtype)
        if text_token_tags is None:
            segments = [(0, length, TEXT_TAG)]
        else:  # runs of equal tags at t-row 0 (causal_model.py:1609-1624)
            tags = [int(t) for t in text_token_tags.view(-1).tolist()]
            segments, start = [], 0
            for i in range(1, length + 1):
                if i == length or tags[i] != tags[start]:
                    segments.append((start, i, tags[start]))
                    start = i
        self._run_blocks(h, adaln_input, segments, rope, cache, True)
        cache.commit(role="text")
        if self.record is not None:
            self.record("prefill", text_len=length)
        return length

    @torch.no_grad()
    def forward_chunk(self, *, video_latent: torch.Tensor, audio_latent: torch.Tensor, layout, chunk_index: int,
                      cache=None, role: str = "noise", video_sigma: Optional[float] = None,
                      audio_sigma: Optional[float] = None, video_eps: Optional[torch.Tensor] = None,
                      audio_eps: Optional[torch.Tensor] = None, update_cache: Optional[bool] = None,
                      transformer_options: Dict[str, Any] = {},
                      compute_dtype: Optional[torch.dtype] = None) -> List[torch.Tensor]:
        """One cached forward over one chunk's own rows (causal_model.py:1400-1586).

        role 'noise': the latents are the chunk's x_t at the repo sigmas (sigma = 1 - t_h3; 0 is clean); each
        stream's H3 timestep is fp32(1 - fp32(sigma)); the cache is read only.
        role 'clean': the latents are the chunk's x0; both streams enter as t*x0 + (1-t)*eps in fp32 with
        t = fp32(0.999) and the coefficient (1-t) = 1 - fp32(0.999) in fp32 (= 0.00099998713); this forward
        writes the cache (commit after the last layer).
        Returns the native H3 velocities (v = x0 - eps, no negation) in fp32: [1, 24, t, h, w], [1, 32, 2, a].
        """
        chunk = layout.chunks[chunk_index]
        if update_cache is None:
            update_cache = role == "clean"
        if update_cache and role != "clean":
            raise CausalLaneError("only a clean forward writes the cache")
        if role == "noise":                                   # causal_model.py:1460-1471
            if video_sigma is None or audio_sigma is None:
                raise CausalLaneError("a noise chunk needs both sigmas")
            t_v, t_a = fp32_one_minus(video_sigma), fp32_one_minus(audio_sigma)
            video_x, audio_x = video_latent, audio_latent
        elif role == "clean":                                 # causal_model.py:1472-1515
            t_v = t_a = fp32_scalar(CLEAN_TIMESTEP)
            c = fp32_one_minus(t_v)
            video_x = t_v * video_latent.to(torch.float32) + c * video_eps.to(torch.float32)
            audio_x = t_a * audio_latent.to(torch.float32) + c * audio_eps.to(torch.float32)
        else:
            raise CausalLaneError(f"role {role!r}")
        if cache is not None and cache.committed_chunks != chunk_index + 1:   # causal_model.py:1517-1527
            raise CausalLaneError(f"chunk {chunk_index}: cache holds {cache.committed_chunks} committed chunks")
        dtype = compute_dtype if compute_dtype is not None else self.dtype

        # embed, audio rows first, then video rows (causal_model.py:1534-1539)
        video_rows = patchify_video_latents(video_x.to(torch.float32), self.patch_size)
        audio_rows = pack_audio(audio_x.to(torch.float32))
        h = torch.cat((self.m.audio_proj_in(audio_rows).to(dtype), self.m.proj_in(video_rows).to(dtype)), dim=0)
        audio_n, rows = chunk.audio_rows, chunk.rows
        if h.shape[0] != rows:
            raise CausalLaneError(f"chunk {chunk_index}: {h.shape[0]} rows embedded, layout says {rows}")

        # distinct timesteps, ascending, each expanding to the 3 modality rows (causal_model.py:1548-1555)
        unique_t = sorted({t_v, t_a})
        t_row = {value: index for index, value in enumerate(unique_t)}
        segments = [(0, audio_n, t_row[t_a] * MODALITIES + AUDIO_TAG),
                    (audio_n, rows, t_row[t_v] * MODALITIES + VIDEO_TAG)]
        adaln_input = self._time_embeddings(unique_t, dtype)
        rope = self._rope(layout.chunk_position_ids(chunk_index))      # causal_model.py:1557-1558

        h = self._run_blocks(h, adaln_input, segments, rope, cache, bool(update_cache))
        if update_cache:
            cache.commit(role="clean")                                  # causal_model.py:1562-1565
        video_out, audio_out = self._final_layer(h, adaln_input, (audio_n, rows, t_row[t_v]),
                                                 (0, audio_n, t_row[t_a]))
        video_v = unpatchify_video(video_out, self.latents_dim, chunk.video_latents, layout.latent_h,
                                   layout.latent_w)
        audio_v = unpack_audio(audio_out)
        if self.record is not None:
            self.record(role, chunk_index=chunk_index, video_sigma=video_sigma, audio_sigma=audio_sigma,
                        t_video=t_v, t_audio=t_a, video_x=video_latent.clone(), audio_x=audio_latent.clone(),
                        video_v=video_v.clone(), audio_v=audio_v.clone())
        return [video_v, audio_v]


# --- the LoRA: PEFT A/B on RAVEN's (ComfyUI) module paths, applied to diffusers' modules as fp32 residuals ------
def diffusers_targets(path: str, inner: int, ffn: int) -> List[Tuple[str, slice, bool]]:
    """RAVEN/ComfyUI module path -> [(diffusers module path, rows of lora_B it takes, swap fc1 halves)].

    qkv_proj's output rows are [Q; K; V] in ComfyUI's Attention (split by heads*head_dim), so to_q/to_k/to_v take
    B's three row blocks (A is shared). mlp.fc1's rows are [gate; up] in ComfyUI, diffusers' ff.net.0.proj
    [up; gate]: B's two halves are swapped."""
    fixed = {
        "video_patch_proj": "proj_in", "audio_patch_proj": "audio_proj_in", "condition_proj": "context_embedder",
        "time_embedder.proj_in": "time_embedder.linear_1", "time_embedder.proj_out": "time_embedder.linear_2",
        "final_layer.adaln_proj.linear": "norm_out.linear", "final_layer.video_out": "proj_out",
        "final_layer.audio_out": "audio_proj_out",
    }
    if path in fixed:
        return [(fixed[path], slice(None), False)]
    parts = path.split(".")
    if parts[0] == "token_refiner" and parts[1] == "blocks":
        prefix, rest = f"token_refiner.refiner_blocks.{parts[2]}", ".".join(parts[3:])
    elif parts[0] == "blocks":
        prefix, rest = f"transformer_blocks.{parts[1]}", ".".join(parts[2:])
    else:
        raise CausalLaneError(f"no diffusers module for LoRA target {path!r}")
    if rest == "attn.qkv_proj":
        return [(f"{prefix}.attn.to_q", slice(0, inner), False), (f"{prefix}.attn.to_k", slice(inner, 2 * inner), False),
                (f"{prefix}.attn.to_v", slice(2 * inner, 3 * inner), False)]
    table = {"attn.out_proj": ("attn.to_out.0", False), "mlp.fc1": ("ff.net.0.proj", True),
             "mlp.fc2": ("ff.net.2", False), "adaln_proj.linear": ("adaln_proj.linear", False)}
    if rest not in table:
        raise CausalLaneError(f"no diffusers module for LoRA target {path!r}")
    name, swap = table[rest]
    return [(f"{prefix}.{name}", slice(None), swap)]


def attach_lora(model, weights: Dict[str, Tuple[torch.Tensor, torch.Tensor]], alpha: float, rank: int):
    """Forward hooks out = (base(x) + B(A(x.float())) * alpha / r).to(base dtype), accumulated in fp32, never
    merged into the weights (RAVEN runtime_linear.py:1-13, 229-317). Returns the hook handles."""
    cfg = model.config
    inner = int(cfg.num_attention_heads) * int(cfg.attention_head_dim)
    ffn = int(cfg.ffn_dim)
    scale = float(alpha) / float(rank)
    modules = dict(model.named_modules())
    handles = []
    for path, (a, b) in weights.items():
        for name, rows, swap in diffusers_targets(path, inner, ffn):
            module = modules[name]
            bb = b[rows]
            if swap:
                half = bb.shape[0] // 2
                bb = torch.cat((bb[half:], bb[:half]), dim=0)
            if tuple(bb.shape) != (module.out_features, a.shape[0]) or a.shape[1] != module.in_features:
                raise CausalLaneError(f"LoRA {path} -> {name}: A {tuple(a.shape)}, B {tuple(bb.shape)} against "
                                      f"weight {tuple(module.weight.shape)}")
            aa, bb = a.float().contiguous(), bb.float().contiguous()

            def hook(mod, args, output, aa=aa, bb=bb):
                x = args[0]
                resid = F.linear(F.linear(x.float(), aa), bb)
                if scale != 1.0:
                    resid = resid * scale
                return (output.float() + resid).to(output.dtype)

            handles.append(module.register_forward_hook(hook))
    return handles
