"""cffi build script for the C loop that enqueues a launch table (compiled at install).

``aclpipe_enqueue(calls, launches, count, &failed)`` walks a prepared slot's rows (waits,
records, aclnn phase-two launches, copies) and calls each through a function pointer taken
from the loaded CANN libraries, stopping at the first call that does not return 0; ``failed``
is then the row's index, so the caller can name the node and read ``aclGetRecentErrMsg``
right away on the same thread.  It includes no CANN header: the prototypes are the four
documented in ``acl_rt.h`` and the aclnn op headers, written out below.
"""

from cffi import FFI

# The row and call-table types, shared by the declarations cffi reads and the C it compiles.
TYPES = """
typedef struct {
    int32_t kind;            /* 0 wait, 1 record, 2 kernel, 3 copy (LaunchKind) */
    int32_t copy_kind;       /* aclrtMemcpyKind */
    uintptr_t function;      /* kernel: aclnnStatus aclnnXxx(void *, uint64_t, aclOpExecutor *, aclrtStream) */
    void *stream;
    void *event;
    void *executor;
    void *workspace;
    uint64_t workspace_size;
    void *dst;
    void *src;
    size_t nbytes;
} aclpipe_launch;

typedef struct {
    uintptr_t stream_wait_event;  /* aclError aclrtStreamWaitEvent(aclrtStream, aclrtEvent) */
    uintptr_t record_event;       /* aclError aclrtRecordEvent(aclrtEvent, aclrtStream) */
    uintptr_t memcpy_async;       /* aclError aclrtMemcpyAsync(dst, destMax, src, count, kind, aclrtStream) */
} aclpipe_runtime_calls;
"""

CDEF = TYPES + """
int aclpipe_enqueue(const aclpipe_runtime_calls *calls, const aclpipe_launch *launches, size_t count,
                    size_t *failed);
"""

SOURCE = """
#include <stddef.h>
#include <stdint.h>
""" + TYPES + r"""
typedef int (*wait_fn)(void *stream, void *event);
typedef int (*record_fn)(void *event, void *stream);
typedef int (*copy_fn)(void *dst, size_t dest_max, const void *src, size_t count, int kind, void *stream);
typedef int32_t (*kernel_fn)(void *workspace, uint64_t workspace_size, void *executor, void *stream);

int aclpipe_enqueue(const aclpipe_runtime_calls *calls, const aclpipe_launch *launches, size_t count,
                    size_t *failed)
{
    wait_fn wait = (wait_fn)calls->stream_wait_event;
    record_fn record = (record_fn)calls->record_event;
    copy_fn copy = (copy_fn)calls->memcpy_async;
    for (size_t i = 0; i < count; i++) {
        const aclpipe_launch *l = &launches[i];
        int code;
        switch (l->kind) {
        case 0:
            code = wait(l->stream, l->event);
            break;
        case 1:
            code = record(l->event, l->stream);
            break;
        case 2:
            code = (int)((kernel_fn)l->function)(l->workspace, l->workspace_size, l->executor, l->stream);
            break;
        default:
            code = l->nbytes ? copy(l->dst, l->nbytes, l->src, l->nbytes, l->copy_kind, l->stream) : 0;
            break;
        }
        if (code != 0) {
            *failed = i;
            return code;
        }
    }
    return 0;
}
"""

ffibuilder = FFI()
ffibuilder.cdef(CDEF)
ffibuilder.set_source("aclpipe.backends.ascend._launch", SOURCE)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
