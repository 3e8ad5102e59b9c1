"""Workspace strategies: per-call, cached (never shared by overlapping launches), bounded pool."""

from __future__ import annotations

import threading

import anyio
import numpy as np
import pytest

from aclpipe.eager.executor_cache import ExecutorCache
from aclpipe.runtime.workspaces import (
    NO_WORKSPACE,
    CachedWorkspace,
    PerCallWorkspace,
    WorkspacePool,
    make_workspace_strategy,
    workspace_strategy,
)
from aclpipe.tensor import TensorDesc


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request):
    return request.param


def _softmax(device, cache, strategy, stream, x):
    """Run Softmax (which needs a workspace) with ``strategy``; returns the output buffer."""
    a, out = device.upload(x), device.alloc(x.nbytes)
    inputs = [TensorDesc.contiguous(x.shape, "float32", a.address)]
    outputs = [TensorDesc.contiguous(x.shape, "float32", out.address)]
    call = cache.prepare("Softmax", inputs, outputs, {"dim": -1})
    assert call.workspace_size > 0
    workspace = strategy.acquire(call.workspace_size, stream, call.key)
    cache.launch(call, inputs, outputs, workspace.address, workspace.nbytes, stream)
    strategy.release_after(workspace, stream)
    return a, out


def _reference_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("name", ["per-call", "cached", "pool"])
def test_every_strategy_gives_correct_results_across_streams(device, name):
    strategy, cache = make_workspace_strategy(device, name), ExecutorCache(device)
    streams = [device.create_stream() for _ in range(3)]
    rng = np.random.default_rng(0)
    pending = []
    for step in range(12):
        x = rng.standard_normal((8, 64)).astype(np.float32)
        pending.append((x, *_softmax(device, cache, strategy, streams[step % 3], x)))
    device.sync()
    for x, a, out in pending:
        np.testing.assert_allclose(device.download(out, "float32", x.shape), _reference_softmax(x), rtol=1e-5)
        a.close()
        out.close()
    strategy.close()
    assert strategy.stats().reserved == 0


def test_zero_bytes_need_no_workspace(device):
    stream = device.create_stream()
    for name in ("per-call", "cached", "pool"):
        strategy = make_workspace_strategy(device, name)
        workspace = strategy.acquire(0, stream)
        assert workspace is NO_WORKSPACE and workspace.address == 0
        strategy.release_after(workspace, stream)


def test_per_call_allocates_each_time_and_frees_after_sync(device):
    strategy, stream = PerCallWorkspace(device), device.create_stream()
    used = device.mem_info().used
    workspace = strategy.acquire(1000, stream)
    assert strategy.stats().in_use == 1000 and device.mem_info().used > used
    strategy.release_after(workspace, stream)
    stats = strategy.stats()
    assert (stats.in_use, stats.peak, stats.reserved, stats.allocations) == (0, 1000, 0, 1)
    assert device.mem_info().used == used


def test_releasing_twice_is_refused(device):
    stream = device.create_stream()
    for strategy in (PerCallWorkspace(device), CachedWorkspace(device), WorkspacePool(device, 4096)):
        workspace = strategy.acquire(100, stream)
        strategy.release_after(workspace, stream)
        with pytest.raises(ValueError, match="already released"):
            strategy.release_after(workspace, stream)
        strategy.close()


def test_cached_reuses_on_the_same_stream_without_waiting(device):
    strategy, stream = CachedWorkspace(device), device.create_stream()
    gate = device.backend.latch(stream.handle)  # nothing on the stream completes until released
    first = strategy.acquire(512, stream, key="k")
    strategy.release_after(first, stream)
    second = strategy.acquire(512, stream, key="k")  # in flight, but stream order protects it
    assert second.address == first.address
    strategy.release_after(second, stream)
    gate.set()
    strategy.close()
    assert strategy.stats().allocations == 1 and strategy.stats().waits == 0


def test_cached_never_hands_an_in_flight_workspace_to_another_stream(device):
    strategy = CachedWorkspace(device, max_per_key=2)
    busy, other, third_stream = device.create_stream(), device.create_stream(), device.create_stream()
    gate = device.backend.latch(busy.handle)  # the launch on `busy` stays in flight
    first = strategy.acquire(512, busy, key="k")
    strategy.release_after(first, busy)
    second = strategy.acquire(512, other, key="k")
    assert second.address != first.address  # allocated another one instead
    strategy.release_after(second, other)
    other.sync()
    third = strategy.acquire(512, third_stream, key="k")
    assert third.address == second.address  # done on `other`, so safe to reuse anywhere
    assert strategy.try_acquire(512, device.create_stream(), key="k") is None  # `first` is in flight
    strategy.release_after(third, third_stream)
    gate.set()
    busy.sync()
    reused = strategy.acquire(512, device.create_stream(), key="k")
    assert reused.address in (first.address, second.address)
    strategy.release_after(reused, other)
    strategy.close()
    assert strategy.stats().allocations == 2


def test_cached_acquire_waits_for_the_launch_when_at_its_limit(device):
    strategy = CachedWorkspace(device, max_per_key=1)
    busy, other = device.create_stream(), device.create_stream()
    gate = device.backend.latch(busy.handle)
    first = strategy.acquire(512, busy, key="k")
    strategy.release_after(first, busy)
    threading.Thread(target=_release_when_waiting, args=(strategy, gate)).start()
    second = strategy.acquire(512, other, key="k")
    assert second.address == first.address and strategy.stats().waits == 1
    strategy.release_after(second, other)
    strategy.close()


def _release_when_waiting(strategy, gate) -> None:
    """Open ``gate`` once an acquire has started waiting (no sleeps, no timing)."""
    while strategy.stats().waits == 0:
        threading.Event().wait(0.001)
    gate.set()


def test_pool_block_returns_when_the_stream_passed_it(device):
    pool = WorkspacePool(device, limit=4096, granularity=4096)
    busy, other = device.create_stream(), device.create_stream()
    gate = device.backend.latch(busy.handle)
    first = pool.acquire(100, busy)
    pool.release_after(first, busy)
    assert pool.stats().in_use == 4096
    assert pool.try_acquire(100, other) is None  # the only block is still in flight on `busy`
    same = pool.try_acquire(100, busy)  # stream order makes it safe on the same stream
    assert same is not None and same.address == first.address
    pool.release_after(same, busy)
    threading.Thread(target=_release_when_waiting, args=(pool, gate)).start()
    block = pool.acquire(100, other)  # blocks until the host function gives the block back
    assert block.address == first.address
    stats = pool.stats()
    assert (stats.waits, stats.allocations, stats.reserved, stats.peak) == (1, 1, 4096, 4096)
    pool.release_after(block, other)
    pool.close()
    assert pool.stats().reserved == 0


def test_pool_times_out_with_a_clear_message(device):
    pool = WorkspacePool(device, limit=1024, granularity=1024)
    stream = device.create_stream()
    held = pool.acquire(992, stream)  # 992 + CANN's 32 bytes of padding fill the 1024
    with pytest.raises(TimeoutError, match="1024 of 1024 bytes in use"):
        pool.acquire(992, device.create_stream(), timeout=0.01)
    pool.release_after(held, stream)
    pool.close()


def test_pool_refuses_a_request_larger_than_its_limit(device):
    pool = WorkspacePool(device, limit=1024)
    with pytest.raises(ValueError, match="can never fit"):
        pool.acquire(2048, device.create_stream())


def test_pool_frees_idle_blocks_to_fit_a_bigger_request(device):
    pool, stream = WorkspacePool(device, limit=4096, granularity=1024), device.create_stream()
    small = pool.acquire(992, stream)
    pool.release_after(small, stream)
    stream.sync()
    big = pool.acquire(4064, device.create_stream())  # 4064 + 32 bytes of padding: the whole limit
    assert pool.stats().reserved == 4096
    pool.release_after(big, stream)
    pool.close()


def test_pool_stays_within_its_limit_under_concurrent_use(device):
    pool, cache = WorkspacePool(device, limit=3 * 4096, granularity=4096), ExecutorCache(device)
    errors: list[BaseException] = []
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal((8, 64)).astype(np.float32) for _ in range(4)]

    def worker(x) -> None:
        stream = device.create_stream()
        try:
            for _ in range(10):
                a, out = _softmax(device, cache, pool, stream, x)
                stream.sync()
                np.testing.assert_allclose(device.download(out, "float32", x.shape), _reference_softmax(x),
                                           rtol=1e-5)
                a.close()
                out.close()
        except Exception as error:  # noqa: BLE001  (collected for the main thread)
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(x,)) for x in inputs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    stats = pool.stats()
    assert stats.peak <= pool.limit and stats.reserved <= pool.limit and stats.in_use == 0
    pool.close()


@pytest.mark.anyio
async def test_pool_acquire_async_awaits_a_returning_block(device):
    pool = WorkspacePool(device, limit=1024, granularity=1024)
    busy, other = device.create_stream(), device.create_stream()
    gate = device.backend.latch(busy.handle)
    first = pool.acquire(512, busy)
    pool.release_after(first, busy)
    threading.Thread(target=_release_when_waiting, args=(pool, gate)).start()
    with anyio.fail_after(10):
        block = await pool.acquire_async(512, other)
    assert block.address == first.address and pool.stats().waits == 1
    pool.release_after(block, other)
    pool.close()


def test_unknown_strategy_is_a_value_error(device):
    with pytest.raises(ValueError, match="per-call, cached, pool"):
        make_workspace_strategy(device, "arena")


def test_shared_strategies_are_per_device(device):
    assert workspace_strategy(device, "pool") is workspace_strategy(device, "pool")
    assert workspace_strategy(device, "pool") is not workspace_strategy(device, "cached")


@pytest.mark.parametrize("name", ["per-call", "cached", "pool"])
def test_release_now_after_a_sync_makes_the_workspace_free_for_any_stream(device, name):
    strategy, cache = make_workspace_strategy(device, name), ExecutorCache(device)
    first_stream, second_stream = device.create_stream(), device.create_stream()
    x = np.random.default_rng(3).standard_normal((8, 64)).astype(np.float32)
    held = []
    for stream in (first_stream, second_stream, first_stream):
        a, out = device.upload(x), device.alloc(x.nbytes)
        inputs = [TensorDesc.contiguous(x.shape, "float32", a.address)]
        outputs = [TensorDesc.contiguous(x.shape, "float32", out.address)]
        call = cache.prepare("Softmax", inputs, outputs, {"dim": -1})
        workspace = strategy.acquire(call.workspace_size, stream, call.key)
        cache.launch(call, inputs, outputs, workspace.address, workspace.nbytes, stream)
        stream.sync()
        strategy.release_now(workspace)  # no event or host function: the sync proved it
        np.testing.assert_allclose(device.download(out, "float32", x.shape), _reference_softmax(x), rtol=1e-5)
        held.extend([a, out])
    stats = strategy.stats()
    assert stats.in_use == 0 and stats.waits == 0
    assert stats.allocations == (3 if name == "per-call" else 1)
    strategy.close()


def test_carved_pieces_follow_canns_padding_and_alignment_rule(device):
    """Pieces of one allocation get ALIGN_UP(len, 32) + 32 bytes and start 64-byte aligned
    (docs/zh/api_ref/11-01_device_memory_malloc_and_free.md): kernels may touch the padding."""
    pool, stream = WorkspacePool(device, limit=1 << 16, granularity=32), device.create_stream()
    pool.reserve({stream: 4096})  # one region, carved for every request below
    held = [pool.acquire(n, stream) for n in (100, 1, 64, 33)]
    starts = sorted(w.address for w in held)
    assert all(start % 64 == 0 for start in starts)
    for workspace in held:
        following = [start for start in starts if start > workspace.address]
        if following:
            assert min(following) - workspace.address >= -(-workspace.nbytes // 32) * 32 + 32
    assert pool.stats().in_use == 192 + 64 + 128 + 128
    for workspace in held:
        pool.release_after(workspace, stream)
    pool.close()


def test_a_pool_that_can_never_satisfy_a_request_says_so_instead_of_waiting(device):
    from aclpipe.errors import PlanError

    pool, stream = WorkspacePool(device, limit=None), device.create_stream()  # grows only on reserve()
    with pytest.raises(PlanError, match="fragmented or too small"):
        pool.acquire(4096, stream)
    pool.close()


@pytest.mark.parametrize("name", ["static", "pool", "cached"])
def test_close_waits_for_the_streams_before_freeing(device, name):
    strategy, cache = make_workspace_strategy(device, name), ExecutorCache(device)
    stream = device.create_stream()
    gate = device.backend.latch(stream.handle)
    buffers = _softmax(device, cache, strategy, stream, np.ones((8, 64), np.float32))
    closer = threading.Thread(target=strategy.close)
    closer.start()
    closer.join(0.05)
    assert closer.is_alive()  # the launch is held on the device: its workspace must stay
    gate.set()
    closer.join(10)
    assert not closer.is_alive() and strategy.stats().reserved == 0
    stream.sync()
    for buffer in buffers:
        buffer.close()


def test_pinned_workspaces_hold_one_fixed_block_per_stream_until_unpinned(device):
    pool = WorkspacePool(device, limit=None)  # grows for pins instead of waiting
    first, second = device.create_stream(), device.create_stream()
    a = pool.pin({first: 1000, second: 3000}, owner="program a")
    b = pool.pin({first: 1000}, owner="program b")
    assert a is not None and b is not None
    addresses = [a[first].address, a[second].address, b[first].address]
    assert len(set(addresses)) == 3 and a[second].nbytes == 3000  # each owner its own blocks
    assert pool.stats().outstanding == 0 and pool.stats().in_use >= 1000 + 3000 + 1000  # pins are not "outstanding"
    gate = device.backend.latch(first.handle)  # launches using a's block are still queued
    pool.unpin("program a")
    assert pool.stats().outstanding >= 1  # a's block on `first` is on its way back, not free, while it is held
    gate.set()
    first.sync()
    second.sync()
    pool.unpin("program b")
    device.sync()
    assert pool.stats().outstanding == 0 and pool.stats().in_use == 0
    pool.close()


def test_pinning_never_waits_and_holds_nothing_when_it_cannot(device):
    stream = device.create_stream()
    pool = WorkspacePool(device, limit=4096, granularity=1024)
    held = pool.acquire(4000, stream)  # 4000 + 32 bytes of padding round up to the whole 4096
    assert pool.pin({stream: 100}, owner="p") is None
    pool.release_now(held)
    assert pool.pin({stream: 100}, owner="p") is not None
    pool.unpin("p")
    pool.close()
    static = make_workspace_strategy(device, "static")
    pinned = static.pin({stream: 5000}, owner="p")
    assert pinned is not None and pinned[stream].address == static.acquire(10, stream).address
    static.close()
    assert make_workspace_strategy(device, "per-call").pin({stream: 100}, owner="p") is None


@pytest.mark.anyio
async def test_a_waiter_publishes_batched_releases_instead_of_sleeping_for_ever(device):
    """A release batched for later publication must not leave a waiter on another stream waiting
    for a host function nobody enqueued (the race behind a rare pipeline hang)."""
    pool = WorkspacePool(device, limit=1024, granularity=1024, batch=8)
    first_stream, second_stream = device.create_stream(), device.create_stream()
    first = pool.acquire(992, first_stream)
    pool.release_after(first, first_stream, publish=False)  # batched: no host function yet
    with anyio.fail_after(10):
        second = await pool.acquire_async(992, second_stream)
    assert second.address == first.address and pool.stats().waits == 1
    pool.release_after(second, second_stream)
    pool.close()
