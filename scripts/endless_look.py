#!/usr/bin/env python3
"""Reads an endless stream's raw RGB frames (256 x 160, 17 a chunk) from stdin and, for each window
of chunks asked, prints what tests/clip_check.h measures of a clip of the embedded default model
(train/tiny/data.py's palette): the share of frames whose foreground is mostly the prompted colour,
the share of pixels nearest the prompted background, and the median step of that colour's centroid
over 4 frames, in px a frame (steps over 40 px, a wrap or a jump, left out), as tests/core/engine/
default_causal_test.cpp does; and writes chosen frames as raw RGB files for a contact sheet.

    ... ! video/x-raw,format=RGB,width=256,height=160 ! fdsink fd=1 | \\
      python3 scripts/endless_look.py [--window FIRST:COUNT:COLOUR:BACKGROUND ...] [--frame N ... --out DIR]

Standard library and numpy only.
"""
import argparse
import os
import sys

import numpy as np

W, H, CHUNK = 256, 160, 17
SPAN = 4   # frames a latent decodes into (a chunk's 17 frames: 1 + 4 x 4)
PALETTE = {"red": (225, 35, 35), "green": (40, 190, 60), "blue": (45, 85, 235), "yellow": (240, 220, 40),
           "purple": (150, 55, 205), "orange": (250, 140, 25), "black": (8, 8, 8), "white": (245, 245, 245),
           "gray": (120, 120, 120)}
NAMES = list(PALETTE)
BACKGROUNDS = {"black", "white", "gray"}
COLOURS = np.array([PALETTE[n] for n in NAMES], np.int64)


def classify(frame):
    d = ((frame[:, :, None, :].astype(np.int64) - COLOURS[None, None]) ** 2).sum(-1)
    return d.argmin(-1)


def look(frames, colour, background):
    share, steps, bg = 0, [], 0.0
    last = []
    for f in frames:
        k = classify(f)
        bg += float((k == NAMES.index(background)).mean())
        fg = np.zeros(len(NAMES), np.int64)
        for i, n in enumerate(NAMES):
            if n not in BACKGROUNDS and n != background:
                fg[i] = int((k == i).sum())
        top = int(fg.argmax())
        dominant = NAMES[top] if fg[top] > 0 else ""
        if dominant == colour and fg.sum() >= 120:
            share += 1
        centre = None
        if dominant == colour:
            ys, xs = np.nonzero(k == top)
            centre = (xs.mean() + 0.5, ys.mean() + 0.5)
        # the step over SPAN frames: the VAE decodes a latent into 4 near-identical frames, so the
        # shape moves in jumps every 4th frame (a frame-to-frame median would be about 0)
        if centre is not None and len(last) >= SPAN and last[-SPAN] is not None:
            dx, dy = centre[0] - last[-SPAN][0], centre[1] - last[-SPAN][1]
            if abs(dx) <= 40 and abs(dy) <= 40:
                steps.append((dx / SPAN, dy / SPAN))
        last.append(centre)
    median = tuple(float(np.median([s[i] for s in steps])) if steps else 0.0 for i in (0, 1))
    return share / len(frames), bg / len(frames), median


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--window", action="append", default=[], help="FIRST:COUNT:COLOUR:BACKGROUND (chunks)")
    ap.add_argument("--frame", action="append", type=int, default=[], help="a frame to write to --out")
    ap.add_argument("--out", help="folder for the --frame files (N.rgb)")
    args = ap.parse_args()
    windows = []
    for w in args.window:
        first, count, colour, background = w.split(":")
        windows.append((int(first), int(count), colour, background))
    wanted = {}
    for first, count, _, _ in windows:
        for n in range(first * CHUNK, (first + count) * CHUNK):
            wanted[n] = None
    frames = set(args.frame)
    size = W * H * 3
    n = 0
    stdin = sys.stdin.buffer
    while True:
        data = stdin.read(size)
        if len(data) < size:
            break
        if n in wanted:
            wanted[n] = np.frombuffer(data, np.uint8).reshape(H, W, 3)
        if n in frames and args.out:
            with open(os.path.join(args.out, f"{n}.rgb"), "wb") as f:
                f.write(data)
        n += 1
    print(f"endless_look: {n} frames ({n / CHUNK:.0f} chunks)")
    for first, count, colour, background in windows:
        got = [wanted[i] for i in range(first * CHUNK, (first + count) * CHUNK) if wanted[i] is not None]
        if len(got) < count * CHUNK:
            print(f"chunks {first}-{first + count - 1}: not in the stream")
            continue
        share, bg, (sx, sy) = look(got, colour, background)
        print(f"chunks {first:4d}-{first + count - 1:<4d} {colour:6s} on {background:5s}: colour {share:.2f}  "
              f"background {bg:.2f}  step ({sx:+.2f}, {sy:+.2f}) px/frame")


if __name__ == "__main__":
    main()
