/* acl_mempool.c: the stream-ordered allocator of the fake libascendcl.so (acl/acl_rt_memory_soma.h).
 *
 * The rules are the runtime's, read from hicann/runtime (the simulator's aclpipe/backends/sim/
 * mempool.py models the same ones and cites them in full):
 * - Atlas A2 only (11-10_ordered_stream_memory_allocation.md); elsewhere every call is 207000
 *   (src/runtime/api/impl/api_impl_stub.cc).
 * - aclrtMemPoolCreate: PINNED device memory of one device with reserved[] zeroed, else 100000
 *   (aclrtMemPoolCreateImpl, src/acl/aclrt_impl/memory.cpp); maxSize rounded up to 2 MB, 0 for the
 *   device's memory rounded down, more than the device has is 107000 (SomaApi::AlignAndValidatePoolSize).
 * - aclrtMemPoolMallocAsync: ptr, pool and stream must not be NULL (100000); 0 bytes succeeds and
 *   allocates nothing; the block is picked now, counted in 2 MB granules, and a task maps it in
 *   the stream's order; no room is 507000 (RT_ERROR_MEM_POOL_ALLOC has no ACL code of its own).
 * - aclrtMemPoolFreeAsync: the block goes back to the pool now (USED drops) and a task unmaps it
 *   in the stream's order; it stays cached (SegmentManager::TryToReuse reuses nothing) until
 *   aclrtMemPoolTrimTo; an address the pool does not hold is 107000.
 * - aclrtMemPoolTrimTo(keep): keep above the pool's size or below the bytes in use is 507000
 *   (SegmentManager::TrimTo); cached blocks go smallest first.  The fake releases only blocks
 *   whose unmap task already ran (the device still needs the others; the simulator's sanitizer
 *   refuses a trim the host did not synchronize for).
 * Modelling limits: a block is backed by aclrtMalloc of the bytes asked for (so the fake's memory
 * checks see it); the runtime frees a plain aclrtMalloc address passed to FreeAsync with a host
 * function, the fake refuses it (107000); a capturing stream refuses the calls (207000).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acl_internal.h"

#define POOL_BLOCK (2ULL << 20)     /* DEVICE_POOL_MIN_BLOCK_SIZE, DEVICE_POOL_ALIGN_SIZE */
#define RT_INTERNAL_ERROR 507000    /* ACL_ERROR_RT_INTERNAL_ERROR */

/* acl_core.c's calls this file makes (fake_cann.h declares only the fake's shared internals). */
aclError aclrtMalloc(void **devPtr, size_t size, int policy);
aclError aclrtFree(void *devPtr);
aclError aclrtGetMemInfo(int attr, size_t *free, size_t *total);

typedef void *aclrtMemPool;
typedef struct {
    uint32_t id;
    int type; /* aclrtMemLocationType: ACL_MEM_LOCATION_TYPE_DEVICE = 1 */
} fake_mem_location;
typedef struct {
    int allocType;  /* ACL_MEM_ALLOCATION_TYPE_PINNED = 0 */
    int handleType; /* ACL_MEM_HANDLE_TYPE_NONE = 0 */
    fake_mem_location location;
    size_t maxSize;
    unsigned char reserved[32];
} aclrtMemPoolProps;
enum { ATTR_REUSE_LAST = 0x3, ATTR_RELEASE_THRESHOLD = 0x4, ATTR_RESERVED_CURRENT = 0x5, ATTR_RESERVED_HIGH = 0x6,
       ATTR_USED_CURRENT = 0x7, ATTR_USED_HIGH = 0x8 };

struct mem_pool;
typedef struct pool_block {
    struct pool_block *next;
    struct mem_pool *pool; /* NULL once its pool was destroyed before the block's unmap ran */
    void *base;            /* aclrtMalloc of the bytes asked for */
    size_t bytes;
    uint64_t size;         /* what the pool counts: 2 MB granules */
    bool cached;           /* aclrtMemPoolFreeAsync was called */
    bool unmapped;         /* its unmap task ran */
} pool_block;

typedef struct mem_pool {
    int device;
    uint64_t max_size, reserved, used, reserved_high, used_high, threshold;
    uint32_t reuse[4];
    pool_block *blocks;
} mem_pool;

static ptr_set pools;

static uint64_t granules(uint64_t nbytes) { return (nbytes + POOL_BLOCK - 1) / POOL_BLOCK * POOL_BLOCK; }

/* With rt_lock held: 0, or the refusal of a product without the allocator. */
static int need_product(const char *api)
{
    if (strncmp(rt_product.soc, "Ascend910B", 10) != 0)
        return fakecann_fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "%s: %s has no stream-ordered allocator "
                             "(11-10_ordered_stream_memory_allocation.md: Atlas A2 only)", api, rt_product.name);
    return ACL_SUCCESS;
}

/* With rt_lock held: 0 and the pool, or the runtime's refusal. */
static int need_pool(aclrtMemPool handle, const char *api, mem_pool **out)
{
    int rc = need_product(api);
    if (rc == ACL_SUCCESS)
        rc = rt_need_context();
    if (rc == ACL_SUCCESS && !handle)
        rc = fakecann_fail(ACL_ERROR_INVALID_PARAM, "%s: memPool is NULL", api);
    if (rc == ACL_SUCCESS && !ptr_set_has(&pools, handle))
        rc = fakecann_fail(RT_INTERNAL_ERROR, "%s: %p is not a memory pool (never created, or destroyed)", api, handle);
    *out = rc == ACL_SUCCESS ? (mem_pool *)handle : NULL;
    return rc;
}

/* With rt_lock held: 0 and the stream, which must not be capturing. */
static int need_stream(aclrtStream handle, const char *api, fake_stream **out)
{
    int rc = rt_need_stream(handle, api, out);
    if (rc == ACL_SUCCESS && (*out)->capture)
        rc = fakecann_fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "%s on a capturing stream: the fake does not capture the "
                           "stream-ordered allocator", api);
    return rc;
}

static void unlink_block(mem_pool *pool, pool_block *block)
{
    for (pool_block **at = &pool->blocks; *at; at = &(*at)->next)
        if (*at == block) {
            *at = block->next;
            return;
        }
}

aclError aclrtMemPoolCreate(aclrtMemPool *memPool, const aclrtMemPoolProps *poolProps)
{
    static const unsigned char zeros[32];
    size_t free_bytes = 0, total = 0;
    pthread_mutex_lock(&rt_lock);
    int rc = rt_refuse_in_callback("aclrtMemPoolCreate");
    if (rc == ACL_SUCCESS)
        rc = need_product("aclrtMemPoolCreate");
    if (rc == ACL_SUCCESS)
        rc = rt_need_context();
    if (rc == ACL_SUCCESS && (!memPool || !poolProps))
        rc = fakecann_fail(ACL_ERROR_INVALID_PARAM, "aclrtMemPoolCreate: memPool or poolProps is NULL");
    if (rc == ACL_SUCCESS && (poolProps->allocType != 0 || poolProps->location.type != 1 ||
                              memcmp(poolProps->reserved, zeros, sizeof zeros) != 0))
        rc = fakecann_fail(ACL_ERROR_INVALID_PARAM, "aclrtMemPoolCreate: props must be MEM_ALLOCATION_TYPE_PINNED(0), "
                           "MEM_LOCATION_TYPE_DEVICE(1) with reserved zeroed");
    int device = rc == ACL_SUCCESS ? rt_current->device : -1;
    pthread_mutex_unlock(&rt_lock);
    if (rc == ACL_SUCCESS)
        rc = aclrtGetMemInfo(1, &free_bytes, &total); /* ACL_HBM_MEM */
    if (rc != ACL_SUCCESS)
        return rc;
    uint64_t size = poolProps->maxSize ? granules(poolProps->maxSize) : total / POOL_BLOCK * POOL_BLOCK;
    if (size > total)
        return fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtMemPoolCreate: maxSize %zu (%llu in 2 MB granules) "
                             "exceeds the device's %zu bytes", poolProps->maxSize, (unsigned long long)size, total);
    mem_pool *pool = (mem_pool *)calloc(1, sizeof *pool);
    pthread_mutex_lock(&rt_lock);
    if (!pool || !ptr_set_add(&pools, pool)) {
        free(pool);
        rc = fakecann_fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "aclrtMemPoolCreate: out of host memory");
    } else {
        pool->device = device;
        pool->max_size = size;
        *memPool = pool;
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

aclError aclrtMemPoolDestroy(const aclrtMemPool memPool)
{
    mem_pool *pool = NULL;
    pthread_mutex_lock(&rt_lock);
    int rc = rt_refuse_in_callback("aclrtMemPoolDestroy");
    if (rc == ACL_SUCCESS)
        rc = need_pool(memPool, "aclrtMemPoolDestroy", &pool);
    pool_block *done = NULL;
    if (rc == ACL_SUCCESS) {
        ptr_set_remove(&pools, pool);
        for (pool_block *block = pool->blocks, *next; block; block = next) {
            next = block->next;
            if (block->cached && block->unmapped) {
                block->next = done;
                done = block;
            } else {
                block->pool = NULL; /* a task may still reach it: it stays (a leak only after misuse) */
            }
        }
        free(pool);
    }
    pthread_mutex_unlock(&rt_lock);
    for (pool_block *block = done, *next; block; block = next) {
        next = block->next;
        aclrtFree(block->base);
        free(block);
    }
    return rc;
}

aclError aclrtMemPoolSetAttr(aclrtMemPool memPool, int attr, void *value)
{
    mem_pool *pool = NULL;
    pthread_mutex_lock(&rt_lock);
    int rc = need_pool(memPool, "aclrtMemPoolSetAttr", &pool);
    if (rc == ACL_SUCCESS && !value)
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtMemPoolSetAttr: value is NULL");
    if (rc == ACL_SUCCESS) {
        if (attr >= 1 && attr <= ATTR_REUSE_LAST)
            pool->reuse[attr] = *(const uint32_t *)value != 0;
        else if (attr == ATTR_RELEASE_THRESHOLD && *(const uint64_t *)value <= pool->max_size)
            pool->threshold = *(const uint64_t *)value;
        else if ((attr == ATTR_RESERVED_HIGH || attr == ATTR_USED_HIGH) && *(const uint64_t *)value == 0)
            *(attr == ATTR_RESERVED_HIGH ? &pool->reserved_high : &pool->used_high) = 0;
        else
            rc = fakecann_fail(RT_INTERNAL_ERROR, "aclrtMemPoolSetAttr: attribute %d cannot take that value", attr);
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

aclError aclrtMemPoolGetAttr(aclrtMemPool memPool, int attr, void *value)
{
    mem_pool *pool = NULL;
    pthread_mutex_lock(&rt_lock);
    int rc = need_pool(memPool, "aclrtMemPoolGetAttr", &pool);
    if (rc == ACL_SUCCESS && !value)
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtMemPoolGetAttr: value is NULL");
    if (rc == ACL_SUCCESS) {
        const uint64_t counters[] = {pool->threshold, pool->reserved, pool->reserved_high, pool->used, pool->used_high};
        if (attr >= 1 && attr <= ATTR_REUSE_LAST)
            *(uint32_t *)value = pool->reuse[attr];
        else if (attr >= ATTR_RELEASE_THRESHOLD && attr <= ATTR_USED_HIGH)
            *(uint64_t *)value = counters[attr - ATTR_RELEASE_THRESHOLD];
        else
            rc = fakecann_fail(RT_INTERNAL_ERROR, "aclrtMemPoolGetAttr: no attribute %d", attr);
    }
    pthread_mutex_unlock(&rt_lock);
    return rc;
}

static int map_task(void *payload, char *why, size_t why_len)
{
    (void)payload, (void)why, (void)why_len;
    return ACL_SUCCESS; /* the block's memory is there from the call on: nothing to map */
}

static int unmap_task(void *payload, char *why, size_t why_len)
{
    (void)why, (void)why_len;
    pool_block *block = (pool_block *)payload;
    pthread_mutex_lock(&rt_lock);
    block->unmapped = true;
    memset(block->base, 0xFF, block->bytes); /* poison: a later use reads NaN */
    pthread_mutex_unlock(&rt_lock);
    return ACL_SUCCESS;
}

aclError aclrtMemPoolMallocAsync(void **ptr, size_t size, aclrtMemPool memPool, aclrtStream stream)
{
    if (!ptr || !memPool || !stream)
        return fakecann_fail(ACL_ERROR_INVALID_PARAM, "aclrtMemPoolMallocAsync: ptr, memPool or stream is NULL");
    if (size == 0)
        return ACL_SUCCESS; /* aclrtMemPoolMallocAsyncImpl: nothing allocated */
    mem_pool *pool = NULL;
    fake_stream *s = NULL;
    uint64_t counted = granules(size);
    pthread_mutex_lock(&rt_lock);
    int rc = rt_refuse_in_callback("aclrtMemPoolMallocAsync");
    if (rc == ACL_SUCCESS)
        rc = need_pool(memPool, "aclrtMemPoolMallocAsync", &pool);
    if (rc == ACL_SUCCESS)
        rc = need_stream(stream, "aclrtMemPoolMallocAsync", &s);
    if (rc == ACL_SUCCESS && pool->reserved + counted > pool->max_size)
        rc = fakecann_fail(RT_INTERNAL_ERROR, "aclrtMemPoolMallocAsync: %zu bytes (%llu in 2 MB granules) do not fit "
                           "the pool (%llu of %llu reserved; freed blocks come back only with aclrtMemPoolTrimTo)",
                           size, (unsigned long long)counted, (unsigned long long)pool->reserved,
                           (unsigned long long)pool->max_size);
    if (rc == ACL_SUCCESS)
        pool->reserved += counted; /* held while the lock is let go for aclrtMalloc */
    pthread_mutex_unlock(&rt_lock);
    if (rc != ACL_SUCCESS)
        return rc;
    pool_block *block = (pool_block *)calloc(1, sizeof *block);
    rc = block ? aclrtMalloc(&block->base, size, 0) : ACL_ERROR_RT_MEMORY_ALLOCATION;
    if (rc == ACL_SUCCESS)
        rc = fakecann_enqueue(stream, map_task, NULL, block, "aclrtMemPoolMallocAsync");
    pthread_mutex_lock(&rt_lock);
    if (rc == ACL_SUCCESS && ptr_set_has(&pools, pool)) {
        *block = (pool_block){pool->blocks, pool, block->base, size, counted, false, false};
        pool->blocks = block;
        pool->used += counted;
        pool->reserved_high = pool->reserved > pool->reserved_high ? pool->reserved : pool->reserved_high;
        pool->used_high = pool->used > pool->used_high ? pool->used : pool->used_high;
        *ptr = block->base;
        block = NULL;
    } else if (ptr_set_has(&pools, pool)) {
        pool->reserved -= counted;
    }
    pthread_mutex_unlock(&rt_lock);
    if (block) { /* refused (the map task, if queued, touches nothing) */
        if (block->base)
            aclrtFree(block->base);
        free(block);
    }
    return rc;
}

aclError aclrtMemPoolFreeAsync(void *ptr, aclrtStream stream)
{
    if (!ptr)
        return fakecann_fail(ACL_ERROR_INVALID_PARAM, "aclrtMemPoolFreeAsync: ptr is NULL");
    fake_stream *s = NULL;
    pool_block *found = NULL;
    pthread_mutex_lock(&rt_lock);
    int rc = rt_refuse_in_callback("aclrtMemPoolFreeAsync");
    if (rc == ACL_SUCCESS)
        rc = need_product("aclrtMemPoolFreeAsync");
    if (rc == ACL_SUCCESS)
        rc = need_stream(stream, "aclrtMemPoolFreeAsync", &s);
    for (size_t i = 0; rc == ACL_SUCCESS && !found && i < pools.len; i++)
        for (pool_block *block = ((mem_pool *)pools.items[i])->blocks; block && !found; block = block->next)
            if (block->base == ptr && !block->cached)
                found = block;
    if (rc == ACL_SUCCESS && !found)
        rc = fakecann_fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtMemPoolFreeAsync: %p is not a block a memory pool handed "
                           "out (or it was freed already)", ptr);
    if (rc == ACL_SUCCESS) {
        found->cached = true; /* back in the pool now: the runtime's SegmentFree runs on the host */
        found->pool->used -= found->size;
    }
    pthread_mutex_unlock(&rt_lock);
    if (rc == ACL_SUCCESS) {
        rc = fakecann_enqueue(stream, unmap_task, NULL, found, "aclrtMemPoolFreeAsync");
        if (rc != ACL_SUCCESS) { /* refused: still the caller's */
            pthread_mutex_lock(&rt_lock);
            found->cached = false;
            if (found->pool)
                found->pool->used += found->size;
            pthread_mutex_unlock(&rt_lock);
        }
    }
    return rc;
}

/* With rt_lock held: the cached block whose unmap ran with the smallest (size, address), or NULL. */
static pool_block *smallest_released(mem_pool *pool)
{
    pool_block *best = NULL;
    for (pool_block *block = pool->blocks; block; block = block->next)
        if (block->cached && block->unmapped &&
            (!best || block->size < best->size || (block->size == best->size && block->base < best->base)))
            best = block;
    return best;
}

aclError aclrtMemPoolTrimTo(aclrtMemPool memPool, size_t minBytesToKeep)
{
    mem_pool *pool = NULL;
    pool_block *done = NULL;
    pthread_mutex_lock(&rt_lock);
    int rc = need_pool(memPool, "aclrtMemPoolTrimTo", &pool);
    if (rc == ACL_SUCCESS && minBytesToKeep > pool->max_size)
        rc = fakecann_fail(RT_INTERNAL_ERROR, "aclrtMemPoolTrimTo: keep %zu bytes is more than the pool's %llu",
                           minBytesToKeep, (unsigned long long)pool->max_size);
    if (rc == ACL_SUCCESS && minBytesToKeep < pool->reserved && minBytesToKeep < pool->used)
        rc = fakecann_fail(RT_INTERNAL_ERROR, "aclrtMemPoolTrimTo: keep %zu bytes is less than the %llu in use",
                           minBytesToKeep, (unsigned long long)pool->used);
    while (rc == ACL_SUCCESS && pool->reserved > minBytesToKeep) {
        pool_block *block = smallest_released(pool);
        if (!block)
            break;
        uint64_t released = block->size < pool->reserved - minBytesToKeep ? block->size : pool->reserved - minBytesToKeep;
        pool->reserved -= released;
        block->size -= released;
        if (block->size == 0) {
            unlink_block(pool, block);
            block->next = done;
            done = block;
        } else {
            break; /* split: the rest stays cached */
        }
    }
    pthread_mutex_unlock(&rt_lock);
    for (pool_block *block = done, *next; block; block = next) {
        next = block->next;
        aclrtFree(block->base);
        free(block);
    }
    return rc;
}
