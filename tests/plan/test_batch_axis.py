"""The batch-axis pass: which graphs may stack requests into one run, and the node that refuses.

Hand-written graphs cover each class of op that keeps rows apart and each that mixes them;
a property test over random graphs checks the claim itself on the simulator: whenever the
verdict says batchable, one run over stacked requests gives each request exactly what it
gets alone (through a matmul, up to the last bit BLAS may round differently for one row).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import aclpipe
from aclpipe.errors import GraphError
from aclpipe.plan import BatchVerdict, batch_verdict, batchable

RNG = np.random.default_rng(23)


def weight(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def graph_of(build: Callable[[aclpipe.Graph, aclpipe.graph.Value], aclpipe.graph.Value],
             shape: tuple[int | None, ...] = (None, 8)) -> aclpipe.Graph:
    g = aclpipe.Graph("case")
    g.output("y", build(g, g.input("x", shape=shape)))
    return g


#: name -> (graph builder, input shape): graphs whose rows stay apart.
KEEP = {
    "elementwise and broadcast": (lambda g, x: g.add(g.tanh(x), g.constant("c", weight(1, 8))), (None, 8)),
    "matmul on trailing dims": (lambda g, x: g.relu(g.matmul(x, g.constant("w", weight(8, 4)))), (None, 8)),
    "batched matmul": (lambda g, x: g.matmul(x, g.constant("w", weight(4, 5))), (None, 3, 4)),
    "addmm": (lambda g, x: g.addmm(g.constant("b", weight(1, 4)), x, g.constant("w", weight(8, 4))), (None, 8)),
    "convolution and pool": (lambda g, x: g.max_pool2d(g.convolution(x, g.constant("w", weight(2, 1, 3, 3)), None,
                                                                       stride=[1, 1], padding=[1, 1]),
                                                         kernelSize=[2, 2], stride=[2, 2]), (None, 1, 6, 6)),
    "layer norm over trailing dims": (lambda g, x: g.layer_norm(x, None, None, normalizedShape=[8]), (None, 8)),
    "softmax over a feature dim": (lambda g, x: g.softmax(x, dim=-1), (None, 8)),
    "cumsum over a feature dim": (lambda g, x: g.cumsum(x, dim=1), (None, 8)),
    "reduction over feature dims": (lambda g, x: g.reduce_sum(x, dims=[1, 2], keepDims=False), (None, 2, 4)),
    "reshape keeping dim 0": (lambda g, x: g.reshape(x, shape=[-1, 8]), (None, 2, 4)),
    "transpose out and back": (lambda g, x: g.transpose(g.cumsum(g.transpose(x, dim0=0, dim1=1), dim=0),
                                                        dim0=0, dim1=1), (None, 8)),
    "slice and cat on features": (lambda g, x: g.cat([g.slice(x, dim=1, start=0, end=4), x], dim=1), (None, 8)),
    "index select on features": (lambda g, x: g.index_select(x, g.constant("i", np.array([3, 1], np.int64)),
                                                             dim=1), (None, 8)),
    "topk over features": (lambda g, x: g.topk(x, k=2, dim=-1)[0], (None, 8)),
    "einsum keeping the batch letter": (lambda g, x: g.einsum([x, g.constant("w", weight(8, 3))],
                                                              equation="bi,ij->bj"), (None, 8)),
    "group norm and pad on features": (lambda g, x: g.pad_v3(g.group_norm(x, None, None, group=2)[0],
                                                             paddings=[0, 0, 0, 0, 1, 1]), (None, 4, 3)),
    "expand and tril below the batch": (lambda g, x: g.tril(g.expand(x, size=[-1, 3, 4, 4])), (None, 1, 4, 4)),
    "gather rows by a batched index": (lambda g, x: g.gather(x, g.cast(g.abs(g.floor(x)), dtype="int64"), dim=1),
                                       (None, 1)),
}

#: name -> (graph builder, input shape, breaking node, words of the reason).
BREAK = {
    "cumsum over dim 0": (lambda g, x: g.cumsum(x, dim=0, name="cs"), (None, 8), "cs", "accumulates along dim 0"),
    "softmax over dim 0": (lambda g, x: g.softmax(x, dim=0, name="sm"), (None, 8), "sm", "normalizes along dim 0"),
    "reduction over dim 0": (lambda g, x: g.reduce_sum(x, dims=[0], keepDims=True, name="sum"), (None, 8), "sum",
                             "reduces the batch axis 0"),
    "mean over every dim": (lambda g, x: g.mean(x, name="mean"), (None, 8), "mean", "reduces the batch axis"),
    "matmul contracting the batch": (lambda g, x: g.matmul(g.transpose(x, dim0=0, dim1=1), x, name="gram"),
                                     (None, 8), "gram", "contracts the batch axis"),
    "matmul of rows with columns": (lambda g, x: g.matmul(x, g.transpose(x, dim0=0, dim1=1), name="outer"),
                                    (None, 8), "outer", "rows of one request with columns of another"),
    "reshape folding the batch": (lambda g, x: g.reshape(x, shape=[-1], name="flat"), (None, 8), "flat",
                                  "folds the batch axis"),
    "reshape keeping dim 0 at one size only": (lambda g, x: g.reshape(x, shape=[3, -1], name="r3"), (None, 6),
                                               "r3", "folds the batch axis"),
    "transpose moving the batch to an output": (lambda g, x: g.transpose(g.relu(x), dim0=0, dim1=1, name="t"),
                                                (None, 8), "t", "moves the batch to axis 1"),
    "gather of batch rows": (lambda g, x: g.index_select(x, g.constant("i", np.array([0], np.int64)), dim=0,
                                                         name="pick"), (None, 8), "pick", "picks along the batch"),
    "a triangle mask over the batch": (lambda g, x: g.tril(x, name="tri"), (None, 8), "tri", "last two dims"),
    "an op without a rule": (lambda g, x: g.op("DynamicQuantize", x, name="dq")[0], (None, 8), "dq", "no rule"),
    "einsum summing the batch letter": (lambda g, x: g.einsum([x, x], equation="bi,bj->ij", name="es"), (None, 8),
                                        "es", "sums over the batch letter"),
}


@pytest.mark.parametrize("name", KEEP)
def test_graphs_whose_rows_stay_apart_are_batchable(name):
    build, shape = KEEP[name]
    verdict = batchable(graph_of(build, shape))
    assert verdict == BatchVerdict(True) and str(verdict) == "yes", verdict


@pytest.mark.parametrize("name", BREAK)
def test_the_first_node_that_mixes_rows_is_named(name):
    build, shape, node, words = BREAK[name]
    verdict = batchable(graph_of(build, shape))
    assert not verdict.ok and verdict.node == node and words in verdict.reason, verdict
    assert str(verdict).startswith(f"no (node {node!r}: ")


def test_graphs_that_cannot_stack_say_why():
    fixed = graph_of(lambda g, x: g.relu(x), (4, 8))
    assert "fixed first dim 4" in batchable(fixed).reason
    constant_out = aclpipe.Graph("c")
    constant_out.input("x", shape=(None, 8))
    constant_out.output("y", constant_out.relu(constant_out.constant("c", weight(2, 8))))
    assert "does not depend on the batch" in batchable(constant_out).reason
    wide = graph_of(lambda g, x: g.add(x, g.constant("c", weight(3, 8))), (None, 8))  # binds at 3 rows only
    assert not batchable(wide).ok


def test_dynamic_trailing_dims_take_a_request_shape():
    g = graph_of(lambda g, x: g.softmax(x, dim=-1), (None, None))
    with pytest.raises(ValueError, match="pass the shape of one request"):
        batchable(g)
    assert batchable(g, x=(1, 16)).ok
    assert batchable(g, x=np.zeros((2, 16), np.float32)).ok


def test_the_pass_needs_a_batch_of_two_rows_or_more():
    bound = graph_of(lambda g, x: g.relu(x)).bind(x=(1, 8))
    with pytest.raises(ValueError, match="at least 2"):
        batch_verdict(bound, 1)
    assert batch_verdict(graph_of(lambda g, x: g.relu(x)).bind(x=(2, 8)), 2).ok


# -- the claim itself, on the simulator -----------------------------------------------------------------

UNARY = ("tanh", "relu", "neg", "exp")


@st.composite
def random_graphs(draw: st.DrawFn) -> aclpipe.Graph:
    """Small graphs over x [B, 4, 4] and z [B, 4] of elementwise, matmul, reduction, cumsum,
    softmax, transpose, flatten and slice nodes with random dims (many mix the rows, many do not)."""
    g = aclpipe.Graph("random")
    values = [g.input("x", shape=(None, 4, 4)), g.input("z", shape=(None, 4))]
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(("unary", "add", "mul", "matmul", "weights", "reduce", "cumsum", "softmax",
                                     "transpose", "flatten", "slice")))
        a, b = draw(st.sampled_from(values)), draw(st.sampled_from(values))
        rank = len(a.shape or ())
        if kind == "transpose" and rank < 2:
            continue
        dim = draw(st.integers(-rank, rank - 1)) if rank else 0
        try:
            values.append(_node(g, kind, a, b, dim, draw))
        except GraphError:  # shapes that do not fit: that node is not added
            continue
    outputs = [values[-1], *draw(st.lists(st.sampled_from(values[2:] or values), max_size=1))]
    for index, value in enumerate(dict.fromkeys(outputs)):
        g.output(f"y{index}", value)
    return g


def _node(g: aclpipe.Graph, kind: str, a: aclpipe.graph.Value, b: aclpipe.graph.Value, dim: int,
          draw: st.DrawFn) -> aclpipe.graph.Value:
    if kind == "unary":
        return g.op(draw(st.sampled_from(UNARY)).capitalize(), a)
    if kind in ("add", "mul"):
        return g.add(a, b) if kind == "add" else g.mul(a, b)
    if kind == "matmul":
        return g.matmul(a, b)
    if kind == "weights":
        return g.matmul(a, g.constant(f"w{len(g.constants)}", weight(4, 4)))
    if kind == "reduce":
        return g.reduce_sum(a, dims=[dim], keepDims=draw(st.booleans()))
    if kind == "cumsum":
        return g.cumsum(a, dim=dim)
    if kind == "softmax":
        return g.softmax(a, dim=dim)
    if kind == "flatten":
        return g.flatten(a, startDim=dim)
    if kind == "slice":
        return g.slice(a, dim=dim, start=0, end=2)
    rank = len(a.shape or ())
    return g.transpose(a, dim0=dim, dim1=draw(st.integers(-rank, rank - 1)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph=random_graphs(), rows=st.lists(st.integers(1, 3), min_size=2, max_size=4), seed=st.integers(0, 99))
def test_batched_runs_equal_runs_alone_whenever_the_verdict_says_batchable(graph, rows, seed):
    verdict = batchable(graph)
    assume(verdict.ok)
    rng = np.random.default_rng(seed)
    requests = [{"x": rng.standard_normal((n, 4, 4)).astype(np.float32),
                 "z": rng.standard_normal((n, 4)).astype(np.float32)} for n in rows]
    with aclpipe.Pipeline(graph, "sim") as pipe:
        alone = [pipe.run_sync(request) for request in requests]
        joined = pipe.run_sync({name: np.concatenate([r[name] for r in requests]) for name in ("x", "z")})
    # Exact, except through a matmul: BLAS takes another kernel for one row than for several (gemv,
    # gemm), which may round a row's sums differently in the last bit.  Another request's data
    # leaking in is many orders of magnitude larger than that.
    exact = not any(node.op == "Matmul" for node in graph.nodes)
    start = 0
    for count, answer in zip(rows, alone):
        for name, value in answer.items():
            part = joined[name][start:start + count]
            if exact:
                np.testing.assert_array_equal(part, value, err_msg=name)
            else:
                np.testing.assert_allclose(part, value, rtol=1e-5, atol=1e-6, err_msg=name)
        start += count
