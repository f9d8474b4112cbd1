"""Compares the reference's and the engine's outputs of one benchmark run.

    python compare.py REFERENCE.safetensors OURS.safetensors TOLERANCE

Prints one line per tensor (max absolute difference; for frames also the uint8 difference) and
exits 1 when a float tensor differs by more than TOLERANCE or a shape differs.
"""

import sys

import torch
from safetensors.torch import load_file


def main() -> int:
    ref, ours, tol = load_file(sys.argv[1]), load_file(sys.argv[2]), float(sys.argv[3])
    ok = True
    for name, r in ref.items():
        if name not in ours:
            print(f"compare {name}: missing from {sys.argv[2]}")
            ok = False
            continue
        o = ours[name]
        if r.shape != o.shape:
            print(f"compare {name}: shape {list(r.shape)} (reference) vs {list(o.shape)} (ours)")
            ok = False
            continue
        diff = (r.double() - o.double()).abs().max().item()
        line = f"compare {name} {list(r.shape)}: max |diff| {diff:.3g} (tolerance {tol:g})"
        if name.startswith("frames"):
            u8 = lambda x: (x.double() * 255).round().clamp(0, 255)  # noqa: E731
            du = (u8(r) - u8(o)).abs()
            line += f"; uint8 max diff {int(du.max())}, {100 * (du > 0).double().mean().item():.3f} % of values differ"
        print(line)
        ok = ok and diff <= tol
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
