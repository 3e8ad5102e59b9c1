"""The binding's stream-ordered allocator (aclrtMemPool*) over the fake CANN, and its declarations
against the real ``acl_rt_memory_soma.h`` when the headers can be had."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest

import aclpipe
from aclpipe.backends.ascend import cdefs
from aclpipe.backends.protocol import MemcpyKind, MemPoolAttr, stream_ordered_alloc
from aclpipe.errors import BackendError
from aclpipe.runtime import Device
from aclpipe.runtime.workspaces import make_workspace_strategy

MB2 = 2 << 20


@pytest.fixture
def product(request: pytest.FixtureRequest, fake_lib: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Device]:
    monkeypatch.setenv("FAKE_CANN_PRODUCT", request.param)
    device = aclpipe.open_device("ascend:0")
    yield device
    device.close()


def test_malloc_and_free_follow_the_stream_and_count_two_megabyte_blocks(ascend: Device):
    backend = stream_ordered_alloc(ascend.backend)
    assert backend is not None
    stream = ascend.create_stream()
    pool = backend.mem_pool_create(8 << 20)
    assert backend.mem_pool_malloc_async(pool, 0, stream.handle) == 0  # 0 bytes: nothing allocated
    address = backend.mem_pool_malloc_async(pool, 1000, stream.handle)
    assert backend.mem_pool_get_attr(pool, MemPoolAttr.USED_MEM_CURRENT) == MB2
    host = ascend.alloc_host(1000)
    ascend.backend.memset_async(address, 7, 1000, stream.handle)
    ascend.backend.memcpy_async(host.address, address, 1000, MemcpyKind.DEVICE_TO_HOST, stream.handle)
    backend.mem_pool_free_async(address, stream.handle)
    # Back on the host at once, but cached: the pool still reserves it until a trim.
    assert backend.mem_pool_get_attr(pool, MemPoolAttr.USED_MEM_CURRENT) == 0
    assert backend.mem_pool_get_attr(pool, MemPoolAttr.RESERVED_MEM_CURRENT) == MB2
    stream.sync()
    assert (host.numpy(np.uint8, (1000,)) == 7).all()
    with pytest.raises(BackendError) as freed:
        backend.mem_pool_free_async(address, stream.handle)
    assert freed.value.code == 107000
    backend.mem_pool_trim_to(pool, 0)
    assert backend.mem_pool_get_attr(pool, MemPoolAttr.RESERVED_MEM_CURRENT) == 0
    assert backend.mem_pool_get_attr(pool, MemPoolAttr.RESERVED_MEM_HIGH) == MB2
    backend.mem_pool_destroy(pool)
    host.close()
    stream.close()


def test_a_full_pool_and_a_bad_trim_are_the_runtimes_internal_error(ascend: Device):
    backend = stream_ordered_alloc(ascend.backend)
    assert backend is not None
    stream = ascend.create_stream()
    pool = backend.mem_pool_create(MB2)
    first = backend.mem_pool_malloc_async(pool, 16, stream.handle)
    for call in (lambda: backend.mem_pool_malloc_async(pool, 16, stream.handle),  # no room left
                 lambda: backend.mem_pool_trim_to(pool, 0),  # less than the bytes in use
                 lambda: backend.mem_pool_trim_to(pool, 2 * MB2)):  # more than the pool holds
        with pytest.raises(BackendError) as refused:
            call()
        assert refused.value.code == 507000
    backend.mem_pool_free_async(first, stream.handle)
    stream.sync()
    backend.mem_pool_trim_to(pool, 0)
    backend.mem_pool_free_async(backend.mem_pool_malloc_async(pool, 16, stream.handle), stream.handle)
    stream.sync()
    backend.mem_pool_destroy(pool)
    stream.close()


@pytest.mark.parametrize("product", ["310p", "200i-a2"], indirect=True)
def test_products_without_it_refuse_with_207000(product: Device):
    assert not product.capabilities.stream_ordered_alloc
    with pytest.raises(BackendError) as refused:
        product.backend.mem_pool_create(0)  # type: ignore[attr-defined]
    assert refused.value.code == 207000
    with pytest.raises(BackendError, match="Atlas A2 only") as strategy:
        make_workspace_strategy(product, "stream-ordered")
    assert strategy.value.code == 207000 and "'pool'" in str(strategy.value)


def test_a_cann_without_the_symbols_loads_with_the_capability_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   fake_build: Any):
    build = fake_build
    if build.find_compiler() is None:
        pytest.skip("no C compiler to build the fake CANN")
    monkeypatch.setenv("ACLPIPE_ASCEND_LIB", str(build.build_fake_cann(tmp_path / "old", mem_pool=False)))
    device = aclpipe.open_device("ascend:0")
    try:
        assert not device.capabilities.stream_ordered_alloc
        assert stream_ordered_alloc(device.backend) is None
    finally:
        device.close()


def test_a_pipeline_takes_its_workspaces_stream_ordered(ascend: Device):
    graph = aclpipe.Graph("ws")
    x = graph.input("x", shape=(4, 8))
    graph.output("y", graph.softmax(graph.add(x, x), dim=-1))
    value = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    doubled = np.exp(2 * value - (2 * value).max(-1, keepdims=True))

    async def main() -> list[np.ndarray]:
        async with aclpipe.Pipeline(graph, ascend, workspace="stream-ordered") as pipe:
            return [(await pipe.run(x=value))["y"] for _ in range(3)]

    for result in anyio.run(main):
        np.testing.assert_allclose(result, doubled / doubled.sum(-1, keepdims=True), rtol=1e-5)


# -- declarations: acl_rt_memory_soma.h -------------------------------------------------------------
def test_the_mempool_declarations_match_the_header_or_say_why_not(compiler: str, headers: Path,
                                                                   fake_declarations: Any, tmp_path: Path):
    declarations, include = fake_declarations, headers
    if not declarations.has_mempool_header(include):
        pytest.skip(f"{include} has no acl/acl_rt_memory_soma.h (a CANN before the stream-ordered allocator): "
                    "the binding resolves aclrtMemPool* only where they exist")
    functions = declarations.prototypes(cdefs.MEMPOOL_CDEF)
    assert len(functions) == len(cdefs.RUNTIME_MEMPOOL)
    constants = {"ACL_RT_MEM_POOL_" + ("ATTR_" if attr >= MemPoolAttr.RELEASE_THRESHOLD else "") + attr.name: attr.value
                 for attr in MemPoolAttr}
    layout = {"sizeof(aclrtMemPoolProps)": cdefs.ffi.sizeof("aclrtMemPoolProps"),
              "offsetof(aclrtMemPoolProps, maxSize)": cdefs.ffi.offsetof("aclrtMemPoolProps", "maxSize")}
    source = declarations.mempool_declarations_source(functions, constants, layout)
    result = declarations.run_check(compiler, include, source, tmp_path)
    assert result.returncode == 0, f"the binding's aclrtMemPool* declarations differ from {include}:\n{result.stderr}"
    wrong = declarations.mempool_declarations_source(
        [("aclError", "aclrtMemPoolTrimTo", "aclrtMemPool memPool, uint32_t minBytesToKeep")], {}, {})
    assert "binding_aclrtMemPoolTrimTo" in declarations.run_check(compiler, include, wrong, tmp_path).stderr


def test_the_kits_mempool_check_passes_over_the_fake(fake_lib: Path):
    from aclpipe.testing import check_backend
    from aclpipe.testing.rules import RULES

    check = next(check for check in RULES if check.name == "mempool_order")
    report = check_backend(lambda: aclpipe.open_device("ascend:0"), checks=[check])
    assert [row.status for row in report.rows] == ["passed"], str(report)
