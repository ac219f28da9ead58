/* Backend selection: GPUMEM_BACKEND=auto|cuda|sim (or gpumem_options.backend).
 * auto picks CUDA when the driver loads and reports a device, else the simulated
 * GPUs (the log says why: at INFO when there is no GPU, at WARNING when a driver
 * is there but fails cuInit, gpumem__warn); cuda without a usable driver fails runtime
 * creation with GPUMEM_ERR_BACKEND and the reason in one line; sim never looks
 * for a driver. A driver library named by GPUMEM_CUDA_LIBRARY that does not load,
 * or is not a driver, fails auto too: it is a bad value, not a machine without a
 * GPU. */
#include "backend/backend.h"

#include <stdio.h>

/* -------------------------------------------------------------- scopes -- */

/* The thread's context scope (backend.h): one device of one backend at a time. */
static _Thread_local struct {
    const struct backend *b;
    int dev;
    unsigned depth;   /* nesting of the scope of (b, dev) */
    unsigned foreign; /* scopes of other devices opened inside it: not scopes */
    bool pushed;      /* a call pushed the context: the scope pops it */
} scope;

void gpumem__backend_scope_open(struct backend *b, int dev)
{
    if (scope.depth == 0) {
        scope.b = b, scope.dev = dev, scope.depth = 1, scope.pushed = false;
    } else if (scope.b == b && scope.dev == dev && scope.foreign == 0) {
        scope.depth++;
    } else {
        scope.foreign++;
    }
}

void gpumem__backend_scope_close(struct backend *b, int dev)
{
    if (scope.foreign) {
        scope.foreign--;
        return;
    }
    if (scope.depth == 0 || --scope.depth > 0)
        return;
    bool pushed = scope.pushed;
    scope.pushed = false;
    scope.b = NULL;
    if (pushed && b->ops->scope_pop)
        b->ops->scope_pop(b, dev);
}

bool gpumem__backend_scoped(const struct backend *b, int dev)
{
    return scope.depth && !scope.foreign && scope.b == b && scope.dev == dev;
}

bool gpumem__backend_scope_push(const struct backend *b, int dev)
{
    if (!gpumem__backend_scoped(b, dev))
        return true;
    if (scope.pushed)
        return false;
    scope.pushed = true;
    return true;
}

void gpumem__backend_scope_push_failed(const struct backend *b, int dev)
{
    if (gpumem__backend_scoped(b, dev))
        scope.pushed = false;
}

void gpumem__format_uuid(const unsigned char bytes[16], char *out, size_t n)
{
    const unsigned char *b = bytes;
    snprintf(out, n,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11],
             b[12], b[13], b[14], b[15]);
}

gpumem_status gpumem__backend_open(const struct options *opts, struct backend **out,
                                   struct reason *why)
{
    struct reason inner;
    gpumem_status s;
    bool broken;
    /* In a forked child of a process where gpumem initialized the driver, CUDA
     * cannot work: say so, rather than fail a driver call, or fall back in
     * silence (auto) to simulated GPUs. */
    if (opts->backend == GPUMEM_BACKEND_CUDA || opts->backend == GPUMEM_BACKEND_AUTO)
        if ((s = gpumem__cuda_check_fork(why)) != GPUMEM_OK)
            return s;
    switch (opts->backend) {
    case GPUMEM_BACKEND_CUDA:
        s = gpumem__cuda_open(opts, out, &broken, &inner);
        if (s == GPUMEM_ERR_UNSUPPORTED || s == GPUMEM_ERR_BACKEND)
            return gpumem__reason(why, GPUMEM_ERR_BACKEND,
                                  "the CUDA backend (%s) is not available: %s",
                                  opts->backend_from_options
                                      ? "gpumem_options.backend = GPUMEM_BACKEND_CUDA"
                                      : "GPUMEM_BACKEND=cuda",
                                  inner.text);
        if (s != GPUMEM_OK)
            *why = inner;
        return s;
    case GPUMEM_BACKEND_AUTO:
        s = gpumem__cuda_open(opts, out, &broken, &inner);
        if (s !=
            GPUMEM_ERR_UNSUPPORTED) { /* CUDA, or a driver that is there but failed */
            if (s != GPUMEM_OK)
                *why = inner;
            return s;
        }
        if (broken) /* as TensorFlow logs a failed cuInit as an error */
            gpumem__warn(opts,
                         "gpumem: the CUDA driver is there but does not work (%s); "
                         "using simulated GPUs, not the GPU (GPUMEM_BACKEND=cuda makes "
                         "this an error)",
                         inner.text);
        else
            gpumem__log(opts, GPUMEM_LOG_INFO,
                        "gpumem: no CUDA (%s); using simulated GPUs", inner.text);
        return gpumem__sim_open(opts, out, why);
    case GPUMEM_BACKEND_SIM:
        return gpumem__sim_open(opts, out, why);
    default:
        return gpumem__reason(why, GPUMEM_ERR_INVALID_ARGUMENT, "unknown backend %d",
                              opts->backend);
    }
}
