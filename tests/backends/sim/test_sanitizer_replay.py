"""A sanitized replay checks the model's own ordering once, then only what meets the world
outside it (backends/sim/replay_summary.py): it must catch everything the task-by-task check
catches, at the same call."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

import aclpipe
from aclpipe import BackendError, HazardError
from aclpipe.backends.protocol import MemcpyKind
from aclpipe.backends.sim.capture import Captures
from aclpipe.tensor import TensorDesc

FLOATS = 32  # 128 bytes per buffer: kernels on all of it, its first or its last quarter


@pytest.fixture
def device():
    dev = aclpipe.open_device("sim", sanitizer=True)
    yield dev
    dev.close()


def _negate(device: Any, stream: Any, buffer: Any, floats: int = FLOATS, offset: int = 0, node: str = "neg") -> Any:
    desc = TensorDesc.contiguous((floats,), "float32", buffer.address + offset * 4)
    executor = device.backend.op_prepare("Neg", [desc], [desc], {})
    device.backend.op_set_repeatable(executor)
    device.backend.op_launch(executor, 0, 0, stream.handle, {"node": node})
    return executor


def _two_stream_model(device: Any, buffer: Any) -> tuple[Any, Any]:
    """origin forks side; side negates ``buffer`` and rejoins; origin negates it last."""
    origin, side = device.create_stream(), device.create_stream()
    fork, join = device.create_event(), device.create_event()
    backend = device.backend
    backend.capture_begin(origin.handle)
    backend.event_record(fork.handle, origin.handle)
    backend.stream_wait_event(side.handle, fork.handle)
    _negate(device, side, buffer, node="side")
    backend.event_record(join.handle, side.handle)
    backend.stream_wait_event(origin.handle, join.handle)
    _negate(device, origin, buffer, node="origin")
    return backend.capture_end(origin.handle), origin


def _replays(device: Any, model: Any, stream: Any, count: int) -> None:
    for run in range(count):  # the first checks task by task, the next ones from the summary
        device.backend.model_execute(model, stream.handle, {"run": run})
        stream.sync()


def test_a_race_between_a_replay_and_another_stream_is_caught_on_every_replay(device):
    buffer = device.upload(np.ones(FLOATS, np.float32))
    model, origin = _two_stream_model(device, buffer)
    other = device.create_stream()
    _replays(device, model, origin, 3)
    device.backend.model_execute(model, origin.handle, {"run": 3})
    with pytest.raises(HazardError, match="run=3"):
        other.memset(buffer, 0)  # not ordered after the replay: no event, no sync
    origin.sync()
    other.memset(buffer, 0)  # not ordered before the next replay either
    with pytest.raises(HazardError, match="memset"):
        device.backend.model_execute(model, origin.handle, {"run": 4})
    other.wait(other.record())
    origin.wait(other.record())  # now it is
    device.backend.model_execute(model, origin.handle, {"run": 5})
    origin.sync()
    np.testing.assert_array_equal(device.download(buffer, "float32", (FLOATS,)), np.zeros(FLOATS))


def test_replays_on_two_streams_without_an_event_race_inside_the_model(device):
    """The side stream of the second replay meets the origin's last write of the first: a race
    the model's own streams make, caught although nothing else touched the buffer."""
    buffer = device.upload(np.ones(FLOATS, np.float32))
    model, origin = _two_stream_model(device, buffer)
    elsewhere = device.create_stream()
    _replays(device, model, origin, 3)
    device.backend.model_execute(model, origin.handle, {"run": 3})
    with pytest.raises(HazardError, match="side"):
        device.backend.model_execute(model, elsewhere.handle, {"run": 4})
    elsewhere.wait(origin.record())
    device.backend.model_execute(model, elsewhere.handle, {"run": 5})
    elsewhere.sync()


def test_a_race_inside_the_model_is_caught_at_every_replay_until_fixed(device):
    origin, side = device.create_stream(), device.create_stream()
    buffer = device.upload(np.ones(FLOATS, np.float32))
    fork, join = device.create_event(), device.create_event()
    backend = device.backend
    backend.capture_begin(origin.handle)
    backend.event_record(fork.handle, origin.handle)
    backend.stream_wait_event(side.handle, fork.handle)
    _negate(device, origin, buffer)
    _negate(device, side, buffer)  # same bytes, unordered with the origin's
    backend.event_record(join.handle, side.handle)
    backend.stream_wait_event(origin.handle, join.handle)
    model = backend.capture_end(origin.handle)
    for run in range(3):  # a failed check proves nothing: the next replay checks every task again
        with pytest.raises(HazardError):
            backend.model_execute(model, origin.handle, {"run": run})
    device.sync()


def _captured_negation(device: Any) -> tuple[Any, Any, Any, Any]:
    origin = device.create_stream()
    buffer = device.upload(np.ones(FLOATS, np.float32))
    device.backend.capture_begin(origin.handle)
    executor = _negate(device, origin, buffer)
    model = device.backend.capture_end(origin.handle)
    _replays(device, model, origin, 3)
    return model, origin, buffer, executor


def test_freeing_or_destroying_what_a_replay_uses_before_it_is_known_done_is_caught(device):
    model, origin, buffer, executor = _captured_negation(device)
    device.backend.model_execute(model, origin.handle, {"run": 3})
    with pytest.raises(HazardError, match="run=3"):
        device.backend.op_destroy(executor)
    with pytest.raises(HazardError, match="run=3"):
        buffer.free()
    origin.sync()


def test_a_replay_touching_freed_memory_traps(device):
    model, origin, buffer, _ = _captured_negation(device)
    buffer.free()  # after the replays are known done: allowed
    device.backend.model_execute(model, origin.handle, {"run": 3})
    with pytest.raises(BackendError) as caught:
        origin.sync()
    assert caught.value.code == 507042  # the kernel's read trap (use after free)


def test_a_task_group_update_is_checked_task_by_task_again(device):
    origin, updater, other = device.create_stream(), device.create_stream(), device.create_stream()
    first, second = (device.upload(np.ones(FLOATS, np.float32)) for _ in range(2))
    backend = device.backend
    backend.capture_begin(origin.handle)
    backend.capture_task_group_begin(origin.handle)
    _negate(device, origin, first)
    group = backend.capture_task_group_end(origin.handle)
    model = backend.capture_end(origin.handle)
    _replays(device, model, origin, 3)
    backend.capture_task_update_begin(updater.handle, group)
    _negate(device, updater, second)
    backend.capture_task_update_end(updater.handle)
    updater.sync()
    other.memset(second, 0)
    with pytest.raises(HazardError, match="memset"):  # the model now touches the second buffer
        backend.model_execute(model, origin.handle, {"run": 3})
    device.sync()
    _replays(device, model, origin, 3)
    other.memset(first, 0)  # the first buffer is no longer the model's
    device.sync()


# -- the summary against the task-by-task check, on random programs ----------------------------------
def _scenario(seed: int, task_by_task: bool, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Run one random program (a captured model on one or two streams over three buffers, its
    replays on two streams, another stream's copies and memsets, mostly ordered by events,
    syncs); each step's outcome, stopping at the first race."""
    with monkeypatch.context() as patch:
        if task_by_task:
            patch.setattr(Captures, "_sanitize", lambda self, model, sanitizer, replaying, start, run:
                          Captures._check_each(model, sanitizer, start, run))
        return _run_scenario(random.Random(seed))


def _run_scenario(rng: random.Random) -> list[str]:
    device = aclpipe.open_device("sim", sanitizer=True)
    try:
        buffers = [device.upload(np.full(FLOATS, k + 1, np.float32)) for k in range(3)]
        scratch = device.alloc(FLOATS * 4)
        private = [device.alloc(FLOATS * 4) for _ in range(4)]
        origin, side, replayers, other = (device.create_stream(), device.create_stream(),
                                          [device.create_stream(), device.create_stream()], device.create_stream())
        backend = device.backend
        fork, join = device.create_event(), device.create_event()
        backend.capture_begin(origin.handle)
        two = rng.random() < 0.6
        if two:
            backend.event_record(fork.handle, origin.handle)
            backend.stream_wait_event(side.handle, fork.handle)
        for k in range(rng.randint(1, 4)):
            stream = side if two and rng.random() < 0.5 else origin
            floats, offset = rng.choice([(FLOATS, 0)] * 3 + [(8, 0), (8, FLOATS - 8)])
            if rng.random() < 0.3:  # the model only reads the buffer: a copy into its own
                floats, offset = rng.choice([(FLOATS, 0), (16, 0), (16, 16)])  # 64-byte aligned (D2D)
                backend.memcpy_async(private[k].address, rng.choice(buffers).address + offset * 4, floats * 4,
                                     MemcpyKind.DEVICE_TO_DEVICE, stream.handle)
            else:
                _negate(device, stream, rng.choice(buffers), floats, offset, node=f"n{k}")
        if two:
            backend.event_record(join.handle, side.handle)
            backend.stream_wait_event(origin.handle, join.handle)
        model = backend.capture_end(origin.handle)
        outcomes = []
        for step in range(16):
            action = rng.choice(["replay", "replay", "replay", "write", "read", "sync"])
            # Mostly ordered after everything else (a race now and then, not at once).
            ordered = rng.random() < 0.8
            try:
                if action == "replay":
                    replayer = rng.choice(replayers)
                    if ordered:
                        for waited in (*replayers, other):
                            replayer.wait(waited.record())
                    backend.model_execute(model, replayer.handle, {"run": step})
                elif action in ("write", "read"):
                    if ordered:
                        for waited in replayers:
                            other.wait(waited.record())
                    if action == "write":
                        other.memset(rng.choice(buffers), 0)
                    else:
                        other.memcpy(scratch, rng.choice(buffers))
                else:
                    rng.choice([*replayers, other]).sync()
            except HazardError:
                outcomes.append(f"{step} {action}: race")
                break
            outcomes.append(f"{step} {action}")
        device.sync()
        return outcomes
    finally:
        device.close()


@pytest.mark.parametrize("seed", range(60))
def test_the_summary_catches_what_the_task_by_task_check_catches(seed, monkeypatch):
    assert _scenario(seed, False, monkeypatch) == _scenario(seed, True, monkeypatch)
