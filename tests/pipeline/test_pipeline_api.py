"""Pipeline API: results against numpy, run/stream/plan_for/prepare/stats/aclose, under asyncio and trio."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from functools import partial

import anyio
import anyio.lowlevel
import numpy as np
import pytest
from pipeline_graphs import (
    FAILURES,
    assert_outputs,
    assert_stream_fails_in_order,
    live_device_state,
    mixed40,
    mlp,
    reference,
)

import aclpipe
from aclpipe import ClosedResourceError, GraphError, Pipeline
from aclpipe.backends.sim.engines import ATLAS_310P
from aclpipe.graph import Graph

pytestmark = pytest.mark.anyio


def batch(rows: int, width: int = 32, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, width)).astype(np.float32)


async def run_all(pipe: Pipeline, inputs: list[np.ndarray]) -> list[dict[str, np.ndarray]]:
    """Run every input concurrently; results in input order."""
    outs: dict[int, dict[str, np.ndarray]] = {}

    async def one(index: int) -> None:
        outs[index] = await pipe.run(x=inputs[index])

    async with anyio.create_task_group() as group:
        for index in range(len(inputs)):
            group.start_soon(one, index)
    return [outs[index] for index in range(len(inputs))]


async def test_run_returns_numpy_arrays_matching_numpy(device):
    graph = mlp()
    async with Pipeline(graph, device, streams=2, depth=2) as pipe:
        x = batch(8)
        out = await pipe.run(x=x)
    assert set(out) == {"y"} and isinstance(out["y"], np.ndarray) and out["y"].dtype == np.float32
    assert_outputs(out, reference(graph, {"x": x}))


async def test_several_outputs_and_branches_on_four_streams(device):
    graph = mixed40()
    async with Pipeline(graph, device, streams=4, depth=3) as pipe:
        for seed in range(3):
            x = batch(8, 16, seed)
            assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))


async def test_async_with_closes_and_a_closed_pipeline_refuses_everything(device):
    async with Pipeline(mlp(), device) as pipe:
        await pipe.run(x=batch(4))
    with pytest.raises(ClosedResourceError):
        await pipe.run(x=batch(4))
    with pytest.raises(ClosedResourceError):
        pipe.prepare(x=(4, 32))
    with pytest.raises(ClosedResourceError):
        async for _ in pipe.stream([{"x": batch(4)}]):
            pass
    await pipe.aclose()  # idempotent
    assert not device.closed  # the caller's device stays open


async def test_a_pipeline_that_opened_its_device_closes_it():
    pipe = Pipeline(mlp(), "sim")
    await pipe.run(x=batch(2))
    await pipe.aclose()
    assert pipe.device.closed


async def test_stream_over_a_list_yields_results_in_order(device):
    graph = mlp()
    batches = [{"x": batch(4, seed=seed)} for seed in range(9)]
    async with Pipeline(graph, device, streams=2, depth=3) as pipe:
        results = [out async for out in pipe.stream(batches)]
    assert len(results) == len(batches)
    for got, given in zip(results, batches):
        assert_outputs(got, reference(graph, given))


async def test_stream_over_an_async_iterable_yields_results_in_order(device):
    graph = mlp()
    batches = [{"x": batch(3, seed=seed)} for seed in range(7)]

    async def produce() -> AsyncIterator[dict[str, np.ndarray]]:
        for item in batches:
            await anyio.lowlevel.checkpoint()
            yield item

    async with Pipeline(graph, device, depth=2) as pipe:
        results = [out async for out in pipe.stream(produce())]
    for got, given in zip(results, batches, strict=True):
        assert_outputs(got, reference(graph, given))


@pytest.mark.parametrize("failure", list(FAILURES))
async def test_stream_delivers_the_runs_ahead_of_a_failing_batch_before_its_error(device, failure):
    # As a loop of run() calls would: batches 0-2 were accepted (some still in flight when the
    # bad one is read), so their results come first, in order, and then the error.
    graph = mlp()
    good = [{"x": batch(4, seed=seed)} for seed in range(3)]
    async with Pipeline(graph, device, streams=2, depth=3) as pipe:
        await assert_stream_fails_in_order(pipe, graph, good, batch(4, width=31), failure)
        assert_outputs(await pipe.run(**good[0]), reference(graph, good[0]))  # and the pipeline goes on


async def test_two_streams_and_runs_share_one_pipeline_without_deadlock(device):
    graph = mlp()
    batches = [{"x": batch(4, seed=seed)} for seed in range(6)]
    seen: dict[str, int] = {}

    async def consume(tag: str) -> None:
        count = 0
        async for out in pipe.stream(batches):
            assert_outputs(out, reference(graph, batches[count]))
            count += 1
        seen[tag] = count

    async def call(tag: str) -> None:
        x = batch(4, seed=99)
        assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))
        seen[tag] = 1

    async with Pipeline(graph, device, depth=2) as pipe:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                group.start_soon(consume, "a")
                group.start_soon(consume, "b")
                group.start_soon(call, "c")
    assert seen == {"a": 6, "b": 6, "c": 1}


async def test_stream_rejects_a_batch_that_is_not_a_dict(device):
    async with Pipeline(mlp(), device) as pipe:
        with pytest.raises(TypeError, match="dicts of inputs"):
            async for _ in pipe.stream([batch(2)]):  # type: ignore[list-item]
                pass
        assert pipe.stats().in_flight == 0


async def test_breaking_out_of_a_stream_gives_every_slot_back(device):
    async with Pipeline(mlp(), device, depth=3) as pipe:
        results = pipe.stream([{"x": batch(2, seed=s)} for s in range(10)])
        async for _ in results:
            break
        await results.aclose()  # type: ignore[attr-defined]
        assert pipe.stats().in_flight == 0
        await pipe.run(x=batch(2))


async def test_plan_for_summary_and_dot(device):
    async with Pipeline(mixed40(), device, streams=4) as pipe:
        plan = pipe.plan_for(x=(8, 16))
        summary, dot = plan.summary(), plan.to_dot()
        assert pipe.stats().signatures == 0  # planning prepares nothing
    assert "mixed40" in summary and "stream" in summary and "n00" in summary
    assert dot.startswith("digraph") and dot.rstrip().endswith("}") and "n39" in dot
    assert plan.num_streams >= 2  # the branches run side by side


async def test_prepare_up_front_then_runs_hit_the_cache(device):
    async with Pipeline(mlp(batch=None), device) as pipe:
        plan = pipe.prepare(x=(4, 32))
        assert plan.input_shapes["x"] == (4, 32)
        assert pipe.stats().signatures == 1 and pipe.stats().prepare_hits == 0
        await pipe.run(x=batch(4))
        await pipe.run(x=batch(4))
        assert pipe.stats().prepare_hits == 2


async def test_runs_with_the_last_signature_skip_the_graphs_lookup_but_not_its_checks(device, monkeypatch):
    graph = mlp(batch="batch")
    calls: list[dict[str, object]] = []
    lookup = type(graph).signature

    def counted(self, **inputs):
        calls.append(inputs)
        return lookup(self, **inputs)

    monkeypatch.setattr(type(graph), "signature", counted)
    async with Pipeline(graph, device) as pipe:
        for rows in (4, 4, 4):
            x = batch(rows, seed=rows)
            assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))
        assert len(calls) == 1  # the first run looked the shapes up; the others reused it
        with pytest.raises(GraphError, match="fixed at 32"):  # a new shape: the full check, as ever
            await pipe.run(x=np.zeros((4, 31), np.float32))
        with pytest.raises(TypeError, match="expected dtype float32"):  # dtypes are checked before
            await pipe.run(x=np.zeros((4, 32), np.float64))
        for rows in (2, 4, 2):
            x = batch(rows, seed=rows)
            assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))
        assert len(calls) == 5 and pipe.stats().signatures == 2


async def test_stats_fields(device):
    graph = mixed40()
    async with Pipeline(graph, device, streams=4, depth=2, workspace="pool") as pipe:
        for seed in range(3):
            await pipe.run(x=batch(8, 16, seed))
        stats = pipe.stats()
        plan = pipe.plan_for(x=(8, 16))
    assert stats.runs == 3 and stats.failed_runs == 0 and stats.in_flight == 0 and stats.lost_slots == 0
    assert stats.signatures == 1 and stats.prepare_hits == 2
    assert stats.executors == 2 * len(graph.nodes)  # one per compute node per slot
    assert stats.events_per_run == plan.num_events and stats.waits_per_run == plan.num_waits
    assert stats.arena_bytes == 2 * plan.arena_size
    assert stats.constant_bytes == sum(array.nbytes for array in graph.constants.values())
    assert stats.workspace["strategy"] == "pool" and stats.workspace["outstanding"] == 0
    assert stats.device_peak_bytes is not None and stats.device_peak_bytes >= stats.arena_bytes
    assert set(stats.as_dict()) >= {"runs", "in_flight", "workspace", "lost_slots"}


@pytest.mark.parametrize("declared", [None, "batch"])
async def test_dynamic_batch_dim_gets_one_program_per_signature(device, declared):
    graph = mlp(batch=declared)
    sizes = [1, 3, 8, 3, 1, 8, 5]
    async with Pipeline(graph, device, depth=2) as pipe:
        for index, rows in enumerate(sizes):
            x = batch(rows, seed=index)
            assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))
        stats = pipe.stats()
    assert stats.signatures == len(set(sizes)) and stats.prepare_hits == len(sizes) - len(set(sizes))


async def test_named_dims_shared_by_two_inputs(device):
    g = Graph("pair")
    a = g.input("a", shape=("batch", 8))
    b = g.input("b", shape=("batch", 8))
    g.output("y", g.mul(g.add(a, b), a))
    async with Pipeline(g, device) as pipe:
        for rows in (2, 5, 2):
            av, bv = batch(rows, 8, 1), batch(rows, 8, 2)
            assert_outputs(await pipe.run(a=av, b=bv), reference(g, {"a": av, "b": bv}))
        with pytest.raises(GraphError, match="batch"):
            await pipe.run(a=batch(2, 8), b=batch(3, 8))
        assert pipe.stats().signatures == 2


async def test_workspace_strategies_give_identical_results(device):
    graph = mixed40()
    inputs = [batch(8, 16, seed) for seed in range(4)]
    results: dict[str, list[dict[str, np.ndarray]]] = {}
    for strategy in ("pool", "static", "per-call"):
        async with Pipeline(graph, device, streams=4, depth=2, workspace=strategy) as pipe:
            results[strategy] = await run_all(pipe, inputs)
    for index, x in enumerate(inputs):
        assert_outputs(results["pool"][index], reference(graph, {"x": x}))
        for strategy in ("static", "per-call"):
            for name in ("y", "mid"):
                np.testing.assert_array_equal(results[strategy][index][name], results["pool"][index][name])


@pytest.mark.parametrize(("inputs", "error", "match"), [
    ({}, ValueError, r"missing \['x'\]"),
    ({"x": None, "z": None}, ValueError, r"unknown \['z'\]"),
    ({"x": np.zeros((4, 32), np.float64)}, TypeError, "expected dtype float32"),
    ({"x": np.zeros((4, 32), np.int32)}, TypeError, "astype"),
    ({"x": np.zeros((4, 32, 1), np.float32)}, GraphError, "dims"),
    ({"x": np.zeros((4, 31), np.float32)}, GraphError, "fixed at 32"),
])
async def test_bad_inputs_fail_before_anything_is_enqueued(device, inputs, error, match):
    async with Pipeline(mlp(), device) as pipe:
        await pipe.run(x=batch(4))
        before = pipe.stats(), live_device_state(device)
        with pytest.raises(error, match=match):
            await pipe.run(**inputs)
        after = pipe.stats(), live_device_state(device)
    assert after == before  # no run counted, no program prepared, nothing allocated


async def test_pipeline_arguments_are_checked(device):
    with pytest.raises(TypeError, match="Graph"):
        Pipeline("not a graph", device)  # type: ignore[arg-type]
    for bad in ({"streams": 0}, {"depth": 0}, {"depth": True}, {"workspace": "bogus"}):
        with pytest.raises(ValueError):
            Pipeline(mlp(), device, **bad)  # type: ignore[arg-type]
    with pytest.raises(GraphError, match="no outputs"):
        empty = Graph("empty")
        empty.input("x", shape=(2,))
        Pipeline(empty, device)


async def test_aclose_waits_for_runs_in_flight_and_refuses_waiting_ones(device):
    graph = mlp()
    async with Pipeline(graph, device, depth=1) as pipe:
        await pipe.run(x=batch(2))
        device.inject_fault("kernel", match="softmax", hang=True)
        outcomes: list[object] = []

        async def one(seed: int) -> None:
            x = batch(2, seed=seed)
            try:
                out = await pipe.run(x=x)
            except ClosedResourceError as error:
                outcomes.append(type(error))
            else:
                assert_outputs(out, reference(graph, {"x": x}))
                outcomes.append("ok")

        async with anyio.create_task_group() as group:
            for seed in range(4):
                group.start_soon(one, seed)
            await anyio.sleep(0.02)
            group.start_soon(pipe.aclose)
            await anyio.sleep(0.02)
            device.release_hangs()
    assert outcomes.count("ok") == 1 and outcomes.count(ClosedResourceError) == 3
    assert device.mem_info().used == 0 and not device.backend.memory.live_host_buffers()


async def test_everything_is_freed_after_aclose(device):
    baseline = live_device_state(device)
    async with Pipeline(mixed40(), device, streams=4, depth=3) as pipe:
        await pipe.run(x=batch(8, 16))
        assert device.mem_info().used > baseline[0]
    assert live_device_state(device) == baseline


async def test_repr_names_the_graph_and_settings(device):
    async with Pipeline(mlp(), device, streams=3, depth=2, workspace="static") as pipe:
        assert "mlp" in repr(pipe) and "streams=3" in repr(pipe) and "static" in repr(pipe)


async def test_numbers_of_a_real_input_type_are_accepted(device):
    graph = mlp()
    async with Pipeline(graph, device) as pipe:
        x = np.asfortranarray(batch(4))  # not C-contiguous: copied into the staging
        assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))
        view = batch(8)[::2]
        assert_outputs(await pipe.run(x=view), reference(graph, {"x": view}))



def test_one_pipeline_serves_asyncio_then_trio_then_asyncio(device):
    graph = mlp()
    pipe = Pipeline(graph, device, depth=2)

    async def several() -> None:
        x = batch(3, seed=5)
        async with anyio.create_task_group() as group:
            for _ in range(4):  # contended: the enqueue lock and the slots have waiters
                group.start_soon(lambda: check(pipe, graph, x))

    for library in ("asyncio", "trio", "asyncio"):
        anyio.run(several, backend=library)
    anyio.run(pipe.aclose, backend="trio")


async def check(pipe: Pipeline, graph: Graph, x: np.ndarray) -> None:
    assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))


async def test_concurrent_acloses_all_return_once_everything_is_freed(device):
    baseline = live_device_state(device)
    pipe = Pipeline(mlp(), device, depth=2)
    await pipe.run(x=batch(2))
    device.inject_fault("kernel", match="softmax", hang=True)
    returned: list[tuple[int, int]] = []

    async def close(tag: int) -> None:
        await pipe.aclose()
        returned.append((tag, live_device_state(device)[0]))

    async with anyio.create_task_group() as group:
        group.start_soon(partial(pipe.run, x=batch(2)))
        await anyio.sleep(0.01)
        group.start_soon(close, 1)
        group.start_soon(close, 2)
        await anyio.sleep(0.01)
        assert returned == []  # both wait for the held run
        device.release_hangs()
    assert sorted(returned) == [(1, baseline[0]), (2, baseline[0])]


async def test_idle_programs_are_evicted_to_stay_within_the_event_limit():
    """07_event_management.md limits events per device: the pipeline closes the least recently
    used idle program rather than exceed the limit (an mlp program takes 12 events here)."""
    spec = dataclasses.replace(ATLAS_310P, max_events=30)
    with aclpipe.open_device("sim", spec=spec) as device:
        graph = mlp()
        async with Pipeline(graph, device, streams=2, depth=2) as pipe:
            for rows in (1, 2, 3, 1, 3, 2):
                x = batch(rows)
                assert_outputs(await pipe.run(x=x), reference(graph, {"x": x}))
                assert device.live_events <= 30 and pipe.stats().signatures <= 2
        assert device.live_events == 0
