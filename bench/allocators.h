/* The allocators gpumem-replay drives, behind one small table of functions.
 *
 * Each allocator hands out `handles` (a device address, or a host pointer for
 * malloc) and frees them by handle, the way a runtime frees a pointer: lookup is
 * the allocator's own business. The replay calls alloc and free through the
 * table only, so that callgrind can count exactly the instructions spent inside
 * them: every allocator's two entry points are named bench_op_<name>_alloc and
 * bench_op_<name>_free (callgrind --toggle-collect='bench_op_*'); free_untimed
 * does what free does under another name, for the frees that are not the
 * trace's own (what a replay leaves live). */
#ifndef GPUMEM_BENCH_ALLOCATORS_H
#define GPUMEM_BENCH_ALLOCATORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__clang__)
#define BENCH_ENTRY __attribute__((noinline))
#elif defined(__GNUC__)
#define BENCH_ENTRY __attribute__((noinline, noclone))
#else
#define BENCH_ENTRY
#endif

struct bench_config {
    uint64_t capacity; /* bytes the allocator may hand out (fixed pool or limit) */
    bool growth;       /* api only: grow on demand up to `capacity` */
    /* clairvoyant only: per allocation of the trace, in order, the number of
     * allocations made before it is freed (UINT64_MAX: never); nallocs entries */
    const uint64_t *free_clock;
    size_t nallocs;
};

/* The CUDA driver calls an allocator made so far, per entry point
 * (gpumem_list_driver_calls of every GPU): gpumem's own allocators count them. */
#define BENCH_DRIVER_KINDS 64
struct bench_driver_calls {
    size_t n; /* entries; 0: the allocator counts none */
    struct {
        char name[48];
        uint64_t calls, ns, bytes;
    } e[BENCH_DRIVER_KINDS];
};

struct bench_stats {
    uint64_t peak_reserved;  /* bytes taken from the "device"; 0 = not tracked */
    uint64_t metadata_bytes; /* host bytes of the allocator's bookkeeping; 0 = unknown */
    uint64_t live_chunks;    /* chunks handed out; 0 = not tracked */
    uint64_t free_chunks;    /* free chunks; 0 = not tracked */
};

struct bench_allocator {
    const char *name;
    const char *about; /* one line for --help */
    bool has_capacity; /* false: capacity is not enforced (malloc) */
    bool has_growth;
    /* Returns NULL and prints why on failure. */
    void *(*create)(const struct bench_config *cfg);
    void (*destroy)(void *ctx);
    /* 0 on success; anything else is a failed allocation (*handle untouched). */
    int (*alloc)(void *ctx, uint64_t size, uint64_t *handle);
    void (*free)(void *ctx, uint64_t handle);
    void (*free_untimed)(void *ctx, uint64_t handle);
    void (*stats)(void *ctx, struct bench_stats *out);
    /* The driver calls so far; NULL for an allocator that makes none it counts. */
    void (*driver_calls)(void *ctx, struct bench_driver_calls *out);
};

extern const struct bench_allocator bench_arena_allocator;
extern const struct bench_allocator bench_api_allocator;
extern const struct bench_allocator bench_api_cuda_allocator;
extern const struct bench_allocator bench_api_async_allocator;
extern const struct bench_allocator bench_api_cuda_async_allocator;
extern const struct bench_allocator bench_first_fit_allocator;
extern const struct bench_allocator bench_tlsf_allocator;
extern const struct bench_allocator bench_malloc_allocator;
extern const struct bench_allocator bench_clairvoyant_allocator;

#endif /* GPUMEM_BENCH_ALLOCATORS_H */
