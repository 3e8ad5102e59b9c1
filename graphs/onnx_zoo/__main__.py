"""``python -m onnx_zoo --out DIR [NAME ...]`` (from ``graphs/``): write zoo models as ``.onnx`` files."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import onnx

from .models import MODELS, torch_available


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m onnx_zoo", description=__doc__)
    parser.add_argument("--out", type=Path, required=True, help="folder to write <name>.onnx into")
    parser.add_argument("names", nargs="*", help=f"models to write (default: all but light_*): {', '.join(MODELS)}")
    args = parser.parse_args(argv)
    names = args.names or [name for name, model in MODELS.items()
                           if model.group == "zoo" or (model.group == "torch" and torch_available())]
    unknown = [name for name in names if name not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; known: {', '.join(MODELS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    for name in names:
        path = args.out / f"{name}.onnx"
        onnx.save(MODELS[name].model, str(path))
        print(f"wrote {path} ({path.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
