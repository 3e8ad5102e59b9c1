"""Lint and types are part of the suite: ``ruff check`` and ``mypy --strict aclpipe`` stay clean
(both come with the ``test`` extra; their settings are in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          check=False)


def test_ruff_finds_nothing():
    result = _run("ruff", "check", "--no-cache", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_finds_nothing():
    result = _run("mypy", "--strict", "--no-incremental", "aclpipe")
    assert result.returncode == 0, result.stdout + result.stderr
