/* Serving: malloc, free, memory info, statistics and release, the paths that run
 * after initialization, and what the hooks (hooks.c) build on. Once SERVING
 * (acquire) the logical table is immutable, so these read it without rt->lock;
 * each call locks only its pool (pool.c), and free finds the pool through the
 * region map, lock-free. Before initialization a call either initializes (malloc,
 * memory info) or checks its index against what the configuration would build. */
#include "runtime.h"
#include "streams.h"
#include "snapshot.h"
#include "structs.h"

#include <stdio.h>

static gpumem_status check_logical(const gpumem_runtime *rt, const char *api, int logical)
{
    return gpumem__check_logical(api, logical, rt->num_logical);
}

/* -------------------------------------------------------------- serving -- */

/* A malloc of 0 bytes, or with no `ptr`, out of the hot path: as cudaMalloc
 * and malloc, 0 bytes is nothing to allocate and no error (*ptr = NULL); the
 * index is still checked, without initializing anything. */
static GPUMEM_COLD gpumem_status malloc_nothing(gpumem_runtime *rt, const char *api,
                                                int logical, void **ptr)
{
    gpumem_status s;
    if (!ptr)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "%s(/device:GPU:%d): `ptr` is NULL", api, logical);
    if ((s = gpumem__check_logical(api, logical, gpumem__logical_count(rt))) != GPUMEM_OK)
        return s;
    *ptr = NULL;
    return GPUMEM_OK;
}

/* A malloc's failure in the pool, out of the hot path: the out-of-memory
 * snapshot (before the message, since writing it may fail on its own), then the
 * message, which names the stream of a stream-ordered one. */
static GPUMEM_COLD gpumem_status malloc_failed(gpumem_runtime *rt, const char *api,
                                               int logical, size_t size, bool ordered,
                                               void *stream, gpumem_status s,
                                               const struct reason *why)
{
    char bytes[GPUMEM_BYTES_BUF];
    if (s == GPUMEM_ERR_OUT_OF_MEMORY)
        gpumem__snapshot_on_oom(rt);
    gpumem__format_bytes((uint64_t)size, bytes, sizeof bytes);
    if (ordered)
        return gpumem__fail(s, "%s(/device:GPU:%d, %s, stream %p): %s", api, logical,
                            bytes, stream, why->text);
    return gpumem__fail(s, "%s(/device:GPU:%d, %s): %s", api, logical, bytes, why->text);
}

/* gpumem_malloc and gpumem_malloc_async (`ordered`, on `stream`) on a resolved
 * runtime, named `api` in messages. Inlined into each caller (its `ordered` a
 * constant there), so that the hot path makes no call of its own before the
 * pool's. */
static GPUMEM_ALWAYS_INLINE gpumem_status serve_malloc(gpumem_runtime *rt,
                                                       const char *api, int logical,
                                                       size_t size, bool ordered,
                                                       void *stream, void **ptr)
{
    gpumem_status s;
    if (!ptr || size == 0)
        return malloc_nothing(rt, api, logical, ptr);
    if ((s = gpumem__ensure_initialized(rt, ordered ? "the first gpumem_malloc_async()"
                                                    : "the first gpumem_malloc()")) !=
        GPUMEM_OK)
        return s;
    if ((s = check_logical(rt, api, logical)) != GPUMEM_OK)
        return s;
    uint64_t addr;
    struct reason why;
    struct pool *pool = rt->logical[logical].pool;
    s = ordered ? gpumem__pool_alloc_async(pool, (uint64_t)size, stream, &addr, &why)
                : gpumem__pool_alloc(pool, (uint64_t)size, &addr, &why);
    if (s == GPUMEM_OK) {
        *ptr = (void *)(uintptr_t)addr;
        return s;
    }
    return malloc_failed(rt, api, logical, size, ordered, stream, s, &why);
}

gpumem_status gpumem_malloc(gpumem_runtime *rt, int logical, size_t size, void **ptr)
{
    gpumem_status s =
        resolve_call(&rt, "gpumem_malloc", OBJ_ALLOC, logical, (uint64_t)size, NULL);
    if (s != GPUMEM_OK)
        return s;
    return serve_malloc(rt, "gpumem_malloc", logical, size, false, NULL, ptr);
}

gpumem_status gpumem_malloc_async(gpumem_runtime *rt, int logical, size_t size,
                                  void *stream, void **ptr)
{
    gpumem_status s = resolve_call(&rt, "gpumem_malloc_async", OBJ_ALLOC, logical,
                                   (uint64_t)size, NULL);
    if (s != GPUMEM_OK)
        return s;
    return serve_malloc(rt, "gpumem_malloc_async", logical, size, true, stream, ptr);
}

/* A free's failure, out of the hot path: the pool's reason (`why`), or, why
 * NULL, a pointer that no pool of this runtime holds. */
static GPUMEM_COLD gpumem_status free_failed(const char *api, const void *ptr,
                                             bool ordered, void *stream, gpumem_status s,
                                             const struct reason *why)
{
    if (why && ordered)
        return gpumem__fail(s, "%s(%p, stream %p): %s", api, ptr, stream, why->text);
    if (why)
        return gpumem__fail(s, "%s(%p): %s", api, ptr, why->text);
    return gpumem__fail(s,
                        "%s(%p): not a pointer returned by gpumem_malloc of this runtime "
                        "(never allocated, another runtime's, or in memory already "
                        "released)",
                        api, ptr);
}

/* gpumem_free and gpumem_free_async (`ordered`, on `stream`), named `api`;
 * inlined into each, as serve_malloc. */
static GPUMEM_ALWAYS_INLINE gpumem_status serve_free(gpumem_runtime *rt, const char *api,
                                                     void *ptr, bool ordered,
                                                     void *stream)
{
    if (ptr == NULL)
        return GPUMEM_OK; /* like free(NULL): not even the default runtime is made */
    gpumem_status s = resolve_call(&rt, api, OBJ_POINTER, 0, 0, ptr);
    if (s != GPUMEM_OK)
        return s;
    uint64_t addr = (uint64_t)(uintptr_t)ptr;
    if (serving(rt)) {
        /* The pool's arena validates under the pool's lock: a racing double free
         * gets INVALID_POINTER, not corruption. With one pool, that check is the
         * whole of it, and the region map, which routes a pointer to its pool, is
         * read only to tell a pointer that is not this runtime's from one that is
         * not (or no longer) an allocation's start. */
        struct reason why;
        struct pool *pool = rt->num_logical == 1
                                ? rt->logical[0].pool
                                : gpumem__region_map_find(&rt->regions, addr);
        if (pool) {
            s = ordered ? gpumem__pool_free_async(pool, addr, stream, &why)
                        : gpumem__pool_free(pool, addr, &why);
            if (s == GPUMEM_OK)
                return s;
            if (s != GPUMEM_ERR_INVALID_POINTER || rt->num_logical != 1 ||
                gpumem__region_map_find(&rt->regions, addr))
                return free_failed(api, ptr, ordered, stream, s, &why);
        }
    }
    return free_failed(api, ptr, ordered, stream, GPUMEM_ERR_INVALID_POINTER, NULL);
}

gpumem_status gpumem_free(gpumem_runtime *rt, void *ptr)
{
    return serve_free(rt, "gpumem_free", ptr, false, NULL);
}

gpumem_status gpumem_free_async(gpumem_runtime *rt, void *ptr, void *stream)
{
    return serve_free(rt, "gpumem_free_async", ptr, true, stream);
}

gpumem_status gpumem_stream_capture(bool begin)
{
    if (!gpumem__streams_capture(begin))
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "gpumem_stream_capture(false): no capture is under way in "
                            "this process (each true needs one false)");
    return GPUMEM_OK;
}

gpumem_status gpumem_record_stream(gpumem_runtime *rt, void *ptr, void *stream)
{
    static const char api[] = "gpumem_record_stream";
    if (ptr == NULL)
        return GPUMEM_OK; /* an empty tensor's: nothing to wait for */
    gpumem_status s = resolve_call(&rt, api, OBJ_POINTER, 0, 0, ptr);
    if (s != GPUMEM_OK)
        return s;
    struct pool *pool =
        serving(rt) ? gpumem__region_map_find(&rt->regions, (uint64_t)(uintptr_t)ptr)
                    : NULL;
    if (!pool)
        return gpumem__fail(GPUMEM_ERR_INVALID_POINTER,
                            "%s(%p, stream %p): not a pointer returned by gpumem_malloc "
                            "of this runtime (never allocated, another runtime's, or in "
                            "memory already released)",
                            api, ptr, stream);
    struct reason why;
    s = gpumem__pool_record_stream(pool, (uint64_t)(uintptr_t)ptr, stream, &why);
    if (s != GPUMEM_OK)
        return gpumem__fail(s, "%s(%p, stream %p): %s", api, ptr, stream, why.text);
    return GPUMEM_OK;
}

gpumem_status gpumem_get_memory_info(gpumem_runtime *rt, int logical,
                                     gpumem_memory_info *out)
{
    static const char api[] = "gpumem_get_memory_info";
    gpumem_status s = resolve_call(&rt, api, OBJ_LOGICAL, logical, 0, NULL);
    if (s != GPUMEM_OK)
        return s;
    if (!out)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "%s(/device:GPU:%d): `out` is NULL", api, logical);
    size_t stride;
    gpumem_memory_info info;
    if ((s = gpumem__struct_check(api, "out", &gpumem__memory_info_struct, out, 1,
                                  &stride)) != GPUMEM_OK)
        return s;
    if ((s = gpumem__ensure_initialized(rt, "the first gpumem_get_memory_info()")) !=
        GPUMEM_OK)
        return s;
    if ((s = check_logical(rt, api, logical)) != GPUMEM_OK)
        return s;
    gpumem__pool_info(rt->logical[logical].pool, &info);
    gpumem__struct_put(&gpumem__memory_info_struct, out, stride, 0, &info);
    return GPUMEM_OK;
}

/* Before initialization there are no pools: checks `logical` (-1: all) against
 * the configuration that initialization would build, so that a bad index fails
 * the same way before and after. */
static gpumem_status check_logical_any_time(gpumem_runtime *rt, const char *api,
                                            int logical)
{
    if (logical == -1)
        return GPUMEM_OK;
    return gpumem__check_logical(api, logical, gpumem__logical_count(rt));
}

gpumem_status gpumem__cuda_device_logical(gpumem_runtime **rtp, const char *api,
                                          int cuda_device, int *logical)
{
    gpumem_status s = resolve_call(rtp, api, OBJ_PHYSICAL, cuda_device, 0, NULL);
    if (s != GPUMEM_OK)
        return s;
    gpumem_runtime *rt = *rtp;
    if (!logical)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "%s(GPU:%d): `logical` is NULL",
                            api, cuda_device);
    if (!serving(rt)) { /* the reason is worded only when it may be needed: every
                           PyTorch allocation comes through here */
        char reason[64];
        snprintf(reason, sizeof reason, "the first %s()", api);
        if ((s = gpumem__ensure_initialized(rt, reason)) != GPUMEM_OK)
            return s;
    }
    if (rt->opts.backend == GPUMEM_BACKEND_AUTO && rt->backend->host_accessible)
        return gpumem__fail(
            GPUMEM_ERR_UNSUPPORTED,
            "%s(GPU:%d): no CUDA driver could be used, so GPUMEM_BACKEND=auto fell back "
            "to simulated GPUs, whose memory is host memory; set GPUMEM_BACKEND=cuda to "
            "see why (or GPUMEM_BACKEND=sim to test on simulated GPUs)",
            api, cuda_device);
    if (cuda_device < 0 || (size_t)cuda_device >= rt->num_physical)
        return gpumem__fail(GPUMEM_ERR_NO_SUCH_DEVICE,
                            "%s(GPU:%d): no such GPU (there %s %zu)", api, cuda_device,
                            rt->num_physical == 1 ? "is" : "are", rt->num_physical);
    for (size_t i = 0; i < rt->num_logical; i++)
        if (rt->logical[i].desc.physical_index == cuda_device) {
            *logical = (int)i;
            return GPUMEM_OK;
        }
    return gpumem__fail(GPUMEM_ERR_NO_SUCH_DEVICE,
                        "%s(GPU:%d): GPU:%d is hidden by gpumem_set_visible_devices, so "
                        "it has no logical device",
                        api, cuda_device, cuda_device);
}

gpumem_status gpumem_cuda_device_logical(gpumem_runtime *rt, int cuda_device,
                                         int *logical)
{
    return gpumem__cuda_device_logical(&rt, "gpumem_cuda_device_logical", cuda_device,
                                       logical);
}

gpumem_status gpumem_reset_memory_stats(gpumem_runtime *rt, int logical)
{
    static const char api[] = "gpumem_reset_memory_stats";
    gpumem_status s = resolve_call(&rt, api, OBJ_LOGICAL, logical, 0, NULL);
    if (s == GPUMEM_OK)
        s = check_logical_any_time(rt, api, logical);
    if (s != GPUMEM_OK || !serving(rt))
        return s;
    for (size_t i = 0; i < rt->num_logical; i++)
        if (logical == -1 || (size_t)logical == i)
            gpumem__pool_reset_stats(rt->logical[i].pool);
    return GPUMEM_OK;
}

gpumem_status gpumem_release_unused(gpumem_runtime *rt, int logical, uint64_t *released)
{
    static const char api[] = "gpumem_release_unused";
    uint64_t total = 0;
    gpumem_status s = resolve_call(&rt, api, OBJ_LOGICAL, logical, 0, NULL);
    if (s == GPUMEM_OK)
        s = check_logical_any_time(rt, api, logical);
    if (s != GPUMEM_OK)
        return s;
    if (serving(rt)) {
        for (size_t i = 0; i < rt->num_logical; i++) {
            if (logical != -1 && (size_t)logical != i)
                continue;
            uint64_t bytes = 0;
            struct reason why;
            gpumem_status si =
                gpumem__pool_release_unused(rt->logical[i].pool, &bytes, &why);
            total += bytes;
            if (si != GPUMEM_OK && s == GPUMEM_OK) /* the first failure tells */
                s = gpumem__fail(si, "%s(/device:GPU:%zu): %s", api, i, why.text);
        }
    }
    if (released) /* also after a refused region: the others went back */
        *released = total;
    return s;
}
