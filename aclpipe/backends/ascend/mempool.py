"""The stream-ordered allocator through CANN: ``aclrtMemPool*`` of ``acl/acl_rt_memory_soma.h``.

The binding of :class:`~aclpipe.backends.protocol.StreamOrderedAlloc` (whose docstring gives the
runtime's rules, read from ``hicann/runtime``'s source).  The calls are optional symbols
(:data:`~aclpipe.backends.ascend.cdefs.RUNTIME_MEMPOOL`): a CANN without them, or a product without
the feature (``11-10_ordered_stream_memory_allocation.md``: Atlas A2 only), leaves
``capabilities.stream_ordered_alloc`` off and every call here refused with 207000 before the
runtime is asked.  Pools are device memory of this device: ``ACL_MEM_ALLOCATION_TYPE_PINNED``,
``ACL_MEM_LOCATION_TYPE_DEVICE`` and a zeroed ``reserved`` are the only props
``aclrtMemPoolCreateImpl`` accepts (``src/acl/aclrt_impl/memory.cpp``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..protocol import MemPoolAttr
from .cdefs import ACL_MEM_ALLOCATION_TYPE_PINNED, ACL_MEM_HANDLE_TYPE_NONE, ACL_MEM_LOCATION_TYPE_DEVICE, ffi
from .optional_calls import OptionalCalls

if TYPE_CHECKING:
    from .streams import AscendStream

__all__ = ["AscendMemPools"]


class AscendMemPools(OptionalCalls):
    """The ``aclrtMemPool*`` calls of one device, whose pools take its memory (see
    :class:`OptionalCalls` for the parameters)."""

    lacking = ("stream-ordered allocator (its CANN lacks acl_rt_memory_soma.h's calls, or the product is not "
               "Atlas A2: 11-10_ordered_stream_memory_allocation.md)")

    def create(self, max_size: int = 0) -> Any:
        """``aclrtMemPoolCreate``: a pool of this device's memory, ``max_size`` bytes (0: all of it)."""
        runtime = self._need("aclrtMemPoolCreate")
        props: Any = ffi.new("aclrtMemPoolProps *")  # zeroed, reserved included
        props.allocType = ACL_MEM_ALLOCATION_TYPE_PINNED
        props.handleType = ACL_MEM_HANDLE_TYPE_NONE
        props.location.id = self.index
        props.location.type = ACL_MEM_LOCATION_TYPE_DEVICE
        props.maxSize = max_size
        pool = ffi.new("aclrtMemPool *")
        self.library.check(runtime.aclrtMemPoolCreate(pool, props), f"aclrtMemPoolCreate({max_size} bytes)")
        return pool[0]

    def destroy(self, pool: Any) -> None:
        """``aclrtMemPoolDestroy``."""
        runtime = self._need("aclrtMemPoolDestroy")
        self.library.check(runtime.aclrtMemPoolDestroy(pool), "aclrtMemPoolDestroy")

    def malloc_async(self, pool: Any, nbytes: int, stream: AscendStream) -> int:
        """``aclrtMemPoolMallocAsync``: the block's address (0 for 0 bytes, which allocates nothing)."""
        runtime = self._need("aclrtMemPoolMallocAsync")
        self._check_stream(stream)
        pointer = ffi.new("void **")
        code = runtime.aclrtMemPoolMallocAsync(pointer, nbytes, pool, stream.handle)
        self.library.check(code, f"aclrtMemPoolMallocAsync({nbytes} bytes)", {"stream": stream.name})
        return int(ffi.cast("uintptr_t", pointer[0]))

    def free_async(self, address: int, stream: AscendStream) -> None:
        """``aclrtMemPoolFreeAsync``."""
        runtime = self._need("aclrtMemPoolFreeAsync")
        self._check_stream(stream)
        code = runtime.aclrtMemPoolFreeAsync(ffi.cast("void *", address), stream.handle)
        self.library.check(code, f"aclrtMemPoolFreeAsync({address:#x})", {"stream": stream.name})

    def trim_to(self, pool: Any, keep: int) -> None:
        """``aclrtMemPoolTrimTo``."""
        runtime = self._need("aclrtMemPoolTrimTo")
        self.library.check(runtime.aclrtMemPoolTrimTo(pool, keep), f"aclrtMemPoolTrimTo({keep} bytes)")

    def get_attr(self, pool: Any, attr: MemPoolAttr) -> int:
        """``aclrtMemPoolGetAttr``: the counters are ``uint64_t``, the reuse flags ``uint32_t``."""
        runtime = self._need("aclrtMemPoolGetAttr")
        attr = MemPoolAttr(attr)
        flag = attr <= MemPoolAttr.REUSE_ALLOW_INTERNAL_DEPENDENCIES
        value = ffi.new("uint32_t *" if flag else "uint64_t *")
        self.library.check(runtime.aclrtMemPoolGetAttr(pool, int(attr), value), f"aclrtMemPoolGetAttr({attr.name})")
        return int(value[0])
