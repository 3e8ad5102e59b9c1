"""A prepared program: per slot an arena, staging, events and bound repeatable executors;
a run enqueues precomputed steps and one completion; close frees it all."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from pipeline_graphs import live_device_state, mlp, reference

from aclpipe.pipeline import Program
from aclpipe.plan import make_plan
from aclpipe.runtime import CachedWorkspace, StaticWorkspace, WorkspacePool
from aclpipe.runtime.timeline import Timeline

pytestmark = pytest.mark.anyio


def _setup(device, graph, shapes, *, depth=2, streams=2, replays=0):
    plan = make_plan(graph.bind(**shapes), streams=streams)
    pipeline_streams = [device.create_stream() for _ in range(streams + replays + 2)]
    timeline = Timeline(len(pipeline_streams))
    for lane, stream in enumerate(pipeline_streams):
        timeline.assign(stream, lane)
    constants = {name: device.upload(np.asarray(array)) for name, array in plan.constants.items()}
    return plan, pipeline_streams, timeline, constants


async def _run_and_check(program, graph, slots, workspaces, timeline, d2h):
    """Run ``slots`` in turn (run numbers from 1) and compare each result with numpy."""
    for run, slot in enumerate(slots, start=1):
        x = np.random.default_rng(run).standard_normal((4, 32)).astype(np.float32)
        program.write_inputs(slot, {"x": x})
        await program.enqueue(slot, run, workspaces)
        value = program.enqueue_completion(slot, workspaces, timeline, d2h)
        await timeline.wait(d2h, value)
        assert program.run_error(slot) is None
        np.testing.assert_allclose(program.read_outputs(slot)["y"], reference(graph, {"x": x})["y"], rtol=1e-4)


def _teardown(constants, timeline, streams):
    for buffer in constants.values():
        buffer.close()
    timeline.close()
    for stream in streams:
        stream.close()


async def test_a_program_runs_each_slot_and_frees_everything(device):
    graph = mlp()
    before = live_device_state(device)
    plan, streams, timeline, constants = _setup(device, graph, {"x": (4, 32)})
    program = Program(device, plan, constants, streams, depth=2)
    workspaces = WorkspacePool(device, None, timeline=timeline)
    workspaces.reserve(program.workspace_sizes)
    assert len(program.slots) == 2 and not program.fallback_nodes
    assert all(slot.arena is not None and slot.executors for slot in program.slots)
    await _run_and_check(program, graph, program.slots, workspaces, timeline, len(streams) - 1)
    program.close()
    workspaces.close()
    _teardown(constants, timeline, streams)
    assert live_device_state(device) == before


async def test_ops_that_refuse_repeatable_executors_fall_back_to_phase_one_per_run(device, monkeypatch):
    graph = mlp()
    plan, streams, timeline, constants = _setup(device, graph, {"x": (4, 32)}, depth=1)

    def refuse(executor):
        from aclpipe.errors import error_from_code

        raise error_from_code(561103, "this op cannot be made repeatable")

    monkeypatch.setattr(device.backend, "op_set_repeatable", refuse)
    program = Program(device, plan, constants, streams, depth=1)
    assert program.fallback_nodes == {node.name for node in plan.nodes if node.op not in ("H2D", "D2H")}
    workspaces = WorkspacePool(device, None, timeline=timeline)
    workspaces.reserve(program.workspace_sizes)
    assert not program.capture(workspaces, (0,))  # nothing varying may be captured
    slot = program.slots[0]
    x = np.ones((4, 32), np.float32)
    program.write_inputs(slot, {"x": x})
    await program.enqueue(slot, 1, workspaces)
    await timeline.wait(len(streams) - 1, program.enqueue_completion(slot, workspaces, timeline, len(streams) - 1))
    np.testing.assert_allclose(program.read_outputs(slot)["y"], reference(graph, {"x": x})["y"], rtol=1e-4)
    program.close()
    workspaces.close()


async def test_a_captured_run_is_one_model_replayed_on_its_slots_own_stream(device):
    """15_model_running_instance__management.md: capture from an origin stream (the slot's
    replay stream), the streams the run uses join through the fork and rejoin through their
    tails; replay on one stream, a different one per slot, so that runs of different slots
    overlap (a replay is ordered on its stream like any task)."""
    graph = mlp()
    plan, streams, timeline, constants = _setup(device, graph, {"x": (4, 32)}, streams=2, replays=2)
    program = Program(device, plan, constants, streams, depth=2)
    workspaces = CachedWorkspace(device, timeline=timeline)
    d2h = len(streams) - 1
    assert program.pin_workspaces(workspaces)
    assert not program.capture(workspaces, ())  # nowhere to replay: left to its launch tables
    assert program.capture(workspaces, (2, 3))
    for slot, lane in zip(program.slots, (2, 3), strict=True):
        assert slot.graph.model.ready and slot.fork is not None and slot.replay_lane == lane
        captured = {item.stream for item in slot.graph.model.items}
        assert {stream.handle for stream in streams if stream.handle in captured} == captured
        first_item = slot.graph.model.items[0]
        assert first_item.task.kind == "record" and first_item.stream is streams[lane].handle
        assert streams[d2h].handle in captured  # the output copies are in the model too
    first, second = (set(slot.pinned.values()) for slot in program.slots)
    assert first and not first & second  # each slot its own workspaces
    await _run_and_check(program, graph, program.slots * 2, workspaces, timeline, d2h)
    program.close()
    workspaces.close()
    _teardown(constants, timeline, streams)


async def test_rebind_points_the_steps_at_renewed_streams(device):
    graph = mlp()
    plan, streams, timeline, constants = _setup(device, graph, {"x": (4, 32)})
    program = Program(device, plan, constants, streams, depth=1)
    old = {step.node.name: step.stream for step in program.slots[0].steps}
    renewed = streams[0]
    renewed.renew()
    program.rebind()
    for step in program.slots[0].steps:
        expected = streams[step.lane].handle
        assert step.stream is expected
        if step.lane == 0:
            assert step.stream is not old[step.node.name]
    program.close()
    _teardown(constants, timeline, streams)


def _one_slot_mlp(device):
    """An MLP program with one slot on its own streams, timeline and static workspaces."""
    graph = mlp()
    plan, streams, timeline, constants = _setup(device, graph, {"x": (4, 32)})
    program = Program(device, plan, constants, streams, depth=1)
    workspaces = StaticWorkspace(device, timeline=timeline)
    workspaces.reserve(program.workspace_sizes)
    return SimpleNamespace(graph=graph, streams=streams, timeline=timeline, constants=constants, program=program,
                           workspaces=workspaces, slot=program.slots[0], d2h=len(streams) - 1)


def _close_one_slot(env):
    env.program.close()
    env.workspaces.close()
    _teardown(env.constants, env.timeline, env.streams)


async def test_each_run_returns_arrays_of_its_own_that_its_completion_filled(device):
    env = _one_slot_mlp(device)
    graph, program, workspaces, timeline = env.graph, env.program, env.workspaces, env.timeline
    slot, d2h = env.slot, env.d2h
    results = []
    for run in (1, 2):
        x = np.full((4, 32), run, np.float32)
        program.write_inputs(slot, {"x": x})
        await program.enqueue(slot, run, workspaces)
        value = program.enqueue_completion(slot, workspaces, timeline, d2h)
        assert slot.results is not None
        filled = slot.results["y"]  # made at enqueue; the completion host function copies into it
        await timeline.wait(d2h, value)
        assert program.run_error(slot) is None
        results.append(program.read_outputs(slot)["y"])
        assert results[-1] is filled
        np.testing.assert_allclose(results[-1], reference(graph, {"x": x})["y"], rtol=1e-4)
    first, second = results
    staging = slot.staging_out["y"]._data
    assert not np.shares_memory(first, second)
    assert not np.shares_memory(first, staging) and not np.shares_memory(second, staging)
    expected = second.copy()
    second[...] = 0  # the caller's own array: the staging and a second read keep the run's values
    again = program.read_outputs(slot)["y"]  # handed over once; a second read copies the staging
    np.testing.assert_array_equal(again, expected)
    assert not np.shares_memory(again, staging)
    _close_one_slot(env)
    assert slot.reads is None and slot.copies is None and slot.results is None


async def test_reading_the_outputs_before_the_host_learns_of_the_copy_is_still_a_hazard(device):
    from aclpipe.errors import HazardError
    from aclpipe.testing import latch

    env = _one_slot_mlp(device)
    program, workspaces, timeline, slot, d2h = env.program, env.workspaces, env.timeline, env.slot, env.d2h
    program.write_inputs(slot, {"x": np.ones((4, 32), np.float32)})
    with latch(env.streams[d2h]):
        await program.enqueue(slot, 1, workspaces)
        value = program.enqueue_completion(slot, workspaces, timeline, d2h)
        with pytest.raises(HazardError, match="host view"):
            program.read_outputs(slot)  # the sanitizer still checks the host read on the loop
    await timeline.wait(d2h, value)
    program.read_outputs(slot)
    _close_one_slot(env)
