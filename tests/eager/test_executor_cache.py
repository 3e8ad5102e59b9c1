"""ExecutorCache: phase one once per complete key, repeatable executors re-pointed per call."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from aclpipe.eager.executor_cache import ExecutorCache, attrs_key, executor_key
from aclpipe.errors import InvalidArgumentError, error_from_code
from aclpipe.tensor import TensorDesc


def _add(device, cache, stream, x, y, alpha=1.0):
    """Run Add through ``cache`` and return the result (the helper a runner would be)."""
    a, b = device.upload(x), device.upload(y)
    out = device.alloc(x.nbytes)
    inputs = [TensorDesc.contiguous(x.shape, "float32", a.address),
              TensorDesc.contiguous(y.shape, "float32", b.address)]
    outputs = [TensorDesc.contiguous(x.shape, "float32", out.address)]
    call = cache.prepare("Add", inputs, outputs, {"alpha": alpha})
    cache.launch(call, inputs, outputs, 0, 0, stream)
    stream.sync()
    result = device.download(out, "float32", x.shape)
    for buffer in (a, b, out):
        buffer.close()
    return result, call


def test_second_call_with_same_signature_skips_phase_one(device):
    cache, stream = ExecutorCache(device), device.create_stream()
    x, y = np.arange(6, dtype=np.float32).reshape(2, 3), np.ones((2, 3), np.float32)
    first, call1 = _add(device, cache, stream, x, y)
    second, call2 = _add(device, cache, stream, x * 2, y)  # new buffers, new addresses
    np.testing.assert_array_equal(first, x + y)
    np.testing.assert_array_equal(second, x * 2 + y)
    assert (call1.hit, call2.hit) == (False, True)
    assert call2.executor is call1.executor and call2.repeatable
    stats = cache.stats()
    assert (stats.hits, stats.misses, stats.phase_one, stats.entries) == (1, 1, 1, 1)


@pytest.mark.parametrize("change", ["shape", "strides", "offset", "dtype", "format", "attr", "attr-type", "device"])
def test_every_part_of_the_signature_is_in_the_key(change):
    base = TensorDesc((2, 4), "float32")
    inputs, attrs, device = [base, base], {"alpha": 1.0}, "sim:0"
    key = executor_key("Add", inputs, [base], attrs, device)
    changed = {
        "shape": lambda: executor_key("Add", [TensorDesc((4, 2), "float32"), base], [base], attrs, device),
        "strides": lambda: executor_key("Add", [TensorDesc((2, 4), "float32", (1, 2)), base], [base], attrs, device),
        "offset": lambda: executor_key("Add", [TensorDesc((2, 4), "float32", (), 8), base], [base], attrs, device),
        "dtype": lambda: executor_key("Add", [TensorDesc((2, 4), "float16"), base], [base], attrs, device),
        "format": lambda: executor_key("Add", [TensorDesc((2, 4), "float32", format=0), base], [base], attrs,
                                       device),
        "attr": lambda: executor_key("Add", inputs, [base], {"alpha": 1.0000001}, device),
        "attr-type": lambda: executor_key("Add", inputs, [base], {"alpha": 1}, device),
        "device": lambda: executor_key("Add", inputs, [base], attrs, "sim:1"),
    }[change]()
    assert changed != key
    # The address is not part of the key: it is re-pointed per call.
    assert executor_key("Add", [base.at(4096), base.at(8192)], [base.at(64)], attrs, device) == key


def test_attrs_key_is_exact_and_hashable():
    assert attrs_key({"dims": [0, 1]}) == attrs_key({"dims": (0, 1)})
    assert attrs_key({"x": 1}) != attrs_key({"x": 1.0}) != attrs_key({"x": True})
    assert attrs_key({"x": float("nan")}) == attrs_key({"x": float("nan")})
    assert attrs_key({"x": 0.1}) != attrs_key({"x": 0.1 + 1e-17 * 2})
    assert attrs_key({"a": 1, "b": 2}) == attrs_key({"b": 2, "a": 1})
    hash(attrs_key({"w": np.arange(3), "nested": {"k": [1.5, None]}}))
    with pytest.raises(TypeError, match="cannot be part of an executor key"):
        attrs_key({"fn": object()})


def test_lru_evicts_and_destroys_after_the_stream_passed(device):
    cache, stream = ExecutorCache(device, max_entries=2), device.create_stream()
    calls = []
    for cols in (1, 2, 3):
        x = np.ones((2, cols), np.float32)
        result, call = _add(device, cache, stream, x, x)
        np.testing.assert_array_equal(result, 2 * x)
        calls.append(call)
    stats = cache.stats()
    assert (stats.evictions, stats.entries) == (1, 2)
    stream.sync()
    cache.close()
    assert calls[0].executor.handle.destroyed
    assert cache.stats().destroyed == 3


def test_entry_evicted_while_prepared_is_destroyed_only_after_its_launch(device):
    cache, stream = ExecutorCache(device, max_entries=1), device.create_stream()
    x = np.ones((2, 2), np.float32)
    a, out = device.upload(x), device.alloc(x.nbytes)
    inputs = [TensorDesc.contiguous((2, 2), "float32", a.address)] * 2
    outputs = [TensorDesc.contiguous((2, 2), "float32", out.address)]
    held = cache.prepare("Add", inputs, outputs, {})
    _add(device, cache, stream, np.ones((3, 3), np.float32), np.ones((3, 3), np.float32))  # evicts `held`
    assert cache.stats().evictions == 1
    assert not held.executor.handle.destroyed
    cache.launch(held, inputs, outputs, 0, 0, stream)
    stream.sync()
    np.testing.assert_array_equal(device.download(out, "float32", (2, 2)), 2 * x)
    cache.close()
    assert held.executor.handle.destroyed


def test_stale_executor_with_another_shape_is_refused(device):
    cache, stream = ExecutorCache(device), device.create_stream()
    a, out = device.alloc(64), device.alloc(64)
    small = [TensorDesc.contiguous((2, 2), "float32", a.address)] * 2
    small_out = [TensorDesc.contiguous((2, 2), "float32", out.address)]
    call = cache.prepare("Add", small, small_out, {})
    big = [TensorDesc.contiguous((4, 2), "float32", a.address)] * 2
    with pytest.raises(InvalidArgumentError, match="changed since phase one"):
        cache.launch(call, big, [TensorDesc.contiguous((4, 2), "float32", out.address)], 0, 0, stream)
    # The simulated executor refuses it as well, by its own check.
    with pytest.raises(InvalidArgumentError, match="changed since phase one"):
        call.executor.handle.check_signature(big, small_out)
    # The cache key differs, so a new call with the new shape gets its own phase one.
    fresh = cache.prepare("Add", big, [TensorDesc.contiguous((4, 2), "float32", out.address)], {})
    assert not fresh.hit and fresh.executor is not call.executor
    cache.abandon(fresh)


def test_prepared_call_launches_once(device):
    cache, stream = ExecutorCache(device), device.create_stream()
    x = np.ones(8, np.float32)
    a, out = device.upload(x), device.alloc(x.nbytes)
    inputs, outputs = [TensorDesc.contiguous((8,), "float32", a.address)] * 2, [
        TensorDesc.contiguous((8,), "float32", out.address)]
    call = cache.prepare("Add", inputs, outputs, {})
    cache.launch(call, inputs, outputs, 0, 0, stream)
    with pytest.raises(InvalidArgumentError, match="already launched"):
        cache.launch(call, inputs, outputs, 0, 0, stream)
    stream.sync()


def test_op_that_refuses_repeatable_runs_phase_one_per_call(device, monkeypatch):
    backend = device.backend
    original = backend.op_set_repeatable

    def refuse(executor):
        if executor.op == "Add":
            raise error_from_code(561102, "aclnnAdd: this op cannot be made repeatable")
        original(executor)

    monkeypatch.setattr(backend, "op_set_repeatable", refuse)
    cache, stream = ExecutorCache(device), device.create_stream()
    x = np.arange(4, dtype=np.float32)
    for scale in (1, 2, 3):
        result, call = _add(device, cache, stream, x * scale, x)
        np.testing.assert_array_equal(result, x * scale + x)
        assert not call.repeatable and not call.hit
    stats = cache.stats()
    assert stats.phase_one == 3 and stats.entries == 0 and stats.not_repeatable == 3
    inputs = [TensorDesc.contiguous((4,), "float32")] * 2
    assert cache.is_repeatable("Add", inputs, [TensorDesc.contiguous((4,), "float32")], {"alpha": 1.0}) is False


def test_phase_one_errors_propagate_and_cache_nothing(device):
    cache = ExecutorCache(device)
    bad = [TensorDesc.contiguous((2, 3), "float32", 0), TensorDesc.contiguous((4,), "float32", 0)]
    with pytest.raises(InvalidArgumentError, match="broadcast"):
        cache.prepare("Add", bad, [TensorDesc.contiguous((2, 3), "float32", 0)], {})
    assert cache.stats().entries == 0


def test_concurrent_threads_share_one_executor_safely(device):
    cache = ExecutorCache(device)
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        stream = device.create_stream()
        try:
            for step in range(20):
                x = np.full((4, 4), seed * 100 + step, np.float32)
                result, _ = _add(device, cache, stream, x, x)
                np.testing.assert_array_equal(result, 2 * x)
        except Exception as error:  # noqa: BLE001  (collected for the main thread)
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    stats = cache.stats()
    assert stats.entries == 1 and stats.hits + stats.misses == 80 and stats.misses <= 4


def test_for_device_shares_one_cache(device):
    assert ExecutorCache.for_device(device) is ExecutorCache.for_device(device)


def test_max_entries_must_be_positive(device):
    with pytest.raises(ValueError):
        ExecutorCache(device, max_entries=0)
