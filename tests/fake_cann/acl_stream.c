/* acl_stream.c: fake libascendcl.so, part 2: streams, events, copies, host callbacks.
 *
 * Each stream is a pthread running its queue in order.  Errors are sticky per generation:
 * a failed task fails its generation, later kernels/copies of that generation are skipped
 * (records, waits and host callbacks still run), and the sync or query that reports the
 * error starts a new generation.  Events count records; a wait captures the record
 * generation current at *its* call and waits for exactly that one to complete (a later
 * re-record completing elsewhere does not release it).  Host callbacks come in the two documented flavours,
 * which must not be mixed on one stream:
 * - aclrtLaunchHostFunc: one runtime-owned thread runs them (compiled only with
 *   -DFAKE_HAVE_LAUNCH_HOST_FUNC, so a build without it tests the binding's fallback);
 * - aclrtSubscribeReport + aclrtLaunchCallback: the callback runs on the subscribed thread
 *   inside its aclrtProcessReport; ACL_CALLBACK_BLOCK holds the stream until it ran.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "acl_internal.h"

enum { TASK_KERNEL, TASK_COPY, TASK_MEMSET, TASK_RECORD, TASK_WAIT, TASK_HOST_FUNC, TASK_CALLBACK };
enum { MECHANISM_NONE, MECHANISM_HOST_FUNC, MECHANISM_REPORT };
enum { EVENT_SYNC = 0x1, EVENT_TIME_LINE = 0x8, EVENT_KNOWN_FLAGS = 0x7F };

typedef struct fake_event {
    int device;
    uint32_t flags;
    int64_t recorded;  /* record generations handed out */
    ptr_set pending;   /* generations recorded but not yet reached by their stream */
    int pending_waits;
    double stamp;
} fake_event;

typedef struct task {
    struct task *next;
    int kind;
    int64_t generation; /* the stream's error generation at enqueue */
    fakecann_task_fn run;
    void (*release)(void *);
    void *payload;
    void *dst;
    const void *src;
    size_t count;
    int value;
    fake_event *event;
    int64_t event_generation;
    void (*function)(void *);
    void *argument;
    int block;
    char what[40];
} task;

typedef struct fake_stream {
    int device;
    fake_context *context;
    pthread_t thread;
    task *head, *tail;
    int64_t enqueued, completed;
    int64_t generation, failed_generation;
    int error;
    char error_message[512];
    bool stopping;
    int mechanism;
    bool subscribed;
    uint64_t subscriber;
} fake_stream;

typedef struct report { /* one callback waiting for its thread's aclrtProcessReport */
    struct report *next;
    uint64_t thread;
    aclrtCallback function;
    void *data;
    bool block, done;
} report;

static ptr_set streams, events;

static void *generation_key(int64_t generation) { return (void *)(intptr_t)generation; }

/* Whether the stream reached record generation (never-recorded events count as reached). */
static bool reached(const fake_event *e, int64_t generation)
{
    return !ptr_set_has(&e->pending, generation_key(generation));
}
static report *reports;

int rt_live_streams(int device, const fake_context *context)
{
    int live = 0;
    for (size_t i = 0; i < streams.len; i++) {
        fake_stream *s = (fake_stream *)streams.items[i];
        live += s->device == device && (!context || s->context == context);
    }
    return live;
}

int rt_live_events(int device)
{
    int live = 0;
    for (size_t i = 0; i < events.len; i++)
        live += ((fake_event *)events.items[i])->device == device;
    return live;
}

/* With rt_lock held: the stream, after checking it exists and belongs to this thread's device. */
static int need_stream(aclrtStream handle, const char *api, fake_stream **out)
{
    int rc = rt_need_context();
    if (rc != ACL_SUCCESS)
        return rc;
    if (!handle)
        return fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "%s: the default (NULL) stream is not supported by the fake",
                             api);
    if (!ptr_set_has(&streams, handle))
        return fakecann_fail(ACL_ERROR_RT_INVALID_HANDLE, "%s: %p is not a live stream", api, handle);
    fake_stream *s = (fake_stream *)handle;
    if (s->device != rt_current->device)
        return fakecann_fail(ACL_ERROR_RT_STREAM_CONTEXT, "%s: the stream belongs to device %d, the current context to "
                             "device %d", api, s->device, rt_current->device);
    *out = s;
    return ACL_SUCCESS;
}

static task *new_task(int kind, const char *what)
{
    task *t = (task *)calloc(1, sizeof *t);
    if (t) {
        t->kind = kind;
        snprintf(t->what, sizeof t->what, "%s", what);
    }
    return t;
}

static void push(fake_stream *s, task *t)
{
    t->generation = s->generation;
    if (s->tail)
        s->tail->next = t;
    else
        s->head = t;
    s->tail = t;
    s->enqueued++;
    pthread_cond_broadcast(&rt_changed);
}

/* ---- host functions (aclrtLaunchHostFunc) ---------------------------------------------- */
#ifdef FAKE_HAVE_LAUNCH_HOST_FUNC
typedef struct host_call {
    struct host_call *next;
    aclrtHostFunc function;
    void *argument;
    bool done;
} host_call;

static host_call *host_calls;
static bool host_thread_running, host_thread_stopping;
static pthread_t host_thread;

/* The runtime-owned thread every aclrtLaunchHostFunc function runs on. */
static void *host_func_loop(void *unused)
{
    (void)unused;
    pthread_mutex_lock(&rt_lock);
    for (;;) {
        while (!host_calls && !host_thread_stopping)
            pthread_cond_wait(&rt_changed, &rt_lock);
        if (!host_calls)
            break;
        host_call *call = host_calls;
        host_calls = call->next;
        pthread_mutex_unlock(&rt_lock);
        call->function(call->argument);
        pthread_mutex_lock(&rt_lock);
        call->done = true;
        pthread_cond_broadcast(&rt_changed);
    }
    pthread_mutex_unlock(&rt_lock);
    return NULL;
}

void rt_stop_host_func_thread(void)
{
    if (!host_thread_running)
        return;
    host_thread_stopping = true;
    pthread_cond_broadcast(&rt_changed);
    pthread_mutex_unlock(&rt_lock);
    pthread_join(host_thread, NULL);
    pthread_mutex_lock(&rt_lock);
    host_thread_running = host_thread_stopping = false;
}

/* The stream waits until the function returned, as aclrtLaunchHostFunc blocks by default. */
static void run_host_func(task *t)
{
    host_call call = {NULL, (aclrtHostFunc)t->function, t->argument, false};
    pthread_mutex_lock(&rt_lock);
    host_call **tail = &host_calls;
    while (*tail)
        tail = &(*tail)->next;
    *tail = &call;
    pthread_cond_broadcast(&rt_changed);
    while (!call.done)
        pthread_cond_wait(&rt_changed, &rt_lock);
    pthread_mutex_unlock(&rt_lock);
}
#else
void rt_stop_host_func_thread(void) {}
#endif

/* ---- report callbacks (aclrtLaunchCallback) -------------------------------------------- */
static int run_callback(fake_stream *s, task *t, char *why, size_t why_len)
{
    pthread_mutex_lock(&rt_lock);
    if (!s->subscribed) {
        pthread_mutex_unlock(&rt_lock);
        snprintf(why, why_len, "no thread is subscribed to the stream any more (aclrtUnSubscribeReport came first)");
        return ACL_ERROR_RT_STREAM_NO_CB_REG;
    }
    report *r = (report *)calloc(1, sizeof *r);
    r->thread = s->subscriber;
    r->function = (aclrtCallback)t->function;
    r->data = t->argument;
    r->block = t->block;
    report **tail = &reports;
    while (*tail)
        tail = &(*tail)->next;
    *tail = r;
    pthread_cond_broadcast(&rt_changed);
    if (r->block) {
        while (!r->done)
            pthread_cond_wait(&rt_changed, &rt_lock);
        free(r);
    }
    pthread_mutex_unlock(&rt_lock);
    return ACL_SUCCESS;
}

/* ---- the stream worker ------------------------------------------------------------------- */
static void fail_task(fake_stream *s, const task *t, int code, const char *why)
{
    if (s->error == ACL_SUCCESS) {
        s->error = code;
        snprintf(s->error_message, sizeof s->error_message, "%s failed on the stream: %s", t->what, why);
    }
    s->failed_generation = t->generation;
}

static int run_copy(task *t, char *why, size_t why_len)
{
    if (!fakecann_memory_ok(t->src, t->count, 0, why, why_len) ||
        !fakecann_memory_ok(t->dst, t->count, 0, why, why_len))
        return ACL_ERROR_RT_DEVICE_MEM_ERROR;
    memmove(t->dst, t->src, t->count);
    return ACL_SUCCESS;
}

static int run_memset(task *t, char *why, size_t why_len)
{
    if (!fakecann_memory_ok(t->dst, t->count, 1, why, why_len))
        return ACL_ERROR_RT_DEVICE_MEM_ERROR;
    memset(t->dst, t->value, t->count);
    return ACL_SUCCESS;
}

static void run_event_task(fake_stream *s, task *t)
{
    fake_event *e = t->event;
    pthread_mutex_lock(&rt_lock);
    if (t->kind == TASK_RECORD) {
        ptr_set_remove(&e->pending, generation_key(t->event_generation));
        if (t->event_generation == e->recorded)
            e->stamp = rt_now();
        s->completed++;
    } else {
        while (!reached(e, t->event_generation))
            pthread_cond_wait(&rt_changed, &rt_lock);
        e->pending_waits--;
    }
    pthread_cond_broadcast(&rt_changed);
    pthread_mutex_unlock(&rt_lock);
}

static void execute(fake_stream *s, task *t)
{
    char why[400] = "";
    int rc = ACL_SUCCESS;
    pthread_mutex_lock(&rt_lock);
    bool skip = t->generation == s->failed_generation;
    pthread_mutex_unlock(&rt_lock);
    switch (t->kind) {
    case TASK_KERNEL:
        rc = skip ? ACL_SUCCESS : t->run(t->payload, why, sizeof why);
        break;
    case TASK_COPY:
        rc = skip ? ACL_SUCCESS : run_copy(t, why, sizeof why);
        break;
    case TASK_MEMSET:
        rc = skip ? ACL_SUCCESS : run_memset(t, why, sizeof why);
        break;
    case TASK_RECORD:
    case TASK_WAIT:
        run_event_task(s, t);
        break;
#ifdef FAKE_HAVE_LAUNCH_HOST_FUNC
    case TASK_HOST_FUNC:
        run_host_func(t);
        break;
#endif
    case TASK_CALLBACK:
        rc = run_callback(s, t, why, sizeof why);
        break;
    default:
        break;
    }
    if (t->release)
        t->release(t->payload);
    pthread_mutex_lock(&rt_lock);
    if (rc != ACL_SUCCESS)
        fail_task(s, t, rc, why);
    /* A record completes its event under this same lock (run_event_task), so whoever sees
       the event done also sees the stream past it, as on the device. */
    if (t->kind != TASK_RECORD)
        s->completed++;
    pthread_cond_broadcast(&rt_changed);
    pthread_mutex_unlock(&rt_lock);
    free(t);
}

static void *stream_loop(void *argument)
{
    fake_stream *s = (fake_stream *)argument;
    pthread_mutex_lock(&rt_lock);
    for (;;) {
        while (!s->head && !s->stopping)
            pthread_cond_wait(&rt_changed, &rt_lock);
        if (!s->head)
            break;
        task *t = s->head;
        s->head = t->next;
        if (!s->head)
            s->tail = NULL;
        pthread_mutex_unlock(&rt_lock);
        execute(s, t);
        pthread_mutex_lock(&rt_lock);
    }
    pthread_mutex_unlock(&rt_lock);
    return NULL;
}

/* ---- streams ------------------------------------------------------------------------------- */
aclError aclrtCreateStreamWithConfig(aclrtStream *stream, uint32_t priority, uint32_t flag)
{
    (void)flag;
    pthread_mutex_lock(&rt_lock);
    int rc = rt_need_context();
    fake_stream *s = NULL;
    if (rc == ACL_SUCCESS && (!stream || priority > 7))
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtCreateStreamWithConfig: stream is NULL or priority %u "
                           "is outside 0..7", priority);
    if (rc == ACL_SUCCESS) {
        s = (fake_stream *)calloc(1, sizeof *s);
        s->device = rt_current->device;
        s->context = rt_current;
        s->failed_generation = -1;
        if (pthread_create(&s->thread, NULL, stream_loop, s) != 0) {
            free(s);
            rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtCreateStreamWithConfig: no thread for the stream");
        }
    }
    if (rc == ACL_SUCCESS) {
        ptr_set_add(&streams, s);
        *stream = s;
        fakecann_count("stream", 1);
        rt_trace("aclrtCreateStream %d", s->device);
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

aclError aclrtCreateStream(aclrtStream *stream) { return aclrtCreateStreamWithConfig(stream, 0, 0); }

aclError aclrtDestroyStream(aclrtStream stream)
{
    pthread_mutex_lock(&rt_lock);
    fake_stream *s = NULL;
    int rc = need_stream(stream, "aclrtDestroyStream", &s);
    if (rc == ACL_SUCCESS && s->completed < s->enqueued)
        rc = fakecann_fail(ACL_ERROR_RT_STREAM_NOT_COMPLETE, "aclrtDestroyStream: %lld tasks are still queued; call "
                           "aclrtSynchronizeStream first", (long long)(s->enqueued - s->completed));
    else if (rc == ACL_SUCCESS && s->subscribed)
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtDestroyStream: a report thread is still subscribed; call "
                           "aclrtUnSubscribeReport first");
    if (rc == ACL_SUCCESS) {
        ptr_set_remove(&streams, s);
        s->stopping = true;
        pthread_cond_broadcast(&rt_changed);
        rt_trace("aclrtDestroyStream %d", s->device);
    }
    pthread_mutex_unlock(&rt_lock);
    if (rc == ACL_SUCCESS) {
        pthread_join(s->thread, NULL);
        fakecann_count("stream", -1);
        free(s);
    }
    return rc;
}

/* With rt_lock held: report (and clear) the sticky error, starting a new generation. */
static int take_error(fake_stream *s)
{
    if (s->error == ACL_SUCCESS)
        return ACL_SUCCESS;
    int code = s->error;
    s->error = ACL_SUCCESS;
    s->generation++;
    return fakecann_fail(code, "%s", s->error_message);
}

aclError aclrtSynchronizeStreamWithTimeout(aclrtStream stream, int32_t timeout)
{
    pthread_mutex_lock(&rt_lock);
    fake_stream *s = NULL;
    int rc = need_stream(stream, "aclrtSynchronizeStream", &s);
    if (rc == ACL_SUCCESS) {
        int64_t target = s->enqueued;
        struct timespec deadline;
        int timed = rt_deadline(timeout, &deadline);
        while (rc == ACL_SUCCESS && s->completed < target) {
            if (!timed)
                pthread_cond_wait(&rt_changed, &rt_lock);
            else if (pthread_cond_timedwait(&rt_changed, &rt_lock, &deadline) == ETIMEDOUT && s->completed < target)
                rc = fakecann_fail(ACL_ERROR_RT_STREAM_SYNC_TIMEOUT, "aclrtSynchronizeStreamWithTimeout: %lld tasks "
                                   "still queued after %d ms", (long long)(target - s->completed), timeout);
        }
        if (rc == ACL_SUCCESS)
            rc = take_error(s);
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

aclError aclrtSynchronizeStream(aclrtStream stream) { return aclrtSynchronizeStreamWithTimeout(stream, -1); }

aclError aclrtStreamQuery(aclrtStream stream, int *status)
{
    pthread_mutex_lock(&rt_lock);
    fake_stream *s = NULL;
    int rc = need_stream(stream, "aclrtStreamQuery", &s);
    if (rc == ACL_SUCCESS && !status)
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtStreamQuery: status is NULL");
    if (rc == ACL_SUCCESS) {
        *status = s->completed >= s->enqueued ? 0 /* COMPLETE */ : 1 /* NOT_READY */;
        rc = take_error(s);
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

aclError aclrtSynchronizeDevice(void)
{
    pthread_mutex_lock(&rt_lock);
    int rc = rt_need_context();
    for (size_t i = 0; rc == ACL_SUCCESS && i < streams.len; i++) {
        fake_stream *s = (fake_stream *)streams.items[i];
        while (s->device == rt_current->device && s->completed < s->enqueued)
            pthread_cond_wait(&rt_changed, &rt_lock);
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

int fakecann_enqueue(aclrtStream stream, fakecann_task_fn run, void (*release)(void *), void *payload, const char *what)
{
    pthread_mutex_lock(&rt_lock);
    fake_stream *s = NULL;
    int rc = need_stream(stream, what, &s);
    task *t = rc == ACL_SUCCESS ? new_task(TASK_KERNEL, what) : NULL;
    if (t) {
        t->run = run;
        t->release = release;
        t->payload = payload;
        push(s, t);
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

/* ---- copies ------------------------------------------------------------------------------- */
static const char *const copy_kinds[] = {"HOST_TO_HOST", "HOST_TO_DEVICE", "DEVICE_TO_HOST", "DEVICE_TO_DEVICE",
                                         "DEFAULT"};

aclError aclrtMemcpyAsync(void *dst, size_t destMax, const void *src, size_t count, int kind, aclrtStream stream)
{
    pthread_mutex_lock(&rt_lock);
    fake_stream *s = NULL;
    char why[300];
    int rc = need_stream(stream, "aclrtMemcpyAsync", &s);
    if (rc == ACL_SUCCESS && (kind < 0 || kind > 4))
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtMemcpyAsync: kind %d is not supported by the fake", kind);
    else if (rc == ACL_SUCCESS && count > destMax)
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtMemcpyAsync: count %zu exceeds destMax %zu", count, destMax);
    if (rc == ACL_SUCCESS && count > 0) {
        /* 0/1/2/3 name the sides: host memory must be pinned for an async copy. */
        int src_want = kind == 4 ? 0 : (kind == 2 || kind == 3) ? 1 : -1;
        int dst_want = kind == 4 ? 0 : (kind == 1 || kind == 3) ? 1 : -1;
        if (!rt_memory_check(src, count, src_want, why, sizeof why))
            rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtMemcpyAsync(%s): source: %s", copy_kinds[kind], why);
        else if (!rt_memory_check(dst, count, dst_want, why, sizeof why))
            rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtMemcpyAsync(%s): destination: %s", copy_kinds[kind],
                               why);
    }
    if (rc == ACL_SUCCESS && count > 0)
        rc = rt_peer_check(s->device, dst, src, kind);
    if (rc == ACL_SUCCESS && count > 0) {
        task *t = new_task(TASK_COPY, "aclrtMemcpyAsync");
        t->dst = dst;
        t->src = src;
        t->count = count;
        push(s, t);
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

aclError aclrtMemsetAsync(void *devPtr, size_t maxCount, int32_t value, size_t count, aclrtStream stream)
{
    pthread_mutex_lock(&rt_lock);
    fake_stream *s = NULL;
    char why[300];
    int rc = need_stream(stream, "aclrtMemsetAsync", &s);
    if (rc == ACL_SUCCESS && count > maxCount)
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtMemsetAsync: count %zu exceeds maxCount %zu", count,
                           maxCount);
    else if (rc == ACL_SUCCESS && count > 0 && !rt_memory_check(devPtr, count, 1, why, sizeof why))
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtMemsetAsync: %s", why);
    if (rc == ACL_SUCCESS && count > 0) {
        task *t = new_task(TASK_MEMSET, "aclrtMemsetAsync");
        t->dst = devPtr;
        t->value = value;
        t->count = count;
        push(s, t);
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

/* ---- events -------------------------------------------------------------------------------- */
static int need_event(aclrtEvent handle, const char *api, fake_event **out)
{
    int rc = rt_need_context();
    if (rc != ACL_SUCCESS)
        return rc;
    if (!handle || !ptr_set_has(&events, handle))
        return fakecann_fail(ACL_ERROR_RT_INVALID_HANDLE, "%s: %p is not a live event", api, handle);
    *out = (fake_event *)handle;
    return ACL_SUCCESS;
}

aclError aclrtCreateEventWithFlag(aclrtEvent *event, uint32_t flag)
{
    pthread_mutex_lock(&rt_lock);
    int rc = rt_need_context();
    if (rc == ACL_SUCCESS && (!event || (flag & ~(uint32_t)EVENT_KNOWN_FLAGS)))
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtCreateEventWithFlag: event is NULL or flag %#x unknown",
                           flag);
    if (rc == ACL_SUCCESS) {
        fake_event *e = (fake_event *)calloc(1, sizeof *e);
        e->device = rt_current->device;
        e->flags = flag;
        ptr_set_add(&events, e);
        *event = e;
        fakecann_count("event", 1);
        rt_trace("aclrtCreateEvent %d", e->device);
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

aclError aclrtCreateEvent(aclrtEvent *event) { return aclrtCreateEventWithFlag(event, EVENT_SYNC); }

aclError aclrtDestroyEvent(aclrtEvent event)
{
    pthread_mutex_lock(&rt_lock);
    fake_event *e = NULL;
    int rc = need_event(event, "aclrtDestroyEvent", &e);
    if (rc == ACL_SUCCESS && (e->pending.len > 0 || e->pending_waits > 0))
        rc = fakecann_fail(ACL_ERROR_RT_EVENT_NOT_COMPLETE, "aclrtDestroyEvent: a record or a stream wait using the "
                           "event has not completed yet");
    if (rc == ACL_SUCCESS) {
        ptr_set_remove(&events, e);
        rt_trace("aclrtDestroyEvent %d", e->device);
        fakecann_count("event", -1);
        free(e->pending.items);
        free(e);
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

aclError aclrtRecordEvent(aclrtEvent event, aclrtStream stream)
{
    pthread_mutex_lock(&rt_lock);
    fake_stream *s = NULL;
    fake_event *e = NULL;
    int rc = need_stream(stream, "aclrtRecordEvent", &s);
    if (rc == ACL_SUCCESS)
        rc = need_event(event, "aclrtRecordEvent", &e);
    if (rc == ACL_SUCCESS) {
        task *t = new_task(TASK_RECORD, "aclrtRecordEvent");
        t->event = e;
        t->event_generation = ++e->recorded;
        ptr_set_add(&e->pending, generation_key(e->recorded));
        push(s, t);
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

aclError aclrtStreamWaitEvent(aclrtStream stream, aclrtEvent event)
{
    pthread_mutex_lock(&rt_lock);
    fake_stream *s = NULL;
    fake_event *e = NULL;
    int rc = need_stream(stream, "aclrtStreamWaitEvent", &s);
    if (rc == ACL_SUCCESS)
        rc = need_event(event, "aclrtStreamWaitEvent", &e);
    if (rc == ACL_SUCCESS && e->recorded > 0) { /* waiting on a never-recorded event waits for nothing */
        task *t = new_task(TASK_WAIT, "aclrtStreamWaitEvent");
        t->event = e;
        t->event_generation = e->recorded;
        e->pending_waits++;
        push(s, t);
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

/* aclrtEventRecordedStatus: COMPLETE = 1 (the reverse of the deprecated aclrtQueryEvent). */
aclError aclrtQueryEventStatus(aclrtEvent event, int *status)
{
    pthread_mutex_lock(&rt_lock);
    fake_event *e = NULL;
    int rc = need_event(event, "aclrtQueryEventStatus", &e);
    if (rc == ACL_SUCCESS && status)
        *status = reached(e, e->recorded) ? 1 : 0;
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

/* Deprecated aclrtEventStatus: COMPLETE = 0. */
aclError aclrtQueryEvent(aclrtEvent event, int *status)
{
    pthread_mutex_lock(&rt_lock);
    fake_event *e = NULL;
    int rc = need_event(event, "aclrtQueryEvent", &e);
    if (rc == ACL_SUCCESS && status)
        *status = reached(e, e->recorded) ? 0 : 1;
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

aclError aclrtSynchronizeEventWithTimeout(aclrtEvent event, int32_t timeout)
{
    pthread_mutex_lock(&rt_lock);
    fake_event *e = NULL;
    int rc = need_event(event, "aclrtSynchronizeEvent", &e);
    if (rc == ACL_SUCCESS) {
        int64_t target = e->recorded;
        struct timespec deadline;
        int timed = rt_deadline(timeout, &deadline);
        while (rc == ACL_SUCCESS && !reached(e, target)) {
            if (!timed)
                pthread_cond_wait(&rt_changed, &rt_lock);
            else if (pthread_cond_timedwait(&rt_changed, &rt_lock, &deadline) == ETIMEDOUT && !reached(e, target))
                rc = fakecann_fail(ACL_ERROR_RT_EVENT_SYNC_TIMEOUT, "aclrtSynchronizeEventWithTimeout: not complete "
                                   "after %d ms", timeout);
        }
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

aclError aclrtSynchronizeEvent(aclrtEvent event) { return aclrtSynchronizeEventWithTimeout(event, -1); }

aclError aclrtEventElapsedTime(float *ms, aclrtEvent startEvent, aclrtEvent endEvent)
{
    pthread_mutex_lock(&rt_lock);
    fake_event *start = NULL, *end = NULL;
    int rc = need_event(startEvent, "aclrtEventElapsedTime", &start);
    if (rc == ACL_SUCCESS)
        rc = need_event(endEvent, "aclrtEventElapsedTime", &end);
    if (rc == ACL_SUCCESS && (!(start->flags & EVENT_TIME_LINE) || !(end->flags & EVENT_TIME_LINE)))
        rc = fakecann_fail(ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID, "aclrtEventElapsedTime: both events need the "
                           "ACL_EVENT_TIME_LINE flag");
    else if (rc == ACL_SUCCESS && (start->recorded == 0 || end->recorded == 0))
        rc = fakecann_fail(ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID, "aclrtEventElapsedTime: an event was never recorded");
    else if (rc == ACL_SUCCESS && (!reached(start, start->recorded) || !reached(end, end->recorded)))
        rc = fakecann_fail(ACL_ERROR_RT_EVENT_NOT_COMPLETE, "aclrtEventElapsedTime: an event has not completed");
    else if (rc == ACL_SUCCESS && end->stamp < start->stamp)
        rc = fakecann_fail(ACL_ERROR_RT_EVENT_TIMESTAMP_REVERSAL, "aclrtEventElapsedTime: the end event completed "
                           "before the start event");
    if (rc == ACL_SUCCESS && ms)
        *ms = (float)((end->stamp - start->stamp) * 1000.0);
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

/* ---- host callbacks ---------------------------------------------------------------------- */
#ifdef FAKE_HAVE_LAUNCH_HOST_FUNC
aclError aclrtLaunchHostFunc(aclrtStream stream, aclrtHostFunc fn, void *args)
{
    pthread_mutex_lock(&rt_lock);
    fake_stream *s = NULL;
    int rc = need_stream(stream, "aclrtLaunchHostFunc", &s);
    if (rc == ACL_SUCCESS && !fn)
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtLaunchHostFunc: fn is NULL");
    else if (rc == ACL_SUCCESS && s->mechanism == MECHANISM_REPORT)
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtLaunchHostFunc: the stream uses aclrtSubscribeReport/"
                           "aclrtLaunchCallback; the two callback mechanisms must not be mixed on one stream");
    if (rc == ACL_SUCCESS && !host_thread_running) {
        if (pthread_create(&host_thread, NULL, host_func_loop, NULL) != 0)
            rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtLaunchHostFunc: no thread for host functions");
        else
            host_thread_running = true;
    }
    if (rc == ACL_SUCCESS) {
        s->mechanism = MECHANISM_HOST_FUNC;
        task *t = new_task(TASK_HOST_FUNC, "aclrtLaunchHostFunc");
        t->function = (void (*)(void *))fn;
        t->argument = args;
        push(s, t);
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}
#endif

static bool thread_subscribed(uint64_t thread, int *device)
{
    for (size_t i = 0; i < streams.len; i++) {
        fake_stream *s = (fake_stream *)streams.items[i];
        if (s->subscribed && s->subscriber == thread) {
            if (device)
                *device = s->device;
            return true;
        }
    }
    return false;
}

aclError aclrtSubscribeReport(uint64_t threadId, aclrtStream stream)
{
    pthread_mutex_lock(&rt_lock);
    fake_stream *s = NULL;
    int device = -1;
    int rc = need_stream(stream, "aclrtSubscribeReport", &s);
    if (rc == ACL_SUCCESS && s->mechanism == MECHANISM_HOST_FUNC)
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtSubscribeReport: the stream already ran "
                           "aclrtLaunchHostFunc; the two callback mechanisms must not be mixed on one stream");
    else if (rc == ACL_SUCCESS && s->subscribed)
        rc = fakecann_fail(ACL_ERROR_REPEAT_SUBSCRIBE, "aclrtSubscribeReport: the stream already has a subscribed "
                           "thread");
    else if (rc == ACL_SUCCESS && thread_subscribed(threadId, &device) && device != s->device)
        rc = fakecann_fail(ACL_ERROR_RT_THREAD_SUBSCRIBE, "aclrtSubscribeReport: thread %llu already serves device %d",
                           (unsigned long long)threadId, device);
    if (rc == ACL_SUCCESS) {
        s->mechanism = MECHANISM_REPORT;
        s->subscribed = true;
        s->subscriber = threadId;
        rt_trace("aclrtSubscribeReport %d", s->device);
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

aclError aclrtUnSubscribeReport(uint64_t threadId, aclrtStream stream)
{
    pthread_mutex_lock(&rt_lock);
    fake_stream *s = NULL;
    int rc = need_stream(stream, "aclrtUnSubscribeReport", &s);
    if (rc == ACL_SUCCESS && (!s->subscribed || s->subscriber != threadId))
        rc = fakecann_fail(ACL_ERROR_STREAM_NOT_SUBSCRIBE, "aclrtUnSubscribeReport: thread %llu is not subscribed to "
                           "the stream", (unsigned long long)threadId);
    if (rc == ACL_SUCCESS) {
        s->subscribed = false;
        pthread_cond_broadcast(&rt_changed);
        rt_trace("aclrtUnSubscribeReport %d", s->device);
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

aclError aclrtLaunchCallback(aclrtCallback fn, void *userData, int blockType, aclrtStream stream)
{
    pthread_mutex_lock(&rt_lock);
    fake_stream *s = NULL;
    int rc = need_stream(stream, "aclrtLaunchCallback", &s);
    if (rc == ACL_SUCCESS && (!fn || (blockType != 0 && blockType != 1)))
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtLaunchCallback: fn is NULL or blockType %d unknown",
                           blockType);
    else if (rc == ACL_SUCCESS && !s->subscribed)
        rc = fakecann_fail(ACL_ERROR_RT_STREAM_NO_CB_REG, "aclrtLaunchCallback: no thread is subscribed to the stream "
                           "(aclrtSubscribeReport)");
    if (rc == ACL_SUCCESS) {
        task *t = new_task(TASK_CALLBACK, "aclrtLaunchCallback");
        t->function = fn;
        t->argument = userData;
        t->block = blockType;
        push(s, t);
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

/* Runs one callback meant for the calling thread, waiting up to timeout ms for it. */
aclError aclrtProcessReport(int32_t timeout)
{
    uint64_t me = (uint64_t)pthread_self();
    pthread_mutex_lock(&rt_lock);
    int rc = rt_need_context();
    report *mine = NULL;
    struct timespec deadline;
    int timed = rt_deadline(timeout, &deadline);
    while (rc == ACL_SUCCESS && !mine) {
        report **link = &reports;
        while (*link && (*link)->thread != me)
            link = &(*link)->next;
        if (*link) {
            mine = *link;
            *link = mine->next;
        } else if (!thread_subscribed(me, NULL)) {
            rc = fakecann_fail(ACL_ERROR_THREAD_NOT_SUBSCRIBE, "aclrtProcessReport: the calling thread is not "
                               "subscribed to any stream");
        } else if (!timed) {
            pthread_cond_wait(&rt_changed, &rt_lock);
        } else if (pthread_cond_timedwait(&rt_changed, &rt_lock, &deadline) == ETIMEDOUT) {
            rc = fakecann_fail(ACL_ERROR_WAIT_CALLBACK_TIMEOUT, "aclrtProcessReport: no callback within %d ms",
                               timeout);
        }
    }
    pthread_mutex_unlock(&rt_lock);
    if (mine) {
        mine->function(mine->data);
        pthread_mutex_lock(&rt_lock);
        if (mine->block)
            mine->done = true; /* the stream worker frees it */
        else
            free(mine);
        pthread_cond_broadcast(&rt_changed);
        pthread_mutex_unlock(&rt_lock);
    }
    return rc;
}
