"""Reference vectors for putting FL2VA keyframes onto the canvas (core/image/, tests/core/image/keyframes_test.cpp).

    ~/.cache/gst-h3/reference-venv/bin/python bench/reference/keyframes/make_vectors.py [OUT]

OUT defaults to tests/data/keyframes. Writes:

- canvas.json: `cases`, canvases computed by diffusers' own `resolve_canvas_size` (MiniMax-H3's canvas rule) for
  aspect ratios and canvas settings (the release's 32 / 768 / 768 * 1344, the tiny model's 32 / 160 / 160 * 256 and
  a few more, with halves that round to even); `refused`, aspects diffusers refuses (ValueError, asserted here).
- pictures.safetensors: the seeded source pictures, uint8 [H, W, 3] (a gradient, a pattern, seeded noise and a
  saturated checkerboard patch, so that Lanczos overshoots and is clipped at both ends).
- resize.safetensors: per case of cases.json's `resize`, Pillow's `Image.resize((w, h), Image.Resampling.LANCZOS)`
  of one picture, uint8 [h, w, 3]: down- and upscales, one axis only, extreme ratios, identity, 1 x 1.
- block.safetensors: per case of cases.json's `block`, the keyframes diffusers' MiniMaxH3ResizeStep puts onto the
  canvas (its `keyframes` output, in packed order: `<case>.0`, `<case>.1`), uint8 [H, W, 3]. The block runs inside
  a real MiniMaxH3ModularPipeline (`MiniMaxH3ResizeStep().init_pipeline()`: its own VaeImageProcessor and its own
  `canvas_multiple`, 32), with `canvas_short_edge` / `canvas_max_pixels` set through the pipeline's config.
- cases.json: the versions, the pictures and both lists of cases with their geometry.

Pillow 13 changed the order of the two Lanczos passes (python-pillow/Pillow#9549): a resize that reduces the
height by more than twice as many pixels as the width runs the vertical pass first; before, the horizontal pass
always ran first. The two orders round differently, so every resize case records the order Pillow took (`passes`:
"hv", "vh", "either" where both give the same bytes, "one" where only one axis changes, "none"), found with Pillow
alone: a single-axis resize runs one pass, so the two compositions of two single-axis resizes are the two orders.
The script asserts that Pillow matches one of them and that the observed order follows the rule above.

Running it again gives the same bytes (asserted versions: Pillow 13.0.0, diffusers 0.42.1).
"""

import json
import sys
from pathlib import Path

import diffusers
import numpy as np
import PIL
import torch
from diffusers.modular_pipelines.minimax_h3.before_encoder import MiniMaxH3ResizeStep
from diffusers.modular_pipelines.minimax_h3.modular_pipeline import resolve_canvas_size
from PIL import Image
from safetensors.torch import save_file

SEED = 20260901
PILLOW_VERSION = "13.0.0"
DIFFUSERS_VERSION = "0.42.1"

RELEASE = dict(multiple=32, short_edge=768, max_pixels=768 * 1344)
TINY = dict(multiple=32, short_edge=160, max_pixels=160 * 256)  # the tiny model's canvas
MINI = dict(multiple=32, short_edge=64, max_pixels=64 * 112)  # smaller still, to keep the files small

# (aspect_width, aspect_height, settings)
CANVAS_CASES = [
    (16, 9, RELEASE), (9, 16, RELEASE), (4, 3, RELEASE), (3, 4, RELEASE), (1, 1, RELEASE),
    (4, 1, RELEASE), (1, 4, RELEASE), (1000, 333, RELEASE), (333, 1000, RELEASE), (1919, 1080, RELEASE),
    (1080, 1920, RELEASE), (21, 9, RELEASE), (1000, 250, RELEASE),
    (16, 9, TINY), (9, 16, TINY), (1, 1, TINY), (4, 1, TINY), (1, 4, TINY), (200, 150, TINY), (61, 47, TINY),
    (4, 3, MINI), (3, 4, MINI), (61, 47, MINI),
    # Halves round to even: 80 / 32 = 2.5 -> 2, 112 / 32 = 3.5 -> 4; a canvas is at least one multiple.
    (1, 1, dict(multiple=32, short_edge=80, max_pixels=10**7)),
    (1, 1, dict(multiple=32, short_edge=112, max_pixels=10**7)),
    (1, 1, dict(multiple=32, short_edge=10, max_pixels=10**7)),
    (16, 9, dict(multiple=16, short_edge=480, max_pixels=480 * 832)),
]
REFUSED = [(5, 1), (1, 5), (401, 100), (100, 401), (17, 4), (0, 9), (9, 0)]

# name -> (width, height)
PICTURES = {
    "land200x150": (200, 150),
    "port150x200": (150, 200),
    "odd61x47": (61, 47),
    "wide300x40": (300, 40),
    "tall60x180": (60, 180),
    "canvas96x64": (96, 64),
    "tie64x41": (64, 41),
    "tie64x43": (64, 43),
    "tiny5x3": (5, 3),
    "one1x1": (1, 1),
}

# (case, picture, width, height)
RESIZE_CASES = [
    ("down", "land200x150", 77, 58),
    ("down_half", "land200x150", 100, 75),
    ("down_height_most", "land200x150", 180, 40),  # Pillow 13: vertical pass first
    ("down_to_7x5", "land200x150", 7, 5),  # 29 x 30 source pixels per output pixel
    ("width_down_only", "land200x150", 123, 150),
    ("height_down_only", "land200x150", 200, 91),
    ("width_down_height_up", "land200x150", 90, 200),
    ("up", "odd61x47", 150, 113),
    ("width_up_only", "odd61x47", 160, 47),
    ("height_up_only", "odd61x47", 61, 130),
    ("identity", "odd61x47", 61, 47),
    ("width_up_height_down", "port150x200", 180, 90),  # Pillow 13: vertical pass first
    ("extreme_wide_to_tall", "wide300x40", 96, 320),
    ("extreme_tall_to_wide", "tall60x180", 200, 30),  # Pillow 13: vertical pass first
    ("tall_down", "tall60x180", 20, 60),  # Pillow 13: vertical pass first
    ("tiny_to_1x1", "tiny5x3", 1, 1),
    ("tiny_up", "tiny5x3", 17, 9),
    ("one_up", "one1x1", 7, 5),
]

# (case, image, last_image, requested (height, width) or None, canvas settings)
BLOCK_CASES = [
    ("landscape_auto", "land200x150", "port150x200", None, TINY),
    ("portrait_auto", "port150x200", "land200x150", None, MINI),
    ("explicit_anchor_vh", "land200x150", "tall60x180", (64, 192), MINI),
    ("explicit_follower_vh", "wide300x40", "tall60x180", (64, 32), MINI),
    ("last_only_auto", None, "odd61x47", None, MINI),
    ("first_only_explicit", "odd61x47", None, (96, 128), MINI),
    ("anchor_at_canvas", "canvas96x64", "odd61x47", (64, 96), MINI),
    ("follower_half_rounds_up", "odd61x47", "tie64x41", (32, 96), MINI),  # 41 * 1.5 = 61.5 -> 62
    ("follower_half_rounds_down", "odd61x47", "tie64x43", (32, 96), MINI),  # 43 * 1.5 = 64.5 -> 64
]


def make_picture(width: int, height: int, seed: int) -> np.ndarray:
    gen = torch.Generator().manual_seed(seed)
    y = torch.arange(height, dtype=torch.float64).view(-1, 1).expand(height, width)
    x = torch.arange(width, dtype=torch.float64).view(1, -1).expand(height, width)
    r = 255.0 * x / max(width - 1, 1)
    g = 255.0 * y / max(height - 1, 1)
    b = 127.5 + 100.0 * torch.sin(x * 0.37) * torch.cos(y * 0.23)
    rgb = torch.stack([r, g, b], dim=-1)
    rgb = rgb + 24.0 * torch.randn(height, width, 3, generator=gen, dtype=torch.float64)
    # A saturated checkerboard patch (0 / 255, 2 x 2 cells) in the upper left quarter.
    ph, pw = max(1, height // 4), max(1, width // 4)
    cells = ((torch.arange(ph).view(-1, 1) // 2 + torch.arange(pw).view(1, -1) // 2) % 2).to(torch.float64)
    rgb[:ph, :pw, :] = 255.0 * cells.unsqueeze(-1)
    return rgb.round().clamp(0, 255).to(torch.uint8).numpy()


def pillow_lanczos(picture: np.ndarray, width: int, height: int) -> np.ndarray:
    return np.asarray(Image.fromarray(picture).resize((width, height), Image.Resampling.LANCZOS))


def passes(picture: np.ndarray, width: int, height: int, want: np.ndarray) -> str:
    """Which pass order Pillow took, from single-axis resizes (each one pass) composed both ways."""
    h, w = picture.shape[:2]
    if width == w and height == h:
        return "none"
    if width == w or height == h:
        return "one"
    im = Image.fromarray(picture)
    lz = Image.Resampling.LANCZOS
    hv = np.array_equal(np.asarray(im.resize((width, h), lz).resize((width, height), lz)), want)
    vh = np.array_equal(np.asarray(im.resize((w, height), lz).resize((width, height), lz)), want)
    assert hv or vh, "Pillow's LANCZOS is neither order of its single-axis passes"
    order = "either" if hv and vh else "hv" if hv else "vh"
    rule = "vh" if height < h and (h - height) > 2 * (w - width) else "hv"
    assert order in ("either", rule), (w, h, width, height, order, rule)
    return order


def run_block(image, last_image, requested, settings):
    pipe = MiniMaxH3ResizeStep().init_pipeline()
    pipe.register_to_config(canvas_short_edge=settings["short_edge"], canvas_max_pixels=settings["max_pixels"])
    assert pipe.canvas_multiple == settings["multiple"]
    kwargs = {}
    if image is not None:
        kwargs["image"] = Image.fromarray(image)
    if last_image is not None:
        kwargs["last_image"] = Image.fromarray(last_image)
    if requested is not None:
        kwargs["height"], kwargs["width"] = requested
    out = pipe(**kwargs, output=["height", "width", "keyframes", "keyframe_anchors"])
    keyframes = [np.asarray(k.convert("RGB")) for k in out["keyframes"]]
    return out["height"], out["width"], keyframes, out["keyframe_anchors"]


def main(out_dir: Path) -> None:
    assert PIL.__version__ == PILLOW_VERSION, PIL.__version__
    assert diffusers.__version__ == DIFFUSERS_VERSION, diffusers.__version__
    out_dir.mkdir(parents=True, exist_ok=True)

    # Canvases.
    canvas_cases = []
    for aw, ah, s in CANVAS_CASES:
        height, width = resolve_canvas_size(aw, ah, s["multiple"], s["short_edge"], s["max_pixels"])
        canvas_cases.append(dict(aspect_width=aw, aspect_height=ah, multiple=s["multiple"],
                                 short_edge=s["short_edge"], max_pixels=s["max_pixels"], height=height,
                                 width=width))
    refused = []
    for aw, ah in REFUSED:
        try:
            resolve_canvas_size(aw, ah, RELEASE["multiple"], RELEASE["short_edge"], RELEASE["max_pixels"])
        except ValueError:
            refused.append(dict(aspect_width=aw, aspect_height=ah))
        else:
            raise AssertionError(f"diffusers accepts {aw}:{ah}")
    (out_dir / "canvas.json").write_text(json.dumps(dict(cases=canvas_cases, refused=refused), indent=2) + "\n")

    # Pictures.
    pictures = {name: make_picture(w, h, SEED + i) for i, (name, (w, h)) in enumerate(PICTURES.items())}
    save_file({k: torch.from_numpy(v.copy()) for k, v in pictures.items()}, str(out_dir / "pictures.safetensors"))

    # Pillow's resize.
    resize_cases, resized = [], {}
    for name, pic, width, height in RESIZE_CASES:
        want = pillow_lanczos(pictures[pic], width, height)
        assert want.shape == (height, width, 3) and want.dtype == np.uint8
        resized[name] = torch.from_numpy(want.copy())
        resize_cases.append(dict(name=name, picture=pic, width=width, height=height,
                                 passes=passes(pictures[pic], width, height, want)))
    save_file(resized, str(out_dir / "resize.safetensors"))

    # diffusers' resize step.
    block_cases, block_out = [], {}
    for name, image, last, requested, s in BLOCK_CASES:
        height, width, keyframes, anchors = run_block(
            pictures[image] if image else None, pictures[last] if last else None, requested, s)
        if requested is None:
            first = pictures[image if image else last]
            assert (height, width) == resolve_canvas_size(first.shape[1], first.shape[0], s["multiple"],
                                                           s["short_edge"], s["max_pixels"])
        else:
            assert (height, width) == requested
        entries = []
        for i, (anchor, keyframe) in enumerate(zip(anchors, keyframes)):
            pic = image if anchor == "first" else last
            src = pictures[pic]
            assert keyframe.shape == (height, width, 3), keyframe.shape
            entry = dict(tensor=f"{name}.{i}", picture=pic, anchor=anchor)
            if src.shape[:2] == (height, width):
                entry["mode"] = "as_is"
                assert np.array_equal(keyframe, src)
            elif i == 0:
                entry["mode"] = "stretch"
                entry["passes"] = passes(src, width, height, keyframe)
                assert np.array_equal(keyframe, pillow_lanczos(src, width, height))
            else:
                # The block's own arithmetic, recorded for the reader of a failure.
                scale = max(width / src.shape[1], height / src.shape[0])
                rw, rh = max(width, round(src.shape[1] * scale)), max(height, round(src.shape[0] * scale))
                entry.update(mode="cover", resized_width=rw, resized_height=rh,
                             left=max(0, (rw - width) // 2), top=max(0, (rh - height) // 2),
                             passes=passes(src, rw, rh, pillow_lanczos(src, rw, rh)))
            block_out[entry["tensor"]] = torch.from_numpy(keyframe.copy())
            entries.append(entry)
        block_cases.append(dict(name=name, image=image, last_image=last,
                                requested_height=requested[0] if requested else None,
                                requested_width=requested[1] if requested else None,
                                multiple=s["multiple"], short_edge=s["short_edge"], max_pixels=s["max_pixels"],
                                height=height, width=width, keyframes=entries))
    save_file(block_out, str(out_dir / "block.safetensors"))

    cases = dict(
        pillow=PIL.__version__, diffusers=diffusers.__version__, torch=torch.__version__.split("+")[0], seed=SEED,
        pictures=[dict(name=k, width=v.shape[1], height=v.shape[0]) for k, v in pictures.items()],
        resize=resize_cases, block=block_cases,
    )
    (out_dir / "cases.json").write_text(json.dumps(cases, indent=2) + "\n")
    total = sum(p.stat().st_size for p in out_dir.iterdir() if p.is_file())
    print(f"wrote {out_dir}: {len(canvas_cases)} canvases, {len(refused)} refused, {len(resize_cases)} resizes, "
          f"{len(block_cases)} block cases, {total} bytes")


if __name__ == "__main__":
    root = Path(__file__).resolve().parents[3]
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else root / "tests" / "data" / "keyframes")
