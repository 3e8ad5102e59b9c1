"""The slot queue hands slots out first come first served; the FIFO lock keeps enqueue order;
both survive cancellation without losing a slot or the lock."""

from __future__ import annotations

import anyio
import pytest

from aclpipe.errors import ClosedResourceError
from aclpipe.pipeline import FifoLock, SlotQueue

pytestmark = pytest.mark.anyio


async def test_slots_go_to_waiters_in_arrival_order():
    queue = SlotQueue(["a"])  # any objects serve as slots here
    first = await queue.acquire()
    order: list[tuple[int, object]] = []

    async def waiter(index: int) -> None:
        order.append((index, await queue.acquire()))

    async with anyio.create_task_group() as group:
        for index in range(3):
            group.start_soon(waiter, index)
            await anyio.sleep(0.01)  # each waiter queues before the next
        assert not queue.ready
        queue.release(first)
        for _ in range(2):
            await anyio.sleep(0.01)
            queue.release(order[-1][1])
    assert [index for index, _ in order] == [0, 1, 2]


async def test_a_waiter_cancelled_around_a_hand_over_never_loses_the_slot():
    queue = SlotQueue(["a"])
    held = await queue.acquire()
    got: list[tuple[str, object]] = []
    scopes: list[anyio.CancelScope] = []

    async def impatient() -> None:
        with anyio.CancelScope() as scope:
            scopes.append(scope)
            slot = await queue.acquire()
            got.append(("impatient", slot))
            queue.release(slot)  # a caller that got it gives it back when done, as runs do

    async def patient() -> None:
        got.append(("patient", await queue.acquire()))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(impatient)
            await anyio.sleep(0.01)
            group.start_soon(patient)
            await anyio.sleep(0.01)
            queue.release(held)  # handed to the impatient waiter...
            scopes[0].cancel()  # ...which is cancelled before it runs again: it passes the slot on
    assert got[-1] == ("patient", "a") and not queue.free


async def test_close_wakes_waiters_with_closed_resource_error():
    queue = SlotQueue(["a"])
    await queue.acquire()
    errors: list[BaseException] = []

    async def waiter() -> None:
        try:
            await queue.acquire()
        except ClosedResourceError as error:
            errors.append(error)

    async with anyio.create_task_group() as group:
        group.start_soon(waiter)
        await anyio.sleep(0.01)
        queue.close()
    assert len(errors) == 1
    with pytest.raises(ClosedResourceError):
        await queue.acquire()


async def test_the_fifo_lock_is_taken_without_yielding_when_free_and_handed_on_in_order():
    lock = FifoLock()
    await lock.acquire()
    order: list[int] = []

    async def taker(index: int) -> None:
        await lock.acquire()
        order.append(index)
        lock.release()

    async with anyio.create_task_group() as group:
        for index in range(3):
            group.start_soon(taker, index)
            await anyio.sleep(0.01)
        lock.release()
    assert order == [0, 1, 2] and not lock.held


async def test_a_fifo_waiter_cancelled_after_being_handed_the_lock_passes_it_on():
    lock = FifoLock()
    await lock.acquire()
    got: list[str] = []

    async def cancelled_taker() -> None:
        with anyio.move_on_after(0.02):
            await lock.acquire()
            got.append("cancelled taker")  # pragma: no cover - it is cancelled first

    async def next_taker() -> None:
        await lock.acquire()
        got.append("next")
        lock.release()

    async with anyio.create_task_group() as group:
        group.start_soon(cancelled_taker)
        await anyio.sleep(0.01)
        group.start_soon(next_taker)
        await anyio.sleep(0.05)  # the first waiter's deadline has passed
        lock.release()
    assert got == ["next"] and not lock.held
