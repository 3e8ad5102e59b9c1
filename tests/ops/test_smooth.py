"""Elu, Celu, Selu, Softplus and Mish on the simulator against float64 references."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import (
    FLOAT_DTYPES,
    as_float64,
    assert_close,
    desc,
    prepare,
    random,
    run_op,
)

from aclpipe.errors import InvalidArgumentError
from aclpipe.ops.smooth import SELU_ALPHA, SELU_SCALE


def _softplus(x, beta=1.0, threshold=20.0):
    return np.where(beta * x > threshold, x, np.log1p(np.exp(beta * x)) / beta)


REFERENCES = {
    "Elu": ({"alpha": 0.7, "scale": 1.3, "inputScale": 0.5},
            lambda x: 1.3 * np.where(x > 0, x, 0.7 * np.expm1(0.5 * x))),
    "Celu": ({"alpha": 2.0}, lambda x: np.maximum(x, 0) + np.minimum(0, 2.0 * np.expm1(x / 2.0))),
    "Selu": ({}, lambda x: SELU_SCALE * np.where(x > 0, x, SELU_ALPHA * np.expm1(x))),
    "Softplus": ({"beta": 2.0, "threshold": 3.0}, lambda x: _softplus(x, 2.0, 3.0)),
    "Mish": ({}, lambda x: x * np.tanh(_softplus(x))),
}


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("op", sorted(REFERENCES))
def test_matches_float64_reference(device, op, dtype):
    attrs, reference = REFERENCES[op]
    x = random((4, 7), dtype, 3, low=-4.0, high=4.0)
    (out,) = run_op(device, op, [x[:, ::2]], attrs)  # a strided view
    assert_close(out, reference(as_float64(x[:, ::2])), dtype)


def test_defaults_are_pytorch_s():
    x = np.linspace(-30, 30, 13, dtype=np.float32)
    from aclpipe.onnx.fold import evaluate_on_host

    (elu,) = evaluate_on_host("Elu", [x], {})
    (softplus,) = evaluate_on_host("Softplus", [x], {})
    np.testing.assert_allclose(elu, np.where(x > 0, x, np.expm1(x)), rtol=1e-6)
    np.testing.assert_allclose(softplus, _softplus(x.astype(np.float64)), rtol=1e-6)


@pytest.mark.parametrize("op,attrs,code,argument", [
    ("Elu", {"alpha": None}, 161001, "alpha"),
    ("Elu", {"alpha": float("nan")}, 161002, "alpha"),
    ("Celu", {"alpha": 0.0}, 161002, "alpha"),
    ("Softplus", {"beta": 0.0}, 161002, "beta"),
    ("Softplus", {"threshold": "high"}, 161002, "threshold"),
])
def test_attribute_errors(op, attrs, code, argument):
    with pytest.raises(InvalidArgumentError) as caught:
        prepare(op, [desc((3,))], attrs)
    assert caught.value.code == code and f"aclnn{op}: {argument}:" in str(caught.value)


@pytest.mark.parametrize("op", sorted(REFERENCES))
def test_integer_inputs_are_refused(op):
    with pytest.raises(InvalidArgumentError, match=f"aclnn{op}: self:"):
        prepare(op, [desc((3,), "int32")], REFERENCES[op][0])
