/* fake_cann.h: what the three fake CANN libraries share (a test fixture, never shipped).
 *
 * libascendcl.so (acl_core.c, acl_stream.c), libnnopbase.so (nnopbase.c) and libopapi.so
 * (opapi.c) export the public CANN symbols with the prototypes of shared/reference/acl_api.md.
 * They talk to each other through the fakecann_* functions below, which real CANN does not
 * have: libnnopbase asks libascendcl whether an address is live device memory and enqueues
 * kernels on its streams; libopapi builds executors through libnnopbase.
 */
#ifndef FAKE_CANN_H
#define FAKE_CANN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

typedef int aclError;
typedef int32_t aclnnStatus;
typedef void *aclrtStream;
typedef void *aclrtEvent;
typedef void *aclrtContext;
typedef void (*aclrtCallback)(void *userData);
typedef void (*aclrtHostFunc)(void *args);

/* Status codes: reference/acl_api.md 1.4 (runtime) and 2 (aclnn). */
enum {
    ACL_SUCCESS = 0,
    ACL_ERROR_INVALID_PARAM = 100000,
    ACL_ERROR_UNINITIALIZE = 100001,
    ACL_ERROR_REPEAT_INITIALIZE = 100002,
    ACL_ERROR_REPEAT_SUBSCRIBE = 100033,
    ACL_ERROR_STREAM_NOT_SUBSCRIBE = 100034,
    ACL_ERROR_THREAD_NOT_SUBSCRIBE = 100035,
    ACL_ERROR_WAIT_CALLBACK_TIMEOUT = 100036,
    ACL_ERROR_REPEAT_FINALIZE = 100037,
    ACL_ERROR_RT_PARAM_INVALID = 107000,
    ACL_ERROR_RT_INVALID_DEVICEID = 107001,
    ACL_ERROR_RT_CONTEXT_NULL = 107002,
    ACL_ERROR_RT_STREAM_CONTEXT = 107003,
    ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID = 107006,
    ACL_ERROR_RT_EVENT_TIMESTAMP_REVERSAL = 107007,
    ACL_ERROR_RT_ADDR_UNALIGNED = 107008,
    ACL_ERROR_RT_THREAD_SUBSCRIBE = 107012,
    ACL_ERROR_RT_STREAM_NO_CB_REG = 107015,
    ACL_ERROR_RT_INVALID_HANDLE = 107017,
    ACL_ERROR_RT_TASK_TIMEOUT = 107020,
    ACL_ERROR_RT_STREAM_ABORT = 107023,
    ACL_ERROR_RT_CAPTURE_DEPENDENCY = 107024,
    ACL_ERROR_RT_STREAM_UNJOINED = 107025,
    ACL_ERROR_RT_STREAM_CAPTURED = 107027,
    ACL_ERROR_RT_EVENT_CAPTURED = 107028,
    ACL_ERROR_RT_STREAM_NOT_CAPTURED = 107029,
    ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT = 107030,
    ACL_ERROR_STREAM_CAPTURE_CONFLICT = 107032,
    ACL_ERROR_STREAM_TASK_GROUP_STATUS = 107033,
    ACL_ERROR_RT_STREAM_CAPTURE_UNMATCHED = 107036,
    ACL_ERROR_RT_MODEL_RUNNING = 107037,
    ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD = 107038,
    ACL_ERROR_RT_CAPTURE_MODE_BLOCK_ASYNC = 107041,
    ACL_ERROR_RT_FEATURE_NOT_SUPPORT = 207000,
    ACL_ERROR_RT_MEMORY_ALLOCATION = 207001,
    ACL_ERROR_RT_MEMORY_FREE = 207002,
    ACL_ERROR_RT_NO_EVENT_RESOURCE = 207007,
    ACL_ERROR_RT_NO_STREAM_RESOURCE = 207008,
    ACL_ERROR_RT_STREAM_NOT_COMPLETE = 507004,
    ACL_ERROR_RT_EVENT_NOT_COMPLETE = 507006,
    ACL_ERROR_RT_TASK_TYPE_NOT_SUPPORT = 507009,
    ACL_ERROR_RT_REPORT_TIMEOUT = 507012,
    ACL_ERROR_RT_SYS_DMA = 507013,
    ACL_ERROR_RT_AICORE_TRAP_READ_OVERFLOW = 507042,
    ACL_ERROR_RT_AICORE_TRAP_WRITE_OVERFLOW = 507043,
    ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED = 507903,
    ACL_ERROR_RT_STREAM_SYNC_TIMEOUT = 507046,
    ACL_ERROR_RT_EVENT_SYNC_TIMEOUT = 507047,
    ACL_ERROR_RT_DEVICE_MEM_ERROR = 507053,
    ACLNN_ERR_PARAM_NULLPTR = 161001,
    ACLNN_ERR_PARAM_INVALID = 161002,
    ACLNN_ERR_INNER_NOT_TRANS_EXECUTOR = 561102,
    ACLNN_ERR_INNER_NULLPTR = 561103,
};

/* aclDataType values (reference 1.5) the fake computes with. */
enum {
    ACL_FLOAT = 0, ACL_FLOAT16 = 1, ACL_INT8 = 2, ACL_INT32 = 3, ACL_UINT8 = 4,
    ACL_INT64 = 9, ACL_DOUBLE = 11, ACL_BOOL = 12, ACL_BF16 = 27,
};

#define FAKE_MAX_DIMS 8
#define FAKE_MAX_TENSORS 4
#define FAKE_ALIGN 32

/* ---- tensors, scalars, int arrays, executors (owned by libnnopbase) --------------------- */
typedef struct fake_view {
    uint64_t ndim;
    int64_t dims[FAKE_MAX_DIMS];
    int64_t strides[FAKE_MAX_DIMS]; /* elements */
    int64_t offset;                 /* elements from data */
    int32_t dtype;
    int32_t format;
    void *data;                     /* storage base */
} fake_view;

typedef struct aclTensor { fake_view view; } aclTensor;
typedef struct aclScalar { int32_t dtype; double value; } aclScalar;
typedef struct aclIntArray { uint64_t size; int64_t *values; } aclIntArray;

struct fake_call;
typedef int (*fake_kernel)(const struct fake_call *call, char *why, size_t why_len);

/* Everything a launch needs, copied into the task: re-pointing a repeatable executor after
 * a launch never changes what that launch computes. */
typedef struct fake_call {
    char op[32];
    bool has_in[FAKE_MAX_TENSORS], has_out[FAKE_MAX_TENSORS];
    fake_view in[FAKE_MAX_TENSORS], out[FAKE_MAX_TENSORS];
    double real[4];
    int64_t integer[4];
    int64_t list[FAKE_MAX_DIMS];
    uint64_t list_len;
    uint64_t workspace_size;
    void *workspace; /* set at launch */
    fake_kernel kernel;
} fake_call;

typedef struct aclOpExecutor {
    fake_call call;
    aclTensor *in_handle[FAKE_MAX_TENSORS], *out_handle[FAKE_MAX_TENSORS];
    bool repeatable;
    bool refuses_repeatable; /* e.g. same-address ViewCopy (reference 2) */
    int pending;             /* launches queued and not yet run: the memory lives until they are */
    bool destroyed;          /* aclDestroyAclOpExecutor came while a launch was queued */
} aclOpExecutor;

static inline int fake_itemsize(int dtype)
{
    switch (dtype) {
    case ACL_FLOAT: case ACL_INT32: return 4;
    case ACL_FLOAT16: case ACL_BF16: return 2;
    case ACL_INT8: case ACL_UINT8: case ACL_BOOL: return 1;
    case ACL_INT64: case ACL_DOUBLE: return 8;
    default: return 0;
    }
}

/* ---- shared internals exported by libascendcl ------------------------------------------- */
const char *aclGetRecentErrMsg(void);
/* Set the calling thread's aclGetRecentErrMsg text and return code. */
int fakecann_fail(int code, const char *format, ...) __attribute__((format(printf, 2, 3)));
/* Count live objects by kind ("tensor", "executor", ...) for leak checks. */
void fakecann_count(const char *kind, int delta);
/* 1 when [address, address + nbytes) lies in one live allocation (device memory only when
 * device_only); otherwise 0 and a reason in why. */
int fakecann_memory_ok(const void *address, uint64_t nbytes, int device_only, char *why, size_t why_len);
/* Overwrite the bytes a kernel may touch past an output of nbytes at address: up to
 * ALIGN_UP(nbytes, 32) + 32 (11-01_device_memory_malloc_and_free.md), within its allocation. */
void fakecann_touch_padding(const void *address, uint64_t nbytes);
/* Enqueue run(payload) on stream; release(payload) afterwards, whether it ran or was skipped.
 * run returns 0 or an error code (with a reason in why) that becomes the stream's sticky error. */
typedef int (*fakecann_task_fn)(void *payload, char *why, size_t why_len);
int fakecann_enqueue(aclrtStream stream, fakecann_task_fn run, void (*release)(void *), void *payload,
                     const char *what);

/* ---- shared internals exported by libnnopbase -------------------------------------------- */
aclOpExecutor *fakecann_executor_new(const char *op, fake_kernel kernel, uint64_t workspace_size);
int fakecann_tensor_live(const aclTensor *tensor);
int fakecann_scalar_live(const aclScalar *scalar);
int fakecann_int_array_live(const aclIntArray *array);
aclnnStatus fakecann_launch(void *workspace, uint64_t workspace_size, aclOpExecutor *executor,
                            aclrtStream stream, const char *api);

/* ---- a set of pointers (handle registries), header-only so each library has its own -- *
 * items[0..len) lists the members densely (callers iterate over it); an open-addressing hash
 * index (linear probing, backward-shift deletion) finds one in constant time, as a runtime's
 * handle tables do, so a check of a handle does not cost a scan of every live handle. */
typedef struct {
    void **items;
    size_t len, cap;
    void **keys;     /* bucket -> member, or unused when where[bucket] == PTR_SET_EMPTY */
    size_t *where;   /* bucket -> its member's position in items */
    size_t buckets;  /* a power of two, at least twice len */
} ptr_set;

#define PTR_SET_EMPTY ((size_t)-1)

static inline size_t ptr_set_hash(const void *item, size_t buckets)
{
    uint64_t x = (uint64_t)(uintptr_t)item;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x & (buckets - 1);
}

static inline size_t ptr_set_bucket(const ptr_set *set, const void *item)
{
    if (!set->buckets)
        return PTR_SET_EMPTY;
    for (size_t b = ptr_set_hash(item, set->buckets);; b = (b + 1) & (set->buckets - 1)) {
        if (set->where[b] == PTR_SET_EMPTY)
            return PTR_SET_EMPTY;
        if (set->keys[b] == item)
            return b;
    }
}

static inline int ptr_set_has(const ptr_set *set, const void *item)
{
    return ptr_set_bucket(set, item) != PTR_SET_EMPTY;
}

static inline void ptr_set_place(ptr_set *set, void *item, size_t position)
{
    size_t b = ptr_set_hash(item, set->buckets);
    while (set->where[b] != PTR_SET_EMPTY)
        b = (b + 1) & (set->buckets - 1);
    set->keys[b] = item;
    set->where[b] = position;
}

static inline int ptr_set_reindex(ptr_set *set, size_t buckets)
{
    void **keys = (void **)malloc(buckets * sizeof(void *));
    size_t *where = (size_t *)malloc(buckets * sizeof(size_t));
    if (!keys || !where) {
        free(keys);
        free(where);
        return 0;
    }
    free(set->keys);
    free(set->where);
    set->keys = keys;
    set->where = where;
    set->buckets = buckets;
    for (size_t b = 0; b < buckets; b++)
        where[b] = PTR_SET_EMPTY;
    for (size_t i = 0; i < set->len; i++)
        ptr_set_place(set, set->items[i], i);
    return 1;
}

static inline int ptr_set_add(ptr_set *set, void *item)
{
    if (set->len == set->cap) {
        size_t cap = set->cap ? set->cap * 2 : 64;
        void **items = (void **)realloc(set->items, cap * sizeof(void *));
        if (!items)
            return 0;
        set->items = items;
        set->cap = cap;
    }
    if (2 * (set->len + 1) > set->buckets && !ptr_set_reindex(set, set->buckets ? set->buckets * 2 : 128))
        return 0;
    set->items[set->len] = item;
    ptr_set_place(set, item, set->len);
    set->len++;
    return 1;
}

static inline int ptr_set_remove(ptr_set *set, const void *item)
{
    size_t b = ptr_set_bucket(set, item);
    if (b == PTR_SET_EMPTY)
        return 0;
    size_t position = set->where[b], mask = set->buckets - 1;
    void *last = set->items[--set->len];
    if (position != set->len) { /* the last member fills the hole in items */
        set->items[position] = last;
        set->where[ptr_set_bucket(set, last)] = position;
    }
    set->where[b] = PTR_SET_EMPTY; /* backward shift: later members of the probe run move up */
    for (size_t j = (b + 1) & mask; set->where[j] != PTR_SET_EMPTY; j = (j + 1) & mask) {
        size_t home = ptr_set_hash(set->keys[j], set->buckets);
        int stays = (j > b) ? (home > b && home <= j) : (home > b || home <= j);
        if (!stays) {
            set->keys[b] = set->keys[j];
            set->where[b] = set->where[j];
            set->where[j] = PTR_SET_EMPTY;
            b = j;
        }
    }
    return 1;
}

static inline void ptr_set_free(ptr_set *set)
{
    free(set->items);
    free(set->keys);
    free(set->where);
    *set = (ptr_set){0};
}

#endif
