"""Plans as text (:meth:`Plan.summary`) and as Graphviz DOT (:meth:`Plan.to_dot`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .plan import Plan, PlannedNode

__all__ = ["format_bytes", "plan_dot", "plan_summary"]

_COLOURS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
            "#9c755f", "#bab0ac")


def format_bytes(count: int) -> str:
    """``1536`` -> ``"1.5 KiB"``."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _stream_label(plan: Plan, stream: int) -> str:
    if stream == plan.h2d_stream:
        return f"stream {stream} (H2D)"
    if stream == plan.d2h_stream:
        return f"stream {stream} (D2H)"
    return f"stream {stream} (compute)"


def _node_line(plan: Plan, node: PlannedNode) -> str:
    text = f"  #{node.index:<3} {node.name} ({node.op})"
    if node.waits:
        text += f"  waits [{', '.join(plan.nodes[w].name for w in node.waits)}]"
    if node.record:
        text += "  record"
    return text


def _host_value(array: np.ndarray) -> str:
    return str(array.item()) if array.ndim == 0 else np.array2string(array, separator=", ", threshold=16)


def plan_summary(plan: Plan) -> str:
    """A few lines: streams, events and waits, arena against its lower bound."""
    ratio = plan.arena_size / plan.lower_bound if plan.lower_bound else 1.0
    lines = [
        f"plan {plan.name!r}: {len(plan.nodes)} nodes on {plan.num_streams} compute stream(s), "
        f"H2D on stream {plan.h2d_stream}, D2H on stream {plan.d2h_stream}",
        f"sync: {plan.num_events} event(s) recorded, {plan.num_waits} wait(s) "
        f"(one wait per cross-stream edge would be {plan.cross_stream_edges})",
        f"memory: arena {format_bytes(plan.arena_size)} per slot, live-set lower bound "
        f"{format_bytes(plan.lower_bound)} ({ratio:.2f}x), one buffer per value {format_bytes(plan.naive_bytes)}, "
        f"pieces of ALIGN_UP(len, {plan.arena_rule.size_alignment}) + {plan.arena_rule.padding} B at offsets "
        f"aligned to {plan.alignment} B",
    ]
    if plan.host_values:
        values = ", ".join(f"{name}={_host_value(array)}" for name, array in plan.host_values.items())
        lines.append(f"host values (specialized for these contents; not copied to the device): {values}")
    for stream in range(plan.stream_count):
        nodes = plan.nodes_on(stream)
        waits = sum(len(n.waits) for n in nodes)
        records = sum(n.record for n in nodes)
        lines.append(f"{_stream_label(plan, stream)}: {len(nodes)} node(s), {waits} wait(s), {records} record(s)")
        lines.extend(_node_line(plan, node) for node in nodes)
    lines.append("values:")
    width = max((len(name) for name in plan.values), default=0)
    for name, value in sorted(plan.values.items(), key=lambda item: (item[1].arena_offset is None,
                                                                     item[1].arena_offset or 0, item[0])):
        where = f"offset {value.arena_offset:>10}" if value.arena_offset is not None else \
            f"view of {value.base}" if value.kind == "view" else "own buffer"
        size = format_bytes(value.nbytes)
        lines.append(f"  {name:<{width}}  {value.kind:<10}  {where:<18}  {size:>10}  {value.desc}")
    return "\n".join(lines)


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _dot_label(node: PlannedNode, note: str | None) -> str:
    lines = [node.name, node.op] if note is None else [node.name, node.op, note]
    return '"' + "\\n".join(_quote(line)[1:-1] for line in lines) + '"'  # DOT's own line break


def plan_dot(plan: Plan, notes: Mapping[str, str] | None = None) -> str:
    """The plan as Graphviz DOT: a cluster per stream, data edges solid, event waits dashed.

    ``notes`` (node name -> text) adds a last line to those nodes' labels: how a reader of the
    plan annotates it (:func:`aclpipe.trace.plan_dot` puts each node's measured time there)
    without editing the DOT text."""
    notes = notes or {}
    lines = [f"digraph {_quote(plan.name)} {{", "  rankdir=TB;", '  node [shape=box, style="rounded,filled", '
             'fontname="Helvetica", fontsize=10];']
    for stream in range(plan.stream_count):
        colour = _COLOURS[stream % len(_COLOURS)]
        lines.append(f"  subgraph cluster_{stream} {{")
        lines.append(f"    label={_quote(_stream_label(plan, stream))}; color={_quote(colour)};")
        for node in plan.nodes_on(stream):
            label = _dot_label(node, notes.get(node.name))
            lines.append(f"    n{node.index} [label={label}, "
                         f"fillcolor={_quote(colour + '40')}, color={_quote(colour)}];")
        lines.append("  }")
    writers = {value: node.index for node in plan.nodes for value in node.outputs if value is not None}
    for node in plan.nodes:
        sources = {writers.get(plan.values[v].base or v) for v in node.inputs if v is not None} - {None}
        for source in sorted(s for s in sources if s is not None):
            lines.append(f"  n{source} -> n{node.index};")
        for producer in node.waits:
            lines.append(f'  n{producer} -> n{node.index} [style=dashed, color="#d62728", constraint=false, '
                         'label="event"];')
    lines.append("}")
    return "\n".join(lines) + "\n"
