"""Trains a tiny H3-architecture model (meant to become gst-h3's embedded default) from one seed, on the
CPU, and writes it in the release's diffusers layout with a manifest (train/tiny/README.md). Run
through train/tiny/run.sh.

    python recipe.py --h3 BUILD/tools/h3 --out DIR [--work DIR] [--seed S] [--force]
    python recipe.py --check DIR          (the files against DIR/manifest.json)

Stages, each cached in --work under a key of its inputs (a rerun skips what is already made):
  text           `h3 make-tiny` (the frozen tiny Qwen3-VL text encoder, tokenizer, schedulers) and
                 `h3 encode-prompt` of every caption: exactly the rows the engine will feed the DiT
  vae            the video decoder on whole-canvas clips, from the pooling encoder's latents
  dataset        CLIPS whole clips (56 frames, 256 x 160) encoded
  audio_dataset  the same clips' soundtracks (2.325 s of stereo) encoded (the audio VAE is constructed,
                 not trained: audio_vae.py)
  dit            flow matching on the dataset (normalised latents)
then export (a staging folder renamed into place) and the manifest, then
  causal         the chunk-causal adapter (causal.py): a LoRA trained by teacher forcing on endless streams
                 through the engine's causal forward, written as OUT/causal-lora/ (PEFT) into the manifest.

    python recipe.py --h3 BUILD/tools/h3 --causal-only [--base data/default] --out DIR
                 only the causal stage, from a finished model (default: the committed data/default):
                 DIR is BASE with causal-lora/ (re)made and the manifest updated.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np
import torch

import audio_vae
import causal
import data
import dit
import manifest
import video_vae

DEFAULT_SEED = 20261201
THREADS = 2
STEPS = {"vae": 1500, "dit": 18000, "dit_whole": 2500, "causal": 300}
CLIPS = 400
# --endless-clips (an experiment, not the default's recipe: train/tiny/README.md, run 8): the DiT's clips
# start at a random phase of their endless motion (data.endless_track), and a caption needs more clips
# for its shape to be seen across the frame: 2,400 (about 7.6 a caption).
ENDLESS_CLIPS = 2400
ENDLESS = False  # set by --endless-clips
FRAMES = data.CLIP_FRAMES    # what the engine generates for the default 48 frames (17 * 3 + 5, trimmed)
LATENT = (17, 10, 16)      # video latent frames, height, width for 56 frames at 256 x 160
AUDIO_LATENTS = 93         # round(56 * 5 / 3)
TEXT_ENCODER_SEED = 20260801  # h3 make-tiny's default: the same frozen text encoder as the random model
DEFAULTS = {"default_width": 256, "default_height": 160, "default_frames": 48, "default_steps": 8}
ABOUT = ("A tiny MiniMax-H3-architecture model trained by gst-h3's train/tiny on procedural "
         "clips (a shape of one of six colours moving on a plain background, a tone whose pitch names the shape). "
         "Prompts of the form 'a red circle moving right on a black background'; see manifest.json.")


class Log:
    def __init__(self):
        self.start = {}

    def __call__(self, stage, step, steps, **values):
        if step == 0:
            self.start[stage] = time.time()
        if step % 50 == 0 or step == steps - 1:
            elapsed = time.time() - self.start[stage]
            eta = elapsed / (step + 1) * (steps - step - 1)
            figures = " ".join(f"{k} {v:.4f}" for k, v in values.items())
            print(f"{stage:12s} {step + 1:5d}/{steps} {figures}  ({elapsed:.0f} s, {eta:.0f} s left)", flush=True)


def cached(work: Path, name: str, key: dict, make):
    """work/name.pt holds (key, value); made again when the key differs."""
    path = work / f"{name}.pt"
    if path.exists():
        saved = torch.load(path, weights_only=False)
        if saved["key"] == key:
            print(f"{name:12s} reused from {path}", flush=True)
            return saved["value"]
    t0 = time.time()
    value = make()
    torch.save({"key": key, "value": value}, path)
    print(f"{name:12s} done in {time.time() - t0:.0f} s", flush=True)
    return value


def stage_text(h3: str, work: Path, base: Path | None = None) -> dict:
    """Every caption's encoder rows; `base`: a model folder holding this text encoder (default: make it)."""
    if base is None:
        base = work / "base"
        if not (base / "model_index.json").exists():
            subprocess.run([h3, "make-tiny", "--quiet", "--out", str(base), "--seed", str(TEXT_ENCODER_SEED)],
                           check=True)
    from safetensors.torch import load_file
    embeds = {}
    for spec in data.all_specs():
        out = work / "embeds.safetensors"
        subprocess.run([h3, "encode-prompt", "--model", str(base), "--prompt", spec.caption, "--out", str(out)],
                       check=True, stdout=subprocess.DEVNULL)
        # a copy: load_file maps the file, which the next caption's run overwrites
        embeds[spec.caption] = load_file(out)["embeds"].to(torch.float32).clone()
    return embeds


def stage_text_direct(h3: str, work: Path, base: Path) -> dict:
    """Every caption's encoder rows computed here, with transformers' Qwen3-VL on `base`'s text encoder
    (hidden_states[K] of the caption's tokens, no template): a process for all 324 captions, where `h3
    encode-prompt` takes seconds per caption. Checked against `h3 encode-prompt` on the first caption
    (they agree to float32 rounding, 2.4e-7 when written); a difference beyond 1e-5 stops the recipe."""
    from safetensors.torch import load_file
    from transformers import AutoTokenizer, Qwen3VLForConditionalGeneration
    layer = json.loads((base / "model_index.json").read_text())["text_encoder_layer"]
    tokenizer = AutoTokenizer.from_pretrained(base / "tokenizer")
    encoder = Qwen3VLForConditionalGeneration.from_pretrained(base / "text_encoder", torch_dtype=torch.float32).eval()
    embeds = {}
    with torch.no_grad():
        for spec in data.all_specs():
            ids = tokenizer(spec.caption, add_special_tokens=False, return_tensors="pt").input_ids
            out = encoder.model.language_model(input_ids=ids, output_hidden_states=True)
            embeds[spec.caption] = out.hidden_states[layer][0].to(torch.float32).clone()
    first = data.all_specs()[0].caption
    out = work / "embeds.safetensors"
    subprocess.run([h3, "encode-prompt", "--model", str(base), "--prompt", first, "--out", str(out)], check=True,
                   stdout=subprocess.DEVNULL)
    difference = float((load_file(out)["embeds"].to(torch.float32) - embeds[first]).abs().max())
    print(f"text         {len(embeds)} captions; against h3 encode-prompt: max |diff| {difference:.2e}", flush=True)
    if difference > 1e-5:
        sys.exit(f"text: transformers' encoder differs from h3 encode-prompt by {difference:.2e} on '{first}'")
    return embeds


# The text stage's cache key; the causal-only run encodes with the base model's copy of the same encoder.
TEXT_KEY = {"seed": TEXT_ENCODER_SEED, "captions": len(data.all_specs()), "copied": True}


def clip_rng(seed: int, i: int) -> np.random.Generator:
    return np.random.default_rng([seed, 7, i])


def dataset_specs(seed: int) -> list:
    specs = data.training_specs()
    order = np.random.default_rng([seed, 5]).permutation(CLIPS) % len(specs)
    return [specs[int(k)] for k in order]


def dataset_track(seed: int, i: int):
    """Clip i's caption and track: its frames and its soundtrack are both rendered from it. With
    --endless-clips the track is a stretch of the caption's endless motion at a random phase (a shape
    moving right leaves at the right edge and comes back at the left), so that where the shape is
    cannot be read from the frame's time, only from the frames around it (what an endless stream seemed
    to need before relative positions kept its chunks within the trained clip: docs/causal.md, "How the
    motion was found")."""
    spec = dataset_specs(seed)[i]
    if ENDLESS:
        return spec, data.endless_track(spec, np.arange(FRAMES), clip_rng(seed, i), fresh=False)
    return spec, data.make_track(spec, FRAMES, clip_rng(seed, i))


_ENCODER = []  # the dataset workers' VAE (inherited through fork)


def encode_dataset_clip(seed: int, i: int) -> dict:
    spec, track = dataset_track(seed, i)
    torch.set_num_threads(1)  # one per worker, THREADS workers: the same sums whatever the split
    # no graph and a copy: the encoder's output is otherwise a view that keeps the whole clip's
    # frames (28 MB) alive, once a clip
    with torch.no_grad():
        mean = video_vae.encode_clip(_ENCODER[0], data.render_video(spec, track)).clone()
    return {"caption": spec.caption, "video_mean": mean}


def track_key() -> dict:
    """The dataset stages' cache key for the tracks (the captioned clips' key is as it always was)."""
    return {"track": "endless, random phase"} if ENDLESS else {}


def stage_dataset(seed: int, vae) -> list:
    """Every clip's video latents (the posterior mean) and caption, rendered and encoded by THREADS
    worker processes (a clip: 0.15 s to render, 0.15 s to encode)."""
    import multiprocessing
    _ENCODER[:] = [vae]
    clips = []
    t0 = time.time()
    with multiprocessing.get_context("fork").Pool(THREADS) as pool:
        for i, clip in enumerate(pool.imap(partial(encode_dataset_clip, seed), range(CLIPS), chunksize=10)):
            clips.append(clip)
            if i % 200 == 0:
                print(f"dataset      {i + 1:5d}/{CLIPS} ({time.time() - t0:.0f} s)", flush=True)
    return clips


def render_dataset_sound(seed: int, i: int):
    return data.render_audio(*dataset_track(seed, i), AUDIO_LATENTS * audio_vae.HOP)


def stage_audio_dataset(seed: int) -> list:
    """Every clip's audio latents [2, 32, A]."""
    return [audio_vae.encode(render_dataset_sound(seed, i)) for i in range(CLIPS)]


def latent_stats(tensors: list, dims, floor: float) -> tuple[list, list]:
    x = torch.stack(tensors)
    return x.mean(dim=dims).tolist(), x.std(dim=dims).clamp_min(floor).tolist()


# The audio channels' deviation is floored at 0.01: the click band is silent but for a few hops of the
# bouncing clips (deviation about 0.001, peaks 30 deviations out), and unit-variance rows with such
# outliers would dominate the DiT's loss; at 0.01 a click is a few deviations (the tones' channels
# keep their own, about 0.09).
AUDIO_STD_FLOOR = 0.01


def write_json(path: Path, value) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n")


def summary(losses) -> dict:
    if isinstance(losses, dict):  # already a summary (a reused stage: reused_decoder)
        return losses
    tail = losses[-100:]
    return {"steps": len(losses), "first": round(losses[0], 6), "last_100_mean": round(float(np.mean(tail)), 6)}


def drop_encoder(path: Path, prefixes: tuple) -> None:
    """A VAE's file without its encoder's tensors: this model encodes by pooling (video_vae.pool_clip)
    and by Fourier projection (audio_vae.encode), so they were never trained; the engine reads only
    the decoders."""
    from safetensors.torch import load_file, save_file
    tensors = {k: v for k, v in load_file(path).items() if not k.startswith(prefixes)}
    save_file(tensors, path, metadata={"format": "pt"})


def export(out: Path, work: Path, seed: int, vae, avae, transformer, stats: dict, losses: dict, audio_error: float,
           force: bool, vae_from: str | None = None) -> None:
    staging = out.with_name(out.name + ".staging")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    base = work / "base"
    for part in ("text_encoder", "tokenizer", "scheduler", "audio_scheduler"):
        shutil.copytree(base / part, staging / part)
    for part, shift in (("scheduler", dit.VIDEO_SHIFT), ("audio_scheduler", dit.AUDIO_SHIFT)):
        config = json.loads((staging / part / "scheduler_config.json").read_text())
        write_json(staging / part / "scheduler_config.json", dict(config, shift=shift))  # the shifts it was trained at
    index = json.loads((base / "model_index.json").read_text())
    index.pop("_gst_h3_tiny", None)
    index["_gst_h3_default"] = ABOUT
    index["gst_h3"] = dict(DEFAULTS, seed=seed, trained_by="train/tiny/recipe.py")
    write_json(staging / "model_index.json", index)
    vae.register_to_config(latents_mean=stats["video_mean"], latents_std=stats["video_std"])
    vae.save_pretrained(staging / "vae")
    drop_encoder(staging / "vae" / "diffusion_pytorch_model.safetensors", ("encoder.", "quant_conv."))
    avae.register_to_config(latents_mean=stats["audio_mean"], latents_std=stats["audio_std"])
    avae.save_pretrained(staging / "audio_vae")
    drop_encoder(staging / "audio_vae" / "diffusion_pytorch_model.safetensors", audio_vae.ENCODER_PREFIXES)
    transformer.save_pretrained(staging / "transformer")
    files = {str(p.relative_to(staging)): manifest.sha256(p) for p in sorted(staging.rglob("*")) if p.is_file()}
    import diffusers
    import safetensors
    import transformers
    record = {
        "recipe": "train/tiny/recipe.py",
        "seed": seed,
        "threads": THREADS,
        "clips": CLIPS,
        "steps": STEPS,
        "held_out": [list(h) for h in data.HELD_OUT],
        "captions": len(data.all_specs()),
        "text_encoder_seed": TEXT_ENCODER_SEED,
        "versions": {"python": platform.python_version(), "torch": torch.__version__, "diffusers": diffusers.__version__,
                     "transformers": transformers.__version__, "numpy": np.__version__,
                     "safetensors": safetensors.__version__},
        "machine": {"cpu": platform.processor() or platform.machine(), "cpus": os.cpu_count()},
        "losses": {name: summary(v) for name, v in losses.items()},
        "audio_vae": {"constructed": "additive synthesiser of 40-Hz harmonics (audio_vae.py)",
                      "harmonics": list(audio_vae.HARMONICS), "round_trip_mae": audio_error},
        "files": files,
    }
    # only where the run differs from the default's recipe, so that its manifest stays what it was
    if ENDLESS:
        record["dit_clips"] = "a random phase of each caption's endless motion (data.endless_track)"
    if vae_from:
        record["vae_reused_from"] = vae_from
    write_json(staging / "manifest.json", record)
    if out.exists():
        shutil.rmtree(out) if force else sys.exit(f"{out}: exists (use --force to replace it)")
    staging.rename(out)


def reused_decoder(model: Path) -> dict:
    """The video decoder of a finished model of this recipe (--vae-from): the same stage's weights, so
    that a change to the DiT's stages does not train the decoder again (5 min). Its losses are the
    model's manifest's summary of them."""
    from safetensors.torch import load_file
    record = json.loads((model / "manifest.json").read_text())
    if record.get("steps", {}).get("vae") != STEPS["vae"] or record.get("seed") != DEFAULT_SEED:
        sys.exit(f"--vae-from {model}: its decoder was not made by this recipe's vae stage (steps, seed)")
    state = load_file(model / "vae" / "diffusion_pytorch_model.safetensors")
    print(f"vae          reused from {model}", flush=True)
    return {"state": state, "losses": record["losses"]["vae"], "reused_from": model.name}


def read_stats(base: Path) -> dict:
    """The latent statistics the recipe wrote into the VAEs' configs."""
    v = json.loads((base / "vae" / "config.json").read_text())
    a = json.loads((base / "audio_vae" / "config.json").read_text())
    return {"video_mean": v["latents_mean"], "video_std": v["latents_std"], "audio_mean": a["latents_mean"],
            "audio_std": a["latents_std"]}


def stage_causal(base: Path, out: Path, work: Path, seed: int, embeds: dict, log, force: bool) -> None:
    """The chunk-causal adapter (causal.py) for the finished model in `base`, written with `base`'s files
    into `out` (a staging folder renamed into place; `out` may be `base`) as causal-lora/, the manifest
    updated (the adapter's files, its steps and losses, the check against the reference lane)."""
    from diffusers import MiniMaxH3Transformer3DModel
    transformer_file = base / "transformer" / "diffusion_pytorch_model.safetensors"
    shifts = tuple(json.loads((base / part / "scheduler_config.json").read_text())["shift"]
                   for part in ("scheduler", "audio_scheduler"))
    stats = read_stats(base)
    key = {"base": manifest.sha256(transformer_file), "seed": seed, "steps": STEPS["causal"], "rank": causal.RANK,
           "alpha": causal.ALPHA, "targets": causal.TARGETS, "chunks": causal.CHUNKS, "anchor": causal.ANCHOR,
           "sink": causal.SINK, "window": causal.WINDOW, "grid_share": causal.GRID_SHARE, "switch_share": causal.SWITCH_SHARE,
           "loop": causal.LOOP, "context_noise": causal.CONTEXT_NOISE, "lr": causal.LR,
           "warmup": causal.WARMUP, "noise_forwards": "last + one",
           "batch": causal.BATCH, "shifts": shifts}

    def load():
        return MiniMaxH3Transformer3DModel.from_pretrained(base / "transformer").to(torch.float32).eval()

    difference = cached(work, "causal_check", {"base": key["base"], "seed": seed, "places": [0, -2, -1, 0]},
                        lambda: causal.check_against_lane(load(), embeds, stats, shifts, seed + 10))
    print(f"causal       packed forward vs the reference lane: max |dv| {difference:.2e}", flush=True)

    def make():
        if difference > 1e-4:
            sys.exit(f"causal: the packed training forward is not the engine's causal forward (max |dv| "
                     f"{difference:.2e} against bench/reference/causal's lane)")
        t0, c0 = time.time(), time.process_time()
        lora, losses = causal.train(load(), embeds, stats, shifts, STEPS["causal"], seed + 9, log)
        return {"tensors": lora.tensors(), "config": lora.config(), "losses": losses,
                "lane_difference": difference, "seconds": round(time.time() - t0), "cpu_seconds": round(time.process_time() - c0)}

    made = cached(work, "causal", key, make)
    staging = out.with_name(out.name + ".staging")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(base, staging, ignore=shutil.ignore_patterns("causal-lora"))
    adapter = staging / "causal-lora"
    adapter.mkdir()
    from safetensors.torch import save_file
    save_file(made["tensors"], adapter / "adapter_model.safetensors", metadata={"format": "pt"})
    write_json(adapter / "adapter_config.json", made["config"])
    record = json.loads((staging / "manifest.json").read_text())
    record["steps"]["causal"] = STEPS["causal"]
    record["losses"]["causal"] = summary(made["losses"])
    record["causal"] = {"trained_by": "train/tiny/causal.py (teacher forcing)", "seed": seed + 9,
                        "rank": causal.RANK, "alpha": causal.ALPHA, "targets": list(causal.TARGETS),
                        "chunks": causal.CHUNKS, "sink": causal.SINK, "window": causal.WINDOW,
                        "places": f"0, p - 2, p - 1, p; p = 0..{causal.ANCHOR}",
                        "motion": f"the captioned clip's first {causal.LOOP} frames, looped",
                        "lr": causal.LR, "warmup": causal.WARMUP, "schedule": "cosine to lr / 10",
                        "loss_by_tenth": [round(float(np.mean(t)), 4) for t in np.array_split(made["losses"], 10)],
                        "batch": causal.BATCH, "seconds": made["seconds"], "cpu_seconds": made["cpu_seconds"],
                        "lane_max_abs_difference": float(f"{made['lane_difference']:.3g}"),
                        "parameters": sum(t.numel() for t in made["tensors"].values())}
    record["files"] = {str(p.relative_to(staging)): manifest.sha256(p) for p in sorted(staging.rglob("*"))
                       if p.is_file() and p.name != "manifest.json"}
    write_json(staging / "manifest.json", record)
    if out.exists():
        shutil.rmtree(out) if force or out == base else sys.exit(f"{out}: exists (use --force to replace it)")
    staging.rename(out)


def check(folder: Path) -> int:
    bad = manifest.problems(folder)
    for line in bad:
        print(line, file=sys.stderr)
    print(f"{folder}: {'the files match the manifest' if not bad else f'{len(bad)} problems'}")
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--h3", help="the built h3 binary (BUILD/tools/h3)")
    ap.add_argument("--out", type=Path, help="the model folder to write")
    ap.add_argument("--work", type=Path, help="stage cache (default: OUT.work)")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--force", action="store_true", help="replace an existing --out")
    ap.add_argument("--check", type=Path, help="only check a folder's files against its manifest")
    ap.add_argument("--causal-only", action="store_true",
                    help="only the chunk-causal adapter's stage, from the finished model --base")
    ap.add_argument("--base", type=Path, default=Path(__file__).resolve().parent.parent.parent / "data" / "default",
                    help="--causal-only: the finished model (default: the committed data/default)")
    ap.add_argument("--vae-from", type=Path,
                    help="take the video decoder from a finished model of this recipe instead of training it")
    ap.add_argument("--endless-clips", action="store_true",
                    help="the DiT's clips at a random phase of their endless motion (an experiment: README, run 8)")
    ap.add_argument("--smoke", action="store_true",
                    help="a few steps of every stage on 6 clips (checks the recipe and its determinism; an untrained model)")
    args = ap.parse_args()
    global CLIPS, ENDLESS
    if args.endless_clips:
        ENDLESS = True
        CLIPS = ENDLESS_CLIPS
    if args.smoke:
        STEPS.update(vae=3, dit=5, dit_whole=3, causal=3)
        CLIPS = 6
    if args.check:
        return check(args.check)
    if not args.h3 or not args.out:
        ap.error("--h3 and --out are needed (or --check DIR)")
    if args.out.exists() and not args.force:
        print(f"{args.out}: exists; the recipe does not overwrite a model folder unless --force is given",
              file=sys.stderr)
        return 1
    torch.set_num_threads(THREADS)
    torch.set_num_interop_threads(1)
    work = args.work or args.out.with_name(args.out.name + ".work")
    work.mkdir(parents=True, exist_ok=True)
    seed = args.seed
    log = Log()
    if args.causal_only:
        base = args.base.resolve()
        embeds = cached(work, "text_direct", TEXT_KEY, lambda: stage_text_direct(args.h3, work, base))
        stage_causal(base, args.out.resolve(), work, seed, embeds, log, args.force)
        return check(args.out)

    torch.manual_seed(seed)  # the decoder's initial weights (torch's own initial seed is not fixed)
    vae = video_vae.build()
    video_vae.use_pooling_encoder(vae)

    def make_vae():
        losses = video_vae.train_decoder(vae, STEPS["vae"], seed + 1, log)
        return {"state": vae.state_dict(), "losses": losses}

    vae_key = {"seed": seed, "steps": STEPS["vae"], "config": video_vae.CONFIG, "encoder": "pool_clip",
               "weight": video_vae.FOREGROUND_WEIGHT}
    decoder = reused_decoder(args.vae_from) if args.vae_from else cached(work, "vae", vae_key, make_vae)
    # a reused decoder's file has no encoder tensors (drop_encoder): this model encodes by pooling
    missing = [k for k in vae.load_state_dict(decoder["state"], strict=False).missing_keys
               if not k.startswith(("encoder.", "quant_conv."))]
    if missing:
        sys.exit(f"vae: decoder tensors missing: {missing[:5]}")
    vae.eval()
    clips = cached(work, "dataset", {"seed": seed, "clips": CLIPS, "encoder": "pool_clip", "geometry": data.CAPTIONED,
                                          **track_key()},
                   lambda: stage_dataset(seed, vae))

    torch.manual_seed(seed + 2)  # the unused encoder's initial weights (dropped at export)
    avae = audio_vae.build()
    audio_error = audio_vae.round_trip_error(avae, render_dataset_sound(seed, 0))
    print(f"audio vae    constructed; round trip of clip 0: mean abs error {audio_error:.6f}", flush=True)
    key = {"seed": seed, "clips": CLIPS, "audio": "fourier", "harmonics": audio_vae.HARMONICS,
           "tones": data.TONE_HZ, "geometry": data.CAPTIONED, **track_key()}
    sounds = cached(work, "audio_dataset", key, lambda: stage_audio_dataset(seed))
    for clip, sound in zip(clips, sounds):
        clip["audio_mean"] = sound

    v_mean, v_std = latent_stats([c["video_mean"] for c in clips], (0, 2, 3, 4), 1e-3)
    a_mean, a_std = latent_stats([c["audio_mean"] for c in clips], (0, 1, 3), AUDIO_STD_FLOOR)
    stats = {"video_mean": v_mean, "video_std": v_std, "audio_mean": a_mean, "audio_std": a_std}
    vm, vs = torch.tensor(v_mean).view(-1, 1, 1, 1), torch.tensor(v_std).view(-1, 1, 1, 1)
    am, as_ = torch.tensor(a_mean).view(1, -1, 1), torch.tensor(a_std).view(1, -1, 1)
    from diffusers.modular_pipelines.minimax_h3.before_denoise import patchify_video_latents
    rows = [{"caption": c["caption"],
             "video_rows": patchify_video_latents(((c["video_mean"] - vm) / vs)[None], dit.PATCH).contiguous(),
             "audio_rows": dit.audio_rows((c["audio_mean"] - am) / as_).contiguous()} for c in clips]
    layouts = dit.Layouts(*LATENT, AUDIO_LATENTS)
    embeds = cached(work, "text", TEXT_KEY, lambda: stage_text(args.h3, work))

    def make_dit():
        torch.manual_seed(seed + 5)
        model = dit.build()
        ema, losses = dit.train(model, rows, embeds, layouts, STEPS["dit"], seed + 6, log)
        return {"state": ema.state_dict(), "losses": losses}

    dit_key = dict(key, vae=STEPS["vae"], encoder="pool_clip", dit=STEPS["dit"], config=dit.CONFIG,
                   audio_std_floor=AUDIO_STD_FLOOR, shifts=(dit.VIDEO_SHIFT, dit.AUDIO_SHIFT),
                   pure_noise=dit.PURE_NOISE_SHARE, offset_noise=dit.OFFSET_NOISE, window=dit.WINDOW, batch=dit.BATCH)
    trained = cached(work, "dit", dit_key, make_dit)

    def make_dit_whole():
        torch.manual_seed(seed + 7)
        model = dit.build()
        model.load_state_dict(trained["state"])
        ema, losses = dit.train(model, rows, embeds, layouts, STEPS["dit_whole"], seed + 8, log, window=LATENT[0],
                                batch=dit.WHOLE_BATCH, lr=dit.WHOLE_LR, warmup=dit.WHOLE_WARMUP, stage="dit_whole")
        return {"state": ema.state_dict(), "losses": losses}

    # It starts from the first stage's weights, so it is made again whenever they are (dit_key).
    whole = cached(work, "dit_whole", dict(dit_key, whole=STEPS["dit_whole"], whole_batch=dit.WHOLE_BATCH,
                                           whole_lr=dit.WHOLE_LR, whole_warmup=dit.WHOLE_WARMUP),
                   make_dit_whole)
    transformer = dit.build()
    transformer.load_state_dict(whole["state"])
    losses = {"vae": decoder["losses"], "dit": trained["losses"], "dit_whole": whole["losses"]}
    export(args.out, work, seed, vae, avae, transformer, stats, losses, round(audio_error, 6), args.force,
           decoder.get("reused_from"))
    stage_causal(args.out.resolve(), args.out.resolve(), work, seed, embeds, log, True)
    return check(args.out)


if __name__ == "__main__":
    sys.exit(main())
