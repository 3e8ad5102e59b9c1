"""Hand-written cffi declarations of the CANN C API that the ascend backend calls.

Every prototype is copied from ``shared/reference/acl_api.md`` (which cites the CANN headers:
``acl/acl_rt.h`` and ``acl/acl_base.h`` of the runtime, ``aclnn/acl_meta.h`` of opbase, the
``aclnn_*.h`` operator headers of ops-math and ops-nn).  The headers are C++-flavoured
(``constexpr``, enum members of -1, ``static const int`` codes), so they cannot be fed to cffi
as they are: enums are declared as the ``int`` they are passed as, and codes and flags are
Python constants here.

The runtime section is exported by ``libascendcl.so``, the tensor/executor section by
``libnnopbase.so``, the operators by ``libopapi.so`` or the per-repo ``libopapi_*.so``.
``OPTIONAL_RUNTIME`` lists what older CANN releases lack; everything else must resolve.
"""

from __future__ import annotations

from cffi import FFI

__all__ = ["MEMPOOL_CDEF", "NNOPBASE_OPTIONAL", "NNOPBASE_REQUIRED", "RUNTIME_CAPTURE", "RUNTIME_MEMPOOL",
           "RUNTIME_OPTIONAL", "RUNTIME_OP_TIMEOUT", "RUNTIME_PEER", "RUNTIME_REQUIRED", "RUNTIME_RULES", "ffi"]

RUNTIME_CDEF = """
typedef int aclError;
typedef void *aclrtStream;
typedef void *aclrtEvent;
typedef void *aclrtContext;
typedef void (*aclrtCallback)(void *userData);
typedef void (*aclrtHostFunc)(void *args);
typedef int aclrtMemcpyKind;            /* enum aclrtMemcpyKind */
typedef int aclrtMemMallocPolicy;       /* enum aclrtMemMallocPolicy */
typedef int aclrtMemAttr;               /* enum aclrtMemAttr */
typedef int aclrtCallbackBlockType;     /* enum aclrtCallbackBlockType */
typedef int aclrtEventRecordedStatus;   /* enum: NOT_READY = 0, COMPLETE = 1 */
typedef int aclrtStreamStatus;          /* enum: COMPLETE = 0, NOT_READY = 1 */

aclError aclInit(const char *configPath);
aclError aclFinalize(void);
const char *aclGetRecentErrMsg(void);

aclError aclrtSetDevice(int32_t deviceId);
aclError aclrtResetDevice(int32_t deviceId);
aclError aclrtGetDeviceCount(uint32_t *count);
aclError aclrtCreateContext(aclrtContext *context, int32_t deviceId);
aclError aclrtDestroyContext(aclrtContext context);
aclError aclrtSetCurrentContext(aclrtContext context);

aclError aclrtCreateStreamWithConfig(aclrtStream *stream, uint32_t priority, uint32_t flag);
aclError aclrtDestroyStream(aclrtStream stream);
aclError aclrtSynchronizeStream(aclrtStream stream);
aclError aclrtSynchronizeStreamWithTimeout(aclrtStream stream, int32_t timeout);
aclError aclrtStreamQuery(aclrtStream stream, aclrtStreamStatus *status);
aclError aclrtStreamWaitEvent(aclrtStream stream, aclrtEvent event);

aclError aclrtCreateEventWithFlag(aclrtEvent *event, uint32_t flag);
aclError aclrtDestroyEvent(aclrtEvent event);
aclError aclrtRecordEvent(aclrtEvent event, aclrtStream stream);
aclError aclrtQueryEventStatus(aclrtEvent event, aclrtEventRecordedStatus *status);
aclError aclrtSynchronizeEvent(aclrtEvent event);
aclError aclrtSynchronizeEventWithTimeout(aclrtEvent event, int32_t timeout);
aclError aclrtEventElapsedTime(float *ms, aclrtEvent startEvent, aclrtEvent endEvent);

aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy);
aclError aclrtFree(void *devPtr);
aclError aclrtMallocHost(void **hostPtr, size_t size);
aclError aclrtFreeHost(void *hostPtr);
aclError aclrtMemcpyAsync(void *dst, size_t destMax, const void *src, size_t count,
                          aclrtMemcpyKind kind, aclrtStream stream);
aclError aclrtMemsetAsync(void *devPtr, size_t maxCount, int32_t value, size_t count, aclrtStream stream);
aclError aclrtGetMemInfo(aclrtMemAttr attr, size_t *free, size_t *total);

aclError aclrtSubscribeReport(uint64_t threadId, aclrtStream stream);
aclError aclrtLaunchCallback(aclrtCallback fn, void *userData, aclrtCallbackBlockType blockType,
                             aclrtStream stream);
aclError aclrtProcessReport(int32_t timeout);
aclError aclrtUnSubscribeReport(uint64_t threadId, aclrtStream stream);
aclError aclrtLaunchHostFunc(aclrtStream stream, aclrtHostFunc fn, void *args);

aclError aclrtCreateEventExWithFlag(aclrtEvent *event, uint32_t flag);
aclError aclrtResetEvent(aclrtEvent event, aclrtStream stream);
aclError aclrtSetStreamFailureMode(aclrtStream stream, uint64_t mode);
aclError aclrtStreamAbort(aclrtStream stream);
const char *aclrtGetSocName(void);
aclError aclrtSetOpExecuteTimeOut(uint32_t timeout);
aclError aclrtSetOpExecuteTimeOutV2(uint64_t timeout, uint64_t *actualTimeout);

typedef void *aclmdlRI;
typedef void *aclrtTaskGrp;
typedef int aclmdlRICaptureMode;        /* enum: GLOBAL = 0, THREAD_LOCAL, RELAXED */
typedef int aclmdlRICaptureStatus;      /* enum: NONE = 0, ACTIVE, INVALIDATED */
aclError aclmdlRICaptureBegin(aclrtStream stream, aclmdlRICaptureMode mode);
aclError aclmdlRICaptureGetInfo(aclrtStream stream, aclmdlRICaptureStatus *status, aclmdlRI *modelRI);
aclError aclmdlRICaptureEnd(aclrtStream stream, aclmdlRI *modelRI);
aclError aclmdlRIExecuteAsync(aclmdlRI modelRI, aclrtStream stream);
aclError aclmdlRIDestroy(aclmdlRI modelRI);
aclError aclmdlRICaptureTaskGrpBegin(aclrtStream stream);
aclError aclmdlRICaptureTaskGrpEnd(aclrtStream stream, aclrtTaskGrp *handle);
aclError aclmdlRICaptureTaskUpdateBegin(aclrtStream stream, aclrtTaskGrp handle);
aclError aclmdlRICaptureTaskUpdateEnd(aclrtStream stream);
"""

NNOPBASE_CDEF = """
typedef int32_t aclnnStatus;
typedef int aclDataType;                /* enum aclDataType (ACL_DT_UNDEFINED = -1) */
typedef int aclFormat;                  /* enum aclFormat (ACL_FORMAT_UNDEFINED = -1) */
typedef struct aclOpExecutor aclOpExecutor;
typedef struct aclTensor aclTensor;
typedef struct aclScalar aclScalar;
typedef struct aclIntArray aclIntArray;

aclTensor *aclCreateTensor(const int64_t *viewDims, uint64_t viewDimsNum, aclDataType dataType,
                           const int64_t *stride, int64_t offset, aclFormat format,
                           const int64_t *storageDims, uint64_t storageDimsNum, void *tensorData);
aclScalar *aclCreateScalar(void *value, aclDataType dataType);
aclIntArray *aclCreateIntArray(const int64_t *value, uint64_t size);
aclnnStatus aclDestroyTensor(const aclTensor *tensor);
aclnnStatus aclDestroyScalar(const aclScalar *scalar);
aclnnStatus aclDestroyIntArray(const aclIntArray *array);

aclnnStatus aclSetAclOpExecutorRepeatable(aclOpExecutor *executor);
aclnnStatus aclDestroyAclOpExecutor(aclOpExecutor *executor);
aclnnStatus aclSetInputTensorAddr(aclOpExecutor *executor, const size_t index, aclTensor *tensor, void *addr);
aclnnStatus aclSetOutputTensorAddr(aclOpExecutor *executor, const size_t index, aclTensor *tensor, void *addr);
"""

_PHASE_TWO = ("aclnnStatus aclnn{0}(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, "
              "aclrtStream stream);")
_TAIL = "uint64_t *workspaceSize, aclOpExecutor **executor"
_SELF_OUT = f"const aclTensor *self, aclTensor *out, {_TAIL}"
_BINARY_ALPHA = f"const aclTensor *self, const aclTensor *other, const aclScalar *alpha, aclTensor *out, {_TAIL}"
_SCALAR_ALPHA = f"const aclTensor *self, const aclScalar *other, const aclScalar *alpha, aclTensor *out, {_TAIL}"
_BINARY = f"const aclTensor *self, const aclTensor *other, aclTensor *out, {_TAIL}"
_SCALAR = f"const aclTensor *self, const aclScalar *other, aclTensor *out, {_TAIL}"
_PRODUCT = f"const aclTensor *self, const aclTensor *mat2, aclTensor *out, int8_t cubeMathType, {_TAIL}"

#: Phase-one parameter lists by aclnn name (reference/acl_api.md section 3).
PHASE_ONE: dict[str, str] = {
    "Add": _BINARY_ALPHA, "Adds": _SCALAR_ALPHA, "Sub": _BINARY_ALPHA, "Subs": _SCALAR_ALPHA,
    "Mul": _BINARY, "Muls": _SCALAR, "Div": _BINARY, "Divs": _SCALAR,
    "Relu": _SELF_OUT, "Gelu": _SELF_OUT, "Silu": _SELF_OUT, "Sigmoid": _SELF_OUT, "Tanh": _SELF_OUT,
    "Exp": _SELF_OUT,
    "GeluV2": f"const aclTensor *x, int64_t approximate, aclTensor *y, {_TAIL}",
    "Softmax": f"const aclTensor *self, int64_t dim, aclTensor *out, {_TAIL}",
    "LayerNorm": ("const aclTensor *input, const aclIntArray *normalizedShape, const aclTensor *weightOptional, "
                  "const aclTensor *biasOptional, double eps, aclTensor *out, aclTensor *meanOutOptional, "
                  f"aclTensor *rstdOutOptional, {_TAIL}"),
    # from NN docs/aclnnRmsNorm.md (no header in ops-nn): see the reference
    "RmsNorm": ("const aclTensor *x, const aclTensor *gamma, double epsilon, const aclTensor *yOut, "
                f"const aclTensor *rstdOut, {_TAIL}"),
    "Matmul": _PRODUCT, "Mm": _PRODUCT, "BatchMatMul": _PRODUCT,
    "Addmm": ("const aclTensor *self, const aclTensor *mat1, const aclTensor *mat2, const aclScalar *beta, "
              f"const aclScalar *alpha, aclTensor *out, int8_t cubeMathType, {_TAIL}"),
    "Cast": f"const aclTensor *self, const aclDataType dtype, aclTensor *out, {_TAIL}",
    "Permute": f"const aclTensor *self, const aclIntArray *dims, aclTensor *out, {_TAIL}",
    "Embedding": f"const aclTensor *weight, const aclTensor *indices, const aclTensor *out, {_TAIL}",
    "InplaceCopy": f"aclTensor *selfRef, const aclTensor *src, {_TAIL}",
    # the decoder's step (issue 26): ops-math headers, and its cache write from ops-nn
    # index/scatter/docs/aclnnInplaceScatterUpdate.md
    "Minimum": f"const aclTensor *self, const aclTensor *other, aclTensor *out, {_TAIL}",
    "Neg": _SELF_OUT,
    "LogicalAnd": f"const aclTensor *self, const aclTensor *other, aclTensor *out, {_TAIL}",
    "IndexSelect": f"const aclTensor *self, int64_t dim, const aclTensor *index, aclTensor *out, {_TAIL}",
    "SWhere": f"const aclTensor *condition, const aclTensor *self, const aclTensor *other, aclTensor *out, {_TAIL}",
    "InplaceScatterUpdate": ("aclTensor *data, const aclTensor *indices, const aclTensor *updates, int64_t axis, "
                             f"{_TAIL}"),
    # issue 14: ops-nn activation/, ops-math and ops-nn index/norm/pooling headers
    "Elu": ("const aclTensor *self, const aclScalar *alpha, const aclScalar *scale, const aclScalar *inputScale, "
            f"aclTensor *out, {_TAIL}"),
    "Celu": f"const aclTensor *self, const aclScalar *alpha, aclTensor *out, {_TAIL}",
    "Selu": _SELF_OUT,
    "Mish": _SELF_OUT,
    "Softplus": f"const aclTensor *self, const aclScalar *beta, const aclScalar *threshold, aclTensor *out, {_TAIL}",
    "Triu": f"const aclTensor *self, int64_t diagonal, aclTensor *out, {_TAIL}",
    "Tril": f"const aclTensor *self, int64_t diagonal, aclTensor *out, {_TAIL}",
    "Cumsum": f"const aclTensor *self, int64_t dim, aclDataType dtype, aclTensor *out, {_TAIL}",
    "CumsumV2": f"const aclTensor *self, int64_t dim, bool exclusive, bool reverse, aclTensor *out, {_TAIL}",
    "OneHot": ("const aclTensor *self, int numClasses, const aclTensor *onValue, const aclTensor *offValue, "
               f"int64_t axis, aclTensor *out, {_TAIL}"),
    "Scatter": ("const aclTensor *self, int64_t dim, const aclTensor *index, const aclTensor *src, int64_t reduce, "
                f"aclTensor *out, {_TAIL}"),
    "GroupNorm": ("const aclTensor *self, const aclTensor *gammaOptional, const aclTensor *betaOptional, int64_t n, "
                  "int64_t c, int64_t hxw, int64_t group, double eps, aclTensor *out, aclTensor *meanOut, "
                  f"aclTensor *rstdOut, {_TAIL}"),
    "MaxPool2dWithIndices": ("const aclTensor *self, const aclIntArray *kernelSize, const aclIntArray *stride, "
                             "const aclIntArray *padding, const aclIntArray *dilation, bool ceilMode, aclTensor *out, "
                             f"aclTensor *indices, {_TAIL}"),
}


def _opapi_cdef() -> str:
    lines = []
    for name, parameters in PHASE_ONE.items():
        lines.append(f"aclnnStatus aclnn{name}GetWorkspaceSize({parameters});")
        lines.append(_PHASE_TWO.format(name))
    return "\n".join(lines)


#: Resolved when present: aclrtLaunchHostFunc is missing from the CANN 7.x headers (torch_npu *-7.x
#: branches), the event timeout is RT-only, and the reference does not show the stream timeout
#: in the oldest headers; each has a fallback.
RUNTIME_OPTIONAL = ("aclrtLaunchHostFunc", "aclrtSynchronizeEventWithTimeout", "aclrtSynchronizeStreamWithTimeout")
#: The documented runtime rules (hicann/runtime docs/zh/api_ref 06, 07, 15): reusable events,
#: failure modes, stream abort, the product's name; without them the capability is off.
RUNTIME_RULES = ("aclrtCreateEventExWithFlag", "aclrtResetEvent", "aclrtSetStreamFailureMode", "aclrtStreamAbort",
                 "aclrtGetSocName")
#: The op execute timeout (12_execution_control.md): seconds, and the microsecond form that says
#: what it rounded to (A2/A3/950 recommend it); optional, the option needs one of them.
RUNTIME_OP_TIMEOUT = ("aclrtSetOpExecuteTimeOut", "aclrtSetOpExecuteTimeOutV2")
#: Model runtime instances captured from streams (15_model_running_instance__management.md).
RUNTIME_CAPTURE = ("aclmdlRICaptureBegin", "aclmdlRICaptureGetInfo", "aclmdlRICaptureEnd", "aclmdlRIExecuteAsync",
                   "aclmdlRIDestroy", "aclmdlRICaptureTaskGrpBegin", "aclmdlRICaptureTaskGrpEnd",
                   "aclmdlRICaptureTaskUpdateBegin", "aclmdlRICaptureTaskUpdateEnd")
RUNTIME_REQUIRED = (
    "aclInit", "aclFinalize", "aclGetRecentErrMsg", "aclrtSetDevice", "aclrtResetDevice", "aclrtGetDeviceCount",
    "aclrtCreateContext", "aclrtDestroyContext", "aclrtSetCurrentContext", "aclrtCreateStreamWithConfig",
    "aclrtDestroyStream", "aclrtSynchronizeStream", "aclrtStreamQuery",
    "aclrtStreamWaitEvent", "aclrtCreateEventWithFlag", "aclrtDestroyEvent", "aclrtRecordEvent",
    "aclrtQueryEventStatus", "aclrtSynchronizeEvent", "aclrtEventElapsedTime", "aclrtMalloc", "aclrtFree",
    "aclrtMallocHost", "aclrtFreeHost", "aclrtMemcpyAsync", "aclrtMemsetAsync", "aclrtGetMemInfo",
    "aclrtSubscribeReport", "aclrtLaunchCallback", "aclrtProcessReport", "aclrtUnSubscribeReport",
)
#: Executor reuse arrived after the 2023 ``acl_op_api.h``; without it every launch runs phase one.
NNOPBASE_OPTIONAL = ("aclSetAclOpExecutorRepeatable", "aclDestroyAclOpExecutor", "aclSetInputTensorAddr",
                     "aclSetOutputTensorAddr")
NNOPBASE_REQUIRED = ("aclCreateTensor", "aclCreateScalar", "aclCreateIntArray", "aclDestroyTensor",
                     "aclDestroyScalar", "aclDestroyIntArray")

#: Peer access between devices (04_device_management.md); resolved when present, and required
#: only by pipelines split into stages across devices.
PEER_CDEF = """
aclError aclrtDeviceCanAccessPeer(int32_t *canAccessPeer, int32_t deviceId, int32_t peerDeviceId);
aclError aclrtDeviceEnablePeerAccess(int32_t peerDeviceId, uint32_t flags);
aclError aclrtDeviceDisablePeerAccess(int32_t peerDeviceId);
"""
RUNTIME_PEER = ("aclrtDeviceCanAccessPeer", "aclrtDeviceEnablePeerAccess", "aclrtDeviceDisablePeerAccess")

ffi = FFI()
ffi.cdef(RUNTIME_CDEF)
ffi.cdef(PEER_CDEF)
ffi.cdef(NNOPBASE_CDEF)
ffi.cdef(_opapi_cdef())

# Flags, enum values and status codes the binding uses (acl_rt.h, acl_base.h, rt_error_codes.h).
ACL_MEM_MALLOC_HUGE_FIRST = 0
ACL_DDR_MEM = 0
ACL_HBM_MEM = 1
ACL_CALLBACK_BLOCK = 1
ACL_EVENT_SYNC = 0x1
ACL_EVENT_TIME_LINE = 0x8
ACL_EVENT_RECORDED_STATUS_COMPLETE = 1  # aclrtEventRecordedStatus: COMPLETE is 1 (aclrtEventStatus has 0)
ACL_STREAM_STATUS_COMPLETE = 0
ACL_ERROR_REPEAT_INITIALIZE = 100002
ACL_ERROR_THREAD_NOT_SUBSCRIBE = 100035  # aclrtProcessReport, deprecated generation
ACL_ERROR_WAIT_CALLBACK_TIMEOUT = 100036  # aclrtProcessReport, deprecated generation
ACL_ERROR_RT_THREAD_SUBSCRIBE = 107012  # aclrtProcessReport now: no stream subscribed to the thread
ACL_ERROR_RT_REPORT_TIMEOUT = 507012  # aclrtProcessReport now: no callback within the timeout
ACL_ERROR_RT_EVENT_TIMESTAMP_REVERSAL = 107007
ACL_ERROR_RT_EVENT_NOT_COMPLETE = 507006
ACL_CONTINUE_ON_FAILURE = 0
ACL_STOP_ON_FAILURE = 1

# -- issue 24, part two: the op wait timeout and the synchronous copies ------------------------------
#: ``aclrtSetOpWaitTimeout`` (07_event_management.md: seconds, process-wide, 0 none) and the
#: synchronous ``aclrtMemcpy`` / ``aclrtMemset`` (11-03_memory_copy_and_set.md), which a capture
#: in GLOBAL mode forbids (``Context::IsCaptureModeSupport``); all resolved when present.
SYNC_CDEF = """
aclError aclrtSetOpWaitTimeout(uint32_t timeout);
aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind);
aclError aclrtMemset(void *devPtr, size_t maxCount, int32_t value, size_t count);
"""
RUNTIME_OP_WAIT_TIMEOUT = ("aclrtSetOpWaitTimeout",)
RUNTIME_SYNC_COPIES = ("aclrtMemcpy", "aclrtMemset")
ffi.cdef(SYNC_CDEF)
__all__ += ["RUNTIME_OP_WAIT_TIMEOUT", "RUNTIME_SYNC_COPIES", "SYNC_CDEF"]
# -- the stream-ordered allocator (issue 24) ---------------------------------------------------
#: ``acl/acl_rt_memory_soma.h`` (11-10_ordered_stream_memory_allocation.md: Atlas A2 only,
#: experimental), with the ``aclrtMemPoolProps`` parts ``acl/acl_rt.h`` defines (enums as the
#: ``int`` they are passed as).  Resolved when present: without all of them the capability is off.
MEMPOOL_CDEF = """
typedef void *aclrtMemPool;
typedef int aclrtMemPoolAttr;           /* enum aclrtMemPoolAttr */
typedef int aclrtMemAllocationType;     /* enum: ACL_MEM_ALLOCATION_TYPE_PINNED = 0 */
typedef int aclrtMemHandleType;         /* enum: ACL_MEM_HANDLE_TYPE_NONE = 0 */
typedef int aclrtMemLocationType;       /* enum: ACL_MEM_LOCATION_TYPE_DEVICE = 1 */
typedef struct aclrtMemLocation {
    uint32_t id;
    aclrtMemLocationType type;
} aclrtMemLocation;
typedef struct {
    aclrtMemAllocationType allocType;
    aclrtMemHandleType handleType;
    aclrtMemLocation location;
    size_t maxSize;
    unsigned char reserved[32];
} aclrtMemPoolProps;

aclError aclrtMemPoolCreate(aclrtMemPool *memPool, const aclrtMemPoolProps *poolProps);
aclError aclrtMemPoolDestroy(const aclrtMemPool memPool);
aclError aclrtMemPoolSetAttr(aclrtMemPool memPool, aclrtMemPoolAttr attr, void *value);
aclError aclrtMemPoolGetAttr(aclrtMemPool memPool, aclrtMemPoolAttr attr, void *value);
aclError aclrtMemPoolMallocAsync(void **ptr, size_t size, aclrtMemPool memPool, aclrtStream stream);
aclError aclrtMemPoolFreeAsync(void *ptr, aclrtStream stream);
aclError aclrtMemPoolTrimTo(aclrtMemPool memPool, size_t minBytesToKeep);
"""
RUNTIME_MEMPOOL = ("aclrtMemPoolCreate", "aclrtMemPoolDestroy", "aclrtMemPoolSetAttr", "aclrtMemPoolGetAttr",
                   "aclrtMemPoolMallocAsync", "aclrtMemPoolFreeAsync", "aclrtMemPoolTrimTo")
ffi.cdef(MEMPOOL_CDEF)
ACL_MEM_ALLOCATION_TYPE_PINNED = 0
ACL_MEM_HANDLE_TYPE_NONE = 0
ACL_MEM_LOCATION_TYPE_DEVICE = 1
# -- conditional tasks in captured models (issue 25) ------------------------------------------------
#: ``include/external/acl/acl_rt.h`` (a trial feature: 15_model_running_instance__management.md,
#: Atlas A2 and A3), enums as the ``int`` they are passed as.  ``aclmdlRIAddCondTask`` takes its
#: parameters by value (cffi's ABI mode passes the struct through libffi).  Resolved when present:
#: without all four the capability is off.
COND_CDEF = """
typedef void *aclmdlRICondHandle;
typedef int aclmdlRICondHandleFlag;     /* enum: ACL_MODEL_RI_COND_HANDLE_ASSIGN_DEFAULT = 1 */
typedef int aclmdlRICondTaskType;       /* enum: IF = 0, WHILE = 1, SWITCH = 2 */
typedef struct tagAclmdlRICondTaskParams {
    aclmdlRICondHandle handle;
    aclmdlRICondTaskType type;
    uint32_t size;
    aclmdlRI *modelRIArray;
} aclmdlRICondTaskParams;

aclError aclmdlRICondHandleCreate(aclmdlRI modelRI, uint32_t defaultLaunchValue, aclmdlRICondHandleFlag flag,
                                  aclmdlRICondHandle *handle);
aclError aclmdlRICondHandleGetCondPtr(aclmdlRICondHandle handle, uint64_t **ptr);
aclError aclmdlRIAddCondTask(aclmdlRICondTaskParams params, aclrtStream stream, uint32_t flags);
aclError aclmdlRICaptureToModelRIBegin(aclrtStream stream, aclmdlRI modelRI, aclmdlRICaptureMode mode);
"""
RUNTIME_COND = ("aclmdlRICondHandleCreate", "aclmdlRICondHandleGetCondPtr", "aclmdlRIAddCondTask",
                "aclmdlRICaptureToModelRIBegin")
ffi.cdef(COND_CDEF)
ACL_MODEL_RI_COND_HANDLE_ASSIGN_DEFAULT = 1
__all__ += ["ACL_MODEL_RI_COND_HANDLE_ASSIGN_DEFAULT", "COND_CDEF", "RUNTIME_COND"]
