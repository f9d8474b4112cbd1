"""The chunk-causal stage: a LoRA that adapts the trained tiny DiT to the engine's chunk-causal sampler
(docs/causal.md), trained by teacher forcing on endless procedural streams with prompt switches.

What the engine runs (docs/causal.md, "The chunk-causal DiT") and what a training sample reproduces:

- the prompt is prefilled alone: the refined text rows at positions (i, 0, 0), t = 0.999, the text's
  AdaLN rows, attending only the prompt; its keys and values are the cache's record 0;
- chunk c (5 video latents = 17 frames, and its 28-29 audio latents) runs its rows alone, audio first
  (left, then right), then video, at the positions the dense layout gives them, each block attending
  [the retained records | its own rows] with no mask; its noise forwards read the cache, and its commit
  (a forward of t * x0 + (1 - t) * eps at t = 0.999) adds it as the next record;
- after n commits the cache keeps records [0, SINK) and [max(SINK, n - WINDOW), n) (sink 2 / window 2,
  the engine's defaults: the prompt and chunk 0, then the two latest chunks);
- a prompt switch (`keep`, the engine's default) replaces record 0 by the new prompt's prefill before
  the chunk that takes it; the chunks the cache keeps stay as they were committed.

One sample is a stream of CHUNKS = 4 chunks: sink chunk + window + 1 is the most a chunk ever sees. With
relative positions (an endless stream's default, docs/causal.md "Positions") the engine keeps the
prompt and the sink chunk where they are and moves the window and the current chunk back in steps of 3
chunks, so a late chunk sits at place p = 0, 1 or 2 (the anchor A = 2 of the tiny default: its 4
trained chunks, the last a tail) with the window's two at p - 2 and p - 1 (before the clip's start
when p < 2). A sample draws p and puts its 4 chunks at places [0, p - 2, p - 1, p]: the layouts every
chunk of a long stream from chunk 3 on runs in. What they show is the endless motion as those places
cycle it (LOOP): the captioned clip's first 51 frames (3 chunks, 85 audio latents: one cycle of the
places) again and again, so that a chunk at place q shows the clip's frames of place q mod 3 (a
shape moving right crosses the middle half of the frame and comes back in at the left every 2.1 s, a
growing shape pulses, a bounce goes on). The DiT draws a shape where the clip's frame at its place
has it (docs/causal.md, "How the motion was found"); motions that go on at another period
asked it for places it does not draw at them, and the adapter trained on them scattered the shape
(train/tiny/README.md). Every group of rows is packed into one differentiable forward whose
attention is computed per group over exactly the keys the engine's forward of that chunk sees: text
rows over their prompt; the clean (committing) copy of chunk j and the noisy copy of chunk c over
[the records retained before them | their own rows].

Teacher forcing, not self forcing: the context chunks are the clips' own latents (committed as the
engine commits, t * x0 + (1 - t) * eps at t = 0.999), not the model's rollouts. A self-forcing sample
runs every chunk's 4 sampler forwards and its commit in sequence (about 5 x the forwards of a teacher-
forced one, most of them without a gradient), so in this stage's CPU budget it would see a fifth of
the streams. The exposure bias teacher forcing leaves (at sampling time the context is the model's own
imperfect x0) is met in part by corrupting the context: in half of the samples the committed x0 carries
Gaussian noise (CONTEXT_NOISE), so the adapter learns not to copy its context's flaws.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn.functional as F

import data
import video_vae

CHUNKS = 4                # sink chunk + window + 1
ANCHOR = 2                # the last place relative positions put a chunk at (docs/causal.md, "Positions")
SINK, WINDOW = 2, 2       # records (the prompt is record 0): the engine's defaults
CHUNK_FRAMES, CHUNK_LATENTS = 17, 5
CYCLE = 3                 # chunks a late chunk's place cycles over (chunk_layout.h kPositionStep)
LOOP = CYCLE * CHUNK_FRAMES   # 51 frames: the motion's period in the samples (85 audio latents)
LATENT_H, LATENT_W = 10, 16   # 256 x 160
PATCH = (1, 2, 2)
CLEAN_T = 0.999
RANK, ALPHA = 16, 16
TARGETS = ("attn.to_q", "attn.to_k", "attn.to_v", "attn.to_out.0", "ff.net.0.proj", "ff.net.2")
# The sampler's grid for its default 4 steps at the default model's shifts (video 3, audio 3):
# sigma = 3u / (1 + 2u), u = 1, 0.75, 0.5, 0.25 -> 1, 0.9, 0.75, 0.5. GRID_SHARE of the noisy chunks
# are drawn from it, the rest from the whole shifted range (other step counts).
GRID_SHARE = 0.75
SWITCH_SHARE = 0.35       # samples whose prompt changes at a chunk boundary
CONTEXT_NOISE = 0.3       # the largest deviation of the context corruption (normalised latents)
LR, WARMUP, BATCH = 1e-3, 30, 1   # cosine from LR after the warmup down to LR / 10 (video_vae.cosine_lr)


def shifted(u: float, shift: float) -> float:
    return shift * u / (1.0 + (shift - 1.0) * u)


def fp32(value: float) -> float:
    return float(torch.tensor(float(value), dtype=torch.float32))


def fp32_one_minus(value: float) -> float:
    return float(1.0 - torch.tensor(float(value), dtype=torch.float32))


# --- the streams ------------------------------------------------------------------------------------------
def audio_span(chunk: int) -> tuple[int, int]:
    """Audio latents [begin, end) of full chunk c: c * 85/3 <= j < (c + 1) * 85/3 (chunk_layout.h)."""
    return math.ceil(chunk * 85 / 3), math.ceil((chunk + 1) * 85 / 3)


_PATTERNS = []


def encode_audio(waveform: np.ndarray) -> torch.Tensor:
    """audio_vae.encode with its Fourier patterns computed once."""
    import audio_vae
    if not _PATTERNS:
        _PATTERNS.append(audio_vae.patterns())
    x = torch.from_numpy(waveform).to(torch.float64)
    hops = x.view(x.shape[0], -1, audio_vae.HOP)
    return (2.0 / audio_vae.HOP * torch.einsum("bmj,cj->bcm", hops, _PATTERNS[0])).to(torch.float32)


@dataclass
class Stream:
    captions: list          # per chunk
    places: list            # per chunk: the chunk of a clip whose positions it runs at ([0, p - 2, p - 1, p])
    video: torch.Tensor     # [24, CHUNKS * 5, h, w] normalised latents of the sample's chunks
    audio: list             # per chunk: [2, 32, a] normalised latents (a = its place's audio count)


def loop_latents(spec, rng: np.random.Generator, stats: dict) -> tuple[list, list]:
    """One cycle of `spec`'s endless motion as the places cycle it: the captioned clip's first LOOP frames
    (its track as data.make_track draws it for the DiT's clips), per place q = 0, 1, 2 the normalised
    video latents [24, 5, h, w] of its 17 frames and audio latents [2, 32, a] of audio_span(q)."""
    import audio_vae
    track = data.make_track(spec, data.CLIP_FRAMES, rng)
    track = data.Track(track.x[:LOOP], track.y[:LOOP], track.r[:LOOP], [b for b in track.bounces if b < LOOP])
    x = video_vae.to_model_space(data.render_video(spec, track))[None].contiguous()
    audio = encode_audio(data.render_audio(spec, track, audio_span(CYCLE - 1)[1] * audio_vae.HOP))
    vm, vs = torch.tensor(stats["video_mean"]).view(-1, 1, 1, 1), torch.tensor(stats["video_std"]).view(-1, 1, 1, 1)
    am, as_ = torch.tensor(stats["audio_mean"]).view(1, -1, 1), torch.tensor(stats["audio_std"]).view(1, -1, 1)
    video = [(video_vae.pool_clip(x[:, :, q * CHUNK_FRAMES:(q + 1) * CHUNK_FRAMES]).chunk(2, dim=1)[0][0] - vm) / vs
             for q in range(CYCLE)]
    audio = [(audio[..., slice(*audio_span(q))] - am) / as_ for q in range(CYCLE)]
    return video, audio


def make_stream(rng: np.random.Generator, specs: list, stats: dict) -> Stream:
    """A sample: its chunks' captions, places and latents. Chunk 0 (the sink) is the stream's first 17 frames at
    place 0; chunks 1-3 are a late chunk and the two before it, at places p - 2 .. p (p = 0, 1 or 2), each
    showing its place's frames of the looped motion (place q: the loop's q mod 3). A prompt switch
    (SWITCH_SHARE) at chunk k: from k on another caption's loop, an abrupt cut."""
    p = int(rng.integers(0, ANCHOR + 1))
    places = [0] + list(range(p - CHUNKS + 2, p + 1))
    spec_a = specs[int(rng.integers(len(specs)))]
    switch = int(rng.integers(1, CHUNKS)) if rng.random() < SWITCH_SHARE else CHUNKS
    spec_b = specs[int(rng.integers(len(specs)))] if switch < CHUNKS else spec_a
    loops = [loop_latents(spec_a, rng, stats)]
    if switch < CHUNKS:
        loops.append(loop_latents(spec_b, rng, stats))
    video, audio = [], []
    for c, q in enumerate(places):
        v, a = loops[0 if c < switch else 1]
        video.append(v[q % CYCLE])
        audio.append(a[q % CYCLE])
    captions = [spec_a.caption if c < switch else spec_b.caption for c in range(CHUNKS)]
    return Stream(captions, places, torch.cat(video, dim=1), audio)


# --- the layout -------------------------------------------------------------------------------------------
def chunk_positions(text_rows: int, chunk: int) -> torch.Tensor:
    """[rows, 3] fp64: chunk c's audio rows (left, right) then video rows, at the dense layout's places
    (diffusers' build_packed_sequence of a clip with this text length: audio t = L + j, video t the
    temporal grid of its latent; the media clock's origin is the first prompt's length)."""
    from diffusers.modular_pipelines.minimax_h3.before_denoise import (_frame_position_grid,
                                                                       _temporal_position_grid)
    frame_grid, width_grid = _frame_position_grid(LATENT_H, LATENT_W, PATCH[1], PATCH[2])
    if chunk < 0:
        # Before the clip's start (a window chunk behind a current chunk at 0 or 1): chunk c + 3m's
        # layout, 85m audio latents earlier (chunk_layout.h shifted_span).
        m = (-chunk + CYCLE - 1) // CYCLE
        moved = chunk_positions(text_rows, chunk + CYCLE * m)
        moved[:, 0] -= 85.0 * m
        return moved
    a0, a1 = audio_span(chunk)
    n = a1 - a0
    audio = torch.zeros(2 * n, 3, dtype=torch.float64)
    audio[:, 0] = float(text_rows) + torch.arange(a0, a1, dtype=torch.float64).repeat(2)
    audio[:n, 2], audio[n:, 2] = float(width_grid[0]), float(width_grid[-1])
    times = _temporal_position_grid((chunk + 1) * CHUNK_LATENTS, float(text_rows))
    per_frame = frame_grid.shape[0]
    video = torch.empty(CHUNK_LATENTS, per_frame, 3, dtype=torch.float64)
    video[:, :, 0] = times[chunk * CHUNK_LATENTS:(chunk + 1) * CHUNK_LATENTS, None]
    video[:, :, 1:] = frame_grid[None]
    return torch.cat([audio, video.reshape(-1, 3)])


def retained(commits: int) -> list[int]:
    """The records the cache keeps after `commits` commits (kv_cache.h)."""
    return [r for r in range(commits) if r < SINK or r >= max(SINK, commits - WINDOW)]


def chunk_rows(stream: Stream, chunk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A chunk's video rows [5 * 40, 96] (patches) and audio rows [2a, 32] (left, then right; its place's)."""
    from diffusers.modular_pipelines.minimax_h3.before_denoise import patchify_video_latents
    v = stream.video[:, chunk * CHUNK_LATENTS:(chunk + 1) * CHUNK_LATENTS]
    a = stream.audio[chunk]
    return patchify_video_latents(v[None], PATCH), a.permute(0, 2, 1).reshape(-1, a.shape[1])


# --- the LoRA ---------------------------------------------------------------------------------------------
class Lora(torch.nn.Module):
    """PEFT's LoRA on the blocks' attention and FFN linears, applied as the engine applies it: out =
    base(x) + B(A(x.float())) * alpha / r (forward hooks; the base weights stay frozen)."""

    def __init__(self, model, rank: int = RANK, alpha: float = ALPHA):
        super().__init__()
        self.rank, self.alpha, self.scale = rank, alpha, alpha / rank
        self.names, self.a, self.b = [], torch.nn.ParameterList(), torch.nn.ParameterList()
        modules = dict(model.named_modules())
        for i in range(len(model.transformer_blocks)):
            for target in TARGETS:
                name = f"transformer_blocks.{i}.{target}"
                layer = modules[name]
                a = torch.empty(rank, layer.in_features)
                torch.nn.init.kaiming_uniform_(a, a=math.sqrt(5))  # PEFT's default initialisation
                self.names.append(name)
                self.a.append(torch.nn.Parameter(a))
                self.b.append(torch.nn.Parameter(torch.zeros(layer.out_features, rank)))
        self.handles = []
        for name, a, b in zip(self.names, self.a, self.b):
            self.handles.append(modules[name].register_forward_hook(self._hook(a, b)))

    def _hook(self, a, b):
        def hook(module, args, output):
            return (output.float() + F.linear(F.linear(args[0].float(), a), b) * self.scale).to(output.dtype)
        return hook

    def tensors(self) -> dict:
        """The PEFT file's tensors: base_model.model.<module>.lora_A.weight [r, in] / lora_B.weight [out, r]."""
        out = {}
        for name, a, b in zip(self.names, self.a, self.b):
            out[f"base_model.model.{name}.lora_A.weight"] = a.detach().clone().contiguous()
            out[f"base_model.model.{name}.lora_B.weight"] = b.detach().clone().contiguous()
        return out

    def config(self) -> dict:
        return {"peft_type": "LORA", "r": self.rank, "lora_alpha": self.alpha, "target_modules": list(TARGETS),
                "lora_dropout": 0.0, "bias": "none", "use_rslora": False, "use_dora": False,
                "fan_in_fan_out": False, "init_lora_weights": True, "inference_mode": True,
                "base_model_name_or_path": None, "task_type": None}


# --- the packed causal forward ----------------------------------------------------------------------------
class Packed:
    """The engine's causal forwards of one sample, packed: groups of rows, each with its own keys."""

    def __init__(self, lane):
        self.lane = lane        # bench/reference/causal's CausalLane: the engine's numerical order
        self.m = lane.m

    def forward(self, texts: dict, prompt_of: list, noisy: list, clean: list, only=None, places=None):
        """texts: caption -> [L, 32] encoder rows; prompt_of[c]: chunk c's caption; noisy[c] = (video x_t,
        audio x_t, video sigma, audio sigma) rows of every chunk; clean[j] = (video x0, audio x0, video eps,
        audio eps) rows of the chunks before the last, which the forward commits as the engine does
        (t * x0 + (1 - t) * eps at t = 0.999, in fp32). only: the chunks whose noise forward runs (default
        all). places[c]: the chunk of a clip whose positions chunk c runs at (default c). Returns those chunks'
        (video v, audio v), in order."""
        lane, m = self.lane, self.m
        dtype = torch.float32
        origin = texts[prompt_of[0]].shape[0]   # the media clock's origin: the first prompt's length
        t_clean = fp32(CLEAN_T)
        c_eps = fp32_one_minus(t_clean)
        chunks = list(range(len(noisy))) if only is None else list(only)
        places = list(range(len(noisy))) if places is None else list(places)
        noisy = [(v, a, fp32_one_minus(s_v), fp32_one_minus(s_a)) for v, a, s_v, s_a in noisy]
        ts = sorted({t_clean} | {n[2] for n in noisy} | {n[3] for n in noisy})
        t_index = {t: i for i, t in enumerate(ts)}
        # groups: (name, rows tensor, positions, per-row AdaLN row, key groups)
        hs, pos, mod_rows, spans, keys = [], [], [], [], []
        start = 0

        def add(h, p, rows_mod, key_groups):
            nonlocal start
            hs.append(h)
            pos.append(p)
            mod_rows.append(rows_mod)
            spans.append((start, start + h.shape[0]))
            keys.append(key_groups)
            start += h.shape[0]
            return len(spans) - 1

        text_group = {}
        for caption in dict.fromkeys(prompt_of):
            text = lane._refine_text(texts[caption].to(dtype))
            L = text.shape[0]
            p = torch.zeros(L, 3, dtype=torch.float64)
            p[:, 0] = torch.arange(L, dtype=torch.float64)
            g = len(spans)
            text_group[caption] = add(text, p, torch.full((L,), t_index[t_clean] * 3 + 1), [g])

        def chunk_input(c, video, audio, t_v, t_a):
            h = torch.cat([m.audio_proj_in(audio.float()).to(dtype), m.proj_in(video.float()).to(dtype)])
            n_a = audio.shape[0]
            rows_mod = torch.cat([torch.full((n_a,), t_index[t_a] * 3 + 2),
                                  torch.full((video.shape[0],), t_index[t_v] * 3 + 0)])
            return h, chunk_positions(origin, places[c]), rows_mod

        record_group = {}   # chunk j -> its clean group (record j + 1)

        def history(c):
            """The groups of the records retained before chunk c's forwards (after c + 1 commits)."""
            out = []
            for r in retained(c + 1):
                out.append(text_group[prompt_of[c]] if r == 0 else record_group[r - 1])
            return out

        for j, (video, audio, eps_v, eps_a) in enumerate(clean):
            video = t_clean * video.float() + c_eps * eps_v.float()
            audio = t_clean * audio.float() + c_eps * eps_a.float()
            h, p, rm = chunk_input(j, video, audio, t_clean, t_clean)
            g = len(spans)
            record_group[j] = add(h, p, rm, history(j) + [g])
        noisy_groups = []
        for c in chunks:
            video, audio, t_v, t_a = noisy[c]
            h, p, rm = chunk_input(c, video, audio, t_v, t_a)
            g = len(spans)
            noisy_groups.append(add(h, p, rm, history(c) + [g]))

        h = torch.cat(hs)
        positions = torch.cat(pos)
        mod_index = torch.cat(mod_rows).long()
        rope = m.rope(positions)
        adaln_input = lane._time_embeddings(ts, dtype)
        for block in m.transformer_blocks:
            h = self._block(block, h, adaln_input, mod_index, rope, spans, keys)
        shift, scale = lane._adaln_params(m.norm_out.linear, adaln_input, 2)
        out = []
        for g, (video, audio, t_v, t_a) in zip(noisy_groups, [noisy[c] for c in chunks]):
            a, b = spans[g]
            n_a = audio.shape[0]
            rows = m.norm_out.norm(h[a:b])
            i_a, i_v = t_index[t_a], t_index[t_v]
            ya = (rows[:n_a] * (1.0 + scale[i_a]) + shift[i_a]).to(torch.float32)
            yv = (rows[n_a:] * (1.0 + scale[i_v]) + shift[i_v]).to(torch.float32)
            out.append((m.proj_out(yv), m.audio_proj_out(ya)))
        return out

    def _block(self, block, x, adaln_input, mod_index, rope, spans, keys):
        from diffusers.models.transformers.transformer_minimax_h3 import _apply_rotary_emb
        lane = self.lane
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = lane._adaln_params(
            block.adaln_proj.linear, adaln_input, 6)
        h = block.norm1(x) * (1.0 + scale_msa[mod_index]) + shift_msa[mod_index]
        attn = block.attn
        s = h.shape[0]
        q = attn.norm_q(attn.to_q(h).view(s, lane.heads, lane.head_dim))
        k = attn.norm_k(attn.to_k(h).view(s, lane.heads, lane.head_dim))
        v = attn.to_v(h).view(s, lane.heads, lane.head_dim)
        q = _apply_rotary_emb(q[None], *rope)[0]
        k = _apply_rotary_emb(k[None], *rope)[0]
        outs = []
        for (a, b), groups in zip(spans, keys):
            kk = torch.cat([k[spans[g][0]:spans[g][1]] for g in groups])
            vv = torch.cat([v[spans[g][0]:spans[g][1]] for g in groups])
            o = F.scaled_dot_product_attention(q[a:b].transpose(0, 1), kk.transpose(0, 1), vv.transpose(0, 1),
                                               scale=lane.head_dim ** -0.5)
            outs.append(o.transpose(0, 1))
        o = attn.to_out[0](torch.cat(outs).reshape(s, lane.heads * lane.head_dim))
        x = x + gate_msa[mod_index] * o
        h = block.norm2(x) * (1.0 + scale_mlp[mod_index]) + shift_mlp[mod_index]
        return x + gate_mlp[mod_index] * block.ff(h)


# --- one sample -------------------------------------------------------------------------------------------
def draw_sigma(rng: np.random.Generator, video_shift: float, audio_shift: float) -> tuple[float, float]:
    if rng.random() < GRID_SHARE:
        u = 1.0 - int(rng.integers(4)) / 4.0
    else:
        u = float(rng.random())
    return fp32(shifted(u, video_shift)), fp32(shifted(u, audio_shift))


def sample_inputs(stream: Stream, rng: np.random.Generator, gen: torch.Generator, shifts, corrupt: bool):
    """The noisy and clean inputs of a sample, with the targets (x0 - eps per noisy chunk)."""
    rows = [chunk_rows(stream, c) for c in range(CHUNKS)]
    noise_level = float(rng.uniform(0, CONTEXT_NOISE)) if corrupt else 0.0
    clean = []
    for video, audio in rows[:-1]:
        if noise_level > 0:
            video = video + noise_level * torch.randn(video.shape, generator=gen)
            audio = audio + noise_level * torch.randn(audio.shape, generator=gen)
        clean.append((video, audio, torch.randn(video.shape, generator=gen), torch.randn(audio.shape, generator=gen)))
    noisy, targets = [], []
    for video, audio in rows:
        s_v, s_a = draw_sigma(rng, *shifts)
        n_v, n_a = torch.randn(video.shape, generator=gen), torch.randn(audio.shape, generator=gen)
        noisy.append(((1 - s_v) * video + s_v * n_v, (1 - s_a) * audio + s_a * n_a, s_v, s_a))
        targets.append((video - n_v, audio - n_a))
    return noisy, clean, targets


def lane_of(model):
    import sys
    from pathlib import Path
    here = Path(__file__).resolve().parent
    sys.path.insert(0, str(here.parent.parent / "bench" / "reference" / "causal"))
    import causal_lane
    return causal_lane, causal_lane.CausalLane(model, SimpleNamespace())


def train(model, texts: dict, stats: dict, shifts, steps: int, seed: int, log):
    """The LoRA on frozen `model`; returns (lora, losses)."""
    model.requires_grad_(False)
    torch.manual_seed(seed)
    lora = Lora(model)
    _, lane = lane_of(model)
    packed = Packed(lane)
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    specs = data.training_specs()
    opt = torch.optim.AdamW(lora.parameters(), lr=LR, weight_decay=0.0)
    losses = []
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = video_vae.cosine_lr(step, steps, LR, WARMUP)
        opt.zero_grad(set_to_none=True)
        total_v = total_a = 0.0
        for _ in range(BATCH):
            stream = make_stream(rng, specs, stats)
            noisy, clean, targets = sample_inputs(stream, rng, gen, shifts, rng.random() < 0.5)
            # the last chunk (the layout of every chunk of a long stream) and one of the others
            only = [int(rng.integers(CHUNKS - 1)), CHUNKS - 1]
            out = packed.forward(texts, stream.captions, noisy, clean, only, stream.places)
            targets = [targets[c] for c in only]
            loss_v = sum((pv - tv).pow(2).mean() for (pv, _), (tv, _) in zip(out, targets)) / len(only)
            loss_a = sum((pa - ta).pow(2).mean() for (_, pa), (_, ta) in zip(out, targets)) / len(only)
            ((loss_v + loss_a) / BATCH).backward()
            total_v += float(loss_v.detach()) / BATCH
            total_a += float(loss_a.detach()) / BATCH
        torch.nn.utils.clip_grad_norm_(lora.parameters(), 1.0)
        opt.step()
        losses.append(total_v + total_a)
        log("causal", step, steps, video=total_v, audio=total_a)
        if step % 10 == 9:
            print(f"causal       {step + 1:5d}/{steps} loss {np.mean(losses[-10:]):.4f}", flush=True)
    return lora, losses


# --- the check against the reference lane -----------------------------------------------------------------
class RecordCache:
    """The engine's KV cache (kv_cache.h) in the duck type bench/reference/causal's lane writes and reads."""

    def __init__(self):
        self.records, self.pending = [], {}

    @property
    def committed_chunks(self):
        return len(self.records)

    def kept(self):
        return [self.records[r] for r in retained(len(self.records))]

    def retained_spec(self, layer):
        kept = self.kept()
        return SimpleNamespace(rows=sum(r[layer][0].shape[0] for r in kept)) if kept else None

    def stage(self, layer, k, v, copy_key=True, copy_value=True):
        self.pending[layer] = (k.clone(), v.clone())

    def copy_retained_into(self, layer, k_out, v_out):
        kept = self.kept()
        k_out.copy_(torch.cat([r[layer][0] for r in kept]))
        v_out.copy_(torch.cat([r[layer][1] for r in kept]))

    def commit(self, role=None):
        self.records.append([self.pending[i] for i in range(len(self.pending))])
        self.pending = {}

    def discard_pending(self):
        self.pending = {}


@torch.no_grad()
def check_against_lane(model, texts: dict, stats: dict, shifts, seed: int) -> float:
    """The packed training forward against bench/reference/causal's lane (the engine's causal forward,
    chunk by chunk through a KV cache) on one sample at places 0, -2, -1, 0 with a prompt switch and a
    non-zero LoRA: the largest absolute difference of the noisy chunks' velocities."""
    causal_lane, lane = lane_of(model)
    torch.manual_seed(seed)
    lora = Lora(model)
    for b in lora.b:
        b.normal_(0.0, 0.02)
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    stream = make_stream(rng, data.training_specs(), stats)
    while stream.places[-1] != 0:   # the window before the clip's start: places 0, -2, -1, 0
        stream = make_stream(rng, data.training_specs(), stats)
    stream.captions[2:] = [data.all_specs()[0].caption] * (CHUNKS - 2)   # a switch at chunk 2
    noisy, clean, _ = sample_inputs(stream, rng, gen, shifts, False)
    packed = Packed(lane).forward(texts, stream.captions, noisy, clean, places=stream.places)
    origin = texts[stream.captions[0]].shape[0]
    lane.layout_mod = SimpleNamespace(text_position_ids=lambda L: torch.stack(
        [torch.arange(L, dtype=torch.float64), torch.zeros(L, dtype=torch.float64), torch.zeros(L, dtype=torch.float64)], 1))
    chunks = []
    for c in range(CHUNKS):
        a0, a1 = audio_span(stream.places[c])
        chunks.append(SimpleNamespace(audio_rows=2 * (a1 - a0), rows=2 * (a1 - a0) + CHUNK_LATENTS * 40,
                                      video_latents=CHUNK_LATENTS))
    layout = SimpleNamespace(chunks=chunks, latent_h=LATENT_H, latent_w=LATENT_W,
                             chunk_position_ids=lambda c: chunk_positions(origin, stream.places[c]))
    cache = RecordCache()
    lane.prefill_text(texts[stream.captions[0]][None], cache=cache)

    def latents(video_rows, audio_rows):
        return (causal_lane.unpatchify_video(video_rows, 24, CHUNK_LATENTS, LATENT_H, LATENT_W),
                causal_lane.unpack_audio(audio_rows))

    worst = 0.0
    for c in range(CHUNKS):
        if c > 0 and stream.captions[c] != stream.captions[c - 1]:   # keep: record 0 replaced
            fresh = RecordCache()
            lane.prefill_text(texts[stream.captions[c]][None], cache=fresh)
            cache.records[0] = fresh.records[0]
        v_x, a_x = latents(noisy[c][0], noisy[c][1])
        v, a = lane.forward_chunk(video_latent=v_x, audio_latent=a_x, layout=layout, chunk_index=c, cache=cache,
                                  role="noise", video_sigma=noisy[c][2], audio_sigma=noisy[c][3])
        pv = causal_lane.unpatchify_video(packed[c][0], 24, CHUNK_LATENTS, LATENT_H, LATENT_W)
        pa = causal_lane.unpack_audio(packed[c][1])
        worst = max(worst, float((v - pv).abs().max()), float((a - pa).abs().max()))
        if c < CHUNKS - 1:   # the commit: the lane mixes t * x0 + (1 - t) * eps and writes the cache
            x0_v, x0_a = latents(clean[c][0], clean[c][1])
            eps_v, eps_a = latents(clean[c][2], clean[c][3])
            lane.forward_chunk(video_latent=x0_v, audio_latent=x0_a, layout=layout, chunk_index=c, cache=cache,
                               role="clean", video_eps=eps_v, audio_eps=eps_a)
    for h in lora.handles:
        h.remove()
    return worst


def save(lora: Lora, folder) -> None:
    from safetensors.torch import save_file
    folder.mkdir(parents=True, exist_ok=True)
    save_file(lora.tensors(), folder / "adapter_model.safetensors", metadata={"format": "pt"})
    (folder / "adapter_config.json").write_text(json.dumps(lora.config(), indent=2, sort_keys=True) + "\n")
