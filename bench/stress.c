/* gpumem-stress: threads that allocate, free and give memory back at once on one
 * simulated GPU (issue 31: an independent stress run took 14.8 s at 2008bf4 and
 * 29.2 s later, its system calls gone from 26,036 futex and 30 mmap per 100,000
 * operations a thread to 196,996 and 87,304: releases unmapped free granules one
 * at a time under the pool's lock, and the next allocations mapped them back).
 *
 *   gpumem-stress [--threads N] [--ops N] [--release-every N] [--seed N]
 *
 * The public API only (it builds against any version of gpumem.h with
 * gpumem_release_unused), on a runtime of its own: one simulated GPU of 16 GiB,
 * growth on. Each of N threads (default 8) keeps 64 slots and, for each of `ops`
 * operations (default 1,000,000), frees a random slot if it is live or allocates
 * it (256 B to 8 MiB, log-uniform), and every `release-every` operations
 * (default 1,000) calls gpumem_release_unused on the GPU. Every allocation's
 * first and last bytes are written and checked at its free (memory handed to two
 * threads at once shows). Prints one line: threads, operations, wall seconds,
 * ns per operation per thread, releases and bytes released. Run it under
 * `strace -c -f` to count the system calls (bench/run_stress.sh). */
#include "gpumem.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SLOTS 64

struct worker {
    gpumem_runtime *rt;
    unsigned long ops, release_every;
    uint64_t rng;
    unsigned long releases, failures;
    uint64_t released;
    pthread_t thread;
};

static uint64_t next(uint64_t *s)
{
    uint64_t x = *s += UINT64_C(0x9E3779B97F4A7C15);
    x = (x ^ (x >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94D049BB133111EB);
    return x ^ (x >> 31);
}

static void *run(void *arg)
{
    struct worker *w = arg;
    unsigned char *slot[SLOTS] = {NULL};
    size_t size[SLOTS] = {0};
    unsigned char mark = (unsigned char)(w->rng | 1);
    for (unsigned long op = 1; op <= w->ops; op++) {
        uint64_t r = next(&w->rng);
        size_t k = (size_t)(r % SLOTS);
        if (slot[k]) {
            if (slot[k][0] != mark || slot[k][size[k] - 1] != mark)
                w->failures++;
            if (gpumem_free(w->rt, slot[k]) != GPUMEM_OK)
                w->failures++;
            slot[k] = NULL;
        } else {
            /* 2^8 to 2^23 bytes, log-uniform, then a random fraction more */
            size_t s = (size_t)1 << (8 + (r >> 8) % 16);
            s += (size_t)((r >> 16) % s);
            if (gpumem_malloc(w->rt, 0, s, (void **)&slot[k]) != GPUMEM_OK) {
                w->failures++;
                slot[k] = NULL;
                continue;
            }
            size[k] = s;
            slot[k][0] = slot[k][s - 1] = mark;
        }
        if (w->release_every && op % w->release_every == 0) {
            uint64_t bytes = 0;
            if (gpumem_release_unused(w->rt, 0, &bytes) != GPUMEM_OK)
                w->failures++;
            w->releases++;
            w->released += bytes;
        }
    }
    for (size_t k = 0; k < SLOTS; k++)
        if (slot[k] && gpumem_free(w->rt, slot[k]) != GPUMEM_OK)
            w->failures++;
    return NULL;
}

static unsigned long arg_value(int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        fprintf(stderr, "gpumem-stress: %s takes a number\n", argv[*i]);
        exit(2);
    }
    char *end;
    unsigned long v = strtoul(argv[++*i], &end, 10);
    if (*end) {
        fprintf(stderr, "gpumem-stress: %s takes a number, not '%s'\n", argv[*i - 1],
                argv[*i]);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    unsigned long threads = 8, ops = 1000000, release_every = 1000, seed = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0)
            threads = arg_value(argc, argv, &i);
        else if (strcmp(argv[i], "--ops") == 0)
            ops = arg_value(argc, argv, &i);
        else if (strcmp(argv[i], "--release-every") == 0)
            release_every = arg_value(argc, argv, &i);
        else if (strcmp(argv[i], "--seed") == 0)
            seed = arg_value(argc, argv, &i);
        else {
            fprintf(stderr, "usage: gpumem-stress [--threads N] [--ops N] "
                            "[--release-every N] [--seed N]\n");
            return 2;
        }
    }
    if (threads == 0 || threads > 256) {
        fprintf(stderr, "gpumem-stress: --threads takes 1 to 256\n");
        return 2;
    }
    setenv("GPUMEM_BACKEND", "sim", 1);
    setenv("GPUMEM_SIM_DEVICES", "16GiB", 1);
    setenv("GPUMEM_LEDGER", "off", 1);
    gpumem_runtime *rt = NULL;
    if (gpumem_runtime_create(NULL, &rt) != GPUMEM_OK ||
        gpumem_set_memory_growth(rt, 0, true) != GPUMEM_OK ||
        gpumem_initialize(rt) != GPUMEM_OK) {
        fprintf(stderr, "gpumem-stress: %s\n", gpumem_last_error());
        return 1;
    }
    struct worker *w = calloc(threads, sizeof *w);
    if (!w)
        return 1;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (unsigned long i = 0; i < threads; i++) {
        w[i] = (struct worker){.rt = rt,
                               .ops = ops,
                               .release_every = release_every,
                               .rng = seed * 1000003u + i};
        if (pthread_create(&w[i].thread, NULL, run, &w[i]) != 0) {
            fprintf(stderr, "gpumem-stress: pthread_create failed\n");
            return 1;
        }
    }
    unsigned long releases = 0, failures = 0;
    uint64_t released = 0;
    for (unsigned long i = 0; i < threads; i++) {
        pthread_join(w[i].thread, NULL);
        releases += w[i].releases;
        failures += w[i].failures;
        released += w[i].released;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("threads %lu ops %lu release_every %lu seconds %.3f ns_per_op %.1f "
           "releases %lu released_mib %.1f failures %lu\n",
           threads, ops, release_every, s, s * 1e9 / (double)ops, releases,
           (double)released / (1 << 20), failures);
    gpumem_runtime_destroy(rt);
    free(w);
    return failures ? 1 : 0;
}
