/* acl_internal.h: state shared by the two source files of the fake libascendcl.so.
 *
 * One process-wide lock guards everything and one condition variable announces every change
 * (a task finished, an event completed, a report arrived): simple, and fast enough for tests.
 */
#ifndef FAKE_ACL_INTERNAL_H
#define FAKE_ACL_INTERNAL_H

#include <pthread.h>

#include "fake_cann.h"

#define FAKE_MAX_DEVICES 64

typedef struct fake_context {
    int device;
    bool alive;
    bool is_default;
} fake_context;

extern pthread_mutex_t rt_lock;
extern pthread_cond_t rt_changed;
extern bool rt_initialized;
extern __thread fake_context *rt_current;

/* With rt_lock held: 0 when ACL is initialized and this thread has a live context. */
int rt_need_context(void);
/* With rt_lock held: how many user streams / events live on device. */
int rt_live_streams(int device, const fake_context *context);
int rt_live_events(int device);
/* Append one line to the call trace (with rt_lock held). */
void rt_trace(const char *format, ...) __attribute__((format(printf, 1, 2)));
/* Absolute deadline timeout_ms from now; timeout_ms < 0 means none (returns 0). */
int rt_deadline(int32_t timeout_ms, struct timespec *deadline);
double rt_now(void);
/* With rt_lock held: 1 when [address, address + nbytes) lies in one live allocation of the
 * wanted kind (1: device memory, -1: pinned host memory, 0: either); else 0 and why. */
int rt_memory_check(const void *address, uint64_t nbytes, int want, char *why, size_t why_len);
/* Stop the aclrtLaunchHostFunc thread (aclFinalize), with rt_lock held. */
void rt_stop_host_func_thread(void);
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
