"""Preparing: bind -> plan (cached per signature) -> upload constants -> Program -> reserve ->
capture, as one step that frees whatever it built when it fails."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from pipeline_graphs import live_device_state, mlp

import aclpipe
from aclpipe.backends.sim.engines import ATLAS_310P
from aclpipe.errors import BackendError, DeviceOutOfMemory, GraphError
from aclpipe.pipeline import Preparer
from aclpipe.runtime import WorkspacePool
from aclpipe.runtime.completion.timeline import Timeline
from aclpipe.runtime.workspaces import make_workspace_strategy


def _preparer(device, graph, *, depth=2, streams=2):
    """A preparer on the streams a pipeline makes: compute, one replay stream per slot, H2D, D2H."""
    pipeline_streams = [device.create_stream() for _ in range(streams + depth + 2)]
    timeline = Timeline(len(pipeline_streams))
    for lane, stream in enumerate(pipeline_streams):
        timeline.assign(stream, lane)
    return Preparer(graph, device, pipeline_streams, depth=depth, max_streams=streams,
                    replay_lanes=range(streams, streams + depth)), timeline


def test_a_signature_is_the_graphs_sorted_and_hashable(device):
    preparer, _ = _preparer(device, mlp())
    key = preparer.signature({"x": np.zeros((4, 32), np.float32)})
    assert key.shapes == (("x", (4, 32)),) and not key.host_values
    assert {key: 1}[preparer.signature({"x": (4, 32)})] == 1


def test_plans_are_cached_per_input_signature(device):
    preparer, _ = _preparer(device, mlp())
    first = preparer.plan_for({"x": (4, 32)})
    assert preparer.plan_for({"x": np.zeros((4, 32), np.float32)}) is first  # arrays give their shape
    assert preparer.plan_for({"x": (8, 32)}) is not first
    with pytest.raises(GraphError, match="unknown input"):
        preparer.plan_for({"x": (4, 32), "z": (1,)})


def test_prepare_builds_slots_uploads_constants_once_and_reserves(device):
    preparer, timeline = _preparer(device, mlp(), depth=3)
    workspaces = WorkspacePool(device, None, timeline=timeline)
    first = preparer.prepare({"x": (4, 32)}, workspaces)
    constants = dict(preparer.constants)
    second = preparer.prepare({"x": (8, 32)}, workspaces)
    assert len(first.slots) == len(second.slots) == 3
    assert preparer.constants == constants and preparer.constant_bytes == sum(b.nbytes for b in constants.values())
    assert first.workspace_sizes  # Softmax needs one: the pool reserved room for it
    assert workspaces.stats().reserved >= max(first.workspace_sizes.values())
    for program in (first, second):
        program.close()
    workspaces.close()
    preparer.close()
    assert not preparer.constants


def test_a_program_is_captured_when_its_workspaces_can_be_pinned(device):
    """static, cached and a pool sized by its programs pin one block per stream for the program;
    a bounded pool and per-call take them run by run, so nothing is fixed to capture.  Captured
    slots replay side by side, so each needs blocks of its own: static, whose pins are its
    streams' one region, runs from launch tables instead."""
    preparer, timeline = _preparer(device, mlp())
    strategies = {name: make_workspace_strategy(device, name, timeline=timeline) for name in ("static", "cached")}
    strategies["pool"] = WorkspacePool(device, None, timeline=timeline)
    strategies["bounded pool"] = WorkspacePool(device, 1 << 20, timeline=timeline)
    strategies["per-call"] = make_workspace_strategy(device, "per-call", timeline=timeline)
    programs = {name: preparer.prepare({"x": (4, 32)}, strategy) for name, strategy in strategies.items()}
    for name, program in programs.items():
        captured = name in ("cached", "pool")
        assert all((slot.graph is not None) == captured for slot in program.slots), name
        assert all((slot.pinned is not None) == captured for slot in program.slots), name
        assert (program.pinned is not None) == (name == "static"), name  # the shared pin, given back once captured
    used = [workspace.address for slot in programs["pool"].slots for workspace in slot.pinned.values()]
    assert all(set(slot.pinned) == set(programs["pool"].workspace_sizes) for slot in programs["pool"].slots)
    assert len(set(used)) == len(used)  # no two slots (nor streams) share a block
    in_use = strategies["pool"].stats().in_use
    programs["pool"].close()  # unpins: the blocks come back once the streams passed them
    device.sync()
    assert strategies["pool"].stats().in_use < in_use
    for name, program in programs.items():
        program.close()
        strategies[name].close()
    preparer.close()


def test_a_failure_half_way_frees_everything_it_built(device):
    preparer, timeline = _preparer(device, mlp(), depth=3)
    workspaces = WorkspacePool(device, None, timeline=timeline)
    before = live_device_state(device)
    device.inject_fault("alloc", match="arena slot 2")  # slots 0 and 1 are built by then
    with pytest.raises(DeviceOutOfMemory):
        preparer.prepare({"x": (4, 32)}, workspaces)
    preparer.close()  # the constants it uploaded
    workspaces.close()
    assert live_device_state(device) == before


def test_host_values_pick_the_plan_and_are_not_inputs_of_it(device):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    model = helper.make_model(helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"])], "reshape",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6]),
         helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]), opset_imports=[helper.make_opsetid("", 17)])
    preparer, _ = _preparer(device, aclpipe.load_onnx(onnx.ModelProto.FromString(model.SerializeToString())))
    wide = preparer.plan_for({"x": (6,), "shape": np.array([2, 3])})
    tall = preparer.plan_for({"x": (6,), "shape": np.array([3, 2])})
    assert wide is not tall and wide.inputs == tall.inputs == ("x",)
    assert preparer.plan_for({"x": np.zeros(6, np.float32), "shape": np.array([2, 3])}) is wide
    key = preparer.signature({"x": (6,), "shape": np.array([3, 2])})
    assert dict(key.host_values)["shape"].array.tolist() == [3, 2] and preparer.plan_for(key) is tall
    preparer.close()


def test_a_program_that_can_never_fit_the_event_limit_is_refused_naming_it():
    """07_event_management.md: 1023 events per device on Atlas inference cards."""
    spec = dataclasses.replace(ATLAS_310P, max_events=10)
    with aclpipe.open_device("sim", spec=spec) as device:
        preparer, timeline = _preparer(device, mlp(), depth=3)  # 7 events a slot
        workspaces = WorkspacePool(device, None, timeline=timeline)
        with pytest.raises(BackendError, match="needs 21 events .* 10 sim:0 supports per device") as caught:
            preparer.prepare({"x": (4, 32)}, workspaces)
        assert caught.value.code == 207007 and "lower depth" in str(caught.value)
        assert device.live_events == 0
        workspaces.close()


def test_programs_beyond_the_event_limit_ask_for_room_and_are_refused_without_it():
    spec = dataclasses.replace(ATLAS_310P, max_events=16)
    with aclpipe.open_device("sim", spec=spec) as device:
        preparer, timeline = _preparer(device, mlp(), depth=2)  # 14 events a program, at most
        workspaces = WorkspacePool(device, None, timeline=timeline)
        first = preparer.prepare({"x": (4, 32)}, workspaces)
        assert 0 < device.live_events <= 14
        asked = []

        def no_room() -> bool:
            asked.append(True)
            return False

        with pytest.raises(BackendError, match="held by programs still in use") as caught:
            preparer.prepare({"x": (8, 32)}, workspaces, no_room)
        assert caught.value.code == 207007 and asked

        def close_first() -> bool:
            first.close()
            return True

        second = preparer.prepare({"x": (8, 32)}, workspaces, close_first)
        assert first.slots == [] and len(second.slots) == 2
        second.close()
        workspaces.close()
        preparer.close()


def test_a_capture_that_runs_out_of_streams_part_way_leaves_the_program_uncaptured_and_right():
    """Streams made outside any pipeline's budget: the device refuses a model stream part way
    through the slots; the slots captured so far are undone and the program runs from launch
    tables, right, with nothing of the capture left behind."""
    with aclpipe.open_device("sim", max_streams=16) as device:
        preparer, timeline = _preparer(device, mlp(), depth=3, streams=1)  # 6 streams
        outside = [device.create_stream() for _ in range(4)]  # not booked: the budget thinks 10 are free
        workspaces = WorkspacePool(device, None, timeline=timeline)
        events = device.live_events
        program = preparer.prepare({"x": (4, 32)}, workspaces)
        assert program.starved and all(slot.graph is None and slot.body is not None for slot in program.slots)
        assert device.live_events - events == program.event_count  # no fork or join left over
        assert preparer.budget.held == 0  # nothing booked for a capture that did not happen
        program.close()
        workspaces.close()
        preparer.close()
        for stream in outside:
            stream.close()
