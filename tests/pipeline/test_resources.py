"""A pipeline's device-side bundle is freed once: at once when released, or, parked, only once
the device has passed everything enqueued."""

from __future__ import annotations

import anyio
import numpy as np
import pytest
from pipeline_graphs import live_device_state, mlp

from aclpipe import Pipeline

pytestmark = pytest.mark.anyio


async def test_release_frees_everything_once(device):
    before = live_device_state(device)
    pipe = Pipeline(mlp(), device, streams=2, depth=2)
    await pipe.run(x=np.ones((4, 32), np.float32))
    resources = pipe._res
    await pipe.aclose()
    assert resources.released and live_device_state(device) == before
    resources.release()  # idempotent
    resources.park()  # nothing left to park
    assert live_device_state(device) == before


async def test_a_dropped_pipeline_parks_its_resources_until_the_device_passed_them(device):
    import gc
    import time

    before = live_device_state(device)
    pipe = Pipeline(mlp(), device, streams=2, depth=1)
    await pipe.run(x=np.ones((4, 32), np.float32))  # prepared
    resources = pipe._res
    gate = device.backend.latch(resources.streams[-1].handle)  # the next run (replayed from D2H) stays on the device
    ticket = await pipe.start(*pipe.accept({"x": np.ones((4, 32), np.float32)}))
    del pipe, ticket
    gc.collect()  # the finalizer parks the bundle: nothing may be freed under the held run
    assert resources.parked and not resources.released
    gate.set()

    def released_in_time() -> bool:  # a watcher thread frees it once the device passed its work
        deadline = time.monotonic() + 30
        while not resources.released and time.monotonic() < deadline:
            time.sleep(0.01)
        return resources.released

    assert await anyio.to_thread.run_sync(released_in_time)
    with resources.lock:  # `released` is set as releasing starts; the lock is held until it is done
        assert resources.released and live_device_state(device) == before


def test_exiting_with_a_hung_kernel_and_its_pipeline_alive_leaks_quietly(tmp_path):
    """README's contract at interpreter exit: what a hung kernel may still touch is leaked, not
    freed under it (the sanitizer used to report one HazardError per buffer freed there), and
    the process exits with status 0 and nothing on stderr."""
    script = tmp_path / "exit_hung.py"
    script.write_text(
        "import threading, time\n"
        "import numpy as np\n"
        "import aclpipe\n"
        "from pipeline_graphs import mlp\n"
        "dev = aclpipe.open_device('sim', sanitizer=True)\n"
        "pipe = aclpipe.Pipeline(mlp(), dev)\n"
        "pipe.run_sync(x=np.ones((2, 32), np.float32))\n"
        "rule = dev.inject_fault('kernel', match='softmax', hang=True)\n"
        "worker = threading.Thread(target=pipe.run_sync, kwargs={'x': np.ones((2, 32), np.float32)}, daemon=True)\n"
        "worker.start()\n"
        "while not rule.fired:  # the kernel is hung now\n"
        "    time.sleep(0.01)\n"
        "print('done')\n")
    import os
    import pathlib
    import subprocess
    import sys

    here = pathlib.Path(__file__).parent
    path = os.pathsep.join([str(here), str(here.parents[1]), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "PYTHONPATH": path})
    assert (done.returncode, done.stdout, done.stderr) == (0, "done\n", "")
