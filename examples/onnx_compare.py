"""Import an ONNX model, run it on the simulated NPU, and compare every output with onnxruntime.

For each input signature it prints what the import made of the model (ONNX nodes -> catalog
nodes after shape folding, kernel launches, constants), the plan (streams, events, activation
arena against its lower bound), and per output the largest error relative to the output's
scale against onnxruntime (onnx's reference evaluator when onnxruntime is not installed).
Exits 1 when an output differs by more than ``--tolerance``.

Run::

    python examples/onnx_compare.py model.onnx --shape x=2,3,224,224 --shape x=1,3,224,224
    python examples/onnx_compare.py model.onnx --dim batch=4 --dim seq=16   # named dynamic dims
    python examples/onnx_compare.py --zoo bert_opset14 --streams 1 --streams 4  # graphs/onnx_zoo
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import anyio
import numpy as np
import onnx

import aclpipe
from aclpipe.onnx.importer import OnnxGraph, load_onnx

GRAPHS = Path(__file__).resolve().parent.parent / "graphs"
Feeds = dict[str, np.ndarray]


def peer(model: onnx.ModelProto) -> tuple[str, Callable[[Feeds], list[np.ndarray]]]:
    """onnxruntime when installed, else onnx.reference: a function feeds -> outputs."""
    try:
        import onnxruntime
    except ImportError:
        from onnx.reference import ReferenceEvaluator

        evaluator = ReferenceEvaluator(model)
        return "onnx.reference", lambda feeds: [np.asarray(v) for v in evaluator.run(None, feeds)]
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    session = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return f"onnxruntime {onnxruntime.__version__}", lambda feeds: [np.asarray(v) for v in session.run(None, feeds)]


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    """``max |got - want| / max |want|`` (exact match for integer outputs gives 0)."""
    if got.shape != want.shape:
        return float("inf")
    if not got.size:
        return 0.0
    difference = np.abs(got.astype(np.float64) - want.astype(np.float64)).max()
    return float(difference / max(float(np.abs(want.astype(np.float64)).max()), 1e-30))


def draw_feeds(graph: OnnxGraph, dims: dict[str, int], shapes: dict[str, tuple[int, ...]], seed: int) -> Feeds:
    """Random inputs: ``shapes`` where given, else declared dims with named ones from ``dims`` (unknown: 1)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, spec in graph.inputs.items():
        shape = shapes.get(name) or tuple(d if isinstance(d, int) else dims.get(str(d), 1) for d in spec.shape)
        if spec.dtype.is_floating:
            feeds[name] = rng.standard_normal(shape).astype(spec.dtype.numpy)
        elif spec.dtype.name == "bool":
            feeds[name] = rng.random(shape) < 0.5
        else:  # token ids and masks: small non-negative integers
            feeds[name] = rng.integers(0, 2 if "mask" in name else 32, shape).astype(spec.dtype.numpy)
    return feeds


def describe(graph: OnnxGraph, feeds: Feeds, streams: int) -> str:
    shapes = {name: array.shape for name, array in feeds.items()}
    specialized = graph.specialize(**shapes)
    bound = specialized.bind(**shapes)
    launches = sum(1 for node in bound.nodes if not node.is_view)
    plan = aclpipe.make_plan(bound, streams=streams)
    return (f"{len(graph.model.graph.node)} ONNX nodes -> {len(specialized.nodes)} catalog nodes "
            f"({launches} kernel launches), {len(specialized.constants)} constants; plan on {plan.num_streams} "
            f"stream(s): {plan.num_events} events, arena {plan.arena_size / 2**20:.2f} MiB "
            f"(lower bound {plan.lower_bound / 2**20:.2f} MiB)")


async def run_on_sim(graph: OnnxGraph, signatures: Sequence[Feeds], streams: int
                     ) -> tuple[list[dict[str, np.ndarray]], float]:
    device = aclpipe.open_device("sim", sanitizer=True)
    try:
        async with aclpipe.Pipeline(graph, device, streams=streams, pool_bytes=256 << 20) as pipe:
            start = time.perf_counter()
            results = [await pipe.run(**feeds) for feeds in signatures]
            return results, time.perf_counter() - start
    finally:
        device.close()


def compare(graph: OnnxGraph, model: onnx.ModelProto, signatures: list[Feeds], stream_counts: list[int],
            tolerance: float) -> bool:
    name, reference = peer(model)
    expected = [reference(feeds) for feeds in signatures]
    ok = True
    for streams in stream_counts:
        results, seconds = anyio.run(run_on_sim, graph, signatures, streams)
        print(f"\nsimulator, {streams} stream(s), sanitizer on: {len(signatures)} signature(s) in {seconds:.2f} s")
        for feeds, got, want in zip(signatures, results, expected):
            shapes = ", ".join(f"{key}{list(value.shape)}" for key, value in feeds.items())
            print(f"  {shapes}: {describe(graph, feeds, streams)}")
            for output, value in zip(model.graph.output, want):
                error = relative_error(got[output.name], value)
                verdict = "ok" if error <= tolerance else "MISMATCH"
                ok &= error <= tolerance
                print(f"    {output.name}: {got[output.name].dtype}{list(got[output.name].shape)}, "
                      f"max relative error vs {name}: {error:.2e} {verdict}")
    return ok


def _pairs(values: list[str], what: str) -> dict[str, str]:
    pairs = {}
    for value in values:
        key, separator, rest = value.partition("=")
        if not separator:
            raise SystemExit(f"--{what} takes NAME=VALUE, got {value!r}")
        pairs[key] = rest
    return pairs


def load(args: argparse.Namespace) -> tuple[onnx.ModelProto, list[Feeds] | None]:
    if args.zoo:
        sys.path.insert(0, str(GRAPHS))
        from onnx_zoo import MODELS

        if args.zoo not in MODELS:
            raise SystemExit(f"unknown zoo model {args.zoo!r}; known: {', '.join(MODELS)}")
        return MODELS[args.zoo].model, MODELS[args.zoo].feeds(args.seed)
    if args.model is None:
        raise SystemExit("give a model file or --zoo NAME")
    return onnx.load(str(args.model)), None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("model", nargs="?", type=Path, help="an .onnx file")
    parser.add_argument("--zoo", help="a model of graphs/onnx_zoo instead of a file (its own input signatures)")
    parser.add_argument("--shape", action="append", default=[], help="INPUT=d0,d1,... (repeat for signatures)")
    parser.add_argument("--dim", action="append", default=[], help="DIM=SIZE for a named dynamic dim")
    parser.add_argument("--streams", action="append", type=int, help="compute streams (repeatable; default 1 and 4)")
    parser.add_argument("--upgrade-opset", type=int, help="convert models below opset 11 to this opset first")
    parser.add_argument("--tolerance", type=float, default=1e-4, help="largest accepted relative error")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    model, signatures = load(args)
    graph = load_onnx(model, upgrade_opset=args.upgrade_opset)
    if args.upgrade_opset:
        model = graph.model  # the peer runs the same (converted) model
    print(graph)
    if signatures is None:
        dims = {key: int(value) for key, value in _pairs(args.dim, "dim").items()}
        per_input: dict[str, list[tuple[int, ...]]] = {}
        for value in args.shape:
            for key, text in _pairs([value], "shape").items():
                per_input.setdefault(key, []).append(tuple(int(d) for d in text.split(",")))
        count = max((len(shapes) for shapes in per_input.values()), default=1)
        signatures = [draw_feeds(graph, dims, {k: v[min(i, len(v) - 1)] for k, v in per_input.items()},
                                 args.seed + i) for i in range(count)]
    ok = compare(graph, model, signatures, args.streams or [1, 4], args.tolerance)
    print("\nall outputs match" if ok else "\nFAILED: some outputs differ from the peer")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
