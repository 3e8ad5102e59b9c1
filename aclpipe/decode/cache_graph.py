"""The graph a decoder's steps run: the model with its KV cache on the device.

:class:`CacheGraph` wraps the imported model (:class:`~aclpipe.onnx.OnnxGraph`) and rewrites
each specialization: every ``Cat(past, new)`` behind a present (:mod:`.kv_pattern`) becomes
CANN's ``aclnnInplaceScatterUpdate``
(:class:`~aclpipe.ops.scatter_update.InplaceScatterUpdate`, axis 2, 2-D indices) writing
``new`` into the cache in place, and the past inputs are gone.  What the attention then
reads in place of the present depends on the step:

- a decode step (``past`` > 0) reads the cache where it is: a
  :class:`~.kv_view.KvView` of its first ``batch`` slots and ``past + seq`` positions (row
  ``r`` is slot ``r``);
- a prefill (``past`` = 0) reads the new positions themselves, as the Concat of an empty past
  gave them: its rows are the joining sequences only, whatever their slots.

The step's inputs are the model's others (``input_ids``, ``attention_mask``,
``position_ids``) and :data:`KV_WRITES` ([batch, 2] int64, the scatter's indices: each row's
slot and the position its new positions go to).  Its output is ``logits``.

The scratch slot.  Each cache buffer holds ``slots + 1`` slots: the last
(:attr:`CacheGraph.scratch_slot`) belongs to no sequence and no step reads it.  A row that
writes nothing of its own (a padded row, a free slot below a decode step's batch bucket)
writes there, at position 0: CANN's op takes no negative index (it reads them unchecked), so
"no write" cannot be said with one.  Several such rows write the same place, which the op
leaves unspecified: harmless in a slot nobody reads.

The cache value each scatter writes has the same name in every specialization (the
present's, suffixed ``.cache``: :attr:`CacheGraph.cache_values`); the decoder binds each to
its layer's cache buffer (:meth:`aclpipe.Pipeline.bind_storage`), so every program of every
bucket reads and writes the one cache.  A specialization for a step of ``seq`` new tokens
after ``past`` positions is the model's for ``past_key_values.*`` of [batch, heads, past,
head_dim], ``past`` being the attention mask's width less ``seq``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from ..errors import GraphError
from ..graph import Graph
from ..graph.bound import BoundGraph, normalize_shapes
from ..onnx.onnx_graph import OnnxGraph
from .kv_pattern import KVLayout
from .kv_view import KV_VIEW

__all__ = ["CACHE_WRITE", "KV_WRITES", "CacheGraph"]

#: The input that says where each row's new positions go: (slot, position) per row, [batch, 2].
KV_WRITES = "aclpipe.kv_writes"
#: The catalog op that writes them: CANN's aclnnInplaceScatterUpdate.
CACHE_WRITE = "InplaceScatterUpdate"


class CacheGraph(Graph):
    """The decoder model with its ``Concat(past, new)`` rewritten into in-place cache writes.

    Parameters
    ----------
    model:
        The imported step model (outputs ``logits`` only: :func:`.kv_pattern.step_model`).
    layout:
        Its cache layout (:func:`.kv_pattern.read_kv_layout`).
    slots:
        Sequence slots; each cache buffer holds one more, the scratch slot (module doc).
    capacity:
        Positions per slot (each cache buffer's dim 2).
    """

    def __init__(self, model: OnnxGraph, layout: KVLayout, slots: int, capacity: int):
        super().__init__(model.name)
        self.model = model
        self.layout = layout
        self.slots = slots
        self.capacity = capacity
        #: The slot past the sequences' that rows without a write of their own write to.
        self.scratch_slot = slots
        self._pasts = {past for past, _ in layout.pairs()}
        for name, spec in model.inputs.items():
            if name not in self._pasts:
                self.input(name, spec.shape, spec.dtype)
        batch = model.inputs["input_ids"].shape[0]
        self.input(KV_WRITES, [batch if isinstance(batch, (int, str)) else None, 2], "int64")
        self._outputs_view = MappingProxyType(dict(model.outputs))
        #: Past input -> the cache value its scatter writes (what the decoder binds to its buffer).
        self.cache_values: dict[str, str] = {}
        probe_batch = batch if isinstance(batch, int) else 1
        self.bind(**{"input_ids": (probe_batch, 1), "attention_mask": (probe_batch, 2),
                     **({"position_ids": (probe_batch, 1)} if layout.position_ids else {}),
                     KV_WRITES: (probe_batch, 2)})

    @property
    def cache_shape(self) -> tuple[int, int, int, int]:
        """Each cache buffer's shape: the sequences' slots and the scratch slot."""
        return (self.slots + 1, self.layout.heads, self.capacity, self.layout.head_dim)

    @property
    def outputs(self) -> Mapping[str, str]:
        return self._outputs_view

    def bind(self, **input_shapes: Any) -> BoundGraph:
        shapes = normalize_shapes(self, input_shapes)
        key = tuple(sorted(shapes.items()))
        bound = self._bound.get(key)
        if bound is None:
            graph = self._rewrite(self.model.specialize(**self._model_shapes(shapes)), shapes)
            bound = self._bound[key] = graph.bind(**shapes)
            while len(self._bound) > self.model.limits.specializations:
                del self._bound[next(iter(self._bound))]
        return bound

    def _model_shapes(self, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
        """The model's input shapes for a step of these: the pasts' from the mask's width."""
        batch, seq = shapes["input_ids"]
        past = shapes["attention_mask"][1] - seq
        if past < 0:
            raise GraphError(f"attention_mask {list(shapes['attention_mask'])} is narrower than input_ids "
                             f"{list(shapes['input_ids'])}: expected [batch, past + seq]")
        layout = self.layout
        model = {name: shape for name, shape in shapes.items() if name != KV_WRITES}
        model.update(dict.fromkeys(self._pasts, (batch, layout.heads, past, layout.head_dim)))
        return model

    def _rewrite(self, graph: Graph, shapes: Mapping[str, tuple[int, ...]]) -> Graph:
        """``graph`` with each ``Cat(past, new)`` made a cache write and the past inputs removed."""
        rewritten = Graph(graph.name)
        values: dict[str, Any] = {name: rewritten.input(name, spec.shape, spec.dtype)
                                  for name, spec in graph.inputs.items() if name not in self._pasts}
        values[KV_WRITES] = rewritten.input(KV_WRITES, shapes[KV_WRITES], "int64")
        for name, array in graph.constants.items():
            values[name] = rewritten.constant(name, array)
        for node in graph.nodes:
            past = node.inputs[0] if node.op == "Cat" and node.inputs else None
            if past in self._pasts:
                assert past is not None
                self._check_append(node.name, past, node.inputs, node.attrs, node.outputs)
                present = node.outputs[0]
                cache = rewritten.op(CACHE_WRITE, values[KV_WRITES], values[node.inputs[1]],  # type: ignore[index]
                                     name=f"{node.name}.append", outputs=[f"{present}.cache"], axis=2,
                                     dataShape=self.cache_shape)
                batch, seq = shapes["input_ids"]
                total = shapes["attention_mask"][1]
                if total == seq:  # a prefill: the present is the new positions, no cache to read
                    values[present] = values[node.inputs[1]]  # type: ignore[index]
                    continue
                result = rewritten.op(KV_VIEW, cache, name=node.name, outputs=[present], rows=batch, total=total)
            else:
                read = sorted(self._pasts.intersection(name for name in node.inputs if name is not None))
                if read:
                    raise GraphError(f"{node.name} ({node.op}) reads {read[0]}: the decoder keeps the cache on the "
                                     "device and appends to it in place, so a past may be read only by the "
                                     "Concat(past, new) behind its present; re-export without other uses of the past")
                result = rewritten.op(node.op, *[None if name is None else values[name] for name in node.inputs],
                                      name=node.name, outputs=list(node.outputs), **dict(node.attrs))
            for value in result if isinstance(result, tuple) else (result,):
                values[value.name] = value
        for output, name in graph.outputs.items():
            rewritten.output(output, values[name])
        rewritten.host_values = graph.host_values
        missing = sorted(self._pasts - set(self.cache_values))
        if missing:
            raise GraphError(f"no Concat({missing[0]}, new) was found in the imported model: it was folded or "
                             "rewritten on import, so the decoder cannot append to its cache in place")
        return rewritten

    def _check_append(self, node: str, past: str, inputs: tuple[str | None, ...], attrs: Mapping[str, Any],
                      outputs: tuple[str | None, ...]) -> None:
        if len(inputs) != 2 or inputs[1] is None or attrs.get("dim") not in (2, -2) or outputs[0] is None:
            raise GraphError(f"{node}: expected Cat({past}, new, dim=2), got Cat of {list(inputs)} "
                             f"with dim {attrs.get('dim')}")
        known = self.cache_values.setdefault(past, f"{outputs[0]}.cache")
        if known != f"{outputs[0]}.cache":
            raise GraphError(f"{node}: the present of {past} is {outputs[0]!r} here and {known!r} in another "
                             "specialization; the decoder binds one name to the cache")
