/* acl_cond.c: fake libascendcl.so, part 6: conditional tasks in captured models (a trial feature).
 *
 * From hicann/runtime include/external/acl/acl_rt.h, docs/zh/api_ref/15_model_running_instance__management.md
 * and the runtime's source (src/acl/aclrt_impl/model_ri.cpp, src/runtime/feature/aclgraph/v100/
 * api_impl_aclgraph.cc, src/runtime/core/src/task/task_info/cond_op/aclgraph_cond_task.cc,
 * src/runtime/core/src/task/stars_cond_isa_helper.cc), written from those and not from the simulator:
 * - aclmdlRICondHandleCreate(model, default, flag): the model must be in an active capture
 *   (ACL_ERROR_RT_PARAM_INVALID); flag 0 or ACL_MODEL_RI_COND_HANDLE_ASSIGN_DEFAULT (1), which sets
 *   the condition to default at the start of every execution of the model (here: a first task of
 *   the model, on the stream that takes the conditional task, stored when that task is added).  The handle owns 8
 *   bytes of device memory (a uint64_t), freed with the model.  Atlas A2 and A3 only
 *   (ACL_ERROR_RT_FEATURE_NOT_SUPPORT elsewhere: api_impl_stub.cc, CheckCaptureModelSupportCondOp).
 * - aclmdlRICondHandleGetCondPtr(handle, &ptr): the condition's device address.
 * - aclmdlRIAddCondTask(params, stream, flags): flags 0; the stream capturing the handle's model
 *   (ACL_ERROR_RT_STREAM_NOT_CAPTURED when not capturing); one task per handle; WHILE takes 1
 *   sub-model, IF 1 or 2, SWITCH more than 0 (CheckCondTaskParamsSize; SWITCH is not faked:
 *   ACL_ERROR_RT_FEATURE_NOT_SUPPORT).  params.modelRIArray receives the new, empty sub-models.
 * - aclmdlRICaptureToModelRIBegin(stream, subModel, mode) captures into a sub-model until
 *   aclmdlRICaptureEnd(stream); a sub-model is never destroyed on its own.
 * - When a replay reaches the task, the condition is loaded as 64 bits: WHILE runs its sub-model
 *   while it is not 0, tested before every run; IF runs sub-model 0 when it is not 0, else 1.
 *   Here the sub-model's tasks run on the stream of the task, one after another; a failure ends
 *   the task with that failure (the replaying stream reports it).
 */
#include <stdio.h>
#include <string.h>

#include "acl_internal.h"

typedef void *aclmdlRI;
typedef void *aclmdlRICondHandle;

aclError aclrtMalloc(void **devPtr, size_t size, int policy); /* acl_core.c */
aclError aclrtFree(void *devPtr);

enum { COND_IF = 0, COND_WHILE = 1, COND_SWITCH = 2 };
enum { ASSIGN_DEFAULT = 1 };

typedef struct {
    aclmdlRICondHandle handle;
    int type;
    uint32_t size;
    aclmdlRI *modelRIArray;
} aclmdlRICondTaskParams;

typedef struct cond_handle {
    void *model;     /* the parent */
    uint64_t *value; /* the condition, device memory */
    uint64_t initial;
    bool assign;     /* ASSIGN_DEFAULT: set at the start of every execution of the model */
    int type;        /* -1 until its task is added */
    uint32_t size;
    void *subs[2];
} cond_handle;

static ptr_set handles;

static bool product_has_it(void)
{
    return strncmp(rt_product.soc, "Ascend910B", 10) == 0 || strncmp(rt_product.soc, "Ascend910_93", 12) == 0;
}

static int unsupported(const char *api)
{
    return fakecann_fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "%s: %s has no conditional tasks in captured models "
                         "(Atlas A2 and A3 only)", api, rt_product.name);
}

/* Freeing a model (rt_lock held): a parent's conditions and sub-models go with it. */
static void model_freed(void *model)
{
    for (size_t i = 0; i < handles.len;) {
        cond_handle *h = (cond_handle *)handles.items[i];
        if (h->model != model) {
            for (uint32_t k = 0; k < h->size; k++)
                if (h->subs[k] == model)
                    h->subs[k] = NULL; /* a sub-model whose capture failed */
            i++;
            continue;
        }
        ptr_set_remove(&handles, h);
        for (uint32_t k = 0; k < h->size; k++)
            if (h->subs[k])
                rt_model_discard(h->subs[k]);
        pthread_mutex_unlock(&rt_lock);
        aclrtFree(h->value);
        pthread_mutex_lock(&rt_lock);
        free(h);
    }
}

__attribute__((constructor)) static void install_hook(void) { rt_model_destroy_hook = model_freed; }

aclError aclmdlRICondHandleCreate(aclmdlRI modelRI, uint32_t defaultLaunchValue, int flag, aclmdlRICondHandle *handle)
{
    if (!modelRI || !handle)
        return fakecann_fail(ACL_ERROR_INVALID_PARAM, "aclmdlRICondHandleCreate: modelRI and handle must not be NULL");
    if (!product_has_it())
        return unsupported("aclmdlRICondHandleCreate");
    if (flag != 0 && flag != ASSIGN_DEFAULT)
        return fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclmdlRICondHandleCreate: flag %d is not 0 or "
                             "ACL_MODEL_RI_COND_HANDLE_ASSIGN_DEFAULT", flag);
    void *memory = NULL;
    int rc = aclrtMalloc(&memory, sizeof(uint64_t), 0);
    if (rc != ACL_SUCCESS)
        return rc;
    pthread_mutex_lock(&rt_lock);
    rc = rt_need_context();
    if (rc == ACL_SUCCESS && !rt_model_capturing(modelRI))
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclmdlRICondHandleCreate: the model is not in the capture "
                           "stage");
    cond_handle *h = NULL;
    if (rc == ACL_SUCCESS) {
        h = (cond_handle *)calloc(1, sizeof *h);
        h->model = modelRI;
        h->value = (uint64_t *)memory;
        h->initial = defaultLaunchValue;
        h->type = -1;
        h->assign = flag == ASSIGN_DEFAULT;
        ptr_set_add(&handles, h);
        *handle = h;
    }
    pthread_mutex_unlock(&rt_lock);
    if (rc != ACL_SUCCESS)
        aclrtFree(memory);
    return rc;
}

aclError aclmdlRICondHandleGetCondPtr(aclmdlRICondHandle handle, uint64_t **ptr)
{
    if (!handle || !ptr)
        return fakecann_fail(ACL_ERROR_INVALID_PARAM, "aclmdlRICondHandleGetCondPtr: handle and ptr must not be NULL");
    if (!product_has_it())
        return unsupported("aclmdlRICondHandleGetCondPtr");
    pthread_mutex_lock(&rt_lock);
    int rc = ptr_set_has(&handles, handle) ? ACL_SUCCESS
        : fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclmdlRICondHandleGetCondPtr: %p is not a condition handle",
                        handle);
    if (rc == ACL_SUCCESS)
        *ptr = ((cond_handle *)handle)->value;
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

/* Run a sub-model's tasks here, in capture order (records and waits only order its own streams). */
static int run_sub(const void *model, char *why, size_t why_len)
{
    pthread_mutex_lock(&rt_lock);
    size_t count = model && rt_model_ready(model) ? rt_model_task_count(model) : 0;
    pthread_mutex_unlock(&rt_lock);
    for (size_t i = 0; i < count; i++) {
        task *t = rt_model_task(model, i);
        int rc = ACL_SUCCESS;
        if (t->kind == TASK_KERNEL || t->kind == TASK_CONTROL) {
            rc = t->run(t->payload, why, why_len);
        } else if (t->kind == TASK_COPY) {
            if (!fakecann_memory_ok(t->src, t->count, 0, why, why_len) ||
                !fakecann_memory_ok(t->dst, t->count, 0, why, why_len))
                rc = ACL_ERROR_RT_SYS_DMA;
            else
                memmove(t->dst, t->src, t->count);
        } else if (t->kind == TASK_MEMSET) {
            if (!fakecann_memory_ok(t->dst, t->count, 1, why, why_len))
                rc = ACL_ERROR_RT_SYS_DMA;
            else
                memset(t->dst, t->value, t->count);
        }
        if (rc != ACL_SUCCESS) {
            size_t used = strlen(why);
            snprintf(why + used, why_len - used, " (in %s, inside a conditional task's sub-model)", t->what);
            return rc;
        }
    }
    return ACL_SUCCESS;
}

static int assign_default(void *payload, char *why, size_t why_len)
{
    (void)why;
    (void)why_len;
    cond_handle *h = (cond_handle *)payload;
    *h->value = h->initial;
    return ACL_SUCCESS;
}

static int run_cond(void *payload, char *why, size_t why_len)
{
    cond_handle *h = (cond_handle *)payload;
    if (h->type == COND_IF)
        return *h->value != 0 ? run_sub(h->subs[0], why, why_len) : h->size > 1 ? run_sub(h->subs[1], why, why_len)
                                                                              : ACL_SUCCESS;
    while (*h->value != 0) {
        int rc = run_sub(h->subs[0], why, why_len);
        if (rc != ACL_SUCCESS)
            return rc;
    }
    return ACL_SUCCESS;
}

aclError aclmdlRIAddCondTask(aclmdlRICondTaskParams params, aclrtStream stream, uint32_t flags)
{
    if (!stream)
        return fakecann_fail(ACL_ERROR_INVALID_PARAM, "aclmdlRIAddCondTask: the stream must not be NULL");
    if (!product_has_it())
        return unsupported("aclmdlRIAddCondTask");
    pthread_mutex_lock(&rt_lock);
    fake_stream *s = NULL;
    cond_handle *h = (cond_handle *)params.handle;
    int rc = rt_need_stream(stream, "aclmdlRIAddCondTask", &s);
    if (rc == ACL_SUCCESS && flags != 0)
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclmdlRIAddCondTask: flags is reserved and must be 0");
    else if (rc == ACL_SUCCESS && (!ptr_set_has(&handles, h) || !params.modelRIArray))
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclmdlRIAddCondTask: not a condition handle, or no "
                           "modelRIArray");
    else if (rc == ACL_SUCCESS && params.type == COND_SWITCH)
        rc = fakecann_fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "aclmdlRIAddCondTask: the fake has no SWITCH");
    else if (rc == ACL_SUCCESS && params.type != COND_IF && params.type != COND_WHILE)
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclmdlRIAddCondTask: type %d is not IF, WHILE or SWITCH",
                           params.type);
    else if (rc == ACL_SUCCESS && (params.type == COND_WHILE ? params.size != 1 : params.size < 1 || params.size > 2))
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclmdlRIAddCondTask: %u sub-models (WHILE takes 1, IF 1 or 2)",
                           params.size);
    else if (rc == ACL_SUCCESS && !rt_stream_capture_model(s))
        rc = fakecann_fail(ACL_ERROR_RT_STREAM_NOT_CAPTURED, "aclmdlRIAddCondTask: the stream must be capturing");
    else if (rc == ACL_SUCCESS && rt_stream_capture_model(s) != h->model)
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclmdlRIAddCondTask: the stream captures another model "
                           "than the handle's");
    else if (rc == ACL_SUCCESS && h->type >= 0)
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclmdlRIAddCondTask: the handle already has a condition "
                           "task; create a new handle");
    if (rc == ACL_SUCCESS) {
        h->type = params.type;
        h->size = params.size;
        for (uint32_t k = 0; k < params.size; k++)
            params.modelRIArray[k] = h->subs[k] = rt_model_new(s->device);
        task *t = rt_new_task(TASK_CONTROL, params.type == COND_WHILE ? "while task" : "if task");
        t->run = run_cond;
        t->payload = h;
        rt_model_store(h->model, s, t, false);
        if (h->assign) { /* the model's first task (on this stream: the condition is the task's) */
            task *assign = rt_new_task(TASK_CONTROL, "assign default condition");
            assign->run = assign_default;
            assign->payload = h;
            rt_model_store(h->model, s, assign, true);
        }
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

aclError aclmdlRICaptureToModelRIBegin(aclrtStream stream, aclmdlRI modelRI, int mode)
{
    if (!stream || !modelRI)
        return fakecann_fail(ACL_ERROR_INVALID_PARAM, "aclmdlRICaptureToModelRIBegin: stream and modelRI must not be "
                             "NULL");
    pthread_mutex_lock(&rt_lock);
    bool known = false, fresh = false;
    for (size_t i = 0; i < handles.len && !known; i++) {
        cond_handle *h = (cond_handle *)handles.items[i];
        for (uint32_t k = 0; k < h->size; k++)
            if (h->subs[k] == modelRI) {
                known = true;
                fresh = !rt_model_ready(modelRI) && !rt_model_capturing(modelRI);
            }
    }
    pthread_mutex_unlock(&rt_lock);
    if (!known || !fresh)
        return fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclmdlRICaptureToModelRIBegin: %p is not a conditional "
                             "task's sub-model not yet captured", modelRI);
    return rt_capture_begin_into(stream, mode, modelRI);
}
