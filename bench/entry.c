/* gpumem-entry: the cost of each allocation entry point against plain
 * gpumem_malloc/gpumem_free (issue 21, item 8), on a simulated GPU.
 *
 *   gpumem-entry [--threads N] [--pairs N] [--variant NAME] [--runs N]
 *
 * Variants: plain (gpumem_malloc + gpumem_free), async (gpumem_malloc_async +
 * gpumem_free_async on the thread's own stream), torch (gpumem_torch_malloc +
 * gpumem_torch_free, as PyTorch calls them), torch-alloc (gpumem_torch_alloc +
 * gpumem_torch_free), allocator (the gpumem_allocator struct's async entries).
 * Every variant runs on the default runtime (GPUMEM_BACKEND=sim, set here before
 * its first use, one simulated GPU of 8 GiB, growth on), which is what the
 * PyTorch pair uses. Each thread keeps 64 slots live and, for each of `pairs`
 * steps, frees one slot and allocates it again, sizes cycling through 64
 * values from 256 B to 1 MiB; a step is one (free, allocate) pair. Printed: one
 * line per variant with the median ns per pair over `runs` runs (the threads'
 * pairs divided by the wall time of the run, times the threads: ns of one
 * thread's pair), and the ratio to plain measured in the same process.
 * Under callgrind, the pairs run inside bench_entry_<variant> (one thread, and
 * --toggle-collect='bench_entry_*' counts them alone); divide by `pairs`. */
#include "gpumem.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__GNUC__)
#define NOINLINE __attribute__((noinline))
#else
#define NOINLINE
#endif

#define SLOTS 64

static size_t sizes[SLOTS];

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void die(const char *what)
{
    fprintf(stderr, "gpumem-entry: %s failed: %s\n", what, gpumem_last_error());
    exit(2);
}

struct worker {
    int id;
    long pairs;
    void *(*loop)(struct worker *w);
    pthread_t thread;
    void *slot[SLOTS];
    void *stream;
};

NOINLINE static void *bench_entry_plain(struct worker *w)
{
    for (long i = 0; i < w->pairs; i++) {
        int k = (int)(i % SLOTS);
        if (gpumem_free(NULL, w->slot[k]) != GPUMEM_OK ||
            gpumem_malloc(NULL, 0, sizes[(k + i) % SLOTS], &w->slot[k]) != GPUMEM_OK)
            die("plain");
    }
    return NULL;
}

NOINLINE static void *bench_entry_async(struct worker *w)
{
    for (long i = 0; i < w->pairs; i++) {
        int k = (int)(i % SLOTS);
        if (gpumem_free_async(NULL, w->slot[k], w->stream) != GPUMEM_OK ||
            gpumem_malloc_async(NULL, 0, sizes[(k + i) % SLOTS], w->stream,
                                &w->slot[k]) != GPUMEM_OK)
            die("async");
    }
    return NULL;
}

NOINLINE static void *bench_entry_torch(struct worker *w)
{
    for (long i = 0; i < w->pairs; i++) {
        int k = (int)(i % SLOTS);
        size_t size = sizes[(k + i) % SLOTS];
        gpumem_torch_free(w->slot[k], (gpumem_ssize)size, 0, w->stream);
        if (!(w->slot[k] = gpumem_torch_malloc((gpumem_ssize)size, 0, w->stream)))
            die("torch");
    }
    return NULL;
}

NOINLINE static void *bench_entry_torch_alloc(struct worker *w)
{
    for (long i = 0; i < w->pairs; i++) {
        int k = (int)(i % SLOTS);
        size_t size = sizes[(k + i) % SLOTS];
        gpumem_torch_free(w->slot[k], (gpumem_ssize)size, 0, w->stream);
        if (gpumem_torch_alloc((gpumem_ssize)size, 0, w->stream, &w->slot[k]) !=
            GPUMEM_OK)
            die("torch-alloc");
    }
    return NULL;
}

static gpumem_allocator allocator = GPUMEM_STRUCT_INIT(gpumem_allocator);

NOINLINE static void *bench_entry_allocator(struct worker *w)
{
    const gpumem_allocator *a = &allocator;
    for (long i = 0; i < w->pairs; i++) {
        int k = (int)(i % SLOTS);
        if (a->deallocate_async(a, w->slot[k], w->stream) != GPUMEM_OK ||
            a->allocate_async(a, sizes[(k + i) % SLOTS], w->stream, &w->slot[k]) !=
                GPUMEM_OK)
            die("allocator");
    }
    return NULL;
}

static const struct {
    const char *name;
    void *(*loop)(struct worker *w);
} variants[] = {
    {"plain", bench_entry_plain},         {"async", bench_entry_async},
    {"torch", bench_entry_torch},         {"torch-alloc", bench_entry_torch_alloc},
    {"allocator", bench_entry_allocator},
};
#define NVARIANTS (sizeof variants / sizeof variants[0])

static void *run_worker(void *arg)
{
    struct worker *w = arg;
    return w->loop(w);
}

/* One run of `loop` on n threads: ns per pair of one thread. */
static double run_once(void *(*loop)(struct worker *), int n, long pairs)
{
    struct worker *w = calloc((size_t)n, sizeof *w);
    if (!w)
        die("calloc");
    for (int t = 0; t < n; t++) {
        w[t] = (struct worker){.id = t, .pairs = pairs, .loop = loop};
        w[t].stream = (void *)(uintptr_t)(0x1000 + t);
        for (int k = 0; k < SLOTS; k++)
            if (gpumem_malloc(NULL, 0, sizes[k], &w[t].slot[k]) != GPUMEM_OK)
                die("gpumem_malloc (fill)");
    }
    uint64_t t0 = now_ns();
    if (n == 1) {
        run_worker(&w[0]);
    } else {
        for (int t = 0; t < n; t++)
            if (pthread_create(&w[t].thread, NULL, run_worker, &w[t]) != 0)
                die("pthread_create");
        for (int t = 0; t < n; t++)
            pthread_join(w[t].thread, NULL);
    }
    uint64_t elapsed = now_ns() - t0;
    for (int t = 0; t < n; t++)
        for (int k = 0; k < SLOTS; k++)
            if (gpumem_free(NULL, w[t].slot[k]) != GPUMEM_OK)
                die("gpumem_free (drain)");
    free(w);
    return (double)elapsed / (double)pairs; /* each thread made `pairs` pairs */
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

int main(int argc, char **argv)
{
    int threads = 1, runs = 9;
    long pairs = 200000;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--pairs") == 0 && i + 1 < argc)
            pairs = atol(argv[++i]);
        else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc)
            runs = atoi(argv[++i]);
        else if (strcmp(argv[i], "--variant") == 0 && i + 1 < argc)
            only = argv[++i];
        else {
            fprintf(stderr, "usage: gpumem-entry [--threads N] [--pairs N] [--runs N] "
                            "[--variant plain|async|torch|torch-alloc|allocator]\n");
            return 2;
        }
    }
    if (threads < 1 || threads > 64 || pairs < 1 || runs < 1 || runs > 101) {
        fprintf(stderr,
                "gpumem-entry: threads 1..64, pairs and runs (1..101) positive\n");
        return 2;
    }
    setenv("GPUMEM_BACKEND", "sim", 1);
    setenv("GPUMEM_SIM_DEVICES", "gpumem bench GPU:8GiB", 1);
    setenv("GPUMEM_FORCE_ALLOW_GROWTH", "true", 1);
    for (int k = 0; k < SLOTS; k++) /* 256 B .. 1 MiB, spread over the classes */
        sizes[k] = (size_t)256 << (k % 13);
    if (gpumem_get_allocator(NULL, 0, &allocator) != GPUMEM_OK)
        die("gpumem_get_allocator");
#if defined(__OPTIMIZE__)
    const char *opt = "optimized";
#else
    const char *opt = "NOT OPTIMIZED: figures mean little";
#endif
    printf("# gpumem-entry: %d thread%s, %ld pairs per thread, median of %d runs (%s)\n",
           threads, threads == 1 ? "" : "s", pairs, runs, opt);
    double plain = 0;
    double *t = calloc((size_t)runs, sizeof *t);
    if (!t)
        die("calloc");
    for (size_t v = 0; v < NVARIANTS; v++) {
        if (only && strcmp(only, variants[v].name) != 0)
            continue;
        run_once(variants[v].loop, threads, pairs / 10 + 1); /* warm-up */
        for (int r = 0; r < runs; r++)
            t[r] = run_once(variants[v].loop, threads, pairs);
        qsort(t, (size_t)runs, sizeof *t, cmp_double);
        double median = t[runs / 2];
        if (v == 0)
            plain = median;
        if (plain > 0)
            printf("%-12s %8.1f ns/pair  %5.2fx plain\n", variants[v].name, median,
                   median / plain);
        else
            printf("%-12s %8.1f ns/pair\n", variants[v].name, median);
    }
    free(t);
    return 0;
}
