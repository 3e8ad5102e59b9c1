"""The binding's conditional tasks in captured models (aclmdlRICond*) over the fake CANN: a WHILE
task counted down by its body, the parameter checks, products and CANN releases without it, and
a loop whose exit is computed on the device giving what ``sim`` gives on both paths."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import aclpipe
from aclpipe.backends.protocol import CondTaskType, MemcpyKind, conditional_models
from aclpipe.errors import BackendError
from aclpipe.runtime import Device
from aclpipe.tensor import TensorDesc

FLOAT, BOOL, INT64 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64


def _scalar(address: int) -> TensorDesc:
    return TensorDesc.contiguous((), "int64", address)


def _adds(device: Device, stream: Any, source: int, target: int, other: int) -> None:
    backend = device.backend
    executor = backend.op_prepare("Adds", [_scalar(source)], [_scalar(target)], {"other": other})
    backend.op_set_repeatable(executor)
    backend.op_launch(executor, 0, 0, stream, {"node": "count"})


@pytest.mark.parametrize("start", [0, 3])
def test_a_while_task_runs_its_body_while_the_condition_is_not_zero(ascend: Device, start: int):
    backend = conditional_models(ascend.backend)
    assert backend is not None
    origin, body_stream = ascend.create_stream(), ascend.create_stream()
    total, scratch = ascend.upload(np.zeros((), np.int64)), ascend.upload(np.zeros((), np.int64))
    backend.capture_begin(origin.handle)
    _, model = backend.capture_get_info(origin.handle)
    handle = backend.cond_handle_create(model, start, True)
    condition = backend.cond_handle_get_cond_ptr(handle)
    (body,) = backend.add_cond_task(handle, CondTaskType.WHILE, 1, origin.handle)
    with pytest.raises(BackendError):
        backend.add_cond_task(handle, CondTaskType.WHILE, 1, origin.handle)  # one task per handle
    backend.capture_to_model_begin(body_stream.handle, body)
    _adds(ascend, body_stream.handle, total.address, scratch.address, 1)
    backend.memcpy_async(total.address, scratch.address, 8, MemcpyKind.DEVICE_TO_DEVICE, body_stream.handle)
    _adds(ascend, body_stream.handle, condition, scratch.address, -1)
    backend.memcpy_async(condition, scratch.address, 8, MemcpyKind.DEVICE_TO_DEVICE, body_stream.handle)
    backend.capture_end(body_stream.handle)
    model = backend.capture_end(origin.handle)
    for replays in (1, 2):
        backend.model_execute(model, origin.handle)
        origin.sync()
        assert int(ascend.download(total, "int64", ())) == start * replays  # the default each execution
    with pytest.raises(BackendError):
        backend.model_destroy(body)  # freed with its parent only
    backend.model_destroy(model)
    for buffer in (total, scratch):
        buffer.close()


def test_a_handle_needs_a_model_being_captured_and_a_capturing_stream(ascend: Device):
    backend = ascend.backend
    origin, other = ascend.create_stream(), ascend.create_stream()
    backend.capture_begin(origin.handle)
    _, model = backend.capture_get_info(origin.handle)
    handle = backend.cond_handle_create(model)
    with pytest.raises(BackendError) as info:
        backend.add_cond_task(handle, CondTaskType.WHILE, 2, origin.handle)
    assert info.value.code == 107000
    with pytest.raises(BackendError) as info:
        backend.add_cond_task(handle, CondTaskType.IF, 1, other.handle)
    assert info.value.code == 107029
    model = backend.capture_end(origin.handle)
    with pytest.raises(BackendError) as info:
        backend.cond_handle_create(model)
    assert info.value.code == 107000
    backend.model_destroy(model)


@pytest.mark.usefixtures("fake_lib")
@pytest.mark.parametrize("name", ["310p", "200i-a2"])
def test_products_without_it_leave_the_capability_off(name: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("FAKE_CANN_PRODUCT", name)
    device = aclpipe.open_device("ascend:0")
    try:
        assert conditional_models(device.backend) is None
        with pytest.raises(BackendError) as info:
            device.backend.cond_handle_create(object())  # type: ignore[attr-defined]
        assert info.value.code == 207000
    finally:
        device.close()


def _countdown_model(trips: int = 40) -> Any:
    """h <- tanh(h @ w + x) while k, counted down from an input, stays above 0: an exit the device computes."""
    rng = np.random.default_rng(5)
    body = helper.make_graph(
        [helper.make_node("MatMul", ["h", "w"], ["hw"]), helper.make_node("Add", ["hw", "x"], ["a"]),
         helper.make_node("Tanh", ["a"], ["h_next"]), helper.make_node("Sub", ["k", "one"], ["k_next"]),
         helper.make_node("Relu", ["k_next"], ["left"]), helper.make_node("Cast", ["left"], ["go"], to=BOOL)],
        "body", [helper.make_tensor_value_info("i", INT64, []), helper.make_tensor_value_info("c", BOOL, []),
                 helper.make_tensor_value_info("h", FLOAT, [4, 8]), helper.make_tensor_value_info("k", FLOAT, [])],
        [helper.make_tensor_value_info("go", BOOL, []), helper.make_tensor_value_info("h_next", FLOAT, [4, 8]),
         helper.make_tensor_value_info("k_next", FLOAT, [])],
        [numpy_helper.from_array((rng.standard_normal((8, 8)) / 3).astype(np.float32), "w"),
         numpy_helper.from_array(np.array(1.0, np.float32), "one")])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trips", "", "h0", "k0"], ["h_final", "k_final"], body=body),
         helper.make_node("Relu", ["h_final"], ["y"])], "loop",
        [helper.make_tensor_value_info("x", FLOAT, [4, 8]), helper.make_tensor_value_info("h0", FLOAT, [4, 8]),
         helper.make_tensor_value_info("k0", FLOAT, [])],
        [helper.make_tensor_value_info("y", FLOAT, [4, 8])],
        [numpy_helper.from_array(np.array(trips, np.int64), "trips")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


async def _run_all(device: aclpipe.Device, feeds: list[dict[str, np.ndarray]]) -> list[np.ndarray]:
    async with aclpipe.Pipeline(aclpipe.load_onnx(_countdown_model()), device, depth=2) as pipe:
        return [out["y"] async for out in pipe.stream(feeds)]


@pytest.mark.parametrize("conditional", [True, False], ids=["while-task", "no-cond-symbols"])
def test_a_device_exit_loop_gives_what_sim_gives(conditional: bool, fake_cann: dict[str, Path], tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch, fake_build: Any):
    directory = fake_cann["launch_host_func"] if conditional else fake_build.build_fake_cann(tmp_path / "old",
                                                                                              conditional=False)
    monkeypatch.setenv("ACLPIPE_ASCEND_LIB", str(directory))
    rng = np.random.default_rng(2)
    feeds = [{"x": rng.standard_normal((4, 8)).astype(np.float32), "h0": rng.standard_normal((4, 8)).astype(np.float32),
              "k0": np.array(k, np.float32)} for k in (0, 1, 5, 17, 60)]
    ascend = aclpipe.open_device("ascend:0")
    try:
        assert (conditional_models(ascend.backend) is not None) == conditional
        on_ascend = anyio.run(_run_all, ascend, feeds)
    finally:
        ascend.close()
    sim = aclpipe.open_device("sim", sanitizer=True)
    try:
        on_sim = anyio.run(_run_all, sim, feeds)
    finally:
        sim.close()
    for got, expected in zip(on_ascend, on_sim):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def cond_check(declarations: Any, compiler: str, include: Path, workdir: Path) -> Any:
    """Compile the binding's aclmdlRICond* declarations against ``include``'s acl_rt.h."""
    from aclpipe.backends.ascend import cdefs

    functions = declarations.prototypes(cdefs.COND_CDEF)
    assert len(functions) == len(cdefs.RUNTIME_COND)
    constants = {"ACL_MODEL_RI_COND_HANDLE_ASSIGN_DEFAULT": cdefs.ACL_MODEL_RI_COND_HANDLE_ASSIGN_DEFAULT,
                 **{f"ACL_MODEL_RI_COND_TYPE_{kind.name}": kind.value for kind in CondTaskType}}
    layout = {"sizeof(aclmdlRICondTaskParams)": cdefs.ffi.sizeof("aclmdlRICondTaskParams"),
              "offsetof(aclmdlRICondTaskParams, size)": cdefs.ffi.offsetof("aclmdlRICondTaskParams", "size"),
              "offsetof(aclmdlRICondTaskParams, modelRIArray)":
                  cdefs.ffi.offsetof("aclmdlRICondTaskParams", "modelRIArray")}
    source = declarations.cond_declarations_source(functions, constants, layout)
    return declarations.run_check(compiler, include, source, workdir)


def test_the_cond_declarations_match_the_header_or_say_why_not(compiler: str, headers: Path, fake_declarations: Any,
                                                                tmp_path: Path):
    declarations, include = fake_declarations, headers
    if not declarations.has_cond_declarations(include):
        pytest.skip(f"{include}'s acl/acl_rt.h has no aclmdlRICondHandleCreate (a CANN before conditional tasks): "
                    "the binding resolves aclmdlRICond* only where they exist")
    result = cond_check(declarations, compiler, include, tmp_path)
    assert result.returncode == 0, f"the binding's aclmdlRICond* declarations differ from {include}:\n{result.stderr}"


def test_the_kits_while_task_check_passes_over_the_fake(fake_lib: Path):
    from aclpipe.testing import check_backend
    from aclpipe.testing.rules import RULES

    check = next(check for check in RULES if check.name == "while_task")
    report = check_backend(lambda: aclpipe.open_device("ascend:0"), checks=[check])
    assert [row.status for row in report.rows] == ["passed"], str(report)
