"""What ``import aclpipe`` costs next to ``import numpy``, in fresh processes.

Each round starts ``python -c "import numpy"`` and ``python -c "import aclpipe"`` one after the
other (alternating, so that a busy machine slows both alike) and times the whole process; the
ratio of the medians is the figure.  Both run from compiled bytecode, as an installed package
does: the children get a private ``PYTHONPYCACHEPREFIX`` and one warm-up run each, so a
``PYTHONDONTWRITEBYTECODE`` environment (which would make every run compile aclpipe's ~300
modules while numpy's ship compiled) does not count against aclpipe, and no ``__pycache__`` is
written into the source tree.

The goal (issue 27) is ``import aclpipe`` within 3x ``import numpy``.  What is left is mostly
numpy itself, anyio's asyncio and the operator catalog; ``python -X importtime -c "import
aclpipe"`` shows the rest.

Run: ``python benchmarks/bench_import.py [--rounds N]`` (default 11).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

GOAL = 3.0
QUICK_ARGS = ["--rounds", "5"]  # what `aclpipe bench --quick` passes


def _time_import(module: str, env: dict[str, str]) -> float:
    """Seconds for a fresh interpreter to import ``module`` and exit."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", f"import {module}"], env=env, check=True)
    return time.perf_counter() - started


def _child_env(pycache: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPYCACHEPREFIX=pycache)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def measure(rounds: int) -> tuple[float, float]:
    """Median seconds of ``import numpy`` and of ``import aclpipe`` over ``rounds`` alternating runs."""
    with tempfile.TemporaryDirectory(prefix="aclpipe-pycache-") as pycache:
        env = _child_env(pycache)
        _time_import("aclpipe", env)  # warm-up: compiles the bytecode once, fills the OS file cache
        _time_import("numpy", env)
        numpy_times, aclpipe_times = [], []
        for _ in range(rounds):
            numpy_times.append(_time_import("numpy", env))
            aclpipe_times.append(_time_import("aclpipe", env))
    return statistics.median(numpy_times), statistics.median(aclpipe_times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=11, help="alternating process pairs (default 11)")
    args = parser.parse_args()
    numpy_s, aclpipe_s = measure(args.rounds)
    ratio = aclpipe_s / numpy_s
    print(f"import numpy    {numpy_s * 1000:7.0f} ms  (median of {args.rounds} fresh processes)")
    print(f"import aclpipe  {aclpipe_s * 1000:7.0f} ms")
    print(f"ratio           {ratio:7.2f}x")
    verdict = "met" if ratio <= GOAL else "missed"
    print(f"goal: import aclpipe within {GOAL:g}x import numpy: {verdict} ({ratio:.2f}x)")


if __name__ == "__main__":
    main()
