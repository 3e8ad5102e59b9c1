"""ONNX backend node tests through ``load_onnx`` + :class:`~aclpipe.Pipeline` (two compute
streams, sanitizer on): the path a user's model takes, not the eager evaluator's.

The same cases as ``test_onnx_conformance.py`` (whose helpers select them and compare the
outputs): every graph input is passed to ``pipe.run`` as an ordinary run input, so inputs that
decide the graph (Reshape's shape, Slice's starts, an If condition, ...) are host values.
Cases written for opsets below 11 are loaded with ``upgrade_opset=11``, as the README tells
users to.  The cases a worker selects run in one event loop on one sanitizing simulated device,
each through its own Pipeline.  Skips are only for what aclpipe does not implement (element
types the NPU lacks, features converters refuse); the per-op table and every skip reason are
printed at the end (``tests/onnx/conftest.py``).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import anyio
import numpy as np
import pytest
from test_onnx_conformance import (
    _array,
    _check,
    group_of,
    node_cases,
    selected_cases,
    type_skip_reason,
)

import aclpipe
from aclpipe.errors import UnsupportedOpError
from aclpipe.onnx import MIN_OPSET, UnsupportedFeature, model_opsets, unsupported_nodes

#: group -> Counter of "passed" / "skipped" / "failed"; skip reasons -> count (read by conftest).
TALLY: dict[str, Counter[str]] = {}
SKIP_REASONS: Counter[str] = Counter()


@pytest.fixture(scope="module")
def outcomes(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Every selected case of this worker run at once: one event loop, one sanitizing simulated
    device, a Pipeline per case.  Case name -> its results per data set, or the exception."""
    names = [item.callspec.params["name"] for item in request.session.items
             if getattr(item, "originalname", None) == "test_node_case_through_the_pipeline"]
    device = aclpipe.open_device("sim", sanitizer=True)
    try:
        return anyio.run(_run_cases, [name for name in names if _runnable(node_cases()[name])], device)
    finally:
        device.release_hangs()
        device.close()


def _runnable(case: Any) -> bool:
    return type_skip_reason(case) is None and not _unsupported(case)


def _unsupported(case: Any) -> list[Any]:
    if model_opsets(case.model)[""] < MIN_OPSET:
        return []  # upgraded on load
    return unsupported_nodes(case.model.graph, model_opsets(case.model))


def _feeds(case: Any) -> list[dict[str, np.ndarray]]:
    return [{value.name: _array(array) for value, array in zip(case.model.graph.input, inputs)}
            for inputs, _ in case.data_sets]


async def _run_cases(names: list[str], device: aclpipe.Device) -> dict[str, Any]:
    outcomes: dict[str, Any] = {}
    for name in names:
        case = node_cases()[name]
        old = model_opsets(case.model)[""] < MIN_OPSET
        try:
            graph = aclpipe.load_onnx(case.model, upgrade_opset=MIN_OPSET if old else None)
            if old and _ranks(graph.model) != _ranks(case.model):
                outcomes[name] = _Changed()
                continue
            async with aclpipe.Pipeline(graph, device, streams=2, depth=1) as pipe:
                outcomes[name] = [await pipe.run(**batch) for batch in _feeds(case)]
        except Exception as error:  # noqa: BLE001 - reported by the case's own test
            outcomes[name] = error
    return outcomes


class _Changed:
    """onnx's version converter changed the model's input ranks (its data no longer fits)."""


def _skip(group: str, reason: str) -> None:
    TALLY.setdefault(group, Counter())["skipped"] += 1
    SKIP_REASONS[reason] += 1
    pytest.skip(reason)


def _feature(error: UnsupportedOpError) -> str:
    if isinstance(error, UnsupportedFeature) and error.node is not None:
        return f"{error.node.op_type}: {error.feature}"
    return str(error).splitlines()[-1].strip(" -")


@pytest.mark.parametrize("name", selected_cases())
def test_node_case_through_the_pipeline(name: str, outcomes: dict[str, Any]) -> None:
    case = node_cases()[name]
    group = group_of(case)
    reason = type_skip_reason(case)
    if reason:
        _skip(group, reason)
    problems = _unsupported(case)
    if problems:
        _skip(group, "; ".join(sorted({f"{p.op_type}: {p.why}" for p in problems})))
    outcome = outcomes[name]
    if isinstance(outcome, _Changed):
        _skip(group, f"onnx.version_converter changes the input ranks of this opset-{model_opsets(case.model)['']} "
                     "model (opset-8 Scan's batch axis), so the case's data no longer fits it")
    if isinstance(outcome, UnsupportedOpError):
        _skip(group, _feature(outcome))
    TALLY.setdefault(group, Counter())["failed"] += 1  # undone below when the case passes
    if isinstance(outcome, BaseException):
        raise outcome
    for result, (_, expected) in zip(outcome, case.data_sets):
        for value, want in zip(case.model.graph.output, expected):
            _check(np.asarray(result[value.name]), _array(want), case, value.name)
    TALLY[group]["failed"] -= 1
    TALLY[group]["passed"] += 1


def _ranks(model: Any) -> list[int]:
    return [len(value.type.tensor_type.shape.dim) for value in model.graph.input]


def pipeline_summary() -> dict[str, Any]:
    """Totals for the README and the report: passed, failed, skipped by kind."""
    totals = Counter[str]()
    for counts in TALLY.values():
        totals.update(counts)
    return dict(totals)
