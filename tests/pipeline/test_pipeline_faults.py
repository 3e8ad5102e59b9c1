"""Failures: phase one at prepare, device faults at every node, copy and host-function faults.

A faulting run raises :class:`ExecutionError` naming its node; runs in flight beside it
either succeed with correct numbers or raise :class:`ExecutionError` (never wrong numbers);
the runs after it succeed; and nothing is leaked.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import anyio
import numpy as np
import pytest
from pipeline_graphs import (
    NODE_NAMES,
    assert_outputs,
    live_device_state,
    mixed40,
    mlp,
    reference,
)

from aclpipe import DeviceOutOfMemory, ExecutionError, InvalidArgumentError, Pipeline
from aclpipe.errors import BackendError, error_from_code
from aclpipe.graph import Graph
from aclpipe.ops import op_error

pytestmark = pytest.mark.anyio


def batch(rows: int, width: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, width)).astype(np.float32)


async def run_together(pipe: Pipeline, graph: Graph, inputs: Sequence[np.ndarray]) -> list[Any]:
    """Run every input concurrently; returns per run "ok" (numbers checked) or the ExecutionError."""
    outcomes: list[Any] = [None] * len(inputs)

    async def one(index: int) -> None:
        x = inputs[index]
        try:
            out = await pipe.run(x=x)
        except ExecutionError as error:
            outcomes[index] = error
        else:
            assert_outputs(out, reference(graph, {"x": x}))
            outcomes[index] = "ok"

    with anyio.fail_after(60):
        async with anyio.create_task_group() as group:
            for index in range(len(inputs)):
                group.start_soon(one, index)
    return outcomes


# -- phase one -------------------------------------------------------------------------------------
def refuse_softmax(device: Any, monkeypatch: pytest.MonkeyPatch, *, rows: int | None = None,
                   call: int | None = None) -> None:
    """Make the device's phase one refuse Softmax for ``rows`` rows, or at its ``call``-th call."""
    real = device.backend.op_prepare
    calls = [0]

    def op_prepare(op: str, inputs: Any, outputs: Any, attrs: Any) -> Any:
        if op == "Softmax":
            calls[0] += 1
            if inputs[0].shape[0] == rows or calls[0] == call:
                raise op_error("Softmax", "self", "a tensor this test allows", f"shape {inputs[0].shape}")
        return real(op, inputs, outputs, attrs)

    monkeypatch.setattr(device.backend, "op_prepare", op_prepare)


async def test_phase_one_failure_names_node_op_and_argument_and_enqueues_nothing(device, monkeypatch):
    baseline = live_device_state(device)
    refuse_softmax(device, monkeypatch, rows=3)
    graph = mlp(batch=None)
    async with Pipeline(graph, device, depth=2) as pipe:
        await pipe.run(x=batch(2, 32, 0))
        runs = pipe.stats().runs
        with pytest.raises(InvalidArgumentError) as info:
            await pipe.run(x=batch(3, 32, 0))
        assert info.value.context["node"] == "softmax_0" and info.value.context["op"] == "Softmax"
        assert "softmax_0" in str(info.value) and "aclnnSoftmax: self: expected" in str(info.value)
        assert pipe.stats().runs == runs and pipe.stats().signatures == 1
        x = batch(2, 32, 1)  # the pipeline still works for signatures that prepare
        assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))
    assert live_device_state(device) == baseline


@pytest.mark.parametrize("call", [1, 2, 3])
async def test_a_failure_in_any_slot_frees_the_slots_built_before_it(device, monkeypatch, call):
    baseline = live_device_state(device)
    refuse_softmax(device, monkeypatch, call=call)  # slot call-1 of three fails half built
    async with Pipeline(mlp(), device, depth=3) as pipe:
        with pytest.raises(InvalidArgumentError, match="softmax_0"):
            pipe.prepare(x=(4, 32))
        assert pipe.stats().signatures == 0
    assert live_device_state(device) == baseline


async def test_an_allocation_failure_at_prepare_leaks_nothing(device):
    baseline = live_device_state(device)
    device.inject_fault("alloc", match="arena slot 1")
    async with Pipeline(mlp(), device, depth=2) as pipe:
        with pytest.raises(DeviceOutOfMemory):
            await pipe.run(x=batch(4, 32, 0))
        x = batch(4, 32, 1)  # the fault fired once: preparing again succeeds
        assert_outputs(await pipe.run(x=x), reference(mlp(), {"x": x}))
    assert live_device_state(device) == baseline


async def test_ops_that_refuse_repeatable_executors_run_phase_one_at_each_run(device, monkeypatch):
    real = device.backend.op_set_repeatable

    def op_set_repeatable(executor: Any) -> None:
        if executor.op == "Relu":
            raise error_from_code(561103, "this op cannot repeat (test)")
        real(executor)

    monkeypatch.setattr(device.backend, "op_set_repeatable", op_set_repeatable)
    graph = mlp()
    async with Pipeline(graph, device, depth=2) as pipe:
        for seed in range(4):
            x = batch(4, 32, seed)
            assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))


# -- device faults -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("streams", "workspace"), [(1, "static"), (4, "pool")])
async def test_a_kernel_fault_at_every_node_is_named_and_the_pipeline_recovers(device, streams, workspace):
    """static: runs replay a captured graph; pool (with workspaces): nodes enqueue one by one."""
    graph = mixed40()
    baseline = live_device_state(device)
    async with Pipeline(graph, device, streams=streams, depth=3, workspace=workspace) as pipe:
        for position, node in enumerate(NODE_NAMES):
            device.inject_fault("kernel", match=node)
            with pytest.raises(ExecutionError) as info:
                await pipe.run(x=batch(8, 16, position))
            assert info.value.node == node and isinstance(info.value.cause, BackendError)

            # Three in flight; the node's second execution fails.
            device.inject_fault("kernel", match=node, skip=1)
            outcomes = await run_together(pipe, graph, [batch(8, 16, position * 10 + k) for k in range(3)])
            errors = [o for o in outcomes if o != "ok"]
            assert errors and all(error.node == node for error in errors), outcomes

            x = batch(8, 16, 1000 + position)
            assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))
        stats = pipe.stats()
        assert stats.in_flight == 0 and stats.failed_runs >= 2 * len(NODE_NAMES)
        assert stats.workspace.get("outstanding", 0) == 0
    assert live_device_state(device) == baseline


@pytest.mark.parametrize("node", ["h2d:x", "d2h:y", "d2h:mid"])
async def test_copy_faults_are_named_by_their_copy_node(device, node):
    graph = mixed40()
    async with Pipeline(graph, device, streams=4, depth=2) as pipe:
        device.inject_fault("copy", match=node)
        with pytest.raises(ExecutionError) as info:
            await pipe.run(x=batch(8, 16, 0))
        assert info.value.node == node
        device.inject_fault("copy", match=node, skip=1)
        outcomes = await run_together(pipe, graph, [batch(8, 16, k) for k in range(4)])
        assert any(o != "ok" for o in outcomes) and all(o == "ok" or o.node == node for o in outcomes)
        x = batch(8, 16, 7)
        assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))


@pytest.mark.parametrize("workspace", ["pool", "static", "per-call"])
async def test_a_host_function_fault_fails_its_run_without_hanging(device, workspace):
    graph = mixed40()
    async with Pipeline(graph, device, streams=4, depth=2, workspace=workspace) as pipe:
        for skip in range(3):  # each run has a completion host function: the fault lands in the round
            rule = device.inject_fault("host_func", skip=skip)
            outcomes = await run_together(pipe, graph, [batch(8, 16, skip * 3 + k) for k in range(3)])
            assert rule.fired == 1 and any(o != "ok" for o in outcomes)
            assert all(o == "ok" or o.stream is not None for o in outcomes)
            x = batch(8, 16, 100 + skip)
            assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))
        assert pipe.stats().in_flight == 0


async def test_a_fault_inside_a_stream_raises_at_that_batch_and_a_new_stream_works(device):
    graph = mixed40()
    batches = [{"x": batch(8, 16, seed)} for seed in range(8)]
    async with Pipeline(graph, device, streams=4, depth=3) as pipe:
        device.inject_fault("kernel", match="n21", run=4)  # batch 3's node n21 (runs overlap: not the 4th n21)
        good = 0
        with pytest.raises(ExecutionError) as info:
            async for out in pipe.stream(batches):
                assert_outputs(out, reference(graph, batches[good]))
                good += 1
        assert info.value.node == "n21" and good == 3
        assert pipe.stats().in_flight == 0
        results = [out async for out in pipe.stream(batches)]
        for out, given in zip(results, batches, strict=True):
            assert_outputs(out, reference(graph, given))


async def test_a_fault_is_kept_until_every_run_it_spoiled_has_finished(device):
    """Runs held by a suspended stream() finish long after later runs: the fault must wait for them."""
    graph = mixed40()
    async with Pipeline(graph, device, streams=2, depth=3) as pipe:
        device.inject_fault("kernel", match="n12", run=2)  # the second batch fails
        batches = [{"x": batch(8, 16, seed)} for seed in range(3)]
        results = pipe.stream(batches)
        assert_outputs(await results.__anext__(), reference(graph, batches[0]))  # type: ignore[attr-defined]
        for seed in range(10):  # the stream holds batches 2 and 3 meanwhile
            x = batch(8, 16, 50 + seed)
            try:
                out = await pipe.run(x=x)
            except ExecutionError:
                continue
            assert_outputs(out, reference(graph, {"x": x}))
        with pytest.raises(ExecutionError):
            await results.__anext__()  # type: ignore[attr-defined]
        await results.aclose()  # type: ignore[attr-defined]
        assert pipe.stats().in_flight == 0


async def test_a_host_side_failure_while_enqueueing_gives_the_slot_back(device):
    graph = Graph("ws")
    x = graph.input("x", shape=(4, 16))
    graph.output("y", graph.add(graph.softmax(x, dim=-1), graph.softmax(graph.relu(x), dim=-1)))
    async with Pipeline(graph, device, streams=2, depth=1, workspace="per-call") as pipe:
        device.inject_fault("alloc", match="per-call workspace")
        with pytest.raises(DeviceOutOfMemory):
            await pipe.run(x=batch(4, 16, 0))
        assert pipe.stats().in_flight == 0
        for seed in range(3):  # depth 1: a lost slot would hang here
            value = batch(4, 16, seed)
            with anyio.fail_after(10):
                assert_outputs(await pipe.run(x=value), reference(graph, {"x": value}))


@pytest.mark.parametrize("workspace", ["pool", "per-call"])
async def test_a_launch_the_backend_refuses_gives_its_workspace_back(device, monkeypatch, workspace):
    real = device.backend.op_launch
    refused = [0]

    def op_launch(executor: Any, *args: Any, **kwargs: Any) -> None:
        if executor.op == "Softmax" and not refused[0]:
            refused[0] += 1
            raise error_from_code(161002, "aclnnSoftmax: refused at launch (test)")
        real(executor, *args, **kwargs)

    monkeypatch.setattr(device.backend, "op_launch", op_launch)
    graph = mlp()
    baseline = live_device_state(device)
    # One pool block: a block lost by the refused launch would starve every later run.
    async with Pipeline(graph, device, depth=1, workspace=workspace, pool_bytes=512) as pipe:
        with pytest.raises(InvalidArgumentError, match="refused at launch"):
            await pipe.run(x=batch(4, 32, 0))
        for seed in range(3):
            x = batch(4, 32, seed + 1)
            with anyio.fail_after(10):
                assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))
        stats = pipe.stats()
        assert stats.in_flight == 0 and stats.workspace["in_use"] == 0
    assert live_device_state(device) == baseline


@pytest.mark.parametrize(("streams", "workspace"), [(1, "static"), (4, "pool")])
async def test_a_fault_whose_stream_error_someone_else_consumed_still_fails_its_run(device, monkeypatch, streams,
                                                                                  workspace):
    """Other code may drain the streams' sticky errors first (a Device.sync() say): the run's own
    ``done`` event still carries the error, so the run fails instead of returning stale numbers."""
    graph = mixed40()
    async with Pipeline(graph, device, streams=streams, depth=2, workspace=workspace) as pipe:
        drained: list[BaseException] = []

        def drain_without_telling_the_pipeline(streams, newest_run) -> list:
            drained.extend(e for e in (s.take_error() for s in streams) if e is not None)
            return []  # nothing found, as FaultLog.collect says when another reader took it all

        monkeypatch.setattr(pipe._faults, "collect", drain_without_telling_the_pipeline)
        for position, node in enumerate(NODE_NAMES[::7]):
            device.inject_fault("kernel", match=node)
            with pytest.raises(ExecutionError) as info:
                await pipe.run(x=batch(8, 16, position))
            assert info.value.node == node
            x = batch(8, 16, 500 + position)
            assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))
        assert drained  # the errors really were consumed behind the pipeline's back


async def test_runs_after_a_failure_go_to_a_fresh_device_stream(device):
    """Continue-on-failure (06_stream_management.md) runs the tasks behind a failed one on
    garbage: the runs then in flight fail, and the failed stream is renewed so that no later
    run is computed behind the failed task."""
    graph = mixed40()
    async with Pipeline(graph, device, streams=2, depth=2) as pipe:
        streams = pipe._res.streams
        assert all(stream.failure_mode == "continue" for stream in streams)
        before = [stream.handle for stream in streams]
        device.inject_fault("kernel", match="n21")
        with pytest.raises(ExecutionError):
            await pipe.run(x=batch(8, 16, 0))
        renewed = [index for index, stream in enumerate(streams) if stream.handle is not before[index]]
        assert renewed and all(streams[index].renewals == 1 for index in renewed)
        x = batch(8, 16, 1)
        assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))


async def test_a_device_whose_streams_stop_on_failure_is_refused_rather_than_hang(device):
    graph = mlp()
    async with Pipeline(graph, device, streams=2, depth=2) as pipe:
        x = batch(4, 32, 0)
        assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))
        device.create_stream(failure_mode="stop")  # CANN: every stream of the context now stops on failure
        with pytest.raises(BackendError, match="stops its streams on failure") as caught:
            await pipe.run(x=x)
        assert caught.value.code == 207000
        assert pipe.stats().in_flight == 0


def _counting(has_error, asked: list[int]) -> bool:
    asked[-1] += 1
    return bool(has_error())


@pytest.mark.parametrize("workspace", ["pool", "per-call"])
async def test_only_streams_a_run_may_have_failed_on_are_asked_for_errors(device, workspace):
    """A captured run replays its model on its slot's replay stream and completes on the D2H
    stream, so once the others were found clean only those two are asked; node-by-node runs
    touch every stream, so all are asked.
    A fault on a compute stream is still found and named either way."""
    graph = mixed40()
    async with Pipeline(graph, device, streams=4, depth=2, workspace=workspace) as pipe:
        asked: list[int] = []  # streams asked, per run
        for stream in pipe._res.streams:
            stream.has_error = functools.partial(_counting, stream.has_error, asked)
        for seed in range(3):
            asked.append(0)
            await pipe.run(x=batch(8, 16, seed))
        captured = next(iter(pipe._res.cache)).program.slots[0].graph is not None
        assert captured == (workspace == "pool")
        every = len(pipe._res.streams)
        assert asked[0] == every and asked[-1] == (2 if captured else every)
        device.inject_fault("kernel", match=NODE_NAMES[5])
        with pytest.raises(ExecutionError) as info:
            await pipe.run(x=batch(8, 16, 9))
        assert info.value.node == NODE_NAMES[5]
        x = batch(8, 16, 10)
        assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))
