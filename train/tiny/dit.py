"""The tiny DiT: diffusers' MiniMaxH3Transformer3DModel trained with H3's flow matching on the clips' latents.

The packed sequence is the engine's for a T2VA request: [text | audio | video] rows (the modular
pipeline's layout), the text rows the frozen text encoder's hidden_states[K] of the caption. A training
step takes windows of it (WINDOW latent frames of video, the audio of the same time, all the text rows)
at their whole-clip positions, for a batch of clips. Each step draws one sigma on [0, 1] and pushes it
through both shifts (video 3, audio 3: see VIDEO_SHIFT), so that the rows see the joint noise levels the
sampler visits; the rows are x_t = (1 - s) x0 + s n, the target is the data-ward velocity x0 - n, and
the timestep is t = 1 - s (text rows at the video's). The exported weights are an exponential moving
average of the trained ones.
"""

from __future__ import annotations

import copy

import numpy as np
import torch

from video_vae import cosine_lr

CONFIG = dict(
    num_attention_heads=2,
    attention_head_dim=128,
    hidden_size=128,
    num_layers=4,
    num_refiner_layers=2,
    ffn_dim=384,
    text_dim=32,
    time_embed_hidden_dim=128,
    time_embed_dim=64,
)
# The video shift is 3, not the release's 12, in training and in the exported scheduler: 12 suits the
# release's ~73 k video rows; on this model's 680 a shifted sigma is below 0.5 for only 8 % of the
# training draws, and the first DiT (shift 12) learnt the background but never the low-noise steps
# where the shape takes its place: its samples were scattered blocks of colour. Audio keeps the
# release's 3.
VIDEO_SHIFT, AUDIO_SHIFT = 3.0, 3.0
PATCH = (1, 2, 2)
EMA_DECAY = 0.998
# Two guards against the shortcut the first DiTs took (train/tiny/README.md, "Status"): near sigma = 1
# the mean of the 65,280 noisy video values still gives the clip's background away, so the DiT learnt
# to read the clip off the noise and never off the text, and from pure noise it drew one average
# clip for every prompt. A share of the steps is drawn at sigma = 1 exactly (nothing but the text to
# go by), and the noise carries a per-channel constant (offset noise), so that the rows' mean says
# little about the clip until the sampler is well under way.
PURE_NOISE_SHARE = 0.1
OFFSET_NOISE = 0.1
# A step trains on windows, not whole clips: BATCH clips' rows of WINDOW latent frames (and the audio
# of the same time) at the positions they hold in the whole clip, with the caption's text rows. A
# window costs a tenth of a whole clip's 680 + 186 rows (attention: far less), so the same time sees
# about twelve times as many clips; whole-clip steps of one clip each (the first recipe) did not learn
# the shape's colour from the text in 6,000 steps (train/tiny/README.md, "Status"). The engine samples
# whole clips: every row's position is the one it had in training, its attention spans more rows.
WINDOW, BATCH = 2, 8
# ... and then a short second stage on whole clips (the engine's sequence), from the first's average:
# a DiT that only ever attended over a window's ~110 rows spreads its attention over the whole clip's
# 880 at sampling time, and predicted the shape's rows 9 x worse there than in a window (shapes came out
# faint and in pieces: train/tiny/README.md, run 6).
WHOLE_BATCH, WHOLE_LR, WHOLE_WARMUP = 2, 3e-4, 100


def build() -> torch.nn.Module:
    from diffusers import MiniMaxH3Transformer3DModel
    return MiniMaxH3Transformer3DModel(**CONFIG)


def shifted(sigma: float, shift: float) -> float:
    return shift * sigma / (1.0 + (shift - 1.0) * sigma)


def audio_rows(latent: torch.Tensor) -> torch.Tensor:
    """[2, C, A] -> the DiT's [2A, C] rows, the left channel's A rows first."""
    return latent.permute(0, 2, 1).reshape(-1, latent.shape[1])


class Layouts:
    """The packed sequence's positions, tags and row indices, per text length (the media shape is fixed),
    and its windows: a few latent frames' rows at their own positions."""

    def __init__(self, latent_frames: int, latent_h: int, latent_w: int, audio_latents: int):
        self.shape = (latent_frames, latent_h, latent_w, audio_latents)
        self.cache = {}

    def __call__(self, text_rows: int):
        if text_rows not in self.cache:
            from diffusers.modular_pipelines.minimax_h3.before_denoise import MiniMaxH3PrepareLayoutStep
            t, h, w, a = self.shape
            pos, tags, vi, ai, ti, _, _ = MiniMaxH3PrepareLayoutStep.build_packed_sequence(
                torch.ones(text_rows, dtype=torch.long), t, h, w, a, PATCH, 2, 2, 0)
            self.cache[text_rows] = (pos.to(torch.float32), tags, vi, ai, ti)
        return self.cache[text_rows]

    def window(self, text_rows: int, first: int, frames: int):
        """The text rows, the video rows of latent frames [first, first + frames) and the audio rows of
        the same stretch of time (both channels), at the positions they hold in the whole clip's
        sequence. Returns the layout (as __call__) and the video and audio rows it keeps."""
        pos, tags, vi, ai, ti = self(text_rows)
        t, h, w, a = self.shape
        per_frame = (h // PATCH[1]) * (w // PATCH[2])
        a0, a1 = round(first * a / t), round((first + frames) * a / t)
        keep_a = torch.cat([torch.arange(a0, a1), a + torch.arange(a0, a1)])
        keep_v = torch.arange(first * per_frame, (first + frames) * per_frame)
        rows = torch.cat([ti, ai[keep_a], vi[keep_v]])
        n_t, n_a = len(ti), len(keep_a)
        layout = (pos[rows], tags[rows], n_t + n_a + torch.arange(len(keep_v)), n_t + torch.arange(n_a),
                  torch.arange(n_t))
        return layout, keep_v, keep_a


def forward(model, layouts, text, video_rows, audio_rows_, t_video: float, t_audio: float, layout=None):
    """One packed forward of the whole clip ([rows, C] each), or of `layout` (a window) over a batch
    ([batch, rows, C] each, one layout and one noise level shared by the batch)."""
    if layout is None:
        layout = layouts(text.shape[0])
        text, video_rows, audio_rows_ = text[None], video_rows[None], audio_rows_[None]
    pos, tags, vi, ai, ti = layout
    unique = sorted({t_video, t_audio})
    index = torch.full((pos.shape[0],), unique.index(t_video), dtype=torch.long)
    index[ai] = unique.index(t_audio)
    return model(hidden_states=video_rows, audio_hidden_states=audio_rows_, encoder_hidden_states=text,
                 timestep=torch.tensor(unique, dtype=torch.float32), timestep_indices=index, token_tags=tags,
                 position_ids=pos, video_indices=vi, audio_indices=ai, text_indices=ti, return_dict=False)


def train(model, clips, embeds, layouts, steps: int, seed: int, log, window: int = WINDOW, batch: int = BATCH,
          lr: float = 1e-3, warmup: int = 200, stage: str = "dit"):
    """clips: dicts with `video_rows` [rows, 96] and `audio_rows` [2A, 32] (normalised latents) and `caption`;
    embeds: caption -> [L, text_dim]. Each step is a batch of `batch` windows of `window` latent frames
    from clips whose captions have the same number of rows (the batch shares one layout), at one noise
    level. Returns (EMA model, losses)."""
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    ema = copy.deepcopy(model).requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    by_length = {}
    for i, clip in enumerate(clips):
        by_length.setdefault(embeds[clip["caption"]].shape[0], []).append(i)
    frames = layouts.shape[0]
    losses = []
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = cosine_lr(step, steps, lr, warmup)
        first = int(rng.integers(len(clips)))
        text_rows = embeds[clips[first]["caption"]].shape[0]
        same = by_length[text_rows]
        chosen = [clips[first]] + [clips[same[int(j)]] for j in rng.integers(len(same), size=batch - 1)]
        layout, keep_v, keep_a = layouts.window(text_rows, int(rng.integers(frames - window + 1)), window)
        sigma = 1.0 if rng.random() < PURE_NOISE_SHARE else float(rng.random())
        s_v, s_a = shifted(sigma, VIDEO_SHIFT), shifted(sigma, AUDIO_SHIFT)
        x_v = torch.stack([c["video_rows"][keep_v] for c in chosen])
        x_a = torch.stack([c["audio_rows"][keep_a] for c in chosen])
        text = torch.stack([embeds[c["caption"]] for c in chosen])
        n_v, n_a = torch.randn_like(x_v), torch.randn_like(x_a)
        # a video row is one patch: 24 channels x 4 positions, channel-major; an audio row, 32 channels
        n_v = n_v + OFFSET_NOISE * torch.randn(batch, 1, x_v.shape[2] // 4).repeat_interleave(4, -1)
        n_a = n_a + OFFSET_NOISE * torch.randn(batch, 1, x_a.shape[2])
        pred_v, pred_a = forward(model, layouts, text, (1 - s_v) * x_v + s_v * n_v, (1 - s_a) * x_a + s_a * n_a,
                                 1.0 - s_v, 1.0 - s_a, layout)
        loss_v = (pred_v - (x_v - n_v)).pow(2).mean()
        loss_a = (pred_a - (x_a - n_a)).pow(2).mean()
        loss = loss_v + loss_a
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        with torch.no_grad():
            decay = min(EMA_DECAY, (1 + step) / (10 + step))
            for e, p in zip(ema.parameters(), model.parameters()):
                e.mul_(decay).add_(p.detach(), alpha=1 - decay)
        losses.append(float(loss))
        log(stage, step, steps, video=float(loss_v), audio=float(loss_a))
    return ema, losses
