/* acl_stream.c: fake libascendcl.so, part 2: streams, events, copies, host callbacks.
 *
 * Each stream is a pthread running its queue in order.  Every rule cites its page of the
 * public hicann/runtime docs (docs/zh/api_ref/...); where no page says, the stricter choice is
 * taken and written down here:
 * - failures (06_stream_management.md, aclrtSetStreamFailureMode): the first error is sticky
 *   until a sync or query reports it.  ACL_CONTINUE_ON_FAILURE (default) runs the later tasks;
 *   ACL_STOP_ON_FAILURE drops what is queued and refuses new tasks (with the failure's code:
 *   no page names one), and applies to every stream of the context.  aclrtStreamAbort drops a
 *   stream's tasks (a blocked wait included) on products that have it.
 * - events (07_event_management.md; design/modules/event/event.md 4.2): aclrtCreateEventExWithFlag
 *   events are reusable; aclrtCreateEventWithFlag ones are recorded, waited, then reset
 *   (aclrtResetEvent): recording one again without a reset is refused, as is resetting a
 *   reusable one.  A wait on an event with no record since creation or reset is
 *   ACL_ERROR_RT_PARAM_INVALID.  Events with ACL_EVENT_SYNC count against the product's limit:
 *   WithFlag ones at creation, ExWithFlag ones at their first record (the page says the record
 *   may then block until one is free; the fake fails it with ACL_ERROR_RT_NO_EVENT_RESOURCE).
 *   A wait captures the record generation current at *its* call.
 * - copies (11-03_memory_copy_and_set.md; acl_rt.h): asynchronous host-to-host copies are not
 *   supported (EP form); device-to-device copies need 64-byte aligned addresses; a copy that
 *   finds its memory freed when it runs is a system DMA error (507013; 507053 is a hardware UCE).
 * - host callbacks (12_execution_control.md), in the two documented flavours, never mixed on
 *   one stream: aclrtLaunchHostFunc runs fn on a thread of the stream's own (compiled only
 *   with -DFAKE_HAVE_LAUNCH_HOST_FUNC, so a build without it tests the binding's fallback);
 *   aclrtSubscribeReport + aclrtLaunchCallback run it on the subscribed thread inside its
 *   aclrtProcessReport, ACL_CALLBACK_BLOCK holding the stream until it ran.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "acl_internal.h"

enum { MECHANISM_NONE, MECHANISM_HOST_FUNC, MECHANISM_REPORT };
enum { ACL_CONTINUE_ON_FAILURE = 0, ACL_STOP_ON_FAILURE = 1 };

typedef struct report { /* one callback waiting for its thread's aclrtProcessReport */
    struct report *next;
    uint64_t thread;
    aclrtCallback function;
    void *data;
    bool block, done;
} report;

static ptr_set streams, events;
static report *reports;
static int event_slots[FAKE_MAX_DEVICES]; /* ACL_EVENT_SYNC events holding a device resource */

static void *generation_key(int64_t generation) { return (void *)(intptr_t)generation; }

/* Whether the stream reached record generation (never-recorded events count as reached). */
bool rt_reached(const fake_event *e, int64_t generation)
{
    return !ptr_set_has(&e->pending, generation_key(generation));
}

int rt_live_streams(int device, const fake_context *context)
{
    int live = 0;
    for (size_t i = 0; i < streams.len; i++) {
        fake_stream *s = (fake_stream *)streams.items[i];
        live += s->device == device && (!context || s->context == context) && !s->owner;
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

static int streams_on(int device)
{
    int live = 0;
    for (size_t i = 0; i < streams.len; i++)
        live += ((fake_stream *)streams.items[i])->device == device;
    return live;
}

/* With rt_lock held: the stream, after checking it exists and belongs to this thread's device. */
int rt_need_stream(aclrtStream handle, const char *api, fake_stream **out)
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

task *rt_new_task(int kind, const char *what)
{
    task *t = (task *)calloc(1, sizeof *t);
    if (t) {
        t->kind = kind;
        snprintf(t->what, sizeof t->what, "%s", what);
    }
    return t;
}

void rt_free_task(task *t)
{
    if (t->release)
        t->release(t->payload);
    free(t);
}

void rt_push(fake_stream *s, task *t)
{
    t->index = ++s->enqueued;
    if (s->tail)
        s->tail->next = t;
    else
        s->head = t;
    s->tail = t;
    pthread_cond_signal(&s->work); /* nobody else waits for a task to arrive */
}

static int stopped_error(const fake_stream *s, const char *api)
{
    return fakecann_fail(s->stopped, "%s: the stream stopped after a failure (ACL_STOP_ON_FAILURE) and takes no new task "
                         "(06_stream_management.md); destroy it and create a new one. The failure: %s", api,
                         s->error_message);
}

int rt_submit(fake_stream *s, task *t, const char *api)
{
    int refused = rt_refuse_in_callback(api);
    if (refused != ACL_SUCCESS) {
        rt_free_task(t);
        return refused;
    }
    if (s->capture)
        return rt_capture_store(s, t, api);
    if (s->update)
        return rt_update_store(s, t, api);
    if (s->stopped) {
        int rc = stopped_error(s, api);
        rt_free_task(t);
        return rc;
    }
    rt_push(s, t);
    return ACL_SUCCESS;
}

/* ---- host functions (aclrtLaunchHostFunc): one thread per context --------------------------
 * 12_execution_control.md says "the thread registered for the stream"; the runtime's
 * ApiImpl::LaunchHostFunc (src/runtime/api/impl/api_impl.cc) makes that thread once per context
 * and subscribes each stream to it, so host functions of different streams of one context run
 * one at a time, in the order their streams reach them. */
#ifdef FAKE_HAVE_LAUNCH_HOST_FUNC
static void *host_func_loop(void *argument)
{
    fake_context *c = (fake_context *)argument;
    pthread_mutex_lock(&rt_lock);
    for (;;) {
        while (!c->host_calls && !c->host_stopping)
            pthread_cond_wait(&c->host_work, &rt_lock);
        if (!c->host_calls)
            break;
        host_call *call = c->host_calls;
        c->host_calls = call->next;
        rt_in_callback = true;
        pthread_mutex_unlock(&rt_lock);
        call->function(call->argument);
        pthread_mutex_lock(&rt_lock);
        rt_in_callback = false;
        call->done = true;
        pthread_cond_broadcast(&rt_changed);
    }
    pthread_mutex_unlock(&rt_lock);
    return NULL;
}

/* The stream waits until the function returned, as aclrtLaunchHostFunc blocks by default. */
static void run_host_func(fake_stream *s, task *t)
{
    host_call call = {NULL, (aclrtHostFunc)t->function, t->argument, false};
    pthread_mutex_lock(&rt_lock);
    fake_context *c = s->context;
    host_call **tail = &c->host_calls;
    while (*tail)
        tail = &(*tail)->next;
    *tail = &call;
    pthread_cond_signal(&c->host_work);
    while (!call.done)
        pthread_cond_wait(&rt_changed, &rt_lock);
    pthread_mutex_unlock(&rt_lock);
}
#endif

void rt_stop_host_thread(fake_context *c)
{
    pthread_mutex_lock(&rt_lock);
    bool running = c->host_running;
    c->host_running = false;
    c->host_stopping = true;
    pthread_cond_signal(&c->host_work);
    pthread_mutex_unlock(&rt_lock);
    if (running)
        pthread_join(c->host_thread, NULL);
}

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
static bool effective_stop(const fake_stream *s)
{
    return s->mode == ACL_STOP_ON_FAILURE || (s->context && s->context->stop_on_failure);
}

/* With rt_lock held: free an event destroyed while a record or wait still needed it, once none does. */
static void release_event(fake_event *e)
{
    if (e->destroyed && e->pending.len == 0 && e->pending_waits == 0) {
        ptr_set_free(&e->pending);
        free(e);
    }
}

/* With rt_lock held: drop every queued task up to drop_upto; a dropped record never completes. */
static void drop_queued(fake_stream *s)
{
    if (!s->head || s->head->index > s->drop_upto)
        return;
    while (s->head && s->head->index <= s->drop_upto) {
        task *t = s->head;
        s->head = t->next;
        if (!s->head)
            s->tail = NULL;
        if (t->kind == TASK_WAIT) {
            t->event->pending_waits--;
            release_event(t->event);
        }
        s->completed++;
        rt_free_task(t);
    }
    pthread_cond_broadcast(&rt_changed);
}

static void fail_task(fake_stream *s, const task *t, int code, const char *why)
{
    if (s->error == ACL_SUCCESS) {
        s->error = code;
        snprintf(s->error_message, sizeof s->error_message, "%s failed on the stream: %s", t->what, why);
    }
    if (s->owner && s->part_error == ACL_SUCCESS) { /* a model's stream: its replay reports it at its end */
        s->part_error = code;
        snprintf(s->part_message, sizeof s->part_message, "%s failed inside the model: %s", t->what, why);
    }
    if (effective_stop(s) && !s->stopped) {
        s->stopped = code;
        s->drop_upto = s->enqueued;
        drop_queued(s);
    }
}

static int run_copy(task *t, char *why, size_t why_len)
{
    if (!fakecann_memory_ok(t->src, t->count, 0, why, why_len) ||
        !fakecann_memory_ok(t->dst, t->count, 0, why, why_len))
        return ACL_ERROR_RT_SYS_DMA;
    memmove(t->dst, t->src, t->count);
    return ACL_SUCCESS;
}

static int run_memset(task *t, char *why, size_t why_len)
{
    if (!fakecann_memory_ok(t->dst, t->count, 1, why, why_len))
        return ACL_ERROR_RT_SYS_DMA;
    memset(t->dst, t->value, t->count);
    return ACL_SUCCESS;
}

/* With rt_lock held. */
static void complete_record(fake_stream *s, task *t)
{
    fake_event *e = t->event;
    ptr_set_remove(&e->pending, generation_key(t->event_generation));
    if (t->event_generation == e->recorded)
        e->stamp = rt_now();
    if (t->report && s->part_error != ACL_SUCCESS) {
        e->error_generation = t->event_generation;
        e->error_code = s->part_error;
        snprintf(e->error_message, sizeof e->error_message, "%s", s->part_message);
        s->part_error = ACL_SUCCESS;
    }
    s->completed++;
    release_event(e);
}

/* With rt_lock held: wait for the record (an abort or a stop of this stream ends it early); a wait
 * enqueued under an op wait timeout fails with ACL_ERROR_RT_TASK_TIMEOUT once blocked that long
 * (aclrtSetOpWaitTimeout; the STARS timeout bit is TS_ERROR_TASK_TIMEOUT, task_manager.cc). */
static void run_wait(fake_stream *s, task *t)
{
    fake_event *e = t->event;
    struct timespec deadline;
    int timed = t->timeout_s ? rt_deadline((int32_t)(t->timeout_s > 2000000u ? 2000000u : t->timeout_s) * 1000,
                                           &deadline) : 0;
    bool timed_out = false;
    while (!rt_reached(e, t->event_generation) && t->index > s->drop_upto && !timed_out) {
        if (!timed)
            pthread_cond_wait(&rt_changed, &rt_lock);
        else if (pthread_cond_timedwait(&rt_changed, &rt_lock, &deadline) == ETIMEDOUT)
            timed_out = !rt_reached(e, t->event_generation) && t->index > s->drop_upto;
    }
    e->pending_waits--;
    if (timed_out) {
        char why[160];
        snprintf(why, sizeof why, "the wait blocked past the op wait timeout of %u s (aclrtSetOpWaitTimeout)",
                 t->timeout_s);
        fail_task(s, t, ACL_ERROR_RT_TASK_TIMEOUT, why);
    }
    if (t->adopt && e->error_generation == t->event_generation) {
        char why[300];
        snprintf(why, sizeof why, "%s", e->error_message);
        fail_task(s, t, e->error_code, why);
    }
    release_event(e);
}

static int run_task(fake_stream *s, task *t, char *why, size_t why_len)
{
    switch (t->kind) {
    case TASK_KERNEL:
    case TASK_CONTROL:
        return t->run(t->payload, why, why_len);
    case TASK_COPY:
        return run_copy(t, why, why_len);
    case TASK_MEMSET:
        return run_memset(t, why, why_len);
#ifdef FAKE_HAVE_LAUNCH_HOST_FUNC
    case TASK_HOST_FUNC:
        run_host_func(s, t);
        return ACL_SUCCESS;
#endif
    case TASK_CALLBACK:
        return run_callback(s, t, why, why_len);
    default:
        return ACL_SUCCESS;
    }
}

static void execute(fake_stream *s, task *t)
{
    char why[400] = "";
    int rc = ACL_SUCCESS;
    if (t->kind == TASK_RECORD || t->kind == TASK_WAIT) {
        pthread_mutex_lock(&rt_lock);
        if (t->kind == TASK_RECORD)
            complete_record(s, t);
        else
            run_wait(s, t);
        pthread_cond_broadcast(&rt_changed);
        pthread_mutex_unlock(&rt_lock);
    } else {
        rc = run_task(s, t, why, sizeof why);
    }
    pthread_mutex_lock(&rt_lock);
    if (rc != ACL_SUCCESS)
        fail_task(s, t, rc, why);
    /* A record completes its event under the lock (complete_record), so whoever sees the
       event done also sees the stream past it, as on the device. */
    if (t->kind != TASK_RECORD)
        s->completed++;
    pthread_cond_broadcast(&rt_changed);
    pthread_mutex_unlock(&rt_lock);
    rt_free_task(t);
}

static void *stream_loop(void *argument)
{
    fake_stream *s = (fake_stream *)argument;
    pthread_mutex_lock(&rt_lock);
    for (;;) {
        drop_queued(s);
        while (!s->head && !s->stopping)
            pthread_cond_wait(&s->work, &rt_lock);
        drop_queued(s);
        if (!s->head) {
            if (s->stopping)
                break;
            continue;
        }
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
fake_stream *rt_new_stream(int device, fake_context *context)
{
    /* 06_stream_management.md, aclrtCreateStream: "N = the maximum - the streams that exist, the
     * default stream included"; each live context holds one. */
    int defaults = rt_default_streams(device);
    if (streams_on(device) + defaults >= rt_product.max_streams) {
        fakecann_fail(ACL_ERROR_RT_NO_STREAM_RESOURCE, "%s allows %d streams per device (06_stream_management.md, "
                      "aclrtCreateStream), model streams and the %d default streams of its contexts included",
                      rt_product.name, rt_product.max_streams, defaults);
        return NULL;
    }
    fake_stream *s = (fake_stream *)calloc(1, sizeof *s);
    s->device = device;
    s->context = context;
    s->drop_upto = -1;
    pthread_cond_init(&s->work, NULL);
    if (pthread_create(&s->thread, NULL, stream_loop, s) != 0) {
        pthread_cond_destroy(&s->work);
        free(s);
        fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "no thread for the stream");
        return NULL;
    }
    ptr_set_add(&streams, s);
    fakecann_count("stream", 1);
    return s;
}

void rt_delete_stream(fake_stream *s)
{
    pthread_mutex_lock(&rt_lock);
    ptr_set_remove(&streams, s);
    s->stopping = true;
    pthread_cond_signal(&s->work);
    pthread_cond_broadcast(&rt_changed);
    pthread_mutex_unlock(&rt_lock);
    pthread_join(s->thread, NULL);
    fakecann_count("stream", -1);
    pthread_cond_destroy(&s->work);
    free(s);
}

aclError aclrtCreateStreamWithConfig(aclrtStream *stream, uint32_t priority, uint32_t flag)
{
    (void)flag;
    pthread_mutex_lock(&rt_lock);
    int rc = rt_need_context();
    fake_stream *s = NULL;
    if (rc == ACL_SUCCESS && (!stream || priority > 7))
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtCreateStreamWithConfig: stream is NULL or priority %u "
                           "is outside 0..7", priority);
    if (rc == ACL_SUCCESS && !(s = rt_new_stream(rt_current->device, rt_current)))
        rc = rt_product.max_streams ? ACL_ERROR_RT_NO_STREAM_RESOURCE : ACL_ERROR_RT_PARAM_INVALID;
    if (rc == ACL_SUCCESS) {
        *stream = s;
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
    int rc = rt_need_stream(stream, "aclrtDestroyStream", &s);
    if (rc == ACL_SUCCESS && s->owner)
        rc = fakecann_fail(ACL_ERROR_RT_INVALID_HANDLE, "aclrtDestroyStream: the stream belongs to a model");
    else if (rc == ACL_SUCCESS && s->completed < s->enqueued)
        rc = fakecann_fail(ACL_ERROR_RT_STREAM_NOT_COMPLETE, "aclrtDestroyStream: %lld tasks are still queued; call "
                           "aclrtSynchronizeStream first", (long long)(s->enqueued - s->completed));
    else if (rc == ACL_SUCCESS && s->subscribed)
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtDestroyStream: a report thread is still subscribed; call "
                           "aclrtUnSubscribeReport first");
    else if (rc == ACL_SUCCESS && s->capture)
        rc = rt_capture_forbid(s->capture, ACL_ERROR_RT_STREAM_CAPTURED, "aclrtDestroyStream of a capturing stream");
    if (rc == ACL_SUCCESS)
        rt_trace("aclrtDestroyStream %d", s->device);
    pthread_mutex_unlock(&rt_lock);
    if (rc == ACL_SUCCESS)
        rt_delete_stream(s);
    return rc;
}

/* With rt_lock held: report (and clear) the sticky error. */
static int take_error(fake_stream *s)
{
    if (s->error == ACL_SUCCESS)
        return ACL_SUCCESS;
    int code = s->error;
    s->error = ACL_SUCCESS;
    return fakecann_fail(code, "%s", s->error_message);
}

/* A synchronize or query of a capturing stream: src/runtime/api/impl/api_error.cc
 * (ApiErrorDecorator::StreamSynchronize, ::StreamQuery) returns RT_ERROR_STREAM_CAPTURED (107027)
 * before doing anything, so the capture stays intact and may still end. */
static int refuse_captured(const char *api)
{
    return fakecann_fail(ACL_ERROR_RT_STREAM_CAPTURED, "%s: the stream is being captured; synchronize before "
                         "aclmdlRICaptureBegin or after aclmdlRICaptureEnd", api);
}

/* The parameter check of every *WithTimeout synchronize: -1 or > 0.  The docs list only those;
 * src/runtime/api/impl/api_error.cc (ApiErrorDecorator::StreamSynchronize, ::EventSynchronize)
 * refuses 0 and anything below -1 with RT_ERROR_INVALID_VALUE (107000) before anything else. */
static int check_timeout(int32_t timeout, const char *api)
{
    if (timeout == 0 || timeout < -1)
        return fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "%s: the timeout must be -1 or greater than 0 ms, got %d",
                             api, (int)timeout);
    return ACL_SUCCESS;
}

aclError aclrtSynchronizeStreamWithTimeout(aclrtStream stream, int32_t timeout)
{
    pthread_mutex_lock(&rt_lock);
    fake_stream *s = NULL;
    int rc = check_timeout(timeout, "aclrtSynchronizeStreamWithTimeout");
    if (rc == ACL_SUCCESS)
        rc = rt_refuse_in_callback("aclrtSynchronizeStream");
    if (rc == ACL_SUCCESS)
        rc = rt_need_stream(stream, "aclrtSynchronizeStream", &s);
    if (rc == ACL_SUCCESS && s->capture)
        rc = refuse_captured("aclrtSynchronizeStream");
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
    int rc = rt_need_stream(stream, "aclrtStreamQuery", &s);
    if (rc == ACL_SUCCESS && !status)
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtStreamQuery: status is NULL");
    else if (rc == ACL_SUCCESS && s->capture)
        rc = refuse_captured("aclrtStreamQuery");
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
    int rc = rt_refuse_in_callback("aclrtSynchronizeDevice");
    if (rc == ACL_SUCCESS)
        rc = rt_need_context();
    if (rc == ACL_SUCCESS)
        rc = rt_capture_forbid_device_sync(rt_current->device);
    for (size_t i = 0; rc == ACL_SUCCESS && i < streams.len; i++) {
        fake_stream *s = (fake_stream *)streams.items[i];
        while (s->device == rt_current->device && s->completed < s->enqueued)
            pthread_cond_wait(&rt_changed, &rt_lock);
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

aclError aclrtSetStreamFailureMode(aclrtStream stream, uint64_t mode)
{
    pthread_mutex_lock(&rt_lock);
    fake_stream *s = NULL;
    int rc = rt_need_stream(stream, "aclrtSetStreamFailureMode", &s);
    if (rc == ACL_SUCCESS && mode > ACL_STOP_ON_FAILURE)
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtSetStreamFailureMode: mode %llu is neither "
                           "ACL_CONTINUE_ON_FAILURE nor ACL_STOP_ON_FAILURE", (unsigned long long)mode);
    else if (rc == ACL_SUCCESS && s->mode_set)
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtSetStreamFailureMode: may be called once per stream "
                           "(06_stream_management.md)");
    if (rc == ACL_SUCCESS) {
        s->mode_set = true;
        s->mode = (int)mode;
        if (mode == ACL_STOP_ON_FAILURE && s->context)
            s->context->stop_on_failure = true; /* every stream of the context stops on failure */
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

aclError aclrtStreamAbort(aclrtStream stream)
{
    pthread_mutex_lock(&rt_lock);
    fake_stream *s = NULL;
    int rc = rt_need_stream(stream, "aclrtStreamAbort", &s);
    if (rc == ACL_SUCCESS && !rt_product.stream_abort)
        rc = fakecann_fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "aclrtStreamAbort: %s does not support it "
                           "(06_stream_management.md: Atlas A2/A3 and 950 only)", rt_product.name);
    if (rc == ACL_SUCCESS) {
        s->drop_upto = s->enqueued; /* the queued tasks, and a wait blocked now, are dropped */
        int64_t target = s->enqueued;
        drop_queued(s);
        pthread_cond_broadcast(&rt_changed); /* a wait blocked now re-checks drop_upto */
        while (s->completed < target)
            pthread_cond_wait(&rt_changed, &rt_lock);
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

int fakecann_enqueue(aclrtStream stream, fakecann_task_fn run, void (*release)(void *), void *payload, const char *what)
{
    pthread_mutex_lock(&rt_lock);
    fake_stream *s = NULL;
    int rc = rt_need_stream(stream, what, &s);
    task *t = rc == ACL_SUCCESS ? rt_new_task(TASK_KERNEL, what) : NULL;
    if (t) {
        t->run = run;
        t->release = release;
        t->payload = payload;
        rc = rt_submit(s, t, what); /* frees the payload when refused */
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

/* ---- copies ------------------------------------------------------------------------------- */
/* aclrtMemcpy / aclrtMemset: synchronous, on the calling thread, ordered with no stream.  An open
 * capture may forbid them first (ApiImpl::MemCopySync, ::MemSetSync: CHECK_CAPTURE_MODE_SUPPORT,
 * see rt_capture_blocks).  Host memory must be pinned here (the fake knows no other). */
static int check_sync_side(const void *address, size_t count, int want, const char *api, const char *role)
{
    char why[300];
    return rt_memory_check(address, count, want, why, sizeof why) ? ACL_SUCCESS :
        fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "%s: %s: %s", api, role, why);
}

aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count, int kind)
{
    pthread_mutex_lock(&rt_lock);
    int rc = rt_need_context();
    if (rc == ACL_SUCCESS)
        rc = rt_refuse_in_callback("aclrtMemcpy");
    if (rc == ACL_SUCCESS)
        rc = rt_capture_blocks("aclrtMemcpy");
    if (rc == ACL_SUCCESS && (kind < 0 || kind > 4))
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtMemcpy: kind %d is not supported by the fake", kind);
    else if (rc == ACL_SUCCESS && count > destMax)
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtMemcpy: count %zu exceeds destMax %zu", count, destMax);
    int src_want = kind == 4 ? 0 : (kind == 2 || kind == 3) ? 1 : -1;
    int dst_want = kind == 4 ? 0 : (kind == 1 || kind == 3) ? 1 : -1;
    if (rc == ACL_SUCCESS && count > 0)
        rc = check_sync_side(src, count, src_want, "aclrtMemcpy", "source");
    if (rc == ACL_SUCCESS && count > 0)
        rc = check_sync_side(dst, count, dst_want, "aclrtMemcpy", "destination");
    if (rc == ACL_SUCCESS && count > 0)
        memmove(dst, src, count);
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

aclError aclrtMemset(void *devPtr, size_t maxCount, int32_t value, size_t count)
{
    pthread_mutex_lock(&rt_lock);
    int rc = rt_need_context();
    if (rc == ACL_SUCCESS)
        rc = rt_refuse_in_callback("aclrtMemset");
    if (rc == ACL_SUCCESS)
        rc = rt_capture_blocks("aclrtMemset");
    if (rc == ACL_SUCCESS && count > maxCount)
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtMemset: count %zu exceeds maxCount %zu", count, maxCount);
    if (rc == ACL_SUCCESS && count > 0)
        rc = check_sync_side(devPtr, count, 1, "aclrtMemset", "destination");
    if (rc == ACL_SUCCESS && count > 0)
        memset(devPtr, value, count);
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

static const char *const copy_kinds[] = {"HOST_TO_HOST", "HOST_TO_DEVICE", "DEVICE_TO_HOST", "DEVICE_TO_DEVICE",
                                         "DEFAULT"};

static int check_copy(const void *dst, const void *src, size_t count, int kind)
{
    char why[300];
    /* 0/1/2/3 name the sides: host memory must be pinned for an async copy. */
    int src_want = kind == 4 ? 0 : (kind == 2 || kind == 3) ? 1 : -1;
    int dst_want = kind == 4 ? 0 : (kind == 1 || kind == 3) ? 1 : -1;
    if (!rt_memory_check(src, count, src_want, why, sizeof why))
        return fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtMemcpyAsync(%s): source: %s", copy_kinds[kind], why);
    if (!rt_memory_check(dst, count, dst_want, why, sizeof why))
        return fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtMemcpyAsync(%s): destination: %s", copy_kinds[kind],
                             why);
    bool src_device = rt_memory_check(src, 1, 1, why, sizeof why), dst_device = rt_memory_check(dst, 1, 1, why, sizeof why);
    if (!src_device && !dst_device) /* 11-03: no asynchronous host-to-host copy in the EP form */
        return fakecann_fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "aclrtMemcpyAsync: asynchronous host-to-host copies are "
                             "not supported (11-03_memory_copy_and_set.md, EP form)");
    if (src_device && dst_device && (((uintptr_t)src % 64) || ((uintptr_t)dst % 64))) /* acl_rt.h restriction */
        return fakecann_fail(ACL_ERROR_RT_ADDR_UNALIGNED, "aclrtMemcpyAsync: on-chip device-to-device copies need "
                             "64-byte aligned source and destination, got %p and %p", src, dst);
    return ACL_SUCCESS;
}

aclError aclrtMemcpyAsync(void *dst, size_t destMax, const void *src, size_t count, int kind, aclrtStream stream)
{
    pthread_mutex_lock(&rt_lock);
    fake_stream *s = NULL;
    int rc = rt_need_stream(stream, "aclrtMemcpyAsync", &s);
    if (rc == ACL_SUCCESS && (kind < 0 || kind > 4))
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtMemcpyAsync: kind %d is not supported by the fake", kind);
    else if (rc == ACL_SUCCESS && count > destMax)
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtMemcpyAsync: count %zu exceeds destMax %zu", count, destMax);
    else if (rc == ACL_SUCCESS && kind == 0)
        rc = fakecann_fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "aclrtMemcpyAsync: ACL_MEMCPY_HOST_TO_HOST is not supported "
                           "asynchronously (11-03_memory_copy_and_set.md, EP form)");
    if (rc == ACL_SUCCESS && count > 0)
        rc = check_copy(dst, src, count, kind);
    if (rc == ACL_SUCCESS && count > 0)
        rc = rt_peer_check(s->device, dst, src, kind);
    if (rc == ACL_SUCCESS && count > 0) {
        task *t = rt_new_task(TASK_COPY, "aclrtMemcpyAsync");
        t->dst = dst;
        t->src = src;
        t->count = count;
        rc = rt_submit(s, t, "aclrtMemcpyAsync");
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

aclError aclrtMemsetAsync(void *devPtr, size_t maxCount, int32_t value, size_t count, aclrtStream stream)
{
    pthread_mutex_lock(&rt_lock);
    fake_stream *s = NULL;
    char why[300];
    int rc = rt_need_stream(stream, "aclrtMemsetAsync", &s);
    if (rc == ACL_SUCCESS && count > maxCount)
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtMemsetAsync: count %zu exceeds maxCount %zu", count,
                           maxCount);
    else if (rc == ACL_SUCCESS && count > 0 && !rt_memory_check(devPtr, count, 1, why, sizeof why))
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtMemsetAsync: %s", why);
    if (rc == ACL_SUCCESS && count > 0) {
        task *t = rt_new_task(TASK_MEMSET, "aclrtMemsetAsync");
        t->dst = devPtr;
        t->value = value;
        t->count = count;
        rc = rt_submit(s, t, "aclrtMemsetAsync");
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

/* ---- events -------------------------------------------------------------------------------- */
int rt_need_event(aclrtEvent handle, const char *api, fake_event **out)
{
    int rc = rt_need_context();
    if (rc != ACL_SUCCESS)
        return rc;
    if (!handle || !ptr_set_has(&events, handle))
        return fakecann_fail(ACL_ERROR_RT_INVALID_HANDLE, "%s: %p is not a live event", api, handle);
    *out = (fake_event *)handle;
    return ACL_SUCCESS;
}

fake_event *rt_new_event(int device, uint32_t flags)
{
    fake_event *e = (fake_event *)calloc(1, sizeof *e);
    e->device = device;
    e->flags = flags;
    e->error_generation = -1;
    return e;
}

/* With rt_lock held: take one of the device's event resources (07_event_management.md). */
static int take_slot(fake_event *e, const char *api)
{
    if (e->holds_slot || !(e->flags & EVENT_SYNC))
        return ACL_SUCCESS;
    if (event_slots[e->device] >= rt_product.max_events)
        return fakecann_fail(ACL_ERROR_RT_NO_EVENT_RESOURCE, "%s: %s supports %d events per device "
                             "(07_event_management.md); destroy unused events", api, rt_product.name,
                             rt_product.max_events);
    event_slots[e->device]++;
    e->holds_slot = true;
    return ACL_SUCCESS;
}

static aclError create_event(aclrtEvent *event, uint32_t flag, bool reusable, bool slot_now, const char *api)
{
    pthread_mutex_lock(&rt_lock);
    int rc = rt_need_context();
    if (rc == ACL_SUCCESS && (!event || (flag & ~(uint32_t)EVENT_KNOWN_FLAGS)))
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "%s: event is NULL or flag %#x unknown", api, flag);
    fake_event *e = rc == ACL_SUCCESS ? rt_new_event(rt_current->device, flag) : NULL;
    if (e) {
        e->reusable = reusable;
        rc = slot_now ? take_slot(e, api) : ACL_SUCCESS;
        if (rc != ACL_SUCCESS)
            free(e);
    }
    if (rc == ACL_SUCCESS) {
        ptr_set_add(&events, e);
        *event = e;
        fakecann_count("event", 1);
        rt_trace("%s %d", api, e->device);
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

/* Single-use: record, wait, aclrtResetEvent; with ACL_EVENT_SYNC it takes a resource now. */
aclError aclrtCreateEventWithFlag(aclrtEvent *event, uint32_t flag)
{
    return create_event(event, flag, false, true, "aclrtCreateEventWithFlag");
}

/* Reusable ("recording again overwrites"); "not limited by the hardware at creation": the
 * resource is taken at the first record. */
aclError aclrtCreateEventExWithFlag(aclrtEvent *event, uint32_t flag)
{
    return create_event(event, flag, true, false, "aclrtCreateEventExWithFlag");
}

/* "Creating does not take the resource; aclrtRecordEvent does." */
aclError aclrtCreateEvent(aclrtEvent *event) { return create_event(event, EVENT_SYNC, false, false, "aclrtCreateEvent"); }

/* 07_event_management.md: destroying an event whose records have not completed is allowed (its
 * resources go when they complete), but no other call may be using it: a stream wait still
 * pending is refused with ACL_ERROR_RT_EVENT_NOT_COMPLETE (the stricter choice). */
aclError aclrtDestroyEvent(aclrtEvent event)
{
    pthread_mutex_lock(&rt_lock);
    fake_event *e = NULL;
    int rc = rt_need_event(event, "aclrtDestroyEvent", &e);
    if (rc == ACL_SUCCESS && e->pending_waits > 0)
        rc = fakecann_fail(ACL_ERROR_RT_EVENT_NOT_COMPLETE, "aclrtDestroyEvent: a stream wait using the event has not "
                           "completed yet");
    if (rc == ACL_SUCCESS) {
        ptr_set_remove(&events, e);
        if (e->holds_slot)
            event_slots[e->device]--;
        rt_trace("aclrtDestroyEvent %d", e->device);
        fakecann_count("event", -1);
        e->destroyed = true;
        release_event(e);
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

aclError aclrtRecordEvent(aclrtEvent event, aclrtStream stream)
{
    pthread_mutex_lock(&rt_lock);
    fake_stream *s = NULL;
    fake_event *e = NULL;
    int rc = rt_need_stream(stream, "aclrtRecordEvent", &s);
    if (rc == ACL_SUCCESS)
        rc = rt_need_event(event, "aclrtRecordEvent", &e);
    if (rc == ACL_SUCCESS && !e->reusable && e->armed)
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtRecordEvent: the event (aclrtCreateEventWithFlag) was "
                           "recorded and not reset: call aclrtResetEvent after its waits, or create it with "
                           "aclrtCreateEventExWithFlag to record it again (07_event_management.md)");
    if (rc == ACL_SUCCESS && s->capture)
        rc = rt_capture_record(s, e);
    else if (rc == ACL_SUCCESS && s->update)
        rc = rt_update_store(s, rt_new_task(TASK_RECORD, "aclrtRecordEvent"), "aclrtRecordEvent");
    else if (rc == ACL_SUCCESS && s->stopped)
        rc = stopped_error(s, "aclrtRecordEvent");
    else if (rc == ACL_SUCCESS && (rc = take_slot(e, "aclrtRecordEvent")) == ACL_SUCCESS) {
        task *t = rt_new_task(TASK_RECORD, "aclrtRecordEvent");
        t->event = e;
        t->event_generation = ++e->recorded;
        e->armed = true;
        e->in_model = false;
        ptr_set_add(&e->pending, generation_key(e->recorded));
        rt_push(s, t);
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

static int reset_task(void *payload, char *why, size_t why_len)
{
    (void)payload;
    (void)why;
    (void)why_len;
    return ACL_SUCCESS;
}

aclError aclrtResetEvent(aclrtEvent event, aclrtStream stream)
{
    pthread_mutex_lock(&rt_lock);
    fake_stream *s = NULL;
    fake_event *e = NULL;
    int rc = rt_need_stream(stream, "aclrtResetEvent", &s);
    if (rc == ACL_SUCCESS)
        rc = rt_need_event(event, "aclrtResetEvent", &e);
    if (rc == ACL_SUCCESS && e->reusable)
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtResetEvent: events from aclrtCreateEventExWithFlag are "
                           "not supported (07_event_management.md); record them again instead");
    else if (rc == ACL_SUCCESS && !(e->flags & EVENT_SYNC))
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtResetEvent: only events with ACL_EVENT_SYNC");
    if (rc == ACL_SUCCESS) {
        task *t = rt_new_task(TASK_CONTROL, "aclrtResetEvent");
        t->run = reset_task;
        rc = rt_submit(s, t, "aclrtResetEvent");
    }
    if (rc == ACL_SUCCESS)
        e->armed = false;
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

aclError aclrtStreamWaitEvent(aclrtStream stream, aclrtEvent event)
{
    pthread_mutex_lock(&rt_lock);
    fake_stream *s = NULL;
    fake_event *e = NULL;
    int rc = rt_need_stream(stream, "aclrtStreamWaitEvent", &s);
    if (rc == ACL_SUCCESS)
        rc = rt_need_event(event, "aclrtStreamWaitEvent", &e);
    if (rc == ACL_SUCCESS && !(e->flags & EVENT_SYNC))
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtStreamWaitEvent: the event lacks ACL_EVENT_SYNC "
                           "(07_event_management.md)");
    int taken = rc == ACL_SUCCESS ? rt_capture_wait(s, e) : 0;
    if (rc == ACL_SUCCESS && taken != 0)
        rc = taken == 1 ? ACL_SUCCESS : taken;
    else if (rc == ACL_SUCCESS && !e->armed) /* design/modules/event/event.md 4.2 */
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtStreamWaitEvent: the event was never recorded (or was "
                           "reset since): waiting on it is an invalid value");
    else if (rc == ACL_SUCCESS) {
        task *t = rt_new_task(TASK_WAIT, "aclrtStreamWaitEvent");
        t->event = e;
        t->event_generation = e->recorded;
        t->timeout_s = rt_op_wait_timeout_s;
        e->pending_waits++;
        rc = rt_submit(s, t, "aclrtStreamWaitEvent");
        if (rc != ACL_SUCCESS)
            e->pending_waits--;
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

static int check_not_captured(fake_event *e, const char *api)
{
    /* api_error.cc, ApiErrorDecorator::EventSynchronize/EventQueryStatus: refused before anything
     * is done; the capture goes on. */
    return e->capture ? fakecann_fail(ACL_ERROR_RT_EVENT_CAPTURED, "%s: the event's latest record is in a capture "
                                      "that has not ended", api) : ACL_SUCCESS;
}

/* aclrtEventRecordedStatus: COMPLETE = 1 (the reverse of the deprecated aclrtQueryEvent). */
aclError aclrtQueryEventStatus(aclrtEvent event, int *status)
{
    pthread_mutex_lock(&rt_lock);
    fake_event *e = NULL;
    int rc = rt_need_event(event, "aclrtQueryEventStatus", &e);
    if (rc == ACL_SUCCESS)
        rc = check_not_captured(e, "aclrtQueryEventStatus");
    if (rc == ACL_SUCCESS && status)
        *status = rt_reached(e, e->recorded) ? 1 : 0;
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

/* Deprecated aclrtEventStatus: COMPLETE = 0; not for reusable events (07_event_management.md). */
aclError aclrtQueryEvent(aclrtEvent event, int *status)
{
    pthread_mutex_lock(&rt_lock);
    fake_event *e = NULL;
    int rc = rt_need_event(event, "aclrtQueryEvent", &e);
    if (rc == ACL_SUCCESS && e->reusable)
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtQueryEvent: not supported for events from "
                           "aclrtCreateEventExWithFlag; use aclrtQueryEventStatus");
    if (rc == ACL_SUCCESS && status)
        *status = rt_reached(e, e->recorded) ? 0 : 1;
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

aclError aclrtSynchronizeEventWithTimeout(aclrtEvent event, int32_t timeout)
{
    pthread_mutex_lock(&rt_lock);
    fake_event *e = NULL;
    int rc = check_timeout(timeout, "aclrtSynchronizeEventWithTimeout");
    if (rc == ACL_SUCCESS)
        rc = rt_refuse_in_callback("aclrtSynchronizeEvent");
    if (rc == ACL_SUCCESS)
        rc = rt_need_event(event, "aclrtSynchronizeEvent", &e);
    if (rc == ACL_SUCCESS)
        rc = check_not_captured(e, "aclrtSynchronizeEvent");
    if (rc == ACL_SUCCESS && e->in_model) /* api_error.cc, ApiErrorDecorator::EventSynchronize: IsEventInModel */
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtSynchronizeEvent: the event's latest record is inside a "
                           "captured model; synchronize an event recorded after the model's replay instead");
    if (rc == ACL_SUCCESS) {
        int64_t target = e->recorded;
        struct timespec deadline;
        int timed = rt_deadline(timeout, &deadline);
        while (rc == ACL_SUCCESS && !rt_reached(e, target)) {
            if (!timed)
                pthread_cond_wait(&rt_changed, &rt_lock);
            else if (pthread_cond_timedwait(&rt_changed, &rt_lock, &deadline) == ETIMEDOUT && !rt_reached(e, target))
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
    int rc = rt_need_event(startEvent, "aclrtEventElapsedTime", &start);
    if (rc == ACL_SUCCESS)
        rc = rt_need_event(endEvent, "aclrtEventElapsedTime", &end);
    if (rc == ACL_SUCCESS && (!(start->flags & EVENT_TIME_LINE) || !(end->flags & EVENT_TIME_LINE)))
        rc = fakecann_fail(ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID, "aclrtEventElapsedTime: both events need the "
                           "ACL_EVENT_TIME_LINE flag");
    else if (rc == ACL_SUCCESS && (start->recorded == 0 || end->recorded == 0))
        rc = fakecann_fail(ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID, "aclrtEventElapsedTime: an event was never recorded");
    else if (rc == ACL_SUCCESS && (!rt_reached(start, start->recorded) || !rt_reached(end, end->recorded)))
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
    int rc = rt_need_stream(stream, "aclrtLaunchHostFunc", &s);
    if (rc == ACL_SUCCESS && !fn)
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtLaunchHostFunc: fn is NULL");
    else if (rc == ACL_SUCCESS && s->mechanism == MECHANISM_REPORT)
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtLaunchHostFunc: the stream uses aclrtSubscribeReport/"
                           "aclrtLaunchCallback; the two callback mechanisms must not be mixed on one stream");
    else if (rc == ACL_SUCCESS && s->capture)
        rc = rt_capture_forbid(s->capture, ACL_ERROR_RT_TASK_TYPE_NOT_SUPPORT, "aclrtLaunchHostFunc");
    if (rc == ACL_SUCCESS && !s->context->host_running) { /* the context's thread, made by its first call */
        s->context->host_stopping = false;
        if (pthread_create(&s->context->host_thread, NULL, host_func_loop, s->context) != 0)
            rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtLaunchHostFunc: no thread for host functions");
        else
            s->context->host_running = true;
    }
    if (rc == ACL_SUCCESS) {
        s->mechanism = MECHANISM_HOST_FUNC;
        task *t = rt_new_task(TASK_HOST_FUNC, "aclrtLaunchHostFunc");
        t->function = (void (*)(void *))fn;
        t->argument = args;
        rc = rt_submit(s, t, "aclrtLaunchHostFunc");
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
    int rc = rt_need_stream(stream, "aclrtSubscribeReport", &s);
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
    int rc = rt_need_stream(stream, "aclrtUnSubscribeReport", &s);
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
    int rc = rt_need_stream(stream, "aclrtLaunchCallback", &s);
    if (rc == ACL_SUCCESS && (!fn || (blockType != 0 && blockType != 1)))
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtLaunchCallback: fn is NULL or blockType %d unknown",
                           blockType);
    else if (rc == ACL_SUCCESS && !s->subscribed)
        rc = fakecann_fail(ACL_ERROR_RT_STREAM_NO_CB_REG, "aclrtLaunchCallback: no thread is subscribed to the stream "
                           "(aclrtSubscribeReport)");
    else if (rc == ACL_SUCCESS && s->capture)
        rc = rt_capture_forbid(s->capture, ACL_ERROR_RT_TASK_TYPE_NOT_SUPPORT, "aclrtLaunchCallback");
    if (rc == ACL_SUCCESS) {
        task *t = rt_new_task(TASK_CALLBACK, "aclrtLaunchCallback");
        t->function = fn;
        t->argument = userData;
        t->block = blockType;
        rc = rt_submit(s, t, "aclrtLaunchCallback");
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

/* The codes aclrtProcessReport answers an idle poll with: current CANN's (aclrtProcessReportImpl,
 * src/acl/aclrt_impl/callback.cpp, passes on ACL_ERROR_RT_THREAD_SUBSCRIBE and
 * ACL_ERROR_RT_REPORT_TIMEOUT), or with FAKE_CANN_REPORT_CODES=legacy the deprecated 100035/100036. */
static int report_code(bool timed_out)
{
    const char *codes = getenv("FAKE_CANN_REPORT_CODES");
    bool legacy = codes && strcmp(codes, "legacy") == 0;
    if (timed_out)
        return legacy ? ACL_ERROR_WAIT_CALLBACK_TIMEOUT : ACL_ERROR_RT_REPORT_TIMEOUT;
    return legacy ? ACL_ERROR_THREAD_NOT_SUBSCRIBE : ACL_ERROR_RT_THREAD_SUBSCRIBE;
}

/* Runs one callback meant for the calling thread, waiting up to timeout ms for it (-1 or > 0:
 * aclrtProcessReportImpl refuses 0). */
aclError aclrtProcessReport(int32_t timeout)
{
    uint64_t me = (uint64_t)pthread_self();
    pthread_mutex_lock(&rt_lock);
    int rc = rt_need_context();
    if (rc == ACL_SUCCESS && (timeout == 0 || timeout < -1))
        rc = fakecann_fail(ACL_ERROR_INVALID_PARAM, "aclrtProcessReport: the timeout must be -1 or greater than 0 "
                           "ms, got %d", (int)timeout);
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
            rc = fakecann_fail(report_code(false), "aclrtProcessReport: the calling thread is not "
                               "subscribed to any stream");
        } else if (!timed) {
            pthread_cond_wait(&rt_changed, &rt_lock);
        } else if (pthread_cond_timedwait(&rt_changed, &rt_lock, &deadline) == ETIMEDOUT) {
            rc = fakecann_fail(report_code(true), "aclrtProcessReport: no callback within %d ms", timeout);
        }
    }
    pthread_mutex_unlock(&rt_lock);
    if (mine) {
        rt_in_callback = true;
        mine->function(mine->data);
        rt_in_callback = false;
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
