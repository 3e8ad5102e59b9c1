"""MkDocs hook: the API reference page lists exactly ``aclpipe.__all__``.

``reference.md`` holds the marker ``<!-- public api -->``; this hook replaces it with one
mkdocstrings block per public name, at the module that defines it, grouped by layer.  Built
from ``__all__`` at build time (not written out by hand), so a name added to or moved inside
the package shows up where it now lives, and one dropped from ``__all__`` leaves the page.
"""

from __future__ import annotations

import importlib
import types
from typing import Any

MARKER = "<!-- public api -->"

#: Section titles by the package layer a name is defined in, in the order the page shows them.
SECTIONS = {
    "pipeline": "Pipelines",
    "graph": "Graphs",
    "onnx": "ONNX import",
    "eager": "Single operators",
    "plan": "Plans",
    "trace": "Traces",
    "runtime": "Devices, streams and memory",
    "dtypes": "Tensors and dtypes",
    "tensor": "Tensors and dtypes",
    "errors": "Errors",
}


def defining_path(name: str, value: Any) -> str:
    """The dotted path mkdocstrings should document ``aclpipe.<name>`` at."""
    if isinstance(value, types.ModuleType):
        return value.__name__
    return f"{value.__module__}.{value.__qualname__}"


def reference_markdown() -> str:
    aclpipe = importlib.import_module("aclpipe")
    sections: dict[str, list[str]] = {title: [] for title in SECTIONS.values()}
    for name in sorted(aclpipe.__all__, key=str.lower):
        path = defining_path(name, getattr(aclpipe, name))
        layer = path.split(".")[1]
        if layer not in SECTIONS:
            raise ValueError(f"aclpipe.{name} is defined in {path}, a layer docs/hooks.py has no section for; "
                             f"add {layer!r} to SECTIONS")
        sections[SECTIONS[layer]].append(f"::: {path}\n    options:\n      show_root_toc_entry: true\n")
    parts = []
    for title, blocks in sections.items():
        if blocks:
            parts.append(f"## {title}\n\n" + "\n".join(blocks))
    return "\n".join(parts)


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, reference_markdown())
