"""Caps on what loading a graph file may cost: the file, its nesting, aliases, constants and nodes;
the same caps bound input arrays read from files and requests (:mod:`aclpipe.graph.npy`).

A graph file is often someone else's file (a server loads what clients upload), and a few
bytes of YAML can describe gigabytes: ``init: zeros`` with a huge shape, aliases that expand
exponentially, nesting that exhausts the stack.  :func:`~aclpipe.graph.files.load_graph`
checks each cap *before* the work it bounds, so loading takes time and memory in proportion
to the caps, whatever the file holds; a file over a cap gets a :class:`~aclpipe.GraphError`
naming the value, its size and the cap.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

__all__ = ["DEFAULT_LIMITS", "LoadLimits"]

_MiB = 1 << 20


@dataclass(frozen=True)
class LoadLimits:
    """What one :func:`~aclpipe.load_graph` call may read and allocate.

    Parameters
    ----------
    max_file_bytes:
        Size of the graph file (YAML or JSON).
    max_depth:
        Nesting of lists and mappings in the graph file.
    max_alias_nodes:
        YAML nodes that aliases (``*name``) may add by repeating anchored ones, in all.
    max_nodes:
        Nodes of the graph.
    max_constant_bytes:
        Bytes of one constant, from ``init`` and a shape or from a ``.npy`` file; also of one
        input array read from a file or request (``aclpipe run --input``, Serve's ``.npy``
        and ``.npz`` bodies), as its header declares it, checked before it is read.
    max_total_constant_bytes:
        Bytes of all constants together; also of all the arrays of one ``.npz`` input.
    """

    max_file_bytes: int = 64 * _MiB
    max_depth: int = 64
    max_alias_nodes: int = 10_000
    max_nodes: int = 500_000
    max_constant_bytes: int = 1024 * _MiB
    max_total_constant_bytes: int = 4096 * _MiB

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"LoadLimits.{item.name} must be an int >= 0, got {value!r}")


DEFAULT_LIMITS = LoadLimits()
