"""The binding table against the prototypes: every row has a declared aclnn prototype with one
parameter per argument (plus workspaceSize and executor), and names catalog inputs and outputs
that the catalog op has."""

from __future__ import annotations

import pytest

from aclpipe.backends.ascend.cdefs import PHASE_ONE
from aclpipe.backends.ascend.ops_table import OPS
from aclpipe.ops import get_op


@pytest.mark.parametrize("op", sorted(OPS))
def test_row_matches_its_prototype(op):
    binding = OPS[op]  # its aclnn function is binding.op's (the catalog's Where calls aclnnSWhere)
    assert binding.op in PHASE_ONE, f"aclnn{binding.op} has a binding but no prototype in cdefs.PHASE_ONE"
    parameters = [p for p in PHASE_ONE[binding.op].split(",") if p.strip()]
    assert len(binding.arguments) == len(parameters) - 2  # workspaceSize, executor
    tensors = [p for p in parameters[:-2] if "aclTensor" in p]
    assert len(tensors) == sum(1 for argument in binding.arguments if argument.kind in ("input", "output"))


@pytest.mark.parametrize("op", sorted(OPS))
def test_row_names_existing_catalog_tensors_and_attributes(op):
    spec = get_op(op)
    for argument in OPS[op].arguments:
        if argument.kind == "input" and spec.inputs != ("tensors",):
            assert int(argument.key) < len(spec.inputs)
        elif argument.kind == "output":
            assert int(argument.key) < len(spec.outputs)
        elif argument.kind == "attr":
            assert argument.key in spec.attrs, f"{op}: {argument.key} is not a catalog attribute"


def test_the_decoders_cache_write_is_canns_inplace_scatter_update():
    # ops-nn index/scatter/docs/aclnnInplaceScatterUpdate.md: data (written in place), indices, updates, axis
    parameters = [p.strip() for p in PHASE_ONE["InplaceScatterUpdate"].split(",")]
    assert parameters[:4] == ["aclTensor *data", "const aclTensor *indices", "const aclTensor *updates",
                              "int64_t axis"]
    kinds = [(argument.kind, argument.key) for argument in OPS["InplaceScatterUpdate"].arguments]
    assert kinds == [("output", 0), ("input", 0), ("input", 1), ("attr", "axis")]
    assert "KvAppend" not in OPS and "KvAppend" not in PHASE_ONE
