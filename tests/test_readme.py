"""Every code block of the README and of the docs (docs/*.md) runs as written, so no snippet can rot.

The fence's language says what a block is, and every block must say:

- ```` ```python ````: runs.  The blocks of one page run in order in one namespace, from the
  repository root (snippets name files under ``graphs/``), as a reader pasting them one after
  another into one interpreter would; each page starts from an empty namespace, so a page
  defines what it uses.  Devices a page left open are closed after it.
- ```` ```py ````: a fragment, deliberately not runnable (a line that shows the shape of code,
  with names it does not define); it must still parse (top-level ``await`` allowed).
- ```` ```sh ````: shell commands, not run here.  The quick start's two commands are checked
  against ``.ci/run`` below; the ``aclpipe`` commands have their own tests under tests/cli.
- ```` ```yaml ````: a graph file; it must parse as YAML.
- ```` ```text ````: a diagram, a usage synopsis or printed output; not run.

A fence with any other language, or none, fails :func:`test_every_block_says_what_it_is`,
so a new block has to choose.  Pages in :data:`SLOW_PAGES` start a local Ray cluster (seconds
on two cores) and run in a test marked ``slow``.
"""

from __future__ import annotations

import ast
import os
import re
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

import aclpipe

ROOT = Path(__file__).resolve().parents[1]
KINDS = {"python", "py", "sh", "yaml", "text"}
#: Pages whose snippets start a local Ray cluster with simulated NPUs.
SLOW_PAGES = {"docs/ray.md"}
FENCE = re.compile(r"^(?P<indent> *)```(?P<kind>[^\s`]*)[^\n]*$")


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository root
    line: int  # of the opening fence, 1-based
    kind: str
    code: str

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(page: str) -> list[Block]:
    """The fenced blocks of ``page``, in order; fences may be indented (inside a list item)."""
    found: list[Block] = []
    lines = (ROOT / page).read_text().splitlines()
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent, start = opening.group("indent"), index
        index += 1
        while index < len(lines) and lines[index].rstrip() != f"{indent}```":
            index += 1
        if index == len(lines):
            raise AssertionError(f"{page}:{start + 1}: a code block is never closed")
        code = textwrap.dedent("\n".join(lines[start + 1:index])) + "\n"
        found.append(Block(page, start + 1, opening.group("kind"), code))
        index += 1
    return found


def pages() -> list[str]:
    return ["README.md", *sorted(f"docs/{path.name}" for path in (ROOT / "docs").glob("*.md"))]


def run_page(page: str) -> None:
    namespace: dict[str, object] = {"__name__": "docs"}
    here = os.getcwd()
    os.chdir(ROOT)
    try:
        for block in blocks(page):
            if block.kind != "python":
                continue
            try:
                exec(compile(block.code, block.where, "exec"), namespace)
            except Exception as error:
                raise AssertionError(f"the python block at {block.where} failed: {error!r}\n{block.code}") from error
    finally:
        os.chdir(here)
        for value in namespace.values():
            if isinstance(value, aclpipe.Device):
                value.close()


def runnable(slow: bool) -> Iterator[str]:
    for page in pages():
        if (page in SLOW_PAGES) == slow and any(block.kind == "python" for block in blocks(page)):
            yield page


def test_every_block_says_what_it_is():
    for page in pages():
        for block in blocks(page):
            assert block.kind in KINDS, (f"{block.where}: a ```{block.kind} block; say what it is: "
                                         f"one of {sorted(KINDS)} (see this test's docstring)")


def test_fragments_parse_and_yaml_loads():
    for page in pages():
        for block in blocks(page):
            if block.kind == "py":
                compile(block.code, block.where, "exec", flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            elif block.kind == "yaml":
                assert isinstance(yaml.safe_load(block.code), dict), block.where


@pytest.mark.parametrize("page", list(runnable(slow=False)))
def test_the_snippets_run(page, capsys):
    run_page(page)
    printed = capsys.readouterr().out
    if page == "README.md":
        assert "plan 'mlp'" in printed and "'probs': (4, 10)" in printed and "(3, 10)" in printed


@pytest.mark.slow
@pytest.mark.parametrize("page", sorted(SLOW_PAGES))
def test_the_ray_snippets_run_on_simulated_npus(page):
    ray = pytest.importorskip("ray", reason="the Ray page needs the ray extra: pip install 'aclpipe[ray]'")
    try:
        run_page(page)
    finally:  # a snippet that failed half-way must not leave its cluster to the tests after it
        if ray.is_initialized():
            from ray import serve

            serve.shutdown()
            ray.shutdown()


def test_the_quick_start_is_two_commands_and_ci_runs_the_second():
    text = (ROOT / "README.md").read_text()
    quick = re.search(r"## Quick start.*?```sh\n(.*?)```", text, flags=re.S)
    assert quick is not None
    commands = [line for line in quick.group(1).splitlines() if line.strip()]
    assert len(commands) == 2
    assert commands[1] in (ROOT / ".ci" / "run").read_text()
