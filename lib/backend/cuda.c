/* The CUDA backend: the driver API loaded with dlopen (never linked) into a
 * struct cuda_api. Devices are described without creating contexts; a device's
 * primary context is retained on first use, and every call that touches a device
 * runs between a push and a pop of it, so the caller's context is unchanged.
 * Memory: plain cuMemAlloc_v2 regions, or physical memory mapped into reserved
 * address ranges (VMM). `lock` guards the lazy contexts and granularities (a leaf:
 * docs/internals.md, "Locks"). Every driver call made after open is counted for
 * its device, timed around the call (driver_calls.h): cuInit and the device
 * queries of open are not, nor the error texts of a failure. */
#include "backend/backend.h"
#include "backend/cuda_api.h"
#include "fork.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_LIBRARY "libcuda.so.1"

struct cuda_device {
    CUdevice handle;
    char model[128];
    uint64_t total_bytes;
    int cc_major, cc_minor;
    char uuid[48];        /* "GPU-...", or "" when the driver has no cuDeviceGetUuid */
    bool vmm;             /* the entry points exist and the device supports them */
    CUcontext ctx;        /* its primary context once retained; NULL before */
    uint64_t granularity; /* mapping granularity; 0 until first asked */
};

struct cuda_backend {
    struct backend base; /* first: a struct backend * is a struct cuda_backend * */
    struct cuda_api api;
    void *lib;                  /* the dlopen handle; NULL for a table given by a test */
    const struct options *opts; /* the runtime's (outlives the backend): for the log */
    gpumem_mutex lock;
    size_t num_devices;
    struct cuda_device *devices;
};

static struct cuda_backend *cuda_of(struct backend *b)
{
    return (struct cuda_backend *)b;
}

/* Counts a call of `k` on GPU `dev` made since t0 (gpumem__driver_clock()), given
 * `bytes` (the memory calls' size; 0 for the others). */
static void counted(struct cuda_backend *cb, int dev, enum driver_call k, uint64_t t0,
                    uint64_t bytes)
{
    gpumem__driver_counted(&cb->base.driver_calls[dev], k, t0, bytes);
}

/* ---------------------------------------------------------------- errors -- */

/* How much of CUDA_VISIBLE_DEVICES a message quotes: six UUIDs and their commas.
 * The rest of the message (the call, the driver's error and text) must still fit
 * driver_fail's buffer and a reason. */
#define VISIBLE_SHOWN 160

/* Fails with status s and the reason "<call> failed: CUDA_ERROR_X (n): <driver's
 * text>", the name and the text from the driver when it can give them, else the
 * number alone. */
static gpumem_status driver_fail(const struct cuda_api *api, CUresult r, gpumem_status s,
                                 struct reason *why, const char *fmt, ...)
    GPUMEM_PRINTF(5, 6);
static gpumem_status driver_fail(const struct cuda_api *api, CUresult r, gpumem_status s,
                                 struct reason *why, const char *fmt, ...)
{
    char call[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(call, sizeof call, fmt, ap);
    va_end(ap);
    const char *name = NULL, *text = NULL;
    if (api->cuGetErrorName && api->cuGetErrorName(r, &name) != CUDA_SUCCESS)
        name = NULL;
    if (api->cuGetErrorString && api->cuGetErrorString(r, &text) != CUDA_SUCCESS)
        text = NULL;
    if (!name)
        return gpumem__reason(why, s, "%s failed: CUresult %d%s%s", call, (int)r,
                              text ? ": " : "", text ? text : "");
    return gpumem__reason(why, s, "%s failed: %s (%d)%s%s", call, name, (int)r,
                          text ? ": " : "", text ? text : "");
}

/* The status of a failed call that takes memory from the device (a context, an
 * allocation, a physical handle, a mapping, addresses): out of memory when the
 * driver says so, so that the pool may retry with less or after a release. Every
 * other call's failure is GPUMEM_ERR_BACKEND (or UNSUPPORTED at cuInit), whatever
 * the driver's error: a release that fails for want of memory did not run out. */
static gpumem_status taking(CUresult r)
{
    return r == CUDA_ERROR_OUT_OF_MEMORY ? GPUMEM_ERR_OUT_OF_MEMORY : GPUMEM_ERR_BACKEND;
}

/* A driver library that does not load or lacks an entry point: no driver here
 * (UNSUPPORTED: auto then simulates), unless GPUMEM_CUDA_LIBRARY named it, a bad
 * value then (BACKEND, and the reason begins with the variable's name). */
static gpumem_status library_fail(const struct options *opts, struct reason *why,
                                  const char *fmt, ...) GPUMEM_PRINTF(3, 4);
static gpumem_status library_fail(const struct options *opts, struct reason *why,
                                  const char *fmt, ...)
{
    char text[GPUMEM_REASON_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (!opts->cuda_library[0])
        return gpumem__reason(why, GPUMEM_ERR_UNSUPPORTED, "%s", text);
    return gpumem__reason(why, GPUMEM_ERR_BACKEND, "GPUMEM_CUDA_LIBRARY: %s", text);
}

/* ------------------------------------------------------------------ fork -- */

/* The driver cannot be used in a forked child of a process that initialized it
 * (every call fails there). Where gpumem first initialized it: the fork
 * generation plus one (0: not yet) and the process. Kept across fork() with the
 * rest of memory, so that a child knows. */
static _Atomic unsigned driver_generation;
static _Atomic long driver_pid;

static void driver_initialized_here(void)
{
    if (atomic_load_explicit(&driver_generation, memory_order_acquire) != 0)
        return; /* this process (checked before cuInit) already did */
    atomic_store_explicit(&driver_pid, gpumem__process_id(), memory_order_relaxed);
    atomic_store_explicit(&driver_generation, gpumem__fork_generation() + 1,
                          memory_order_release);
}

gpumem_status gpumem__cuda_check_fork(struct reason *why)
{
    unsigned g = atomic_load_explicit(&driver_generation, memory_order_acquire);
    if (g == 0 || g - 1 == gpumem__fork_generation())
        return GPUMEM_OK;
    return gpumem__reason(
        why, GPUMEM_ERR_UNSUPPORTED,
        "this process (pid %ld) descends by fork() from one that initialized the "
        "CUDA driver "
        "(pid %ld); the driver cannot be used across fork(): start worker processes "
        "with the 'spawn' method, or use CUDA only in the workers (GPUMEM_BACKEND=sim "
        "for simulated GPUs)",
        gpumem__process_id(), atomic_load_explicit(&driver_pid, memory_order_relaxed));
}

/* -------------------------------------------------------------- contexts -- */

/* Makes GPU `dev`'s primary context current on this thread, retaining it the
 * first time. A success must be followed by ctx_pop. Inside a context scope
 * (backend.h) the first push is the scope's and the others push nothing. */
static gpumem_status ctx_push(struct cuda_backend *cb, int dev, struct reason *why)
{
    if (!gpumem__backend_scope_push(&cb->base, dev))
        return GPUMEM_OK; /* the scope pushed it */
    struct cuda_device *d = &cb->devices[dev];
    gpumem_status s = GPUMEM_OK;
    gpumem__mutex_lock(&cb->lock);
    if (!d->ctx) {
        CUcontext ctx = NULL;
        uint64_t t0 = gpumem__driver_clock();
        CUresult r = cb->api.cuDevicePrimaryCtxRetain(&ctx, d->handle);
        counted(cb, dev, DRIVER_cuDevicePrimaryCtxRetain, t0, 0);
        if (r == CUDA_SUCCESS)
            d->ctx = ctx;
        else
            s = driver_fail(&cb->api, r, taking(r), why,
                            "cuDevicePrimaryCtxRetain on GPU:%d", dev);
    }
    CUcontext ctx = d->ctx;
    gpumem__mutex_unlock(&cb->lock);
    if (s != GPUMEM_OK) {
        gpumem__backend_scope_push_failed(&cb->base, dev);
        return s;
    }
    uint64_t t0 = gpumem__driver_clock();
    CUresult r = cb->api.cuCtxPushCurrent_v2(ctx);
    counted(cb, dev, DRIVER_cuCtxPushCurrent_v2, t0, 0);
    if (r != CUDA_SUCCESS) {
        gpumem__backend_scope_push_failed(&cb->base, dev);
        return driver_fail(&cb->api, r, GPUMEM_ERR_BACKEND, why,
                           "cuCtxPushCurrent_v2 on GPU:%d", dev);
    }
    return GPUMEM_OK;
}

/* A driver call (fmt...) that failed with r while cleaning up after a first
 * failure, whose status is s (and whose reason the caller's `why` holds): the
 * second goes to the log at ERROR, and the first stays the one returned. */
static gpumem_status also_failed(struct cuda_backend *cb, gpumem_status s, CUresult r,
                                 const char *fmt, ...) GPUMEM_PRINTF(4, 5);
static gpumem_status also_failed(struct cuda_backend *cb, gpumem_status s, CUresult r,
                                 const char *fmt, ...)
{
    char what[256];
    struct reason second;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    driver_fail(&cb->api, r, GPUMEM_ERR_BACKEND, &second, "%s", what);
    gpumem__log(cb->opts, GPUMEM_LOG_ERROR, "gpumem: %s", second.text);
    return s;
}

/* Gives the thread its previous context back. `s` is the status of the work done
 * in between: returned as it is, unless that work succeeded and the pop failed.
 * A pop that fails after a failure is logged and the first reason kept. Inside a
 * context scope the pop is the scope's (cuda_scope_pop). */
static gpumem_status ctx_pop(struct cuda_backend *cb, int dev, gpumem_status s,
                             struct reason *why)
{
    if (gpumem__backend_scoped(&cb->base, dev))
        return s;
    CUcontext popped = NULL;
    uint64_t t0 = gpumem__driver_clock();
    CUresult r = cb->api.cuCtxPopCurrent_v2(&popped);
    counted(cb, dev, DRIVER_cuCtxPopCurrent_v2, t0, 0);
    if (r == CUDA_SUCCESS)
        return s;
    if (s == GPUMEM_OK)
        return driver_fail(&cb->api, r, GPUMEM_ERR_BACKEND, why,
                           "cuCtxPopCurrent_v2 on GPU:%d", dev);
    return also_failed(cb, s, r, "cuCtxPopCurrent_v2 on GPU:%d", dev);
}

/* The pop after taking memory or a range failed (status `popped`), and so did
 * `undo`, the call giving it back (r): the driver keeps it either way, so the
 * caller is handed it (the pop's reason is in *why, for the log), to book and use, and
 * both failures go to the log. The thread's context stack is then one too deep, as after
 * ctx_pop_after_release. */
static void kept_after_failed_pop(struct cuda_backend *cb, int dev, gpumem_status popped,
                                  CUresult r, const char *undo, const struct reason *why)
{
    also_failed(cb, popped, r,
                "GPU:%d: after the failed pop, giving the reservation back: %s", dev,
                undo);
    gpumem__log(cb->opts, GPUMEM_LOG_ERROR,
                "gpumem: %s; the reservation is kept and used", why->text);
}

/* ctx_pop after giving something back: once the memory or the range is gone the
 * caller must book it as gone, so a failed pop is logged (the thread's context
 * stack is then one too deep) and the release still reported as done. */
static gpumem_status ctx_pop_after_release(struct cuda_backend *cb, int dev,
                                           gpumem_status s, struct reason *why)
{
    if (s != GPUMEM_OK)
        return ctx_pop(cb, dev, s, why);
    struct reason popped;
    if (ctx_pop(cb, dev, GPUMEM_OK, &popped) != GPUMEM_OK)
        gpumem__log(cb->opts, GPUMEM_LOG_ERROR,
                    "gpumem: %s (after a release that succeeded)", popped.text);
    return GPUMEM_OK;
}

/* The end of a context scope in which a call pushed the context: its pop, a
 * failure of which goes to the log (the thread's context stack then stays one
 * too deep, as after ctx_pop_after_release). */
static void cuda_scope_pop(struct backend *b, int dev)
{
    struct cuda_backend *cb = (struct cuda_backend *)b;
    struct reason why;
    if (ctx_pop(cb, dev, GPUMEM_OK, &why) != GPUMEM_OK)
        gpumem__log(cb->opts, GPUMEM_LOG_ERROR, "gpumem: %s (closing a context scope)",
                    why.text);
}

/* ---------------------------------------------------------------- devices -- */

static void cuda_destroy(struct backend *b)
{
    struct cuda_backend *cb = cuda_of(b);
    for (size_t i = 0; i < cb->num_devices; i++) {
        struct cuda_device *d = &cb->devices[i];
        if (!d->ctx)
            continue;
        uint64_t t0 = gpumem__driver_clock();
        CUresult r = cb->api.cuDevicePrimaryCtxRelease_v2(d->handle);
        counted(cb, (int)i, DRIVER_cuDevicePrimaryCtxRelease_v2, t0, 0);
        if (r != CUDA_SUCCESS) {
            struct reason why;
            driver_fail(&cb->api, r, GPUMEM_ERR_BACKEND, &why,
                        "cuDevicePrimaryCtxRelease_v2 on GPU:%zu", i);
            gpumem__log(cb->opts, GPUMEM_LOG_ERROR, "gpumem: %s", why.text);
        }
    }
    if (cb->lib)
        dlclose(cb->lib);
    gpumem__mutex_destroy(&cb->lock);
    free(cb->base.driver_calls);
    free(cb->devices);
    free(cb);
}

/* In a forked child: the host structures only. No driver call (the contexts are
 * the parent's), no dlclose (unloading the driver would run its own teardown in
 * the child), and the lock is not destroyed (a thread of the parent may have
 * held it at the fork). */
static void cuda_forget(struct backend *b)
{
    struct cuda_backend *cb = cuda_of(b);
    free(cb->base.driver_calls);
    free(cb->devices);
    free(cb);
}

static size_t cuda_device_count(const struct backend *b)
{
    return ((const struct cuda_backend *)b)->num_devices;
}

static gpumem_status cuda_device_props(struct backend *b, int dev,
                                       gpumem_physical_device *out, struct reason *why)
{
    (void)why; /* described at open: cannot fail */
    const struct cuda_device *d = &cuda_of(b)->devices[dev];
    snprintf(out->model, sizeof out->model, "%s", d->model);
    out->total_bytes = d->total_bytes;
    out->compute_major = d->cc_major;
    out->compute_minor = d->cc_minor;
    snprintf(out->uuid, sizeof out->uuid, "%s", d->uuid);
    return GPUMEM_OK;
}

static gpumem_status cuda_mem_info(struct backend *b, int dev, uint64_t *free_bytes,
                                   uint64_t *total_bytes, struct reason *why)
{
    struct cuda_backend *cb = cuda_of(b);
    gpumem_status s = ctx_push(cb, dev, why);
    if (s != GPUMEM_OK)
        return s;
    size_t f = 0, t = 0;
    uint64_t t0 = gpumem__driver_clock();
    CUresult r = cb->api.cuMemGetInfo_v2(&f, &t);
    counted(cb, dev, DRIVER_cuMemGetInfo_v2, t0, 0);
    if (r != CUDA_SUCCESS)
        s = driver_fail(&cb->api, r, GPUMEM_ERR_BACKEND, why, "cuMemGetInfo_v2 on GPU:%d",
                        dev);
    s = ctx_pop(cb, dev, s, why);
    if (s == GPUMEM_OK) {
        *free_bytes = f;
        *total_bytes = t;
    }
    return s;
}

/* ---------------------------------------------------------- plain memory -- */

/* The driver counts bytes in size_t: false, with the reason, when `size` is more. */
static bool fits_size_t(int dev, uint64_t size, struct reason *why)
{
    if (size <= SIZE_MAX)
        return true;
    gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                   "GPU:%d: %llu bytes do not fit this host's size_t", dev,
                   (unsigned long long)size);
    return false;
}

static gpumem_status cuda_alloc_region(struct backend *b, int dev, uint64_t size,
                                       uint64_t *addr, struct reason *why)
{
    struct cuda_backend *cb = cuda_of(b);
    if (!fits_size_t(dev, size, why))
        return GPUMEM_ERR_OUT_OF_MEMORY;
    gpumem_status s = ctx_push(cb, dev, why);
    if (s != GPUMEM_OK)
        return s;
    CUdeviceptr p = 0;
    uint64_t t0 = gpumem__driver_clock();
    CUresult r = cb->api.cuMemAlloc_v2(&p, (size_t)size);
    counted(cb, dev, DRIVER_cuMemAlloc_v2, t0, size);
    if (r != CUDA_SUCCESS)
        s = driver_fail(&cb->api, r, taking(r), why, "cuMemAlloc_v2(%llu) on GPU:%d",
                        (unsigned long long)size, dev);
    gpumem_status popped = ctx_pop(cb, dev, s, why);
    if (s == GPUMEM_OK && popped != GPUMEM_OK) {
        /* Our context is still current (the pop failed): free while it is. */
        t0 = gpumem__driver_clock();
        r = cb->api.cuMemFree_v2(p);
        counted(cb, dev, DRIVER_cuMemFree_v2, t0, size);
        if (r == CUDA_SUCCESS)
            return popped;
        kept_after_failed_pop(cb, dev, popped, r, "cuMemFree_v2", why);
    }
    if (s == GPUMEM_OK)
        *addr = p;
    return s;
}

static gpumem_status cuda_free_region(struct backend *b, int dev, uint64_t addr,
                                      uint64_t size, struct reason *why)
{
    struct cuda_backend *cb = cuda_of(b);
    gpumem_status s = ctx_push(cb, dev, why);
    if (s != GPUMEM_OK)
        return s;
    uint64_t t0 = gpumem__driver_clock();
    CUresult r = cb->api.cuMemFree_v2((CUdeviceptr)addr);
    counted(cb, dev, DRIVER_cuMemFree_v2, t0, size);
    if (r != CUDA_SUCCESS)
        s = driver_fail(&cb->api, r, GPUMEM_ERR_BACKEND, why,
                        "cuMemFree_v2(0x%llx) on GPU:%d", (unsigned long long)addr, dev);
    return ctx_pop_after_release(cb, dev, s, why);
}

/* ---------------------------------------------------- virtual memory (VMM) -- */

/* Pinned device memory on GPU `dev`, not exportable. */
static CUmemAllocationProp device_memory(const struct cuda_device *d)
{
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = d->handle;
    return prop;
}

static gpumem_status cuda_space_granularity(struct backend *b, int dev,
                                            uint64_t *granularity, struct reason *why)
{
    struct cuda_backend *cb = cuda_of(b);
    struct cuda_device *d = &cb->devices[dev];
    if (!d->vmm)
        return gpumem__reason(why, GPUMEM_ERR_UNSUPPORTED,
                              "GPU:%d does not support virtual memory management", dev);
    gpumem__mutex_lock(&cb->lock);
    uint64_t known = d->granularity;
    gpumem__mutex_unlock(&cb->lock);
    if (known) {
        *granularity = known;
        return GPUMEM_OK;
    }
    gpumem_status s = ctx_push(cb, dev, why);
    if (s != GPUMEM_OK)
        return s;
    CUmemAllocationProp prop = device_memory(d);
    size_t g = 0;
    uint64_t t0 = gpumem__driver_clock();
    CUresult r = cb->api.cuMemGetAllocationGranularity(&g, &prop,
                                                       CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    counted(cb, dev, DRIVER_cuMemGetAllocationGranularity, t0, 0);
    if (r != CUDA_SUCCESS)
        s = driver_fail(&cb->api, r, GPUMEM_ERR_BACKEND, why,
                        "cuMemGetAllocationGranularity on GPU:%d", dev);
    else if (g < 256 || (g & (g - 1)) != 0)
        s = gpumem__reason(
            why, GPUMEM_ERR_BACKEND,
            "cuMemGetAllocationGranularity on GPU:%d gave %zu, not a power of "
            "two of at least 256",
            dev, g);
    s = ctx_pop(cb, dev, s, why);
    if (s != GPUMEM_OK)
        return s;
    gpumem__mutex_lock(&cb->lock);
    d->granularity = g;
    gpumem__mutex_unlock(&cb->lock);
    *granularity = g;
    return GPUMEM_OK;
}

static gpumem_status cuda_space_alloc_range(struct backend *b, int dev, uint64_t size,
                                            uint64_t *base, struct reason *why)
{
    struct cuda_backend *cb = cuda_of(b);
    if (!fits_size_t(dev, size, why))
        return GPUMEM_ERR_OUT_OF_MEMORY;
    gpumem__mutex_lock(&cb->lock);
    size_t alignment = (size_t)cb->devices[dev].granularity; /* 0: the driver's default */
    gpumem__mutex_unlock(&cb->lock);
    gpumem_status s = ctx_push(cb, dev, why);
    if (s != GPUMEM_OK)
        return s;
    CUdeviceptr p = 0;
    uint64_t t0 = gpumem__driver_clock();
    CUresult r = cb->api.cuMemAddressReserve(&p, (size_t)size, alignment, 0, 0);
    counted(cb, dev, DRIVER_cuMemAddressReserve, t0, size);
    if (r != CUDA_SUCCESS)
        s = driver_fail(&cb->api, r, taking(r), why,
                        "cuMemAddressReserve(%llu) on GPU:%d", (unsigned long long)size,
                        dev);
    gpumem_status popped = ctx_pop(cb, dev, s, why);
    if (s == GPUMEM_OK && popped != GPUMEM_OK) {
        t0 = gpumem__driver_clock();
        r = cb->api.cuMemAddressFree(p, (size_t)size);
        counted(cb, dev, DRIVER_cuMemAddressFree, t0, size);
        if (r == CUDA_SUCCESS)
            return popped;
        kept_after_failed_pop(cb, dev, popped, r, "cuMemAddressFree", why);
    }
    if (s == GPUMEM_OK)
        *base = p;
    return s;
}

static gpumem_status cuda_space_free_range(struct backend *b, int dev, uint64_t base,
                                           uint64_t size, struct reason *why)
{
    struct cuda_backend *cb = cuda_of(b);
    gpumem_status s = ctx_push(cb, dev, why);
    if (s != GPUMEM_OK)
        return s;
    uint64_t t0 = gpumem__driver_clock();
    CUresult r = cb->api.cuMemAddressFree((CUdeviceptr)base, (size_t)size);
    counted(cb, dev, DRIVER_cuMemAddressFree, t0, size);
    if (r != CUDA_SUCCESS)
        s = driver_fail(&cb->api, r, GPUMEM_ERR_BACKEND, why,
                        "cuMemAddressFree(0x%llx, %llu) on GPU:%d",
                        (unsigned long long)base, (unsigned long long)size, dev);
    return ctx_pop_after_release(cb, dev, s, why);
}

/* Undoes the mapping of a failed map_memory, whose failure is s (its reason
 * already written): a refused unmap leaves the addresses mapped, and the memory with
 * them. */
static gpumem_status unmap_after(struct cuda_backend *cb, int dev, CUdeviceptr addr,
                                 size_t size, gpumem_status s, bool *stuck, bool *held)
{
    uint64_t t0 = gpumem__driver_clock();
    CUresult r = cb->api.cuMemUnmap(addr, size);
    counted(cb, dev, DRIVER_cuMemUnmap, t0, size);
    if (r == CUDA_SUCCESS)
        return s;
    *stuck = *held = true;
    return also_failed(cb, s, r,
                       "cuMemUnmap(0x%llx, %zu) on GPU:%d, undoing a failed mapping: the "
                       "addresses stay mapped",
                       (unsigned long long)addr, size, dev);
}

/* Drops the handle of a failed map_memory, whose failure is s (its reason
 * already written): a refused release leaves the memory taken. */
static gpumem_status release_after(struct cuda_backend *cb, int dev,
                                   CUmemGenericAllocationHandle h, size_t size,
                                   gpumem_status s, bool *held)
{
    uint64_t t0 = gpumem__driver_clock();
    CUresult r = cb->api.cuMemRelease(h);
    counted(cb, dev, DRIVER_cuMemRelease, t0, size);
    if (r == CUDA_SUCCESS)
        return s;
    *held = true;
    return also_failed(
        cb, s, r,
        "cuMemRelease of %zu bytes on GPU:%d, undoing a failed mapping: the "
        "memory stays taken",
        size, dev);
}

/* Creates physical memory, maps it at addr and opens it to the device; then drops
 * the handle, so that the memory lives exactly as long as the mapping (unmapping
 * frees it). On failure every step is undone; *stuck and *held say what could
 * not be (backend.h), and the log names each refusal. pre: a context of the
 * device is current. */
static gpumem_status map_memory(struct cuda_backend *cb, int dev, CUdeviceptr addr,
                                size_t size, bool *stuck, bool *held, struct reason *why)
{
    const struct cuda_api *api = &cb->api;
    CUmemAllocationProp prop = device_memory(&cb->devices[dev]);
    CUmemGenericAllocationHandle h = 0;
    uint64_t t0 = gpumem__driver_clock();
    CUresult r = api->cuMemCreate(&h, size, &prop, 0);
    counted(cb, dev, DRIVER_cuMemCreate, t0, size);
    if (r != CUDA_SUCCESS)
        return driver_fail(api, r, taking(r), why, "cuMemCreate(%zu) on GPU:%d", size,
                           dev);
    t0 = gpumem__driver_clock();
    r = api->cuMemMap(addr, size, 0, h, 0);
    counted(cb, dev, DRIVER_cuMemMap, t0, size);
    if (r != CUDA_SUCCESS) {
        gpumem_status s =
            driver_fail(api, r, taking(r), why, "cuMemMap(0x%llx, %zu) on GPU:%d",
                        (unsigned long long)addr, size, dev);
        return release_after(cb, dev, h, size, s, held);
    }
    CUmemAccessDesc access;
    memset(&access, 0, sizeof access);
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    t0 = gpumem__driver_clock();
    r = api->cuMemSetAccess(addr, size, &access, 1);
    counted(cb, dev, DRIVER_cuMemSetAccess, t0, size);
    if (r != CUDA_SUCCESS) {
        gpumem_status s =
            driver_fail(api, r, taking(r), why, "cuMemSetAccess(0x%llx, %zu) on GPU:%d",
                        (unsigned long long)addr, size, dev);
        s = unmap_after(cb, dev, addr, size, s, stuck, held);
        return release_after(cb, dev, h, size, s, held);
    }
    t0 = gpumem__driver_clock();
    r = api->cuMemRelease(h);
    counted(cb, dev, DRIVER_cuMemRelease, t0, size);
    if (r != CUDA_SUCCESS) {
        /* The handle cannot be dropped: unmap, so that at least the addresses are
         * clean; the memory stays with the driver until the process ends. */
        gpumem_status s =
            driver_fail(api, r, GPUMEM_ERR_BACKEND, why,
                        "cuMemRelease after mapping %zu bytes on GPU:%d", size, dev);
        *held = true;
        return unmap_after(cb, dev, addr, size, s, stuck, held);
    }
    return GPUMEM_OK;
}

static gpumem_status cuda_space_map(struct backend *b, int dev, uint64_t addr,
                                    uint64_t size, bool *stuck, bool *held,
                                    struct reason *why)
{
    struct cuda_backend *cb = cuda_of(b);
    *stuck = *held = false;
    gpumem_status s = ctx_push(cb, dev, why);
    if (s != GPUMEM_OK)
        return s;
    s = map_memory(cb, dev, (CUdeviceptr)addr, (size_t)size, stuck, held, why);
    gpumem_status popped = ctx_pop(cb, dev, s, why);
    if (s == GPUMEM_OK && popped != GPUMEM_OK) /* the handle is dropped already */
        return unmap_after(cb, dev, (CUdeviceptr)addr, (size_t)size, popped, stuck, held);
    return s;
}

static gpumem_status cuda_space_unmap(struct backend *b, int dev, uint64_t addr,
                                      uint64_t size, struct reason *why)
{
    struct cuda_backend *cb = cuda_of(b);
    gpumem_status s = ctx_push(cb, dev, why);
    if (s != GPUMEM_OK)
        return s;
    uint64_t t0 = gpumem__driver_clock();
    CUresult r = cb->api.cuMemUnmap((CUdeviceptr)addr, (size_t)size);
    counted(cb, dev, DRIVER_cuMemUnmap, t0, size);
    if (r != CUDA_SUCCESS)
        s = driver_fail(&cb->api, r, GPUMEM_ERR_BACKEND, why,
                        "cuMemUnmap(0x%llx, %llu) on GPU:%d", (unsigned long long)addr,
                        (unsigned long long)size, dev);
    return ctx_pop_after_release(cb, dev, s, why);
}

/* ------------------------------------------------------------------ events -- */

/* Each call runs in the device's primary context, in which the program's streams
 * (PyTorch's, CuPy's) live: an event must be recorded on a stream of its own
 * context. */

static gpumem_status cuda_event_create(struct backend *b, int dev, void **event,
                                       struct reason *why)
{
    struct cuda_backend *cb = cuda_of(b);
    gpumem_status s = ctx_push(cb, dev, why);
    if (s != GPUMEM_OK)
        return s;
    CUevent ev = NULL;
    uint64_t t0 = gpumem__driver_clock();
    CUresult r = cb->api.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING);
    counted(cb, dev, DRIVER_cuEventCreate, t0, 0);
    if (r != CUDA_SUCCESS)
        s = driver_fail(&cb->api, r, taking(r), why, "cuEventCreate on GPU:%d", dev);
    gpumem_status popped = ctx_pop(cb, dev, s, why);
    if (s == GPUMEM_OK && popped != GPUMEM_OK) {
        t0 = gpumem__driver_clock();
        r = cb->api.cuEventDestroy_v2(ev); /* our context is still current */
        counted(cb, dev, DRIVER_cuEventDestroy_v2, t0, 0);
        if (r != CUDA_SUCCESS)
            also_failed(cb, popped, r,
                        "cuEventDestroy_v2 on GPU:%d, after the failed pop", dev);
        return popped;
    }
    if (s == GPUMEM_OK)
        *event = ev;
    return s;
}

static gpumem_status cuda_event_destroy(struct backend *b, int dev, void *event,
                                        struct reason *why)
{
    struct cuda_backend *cb = cuda_of(b);
    gpumem_status s = ctx_push(cb, dev, why);
    if (s != GPUMEM_OK)
        return s;
    uint64_t t0 = gpumem__driver_clock();
    CUresult r = cb->api.cuEventDestroy_v2((CUevent)event);
    counted(cb, dev, DRIVER_cuEventDestroy_v2, t0, 0);
    if (r != CUDA_SUCCESS)
        s = driver_fail(&cb->api, r, GPUMEM_ERR_BACKEND, why,
                        "cuEventDestroy_v2 on GPU:%d", dev);
    return ctx_pop_after_release(cb, dev, s, why);
}

static gpumem_status cuda_event_record(struct backend *b, int dev, void *event,
                                       void *stream, struct reason *why)
{
    struct cuda_backend *cb = cuda_of(b);
    gpumem_status s = ctx_push(cb, dev, why);
    if (s != GPUMEM_OK)
        return s;
    uint64_t t0 = gpumem__driver_clock();
    CUresult r = cb->api.cuEventRecord((CUevent)event, (CUstream)stream);
    counted(cb, dev, DRIVER_cuEventRecord, t0, 0);
    if (r != CUDA_SUCCESS)
        s = driver_fail(&cb->api, r, GPUMEM_ERR_BACKEND, why,
                        "cuEventRecord(stream %p) on GPU:%d", stream, dev);
    return ctx_pop(cb, dev, s, why);
}

static gpumem_status cuda_event_query(struct backend *b, int dev, void *event, bool *done,
                                      struct reason *why)
{
    struct cuda_backend *cb = cuda_of(b);
    gpumem_status s = ctx_push(cb, dev, why);
    if (s != GPUMEM_OK)
        return s;
    uint64_t t0 = gpumem__driver_clock();
    CUresult r = cb->api.cuEventQuery((CUevent)event);
    counted(cb, dev, DRIVER_cuEventQuery, t0, 0);
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY)
        s = driver_fail(&cb->api, r, GPUMEM_ERR_BACKEND, why, "cuEventQuery on GPU:%d",
                        dev);
    s = ctx_pop(cb, dev, s, why);
    if (s == GPUMEM_OK)
        *done = r == CUDA_SUCCESS;
    return s;
}

static gpumem_status cuda_event_synchronize(struct backend *b, int dev, void *event,
                                            struct reason *why)
{
    struct cuda_backend *cb = cuda_of(b);
    gpumem_status s = ctx_push(cb, dev, why);
    if (s != GPUMEM_OK)
        return s;
    uint64_t t0 = gpumem__driver_clock();
    CUresult r = cb->api.cuEventSynchronize((CUevent)event);
    counted(cb, dev, DRIVER_cuEventSynchronize, t0, 0);
    if (r != CUDA_SUCCESS)
        s = driver_fail(&cb->api, r, GPUMEM_ERR_BACKEND, why,
                        "cuEventSynchronize on GPU:%d", dev);
    return ctx_pop(cb, dev, s, why);
}

#define CUDA_EVENT_OPS                                                                   \
    .event_create = cuda_event_create, .event_destroy = cuda_event_destroy,              \
    .event_record = cuda_event_record, .event_query = cuda_event_query,                  \
    .event_synchronize = cuda_event_synchronize, .scope_pop = cuda_scope_pop

/* Without the VMM entry points: plain allocations only. */
static const struct backend_ops cuda_ops = {
    .name = "cuda",
    .destroy = cuda_destroy,
    .forget = cuda_forget,
    .device_count = cuda_device_count,
    .device_props = cuda_device_props,
    .mem_info = cuda_mem_info,
    .alloc_region = cuda_alloc_region,
    .free_region = cuda_free_region,
    CUDA_EVENT_OPS,
};

/* With them; a device that lacks VMM still says so in space_granularity. */
static const struct backend_ops cuda_vmm_ops = {
    .name = "cuda",
    .destroy = cuda_destroy,
    .forget = cuda_forget,
    .device_count = cuda_device_count,
    .device_props = cuda_device_props,
    .mem_info = cuda_mem_info,
    .alloc_region = cuda_alloc_region,
    .free_region = cuda_free_region,
    .space_granularity = cuda_space_granularity,
    .space_alloc_range = cuda_space_alloc_range,
    .space_free_range = cuda_space_free_range,
    .space_map = cuda_space_map,
    .space_unmap = cuda_space_unmap,
    CUDA_EVENT_OPS,
};

/* ------------------------------------------------------------------- open -- */

/* Fills d from the driver: no context is needed (or made) for any of this. */
static gpumem_status describe_device(const struct options *opts,
                                     const struct cuda_api *api, int i, bool vmm_api,
                                     struct cuda_device *d, struct reason *why)
{
    CUresult r = api->cuDeviceGet(&d->handle, i);
    if (r != CUDA_SUCCESS)
        return driver_fail(api, r, GPUMEM_ERR_BACKEND, why, "cuDeviceGet(%d)", i);
    r = api->cuDeviceGetName(d->model, (int)sizeof d->model, d->handle);
    if (r != CUDA_SUCCESS)
        return driver_fail(api, r, GPUMEM_ERR_BACKEND, why, "cuDeviceGetName on GPU:%d",
                           i);
    d->model[sizeof d->model - 1] = '\0';
    size_t total = 0;
    r = api->cuDeviceTotalMem_v2(&total, d->handle);
    if (r != CUDA_SUCCESS)
        return driver_fail(api, r, GPUMEM_ERR_BACKEND, why,
                           "cuDeviceTotalMem_v2 on GPU:%d", i);
    d->total_bytes = total;
    static const struct {
        CUdevice_attribute attr;
        const char *name;
    } attrs[] = {
        {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
         "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR"},
        {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
         "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR"},
        {CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
         "CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED"},
    };
    int values[3] = {0, 0, 0};
    size_t n = vmm_api ? 3 : 2; /* no need to ask about VMM without its entry points */
    for (size_t k = 0; k < n; k++) {
        r = api->cuDeviceGetAttribute(&values[k], attrs[k].attr, d->handle);
        if (r != CUDA_SUCCESS)
            return driver_fail(api, r, GPUMEM_ERR_BACKEND, why,
                               "cuDeviceGetAttribute(%s) on GPU:%d", attrs[k].name, i);
    }
    d->cc_major = values[0];
    d->cc_minor = values[1];
    d->vmm = values[2] != 0;
    /* The UUID is for display and for naming the GPU's ledger: a driver without
     * the call, or one that fails it, leaves it empty (and the log says why)
     * rather than failing a GPU that works. */
    CUuuid uuid;
    if (api->cuDeviceGetUuid_v2) {
        r = api->cuDeviceGetUuid_v2(&uuid, d->handle);
        if (r == CUDA_SUCCESS) {
            gpumem__format_uuid((const unsigned char *)uuid.bytes, d->uuid,
                                sizeof d->uuid);
        } else {
            struct reason failed;
            driver_fail(api, r, GPUMEM_ERR_BACKEND, &failed,
                        "cuDeviceGetUuid_v2 on GPU:%d", i);
            gpumem__log(opts, GPUMEM_LOG_INFO, "gpumem: %s; its UUID is left empty",
                        failed.text);
        }
    }
    return GPUMEM_OK;
}

/* Opens the backend over `api` (copied). `library` names it for messages. On
 * failure the caller unloads the library. On a failed cuInit, *broken (may be
 * NULL; left alone otherwise, the caller starts it false) says whether the driver
 * is there but failed for another reason than the machine having no GPU: see
 * gpumem__cuda_open. */
static gpumem_status open_with(const struct options *opts, const struct cuda_api *api,
                               const char *library, void *lib, struct backend **out,
                               bool *broken, struct reason *why)
{
    const char *missing = NULL;
#define CUDA_CHECK_REQUIRED(name, params)                                                \
    if (!missing && !api->name)                                                          \
        missing = #name;
    CUDA_API_REQUIRED(CUDA_CHECK_REQUIRED)
#undef CUDA_CHECK_REQUIRED
    if (missing)
        return library_fail(opts, why,
                            "the CUDA driver library '%s' has no entry point %s", library,
                            missing);
    bool vmm_api = !opts->cuda_no_vmm; /* GPUMEM_CUDA_VMM=false turns it off */
#define CUDA_CHECK_VMM(name, params) vmm_api = vmm_api && api->name != NULL;
    CUDA_API_VMM(CUDA_CHECK_VMM)
#undef CUDA_CHECK_VMM

    /* With no device to show (CUDA_VISIBLE_DEVICES may hide them all), a driver
     * fails cuInit with CUDA_ERROR_NO_DEVICE, or reports a count of 0: either
     * message quotes the variable when it is set. */
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    char shown[VISIBLE_SHOWN + 4]; /* its first characters, then "..." if longer */
    if (visible)
        snprintf(shown, sizeof shown, "%.*s%s", VISIBLE_SHOWN, visible,
                 strlen(visible) > VISIBLE_SHOWN ? "..." : "");
    gpumem_status fs = gpumem__cuda_check_fork(why);
    if (fs != GPUMEM_OK)
        return fs;
    CUresult r = api->cuInit(0);
    if (r == CUDA_SUCCESS)
        driver_initialized_here();
    if (r == CUDA_ERROR_NO_DEVICE && visible)
        return driver_fail(api, r, GPUMEM_ERR_UNSUPPORTED, why,
                           "cuInit(0) with CUDA_VISIBLE_DEVICES='%s'", shown);
    if (r == CUDA_ERROR_NOT_INITIALIZED) {
        /* What cuInit says in a process forked from one that had initialized
         * CUDA (through gpumem, caught above, or another library): the GPU is
         * there, this process cannot use it. An error, not a reason for `auto`
         * to hand out simulated GPUs instead. */
        struct reason failed;
        driver_fail(api, r, GPUMEM_ERR_BACKEND, &failed, "cuInit(0)");
        return gpumem__reason(
            why, GPUMEM_ERR_BACKEND,
            "%s (as in a process forked from one that had initialized "
            "CUDA, through gpumem or another library: start it with the "
            "'spawn' method)",
            failed.text);
    }
    if (r != CUDA_SUCCESS) {
        /* No device, or the stub library of a container without a driver: a
         * machine without a GPU. Anything else is a GPU whose driver failed. */
        if (broken)
            *broken = r != CUDA_ERROR_NO_DEVICE && r != CUDA_ERROR_STUB_LIBRARY;
        return driver_fail(api, r, GPUMEM_ERR_UNSUPPORTED, why, "cuInit(0)");
    }
    int count = 0;
    r = api->cuDeviceGetCount(&count);
    if (r != CUDA_SUCCESS)
        return driver_fail(api, r, GPUMEM_ERR_BACKEND, why, "cuDeviceGetCount");
    if (count <= 0) {
        return gpumem__reason(why, GPUMEM_ERR_UNSUPPORTED,
                              "the CUDA driver '%s' reports no device%s%s%s", library,
                              visible ? " (CUDA_VISIBLE_DEVICES='" : "",
                              visible ? shown : "", visible ? "')" : "");
    }

    struct cuda_backend *cb = calloc(1, sizeof *cb);
    struct cuda_device *devices = calloc((size_t)count, sizeof *devices);
    struct driver_counts *calls = gpumem__driver_counts_new((size_t)count);
    if (!cb || !devices || !calls) {
        free(cb);
        free(devices);
        free(calls);
        return gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                              "the CUDA backend: out of host memory for %d devices",
                              count);
    }
    bool any_vmm = false;
    for (int i = 0; i < count; i++) {
        gpumem_status s = describe_device(opts, api, i, vmm_api, &devices[i], why);
        if (s != GPUMEM_OK) {
            free(calls);
            free(devices);
            free(cb);
            return s;
        }
        any_vmm = any_vmm || devices[i].vmm;
    }
    cb->api = *api;
    cb->lib = lib;
    cb->opts = opts;
    cb->num_devices = (size_t)count;
    cb->devices = devices;
    cb->base.driver_calls = calls;
    gpumem__mutex_init(&cb->lock, GPUMEM_RANK_CUDA);
    cb->base.ops = any_vmm ? &cuda_vmm_ops : &cuda_ops;
    cb->base.regions_contiguous = false; /* separate cuMemAlloc blocks */
    cb->base.host_accessible = false;
    cb->base.process_bound = true; /* cuInit's state and the device handles */
    gpumem__log(opts, GPUMEM_LOG_INFO,
                "gpumem: CUDA driver '%s': %d device%s, virtual memory management %s",
                library, count, count == 1 ? "" : "s",
                any_vmm             ? "available"
                : vmm_api           ? "not supported by the devices"
                : opts->cuda_no_vmm ? "turned off (GPUMEM_CUDA_VMM)"
                                    : "not offered by the driver");
    *out = &cb->base;
    return GPUMEM_OK;
}

gpumem_status gpumem__cuda_open_api(const struct options *opts,
                                    const struct cuda_api *api, struct backend **out,
                                    struct reason *why)
{
    return open_with(opts, api, "(a table of entry points)", NULL, out, NULL, why);
}

/* dlsym into a function pointer without the object-to-function cast that ISO C
 * leaves undefined: the bytes of the address are copied. */
_Static_assert(sizeof(void *) == sizeof(cuda_fn_cuInit),
               "function and object pointers differ in size");
static void lookup_symbol(void *lib, const char *name, void *fn_slot)
{
    void *sym = dlsym(lib, name);
    memcpy(fn_slot, &sym, sizeof sym);
}

gpumem_status gpumem__cuda_open(const struct options *opts, struct backend **out,
                                bool *broken, struct reason *why)
{
    *broken = false;
    const char *library = opts->cuda_library[0] ? opts->cuda_library : DEFAULT_LIBRARY;
    dlerror();
    void *lib = dlopen(library, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *dl = dlerror();
        return library_fail(opts, why, "cannot load the CUDA driver library '%s': %s",
                            library, dl ? dl : "dlopen failed");
    }
    struct cuda_api api;
    memset(&api, 0, sizeof api);
#define CUDA_RESOLVE(name, params) lookup_symbol(lib, #name, &api.name);
    CUDA_API_ALL(CUDA_RESOLVE)
#undef CUDA_RESOLVE
    /* Drivers before CUDA 11 have only the unversioned name. */
    if (!api.cuDevicePrimaryCtxRelease_v2)
        lookup_symbol(lib, "cuDevicePrimaryCtxRelease",
                      &api.cuDevicePrimaryCtxRelease_v2);
    /* and before CUDA 11.4 only cuDeviceGetUuid, the same for a whole GPU */
    if (!api.cuDeviceGetUuid_v2)
        lookup_symbol(lib, "cuDeviceGetUuid", &api.cuDeviceGetUuid_v2);
    gpumem_status s = open_with(opts, &api, library, lib, out, broken, why);
    if (s != GPUMEM_OK)
        dlclose(lib);
    return s;
}
