"""Every ```python block of the README runs, in order, in one namespace (``py`` blocks are fragments)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import aclpipe

ROOT = Path(__file__).resolve().parents[1]


def python_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_the_readme_snippets_run(capsys):
    blocks = python_blocks()
    assert len(blocks) >= 6
    namespace: dict[str, object] = {"__name__": "readme"}
    here = os.getcwd()
    os.chdir(ROOT)  # snippets name files under graphs/
    try:
        for number, block in enumerate(blocks, 1):
            try:
                exec(compile(block, f"README.md python block {number}", "exec"), namespace)
            except Exception as error:
                raise AssertionError(f"README python block {number} failed: {error!r}\n{block}") from error
    finally:
        os.chdir(here)
        for value in namespace.values():
            if isinstance(value, aclpipe.Device):
                value.close()
    printed = capsys.readouterr().out
    assert "plan 'mlp'" in printed and "'y': (4, 10)" in printed


def test_the_quick_start_is_two_commands_and_ci_runs_the_second():
    text = (ROOT / "README.md").read_text()
    quick = re.search(r"## Quick start.*?```sh\n(.*?)```", text, flags=re.S)
    assert quick is not None
    commands = [line for line in quick.group(1).splitlines() if line.strip()]
    assert len(commands) == 2
    assert commands[1] in (ROOT / ".ci" / "run").read_text()
