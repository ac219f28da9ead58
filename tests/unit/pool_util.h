/* The pool tests' fixture: options, a simulated backend and a region map, and
 * pools made over them on simulated GPU 0 (test_pool.c, test_snapshot.c). One
 * fixture at a time per test program: the state is file-static. */
#ifndef GPUMEM_TEST_POOL_UTIL_H
#define GPUMEM_TEST_POOL_UTIL_H

#include "harness.h"
#include "pool.h"

#include <stdio.h>

static struct options opts;
static struct backend *backend;
static struct region_map map;
/* The reason of the last pool or backend call that failed. */
static struct reason why;

/* Simulated GPUs `devices` (GPUMEM_SIM_DEVICES syntax), the environment ignored. */
static inline void pool_fixture_open(const char *devices)
{
    gpumem_options u;
    gpumem_options_init(&u);
    u.flags = GPUMEM_OPTIONS_IGNORE_ENVIRONMENT;
    u.backend = GPUMEM_BACKEND_SIM;
    u.sim_devices = devices;
    if (gpumem__options_load(&u, &opts) != GPUMEM_OK ||
        gpumem__sim_open(&opts, &backend, &why) != GPUMEM_OK)
        HARNESS_FAIL("setup: %s / %s", gpumem_last_error(), why.text);
    gpumem__region_map_init(&map);
}

/* The same, the simulated GPUs without their address spaces (CUDA's virtual
 * memory management, which they model): growing pools take plain regions from the
 * device's own address space, where regions that touch join, for the tests of
 * plain regions. */
static inline void pool_fixture_open_plain(const char *devices)
{
    static struct backend_ops plain;
    pool_fixture_open(devices);
    plain = *backend->ops;
    plain.space_granularity = NULL;
    plain.space_alloc_range = NULL;
    plain.space_free_range = NULL;
    plain.space_map = NULL;
    plain.space_unmap = NULL;
    backend->ops = &plain;
}

static inline void pool_fixture_close(void)
{
    gpumem__region_map_destroy(&map);
    backend->ops->destroy(backend);
}

/* A pool of `budget` bytes on GPU 0, "/device:GPU:0", growing or greedy. */
static inline struct pool *make_pool(uint64_t budget, bool growth)
{
    struct pool_params p = {.backend = backend,
                            .device = 0,
                            .budget = budget,
                            .growth = growth,
                            .budget_reason = "test budget",
                            .map = &map,
                            .opts = &opts};
    snprintf(p.label, sizeof p.label, "/device:GPU:0");
    struct pool *pool = NULL;
    ASSERT_OK(gpumem__pool_create(&p, &pool, &why));
    return pool;
}

#endif /* GPUMEM_TEST_POOL_UTIL_H */
