"""ONNX backend node tests through the eager context on the simulated NPU (sanitizer on).

Every node case of ``onnx.backend.test`` whose op the mapping covers runs here: single-node
cases of a covered op type, and multi-node (``_expanded``) cases whose nodes are all covered
or whose op (from the case name) is covered.  Outputs are compared with the case's own
tolerances (``rtol``/``atol``, default 1e-3/1e-7) and must have the expected dtype and shape.

A case is skipped, with the reason, only for what aclpipe does not implement: element types
outside the NPU dtypes (double, int16, uint16/32/64, string, float8, sequences, ...), and
features converters refuse with :class:`~aclpipe.onnx.UnsupportedFeature` (training mode,
3-D pooling, MaxPool indices, ...).  Per-op pass/skip counts are printed at the end of the
run (``tests/onnx/conftest.py``).
"""

from __future__ import annotations

import functools
import re
import warnings
from collections import Counter
from typing import Any

import numpy as np
import onnx
import onnx.defs
import pytest

import aclpipe
from aclpipe.dtypes import DType
from aclpipe.eager.onnx_eval import EagerContext
from aclpipe.onnx import UnsupportedFeature, model_opsets, supported_ops, unsupported_nodes
from aclpipe.onnx.context import ONNX_TO_DTYPE

#: group -> Counter of "passed" / "skipped" / "failed"; skip reasons -> count (read by conftest).
TALLY: dict[str, Counter[str]] = {}
SKIP_REASONS: Counter[str] = Counter()


@functools.lru_cache(maxsize=1)
def node_cases() -> dict[str, Any]:
    """Every ONNX backend node test case by name, generated once per process."""
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the generators' own overflow warnings
        return {case.name: case for case in load_model_tests(kind="node")}


@functools.lru_cache(maxsize=1)
def _schema_prefixes() -> list[tuple[str, str]]:
    """(name prefix, op type) for every ONNX op, longest first: ``test_layer_normalization``."""
    prefixes = []
    for schema in onnx.defs.get_all_schemas():
        snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", schema.name).lower()
        for form in {snake, schema.name.lower()}:
            prefixes.append((f"test_{form}", schema.name))
    return sorted(prefixes, key=lambda item: -len(item[0]))


_NAME_ALIASES = {"test_mvn": "MeanVarianceNormalization", "test_batchnorm": "BatchNormalization",
                 "test_rms_normalization": "RMSNormalization"}


def base_op(name: str) -> str | None:
    """The op a case is about, from its name (``test_softmax_axis_0_expanded`` -> ``Softmax``)."""
    for prefix, op_type in _NAME_ALIASES.items():
        if name.startswith(prefix + "_"):
            return op_type
    for prefix, op_type in _schema_prefixes():
        if name == prefix or name.startswith(prefix + "_"):
            return op_type
    return None


def group_of(case: Any) -> str:
    """Single-node cases count under their op type, multi-node ones under '<op> (expanded)'."""
    nodes = case.model.graph.node
    if len(nodes) == 1:
        return nodes[0].op_type
    return f"{base_op(case.name) or case.name} (expanded)"


def selected_cases() -> list[str]:
    covered = set(supported_ops())
    names = []
    for name, case in node_cases().items():
        types = {node.op_type for node in case.model.graph.node}
        if not types:
            continue
        if len(case.model.graph.node) == 1:
            if types <= covered:
                names.append(name)
        elif types <= covered or base_op(name) in covered:
            names.append(name)
    return sorted(names)


def _array(value: Any) -> np.ndarray:
    return onnx.numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else np.asarray(value)


def type_skip_reason(case: Any) -> str | None:
    """Why the case's graph inputs/outputs cannot be aclpipe tensors, if they cannot."""
    graph = case.model.graph
    for kind, values in (("input", graph.input), ("output", graph.output)):
        for value in values:
            field = value.type.WhichOneof("value")
            if field != "tensor_type":
                return f"graph {kind} of type {field or 'undefined'}: only tensors are supported"
            code = value.type.tensor_type.elem_type
            if code not in ONNX_TO_DTYPE:
                type_name = onnx.TensorProto.DataType.Name(code)
                return f"element type {type_name} is not an aclpipe dtype"
    return None


@pytest.fixture(scope="module")
def eager():
    """One sanitizing device and eager context for the whole module."""
    device = aclpipe.open_device("sim", sanitizer=True)
    with EagerContext(device) as context:
        yield context
    device.close()


def _skip(group: str, reason: str) -> None:
    TALLY.setdefault(group, Counter())["skipped"] += 1
    SKIP_REASONS[reason] += 1
    pytest.skip(reason)


def _check(got: np.ndarray, expected: np.ndarray, case: Any, output: str) -> None:
    assert got.dtype == expected.dtype, f"output {output!r}: dtype {got.dtype}, expected {expected.dtype}"
    assert got.shape == expected.shape, f"output {output!r}: shape {got.shape}, expected {expected.shape}"
    if expected.dtype.kind == "f" or expected.dtype == DType.bfloat16.numpy:
        # Half-precision results are rounded once from an fp32 computation, the reference's from
        # its own: two units in the last place apart is agreement, whatever the case's rtol.
        rtol = case.rtol
        half_eps = {np.dtype(np.float16): 2.0**-10, DType.bfloat16.numpy: 2.0**-7}.get(expected.dtype)
        if half_eps is not None:
            rtol = max(rtol, 2 * half_eps)
        np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), rtol=rtol,
                                   atol=case.atol, err_msg=f"output {output!r}")
    else:
        np.testing.assert_array_equal(got, expected, err_msg=f"output {output!r}")


@pytest.mark.parametrize("name", selected_cases())
def test_node_case(name: str, eager: EagerContext) -> None:
    case = node_cases()[name]
    group = group_of(case)
    reason = type_skip_reason(case)
    if reason:
        _skip(group, reason)
    problems = unsupported_nodes(case.model.graph, model_opsets(case.model))
    if problems:
        _skip(group, "; ".join(sorted({f"{p.op_type}: {p.why}" for p in problems})))
    graph = case.model.graph
    TALLY.setdefault(group, Counter())["failed"] += 1  # undone below when the case passes
    for inputs, expected in case.data_sets:
        feeds = {value.name: _array(array) for value, array in zip(graph.input, inputs)}
        try:
            results = eager.run_model(case.model, feeds)
        except UnsupportedFeature as error:
            TALLY[group]["failed"] -= 1
            _skip(group, error.feature if error.node is None else f"{error.node.op_type}: {error.feature}")
        for value, got, want in zip(graph.output, results, expected):
            _check(np.asarray(got), _array(want), case, value.name)
    TALLY[group]["failed"] -= 1
    TALLY[group]["passed"] += 1
