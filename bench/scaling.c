/* gpumem-scaling: how the arena's cost grows with the number of chunks and with
 * the bytes of a pool.
 *
 *   gpumem-scaling [--json] [--quick]
 *
 * Live chunks: for N = 1,000 ... 1,000,000, an arena over one region is filled
 * with N live chunks of 1 to 64 granules (256 B to 16 KiB, uniform) among free
 * holes (a random live chunk is freed after every other allocation), then churn
 * is timed: pairs of (free a live chunk, allocate a random size in its place), the
 * victim chosen uniformly among all N ("random") or among the 1,000 allocated last
 * ("recent"). Reported: ns per operation (the median of 5 runs of each), and host
 * metadata per live chunk and per chunk (live + free), measured after the fill.
 * The fill leaves holes (about one free chunk for ten live), as best fit does.
 * The tlsf baseline (bench/alloc_baselines.c: LIFO lists, no tree, no search)
 * runs the same sizes and victims beside it: what it loses from 1,000 to
 * 1,000,000 chunks is the memory system's share (records, hash slots and
 * neighbours no longer in cache), which no index structure can avoid. Both are
 * driven through bench/allocators.h, as in gpumem-replay. Beside them, the memory
 * system itself: ns per load when each load's address comes from the one before
 * (a pointer chase through one random cycle over the cache lines of a buffer as
 * large as the arena's metadata, allocated as the arena allocates it): what a
 * free waits for, at the least, to find a victim's record among N at random.
 *
 * Pool creation: gpumem__arena_create plus one add_region of 1 GiB, 80 GiB and
 * 1 TiB (median of 101), and, for the whole public path, gpumem_runtime_create on
 * a simulated GPU of that size plus gpumem_initialize with a greedy pool that
 * reserves all of it (median of 11; the simulated GPU's mmap is included). */
#include "allocators.h"
#include "arena.h"
#include "bench_version.h"
#include "gpumem.h"
#include "platform.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#define BASE         (UINT64_C(1) << 40)
#define MAX_GRANULES 64
#define RUNS         5

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t rng_state = 12345;

static uint64_t rnd(void)
{
    uint64_t x = rng_state += UINT64_C(0x9E3779B97F4A7C15);
    x = (x ^ (x >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94D049BB133111EB);
    return x ^ (x >> 31);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n);
    if (!p) {
        fprintf(stderr, "gpumem-scaling: out of host memory\n");
        exit(2);
    }
    return p;
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

static double median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int fail(const char *what)
{
    fprintf(stderr, "gpumem-scaling: %s failed\n", what);
    return 1;
}

/* ns per dependent load over `bytes` (see the top of the file): a buffer of that
 * many bytes, rounded up to a 2 MiB huge page and advised as huge pages when it
 * is at least one, as the arena's default host allocator does; one random cycle
 * through its cache lines (Sattolo's shuffle); the median of RUNS walks of
 * `steps` loads after one untimed walk. 0 if host memory runs out. */
struct line { /* one cache line */
    struct line *next;
    char pad[64 - sizeof(struct line *)];
};
_Static_assert(sizeof(struct line) == 64, "a struct line is one 64-byte cache line");

static double dependent_load_ns(size_t bytes, size_t steps)
{
    const size_t huge = (size_t)2 << 20;
    if (bytes >= huge)
        bytes = (bytes + huge - 1) & ~(huge - 1);
    size_t lines = bytes / sizeof(struct line);
    if (lines < 2)
        return 0;
    void *mem = NULL;
    if (posix_memalign(&mem, bytes >= huge ? huge : sizeof(struct line), bytes) != 0)
        return 0;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (bytes >= huge)
        madvise(mem, bytes, MADV_HUGEPAGE);
#endif
    size_t *order = xmalloc(lines * sizeof *order);
    for (size_t i = 0; i < lines; i++)
        order[i] = i;
    for (size_t i = lines - 1; i > 0; i--) { /* Sattolo: one cycle through all */
        size_t j = (size_t)(rnd() % i), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    struct line *line = mem;
    for (size_t i = 0; i < lines; i++) /* line i leads to line order[i] */
        line[i].next = &line[order[i]];
    free(order);
    double ns[RUNS];
    struct line *p = line;
    for (size_t i = 0; i < lines; i++) /* untimed: pages touched, caches as they settle */
        p = p->next;
    for (int r = 0; r < RUNS; r++) {
        uint64_t t0 = now_ns();
        for (size_t i = 0; i < steps; i++)
            p = p->next;
        ns[r] = (double)(now_ns() - t0) / (double)steps;
    }
    /* the walk's end is used, so that the loop is not optimized away */
    if (p == NULL)
        fprintf(stderr, "gpumem-scaling: the pointer chase broke\n");
    free(mem);
    return median(ns, RUNS);
}

/* The churn of one allocator over N live chunks (see the top of the file): fills
 * it, reads its stats after the fill into *st (NULL: not wanted), then times both
 * patterns. Returns 0, or 1 on an unexpected failure (the pool is sized so that
 * none can happen). med[0] is random, med[1] recent. */
static int churn(const struct bench_allocator *A, size_t n, size_t pairs,
                 struct bench_stats *st, double med[2])
{
    uint64_t *live = xmalloc(n * sizeof *live);
    uint32_t *victim = xmalloc(pairs * sizeof *victim);
    uint32_t *gran = xmalloc(pairs * sizeof *gran);
    /* room for 2N chunks of the largest size, so that the churn never runs out */
    struct bench_config cfg = {.capacity =
                                   2 * (uint64_t)n * MAX_GRANULES * ARENA_GRANULE * 2,
                               .growth = false};
    void *ctx = A->create(&cfg);
    if (!ctx)
        return fail(A->name);
    /* every allocator sees the same sizes and victims */
    rng_state = 12345;
    /* fill: allocate, and after every other allocation free a random live chunk,
     * until N are live: holes everywhere, and the chunk count never above its end */
    size_t nlive = 0;
    for (uint64_t k = 0; nlive < n; k++) {
        if (A->alloc(ctx, (1 + rnd() % MAX_GRANULES) * ARENA_GRANULE, &live[nlive++]))
            return fail("alloc (fill)");
        if (k % 2 && nlive < n) {
            size_t j = (size_t)(rnd() % nlive);
            A->free(ctx, live[j]);
            live[j] = live[--nlive];
        }
    }
    if (st)
        A->stats(ctx, st);
    /* two patterns, each timed RUNS times (the median counts), the random choices
     * drawn before the clock starts:
     *   random: free a live chunk chosen uniformly among all N, allocate a random
     *           size in its place (every operation a cache miss at large N);
     *   recent: the same over the 1,000 chunks allocated last (a FIFO window), the
     *           other N - 1,000 staying put: the access locality of a real
     *           program, so that what grows with N is the allocator's own work */
    double ns[2][RUNS];
    size_t window = n < 1000 ? n : 1000;
    for (int pattern = 0; pattern < 2; pattern++) {
        for (int r = 0; r < RUNS; r++) {
            for (size_t i = 0; i < pairs; i++) {
                victim[i] = pattern == 0 ? (uint32_t)(rnd() % n)
                                         : (uint32_t)(n - window + i % window);
                gran[i] = (uint32_t)(1 + rnd() % MAX_GRANULES);
            }
            size_t bad = 0;
            uint64_t t0 = now_ns();
            for (size_t i = 0; i < pairs; i++) {
                uint64_t *slot = &live[victim[i]];
                A->free(ctx, *slot);
                bad += A->alloc(ctx, (uint64_t)gran[i] * ARENA_GRANULE, slot) != 0;
            }
            ns[pattern][r] = (double)(now_ns() - t0) / (2.0 * (double)pairs);
            if (bad)
                return fail("churn");
        }
        med[pattern] = median(ns[pattern], RUNS);
    }
    A->destroy(ctx);
    free(live);
    free(victim);
    free(gran);
    return 0;
}

/* One N: the arena, then the tlsf baseline on the same sizes and victims (no tree
 * and no search at all: what it loses at large N is the memory system's share).
 * Returns 0, or 1 on an unexpected failure. */
static int live_chunks(size_t n, size_t pairs, bool json)
{
    struct bench_stats s;
    double arena[2], tlsf[2];
    if (churn(&bench_arena_allocator, n, pairs, &s, arena) ||
        churn(&bench_tlsf_allocator, n, pairs, NULL, tlsf))
        return 1;
    double load = dependent_load_ns((size_t)s.metadata_bytes, 2 * pairs);
    double per_live = (double)s.metadata_bytes / (double)s.live_chunks;
    double per_chunk = (double)s.metadata_bytes / (double)(s.live_chunks + s.free_chunks);
    if (json)
        printf(
            "{\"kind\": \"live_chunks\", \"live_chunks\": %llu, \"free_chunks\": %llu, "
            "\"ns_per_op_recent\": %.2f, \"ns_per_op_random\": %.2f, "
            "\"tlsf_ns_per_op_recent\": %.2f, \"tlsf_ns_per_op_random\": %.2f, "
            "\"dependent_load_ns\": %.2f, \"metadata_bytes\": %llu, "
            "\"metadata_per_live_chunk\": %.1f, \"metadata_per_chunk\": %.1f}\n",
            (unsigned long long)s.live_chunks, (unsigned long long)s.free_chunks,
            arena[1], arena[0], tlsf[1], tlsf[0], load,
            (unsigned long long)s.metadata_bytes, per_live, per_chunk);
    else
        printf("%10llu %10llu %12.1f %12.1f %12.1f %12.1f %12.1f %14llu %12.1f %12.1f\n",
               (unsigned long long)s.live_chunks, (unsigned long long)s.free_chunks,
               arena[1], arena[0], tlsf[1], tlsf[0], load,
               (unsigned long long)s.metadata_bytes, per_live, per_chunk);
    return 0;
}

static int pool_creation(uint64_t bytes, const char *label, bool json, bool quick)
{
    enum { ARENA_RUNS = 101, API_RUNS = 11 };
    double t_arena[ARENA_RUNS], t_api[API_RUNS];
    uint64_t meta = 0;
    for (int r = 0; r < ARENA_RUNS; r++) {
        struct arena *a;
        uint64_t t0 = now_ns();
        if (gpumem__arena_create(NULL, &a) != ARENA_OK ||
            gpumem__arena_add_region(a, BASE, bytes, true) != ARENA_OK)
            return fail("arena pool creation");
        t_arena[r] = (double)(now_ns() - t0) / 1e3;
        struct arena_stats s;
        gpumem__arena_stats(a, &s);
        meta = s.metadata_bytes;
        gpumem__arena_destroy(a);
    }
    int api_runs = quick ? 3 : API_RUNS;
    for (int r = 0; r < api_runs; r++) {
        char dev[64];
        snprintf(dev, sizeof dev, "%lluB", (unsigned long long)(bytes + 64 * GPUMEM_MIB));
        gpumem_options o;
        gpumem_options_init(&o);
        o.flags = GPUMEM_OPTIONS_IGNORE_ENVIRONMENT;
        o.backend = GPUMEM_BACKEND_SIM;
        o.sim_devices = dev;
        gpumem_logical_device_config ld = GPUMEM_LOGICAL_DEVICE_LIMIT(bytes);
        gpumem_runtime *rt;
        uint64_t t0 = now_ns();
        if (gpumem_runtime_create(&o, &rt) != GPUMEM_OK ||
            gpumem_set_logical_device_configuration(rt, 0, &ld, 1) != GPUMEM_OK ||
            gpumem_initialize(rt) != GPUMEM_OK) {
            fprintf(stderr, "gpumem-scaling: %s\n", gpumem_last_error());
            return fail("api pool creation");
        }
        t_api[r] = (double)(now_ns() - t0) / 1e3;
        gpumem_runtime_destroy(rt);
    }
    double ta = median(t_arena, ARENA_RUNS), tp = median(t_api, (size_t)api_runs);
    if (json)
        printf("{\"kind\": \"pool_creation\", \"pool\": \"%s\", \"bytes\": %llu, "
               "\"arena_us\": %.2f, \"arena_metadata_bytes\": %llu, \"api_us\": %.2f}\n",
               label, (unsigned long long)bytes, ta, (unsigned long long)meta, tp);
    else
        printf("%10s %14.2f %16llu %14.2f\n", label, ta, (unsigned long long)meta, tp);
    return 0;
}

int main(int argc, char **argv)
{
    bool json = false, quick = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = true;
        } else if (strcmp(argv[i], "--quick") == 0) {
            quick = true;
        } else {
            fprintf(stderr, "usage: gpumem-scaling [--json] [--quick]\n");
            return 2;
        }
    }
#if !defined(__OPTIMIZE__)
    fprintf(stderr,
            "\n*** gpumem-scaling was built WITHOUT OPTIMIZATION: its timings mean "
            "nothing. ***\n\n");
#endif
    if (!json)
        printf("# gpumem-scaling %s, compiler %s, build type %s\n", BENCH_GIT_REVISION,
               BENCH_COMPILER, BENCH_BUILD_TYPE);
    static const size_t sizes[] = {1000, 10000, 100000, 1000000};
    if (!json)
        printf("%10s %10s %12s %12s %12s %12s %12s %14s %12s %12s\n", "live", "free",
               "ns/op recent", "ns/op random", "tlsf recent", "tlsf random", "ns/load",
               "metadata B", "B/live", "B/chunk");
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        if (quick && sizes[i] > 10000)
            break;
        if (live_chunks(sizes[i], quick ? 20000 : 500000, json))
            return 1;
    }
    if (!json)
        printf("%10s %14s %16s %14s\n", "pool", "arena us", "arena metadata B", "api us");
    static const struct {
        uint64_t bytes;
        const char *label;
    } pools[] = {{GPUMEM_GIB, "1GiB"}, {80 * GPUMEM_GIB, "80GiB"}, {GPUMEM_TIB, "1TiB"}};
    for (size_t i = 0; i < sizeof pools / sizeof pools[0]; i++)
        if (pool_creation(pools[i].bytes, pools[i].label, json, quick))
            return 1;
    return 0;
}
