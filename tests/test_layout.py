"""The test tree stays collectable as one run: pytest imports test files by basename (rootdir
mode, no packages), so two files of one name in different folders break the whole run."""

from __future__ import annotations

import collections
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_no_two_test_files_share_a_name():
    seen = collections.defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        seen[path.name].append(str(path.relative_to(TESTS)))
    assert not {name: paths for name, paths in seen.items() if len(paths) > 1}
