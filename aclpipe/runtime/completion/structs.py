"""The C structs the completion host function takes, declared once for both its sides.

Plain strings and no imports of aclpipe: the build script (:mod:`._hostfunc_build`) loads
this file by path at install time, when aclpipe itself cannot be imported yet, and the
Python side (:mod:`.host_function`) declares the same text to cffi for its fallback.
"""

#: ``aclpipe_copy`` (one host-to-host copy) and ``aclpipe_advance_args`` (what a stream's
#: completion point hands the host function), as C declarations.
STRUCTS = """
typedef struct {
    void *dst;
    const void *src;
    size_t nbytes;
} aclpipe_copy;

typedef struct {
    int64_t *counter;  /* [0]: passed; [1]: returned (nothing touched after); then stamps */
    int64_t value;
    int wake_fd;
    int ncopies;  /* host-to-host copies made before the counter moves (0: none) */
    aclpipe_copy *copies;
} aclpipe_advance_args;
"""

#: The functions the compiled helper exports.
FUNCTIONS = """
void aclpipe_advance(void *args);
int aclpipe_advance_version(void);
"""
