"""Graphs the pipeline tests run, and a plain numpy evaluation of any graph built from them.

:func:`reference` walks a :class:`Graph` node by node with numpy, independent of the
operator catalog's kernels, so a pipeline result is checked against what the graph means,
not against the code that computed it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import numpy as np
import pytest

import aclpipe
from aclpipe.graph import Graph

__all__ = [
    "FAILURES",
    "NODE_NAMES",
    "assert_outputs",
    "assert_stream_fails_in_order",
    "live_device_state",
    "mixed40",
    "mlp",
    "reference",
    "then_fails",
    "towers",
]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _softmax(x: np.ndarray, dim: int) -> np.ndarray:
    shifted = np.exp(x - x.max(axis=dim, keepdims=True))
    return shifted / shifted.sum(axis=dim, keepdims=True)


def _layer_norm(x: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None,
                attrs: Mapping[str, Any]) -> np.ndarray:
    axes = tuple(range(x.ndim - len(attrs["normalizedShape"]), x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = x.var(axis=axes, keepdims=True)
    out = (x - mean) / np.sqrt(var + attrs.get("eps", 1e-5))
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out


def _split(x: np.ndarray, attrs: Mapping[str, Any]) -> list[np.ndarray]:
    dim = attrs.get("dim", 0)
    sections = attrs.get("splitSections")
    if sections is None:
        size = attrs["splitSize"]
        sections = [min(size, x.shape[dim] - start) for start in range(0, x.shape[dim], size)]
    return np.split(x, np.cumsum(sections)[:-1], axis=dim)


_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "Relu": lambda x: np.maximum(x, 0), "Neg": np.negative, "Abs": np.abs, "Exp": np.exp,
    "Tanh": np.tanh, "Sigmoid": _sigmoid,
}


def _node(op: str, args: list[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    if op in _UNARY:
        return [_UNARY[op](args[0])]
    if op in ("Add", "Sub"):
        other = attrs.get("alpha", 1) * args[1]
        return [args[0] + other if op == "Add" else args[0] - other]
    if op == "Mul":
        return [args[0] * args[1]]
    if op == "Maximum":
        return [np.maximum(args[0], args[1])]
    if op == "Matmul":
        return [args[0] @ args[1]]
    if op == "Softmax":
        return [_softmax(args[0], attrs.get("dim", -1))]
    if op == "LayerNorm":
        padded = args + [None] * (3 - len(args))
        return [_layer_norm(padded[0], padded[1], padded[2], attrs)]
    if op == "Transpose":
        return [np.swapaxes(args[0], attrs.get("dim0", 0), attrs.get("dim1", 1))]
    if op == "Reshape":
        return [args[0].reshape(attrs["shape"])]
    if op == "Cat":
        return [np.concatenate(args, axis=attrs.get("dim", 0))]
    if op == "Split":
        return _split(args[0], attrs)
    raise NotImplementedError(f"the numpy reference has no {op}")


def reference(graph: Graph, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Evaluate ``graph`` on ``inputs`` with numpy in float64; returns ``{output: array}``."""
    values: dict[str, Any] = {name: np.asarray(array, np.float64) for name, array in inputs.items()}
    values.update({name: np.asarray(array, np.float64) for name, array in graph.constants.items()})
    for node in graph.nodes:
        args = [values[name] if name is not None else None for name in node.inputs]
        while args and args[-1] is None:
            args.pop()
        results = _node(node.op, args, node.attrs)
        for name, result in zip([n for n in node.outputs if n is not None], results):
            values[name] = result
    return {output: values[value] for output, value in graph.outputs.items()}


def assert_outputs(got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray], *, rtol: float = 1e-4) -> None:
    """Every output present, of the right shape, finite, and close to the float64 reference."""
    assert set(got) == set(want), (sorted(got), sorted(want))
    for name, expected in want.items():
        actual = got[name]
        assert actual.shape == expected.shape, (name, actual.shape, expected.shape)
        assert np.isfinite(actual).all(), f"output {name!r} holds non-finite values (poisoned or skipped work)"
        scale = max(1.0, float(np.abs(expected).max(initial=0.0)))
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * scale, err_msg=f"output {name!r}")


def live_device_state(device: aclpipe.Device) -> tuple[int, set[int], set[int]]:
    """Device bytes in use and the starts of live device allocations and pinned host buffers."""
    memory = device.backend.memory
    return (device.mem_info().used, {a.start for a in memory.live_allocations()},
            {a.start for a in memory.live_host_buffers()})


def mlp(batch: int | str | None = None, width: int = 32, seed: int = 0) -> Graph:
    """x[batch, width] -> matmul, relu, matmul, softmax."""
    rng = np.random.default_rng(seed)
    g = Graph("mlp")
    x = g.input("x", shape=(batch, width))
    w1 = g.constant("w1", (rng.standard_normal((width, 2 * width)) / np.sqrt(width)).astype(np.float32))
    w2 = g.constant("w2", (rng.standard_normal((2 * width, 10)) / np.sqrt(2 * width)).astype(np.float32))
    hidden = g.relu(g.matmul(x, w1))
    g.output("y", g.softmax(g.matmul(hidden, w2), dim=-1))
    return g


#: Node names of :func:`mixed40`: fixed width, so no name is a substring of another.
NODE_NAMES = tuple(f"n{i:02d}" for i in range(40))


def mixed40(width: int = 16, seed: int = 1, batch: int | None = 8) -> Graph:
    """Forty compute nodes: five blocks of a matmul, a fork into two branches, a join and a
    normalization, with a skip connection, so that both chains and parallel branches occur.
    Rows are independent (``batch=None``: any batch size)."""
    rng = np.random.default_rng(seed)
    g = Graph("mixed40")
    h = g.input("x", shape=(batch, width))
    names = iter(NODE_NAMES)
    for block in range(5):
        weight = g.constant(f"w{block}", (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32))
        a = g.matmul(h, weight, name=next(names))
        b = g.tanh(a, name=next(names))
        c = g.sigmoid(b, name=next(names))  # branch one
        d = g.neg(b, name=next(names))  # branch two
        e = g.abs(d, name=next(names))
        f = g.mul(c, e, name=next(names))  # join
        s = g.add(f, h, name=next(names))  # skip connection from the block input
        if block % 2:
            h = g.softmax(s, dim=-1, name=next(names))
        else:
            gamma = g.constant(f"gamma{block}", rng.uniform(0.5, 1.5, width).astype(np.float32))
            h = g.layer_norm(s, gamma, normalizedShape=[width], name=next(names))
    g.output("y", h)
    g.output("mid", s)  # a second output read while later nodes may still run
    return g


def towers(count: int = 4, width: int = 64, depth: int = 4, batch: int = 32, seed: int = 2) -> Graph:
    """``count`` independent towers of matmul+relu over one input, summed at the end."""
    rng = np.random.default_rng(seed)
    g = Graph(f"towers{count}")
    x = g.input("x", shape=(batch, width))
    tops = []
    for tower in range(count):
        h = x
        for layer in range(depth):
            weight = rng.standard_normal((width, width)) / np.sqrt(width)
            h = g.relu(g.matmul(h, g.constant(f"t{tower}w{layer}", weight.astype(np.float32))))
        tops.append(h)
    total = tops[0]
    for top in tops[1:]:
        total = g.add(total, top)
    g.output("y", total)
    return g


#: What ``then_fails`` can end a stream's batches with, and the error each gives (type, message).
FAILURES: dict[str, tuple[type[Exception], str]] = {
    "bad batch": (aclpipe.GraphError, "fixed at"), "not a dict": (TypeError, "dicts of inputs"),
    "iterator": (RuntimeError, "the producer broke")}


def then_fails(good: list[dict[str, np.ndarray]], wrong: np.ndarray, failure: str) -> Any:
    """``good``, then what ``failure`` (a key of :data:`FAILURES`) names: a batch ``{"x": wrong}``
    of the wrong width, ``wrong`` itself (not a dict), or the batch iterator raising; after the
    first two, one more good batch that must never run."""
    if failure == "bad batch":
        return [*good, {"x": wrong}, good[0]]
    if failure == "not a dict":
        return [*good, wrong, good[0]]

    async def produce() -> AsyncIterator[dict[str, np.ndarray]]:
        for item in good:
            yield item
        raise RuntimeError("the producer broke")

    return produce()


async def assert_stream_fails_in_order(pipe: aclpipe.Pipeline, graph: Graph, good: list[dict[str, np.ndarray]],
                                       wrong: np.ndarray, failure: str) -> None:
    """``pipe.stream`` over :func:`then_fails`: the results of ``good`` come first, in order
    and right, then the failure's error; nothing is left in flight."""
    error, match = FAILURES[failure]
    results = []
    with pytest.raises(error, match=match):
        async for out in pipe.stream(then_fails(good, wrong, failure)):
            results.append(out)
    assert len(results) == len(good)
    for got, given in zip(results, good):
        assert_outputs(got, reference(graph, given))
    assert pipe.stats().in_flight == 0
