/* nnopbase.c: fake libnnopbase.so: aclTensor/aclScalar/aclIntArray, executors, phase two.
 *
 * Handles live in registries, so a destroyed or foreign pointer is an error, not a crash.
 * Executors are single-use unless aclSetAclOpExecutorRepeatable was called before their
 * first launch: a single-use executor is consumed by its launch (using it again is 561103).
 * Each launch copies the executor's call into the stream task, so later re-pointing never
 * changes what an earlier launch computes.  Launch checks what the real second phase
 * checks: workspace present and big enough, and every tensor in live device memory, in
 * bounds and 32-byte aligned.
 *
 * Destroying an executor whose launch may still run is a use-after-free on the device
 * (acl_meta.h): the launch, when the stream reaches it, fails with an AI-core read trap
 * (ACL_ERROR_RT_AICORE_TRAP_READ_OVERFLOW); so does one whose memory was freed meanwhile
 * (reads: 507042, writes: 507043; 507053 is the hardware's uncorrectable memory error).
 * A kernel that ran touches the 32 bytes of padding past each output and its workspace
 * (11-01_device_memory_malloc_and_free.md), so an unpadded neighbour is clobbered.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "fake_cann.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static ptr_set tensors, scalars, arrays, executors;

static int registered_locked(ptr_set *set, const void *handle) { return handle && ptr_set_has(set, handle); }

static int registered(ptr_set *set, const void *handle)
{
    pthread_mutex_lock(&lock);
    int found = handle && ptr_set_has(set, handle);
    pthread_mutex_unlock(&lock);
    return found;
}

static void *track(ptr_set *set, void *handle, const char *kind)
{
    if (!handle)
        return NULL;
    pthread_mutex_lock(&lock);
    int added = ptr_set_add(set, handle);
    pthread_mutex_unlock(&lock);
    if (!added) {
        free(handle);
        return NULL;
    }
    fakecann_count(kind, 1);
    return handle;
}

static int untrack(ptr_set *set, const void *handle, const char *kind)
{
    pthread_mutex_lock(&lock);
    int removed = handle && ptr_set_remove(set, handle);
    pthread_mutex_unlock(&lock);
    if (removed)
        fakecann_count(kind, -1);
    return removed;
}

int fakecann_tensor_live(const aclTensor *tensor) { return registered(&tensors, tensor); }
int fakecann_scalar_live(const aclScalar *scalar) { return registered(&scalars, scalar); }
int fakecann_int_array_live(const aclIntArray *array) { return registered(&arrays, array); }

/* ---- tensors --------------------------------------------------------------------------- */
aclTensor *aclCreateTensor(const int64_t *viewDims, uint64_t viewDimsNum, int dataType, const int64_t *stride,
                           int64_t offset, int format, const int64_t *storageDims, uint64_t storageDimsNum,
                           void *tensorData)
{
    (void)storageDims;
    if (viewDimsNum > FAKE_MAX_DIMS || (viewDimsNum && (!viewDims || !stride)) || offset < 0 || storageDimsNum > 8) {
        fakecann_fail(ACLNN_ERR_PARAM_INVALID, "aclCreateTensor: at most 8 dims, with strides, offset >= 0");
        return NULL;
    }
    aclTensor *tensor = (aclTensor *)calloc(1, sizeof *tensor);
    if (!tensor)
        return NULL;
    for (uint64_t i = 0; i < viewDimsNum; i++) {
        if (viewDims[i] < 0 || stride[i] < 0) {
            free(tensor);
            fakecann_fail(ACLNN_ERR_PARAM_INVALID, "aclCreateTensor: dims and strides must be non-negative");
            return NULL;
        }
        tensor->view.dims[i] = viewDims[i];
        tensor->view.strides[i] = stride[i];
    }
    tensor->view.ndim = viewDimsNum;
    tensor->view.offset = offset;
    tensor->view.dtype = dataType;
    tensor->view.format = format;
    tensor->view.data = tensorData;
    return (aclTensor *)track(&tensors, tensor, "tensor");
}

aclnnStatus aclDestroyTensor(const aclTensor *tensor)
{
    if (!untrack(&tensors, tensor, "tensor"))
        return fakecann_fail(ACLNN_ERR_PARAM_INVALID, "aclDestroyTensor: %p is not a live tensor", (void *)tensor);
    free((void *)tensor);
    return ACL_SUCCESS;
}

/* ---- scalars and int arrays ------------------------------------------------------------ */
aclScalar *aclCreateScalar(void *value, int dataType)
{
    if (!value)
        return NULL;
    aclScalar *scalar = (aclScalar *)calloc(1, sizeof *scalar);
    if (!scalar)
        return NULL;
    scalar->dtype = dataType;
    switch (dataType) {
    case ACL_FLOAT: scalar->value = *(const float *)value; break;
    case ACL_DOUBLE: scalar->value = *(const double *)value; break;
    case ACL_INT8: scalar->value = *(const int8_t *)value; break;
    case ACL_UINT8: scalar->value = *(const uint8_t *)value; break;
    case ACL_INT32: scalar->value = *(const int32_t *)value; break;
    case ACL_INT64: scalar->value = (double)*(const int64_t *)value; break;
    case ACL_BOOL: scalar->value = *(const bool *)value; break;
    default:
        free(scalar);
        fakecann_fail(ACLNN_ERR_PARAM_INVALID, "aclCreateScalar: data type %d is not supported by the fake", dataType);
        return NULL;
    }
    return (aclScalar *)track(&scalars, scalar, "scalar");
}

aclnnStatus aclDestroyScalar(const aclScalar *scalar)
{
    if (!untrack(&scalars, scalar, "scalar"))
        return fakecann_fail(ACLNN_ERR_PARAM_INVALID, "aclDestroyScalar: %p is not a live scalar", (void *)scalar);
    free((void *)scalar);
    return ACL_SUCCESS;
}

aclIntArray *aclCreateIntArray(const int64_t *value, uint64_t size)
{
    if (size && !value)
        return NULL;
    aclIntArray *array = (aclIntArray *)calloc(1, sizeof *array);
    if (!array)
        return NULL;
    array->size = size;
    array->values = (int64_t *)calloc(size ? size : 1, sizeof(int64_t));
    if (!array->values) {
        free(array);
        return NULL;
    }
    if (size)
        memcpy(array->values, value, size * sizeof(int64_t)); /* the values are copied */
    return (aclIntArray *)track(&arrays, array, "int_array");
}

aclnnStatus aclDestroyIntArray(const aclIntArray *array)
{
    if (!untrack(&arrays, array, "int_array"))
        return fakecann_fail(ACLNN_ERR_PARAM_INVALID, "aclDestroyIntArray: %p is not a live int array", (void *)array);
    free(array->values);
    free((void *)array);
    return ACL_SUCCESS;
}

/* ---- executors ------------------------------------------------------------------------- */
aclOpExecutor *fakecann_executor_new(const char *op, fake_kernel kernel, uint64_t workspace_size)
{
    aclOpExecutor *executor = (aclOpExecutor *)calloc(1, sizeof *executor);
    if (!executor)
        return NULL;
    snprintf(executor->call.op, sizeof executor->call.op, "%s", op);
    executor->call.kernel = kernel;
    executor->call.workspace_size = workspace_size;
    return (aclOpExecutor *)track(&executors, executor, "executor");
}

/* The handle goes at once; the memory once no queued launch refers to it.  A destroy by the
 * user (not a single-use executor's own launch) with a launch queued is a use after free. */
static void free_executor(aclOpExecutor *executor, bool by_user)
{
    pthread_mutex_lock(&lock);
    int removed = executor && ptr_set_remove(&executors, executor);
    bool now = removed && executor->pending == 0;
    if (removed && by_user && executor->pending > 0)
        executor->destroyed = true;
    pthread_mutex_unlock(&lock);
    if (removed)
        fakecann_count("executor", -1);
    if (now)
        free(executor);
}

static int need_executor(aclOpExecutor *executor, const char *api)
{
    if (!registered(&executors, executor))
        return fakecann_fail(ACLNN_ERR_INNER_NULLPTR, "%s: the executor is NULL, destroyed, or a single-use executor "
                             "that was already launched", api);
    return ACL_SUCCESS;
}

aclnnStatus aclSetAclOpExecutorRepeatable(aclOpExecutor *executor)
{
    int rc = need_executor(executor, "aclSetAclOpExecutorRepeatable");
    if (rc == ACL_SUCCESS && executor->refuses_repeatable)
        rc = fakecann_fail(ACLNN_ERR_INNER_NOT_TRANS_EXECUTOR, "aclSetAclOpExecutorRepeatable: aclnn%s uses a "
                           "same-address ViewCopy and cannot be made repeatable", executor->call.op);
    if (rc == ACL_SUCCESS)
        executor->repeatable = true;
    return rc;
}

aclnnStatus aclDestroyAclOpExecutor(aclOpExecutor *executor)
{
    int rc = need_executor(executor, "aclDestroyAclOpExecutor");
    if (rc == ACL_SUCCESS)
        free_executor(executor, true);
    return rc;
}

static aclnnStatus set_address(aclOpExecutor *executor, size_t index, aclTensor *tensor, void *addr, bool output)
{
    const char *api = output ? "aclSetOutputTensorAddr" : "aclSetInputTensorAddr";
    int rc = need_executor(executor, api);
    if (rc != ACL_SUCCESS)
        return rc;
    aclTensor **handles = output ? executor->out_handle : executor->in_handle;
    fake_view *views = output ? executor->call.out : executor->call.in;
    if (!executor->repeatable)
        return fakecann_fail(ACLNN_ERR_INNER_NOT_TRANS_EXECUTOR, "%s: the executor is not repeatable", api);
    if (index >= FAKE_MAX_TENSORS || !handles[index])
        return fakecann_fail(ACLNN_ERR_PARAM_INVALID, "%s: index %zu is out of range for aclnn%s", api, index,
                             executor->call.op);
    if (tensor != handles[index] || !fakecann_tensor_live(tensor))
        return fakecann_fail(ACLNN_ERR_PARAM_INVALID, "%s: the tensor is not the one given at phase one for index %zu",
                             api, index);
    if ((uintptr_t)addr % FAKE_ALIGN)
        return fakecann_fail(ACLNN_ERR_PARAM_INVALID, "%s: address %p is not 32-byte aligned", api, addr);
    views[index].data = addr;
    tensor->view.data = addr;
    return ACL_SUCCESS;
}

aclnnStatus aclSetInputTensorAddr(aclOpExecutor *executor, const size_t index, aclTensor *tensor, void *addr)
{
    return set_address(executor, index, tensor, addr, false);
}

aclnnStatus aclSetOutputTensorAddr(aclOpExecutor *executor, const size_t index, aclTensor *tensor, void *addr)
{
    return set_address(executor, index, tensor, addr, true);
}

/* ---- phase two --------------------------------------------------------------------------- */
static uint64_t extent_bytes(const fake_view *view)
{
    int64_t last = view->offset;
    for (uint64_t i = 0; i < view->ndim; i++) {
        if (view->dims[i] == 0)
            return 0;
        last += (view->dims[i] - 1) * view->strides[i];
    }
    return (uint64_t)(last + 1) * (uint64_t)fake_itemsize(view->dtype);
}

static int check_region(const char *api, const char *role, int index, const void *address, uint64_t nbytes)
{
    char why[300];
    if (nbytes == 0)
        return ACL_SUCCESS;
    if ((uintptr_t)address % FAKE_ALIGN)
        return fakecann_fail(ACLNN_ERR_PARAM_INVALID, "%s: %s %d address %p is not 32-byte aligned", api, role, index,
                             address);
    if (!fakecann_memory_ok(address, nbytes, 1, why, sizeof why))
        return fakecann_fail(ACLNN_ERR_PARAM_INVALID, "%s: %s %d: %s", api, role, index, why);
    return ACL_SUCCESS;
}

/* 0, or 1 when an input failed the check, 2 when an output or the workspace did. */
static int check_call(const fake_call *call, const char *api, int *rc)
{
    *rc = ACL_SUCCESS;
    for (int i = 0; i < FAKE_MAX_TENSORS; i++)
        if (call->has_in[i] && (*rc = check_region(api, "input", i, call->in[i].data, extent_bytes(&call->in[i]))))
            return 1;
    for (int i = 0; i < FAKE_MAX_TENSORS; i++)
        if (call->has_out[i] && (*rc = check_region(api, "output", i, call->out[i].data, extent_bytes(&call->out[i]))))
            return 2;
    if ((*rc = check_region(api, "workspace", 0, call->workspace, call->workspace_size)))
        return 2;
    return 0;
}

typedef struct launch {
    fake_call call;
    aclOpExecutor *executor;
} launch;

static void release_launch(void *payload)
{
    launch *queued = (launch *)payload;
    aclOpExecutor *executor = queued->executor;
    pthread_mutex_lock(&lock);
    bool last = --executor->pending == 0 && !registered_locked(&executors, executor);
    pthread_mutex_unlock(&lock);
    if (last)
        free(executor);
    free(queued);
}

static void touch_padding(const fake_call *call)
{
    for (int i = 0; i < FAKE_MAX_TENSORS; i++)
        if (call->has_out[i])
            fakecann_touch_padding(call->out[i].data, extent_bytes(&call->out[i]));
    if (call->workspace && call->workspace_size)
        fakecann_touch_padding(call->workspace, call->workspace_size);
}

/* Runs on the stream thread. */
static int run_call(void *payload, char *why, size_t why_len)
{
    launch *queued = (launch *)payload;
    fake_call *call = &queued->call;
    int rc;
    if (queued->executor->destroyed) {
        snprintf(why, why_len, "aclnn%s: the executor was destroyed while this launch was queued (use after free)",
                 call->op);
        return ACL_ERROR_RT_AICORE_TRAP_READ_OVERFLOW;
    }
    int side = check_call(call, call->op, &rc);
    if (side) {
        const char *message = aclGetRecentErrMsg();
        snprintf(why, why_len, "memory was freed or changed while the launch was queued (use after free): %s",
                 message ? message : "");
        return side == 1 ? ACL_ERROR_RT_AICORE_TRAP_READ_OVERFLOW : ACL_ERROR_RT_AICORE_TRAP_WRITE_OVERFLOW;
    }
    rc = call->kernel(call, why, why_len);
    if (rc == ACL_SUCCESS)
        touch_padding(call);
    return rc;
}

aclnnStatus fakecann_launch(void *workspace, uint64_t workspace_size, aclOpExecutor *executor, aclrtStream stream,
                            const char *api)
{
    int rc = need_executor(executor, api);
    uint64_t need = rc == ACL_SUCCESS ? executor->call.workspace_size : 0;
    if (rc == ACL_SUCCESS && need > 0 && !workspace)
        rc = fakecann_fail(ACLNN_ERR_PARAM_NULLPTR, "%s: workspace is NULL but phase one asked for %llu bytes", api,
                           (unsigned long long)need);
    else if (rc == ACL_SUCCESS && workspace_size < need)
        rc = fakecann_fail(ACLNN_ERR_PARAM_INVALID, "%s: workspace of %llu bytes is smaller than the %llu bytes phase "
                           "one asked for", api, (unsigned long long)workspace_size, (unsigned long long)need);
    launch *queued = rc == ACL_SUCCESS ? (launch *)malloc(sizeof *queued) : NULL;
    if (queued) {
        queued->call = executor->call;
        queued->call.workspace = need ? workspace : NULL;
        queued->executor = executor;
        check_call(&queued->call, api, &rc);
        if (rc == ACL_SUCCESS) {
            pthread_mutex_lock(&lock);
            executor->pending++;
            pthread_mutex_unlock(&lock);
            rc = fakecann_enqueue(stream, run_call, release_launch, queued, api); /* releases it when refused */
        } else {
            free(queued);
        }
    }
    if (rc == ACL_SUCCESS && !executor->repeatable)
        free_executor(executor, false); /* single-use: phase two consumes it */
    return rc;
}
