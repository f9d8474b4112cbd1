#!/usr/bin/env python3
"""Checks a model folder written by train/tiny against its manifest.json: every file listed is there
with the sha256 the recipe recorded, and no file is there that the manifest does not list.

    python3 train/tiny/manifest.py DIR      (exit 0: all match; 1: each problem printed, naming the file)

Standard library only, so that it runs without the recipe's virtual environment.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def problems(folder: Path) -> list[str]:
    path = folder / "manifest.json"
    if not path.is_file():
        return [f"{path}: missing (not a model folder made by train/tiny)"]
    try:
        files = json.loads(path.read_text())["files"]
    except (ValueError, KeyError) as e:
        return [f"{path}: not a train/tiny manifest ({e})"]
    found = {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and p != path}
    out = [f"{folder / name}: missing" for name in sorted(set(files) - found)]
    out += [f"{folder / name}: sha256 {sha256(folder / name)} is not the manifest's {files[name]}"
            for name in sorted(set(files) & found) if sha256(folder / name) != files[name]]
    out += [f"{folder / name}: not in the manifest" for name in sorted(found - set(files))]
    return out


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: manifest.py MODEL_DIR", file=sys.stderr)
        return 2
    folder = Path(sys.argv[1])
    bad = problems(folder)
    for line in bad:
        print(line, file=sys.stderr)
    listed = len(json.loads((folder / "manifest.json").read_text())["files"]) if (folder / "manifest.json").is_file() else 0
    print(f"{folder}: {listed} files in the manifest, {'all match' if not bad else f'{len(bad)} problems'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
