"""The documentation: the MkDocs site builds with ``--strict``, every page is in its navigation,
the README and BENCHMARKS.md stay short, and every ``ARCHITECTURE.md N`` a module cites exists."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
import yaml

import aclpipe

ROOT = Path(__file__).resolve().parents[1]


def test_the_site_builds_strict(tmp_path):
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed: pip install -e '.[docs]' (the test extra has it too)")
    # --strict turns every warning into a failure: a broken link or anchor, a page missing from the
    # navigation, a docstring mkdocstrings cannot read, a snippet file that is not there.
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                           cwd=ROOT, capture_output=True, text=True, timeout=240,
                           env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert built.returncode == 0, f"mkdocs build --strict failed:\n{built.stdout}\n{built.stderr}"
    reference = (tmp_path / "site" / "reference" / "index.html").read_text()
    for name in aclpipe.__all__:  # the API reference documents every public name
        assert f'id="{_anchor(name)}"' in reference, f"aclpipe.{name} is missing from the API reference"


def _anchor(name: str) -> str:
    """The HTML id mkdocstrings gives ``aclpipe.<name>``: the path of the module that defines it."""
    value = getattr(aclpipe, name)
    if isinstance(value, types.ModuleType):
        return value.__name__
    return f"{value.__module__}.{value.__qualname__}"


def test_every_page_is_in_the_navigation():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    listed: set[str] = set()

    def walk(entries: object) -> None:
        if isinstance(entries, list):
            for entry in entries:
                walk(entry)
        elif isinstance(entries, dict):
            for value in entries.values():
                walk(value)
        elif isinstance(entries, str):
            listed.add(entries)

    walk(config["nav"])
    pages = {path.name for path in (ROOT / "docs").glob("*.md")}
    assert pages == listed, (f"pages not in the nav: {sorted(pages - listed)}; "
                             f"nav entries without a page: {sorted(listed - pages)}")


def test_the_readme_and_benchmarks_stay_short():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300, "README.md: at most 300 lines; move detail to docs/"
    benchmarks = (ROOT / "BENCHMARKS.md").read_text()
    assert len(benchmarks.splitlines()) <= 700, "BENCHMARKS.md: at most 700 lines; history goes to CHANGELOG.md"
    assert "round" not in " ".join(re.findall(r"^#+ .*$", benchmarks, flags=re.M)).lower(), \
        "BENCHMARKS.md keeps one current section per benchmark; rounds belong in CHANGELOG.md"
    assert "python benchmarks/bench_pipeline.py overlap" in benchmarks


def _sections() -> set[str]:
    text = (ROOT / "ARCHITECTURE.md").read_text()
    return {match.group(1) for match in re.finditer(r"^#{2,4} (\d+(?:\.\d+)*)\.? ", text, flags=re.M)}


def test_every_architecture_citation_names_a_section():
    sections = _sections()
    assert {"1", "2", "3", "3.1", "3.2", "5", "6", "8"} <= sections
    cited = re.compile(r"ARCHITECTURE\.md((?:,? (?:and )?\d+(?:\.\d+)*)+)")
    missing = []
    for path in sorted([*(ROOT / "aclpipe").rglob("*.py"), *(ROOT / "tests").rglob("*.py")]):
        for match in cited.finditer(path.read_text()):
            for number in re.findall(r"\d+(?:\.\d+)*", match.group(1)):
                if number not in sections:
                    missing.append(f"{path.relative_to(ROOT)} cites ARCHITECTURE.md {number}")
    assert not missing, "\n".join(missing)
