"""The reference side of the end-to-end race (scripts/bench-reference.sh e2e): prompt to an MP4 with
H.264 video and AAC audio through diffusers' MiniMax-H3 modular pipeline, the way diffusers'
documentation of MiniMax-H3 does it (ModularPipeline.from_pretrained(..., workflow="t2va"),
load_components, one call with a seeded generator, then diffusers.utils.export_utils.encode_video of
`videos[0]` with `audio[0]` at `sampling_rate`).

    python e2e_reference.py MODEL --prompt TEXT --frames N --width W --height H --steps S --seed S
                            --threads T --out FILE.mp4

MODEL is the folder make_e2e_model.py wrote. Nothing is warmed up: the race is one cold process per
run, timed from outside (the wall time of the process is the figure; the whole file only exists at
its end, so it is the reference's first frame too). The phases are printed for the record:
`phase import|load|generate|export S`. `steps` counts sigma grid points as diffusers' pipeline
does (and as the engine's `steps` does): S - 1 transformer evaluations.
"""

import time

T_START = time.perf_counter()

import argparse  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
from diffusers import ModularPipeline  # noqa: E402
from diffusers.utils.export_utils import encode_video  # noqa: E402

import common  # noqa: E402


def phase(name: str, since: float) -> float:
    now = time.perf_counter()
    print(f"phase {name} {now - since:.3f}", flush=True)
    return now


def load(model: Path):
    pipe = ModularPipeline.from_pretrained(str(model), workflow="t2va")
    # fp32 everywhere, as the engine computes on a CPU (the text encoder is stored in bf16).
    pipe.load_components(dtype=torch.float32)
    return pipe


def time_transformer(pipe) -> list:
    """Wall seconds of each transformer evaluation (forward hooks), so that the race can set the
    reference's denoising beside ours: on a CPU where both sides' GEMMs run at the same library's rate
    the steps bound the first-frame ratio (docs/performance.md)."""
    spans, begun = [], []
    pipe.transformer.register_forward_pre_hook(lambda *_: begun.append(time.perf_counter()))
    pipe.transformer.register_forward_hook(lambda *_: spans.append(time.perf_counter() - begun.pop()))
    return spans


def generate(pipe, a):
    return pipe(
        prompt=a.prompt,
        num_frames=a.frames,
        height=a.height,
        width=a.width,
        num_inference_steps=a.steps,
        generator=torch.Generator().manual_seed(a.seed),
    )


def export(state, out: Path) -> None:
    encode_video(
        state.get("videos")[0],
        fps=24,
        output_path=str(out),
        audio=state.get("audio")[0],
        audio_sample_rate=state.get("sampling_rate"),
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", type=Path)
    ap.add_argument("--prompt", required=True)
    ap.add_argument("--frames", type=int, required=True)
    ap.add_argument("--width", type=int, required=True)
    ap.add_argument("--height", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    common.set_threads(a.threads)
    t = phase("import", T_START)
    with torch.inference_mode():
        pipe = load(a.model)
        pipe.set_progress_bar_config(disable=True)
        t = phase("load", t)
        steps = time_transformer(pipe)
        state = generate(pipe, a)
        t = phase("generate", t)
        print(f"phase generate-steps {sum(steps):.3f} ({len(steps)} evaluations)", flush=True)
    export(state, a.out)
    phase("export", t)


if __name__ == "__main__":
    main()
