"""Plans replayed on the simulator with the sanitizer on: the waits and the shared arena bytes
must be enough for every access to be ordered, and the numbers must match numpy.

The replay below is the smallest faithful executor of a :class:`Plan` (the pipeline adds
executor caching, workspace pools and completion); it exists to test the plan's contract.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import aclpipe
from aclpipe.graph import Graph
from aclpipe.plan import Plan, make_plan

SHAPE = (4, 4)


def replay(plan: Plan, device: aclpipe.Device, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    streams = [device.create_stream() for _ in range(plan.stream_count)]
    arena = device.alloc(max(plan.arena_size, plan.alignment), label="arena")
    constants = {name: device.upload(array) for name, array in plan.constants.items()}
    kept: list[Any] = []  # workspaces and host buffers stay alive until the end

    def storage(value: str) -> tuple[Any, int]:
        """The buffer holding ``value``'s storage and the byte offset of the storage in it."""
        base = plan.values[plan.values[value].base or value]
        if base.kind == "constant":
            return constants[base.name], 0
        assert base.arena_offset is not None
        return arena, base.arena_offset

    def element_offset(value: str) -> int:
        desc = plan.values[value].desc
        return desc.offset * desc.dtype.itemsize

    events: dict[int, aclpipe.Event] = {}
    results: dict[str, Any] = {}
    for node in plan.nodes:
        stream = streams[node.stream]
        for producer in node.waits:
            stream.wait(events[producer])
        if node.op == "H2D":
            array = np.ascontiguousarray(feeds[node.attrs["input"]])
            host = device.alloc_host(max(array.nbytes, 1))
            host.numpy()[: array.nbytes] = array.reshape(-1).view(np.uint8)
            kept.append(host)
            buffer, offset = storage(node.outputs[0])
            stream.memcpy(buffer, host, array.nbytes, dst_offset=offset + element_offset(node.outputs[0]))
        elif node.op == "D2H":
            desc = plan.values[node.inputs[0]].desc
            host = device.alloc_host(max(desc.nbytes, 1))
            buffer, offset = storage(node.inputs[0])
            stream.memcpy(host, buffer, desc.nbytes, src_offset=offset + element_offset(node.inputs[0]))
            results[node.attrs["output"]] = (host, desc)
        else:
            def bound(value: str | None) -> Any:
                if value is None:
                    return None
                buffer, offset = storage(value)
                return plan.values[value].desc.at(buffer.address + offset)

            executor = device.backend.op_prepare(node.op, [bound(v) for v in node.inputs],
                                                 [bound(v) for v in node.outputs], dict(node.attrs))
            workspace = device.alloc(executor.workspace_size) if executor.workspace_size else None
            kept.append(workspace)
            device.backend.op_launch(executor, workspace.address if workspace else 0, executor.workspace_size,
                                     stream.handle, {"node": node.name})
        if node.record:
            events[node.index] = stream.record()
    for stream in streams:
        stream.sync()
    return {name: host.numpy(desc.dtype.numpy, desc.shape).copy() for name, (host, desc) in results.items()}


@st.composite
def random_graphs(draw: st.DrawFn) -> tuple[Graph, dict[str, np.ndarray]]:
    g = Graph("random")
    values = [g.input(f"x{i}", shape=SHAPE) for i in range(draw(st.integers(1, 3)))]
    reference = {v.name: np.random.default_rng(i).standard_normal(SHAPE).astype(np.float32)
                 for i, v in enumerate(values)}
    feeds = dict(reference)
    used: set[str] = set()
    for _ in range(draw(st.integers(1, 12))):
        op = draw(st.sampled_from(["Relu", "Neg", "Add", "Mul", "Transpose", "Reshape"]))
        a = draw(st.sampled_from(values))
        used.add(a.name)
        if op in ("Add", "Mul"):
            b = draw(st.sampled_from(values))
            used.add(b.name)
            out = g.op(op, a, b)
            ref = reference[a.name] + reference[b.name] if op == "Add" else reference[a.name] * reference[b.name]
        elif op == "Transpose":
            out, ref = g.transpose(a, dim0=0, dim1=1), reference[a.name].T
        elif op == "Reshape":
            out, ref = g.reshape(a, shape=[4, 4]), reference[a.name].reshape(SHAPE)
        else:
            out = g.op(op, a)
            ref = np.maximum(reference[a.name], 0) if op == "Relu" else -reference[a.name]
        assert isinstance(out, aclpipe.graph.Value)
        values.append(out)
        reference[out.name] = ref
    outputs = [v for v in values[1:] if v.name not in used] or [values[-1]]
    for v in outputs:
        g.output(f"out_{v.name}", v)
    return g, {**feeds, **{f"out_{v.name}": reference[v.name] for v in outputs}}


@settings(deadline=None, max_examples=25)
@given(random_graphs(), st.integers(1, 4))
def test_random_plans_replay_cleanly_under_the_sanitizer(case: tuple[Graph, dict[str, np.ndarray]],
                                                         max_streams: int) -> None:
    graph, expected = case
    plan = make_plan(graph.bind(**dict.fromkeys(graph.inputs, SHAPE)), streams=max_streams)
    device = aclpipe.open_device("sim", sanitizer=True)
    try:
        results = replay(plan, device, {name: expected[name] for name in graph.inputs})
    finally:
        device.close()
    for name in graph.outputs:
        np.testing.assert_allclose(results[name], expected[name], rtol=1e-6)
