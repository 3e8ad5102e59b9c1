"""OpRunner: numpy or device buffers in, phase one through the cache, every workspace strategy."""

from __future__ import annotations

import threading

import anyio
import numpy as np
import pytest
from anyio import wait_all_tasks_blocked

from aclpipe.eager import OpRunner
from aclpipe.eager.executor_cache import ExecutorCache
from aclpipe.errors import DeviceFault, InvalidArgumentError, UnsupportedOpError
from aclpipe.runtime.workspaces import WorkspacePool


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request):
    return request.param


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def test_numpy_in_numpy_out_with_broadcast_and_attrs(device):
    stream = device.create_stream()
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.array([1.0, 2.0, 3.0], np.float32)
    (z,) = OpRunner("Add", stream).input(x).input(y).output().attr(alpha=2.0).run()
    np.testing.assert_array_equal(z, x + 2 * y)
    assert z.dtype == np.float32 and z.shape == (2, 3)


def test_an_attribute_the_op_does_not_take_is_refused_not_ignored(device):
    stream = device.create_stream()
    x = np.ones((2, 3), np.float32)
    with pytest.raises(TypeError, match="Add: unknown attribute.s. alpah; Add takes alpha; did you mean alpha"):
        OpRunner("Add", stream).input(x).input(x).output().attr(alpah=2.0)
    with pytest.raises(TypeError, match="Relu takes no attributes"):
        OpRunner("Relu", stream).attr(dim=1)
    runner = OpRunner("Add", stream).input(x).input(x).output()
    with pytest.raises(TypeError):
        runner.attr(alpha=2.0, beta=1.0)  # refused whole: alpha was not set either
    (z,) = runner.run()
    np.testing.assert_array_equal(z, x + x)


def test_rank_0_inputs_give_rank_0_results(device):
    # np.ascontiguousarray made rank-0 inputs 1-D, so an Add of two scalars came back shaped (1,).
    stream = device.create_stream()
    (z,) = OpRunner("Add", stream).input(np.array(1, np.int32)).input(np.array(2, np.int32)).output().run()
    assert z.shape == () and z == 3


def test_run_again_reuses_the_executor(device):
    stream, cache = device.create_stream(), ExecutorCache(device)
    x = np.ones((4, 4), np.float32)
    runner = OpRunner("Mul", stream, cache=cache).input(x).input(x * 3).output()
    for _ in range(3):
        (z,) = runner.run()
        np.testing.assert_array_equal(z, x * 3)
    assert (cache.stats().misses, cache.stats().hits) == (1, 2)


def test_device_buffers_with_explicit_descriptors(device):
    stream = device.create_stream()
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    source = device.upload(x)
    target = device.alloc(6 * 4)
    # Read the (3, 2) buffer as its (2, 3) transpose through strides; write a caller-owned buffer.
    result = (OpRunner("Neg", stream).input(source, shape=(2, 3), dtype="float32", strides=(1, 2))
              .output(target, shape=(2, 3), dtype="float32").run())
    assert result == []
    np.testing.assert_array_equal(device.download(target, "float32", (2, 3)), -x.T)


def test_optional_tensors_are_none(device):
    stream = device.create_stream()
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    (y,) = (OpRunner("LayerNorm", stream).input(x).input(None).input(None).output()
            .attr(normalizedShape=[8], eps=1e-5).run())
    expected = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5)


def test_output_shape_and_dtype_can_be_given(device):
    stream = device.create_stream()
    x = np.array([1.5, -2.5], np.float32)
    (y,) = OpRunner("Abs", stream).input(x).output(shape=(2,), dtype="float32").run()
    np.testing.assert_array_equal(y, np.abs(x))


@pytest.mark.parametrize("strategy", ["per-call", "cached", "pool"])
def test_every_workspace_strategy_gives_the_same_result(device, strategy):
    stream = device.create_stream()
    x = np.random.default_rng(1).standard_normal((8, 64)).astype(np.float32)
    runner = OpRunner("Softmax", stream, workspace=strategy).input(x).output().attr(dim=-1)
    for _ in range(3):
        (y,) = runner.run()
        np.testing.assert_allclose(y, _softmax(x), rtol=1e-5)
    stats = runner.workspace.stats()
    assert stats.in_use == 0
    assert stats.allocations == (3 if strategy == "per-call" else 1)


def test_a_pool_instance_can_be_passed(device):
    pool = WorkspacePool(device, limit=1 << 16)
    stream = device.create_stream()
    x = np.ones((2, 16), np.float32)
    (y,) = OpRunner("Softmax", stream, workspace=pool).input(x).output().attr(dim=1).run()
    np.testing.assert_allclose(y, np.full((2, 16), 1 / 16), rtol=1e-6)
    assert pool.stats().acquires == 1
    pool.close()


def test_a_new_shape_gets_a_new_phase_one(device):
    stream, cache = device.create_stream(), ExecutorCache(device)
    for rows in (2, 5, 2):
        x = np.ones((rows, 3), np.float32)
        (y,) = OpRunner("Add", stream, cache=cache).input(x).input(x).output().run()
        np.testing.assert_array_equal(y, 2 * x)
    assert (cache.stats().misses, cache.stats().hits) == (2, 1)


def test_phase_one_error_names_the_op_and_summarizes_the_call(device):
    stream = device.create_stream()
    runner = (OpRunner("Add", stream).input(np.ones((2, 3), np.float32)).input(np.ones(4, np.float32))
              .output().attr(alpha=1.0))
    with pytest.raises(InvalidArgumentError) as caught:
        runner.run()
    message = str(caught.value)
    assert "aclnnAdd" in message and "broadcast" in message
    assert "Add(self: float32[2, 3], other: float32[4]; out: (inferred); alpha=1.0)" in message
    assert caught.value.code == 161002


def test_device_fault_is_raised_with_the_call_and_a_continuing_stream_runs_the_next(device):
    """06_stream_management.md: continue-on-failure, the default, runs the tasks after a failed one."""
    stream = device.create_stream()
    x = np.ones(4, np.float32)
    device.inject_fault("kernel", "Exp")
    with pytest.raises(DeviceFault) as caught:
        OpRunner("Exp", stream).input(x).output().run()
    assert "Exp(self: float32[4]" in str(caught.value)
    (y,) = OpRunner("Exp", stream).input(x).output().run()
    np.testing.assert_allclose(y, np.exp(x), rtol=1e-6)


def test_a_stream_stopped_on_failure_refuses_the_next_call_until_renewed(device):
    stream = device.create_stream(failure_mode="stop")
    x = np.ones(4, np.float32)
    used = device.mem_info().used
    device.inject_fault("kernel", "Exp")
    with pytest.raises(DeviceFault):
        OpRunner("Exp", stream).input(x).output().run()
    with pytest.raises(DeviceFault, match="stopped after a failure"):
        OpRunner("Exp", stream).input(x).output().run()
    stream.renew()
    (y,) = OpRunner("Exp", stream).input(x).output().run()
    np.testing.assert_allclose(y, np.exp(x), rtol=1e-6)
    assert device.mem_info().used == used


def test_unknown_op_and_bad_arguments_fail_before_the_device(device):
    stream = device.create_stream()
    with pytest.raises(UnsupportedOpError):
        OpRunner("NoSuchOp", stream)
    with pytest.raises(ValueError, match="needs shape= and dtype="):
        OpRunner("Abs", stream).input(device.alloc(16))
    with pytest.raises(ValueError, match="needs 64 bytes"):
        OpRunner("Abs", stream).input(device.alloc(16), shape=(16,), dtype="float32")
    with pytest.raises(TypeError, match="float64 is not an NPU dtype"):
        OpRunner("Abs", stream).input(np.ones(3))
    with pytest.raises(TypeError, match="takes 2 tensors"):
        x = np.ones(2, np.float32)
        OpRunner("Add", stream).input(x).input(x).input(x).output().run()
    with pytest.raises(TypeError, match="needs a Stream"):
        OpRunner("Abs", device)


def test_failed_runs_free_their_memory(device):
    stream = device.create_stream()
    OpRunner("Abs", stream).input(np.ones(4, np.float32)).output().run()  # warm the transfer paths
    used = device.mem_info().used
    with pytest.raises(InvalidArgumentError):
        OpRunner("Add", stream).input(np.ones((2, 3), np.float32)).input(np.ones(4, np.float32)).output().run()
    device.inject_fault("kernel", "Abs")
    with pytest.raises(DeviceFault):
        OpRunner("Abs", stream).input(np.ones(4, np.float32)).output().run()
    assert device.mem_info().used == used


@pytest.mark.anyio
@pytest.mark.parametrize("strategy", ["per-call", "cached", "pool"])
async def test_run_async(device, strategy):
    stream = device.create_stream()
    x = np.random.default_rng(2).standard_normal((8, 64)).astype(np.float32)
    (y,) = await OpRunner("Softmax", stream, workspace=strategy).input(x).output().attr(dim=-1).run_async()
    np.testing.assert_allclose(y, _softmax(x), rtol=1e-5)


@pytest.mark.anyio
async def test_run_async_raises_the_stream_error(device):
    stream = device.create_stream()
    device.inject_fault("kernel", "Relu")
    with pytest.raises(DeviceFault, match=r"Relu\(self: float32\[3\]"):
        await OpRunner("Relu", stream).input(np.ones(3, np.float32)).output().run_async()
    (y,) = await OpRunner("Relu", stream).input(-np.ones(3, np.float32)).output().run_async()
    np.testing.assert_array_equal(y, np.zeros(3, np.float32))


@pytest.mark.anyio
async def test_run_async_does_not_block_the_event_loop(device):
    stream = device.create_stream()
    gate = device.backend.latch(stream.handle)
    ticks = 0
    result = []

    async def run() -> None:
        result.extend(await OpRunner("Neg", stream).input(np.ones(2, np.float32)).output().run_async())

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        while ticks < 5:  # the loop keeps running other tasks while the op waits on the device
            await anyio.sleep(0.001)
            ticks += 1
        assert not result
        gate.set()
    np.testing.assert_array_equal(result[0], -np.ones(2, np.float32))


@pytest.mark.anyio
async def test_cancelled_run_async_frees_memory_only_after_the_device_passed(device):
    stream = device.create_stream()
    OpRunner("Abs", stream).input(np.ones(4, np.float32)).output().run()  # warm the transfer paths
    used = device.mem_info().used
    gate = device.backend.latch(stream.handle)
    finished = []

    async def run() -> None:
        await OpRunner("Neg", stream).input(np.ones(1024, np.float32)).output().run_async()
        finished.append(True)

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        await wait_all_tasks_blocked()  # the run is polling its completion event now
        group.cancel_scope.cancel()
        threading.Thread(target=gate.set).start()  # the shielded wait needs the device to move on
    assert not finished
    # The sanitizer would have raised had the memory been freed while the device could use it.
    assert device.mem_info().used == used


def test_view_ops_return_the_viewed_contents(device):
    stream = device.create_stream()
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    (t,) = OpRunner("Transpose", stream).input(x).output().attr(dim0=0, dim1=2).run()
    np.testing.assert_array_equal(t, x.transpose(2, 1, 0))
    (r,) = OpRunner("Reshape", stream).input(x).output().attr(shape=[4, -1]).run()
    np.testing.assert_array_equal(r, x.reshape(4, -1))


def test_list_outputs_and_inputs(device):
    stream = device.create_stream()
    x = np.arange(10, dtype=np.float32)
    parts = OpRunner("Split", stream).input(x).output().output().output().attr(splitSections=[2, 3, 5]).run()
    assert [p.tolist() for p in parts] == [[0, 1], [2, 3, 4], [5, 6, 7, 8, 9]]
    (joined,) = OpRunner("Cat", stream).input(parts[2]).input(parts[0]).input(parts[1]).output().attr(dim=0).run()
    np.testing.assert_array_equal(joined, np.concatenate([parts[2], parts[0], parts[1]]))


def test_sync_timeout_keeps_the_memory_until_a_later_run_completes(device):
    stream = device.create_stream()
    OpRunner("Abs", stream).input(np.ones(4, np.float32)).output().run()  # warm the transfer paths
    used = device.mem_info().used
    gate = device.backend.latch(stream.handle)
    runner = OpRunner("Neg", stream).input(np.ones(256, np.float32)).output()
    with pytest.raises(DeviceFault, match="did not finish"):
        runner.run(timeout=0.01)
    assert device.mem_info().used > used  # still held: the device has not passed the launch
    gate.set()
    (y,) = runner.run()  # completes, and with it the parked run
    np.testing.assert_array_equal(y, -np.ones(256, np.float32))
    assert device.mem_info().used == used


def test_a_zero_dimensional_input_stays_a_scalar(device):
    stream = device.create_stream()
    (y,) = OpRunner("Add", stream).input(np.float32(2.0)).input(np.array(3.0, np.float32)).output().run()
    assert y.shape == () and y == 5.0
