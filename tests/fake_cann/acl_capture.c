/* acl_capture.c: fake libascendcl.so, part 3: model runtime instances captured from streams.
 *
 * The rules of hicann/runtime docs/zh/api_ref/15_model_running_instance__management.md, with the
 * codes of 25-01_aclError.md and the ACL Graph design notes (docs/zh/design/features/aclgraph.md):
 * - aclmdlRICaptureBegin(stream, mode) makes one origin stream store its tasks in a model
 *   instead of running them (a stream already capturing: ACL_ERROR_RT_STREAM_CAPTURED; a
 *   product without capture, FAKE_CANN_PRODUCT=200i-a2: ACL_ERROR_RT_FEATURE_NOT_SUPPORT).
 * - A stream joins by waiting on an event recorded inside the capture; a captured wait on an
 *   event recorded outside it has no captured record (ACL_ERROR_RT_CAPTURE_DEPENDENCY); an
 *   event of another capture conflicts (ACL_ERROR_STREAM_CAPTURE_CONFLICT).
 * - aclmdlRICaptureEnd on the origin (ACL_ERROR_RT_STREAM_CAPTURE_UNMATCHED otherwise), on the
 *   thread that began unless the mode is RELAXED (ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD);
 *   every joined stream must end with a record the origin's last task depends on
 *   (ACL_ERROR_RT_STREAM_UNJOINED).  Synchronizing a capturing stream or the device, querying
 *   or synchronizing an event recorded in the capture, or launching a host function there
 *   invalidates the capture, and its end fails with ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED.
 * - aclmdlRIExecuteAsync(model, stream) replays the model on the model's own streams (captured
 *   streams "consume stream resources"), after the stream's earlier work, and the stream's later
 *   work waits for all of it; a failure inside is the replaying stream's.  Records inside the
 *   model synchronize the model only.  aclmdlRIDestroy refuses a model that may still run
 *   (ACL_ERROR_RT_MODEL_RUNNING).
 * - Task groups: single-op tasks between aclmdlRICaptureTaskGrpBegin/End (anything else:
 *   ACL_ERROR_RT_TASK_TYPE_NOT_SUPPORT; unpaired or nested: ACL_ERROR_STREAM_TASK_GROUP_STATUS;
 *   the fake allows one open group per capture, the stricter choice); an update on a stream
 *   that is not capturing takes as many single-op tasks and replaces the group's when that
 *   stream reaches aclmdlRICaptureTaskUpdateEnd's point.
 */
#include <stdio.h>
#include <string.h>

#include "acl_internal.h"

enum { STATUS_NONE = 0, STATUS_ACTIVE = 1, STATUS_INVALIDATED = 2 };
enum { MODE_GLOBAL = 0, MODE_THREAD_LOCAL = 1, MODE_RELAXED = 2 };

typedef void *aclmdlRI;
typedef void *aclrtTaskGrp;

typedef struct item {
    fake_stream *stream;
    task *t; /* owned by the model: its payload is released when the model is destroyed */
} item;

typedef struct fake_model fake_model;

typedef struct task_group {
    fake_model *model;
    size_t *indices;
    size_t count;
    bool updating;
} task_group;

struct fake_model {
    int device;
    bool ready;
    item *items;
    size_t count, cap;
    fake_stream **captured, **inner;
    fake_event **ends;
    size_t streams;
    fake_event **users, **shadows;
    size_t events;
    fake_event *start;
    ptr_set groups;
    ptr_set garbage; /* tasks replaced by updates: replays already queued may still run them */
    struct replay *pending; /* replays submitted, not yet handed to the model's streams */
};

typedef struct capture {
    fake_stream *origin;
    int mode;
    pthread_t thread;
    int status;
    fake_model *model;
    ptr_set members, recorded;
    fake_stream *group_stream; /* the one open task group */
    size_t group_start;
} capture;

typedef struct task_update {
    task_group *group;
    task **tasks;
    size_t count, cap;
} task_update;

static ptr_set models, groups, captures;

static void add_item(fake_model *m, fake_stream *s, task *t)
{
    if (m->count == m->cap) {
        m->cap = m->cap ? m->cap * 2 : 64;
        m->items = (item *)realloc(m->items, m->cap * sizeof *m->items);
    }
    m->items[m->count++] = (item){s, t};
}

static void free_model(fake_model *m)
{
    for (size_t i = 0; i < m->count; i++)
        rt_free_task(m->items[i].t);
    for (size_t i = 0; i < m->garbage.len; i++)
        rt_free_task((task *)m->garbage.items[i]);
    for (size_t i = 0; i < m->groups.len; i++) {
        task_group *g = (task_group *)m->groups.items[i];
        ptr_set_remove(&groups, g);
        free(g->indices);
        free(g);
    }
    for (size_t i = 0; i < m->events; i++)
        free(m->shadows[i]);
    for (size_t i = 0; i < m->streams; i++)
        free(m->ends ? m->ends[i] : NULL);
    free(m->start);
    free(m->items);
    free(m->captured);
    free(m->inner);
    free(m->ends);
    free(m->users);
    free(m->shadows);
    ptr_set_free(&m->groups);
    ptr_set_free(&m->garbage);
    free(m);
}

/* ---- what acl_cond.c needs of a model (rt_lock held) ---------------------------------------- */
void (*rt_model_destroy_hook)(void *model);

void *rt_model_new(int device)
{
    fake_model *m = (fake_model *)calloc(1, sizeof *m);
    m->device = device;
    return m;
}

bool rt_model_capturing(const void *model)
{
    for (size_t i = 0; i < captures.len; i++)
        if (((const capture *)captures.items[i])->model == model)
            return true;
    return false;
}

void *rt_stream_capture_model(const fake_stream *s) { return s->capture ? s->capture->model : NULL; }

void rt_model_store(void *model, fake_stream *s, task *t, bool front)
{
    fake_model *m = (fake_model *)model;
    add_item(m, s, t);
    if (front) {
        memmove(m->items + 1, m->items, (m->count - 1) * sizeof *m->items);
        m->items[0] = (item){s, t};
    }
}

bool rt_model_ready(const void *model) { return ((const fake_model *)model)->ready; }
size_t rt_model_task_count(const void *model) { return ((const fake_model *)model)->count; }
task *rt_model_task(const void *model, size_t index) { return ((const fake_model *)model)->items[index].t; }

/* A sub-model the cond handle frees with its parent (rt_lock held). */
void rt_model_discard(void *model);

/* ---- capture ------------------------------------------------------------------------------- */
aclError aclmdlRICaptureBegin(aclrtStream stream, int mode) { return rt_capture_begin_into(stream, mode, NULL); }

/* aclmdlRICaptureBegin, or (into: a conditional task's sub-model, acl_cond.c)
 * aclmdlRICaptureToModelRIBegin. */
int rt_capture_begin_into(aclrtStream stream, int mode, void *into)
{
    /* model_ri.cpp, aclmdlRICaptureBeginImpl: a NULL stream (the default one) is refused before
     * the runtime is asked (ACL_REQUIRES_NOT_NULL_WITH_INPUT_REPORT). */
    if (!stream)
        return fakecann_fail(ACL_ERROR_INVALID_PARAM, "aclmdlRICaptureBegin: the default stream (NULL) cannot be "
                             "captured");
    pthread_mutex_lock(&rt_lock);
    fake_stream *s = NULL;
    int rc = rt_need_stream(stream, "aclmdlRICaptureBegin", &s);
    if (rc == ACL_SUCCESS && !rt_product.capture)
        rc = fakecann_fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "aclmdlRICaptureBegin: %s does not support model capture",
                           rt_product.name);
    else if (rc == ACL_SUCCESS && (mode < MODE_GLOBAL || mode > MODE_RELAXED))
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclmdlRICaptureBegin: mode %d is unknown", mode);
    else if (rc == ACL_SUCCESS && s->capture)
        rc = fakecann_fail(ACL_ERROR_RT_STREAM_CAPTURED, "aclmdlRICaptureBegin: the stream is already being captured");
    if (rc == ACL_SUCCESS) {
        capture *c = (capture *)calloc(1, sizeof *c);
        c->origin = s;
        c->mode = mode;
        c->thread = pthread_self();
        c->status = STATUS_ACTIVE;
        c->model = into ? (fake_model *)into : (fake_model *)calloc(1, sizeof *c->model);
        c->model->device = s->device;
        ptr_set_add(&c->members, s);
        ptr_set_add(&captures, c);
        if (!into)
            ptr_set_add(&models, c->model);
        s->capture = c;
        rt_trace("aclmdlRICaptureBegin %d", s->device);
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

aclError aclmdlRICaptureGetInfo(aclrtStream stream, int *status, aclmdlRI *modelRI)
{
    pthread_mutex_lock(&rt_lock);
    fake_stream *s = NULL;
    int rc = rt_need_stream(stream, "aclmdlRICaptureGetInfo", &s);
    if (rc == ACL_SUCCESS && status)
        *status = s->capture ? s->capture->status : STATUS_NONE;
    if (rc == ACL_SUCCESS && modelRI)
        *modelRI = s->capture ? s->capture->model : NULL;
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

int rt_capture_forbid(capture *c, int code, const char *what)
{
    if (c->status == STATUS_ACTIVE)
        c->status = STATUS_INVALIDATED;
    return fakecann_fail(code, "%s inside a capture: the capture is invalidated (aclmdlRICaptureEnd will fail); "
                         "synchronize before aclmdlRICaptureBegin or after aclmdlRICaptureEnd", what);
}

/* With rt_lock held: Context::IsCaptureModeSupport (context_aclgraph.cc) for a thread in the
 * default GLOBAL exchange mode: refused while a GLOBAL capture is open on the current device,
 * from any thread, or a THREAD_LOCAL one this thread began; RELAXED captures never refuse. */
int rt_capture_blocks(const char *api)
{
    for (size_t i = 0; i < captures.len; i++) {
        const capture *c = (const capture *)captures.items[i];
        if (c->origin->device != rt_current->device)
            continue;
        if (c->mode == MODE_GLOBAL || (c->mode == MODE_THREAD_LOCAL && pthread_equal(c->thread, pthread_self())))
            return fakecann_fail(ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT, "%s: a %s capture is open (the capture mode "
                                 "forbids synchronous copies and memsets)", api,
                                 c->mode == MODE_GLOBAL ? "GLOBAL" : "THREAD_LOCAL");
    }
    return ACL_SUCCESS;
}

int rt_capture_forbid_device_sync(int device)
{
    int rc = ACL_SUCCESS;
    for (size_t i = 0; i < captures.len; i++) {
        capture *c = (capture *)captures.items[i];
        if (c->origin->device == device)
            rc = rt_capture_forbid(c, ACL_ERROR_RT_CAPTURE_MODE_BLOCK_ASYNC, "aclrtSynchronizeDevice");
    }
    return rc;
}

int rt_capture_store(fake_stream *s, task *t, const char *api)
{
    capture *c = s->capture;
    if (c->group_stream == s && t->kind != TASK_KERNEL) {
        rt_free_task(t);
        return fakecann_fail(ACL_ERROR_RT_TASK_TYPE_NOT_SUPPORT, "%s: only single-op tasks may be captured in a task "
                             "group (aclmdlRICaptureTaskGrpBegin)", api);
    }
    add_item(c->model, s, t);
    return ACL_SUCCESS;
}

int rt_capture_record(fake_stream *s, fake_event *e)
{
    capture *c = s->capture;
    if (e->capture && e->capture != c)
        return fakecann_fail(ACL_ERROR_STREAM_CAPTURE_CONFLICT, "aclrtRecordEvent: the event is recorded in another "
                             "capture");
    e->capture = c;
    ptr_set_add(&c->recorded, e);
    task *t = rt_new_task(TASK_RECORD, "aclrtRecordEvent");
    t->event = e;
    return rt_capture_store(s, t, "aclrtRecordEvent");
}

int rt_capture_wait(fake_stream *s, fake_event *e)
{
    capture *c = e->capture;
    if (!c) {
        if (!s->capture)
            return 0;
        return fakecann_fail(ACL_ERROR_RT_CAPTURE_DEPENDENCY, "aclrtStreamWaitEvent: the stream is being captured but "
                             "the event has no record inside the capture");
    }
    if (!s->capture) { /* the stream joins the capture through the event */
        s->capture = c;
        ptr_set_add(&c->members, s);
    } else if (s->capture != c) {
        return fakecann_fail(ACL_ERROR_STREAM_CAPTURE_CONFLICT, "aclrtStreamWaitEvent: the event belongs to another "
                             "capture than the stream");
    }
    task *t = rt_new_task(TASK_WAIT, "aclrtStreamWaitEvent");
    t->event = e;
    int rc = rt_capture_store(s, t, "aclrtStreamWaitEvent");
    return rc == ACL_SUCCESS ? 1 : rc;
}

/* Every joined stream's last task must be a record that the origin's last task depends on. */
static bool all_joined(const capture *c)
{
    const fake_model *m = c->model;
    size_t n = m->count;
    if (n == 0)
        return c->members.len == 1;
    int64_t *next = (int64_t *)malloc(n * sizeof *next), *source = (int64_t *)malloc(n * sizeof *source);
    bool *reaches = (bool *)calloc(n, sizeof *reaches);
    int64_t origin_end = -1;
    for (size_t p = 0; p < n; p++) {
        next[p] = source[p] = -1;
        for (size_t q = p + 1; q < n && next[p] < 0; q++)
            if (m->items[q].stream == m->items[p].stream)
                next[p] = (int64_t)q;
        if (m->items[p].stream == c->origin)
            origin_end = (int64_t)p;
        if (m->items[p].t->kind == TASK_WAIT)
            for (size_t r = p; r-- > 0;)
                if (m->items[r].t->kind == TASK_RECORD && m->items[r].t->event == m->items[p].t->event) {
                    source[p] = (int64_t)r;
                    break;
                }
    }
    for (size_t p = n; p-- > 0;) {
        reaches[p] = (int64_t)p == origin_end || (next[p] >= 0 && reaches[next[p]]);
        for (size_t w = p + 1; w < n && !reaches[p]; w++)
            reaches[p] = source[w] == (int64_t)p && reaches[w];
    }
    bool joined = true;
    for (size_t p = 0; p < n; p++)
        if (next[p] < 0 && m->items[p].stream != c->origin && !(m->items[p].t->kind == TASK_RECORD && reaches[p]))
            joined = false;
    free(next);
    free(source);
    free(reaches);
    return joined;
}

static void leave(capture *c)
{
    for (size_t i = 0; i < c->members.len; i++)
        ((fake_stream *)c->members.items[i])->capture = NULL;
    for (size_t i = 0; i < c->recorded.len; i++) {
        fake_event *e = (fake_event *)c->recorded.items[i];
        if (e->capture == c) {
            e->capture = NULL; /* its records stay inside the model */
            e->in_model = true; /* a sync of it is refused (Event::IsEventInModel) */
        }
    }
    ptr_set_remove(&captures, c);
}

static size_t index_of(void **items, size_t count, const void *wanted)
{
    for (size_t i = 0; i < count; i++)
        if (items[i] == wanted)
            return i;
    return count;
}

/* With rt_lock held: the model's own streams and events. */
static int build(fake_model *m)
{
    m->captured = (fake_stream **)calloc(m->count + 1, sizeof *m->captured);
    m->users = (fake_event **)calloc(m->count + 1, sizeof *m->users);
    for (size_t i = 0; i < m->count; i++) {
        item *it = &m->items[i];
        if (index_of((void **)m->captured, m->streams, it->stream) == m->streams)
            m->captured[m->streams++] = it->stream;
        if (it->t->event && index_of((void **)m->users, m->events, it->t->event) == m->events)
            m->users[m->events++] = it->t->event;
    }
    m->inner = (fake_stream **)calloc(m->streams + 1, sizeof *m->inner);
    m->ends = (fake_event **)calloc(m->streams + 1, sizeof *m->ends);
    m->shadows = (fake_event **)calloc(m->events + 1, sizeof *m->shadows);
    for (size_t i = 0; i < m->streams; i++) {
        m->inner[i] = rt_new_stream(m->device, NULL);
        if (!m->inner[i])
            return ACL_ERROR_RT_NO_STREAM_RESOURCE;
        m->inner[i]->owner = m;
        m->ends[i] = rt_new_event(m->device, EVENT_SYNC);
    }
    for (size_t i = 0; i < m->events; i++)
        m->shadows[i] = rt_new_event(m->device, EVENT_SYNC);
    m->start = rt_new_event(m->device, EVENT_SYNC);
    m->ready = true;
    return ACL_SUCCESS;
}

static void discard_model(fake_model *m)
{
    if (rt_model_destroy_hook)
        rt_model_destroy_hook(m);
    ptr_set_remove(&models, m);
    for (size_t i = 0; i < m->streams; i++) {
        if (m->inner && m->inner[i]) {
            pthread_mutex_unlock(&rt_lock);
            rt_delete_stream(m->inner[i]);
            pthread_mutex_lock(&rt_lock);
        }
    }
    free_model(m);
}

void rt_model_discard(void *model) { discard_model((fake_model *)model); }

aclError aclmdlRICaptureEnd(aclrtStream stream, aclmdlRI *modelRI)
{
    pthread_mutex_lock(&rt_lock);
    fake_stream *s = NULL;
    int rc = rt_need_stream(stream, "aclmdlRICaptureEnd", &s);
    capture *c = rc == ACL_SUCCESS ? s->capture : NULL;
    if (rc == ACL_SUCCESS && !c)
        rc = fakecann_fail(ACL_ERROR_RT_STREAM_NOT_CAPTURED, "aclmdlRICaptureEnd: the stream is not being captured");
    else if (rc == ACL_SUCCESS && c->origin != s)
        rc = fakecann_fail(ACL_ERROR_RT_STREAM_CAPTURE_UNMATCHED, "aclmdlRICaptureEnd: the stream joined a capture "
                           "begun on another stream; end it there");
    else if (rc == ACL_SUCCESS && c->mode != MODE_RELAXED && !pthread_equal(c->thread, pthread_self()))
        rc = fakecann_fail(ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD, "aclmdlRICaptureEnd: not the thread that called "
                           "aclmdlRICaptureBegin (the mode is not RELAXED)");
    if (rc == ACL_SUCCESS) {
        leave(c);
        fake_model *m = c->model;
        if (c->status == STATUS_INVALIDATED)
            rc = fakecann_fail(ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED, "aclmdlRICaptureEnd: the capture was "
                               "invalidated by a forbidden call");
        else if (c->group_stream)
            rc = fakecann_fail(ACL_ERROR_STREAM_TASK_GROUP_STATUS, "aclmdlRICaptureEnd: a task group is still open");
        else if (!all_joined(c))
            rc = fakecann_fail(ACL_ERROR_RT_STREAM_UNJOINED, "aclmdlRICaptureEnd: a stream that joined the capture did "
                               "not rejoin the origin through a record the origin waits on");
        else if ((rc = build(m)) != ACL_SUCCESS)
            fakecann_fail(rc, "aclmdlRICaptureEnd: no stream resource for the model's streams");
        if (rc == ACL_SUCCESS && modelRI)
            *modelRI = m;
        if (rc != ACL_SUCCESS)
            discard_model(m);
        ptr_set_free(&c->members);
        ptr_set_free(&c->recorded);
        free(c);
        rt_trace("aclmdlRICaptureEnd %d", s->device);
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

/* ---- replay -------------------------------------------------------------------------------- */
static bool running(const fake_model *m)
{
    for (size_t i = 0; i < m->streams; i++)
        if (m->ends[i]->pending.len > 0 || m->ends[i]->pending_waits > 0)
            return true;
    return false;
}

static task *event_task(int kind, fake_event *e, int64_t generation, const char *what)
{
    task *t = rt_new_task(kind, what);
    t->event = e;
    t->event_generation = generation;
    if (kind == TASK_RECORD)
        ptr_set_add(&e->pending, (void *)(intptr_t)generation);
    else
        e->pending_waits++;
    return t;
}

static task *replayed(fake_model *m, const task *captured)
{
    if (captured->kind == TASK_RECORD || captured->kind == TASK_WAIT) {
        fake_event *shadow = m->shadows[index_of((void **)m->users, m->events, captured->event)];
        int64_t generation = captured->kind == TASK_RECORD ? ++shadow->recorded : shadow->recorded;
        return event_task(captured->kind, shadow, generation, captured->what);
    }
    task *t = (task *)malloc(sizeof *t);
    *t = *captured;
    t->next = NULL;
    t->release = NULL; /* the model owns the payload */
    return t;
}

/* One replay waiting to be handed to the model's streams.  aclmdlRIExecuteAsync submits one
   task to the replaying stream (as the device takes one model-execute task); when that stream
   reaches it, the model's streams get their parts of every replay submitted up to this one, in
   submission order (an earlier replay on another stream goes first: its parts wait on its own
   start record anyway).  The end generations are reserved at submission, so joins and
   aclmdlRIDestroy see the replay as running from then on. */
typedef struct replay {
    struct replay *next;
    fake_model *model;
    int64_t start;
    int64_t *ends;
    bool handed; /* its parts are on the model's streams */
    bool ran;    /* its own task ran (else a stop or an abort dropped it) */
} replay;

/* With rt_lock held. */
static void hand_over_one(replay *r)
{
    fake_model *m = r->model;
    for (size_t i = 0; i < m->streams; i++)
        rt_push(m->inner[i], event_task(TASK_WAIT, m->start, r->start, "model start"));
    for (size_t p = 0; p < m->count; p++) {
        size_t i = index_of((void **)m->captured, m->streams, m->items[p].stream);
        rt_push(m->inner[i], replayed(m, m->items[p].t));
    }
    for (size_t i = 0; i < m->streams; i++) {
        task *record = rt_new_task(TASK_RECORD, "model end");
        record->event = m->ends[i];
        record->event_generation = r->ends[i]; /* pending since the submission */
        record->report = m->ends[i];
        rt_push(m->inner[i], record);
    }
    r->handed = true;
}

/* The replay's task, on the replaying stream (rt_lock not held). */
static int hand_over(void *payload, char *why, size_t why_len)
{
    (void)why;
    (void)why_len;
    replay *r = (replay *)payload;
    pthread_mutex_lock(&rt_lock);
    fake_model *m = r->model;
    while (!r->handed && m->pending) {
        replay *head = m->pending;
        m->pending = head->next;
        hand_over_one(head);
    }
    r->ran = true;
    pthread_mutex_unlock(&rt_lock);
    return ACL_SUCCESS;
}

/* The replay's task is freed: after it ran (nothing refers to the replay any more), or dropped
   by a stop or an abort, with rt_lock held (then its parts never run unless an earlier hand-over
   took them: a dropped start record holds them, as a dropped record holds its waiters). */
static void release_replay(void *payload)
{
    replay *r = (replay *)payload;
    if (!r->ran && !r->handed) {
        replay **link = &r->model->pending;
        while (*link && *link != r)
            link = &(*link)->next;
        if (*link)
            *link = r->next;
    }
    free(r->ends);
    free(r);
}

aclError aclmdlRIExecuteAsync(aclmdlRI modelRI, aclrtStream stream)
{
    pthread_mutex_lock(&rt_lock);
    fake_stream *s = NULL;
    fake_model *m = (fake_model *)modelRI;
    int rc = rt_refuse_in_callback("aclmdlRIExecuteAsync");
    if (rc == ACL_SUCCESS)
        rc = rt_need_stream(stream, "aclmdlRIExecuteAsync", &s);
    if (rc == ACL_SUCCESS && (!ptr_set_has(&models, m) || !m->ready))
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclmdlRIExecuteAsync: %p is not a captured model", modelRI);
    else if (rc == ACL_SUCCESS && s->capture)
        rc = fakecann_fail(ACL_ERROR_RT_STREAM_CAPTURED, "aclmdlRIExecuteAsync: the stream is being captured");
    else if (rc == ACL_SUCCESS && s->stopped)
        rc = fakecann_fail(s->stopped, "aclmdlRIExecuteAsync: the stream stopped after a failure");
    for (size_t i = 0; rc == ACL_SUCCESS && i < m->streams; i++)
        if (m->inner[i]->stopped)
            rc = fakecann_fail(m->inner[i]->stopped, "aclmdlRIExecuteAsync: a stream of the model stopped after a "
                               "failure (ACL_STOP_ON_FAILURE); capture the model again");
    if (rc == ACL_SUCCESS) {
        replay *r = (replay *)calloc(1, sizeof *r);
        r->model = m;
        r->ends = (int64_t *)calloc(m->streams, sizeof *r->ends);
        r->start = ++m->start->recorded;
        rt_push(s, event_task(TASK_RECORD, m->start, r->start, "model start"));
        for (size_t i = 0; i < m->streams; i++) {
            r->ends[i] = ++m->ends[i]->recorded;
            ptr_set_add(&m->ends[i]->pending, (void *)(intptr_t)r->ends[i]);
        }
        replay **tail = &m->pending;
        while (*tail)
            tail = &(*tail)->next;
        *tail = r;
        task *t = rt_new_task(TASK_CONTROL, "model replay");
        t->run = hand_over;
        t->payload = r;
        t->release = release_replay;
        rt_push(s, t);
        for (size_t i = 0; i < m->streams; i++) {
            task *join = event_task(TASK_WAIT, m->ends[i], r->ends[i], "model join");
            join->adopt = true; /* a failure inside the model is the replaying stream's */
            rt_push(s, join);
        }
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

aclError aclmdlRIDestroy(aclmdlRI modelRI)
{
    pthread_mutex_lock(&rt_lock);
    fake_model *m = (fake_model *)modelRI;
    int rc = rt_need_context();
    if (rc == ACL_SUCCESS && (!ptr_set_has(&models, m) || !m->ready))
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclmdlRIDestroy: %p is not a captured model", modelRI);
    else if (rc == ACL_SUCCESS && running(m))
        rc = fakecann_fail(ACL_ERROR_RT_MODEL_RUNNING, "aclmdlRIDestroy: the model may still be executing; synchronize "
                           "the stream it was replayed on first");
    if (rc == ACL_SUCCESS)
        discard_model(m);
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

/* ---- task groups and updates ---------------------------------------------------------------- */
aclError aclmdlRICaptureTaskGrpBegin(aclrtStream stream)
{
    pthread_mutex_lock(&rt_lock);
    fake_stream *s = NULL;
    int rc = rt_need_stream(stream, "aclmdlRICaptureTaskGrpBegin", &s);
    if (rc == ACL_SUCCESS && !s->capture)
        rc = fakecann_fail(ACL_ERROR_RT_STREAM_NOT_CAPTURED, "aclmdlRICaptureTaskGrpBegin: the stream is not being "
                           "captured");
    else if (rc == ACL_SUCCESS && s->capture->group_stream)
        rc = fakecann_fail(ACL_ERROR_STREAM_TASK_GROUP_STATUS, "aclmdlRICaptureTaskGrpBegin: a task group is already "
                           "open in this capture");
    if (rc == ACL_SUCCESS) {
        s->capture->group_stream = s;
        s->capture->group_start = s->capture->model->count;
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

aclError aclmdlRICaptureTaskGrpEnd(aclrtStream stream, aclrtTaskGrp *handle)
{
    pthread_mutex_lock(&rt_lock);
    fake_stream *s = NULL;
    int rc = rt_need_stream(stream, "aclmdlRICaptureTaskGrpEnd", &s);
    if (rc == ACL_SUCCESS && (!s->capture || s->capture->group_stream != s))
        rc = fakecann_fail(ACL_ERROR_STREAM_TASK_GROUP_STATUS, "aclmdlRICaptureTaskGrpEnd: no task group is open on "
                           "this stream");
    if (rc == ACL_SUCCESS) {
        capture *c = s->capture;
        task_group *g = (task_group *)calloc(1, sizeof *g);
        g->model = c->model;
        g->indices = (size_t *)calloc(c->model->count + 1, sizeof *g->indices);
        for (size_t p = c->group_start; p < c->model->count; p++)
            if (c->model->items[p].stream == s)
                g->indices[g->count++] = p;
        c->group_stream = NULL;
        ptr_set_add(&groups, g);
        ptr_set_add(&c->model->groups, g);
        if (handle)
            *handle = g;
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

aclError aclmdlRICaptureTaskUpdateBegin(aclrtStream stream, aclrtTaskGrp handle)
{
    pthread_mutex_lock(&rt_lock);
    fake_stream *s = NULL;
    task_group *g = (task_group *)handle;
    int rc = rt_need_stream(stream, "aclmdlRICaptureTaskUpdateBegin", &s);
    if (rc == ACL_SUCCESS && !ptr_set_has(&groups, g))
        rc = fakecann_fail(ACL_ERROR_RT_INVALID_HANDLE, "aclmdlRICaptureTaskUpdateBegin: %p is not a task group", handle);
    else if (rc == ACL_SUCCESS && s->capture)
        rc = fakecann_fail(ACL_ERROR_RT_STREAM_CAPTURED, "aclmdlRICaptureTaskUpdateBegin: the stream is being "
                           "captured; update on a stream that is not");
    else if (rc == ACL_SUCCESS && (s->update || g->updating))
        rc = fakecann_fail(ACL_ERROR_STREAM_TASK_GROUP_STATUS, "aclmdlRICaptureTaskUpdateBegin: an update is already "
                           "open on this stream or this task group");
    if (rc == ACL_SUCCESS) {
        s->update = (task_update *)calloc(1, sizeof *s->update);
        s->update->group = g;
        g->updating = true;
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

int rt_update_store(fake_stream *s, task *t, const char *api)
{
    task_update *u = s->update;
    if (t->kind != TASK_KERNEL) {
        rt_free_task(t);
        return fakecann_fail(ACL_ERROR_RT_TASK_TYPE_NOT_SUPPORT, "%s: only single-op tasks may update a task group",
                             api);
    }
    if (u->count == u->cap) {
        u->cap = u->cap ? u->cap * 2 : 8;
        u->tasks = (task **)realloc(u->tasks, u->cap * sizeof *u->tasks);
    }
    u->tasks[u->count++] = t;
    return ACL_SUCCESS;
}

/* Runs when the update's stream gets there: the group's tasks take the new ones' place. */
static int apply_update(void *payload, char *why, size_t why_len)
{
    (void)why;
    (void)why_len;
    task_update *u = (task_update *)payload;
    pthread_mutex_lock(&rt_lock);
    fake_model *m = u->group->model;
    for (size_t i = 0; i < u->count; i++) {
        item *it = &m->items[u->group->indices[i]];
        ptr_set_add(&m->garbage, it->t); /* a replay already queued may still run the old one */
        it->t = u->tasks[i];
    }
    pthread_mutex_unlock(&rt_lock);
    free(u->tasks);
    free(u);
    return ACL_SUCCESS;
}

aclError aclmdlRICaptureTaskUpdateEnd(aclrtStream stream)
{
    pthread_mutex_lock(&rt_lock);
    fake_stream *s = NULL;
    int rc = rt_need_stream(stream, "aclmdlRICaptureTaskUpdateEnd", &s);
    task_update *u = rc == ACL_SUCCESS ? s->update : NULL;
    if (rc == ACL_SUCCESS && !u)
        rc = fakecann_fail(ACL_ERROR_STREAM_TASK_GROUP_STATUS, "aclmdlRICaptureTaskUpdateEnd: no update is open on this "
                           "stream");
    if (rc == ACL_SUCCESS) {
        s->update = NULL;
        u->group->updating = false;
        if (u->count != u->group->count) {
            rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclmdlRICaptureTaskUpdateEnd: %zu tasks for a task group of "
                               "%zu: they must match in number and type", u->count, u->group->count);
            for (size_t i = 0; i < u->count; i++)
                rt_free_task(u->tasks[i]);
            free(u->tasks);
            free(u);
        } else {
            task *t = rt_new_task(TASK_CONTROL, "aclmdlRICaptureTaskUpdateEnd");
            t->run = apply_update;
            t->payload = u;
            rc = rt_submit(s, t, "aclmdlRICaptureTaskUpdateEnd");
        }
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}
