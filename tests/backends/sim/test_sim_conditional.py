"""Conditional tasks in captured models on the simulator (aclmdlRICond*, acl_rt.h): a WHILE
sub-model runs while the 64-bit condition is not 0, tested first; IF picks a sub-model; the
runtime's parameter checks; the sanitizer orders the sub-model's accesses; products without it."""

from __future__ import annotations

import numpy as np
import pytest

import aclpipe
from aclpipe import BackendError, HazardError
from aclpipe.backends.protocol import CondTaskType, MemcpyKind, conditional_models
from aclpipe.tensor import TensorDesc


@pytest.fixture(params=[True, False], ids=["sanitizer", "no-sanitizer"])
def device(request):
    dev = aclpipe.open_device("sim", sanitizer=request.param)
    yield dev
    dev.close()


def _launch(device, stream, op, inputs, output, attrs, node):
    backend = device.backend
    executor = backend.op_prepare(op, inputs, [output], attrs)
    backend.op_set_repeatable(executor)
    backend.op_launch(executor, 0, 0, stream, {"node": node})


def _scalar(address):
    return TensorDesc.contiguous((), "int64", address)


def _countdown(device, start: int, kind=CondTaskType.WHILE):
    """A model: a WHILE (or IF) task whose body adds 1 to ``total`` and 1 off the condition; with
    what must stay alive while it may run."""
    backend = conditional_models(device.backend)
    origin, body_stream = device.create_stream(), device.create_stream()
    total, scratch = device.upload(np.zeros((), np.int64)), device.upload(np.zeros((), np.int64))
    backend.capture_begin(origin.handle)
    _, model = backend.capture_get_info(origin.handle)
    handle = backend.cond_handle_create(model, start, True)
    condition = backend.cond_handle_get_cond_ptr(handle)
    (body,) = backend.add_cond_task(handle, kind, 1, origin.handle)
    backend.capture_to_model_begin(body_stream.handle, body)
    _launch(device, body_stream.handle, "Adds", [_scalar(total.address)], _scalar(scratch.address), {"other": 1},
            "count")
    backend.memcpy_async(total.address, scratch.address, 8, MemcpyKind.DEVICE_TO_DEVICE, body_stream.handle)
    _launch(device, body_stream.handle, "Adds", [_scalar(condition)], _scalar(scratch.address), {"other": -1},
            "step")
    backend.memcpy_async(condition, scratch.address, 8, MemcpyKind.DEVICE_TO_DEVICE, body_stream.handle)
    assert backend.capture_end(body_stream.handle) is body
    assert backend.capture_end(origin.handle) is model
    return backend, model, total, origin, (scratch, body_stream)  # the last: alive while the model may run


@pytest.mark.parametrize("start", [0, 1, 5])
def test_a_while_task_runs_its_body_while_the_condition_is_not_zero_tested_first(device, start):
    backend, model, total, origin, _alive = _countdown(device, start)
    for replays in (1, 2):
        backend.model_execute(model, origin.handle, {"run": replays})
        origin.sync()
        # The default is assigned at each execution's start, so each replay counts ``start`` again.
        assert int(device.download(total, "int64", ())) == start * replays
    backend.model_destroy(model)


def test_an_if_task_runs_its_sub_model_only_when_the_condition_is_not_zero(device):
    for start, expected in ((0, 0), (3, 1)):
        backend, model, total, origin, _alive = _countdown(device, start, CondTaskType.IF)
        backend.model_execute(model, origin.handle)
        origin.sync()
        assert int(device.download(total, "int64", ())) == expected
        backend.model_destroy(model)


def test_the_runtime_refuses_what_its_parameter_checks_refuse(device):
    backend = device.backend
    origin, other = device.create_stream(), device.create_stream()
    backend.capture_begin(origin.handle)
    _, model = backend.capture_get_info(origin.handle)
    handle = backend.cond_handle_create(model)
    with pytest.raises(BackendError) as info:
        backend.add_cond_task(handle, CondTaskType.WHILE, 2, origin.handle)  # WHILE takes one sub-model
    assert info.value.code == 107000
    with pytest.raises(BackendError) as info:
        backend.add_cond_task(handle, CondTaskType.WHILE, 1, other.handle)  # not capturing
    assert info.value.code == 107029
    (body,) = backend.add_cond_task(handle, CondTaskType.WHILE, 1, origin.handle)
    with pytest.raises(BackendError):
        backend.add_cond_task(handle, CondTaskType.IF, 1, origin.handle)  # one task per handle
    model = backend.capture_end(origin.handle)
    with pytest.raises(BackendError):
        backend.cond_handle_create(model)  # no longer capturing
    with pytest.raises(BackendError):
        backend.model_destroy(body)  # freed with its parent only
    backend.model_destroy(model)


def test_the_sanitizer_orders_the_body_against_other_streams():
    device = aclpipe.open_device("sim", sanitizer=True)
    try:
        backend, model, total, origin, _alive = _countdown(device, 2)
        writer = device.create_stream()
        source = device.upload(np.zeros((), np.int64))
        backend.memcpy_async(total.address, source.address, 8, MemcpyKind.DEVICE_TO_DEVICE, writer.handle)
        with pytest.raises(HazardError, match="count"):  # the body's Adds reads what another stream writes
            backend.model_execute(model, origin.handle)
        writer.sync()
    finally:
        device.close()


def test_products_without_conditional_tasks_refuse_them():
    device = aclpipe.open_device("sim", spec="atlas-200i-a2")
    try:
        assert conditional_models(device.backend) is None
        with pytest.raises(BackendError) as info:
            device.backend.cond_handle_create(object())
        assert info.value.code == 207000
    finally:
        device.close()
