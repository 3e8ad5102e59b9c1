/* acl_core.c: fake libascendcl.so, part 1: init, devices, contexts, memory, errors, trace.
 *
 * Strict where the documentation states a rule (reference/acl_api.md section 5), so that the
 * binding's mistakes fail loudly here instead of misbehaving on hardware:
 * - every call that needs a device needs a current context on the *calling thread*;
 * - aclrtResetDevice refuses while user streams, events or contexts of the device live,
 *   and aclFinalize refuses while a device is still set (teardown order);
 * - device memory is host memory here, but every address is checked against a registry.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "acl_internal.h"

pthread_mutex_t rt_lock = PTHREAD_MUTEX_INITIALIZER;
fake_product rt_product = {"atlas-a2", "Ascend910B3", 65536, 1984, true, true, 1091.0, true};

/* FAKE_CANN_PRODUCT picks the product rules (acl_internal.h cites the pages). */
static void choose_product(void)
{
    static const fake_product products[] = {
        {"atlas-a2", "Ascend910B3", 65536, 1984, true, true, 1091.0, true},
        {"atlas-310p", "Ascend310P3", 1023, 1024, false, true, 547.0, false},
        {"atlas-200i-a2", "Ascend310B4", 65536, 512, false, false, 1091.0, true},
    };
    const char *wanted = getenv("FAKE_CANN_PRODUCT");
    rt_product = products[0];
    if (wanted && strcmp(wanted, "310p") == 0)
        rt_product = products[1];
    else if (wanted && strcmp(wanted, "200i-a2") == 0)
        rt_product = products[2];
}
pthread_cond_t rt_changed;
bool rt_initialized;
__thread fake_context *rt_current;
__thread bool rt_in_callback;

static int device_count;
static uint64_t device_capacity;
static struct { int refs; fake_context *primary; uint64_t in_use; } devices[FAKE_MAX_DEVICES];
static ptr_set contexts;

/* ---- errors ------------------------------------------------------------------------------ */
static __thread char recent_message[512];
static __thread char handed_message[512];

int fakecann_fail(int code, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    vsnprintf(recent_message, sizeof recent_message, format, args);
    va_end(args);
    return code;
}

/* Returns the last message once (then NULL), like a "get and clear". */
const char *aclGetRecentErrMsg(void)
{
    if (!recent_message[0])
        return NULL;
    memcpy(handed_message, recent_message, sizeof handed_message);
    recent_message[0] = '\0';
    return handed_message;
}

/* ---- trace and live counts (test hooks, not CANN) ---------------------------------------- */
static char *trace_text;
static size_t trace_len, trace_cap;

void rt_trace(const char *format, ...)
{
    char line[160];
    va_list args;
    va_start(args, format);
    int n = vsnprintf(line, sizeof line - 1, format, args);
    va_end(args);
    if (n < 0)
        return;
    if ((size_t)n > sizeof line - 2)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    if (trace_len + (size_t)n + 1 > trace_cap) {
        size_t cap = (trace_cap + (size_t)n + 1) * 2;
        char *grown = (char *)realloc(trace_text, cap);
        if (!grown)
            return;
        trace_text = grown;
        trace_cap = cap;
    }
    memcpy(trace_text + trace_len, line, (size_t)n);
    trace_len += (size_t)n;
    trace_text[trace_len] = '\0';
}

const char *fakecann_trace(void) { return trace_text ? trace_text : ""; }

void fakecann_trace_clear(void)
{
    pthread_mutex_lock(&rt_lock);
    trace_len = 0;
    if (trace_text)
        trace_text[0] = '\0';
    pthread_mutex_unlock(&rt_lock);
}

static struct { char kind[16]; int64_t live; } counts[16];
static pthread_mutex_t count_lock = PTHREAD_MUTEX_INITIALIZER;

void fakecann_count(const char *kind, int delta)
{
    pthread_mutex_lock(&count_lock);
    for (int i = 0; i < 16; i++) {
        if (!counts[i].kind[0])
            snprintf(counts[i].kind, sizeof counts[i].kind, "%s", kind);
        if (strcmp(counts[i].kind, kind) == 0) {
            counts[i].live += delta;
            break;
        }
    }
    pthread_mutex_unlock(&count_lock);
}

int64_t fakecann_live(const char *kind)
{
    int64_t live = 0;
    pthread_mutex_lock(&count_lock);
    for (int i = 0; i < 16; i++)
        if (strcmp(counts[i].kind, kind) == 0)
            live = counts[i].live;
    pthread_mutex_unlock(&count_lock);
    return live;
}

/* ---- time -------------------------------------------------------------------------------- */
double rt_now(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
}

int rt_deadline(int32_t timeout_ms, struct timespec *deadline)
{
    if (timeout_ms < 0)
        return 0;
    clock_gettime(CLOCK_MONOTONIC, deadline);
    deadline->tv_sec += timeout_ms / 1000;
    deadline->tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (deadline->tv_nsec >= 1000000000L) {
        deadline->tv_sec += 1;
        deadline->tv_nsec -= 1000000000L;
    }
    return 1;
}

/* ---- init -------------------------------------------------------------------------------- */
__attribute__((constructor)) static void init_condition(void)
{
    pthread_condattr_t attributes;
    pthread_condattr_init(&attributes);
    pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC);
    pthread_cond_init(&rt_changed, &attributes);
    pthread_condattr_destroy(&attributes);
}

static long env_long(const char *name, long fallback)
{
    const char *text = getenv(name);
    return text && *text ? strtol(text, NULL, 10) : fallback;
}

aclError aclInit(const char *configPath)
{
    (void)configPath;
    pthread_mutex_lock(&rt_lock);
    int rc = ACL_SUCCESS;
    if (rt_initialized) {
        rc = fakecann_fail(ACL_ERROR_REPEAT_INITIALIZE, "aclInit: ACL is already initialized in this process");
    } else {
        rt_initialized = true;
        device_count = (int)env_long("FAKE_CANN_DEVICES", 2);
        if (device_count < 0 || device_count > FAKE_MAX_DEVICES)
            device_count = 2;
        device_capacity = (uint64_t)env_long("FAKE_CANN_MEMORY_MB", 1024) << 20;
        choose_product();
        rt_trace("aclInit");
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

aclError aclFinalize(void)
{
    pthread_mutex_lock(&rt_lock);
    int rc = ACL_SUCCESS;
    if (!rt_initialized) {
        rc = fakecann_fail(ACL_ERROR_REPEAT_FINALIZE, "aclFinalize: ACL is not initialized");
    } else {
        for (int d = 0; d < device_count && rc == ACL_SUCCESS; d++)
            if (devices[d].refs > 0)
                rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID,
                                   "aclFinalize: device %d is still set; call aclrtResetDevice first", d);
    }
    if (rc == ACL_SUCCESS) {
        rt_initialized = false;
        rt_trace("aclFinalize");
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

int rt_need_context(void)
{
    if (!rt_initialized)
        return fakecann_fail(ACL_ERROR_UNINITIALIZE, "ACL is not initialized: call aclInit first");
    if (!rt_current || !rt_current->alive)
        return fakecann_fail(ACL_ERROR_RT_CONTEXT_NULL,
                             "this thread has no current context: call aclrtSetCurrentContext "
                             "(or aclrtSetDevice) on every thread that calls the runtime");
    return ACL_SUCCESS;
}

/* ---- devices ------------------------------------------------------------------------------- */
/* The SoC name the product rules are read from (NULL before aclInit). */
const char *aclrtGetSocName(void) { return rt_initialized ? rt_product.soc : NULL; }

/* ---- op execute timeout (12_execution_control.md, aclrtSetOpExecuteTimeOut[V2]) ----------------
 * Process-wide, the last call wins; 0 asks for the maximum (interval * 254); anything else is
 * rounded up to a multiple of the interval, at most the maximum.  The fake runs no kernel long
 * enough to time out: it keeps the figure in force for aclrtGetOpExecuteTimeout-style checks. */
static uint64_t op_timeout_us; /* 0: the product's default */

static uint64_t effective_op_timeout_us(uint64_t requested_us)
{
    uint64_t maximum = (uint64_t)(rt_product.op_timeout_max_s * 1e6), interval = maximum / 254;
    if (requested_us == 0 || requested_us >= maximum)
        return maximum;
    return ((requested_us + interval - 1) / interval) * interval;
}

aclError aclrtSetOpExecuteTimeOutV2(uint64_t timeout, uint64_t *actualTimeout)
{
    pthread_mutex_lock(&rt_lock);
    int rc = rt_initialized ? ACL_SUCCESS : fakecann_fail(ACL_ERROR_UNINITIALIZE, "aclrtSetOpExecuteTimeOutV2: call "
                                                                                      "aclInit first");
    if (rc == ACL_SUCCESS && !actualTimeout)
        rc = fakecann_fail(ACL_ERROR_INVALID_PARAM, "aclrtSetOpExecuteTimeOutV2: actualTimeout is NULL");
    if (rc == ACL_SUCCESS) {
        op_timeout_us = effective_op_timeout_us(timeout);
        *actualTimeout = op_timeout_us;
        rt_trace("aclrtSetOpExecuteTimeOutV2 %llu", (unsigned long long)op_timeout_us);
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

aclError aclrtSetOpExecuteTimeOut(uint32_t timeout)
{
    uint64_t actual = 0;
    return aclrtSetOpExecuteTimeOutV2((uint64_t)timeout * 1000000u, &actual);
}

/* ---- op wait timeout (07_event_management.md, aclrtSetOpWaitTimeout) ---------------------------
 * Seconds, process-wide, the last call wins, 0 (and never calling it): no timeout.  Waits
 * enqueued from then on carry it (the runtime writes it into the wait's task); a wait blocked
 * longer fails with ACL_ERROR_RT_TASK_TIMEOUT, reported by the stream's next synchronize.  The
 * inference cards have no such call (ApiImpl::SetOpWaitTimeOut: ACL_ERROR_RT_FEATURE_NOT_SUPPORT). */
uint32_t rt_op_wait_timeout_s;

aclError aclrtSetOpWaitTimeout(uint32_t timeout)
{
    pthread_mutex_lock(&rt_lock);
    int rc = rt_initialized ? ACL_SUCCESS : fakecann_fail(ACL_ERROR_UNINITIALIZE, "aclrtSetOpWaitTimeout: call aclInit "
                                                                                      "first");
    if (rc == ACL_SUCCESS && !rt_product.op_wait_timeout)
        rc = fakecann_fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "aclrtSetOpWaitTimeout: %s does not support it "
                           "(07_event_management.md)", rt_product.name);
    if (rc == ACL_SUCCESS) {
        rt_op_wait_timeout_s = timeout;
        rt_trace("aclrtSetOpWaitTimeout %u", timeout);
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

aclError aclrtGetDeviceCount(uint32_t *count)
{
    pthread_mutex_lock(&rt_lock);
    int rc = ACL_SUCCESS;
    if (!rt_initialized)
        rc = fakecann_fail(ACL_ERROR_UNINITIALIZE, "aclrtGetDeviceCount: call aclInit first");
    else if (!count)
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtGetDeviceCount: count is NULL");
    else
        *count = (uint32_t)device_count;
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

static fake_context *new_context(int device, bool is_default)
{
    fake_context *context = (fake_context *)calloc(1, sizeof *context);
    if (!context)
        return NULL;
    context->device = device;
    context->alive = true;
    context->is_default = is_default;
    pthread_cond_init(&context->host_work, NULL);
    ptr_set_add(&contexts, context);
    return context;
}

aclError aclrtSetDevice(int32_t deviceId)
{
    pthread_mutex_lock(&rt_lock);
    int rc = ACL_SUCCESS;
    if (!rt_initialized) {
        rc = fakecann_fail(ACL_ERROR_UNINITIALIZE, "aclrtSetDevice: call aclInit first");
    } else if (deviceId < 0 || deviceId >= device_count) {
        rc = fakecann_fail(ACL_ERROR_RT_INVALID_DEVICEID, "aclrtSetDevice: device %d does not exist (%d devices)",
                           deviceId, device_count);
    } else {
        if (devices[deviceId].refs++ == 0)
            devices[deviceId].primary = new_context(deviceId, true);
        rt_current = devices[deviceId].primary; /* the implicit default context */
        rt_trace("aclrtSetDevice %d", deviceId);
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

int rt_refuse_in_callback(const char *api)
{
    if (!rt_in_callback)
        return ACL_SUCCESS;
    return fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "%s called from inside a host function or callback: "
                         "12_execution_control.md forbids allocating, freeing, synchronizing and launching there (the "
                         "runtime may deadlock its context's callback thread; the fake refuses)", api);
}

int rt_default_streams(int device)
{
    int live = 0;
    for (size_t i = 0; i < contexts.len; i++) {
        fake_context *context = (fake_context *)contexts.items[i];
        live += context->alive && context->device == device;
    }
    return live;
}

static int user_contexts(int device)
{
    int live = 0;
    for (size_t i = 0; i < contexts.len; i++) {
        fake_context *context = (fake_context *)contexts.items[i];
        live += context->alive && !context->is_default && context->device == device;
    }
    return live;
}

static void free_device_memory(int device);

aclError aclrtResetDevice(int32_t deviceId)
{
    pthread_mutex_lock(&rt_lock);
    int rc = ACL_SUCCESS;
    if (!rt_initialized) {
        rc = fakecann_fail(ACL_ERROR_UNINITIALIZE, "aclrtResetDevice: call aclInit first");
    } else if (deviceId < 0 || deviceId >= device_count || devices[deviceId].refs == 0) {
        rc = fakecann_fail(ACL_ERROR_RT_INVALID_DEVICEID, "aclrtResetDevice: device %d is not set", deviceId);
    } else if (devices[deviceId].refs == 1) {
        int streams = rt_live_streams(deviceId, NULL), events = rt_live_events(deviceId);
        int user = user_contexts(deviceId);
        if (streams || events || user)
            rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID,
                               "aclrtResetDevice(%d): %d streams, %d events and %d contexts still live; destroy "
                               "events and streams, then contexts, then reset the device", deviceId, streams,
                               events, user);
    }
    fake_context *dead = NULL;
    if (rc == ACL_SUCCESS) {
        if (--devices[deviceId].refs == 0) {
            dead = devices[deviceId].primary;
            devices[deviceId].primary->alive = false; /* kept allocated: other threads may point at it */
            free_device_memory(deviceId);
            rt_peer_forget(deviceId);
        }
        if (rt_current && rt_current->device == deviceId && !rt_current->alive)
            rt_current = NULL;
        rt_trace("aclrtResetDevice %d", deviceId);
    }
    pthread_mutex_unlock(&rt_lock);
    if (dead)
        rt_stop_host_thread(dead);
    return rc;
}

aclError aclrtGetDevice(int32_t *deviceId)
{
    pthread_mutex_lock(&rt_lock);
    int rc = rt_need_context();
    if (rc == ACL_SUCCESS && deviceId)
        *deviceId = rt_current->device;
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

/* ---- contexts ---------------------------------------------------------------------------- */
aclError aclrtCreateContext(aclrtContext *context, int32_t deviceId)
{
    pthread_mutex_lock(&rt_lock);
    int rc = ACL_SUCCESS;
    if (!rt_initialized)
        rc = fakecann_fail(ACL_ERROR_UNINITIALIZE, "aclrtCreateContext: call aclInit first");
    else if (!context)
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtCreateContext: context is NULL");
    else if (deviceId < 0 || deviceId >= device_count || devices[deviceId].refs == 0)
        rc = fakecann_fail(ACL_ERROR_RT_INVALID_DEVICEID,
                           "aclrtCreateContext: device %d is not set (call aclrtSetDevice first)", deviceId);
    if (rc == ACL_SUCCESS) {
        fake_context *created = new_context(deviceId, false);
        *context = created;
        rt_current = created; /* a new context becomes the calling thread's current one */
        rt_trace("aclrtCreateContext %d", deviceId);
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

static int live_context(const void *handle)
{
    return handle && ptr_set_has(&contexts, handle) && ((const fake_context *)handle)->alive;
}

aclError aclrtDestroyContext(aclrtContext context)
{
    pthread_mutex_lock(&rt_lock);
    int rc = ACL_SUCCESS;
    fake_context *target = (fake_context *)context;
    if (!live_context(context) || target->is_default) {
        rc = fakecann_fail(ACL_ERROR_RT_INVALID_HANDLE, "aclrtDestroyContext: %p is not a live user context",
                           context);
    } else if (rt_live_streams(target->device, target) > 0) {
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID,
                           "aclrtDestroyContext: %d streams of this context are still live; destroy them first",
                           rt_live_streams(target->device, target));
    } else {
        target->alive = false; /* never freed: other threads' current-context pointers stay valid */
        if (rt_current == target)
            rt_current = NULL;
        rt_trace("aclrtDestroyContext %d", target->device);
    }
    pthread_mutex_unlock(&rt_lock);
    if (rc == ACL_SUCCESS)
        rt_stop_host_thread(target);
    return rc;
}

aclError aclrtSetCurrentContext(aclrtContext context)
{
    pthread_mutex_lock(&rt_lock);
    int rc = ACL_SUCCESS;
    if (!context)
        rc = fakecann_fail(ACL_ERROR_RT_CONTEXT_NULL, "aclrtSetCurrentContext: context is NULL");
    else if (!live_context(context))
        rc = fakecann_fail(ACL_ERROR_RT_INVALID_HANDLE,
                           "aclrtSetCurrentContext: %p is not a live context (was its device reset?)", context);
    else
        rt_current = (fake_context *)context;
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

aclError aclrtGetCurrentContext(aclrtContext *context)
{
    pthread_mutex_lock(&rt_lock);
    int rc = rt_need_context();
    if (rc == ACL_SUCCESS && context)
        *context = rt_current;
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

/* ---- memory -------------------------------------------------------------------------------- */
typedef struct {
    char *base;
    uint64_t size;     /* what the caller asked for: the bounds checks use this */
    uint64_t capacity; /* rounded up to 32 plus 32 bytes of padding, as aclrtMalloc does */
    int device;        /* -1 for aclrtMallocHost memory */
} allocation;

static allocation *allocations;
static size_t allocation_count, allocation_cap;

static allocation *find_allocation(const void *address)
{
    const char *at = (const char *)address;
    for (size_t i = 0; i < allocation_count; i++) {
        allocation *a = &allocations[i];
        if (at >= a->base && (at < a->base + a->size || at == a->base))
            return a;
    }
    return NULL;
}

static int add_allocation(void *base, uint64_t size, uint64_t capacity, int device)
{
    if (allocation_count == allocation_cap) {
        size_t cap = allocation_cap ? allocation_cap * 2 : 64;
        allocation *grown = (allocation *)realloc(allocations, cap * sizeof *grown);
        if (!grown)
            return 0;
        allocations = grown;
        allocation_cap = cap;
    }
    allocations[allocation_count++] = (allocation){(char *)base, size, capacity, device};
    fakecann_count(device < 0 ? "host_alloc" : "alloc", 1);
    return 1;
}

static void drop_allocation(allocation *a)
{
    if (a->device >= 0)
        devices[a->device].in_use -= a->capacity;
    fakecann_count(a->device < 0 ? "host_alloc" : "alloc", -1);
    free(a->base);
    *a = allocations[--allocation_count];
}

static void free_device_memory(int device)
{
    for (size_t i = allocation_count; i-- > 0;)
        if (allocations[i].device == device)
            drop_allocation(&allocations[i]);
}

int rt_memory_check(const void *address, uint64_t nbytes, int want, char *why, size_t why_len)
{
    allocation *a = find_allocation(address);
    if (!a)
        snprintf(why, why_len, "%p is not in any live allocation (unregistered host memory, or freed)", address);
    else if (want > 0 && a->device < 0)
        snprintf(why, why_len, "%p is pinned host memory (aclrtMallocHost), not device memory", address);
    else if (want < 0 && a->device >= 0)
        snprintf(why, why_len, "%p is device memory, not pinned host memory (aclrtMallocHost)", address);
    else if ((const char *)address + nbytes > a->base + a->size)
        snprintf(why, why_len, "%llu bytes at %p run past the end of the %llu-byte allocation at %p",
                 (unsigned long long)nbytes, address, (unsigned long long)a->size, (void *)a->base);
    else
        return 1;
    return 0;
}

int rt_memory_device(const void *address)
{
    allocation *a = find_allocation(address);
    return a ? a->device : -2;
}

int rt_device_count(void) { return device_count; }

void fakecann_touch_padding(const void *address, uint64_t nbytes)
{
    pthread_mutex_lock(&rt_lock);
    allocation *a = find_allocation(address);
    if (a && a->device >= 0) {
        char *start = (char *)address + nbytes;
        char *end = (char *)address + ((nbytes + 31) / 32) * 32 + 32;
        if (end > a->base + a->capacity)
            end = a->base + a->capacity;
        if (start < end)
            memset(start, 0xFF, (size_t)(end - start));
    }
    pthread_mutex_unlock(&rt_lock);
}

int fakecann_memory_ok(const void *address, uint64_t nbytes, int device_only, char *why, size_t why_len)
{
    pthread_mutex_lock(&rt_lock);
    int ok = rt_memory_check(address, nbytes, device_only ? 1 : 0, why, why_len);
    pthread_mutex_unlock(&rt_lock);
    return ok;
}

aclError aclrtMalloc(void **devPtr, size_t size, int policy)
{
    (void)policy;
    pthread_mutex_lock(&rt_lock);
    int rc = rt_refuse_in_callback("aclrtMalloc");
    if (rc == ACL_SUCCESS)
        rc = rt_need_context();
    uint64_t capacity = ((size + FAKE_ALIGN - 1) / FAKE_ALIGN) * FAKE_ALIGN + FAKE_ALIGN;
    void *base = NULL;
    if (rc == ACL_SUCCESS && (!devPtr || size == 0))
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtMalloc: devPtr is NULL or size is 0");
    if (rc == ACL_SUCCESS && devices[rt_current->device].in_use + capacity > device_capacity)
        rc = fakecann_fail(ACL_ERROR_RT_MEMORY_ALLOCATION,
                           "aclrtMalloc: %zu bytes requested, %llu of %llu in use on device %d", size,
                           (unsigned long long)devices[rt_current->device].in_use,
                           (unsigned long long)device_capacity, rt_current->device);
    /* 11-01: "the start address is 64-byte aligned"; the size rounded up to 32, plus 32. */
    if (rc == ACL_SUCCESS && (posix_memalign(&base, 64, capacity) != 0 ||
                              !add_allocation(base, size, capacity, rt_current->device))) {
        free(base);
        rc = fakecann_fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "aclrtMalloc: host allocation failed");
    }
    if (rc == ACL_SUCCESS) {
        memset(base, 0xFF, capacity); /* poison: fresh memory reads as NaN */
        devices[rt_current->device].in_use += capacity;
        *devPtr = base;
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

aclError aclrtFree(void *devPtr)
{
    pthread_mutex_lock(&rt_lock);
    int rc = rt_refuse_in_callback("aclrtFree");
    if (rc == ACL_SUCCESS)
        rc = rt_need_context();
    allocation *a = find_allocation(devPtr);
    if (rc == ACL_SUCCESS && (!a || a->base != (char *)devPtr || a->device < 0))
        rc = fakecann_fail(ACL_ERROR_RT_MEMORY_FREE, "aclrtFree: %p is not an address aclrtMalloc returned", devPtr);
    if (rc == ACL_SUCCESS)
        drop_allocation(a);
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

aclError aclrtMallocHost(void **hostPtr, size_t size)
{
    pthread_mutex_lock(&rt_lock);
    int rc = rt_refuse_in_callback("aclrtMallocHost");
    if (rc == ACL_SUCCESS)
        rc = rt_need_context();
    void *base = NULL;
    if (rc == ACL_SUCCESS && (!hostPtr || size == 0))
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtMallocHost: hostPtr is NULL or size is 0");
    if (rc == ACL_SUCCESS && (posix_memalign(&base, 64, size) != 0 || !add_allocation(base, size, size, -1))) {
        free(base);
        rc = fakecann_fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "aclrtMallocHost: allocation failed");
    }
    if (rc == ACL_SUCCESS)
        *hostPtr = base;
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

aclError aclrtFreeHost(void *hostPtr)
{
    pthread_mutex_lock(&rt_lock);
    allocation *a = find_allocation(hostPtr);
    int rc = rt_refuse_in_callback("aclrtFreeHost");
    if (rc == ACL_SUCCESS && (!a || a->base != (char *)hostPtr || a->device >= 0))
        rc = fakecann_fail(ACL_ERROR_RT_MEMORY_FREE, "aclrtFreeHost: %p is not an address aclrtMallocHost returned",
                           hostPtr);
    else if (rc == ACL_SUCCESS)
        drop_allocation(a);
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

aclError aclrtGetMemInfo(int attr, size_t *free_bytes, size_t *total)
{
    pthread_mutex_lock(&rt_lock);
    int rc = rt_need_context();
    if (rc == ACL_SUCCESS && (attr < 0 || attr > 17 || !free_bytes || !total))
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtGetMemInfo: bad attribute %d or NULL output", attr);
    if (rc == ACL_SUCCESS) {
        *total = device_capacity;
        *free_bytes = device_capacity - devices[rt_current->device].in_use;
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}
