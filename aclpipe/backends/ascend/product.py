"""What the product under the runtime allows, from its SoC name (``aclrtGetSocName``).

The documented limits differ by product family (``hicann/runtime`` ``docs/zh/api_ref``):
events per device (``07_event_management.md``: 65536 on Atlas A2/A3, the 950 series and
Atlas 200I/500 A2, 1023 on Atlas inference cards, 65535 on Atlas training products), streams
per device (``06_stream_management.md``: 1984, 1024 on inference cards, 512 on 200I/500 A2,
2048 on training products), ``aclrtStreamAbort`` (A2/A3/950 only) and model capture
(``15_model_running_instance__management.md``: not on 200I/500 A2 nor training products) and
the AI Core op execute timeout (``12_execution_control.md``, ``aclrtSetOpExecuteTimeOut``:
1091 s by default and at most on A2/A3/950 and 200I/500 A2, 547 s on inference cards, 68 s
by default and 2176 s at most on training products), and the stream-ordered allocator
(``11-10_ordered_stream_memory_allocation.md``, ``aclrtMemPool*``: Atlas A2 only; every other
product's runtime answers 207000), and conditional tasks in captured models (``aclmdlRICond*``:
Atlas A2 and A3; the 950's page says yes but its sample says no, so the stricter answer).  An
unknown name gets Atlas A2's rules.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ProductRules", "product_rules"]


@dataclass(frozen=True)
class ProductRules:
    """The documented limits of one product family."""

    family: str
    max_events: int
    max_streams: int
    stream_abort: bool
    graph_capture: bool
    op_execute_timeout: float = 1091.0  #: seconds, when nobody set one
    op_execute_timeout_max: float = 1091.0  #: seconds, interval * 254
    stream_ordered_alloc: bool = False  #: aclrtMemPoolMallocAsync and the rest of acl_rt_memory_soma.h
    conditional_models: bool = False  #: aclmdlRICondHandleCreate, aclmdlRIAddCondTask (acl_rt.h)


_A2 = ProductRules("Atlas A2/A3", 65536, 1984, True, True, stream_ordered_alloc=True, conditional_models=True)
#: SoC name prefixes, most specific first.
_FAMILIES: tuple[tuple[str, ProductRules], ...] = (
    ("Ascend910B", _A2),
    ("Ascend910_93", ProductRules("Atlas A3", 65536, 1984, True, True, conditional_models=True)),
    ("Ascend950", ProductRules("Ascend 950", 65536, 1984, True, True)),
    ("Ascend910", ProductRules("Atlas training", 65535, 2048, False, False, 68.0, 2176.0)),
    ("Ascend310P", ProductRules("Atlas inference card", 1023, 1024, False, True, 547.0, 547.0)),
    ("Ascend310B", ProductRules("Atlas 200I/500 A2", 65536, 512, False, False)),
)


def product_rules(soc_name: str | None) -> ProductRules:
    """The rules of the product called ``soc_name`` (e.g. ``"Ascend910B3"``, ``"Ascend310P3"``)."""
    for prefix, rules in _FAMILIES:
        if soc_name and soc_name.startswith(prefix):
            return rules
    return _A2
