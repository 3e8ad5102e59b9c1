/* acl_internal.h: state shared by the two source files of the fake libascendcl.so.
 *
 * One process-wide lock guards everything and one condition variable announces every change
 * (a task finished, an event completed, a report arrived): simple, and fast enough for tests.
 * An idle stream thread and an idle host-function thread each sleep on a condition of their
 * own, signalled only when work arrives for them, so that a submission does not wake every
 * thread of the process (which made each call cost tens of microseconds on a loaded host).
 */
#ifndef FAKE_ACL_INTERNAL_H
#define FAKE_ACL_INTERNAL_H

#include <pthread.h>

#include "fake_cann.h"

#define FAKE_MAX_DEVICES 64

struct host_call;

typedef struct fake_context {
    int device;
    bool alive;
    bool is_default;
    bool stop_on_failure; /* a stream of it was set to ACL_STOP_ON_FAILURE: all its streams stop */
    /* Its aclrtLaunchHostFunc thread, made at the first host function of any of its streams and
     * shared by all of them (src/runtime/api/impl/api_impl.cc, ApiImpl::LaunchHostFunc:
     * Context::CreateContextCallBackThread), and the calls queued for it, oldest first. */
    pthread_cond_t host_work;
    struct host_call *host_calls;
    bool host_running, host_stopping;
    pthread_t host_thread;
} fake_context;

/* What differs between the products the fake can pretend to be (FAKE_CANN_PRODUCT: "a2", the
 * default, "310p" or "200i-a2"), each from the hicann/runtime docs/zh/api_ref pages:
 * 07_event_management.md (events per device), 06_stream_management.md (streams per device,
 * aclrtStreamAbort), 15_model_running_instance__management.md (aclmdlRICapture*). */
typedef struct fake_product {
    const char *name;
    const char *soc; /* what aclrtGetSocName reports */
    int max_events;
    int max_streams;
    bool stream_abort;
    bool capture;
    /* 12_execution_control.md (aclrtSetOpExecuteTimeOut constraints): the longest AI Core op
     * timeout, interval * 254, in seconds; also the default on these products. */
    double op_timeout_max_s;
    /* 07_event_management.md (aclrtSetOpWaitTimeout): every product but the inference cards. */
    bool op_wait_timeout;
} fake_product;

extern fake_product rt_product;
/* aclrtSetOpWaitTimeout's seconds, process-wide (0: no timeout); a wait carries the figure in
 * force when it is enqueued. */
extern uint32_t rt_op_wait_timeout_s;

extern pthread_mutex_t rt_lock;
extern pthread_cond_t rt_changed;
extern bool rt_initialized;
extern __thread fake_context *rt_current;
/* True on a thread while it runs a host function or a report callback (12_execution_control.md). */
extern __thread bool rt_in_callback;

/* With rt_lock held: 0 when ACL is initialized and this thread has a live context. */
int rt_need_context(void);
/* With rt_lock held: how many user streams / events live on device. */
int rt_live_streams(int device, const fake_context *context);
int rt_live_events(int device);
/* With rt_lock held: the default streams on device, one per live context (the primary one of
 * aclrtSetDevice included: src/runtime/core/src/context/context.cc, Context::Setup). */
int rt_default_streams(int device);
/* With rt_lock held: 0, or the refusal of api when called from inside a host function or callback
 * (12_execution_control.md: no allocation, free, synchronize or launch there). */
int rt_refuse_in_callback(const char *api);
/* Append one line to the call trace (with rt_lock held). */
void rt_trace(const char *format, ...) __attribute__((format(printf, 1, 2)));
/* Absolute deadline timeout_ms from now; timeout_ms < 0 means none (returns 0). */
int rt_deadline(int32_t timeout_ms, struct timespec *deadline);
double rt_now(void);
/* With rt_lock held: 1 when [address, address + nbytes) lies in one live allocation of the
 * wanted kind (1: device memory, -1: pinned host memory, 0: either); else 0 and why. */
int rt_memory_check(const void *address, uint64_t nbytes, int want, char *why, size_t why_len);
/* ---- streams, events and tasks (acl_stream.c), shared with graph capture (acl_capture.c) ---- */
enum { TASK_KERNEL, TASK_COPY, TASK_MEMSET, TASK_RECORD, TASK_WAIT, TASK_HOST_FUNC, TASK_CALLBACK, TASK_CONTROL };
enum { EVENT_SYNC = 0x1, EVENT_TIME_LINE = 0x8, EVENT_KNOWN_FLAGS = 0x7F };

typedef struct fake_event {
    int device;
    uint32_t flags;
    bool reusable;     /* aclrtCreateEventExWithFlag: record again without a reset */
    bool armed;        /* recorded since creation or the last aclrtResetEvent */
    bool holds_slot;   /* counts against the product's events per device */
    int64_t recorded;  /* record generations handed out */
    ptr_set pending;   /* generations recorded but not yet reached by their stream */
    int pending_waits;
    double stamp;
    struct capture *capture; /* the capture its latest record went into */
    bool destroyed;    /* aclrtDestroyEvent came before its records completed: freed when they have */
    bool in_model;     /* its latest record went into a model whose capture ended (IsEventInModel) */
    int64_t error_generation; /* a model's end event: the replay whose part failed, and how */
    int error_code;
    char error_message[256];
} fake_event;

typedef struct task {
    struct task *next;
    int kind;
    int64_t index; /* position in its stream's queue: an abort or a stop drops up to one */
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
    uint32_t timeout_s; /* a wait: aclrtSetOpWaitTimeout's seconds when it was enqueued (0: none) */
    bool adopt;        /* a model's join: a failure of the replay becomes this stream's */
    fake_event *report; /* a model part's end: its failure goes to this event's generation */
    char what[40];
} task;

typedef struct host_call {
    struct host_call *next;
    aclrtHostFunc function;
    void *argument;
    bool done;
} host_call;

typedef struct fake_stream {
    int device;
    fake_context *context;
    pthread_t thread;
    task *head, *tail;
    int64_t enqueued, completed;
    int64_t drop_upto; /* tasks with index <= this are dropped, not run (abort, stop) */
    int error;
    char error_message[512];
    int mode;          /* ACL_CONTINUE_ON_FAILURE (0) or ACL_STOP_ON_FAILURE (1) */
    bool mode_set;     /* aclrtSetStreamFailureMode may be called once per stream */
    int stopped;       /* the failure code that stopped it (STOP mode) */
    bool stopping;
    int mechanism;
    bool subscribed;
    uint64_t subscriber;
    pthread_cond_t work;       /* the stream thread, idle: a task arrived or the stream is stopping */
    struct capture *capture;   /* the capture it is part of */
    struct fake_model *owner;  /* a model's own stream */
    struct task_update *update;
    int part_error;            /* a model part's first failure, reported at its end */
    char part_message[256];
} fake_stream;

/* With rt_lock held. */
int rt_need_stream(aclrtStream handle, const char *api, fake_stream **out);
int rt_need_event(aclrtEvent handle, const char *api, fake_event **out);
task *rt_new_task(int kind, const char *what);
/* Queue t on s, or store it in s's capture or task update; frees t and fails when s refuses it. */
int rt_submit(fake_stream *s, task *t, const char *api);
/* Queue t on s unconditionally (a model's own streams during a replay). */
void rt_push(fake_stream *s, task *t);
fake_stream *rt_new_stream(int device, fake_context *context);
void rt_delete_stream(fake_stream *s); /* stops its thread; rt_lock NOT held */
/* Stop and join a dead context's host-function thread (rt_lock NOT held). */
void rt_stop_host_thread(fake_context *context);
fake_event *rt_new_event(int device, uint32_t flags);
bool rt_reached(const fake_event *e, int64_t generation);
void rt_free_task(task *t);

/* ---- graph capture (acl_capture.c), with rt_lock held ---------------------------------- */
int rt_capture_store(fake_stream *s, task *t, const char *api);
int rt_capture_record(fake_stream *s, fake_event *e);
/* 1 when the wait was taken by a capture, 0 when it is an ordinary wait, or an error code. */
int rt_capture_wait(fake_stream *s, fake_event *e);
/* A forbidden call inside a capture: invalidate it and return the error. */
int rt_capture_forbid(struct capture *c, int code, const char *what);
int rt_capture_forbid_device_sync(int device);
int rt_capture_blocks(const char *api);
int rt_update_store(fake_stream *s, task *t, const char *api);
/* What acl_cond.c (conditional tasks in captured models) needs of acl_capture.c; rt_lock held
 * except by rt_capture_begin_into (aclmdlRICaptureBegin into a given model). */
int rt_capture_begin_into(aclrtStream stream, int mode, void *into);
extern void (*rt_model_destroy_hook)(void *model); /* called as a model is freed */
void *rt_model_new(int device);
bool rt_model_capturing(const void *model);
void *rt_stream_capture_model(const fake_stream *s);
void rt_model_store(void *model, fake_stream *s, task *t, bool front);
bool rt_model_ready(const void *model);
size_t rt_model_task_count(const void *model);
task *rt_model_task(const void *model, size_t index);
void rt_model_discard(void *model);
/* With rt_lock held: the device whose memory holds address (-1: pinned host memory, -2: none). */
int rt_memory_device(const void *address);
int rt_device_count(void);
/* With rt_lock held (acl_peer.c): whether device enabled peer access to peer; forget a reset
 * device's grants. */
int rt_peer_enabled(int device, int peer);
void rt_peer_forget(int device);
/* With rt_lock held: 0, or the error for a copy on a stream of device that reaches another
 * device's memory without peer access (11-03_memory_copy_and_set.md). */
int rt_peer_check(int device, const void *dst, const void *src, int kind);

#endif
