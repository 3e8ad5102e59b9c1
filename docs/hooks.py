"""MkDocs hook: the API reference page lists exactly ``aclpipe.__all__``.

``reference.md`` holds the marker ``<!-- public api -->``; this hook replaces it with one
mkdocstrings block per public name, at the module that defines it, grouped by layer.  Built
from ``__all__`` at build time (not written out by hand), so a name added to or moved inside
the package shows up where it now lives, and one dropped from ``__all__`` leaves the page.
"""

from __future__ import annotations

import ast
import importlib
import types
from pathlib import Path
from typing import Any

MARKER = "<!-- public api -->"

#: Section titles by the package layer a name is defined in, in the order the page shows them.
SECTIONS = {
    "pipeline": "Pipelines",
    "decode": "Generating tokens",
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


def defining_path(package: types.ModuleType, name: str) -> str:
    """The dotted path mkdocstrings should document ``aclpipe.<name>`` at."""
    try:
        value = getattr(package, name)
    except ImportError:  # a lazy name whose optional dependency (onnx) is not installed here
        return defined_in_source(package, name)
    if isinstance(value, types.ModuleType):
        return value.__name__
    return f"{value.__module__}.{value.__qualname__}"


def defined_in_source(package: types.ModuleType, name: str) -> str:
    """The one module of the package that defines ``name`` at its top level, found without importing
    it (mkdocstrings reads the source too, so the optional dependency is not needed to document it)."""
    root = Path(package.__file__ or "").parent
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text())
        if any(isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == name for node in tree.body):
            parts = path.relative_to(root.parent).with_suffix("").parts
            found.append(".".join(parts).removesuffix(".__init__"))
    if len(found) != 1:
        raise LookupError(f"aclpipe.{name} could not be imported, and the source defines it in {found or 'no module'}")
    return f"{found[0]}.{name}"


def reference_markdown() -> str:
    aclpipe = importlib.import_module("aclpipe")
    sections: dict[str, list[str]] = {title: [] for title in SECTIONS.values()}
    for name in sorted(aclpipe.__all__, key=str.lower):
        path = defining_path(aclpipe, name)
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
