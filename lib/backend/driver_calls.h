/* The driver's price, counted: for each CUDA driver entry point gpumem calls after
 * a backend is open, per physical device, the calls made, the nanoseconds spent
 * inside them (CLOCK_MONOTONIC read around each) and the bytes the memory calls
 * were given (issue 31). A real driver call costs about a microsecond and a
 * mapping tens of them, which a test double or a simulated GPU answering at once
 * would hide: counting them keeps that cost in sight on every backend.
 *
 * Who counts: the CUDA backend, every call it makes (cuda.c); the simulated
 * GPUs, for each of their operations, the calls the CUDA backend makes for the
 * same operation (sim.c), so that a simulated GPU shows what a real one would be
 * asked. Not counted: the calls made while the driver is opened (cuInit and the
 * device queries, once per runtime, before any device has counters) and the
 * error texts of a failed call (cuGetErrorName, cuGetErrorString).
 *
 * Threads: counters are relaxed atomics, added to by any thread (backend calls
 * run concurrently, some under a pool's lock) and read by any; a reading is a
 * sum of counters, not a snapshot of the three together. Only paths that make a
 * driver call count: nothing is added to a path that makes none. */
#ifndef GPUMEM_DRIVER_CALLS_H
#define GPUMEM_DRIVER_CALLS_H

#include "platform.h"

#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* The entry points, in the order gpumem_list_driver_calls lists them. cuda_api.h
 * declares each one the CUDA backend calls; cuStreamWaitEvent is listed before
 * any code calls it, so that the list and its order need not change when
 * stream-ordered frees start ordering streams with it. */
#define GPUMEM_DRIVER_CALLS(X)                                                           \
    X(cuCtxPushCurrent_v2)                                                               \
    X(cuCtxPopCurrent_v2)                                                                \
    X(cuDevicePrimaryCtxRetain)                                                          \
    X(cuDevicePrimaryCtxRelease_v2)                                                      \
    X(cuMemGetInfo_v2)                                                                   \
    X(cuMemAlloc_v2)                                                                     \
    X(cuMemFree_v2)                                                                      \
    X(cuMemAddressReserve)                                                               \
    X(cuMemAddressFree)                                                                  \
    X(cuMemCreate)                                                                       \
    X(cuMemMap)                                                                          \
    X(cuMemSetAccess)                                                                    \
    X(cuMemUnmap)                                                                        \
    X(cuMemRelease)                                                                      \
    X(cuMemGetAllocationGranularity)                                                     \
    X(cuEventCreate)                                                                     \
    X(cuEventDestroy_v2)                                                                 \
    X(cuEventRecord)                                                                     \
    X(cuEventQuery)                                                                      \
    X(cuEventSynchronize)                                                                \
    X(cuStreamWaitEvent)

enum driver_call {
#define GPUMEM_DRIVER_CALL_ENUM(name) DRIVER_##name,
    GPUMEM_DRIVER_CALLS(GPUMEM_DRIVER_CALL_ENUM)
#undef GPUMEM_DRIVER_CALL_ENUM
        DRIVER_CALL_COUNT
};

/* One entry point on one device. */
struct driver_counter {
    _Atomic uint64_t calls; /* made, failed ones included */
    _Atomic uint64_t ns;    /* spent inside them */
    _Atomic uint64_t bytes; /* the sizes the memory calls were given; 0 for others */
};

/* One device's counters, zero when made. */
struct driver_counts {
    struct driver_counter kind[DRIVER_CALL_COUNT];
};

/* What a reading adds up: plain numbers, a copy of counters. */
struct driver_call_totals {
    uint64_t calls, ns, bytes;
};

/* driver_calls.c: the entry point's symbol, "cuMemMap"; NULL past the last. */
const char *gpumem__driver_call_name(enum driver_call k);

/* driver_calls.c: counters for `devices` devices, zeroed; NULL when host
 * memory ran out. Freed with free(). */
struct driver_counts *gpumem__driver_counts_new(size_t devices);

/* driver_calls.c: adds devices [first, last] of `counts` into
 * totals[DRIVER_CALL_COUNT] (which the caller zeroed). */
void gpumem__driver_counts_add(struct driver_counts *counts, size_t first, size_t last,
                               struct driver_call_totals *totals);

/* Now, for the time a call takes: read before a call and handed to
 * gpumem__driver_counted after it. */
static inline uint64_t gpumem__driver_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Counts one call of `k` that took `ns` and was given `bytes`. */
static inline void gpumem__driver_count(struct driver_counts *c, enum driver_call k,
                                        uint64_t ns, uint64_t bytes)
{
    struct driver_counter *n = &c->kind[k];
    atomic_fetch_add_explicit(&n->calls, 1, memory_order_relaxed);
    if (ns)
        atomic_fetch_add_explicit(&n->ns, ns, memory_order_relaxed);
    if (bytes)
        atomic_fetch_add_explicit(&n->bytes, bytes, memory_order_relaxed);
}

/* Counts one call of `k` made since t0 (gpumem__driver_clock()), given `bytes`. */
static inline void gpumem__driver_counted(struct driver_counts *c, enum driver_call k,
                                          uint64_t t0, uint64_t bytes)
{
    gpumem__driver_count(c, k, gpumem__driver_clock() - t0, bytes);
}

#endif /* GPUMEM_DRIVER_CALLS_H */
