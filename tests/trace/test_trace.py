"""Timeline traces: the simulator's recorder, overlap figures, Chrome JSON, Gantt PNG, plan DOT."""

from __future__ import annotations

import dataclasses
import itertools
import json

import anyio
import numpy as np
import pytest

import aclpipe
from aclpipe.errors import ExecutionError
from aclpipe.trace import Trace, TraceRecord, plan_dot, record_trace

RUNS = 3


def branchy_graph() -> aclpipe.Graph:
    """Two independent branches joined by an Add: two compute streams and a few events."""
    rng = np.random.default_rng(0)
    g = aclpipe.Graph("branchy")
    x = g.input("x", ("batch", 16))
    left = g.relu(g.matmul(x, g.constant("wl", rng.standard_normal((16, 8)).astype(np.float32))), name="left")
    right = g.tanh(g.matmul(x, g.constant("wr", rng.standard_normal((16, 8)).astype(np.float32))), name="right")
    g.output("y", g.add(left, right, name="join"))
    return g


def traced_runs(device: aclpipe.Device, runs: int = RUNS, **options: object) -> tuple[Trace, aclpipe.Plan]:
    graph = branchy_graph()
    batches = [{"x": np.full((4, 16), i, np.float32)} for i in range(runs)]

    async def main() -> tuple[Trace, aclpipe.Plan]:
        async with aclpipe.Pipeline(graph, device, streams=2, depth=2, **options) as pipe:
            plan = pipe.prepare(x=(4, 16))
            with record_trace(device) as recording:
                async for _ in pipe.stream(batches):
                    pass
            assert recording.trace is not None
            return recording.trace, plan

    return anyio.run(main)


def record(stream: str, kind: str, engine: str | None, start: float, end: float, *, run: int | None = 1,
           node: str | None = None, op: str | None = None, event: str | None = None) -> TraceRecord:
    return TraceRecord(stream, kind, node or kind, engine, node, op, run, start, start, end, event=event)


# -- the recorder ------------------------------------------------------------------------------------
def test_recorder_is_off_until_a_trace_begins(device):
    assert device.backend.recorder is None
    with pytest.raises(aclpipe.BackendError, match="trace_end without trace_begin"):
        device.backend.trace_end()


def test_trace_holds_every_launch_of_every_run_in_stream_order(device):
    trace, plan = traced_runs(device)
    launches = [r for r in trace.engine_tasks() if r.run is not None]
    for run in {r.run for r in launches}:
        names = sorted(r.node for r in launches if r.run == run)
        assert names == sorted(node.name for node in plan.nodes)  # every node once, copies included
    assert len({r.run for r in launches}) == RUNS
    for record_ in trace:
        assert record_.queued <= record_.start <= record_.end
        assert record_.status == "ok"
    position = {node.name: node.index for node in plan.nodes}
    for stream in trace.streams:  # a stream executes its nodes of one run in plan order
        for run in range(1, RUNS + 2):
            nodes = [position[r.node] for r in trace.on_stream(stream) if r.run == run and r.node in position]
            assert nodes == sorted(nodes)
    kernel = next(r for r in launches if r.node == "join")
    assert (kernel.kind, kernel.op, kernel.engine) == ("kernel", "Add", "compute") and kernel.cores >= 1
    assert {trace.stream_role(s) for s in trace.streams} >= {"H2D", "D2H", "compute"}
    assert trace.stats().counts["record"] >= plan.num_events * RUNS


def _two_copies_the_first_failing(device, stream):
    with record_trace(device) as recording:
        device.inject_fault("copy")
        buffer = device.alloc(64)
        host = device.alloc_host(64)
        stream.memcpy(buffer, host, 64)
        stream.memcpy(host, buffer, 64)
        with pytest.raises(aclpipe.BackendError):
            stream.sync()
    assert recording.trace is not None
    return [r.status for r in recording.trace if r.kind == "copy"]


def test_a_failed_task_and_the_work_a_stopped_stream_drops_are_marked(device):
    device.inject_fault("kernel", "aclnnRelu")
    with pytest.raises(ExecutionError, match="left"):
        traced_runs(device, runs=1)
    # The pipeline's own trace was lost with the exception: record fresh, smaller ones.
    # Continue-on-failure (the default) runs the later copy; stop-on-failure drops it.
    assert _two_copies_the_first_failing(device, device.create_stream()) == ["failed", "ok"]
    stopping = device.create_stream(failure_mode="stop")
    assert _two_copies_the_first_failing(device, stopping) == ["failed", "skipped"]


# -- figures -----------------------------------------------------------------------------------------
def test_stats_measure_busy_time_overlap_and_concurrency():
    trace = Trace([
        record("s2", "copy", "h2d", 0.0, 10.0, node="h2d:x"),
        record("s0", "kernel", "compute", 5.0, 20.0, node="a", op="Matmul"),
        record("s1", "kernel", "compute", 8.0, 12.0, node="b", op="Relu"),
        record("s3", "copy", "d2h", 15.0, 25.0, node="d2h:y"),
        record("s0", "record", None, 20.0, 20.0, event="e1#1"),
        record("s3", "wait", None, 12.0, 15.0, event="e1#1"),
    ])
    stats = trace.stats()
    assert stats.span == 25.0
    assert dict(stats.busy) == {"h2d": 10.0, "compute": 15.0, "d2h": 10.0}
    assert stats.share["compute"] == pytest.approx(0.6)
    assert stats.overlap == pytest.approx(10.0)  # 5..10 and 15..20
    assert stats.copy_hidden == pytest.approx(0.5)
    assert stats.max_concurrent_kernels == 2
    assert stats.run_spans[1] == (0.0, 25.0)
    lanes = trace.engine_lanes()
    assert list(lanes) == ["h2d", "compute #0", "compute #1", "d2h"]
    assert [r.node for r in lanes["compute #1"]] == ["b"]


def test_chrome_trace_has_a_lane_per_stream_and_engine_and_every_task(device):
    trace, plan = traced_runs(device)
    document = json.loads(json.dumps(trace.to_chrome()))
    events = document["traceEvents"]
    names = {(e["pid"], e["args"]["name"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    for stream in trace.streams:
        assert (1, trace.stream_label(stream)) in names
    assert {(2, f"engine {lane}") for lane in trace.engine_lanes()} <= names
    assert {name for pid, name in names if pid == 2} >= {"engine h2d", "engine compute #0", "engine d2h"}
    on_streams = [e for e in events if e["pid"] == 1 and e["ph"] != "M"]
    kernels = [e for e in on_streams if e["cat"] == "kernel"]
    assert len(kernels) == sum(1 for n in plan.nodes if n.op not in ("H2D", "D2H")) * RUNS
    assert all(e["ph"] == "X" and e["dur"] >= 0 and "op" in e["args"] for e in kernels)
    assert all(e["ph"] == "i" for e in on_streams if e["cat"] == "record")
    assert any(e["cat"] == "host_func" and e["ph"] == "X" for e in on_streams)
    for tid in {e["tid"] for e in on_streams}:  # a stream's tasks never overlap each other
        spans = sorted((e["ts"], e["ts"] + e.get("dur", 0)) for e in on_streams if e["tid"] == tid)
        assert all(end <= next_start + 1e-3 for (_, end), (next_start, _) in itertools.pairwise(spans))
    on_engines = [e for e in events if e["pid"] == 2 and e["ph"] == "X"]
    assert len(on_engines) == len(trace.engine_tasks())


def test_gantt_png_draws_every_lane_in_its_colours(device, tmp_path):
    pytest.importorskip("matplotlib")
    from matplotlib import image

    from aclpipe.trace import COPY_COLOURS

    trace, _ = traced_runs(device)
    path = trace.save_gantt(tmp_path / "gantt.png", title="branchy")
    pixels = image.imread(path)[..., :3]
    height, width = pixels.shape[:2]
    rows = len(trace.streams) + len(trace.engine_lanes())
    assert width == 1200 and height >= 40 * rows
    assert (pixels.std(axis=(0, 1)) > 0.05).all()  # not blank
    for colour in COPY_COLOURS.values():  # the copy bars are there
        rgb = np.array([int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)])
        assert (np.abs(pixels - rgb).max(axis=-1) < 0.02).sum() > 20
    with pytest.raises(ValueError, match="empty"):
        Trace([]).save_gantt(tmp_path / "empty.png")


def test_gantt_outlines_a_replay_instead_of_painting_it_as_a_kernel(tmp_path):
    # A captured run's replay holds the D2H stream for the whole run: drawn as a kernel it took
    # the colour of the palette's first op (an Add, here) and read as one long Add.
    pytest.importorskip("matplotlib")
    from matplotlib import image

    from aclpipe.trace import gantt

    trace = Trace([record("s0", "kernel", "compute", 0.0, 1e-3, node="add", op="Add"),
                   record("s1", "control", None, 0.0, 4e-3, node="start ri0")])
    pixels = image.imread(trace.save_gantt(tmp_path / "replay.png"))[..., :3]

    def count(colour: str) -> int:
        rgb = np.array([int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)])
        return int((np.abs(pixels - rgb).max(axis=-1) < 0.02).sum())

    add = gantt._op_colours(trace)["Add"]
    add_hex = "#" + "".join(f"{round(channel * 255):02x}" for channel in add[:3])
    assert count(gantt._HOLD_COLOUR) > count(add_hex) > 0  # the replay (4 ms) outlined, not in the Add colour


def test_plan_dot_has_stream_clusters_event_edges_and_measured_times(device):
    trace, plan = traced_runs(device)
    dot = plan_dot(plan)
    assert dot == plan.to_dot()
    assert dot.count("subgraph cluster_") == plan.stream_count
    assert dot.count("style=dashed") == plan.num_waits
    for node in plan.nodes:
        assert f"n{node.index} [label=\"{node.name}\\n{node.op}\"" in dot
    assert "n0 -> " in dot  # the H2D copy feeds the first layer
    timed = plan_dot(plan, trace)
    assert timed.count(" us\"") == len(plan.nodes)  # every node carries its measured time
    assert timed.count("style=dashed") == plan.num_waits


def test_recording_needs_a_backend_that_can_record(device):
    # A backend whose capabilities say it cannot trace (the Ascend binding's do).
    device.backend.capabilities = dataclasses.replace(device.backend.capabilities, tracing=False)
    with pytest.raises(NotImplementedError, match="only the simulator"):
        record_trace(device)
