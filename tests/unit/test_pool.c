/* Pools over the simulated backend: greedy reservation, growth by the shortfall,
 * never past the budget, release of whole free regions (and before an
 * out-of-memory), counters and peaks, and the region map used by free. */
#include "pool_util.h"

#include <pthread.h>
#include <string.h>

static void setup(const char *devices) { pool_fixture_open(devices); }

/* Simulated GPUs without address spaces: for the tests of plain regions, their
 * placement in the device's own address space and their region-map entries. */
static void setup_plain(const char *devices) { pool_fixture_open_plain(devices); }

static void teardown(void)
{
    ASSERT_EQ(map.count, 0); /* every pool gave its regions back */
    ASSERT_EQ(map.promised, 0);
    pool_fixture_close();
}

static uint64_t device_free(void)
{
    uint64_t f, t;
    backend->ops->mem_info(backend, 0, &f, &t, &why);
    return f;
}

static gpumem_memory_info info(struct pool *pool)
{
    gpumem_memory_info i = GPUMEM_STRUCT_INIT(gpumem_memory_info);
    gpumem__pool_info(pool, &i);
    return i;
}

TEST(greedy_reserves_the_budget_up_front)
{
    setup("pool-greedy:8GiB");
    struct pool *pool = make_pool(6 * GPUMEM_GIB, false);
    ASSERT_EQ(info(pool).reserved_bytes, 0);
    ASSERT_OK(gpumem__pool_take_budget(pool, &why));
    ASSERT_EQ(info(pool).reserved_bytes, 6 * GPUMEM_GIB);
    ASSERT_EQ(info(pool).largest_free_block, 6 * GPUMEM_GIB);
    ASSERT_EQ(device_free(), 2 * GPUMEM_GIB);
    uint64_t a;
    ASSERT_OK(gpumem__pool_alloc(pool, 100, &a, &why));
    ASSERT_EQ(info(pool).current_bytes, 256);
    ASSERT_EQ(info(pool).reserved_bytes, 6 * GPUMEM_GIB);
    ASSERT_TRUE(gpumem__region_map_find(&map, a) == pool);
    ASSERT_TRUE(gpumem__region_map_find(&map, a + 6 * GPUMEM_GIB) == NULL);
    ASSERT_OK(gpumem__pool_free(pool, a, &why));
    gpumem__pool_destroy(pool);
    ASSERT_EQ(device_free(), 8 * GPUMEM_GIB);
    teardown();
}

/* Every pool, growing or not, places by plain best fit (issue 22 retired the
 * top-first rule of pools that do not grow): a size with no exact fit refills
 * the hole that holds it best, not the untouched rest of the pool. */
TEST(every_pool_refills_holes_first)
{
    setup("pool-top:8GiB");
    for (int growth = 0; growth < 2; growth++) {
        struct pool *pool = make_pool(64 * GPUMEM_MIB, growth);
        if (!growth)
            ASSERT_OK(gpumem__pool_take_budget(pool, &why));
        uint64_t a, b, c, d;
        ASSERT_OK(gpumem__pool_alloc(pool, 256 * GPUMEM_KIB, &a, &why));
        ASSERT_OK(gpumem__pool_alloc(pool, 256 * GPUMEM_KIB, &b, &why));
        ASSERT_EQ(b, a + 256 * GPUMEM_KIB);
        ASSERT_OK(gpumem__pool_free(pool, a, &why));
        ASSERT_OK(gpumem__pool_alloc(pool, 128 * GPUMEM_KIB, &c, &why));
        ASSERT_EQ(c, a);
        /* c cut the hole, so the best fit is the rest after b */
        ASSERT_OK(gpumem__pool_alloc(pool, 256 * GPUMEM_KIB, &d, &why));
        ASSERT_EQ(d, b + 256 * GPUMEM_KIB);
        ASSERT_OK(gpumem__pool_free(pool, b, &why));
        ASSERT_OK(gpumem__pool_free(pool, c, &why));
        ASSERT_OK(gpumem__pool_free(pool, d, &why));
        gpumem__pool_destroy(pool);
    }
    teardown();
}

/* On a device whose regions join (the simulated GPU's, as CUDA's mapped ones), a
 * growth extends the free tail by what the request lacks, rounded up to 2 MiB:
 * peak reserved follows peak live, not a fixed step per request size. */
TEST(growth_extends_the_free_tail_by_the_shortfall)
{
    setup("pool-growth:8GiB");
    struct pool *pool = make_pool(4 * GPUMEM_GIB, true);
    uint64_t small, medium, large;
    ASSERT_OK(gpumem__pool_alloc(pool, 1 * GPUMEM_MIB, &small, &why));
    ASSERT_EQ(info(pool).reserved_bytes, 2 * GPUMEM_MIB);
    ASSERT_OK(gpumem__pool_free(pool, small, &why));
    ASSERT_OK(gpumem__pool_alloc(pool, 1000, &small, &why));
    ASSERT_EQ(info(pool).reserved_bytes, 2 * GPUMEM_MIB);
    /* 2 MiB - 1 KiB free at the tail: 3 MiB + 1 KiB more, rounded to 4 MiB, and
     * the chunk spans the two regions */
    ASSERT_OK(gpumem__pool_alloc(pool, 5 * GPUMEM_MIB, &medium, &why));
    ASSERT_EQ(medium, small + 1024);
    ASSERT_EQ(info(pool).reserved_bytes, 6 * GPUMEM_MIB);
    /* 1 MiB - 1 KiB at the tail: 99 MiB + 1280 B lacking, a 100 MiB region */
    ASSERT_OK(gpumem__pool_alloc(pool, 100 * GPUMEM_MIB + 1, &large, &why));
    ASSERT_EQ(large, medium + 5 * GPUMEM_MIB);
    ASSERT_EQ(info(pool).reserved_bytes, 106 * GPUMEM_MIB);
    ASSERT_EQ(info(pool).peak_reserved_bytes, 106 * GPUMEM_MIB);
    ASSERT_EQ(info(pool).current_bytes, 1024 + 5 * GPUMEM_MIB + 100 * GPUMEM_MIB + 256);
    ASSERT_EQ(info(pool).num_allocs, 4);
    gpumem__pool_destroy(pool);
    /* a fresh pool: the request rounded up to 2 MiB, whatever its size */
    static const uint64_t request[3][2] = {{1 * GPUMEM_MIB + 1, 2 * GPUMEM_MIB},
                                           {10 * GPUMEM_MIB - 256, 10 * GPUMEM_MIB},
                                           {10 * GPUMEM_MIB + 1, 12 * GPUMEM_MIB}};
    for (int i = 0; i < 3; i++) {
        pool = make_pool(4 * GPUMEM_GIB, true);
        ASSERT_OK(gpumem__pool_alloc(pool, request[i][0], &small, &why));
        ASSERT_EQ(info(pool).reserved_bytes, request[i][1]);
        gpumem__pool_destroy(pool);
    }
    teardown();
}

/* The free tail counts against a request, so one larger than the budget left
 * unreserved is served when the tail makes up the difference. */
TEST(the_free_tail_serves_a_request_past_the_budget_left)
{
    setup("pool-tail-budget:1GiB");
    struct pool *pool = make_pool(8 * GPUMEM_MIB, true);
    uint64_t a, b;
    ASSERT_OK(gpumem__pool_alloc(pool, 1 * GPUMEM_MIB, &a, &why));
    ASSERT_EQ(info(pool).reserved_bytes, 2 * GPUMEM_MIB);
    ASSERT_OK(gpumem__pool_alloc(pool, 7 * GPUMEM_MIB, &b, &why)); /* 6 MiB left */
    ASSERT_EQ(b, a + 1 * GPUMEM_MIB);
    ASSERT_EQ(info(pool).reserved_bytes, 8 * GPUMEM_MIB);
    ASSERT_EQ(info(pool).num_ooms, 0);
    gpumem__pool_destroy(pool);
    teardown();
}

/* When the device places the region for the shortfall away from the tail
 * (another pool took the addresses after it), the tail cannot serve: unless the
 * new region holds the request alone, the pool takes a region for the whole
 * request as well, and the first stays free in it. */
TEST(a_shortfall_placed_away_from_the_tail_is_followed_by_a_whole_region)
{
    setup_plain("pool-tail-away:1GiB");
    struct pool *p = make_pool(512 * GPUMEM_MIB, true);
    struct pool *q = make_pool(512 * GPUMEM_MIB, true);
    uint64_t a, b, c, d;
    ASSERT_OK(gpumem__pool_alloc(p, 1 * GPUMEM_MIB, &a, &why)); /* [0, 2 MiB) */
    ASSERT_OK(gpumem__pool_alloc(q, 1 * GPUMEM_MIB, &b, &why)); /* right after */
    ASSERT_EQ(b, a + 2 * GPUMEM_MIB);
    /* 1 MiB free at p's tail, 512 KiB lacking: a 2 MiB region lands after q's,
     * and holds the request alone */
    ASSERT_OK(gpumem__pool_alloc(p, 1536 * GPUMEM_KIB, &c, &why));
    ASSERT_EQ(info(p).reserved_bytes, 4 * GPUMEM_MIB);
    ASSERT_EQ(c, a + 4 * GPUMEM_MIB);
    /* q takes the addresses after it; p's first region (2 MiB) and 512 KiB at
     * the tail of its second are free: 4 MiB + 256 B lacks 3.5 MiB + 256 B, and
     * the 4 MiB region for it lands after q's, away from the tail and too small
     * alone, so a region of 6 MiB for the whole request follows (joined to it) */
    ASSERT_OK(gpumem__pool_alloc(q, 2 * GPUMEM_MIB, &d, &why));
    ASSERT_EQ(d, a + 6 * GPUMEM_MIB);
    ASSERT_OK(gpumem__pool_free(p, a, &why));
    uint64_t e;
    ASSERT_OK(gpumem__pool_alloc(p, 4 * GPUMEM_MIB + 256, &e, &why));
    ASSERT_EQ(info(p).reserved_bytes, 14 * GPUMEM_MIB);
    ASSERT_EQ(e, a + 8 * GPUMEM_MIB);
    ASSERT_EQ(info(p).num_ooms, 0);
    ASSERT_OK(gpumem__pool_free(p, e, &why));
    ASSERT_OK(gpumem__pool_free(p, c, &why));
    ASSERT_OK(gpumem__pool_free(q, b, &why));
    ASSERT_OK(gpumem__pool_free(q, d, &why));
    gpumem__pool_destroy(p);
    gpumem__pool_destroy(q);
    teardown();
}

TEST(growth_never_passes_the_budget)
{
    setup("pool-budget:8GiB");
    struct pool *pool = make_pool(1 * GPUMEM_GIB, true);
    uint64_t a, b;
    ASSERT_OK(gpumem__pool_alloc(pool, 700 * GPUMEM_MIB, &a, &why));
    ASSERT_STATUS(gpumem__pool_alloc(pool, 400 * GPUMEM_MIB, &b, &why),
                  GPUMEM_ERR_OUT_OF_MEMORY);
    /* the pool's own words: gpumem_malloc puts its call before them */
    ASSERT_CONTAINS(why.text,
                    "out of memory: only 324.00 MiB of the budget is not reserved");
    ASSERT_TRUE(strncmp(why.text, "out of memory: ", 15) == 0);
    ASSERT_CONTAINS(why.text, "budget 1.00 GiB (test budget");
    ASSERT_CONTAINS(why.text, "in use 700.00 MiB");
    ASSERT_EQ(info(pool).num_ooms, 1);
    ASSERT_LE(info(pool).reserved_bytes, 1 * GPUMEM_GIB);
    /* a region that would pass the budget is clipped to it */
    ASSERT_OK(gpumem__pool_alloc(pool, 300 * GPUMEM_MIB, &b, &why));
    ASSERT_LE(info(pool).reserved_bytes, 1 * GPUMEM_GIB);
    ASSERT_STATUS(gpumem__pool_alloc(pool, UINT64_MAX, &b, &why),
                  GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_CONTAINS(why.text, "larger than the whole budget");
    ASSERT_EQ(info(pool).num_ooms, 2);
    gpumem__pool_destroy(pool);
    teardown();
}

TEST(release_unused_gives_whole_free_regions_back)
{
    setup("pool-release:8GiB");
    struct pool *pool = make_pool(4 * GPUMEM_GIB, true);
    uint64_t a, b, c;
    ASSERT_OK(gpumem__pool_alloc(pool, 64 * GPUMEM_MIB, &a, &why));
    ASSERT_OK(gpumem__pool_alloc(pool, 128 * GPUMEM_MIB, &b, &why));
    ASSERT_OK(gpumem__pool_alloc(pool, 1000, &c, &why));
    uint64_t before = info(pool).reserved_bytes;
    ASSERT_EQ(before, 194 * GPUMEM_MIB);
    ASSERT_OK(gpumem__pool_free(pool, b, &why));
    uint64_t released = 0;
    ASSERT_OK(gpumem__pool_release_unused(pool, &released, &why));
    ASSERT_EQ(released, 128 * GPUMEM_MIB);
    ASSERT_EQ(info(pool).reserved_bytes, before - released);
    ASSERT_EQ(info(pool).peak_reserved_bytes, before);
    ASSERT_EQ(device_free(), 8 * GPUMEM_GIB - (before - released));
    ASSERT_TRUE(gpumem__region_map_find(&map, b) == NULL);
    ASSERT_OK(gpumem__pool_free(pool, a, &why));
    ASSERT_OK(gpumem__pool_free(pool, c, &why));
    ASSERT_OK(gpumem__pool_release_unused(pool, &released, &why));
    ASSERT_EQ(info(pool).reserved_bytes, 0);
    ASSERT_EQ(device_free(), 8 * GPUMEM_GIB);
    /* and it grows again afterwards */
    ASSERT_OK(gpumem__pool_alloc(pool, 1000, &a, &why));
    ASSERT_EQ(info(pool).reserved_bytes, 2 * GPUMEM_MIB);
    gpumem__pool_destroy(pool);
    teardown();
}

TEST(greedy_pool_takes_its_budget_back_after_a_release)
{
    setup("pool-greedy-release:8GiB");
    struct pool *pool = make_pool(2 * GPUMEM_GIB, false);
    ASSERT_OK(gpumem__pool_take_budget(pool, &why));
    uint64_t released, a;
    ASSERT_OK(gpumem__pool_release_unused(pool, &released, &why));
    ASSERT_EQ(released, 2 * GPUMEM_GIB);
    ASSERT_EQ(device_free(), 8 * GPUMEM_GIB);
    ASSERT_OK(gpumem__pool_alloc(pool, 1000, &a, &why));
    ASSERT_EQ(info(pool).reserved_bytes, 2 * GPUMEM_GIB);
    gpumem__pool_destroy(pool);
    teardown();
}

/* Issue 22, item 5: a greedy pool whose memory was released, on a GPU that no
 * longer has its budget free (another runtime grew into it), serves its requests
 * by growing as a growing pool does (regions for what each lacks, not of each
 * request's size: no 4 KiB region), and takes its whole budget back once the GPU
 * has it free again. */
TEST(greedy_pool_grows_when_its_budget_is_no_longer_free)
{
    setup("pool-greedy-shared:2GiB");
    struct pool *greedy = make_pool(1 * GPUMEM_GIB, false);
    struct pool *other = make_pool(2 * GPUMEM_GIB, true);
    ASSERT_OK(gpumem__pool_take_budget(greedy, &why));
    uint64_t released, a, b, c, x;
    ASSERT_OK(gpumem__pool_release_unused(greedy, &released, &why));
    ASSERT_EQ(released, 1 * GPUMEM_GIB);
    ASSERT_OK(gpumem__pool_alloc(other, 1536 * GPUMEM_MIB, &x, &why));
    ASSERT_OK(gpumem__pool_alloc(greedy, 4096, &a, &why));
    ASSERT_EQ(info(greedy).reserved_bytes, 2 * GPUMEM_MIB);
    ASSERT_OK(gpumem__pool_alloc(greedy, 100 * GPUMEM_MIB, &b, &why));
    ASSERT_EQ(b, a + 4096); /* the tail extended: one block across both regions */
    ASSERT_EQ(info(greedy).reserved_bytes, 100 * GPUMEM_MIB + 2 * GPUMEM_MIB);
    ASSERT_EQ(info(greedy).num_ooms, 0);
    /* the other pool gives its memory back: the next growth takes the budget */
    ASSERT_OK(gpumem__pool_free(other, x, &why));
    ASSERT_OK(gpumem__pool_release_unused(other, &released, &why));
    ASSERT_OK(gpumem__pool_alloc(greedy, 200 * GPUMEM_MIB, &c, &why));
    ASSERT_EQ(info(greedy).reserved_bytes, 1 * GPUMEM_GIB);
    ASSERT_OK(gpumem__pool_free(greedy, a, &why));
    ASSERT_OK(gpumem__pool_free(greedy, b, &why));
    ASSERT_OK(gpumem__pool_free(greedy, c, &why));
    gpumem__pool_destroy(greedy);
    gpumem__pool_destroy(other);
    teardown();
}

TEST(cached_regions_are_released_before_out_of_memory)
{
    /* Two pools on one 1 GiB device: pool A caches 600 MiB it no longer uses; pool B
     * needs 600 MiB. The device refuses B, but A's cache is A's to give, not B's:
     * B fails. Then A itself needs one big block that its fragmented cache cannot
     * hold: it releases its free regions and retries, and succeeds. */
    setup("pool-retry:1GiB");
    struct pool *a = make_pool(1 * GPUMEM_GIB, true);
    struct pool *b = make_pool(1 * GPUMEM_GIB, true);
    uint64_t x, y, z;
    ASSERT_OK(gpumem__pool_alloc(a, 300 * GPUMEM_MIB, &x, &why));
    ASSERT_OK(gpumem__pool_alloc(a, 300 * GPUMEM_MIB, &y, &why));
    ASSERT_OK(gpumem__pool_free(a, x, &why));
    ASSERT_OK(gpumem__pool_free(a, y, &why));
    ASSERT_STATUS(gpumem__pool_alloc(b, 600 * GPUMEM_MIB, &z, &why),
                  GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_CONTAINS(why.text, "cannot give");
    ASSERT_OK(gpumem__pool_alloc(a, 900 * GPUMEM_MIB, &z, &why));
    ASSERT_EQ(info(a).reserved_bytes, 900 * GPUMEM_MIB);
    gpumem__pool_destroy(a);
    gpumem__pool_destroy(b);
    teardown();
}

TEST(bad_frees_change_nothing)
{
    setup("pool-bad-free:1GiB");
    struct pool *pool = make_pool(512 * GPUMEM_MIB, true);
    uint64_t a;
    ASSERT_OK(gpumem__pool_alloc(pool, 4096, &a, &why));
    gpumem_memory_info before = info(pool);
    ASSERT_STATUS(gpumem__pool_free(pool, a + 256, &why), GPUMEM_ERR_INVALID_POINTER);
    ASSERT_CONTAINS(why.text, "interior pointer");
    ASSERT_OK(gpumem__pool_free(pool, a, &why));
    ASSERT_STATUS(gpumem__pool_free(pool, a, &why), GPUMEM_ERR_INVALID_POINTER);
    gpumem_memory_info after = info(pool);
    ASSERT_EQ(after.current_bytes, 0);
    ASSERT_EQ(after.num_frees, before.num_frees + 1);
    gpumem__pool_reset_stats(pool);
    after = info(pool);
    ASSERT_EQ(after.peak_bytes, 0);
    ASSERT_EQ(after.num_allocs, 0);
    ASSERT_EQ(after.num_frees, 0);
    ASSERT_EQ(after.peak_reserved_bytes, after.reserved_bytes);
    gpumem__pool_destroy(pool);
    teardown();
}

TEST(a_chunk_may_span_two_growth_regions)
{
    /* Regions of one simulated GPU are one mapping: when two land next to each
     * other the arena serves a chunk across the boundary. */
    setup("pool-span:1GiB");
    struct pool *pool = make_pool(1 * GPUMEM_GIB, true);
    uint64_t a, b, c;
    ASSERT_OK(gpumem__pool_alloc(pool, 100 * GPUMEM_MIB, &a, &why));
    ASSERT_OK(gpumem__pool_alloc(pool, 100 * GPUMEM_MIB, &b, &why));
    ASSERT_EQ(b, a + 100 * GPUMEM_MIB); /* the device placed the regions side by side */
    ASSERT_OK(gpumem__pool_free(pool, a, &why));
    ASSERT_OK(gpumem__pool_free(pool, b, &why));
    ASSERT_EQ(info(pool).largest_free_block, 200 * GPUMEM_MIB);
    ASSERT_OK(gpumem__pool_alloc(pool, 150 * GPUMEM_MIB, &c, &why));
    ASSERT_EQ(c, a);
    ASSERT_EQ(info(pool).reserved_bytes, 200 * GPUMEM_MIB);
    gpumem__pool_destroy(pool);
    teardown();
}

/* Two pools of one runtime share its region map but not their locks. A pool makes
 * room in the map before it takes memory from the device and inserts the region
 * after; the room must stay its own in between. The device here holds both pools
 * inside that window at once (a barrier in its reserve: the simulated GPU has no
 * address spaces, so growth takes plain regions), with the map's block one entry
 * short of full: each pool needs an entry of its own. */
static const struct backend_ops *real_ops;
static pthread_barrier_t in_device;

static gpumem_status reserve_in_step(struct backend *b, int dev, uint64_t size,
                                     uint64_t *addr, struct reason *w)
{
    pthread_barrier_wait(&in_device);
    return real_ops->alloc_region(b, dev, size, addr, w);
}

struct grower {
    struct pool *pool;
    uint64_t addr;
    gpumem_status status;
};

static void *grow_once(void *arg)
{
    struct grower *g = arg;
    g->status = gpumem__pool_alloc(g->pool, 100 * GPUMEM_MIB, &g->addr, &why);
    return NULL;
}

TEST(pools_growing_at_once_each_get_their_map_entry)
{
    setup_plain("pool-race:8GiB");
    struct pool *pools[2] = {make_pool(3 * GPUMEM_GIB, true),
                             make_pool(3 * GPUMEM_GIB, true)};
    /* 15 regions: the map's first block holds 16 entries */
    uint64_t held[15];
    for (int i = 0; i < 15; i++)
        ASSERT_OK(gpumem__pool_alloc(pools[0], 100 * GPUMEM_MIB, &held[i], &why));
    ASSERT_EQ(map.count, 15);
    /* no free memory left: each pool's next allocation takes a new region */
    ASSERT_EQ(info(pools[0]).reserved_bytes, info(pools[0]).current_bytes);

    ASSERT_TRUE(backend->ops->space_map == NULL);
    struct backend_ops in_step = *backend->ops;
    in_step.alloc_region = reserve_in_step;
    real_ops = backend->ops;
    backend->ops = &in_step;
    pthread_barrier_init(&in_device, NULL, 2);
    struct grower g[2] = {{.pool = pools[0]}, {.pool = pools[1]}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        ASSERT_EQ(pthread_create(&t[i], NULL, grow_once, &g[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&in_device);
    backend->ops = real_ops;

    ASSERT_EQ(map.count, 17);
    for (int i = 0; i < 2; i++) {
        ASSERT_OK(g[i].status);
        ASSERT_TRUE(gpumem__region_map_find(&map, g[i].addr) == pools[i]);
        ASSERT_OK(gpumem__pool_free(pools[i], g[i].addr, &why));
    }
    for (int i = 0; i < 15; i++) {
        ASSERT_TRUE(gpumem__region_map_find(&map, held[i]) == pools[0]);
        ASSERT_OK(gpumem__pool_free(pools[0], held[i], &why));
    }
    gpumem__pool_destroy(pools[0]);
    gpumem__pool_destroy(pools[1]);
    teardown();
}

/* A region that the device refuses gives back the room it was promised. */
static gpumem_status refuse(struct backend *b, int dev, uint64_t size, uint64_t *addr,
                            struct reason *w)
{
    (void)b, (void)dev, (void)size, (void)addr;
    return gpumem__reason(w, GPUMEM_ERR_OUT_OF_MEMORY, "refused by the test");
}

TEST(a_refused_region_leaves_no_promise_in_the_map)
{
    setup_plain("pool-refused:8GiB");
    struct pool *pool = make_pool(GPUMEM_GIB, true);
    ASSERT_TRUE(backend->ops->space_map == NULL); /* growth takes plain regions */
    struct backend_ops refusing = *backend->ops;
    refusing.alloc_region = refuse;
    const struct backend_ops *ops = backend->ops;
    backend->ops = &refusing;
    uint64_t a;
    ASSERT_EQ(gpumem__pool_alloc(pool, 100 * GPUMEM_MIB, &a, &why),
              GPUMEM_ERR_OUT_OF_MEMORY);
    backend->ops = ops;
    ASSERT_EQ(map.promised, 0);
    ASSERT_EQ(map.count, 0);
    ASSERT_OK(gpumem__pool_alloc(pool, 100 * GPUMEM_MIB, &a, &why));
    ASSERT_OK(gpumem__pool_free(pool, a, &why));
    gpumem__pool_destroy(pool);
    teardown();
}

/* A backend that hands out an address range it handed out before (so the arena
 * refuses it as overlapping) and then refuses to take it back: the device keeps
 * those bytes, so they stay in reserved_bytes, against the budget. */
static uint64_t handed_out;
static gpumem_status reserve_again(struct backend *b, int dev, uint64_t size,
                                   uint64_t *addr, struct reason *w)
{
    (void)b, (void)dev, (void)size, (void)w;
    *addr = handed_out;
    return GPUMEM_OK;
}
static gpumem_status refuse_release(struct backend *b, int dev, uint64_t addr,
                                    uint64_t size, struct reason *w)
{
    (void)b, (void)dev, (void)addr, (void)size;
    return gpumem__reason(w, GPUMEM_ERR_BACKEND, "release refused by the test");
}

TEST(a_region_the_arena_refuses_and_the_device_keeps_stays_reserved)
{
    setup_plain("pool-kept:8GiB");
    struct pool *pool = make_pool(GPUMEM_GIB, true);
    ASSERT_TRUE(backend->ops->space_map == NULL); /* growth takes plain regions */
    uint64_t a, b;
    ASSERT_OK(gpumem__pool_alloc(pool, 100 * GPUMEM_MIB, &a, &why));
    ASSERT_EQ(info(pool).reserved_bytes, 100 * GPUMEM_MIB);
    handed_out = a;
    struct backend_ops broken = *backend->ops;
    broken.alloc_region = reserve_again;
    broken.free_region = refuse_release;
    const struct backend_ops *ops = backend->ops;
    backend->ops = &broken;
    ASSERT_EQ(gpumem__pool_alloc(pool, 200 * GPUMEM_MIB, &b, &why), GPUMEM_ERR_BACKEND);
    ASSERT_CONTAINS(why.text, "overlaps");
    backend->ops = ops;
    ASSERT_EQ(info(pool).reserved_bytes, 300 * GPUMEM_MIB);
    ASSERT_EQ(map.count, 1);
    ASSERT_OK(gpumem__pool_free(pool, a, &why));
    gpumem__pool_destroy(pool);
    teardown();
}

/* On the simulated GPU a growing pool maps into its address range: a release
 * gives back the whole granules of its free chunks while their neighbours stay
 * in use, untouched; a chunk that lands on them maps them again. */
TEST(a_release_gives_granules_back_and_reuse_maps_them_again)
{
    setup("pool-granules:1GiB");
    struct pool *pool = make_pool(512 * GPUMEM_MIB, true);
    uint64_t a, b, c, d, released = 0;
    ASSERT_OK(gpumem__pool_alloc(pool, 8 * GPUMEM_MIB, &a, &why));
    ASSERT_OK(gpumem__pool_alloc(pool, 8 * GPUMEM_MIB, &b, &why));
    ASSERT_OK(gpumem__pool_alloc(pool, 8 * GPUMEM_MIB, &c, &why));
    ASSERT_EQ(b, a + 8 * GPUMEM_MIB);
    ASSERT_EQ(c, b + 8 * GPUMEM_MIB);
    memset((void *)(uintptr_t)a, 0x11, 8 * GPUMEM_MIB);
    memset((void *)(uintptr_t)c, 0x33, 8 * GPUMEM_MIB);
    ASSERT_EQ(device_free(), 1 * GPUMEM_GIB - 24 * GPUMEM_MIB);
    ASSERT_OK(gpumem__pool_free(pool, b, &why));
    ASSERT_OK(gpumem__pool_release_unused(pool, &released, &why));
    ASSERT_EQ(released, 8 * GPUMEM_MIB);
    ASSERT_EQ(info(pool).reserved_bytes, 16 * GPUMEM_MIB);
    ASSERT_EQ(device_free(), 1 * GPUMEM_GIB - 16 * GPUMEM_MIB);
    const unsigned char *pa = (const unsigned char *)(uintptr_t)a;
    const unsigned char *pc = (const unsigned char *)(uintptr_t)c;
    ASSERT_EQ(pa[0], 0x11);
    ASSERT_EQ(pa[8 * GPUMEM_MIB - 1], 0x11);
    ASSERT_EQ(pc[0], 0x33);
    ASSERT_EQ(pc[8 * GPUMEM_MIB - 1], 0x33);

    ASSERT_OK(gpumem__pool_alloc(pool, 8 * GPUMEM_MIB, &d, &why));
    ASSERT_EQ(d, b); /* the hole, mapped again */
    ASSERT_EQ(info(pool).reserved_bytes, 24 * GPUMEM_MIB);
    ASSERT_EQ(device_free(), 1 * GPUMEM_GIB - 24 * GPUMEM_MIB);
    memset((void *)(uintptr_t)d, 0x22, 8 * GPUMEM_MIB);
    ASSERT_EQ(((const unsigned char *)(uintptr_t)d)[4 * GPUMEM_MIB], 0x22);
    ASSERT_EQ(pa[8 * GPUMEM_MIB - 1], 0x11);
    ASSERT_EQ(pc[0], 0x33);
    ASSERT_OK(gpumem__pool_free(pool, a, &why));
    ASSERT_OK(gpumem__pool_free(pool, c, &why));
    ASSERT_OK(gpumem__pool_free(pool, d, &why));
    gpumem__pool_destroy(pool);
    ASSERT_EQ(device_free(), 1 * GPUMEM_GIB);
    teardown();
}

/* A chunk that lands on granules a release gave back must map them again, and
 * the device may no longer have them (another pool, or process, took the
 * memory meanwhile). The pool then gives its other free granules back and maps
 * with those: the request is served, as it would have been before the release.
 * When nothing is left to give, the request fails as an out of memory, the
 * chunk goes back to the arena, and the pool is as it was: the granules it
 * mapped before the device refused go back to the device. Once the device has
 * the memory again, the same request lands there and succeeds. */
TEST(a_landing_the_device_cannot_map_takes_the_pools_other_free_granules)
{
    setup("pool-landing:256MiB");
    struct pool *pool = make_pool(256 * GPUMEM_MIB, true);
    struct pool *other = make_pool(256 * GPUMEM_MIB, true);
    uint64_t a, b, c, d, e, f, g, x, released = 0;
    /* sizes off the 2 MiB granule, so that no growth region is one hole alone
     * (a release would give it back whole): b [0,7), a [7,39), d [39,46),
     * c [46,109), e [109,116) MiB. The growth steps: [0,8) and [40,46) and
     * [110,116) a granule per mapping; a's [8,40) in 8 extents of 4 MiB, c's
     * [46,110) in 8 of 8 MiB (space.h) */
    ASSERT_OK(gpumem__pool_alloc(pool, 7 * GPUMEM_MIB, &b, &why));
    ASSERT_OK(gpumem__pool_alloc(pool, 32 * GPUMEM_MIB, &a, &why));
    ASSERT_OK(gpumem__pool_alloc(pool, 7 * GPUMEM_MIB, &d, &why));
    ASSERT_OK(gpumem__pool_alloc(pool, 63 * GPUMEM_MIB, &c, &why));
    ASSERT_OK(gpumem__pool_alloc(pool, 7 * GPUMEM_MIB, &e, &why));
    ASSERT_EQ(a, b + 7 * GPUMEM_MIB);
    ASSERT_EQ(e, c + 63 * GPUMEM_MIB);
    ASSERT_EQ(info(pool).reserved_bytes, 116 * GPUMEM_MIB);
    ASSERT_OK(gpumem__pool_free(pool, a, &why));
    ASSERT_OK(gpumem__pool_free(pool, c, &why));
    ASSERT_OK(gpumem__pool_release_unused(pool, &released, &why));
    /* the holes' whole extents: a's [8,36), c's [46,102) */
    ASSERT_EQ(released, 84 * GPUMEM_MIB);
    ASSERT_EQ(info(pool).reserved_bytes, 32 * GPUMEM_MIB);
    ASSERT_EQ(info(pool).largest_free_block, 7 * GPUMEM_MIB); /* [102,109), mapped */
    /* c's hole mapped again and free: the pool holds 63 MiB it does not use */
    ASSERT_OK(gpumem__pool_alloc(pool, 63 * GPUMEM_MIB, &g, &why));
    ASSERT_EQ(g, c);
    ASSERT_OK(gpumem__pool_free(pool, g, &why));
    ASSERT_EQ(info(pool).reserved_bytes, 88 * GPUMEM_MIB);
    /* the rest of the device goes to the other pool */
    ASSERT_OK(gpumem__pool_alloc(other, 168 * GPUMEM_MIB, &x, &why));
    ASSERT_EQ(device_free(), 0);
    /* best fit lands in a's hole, unmapped; the device has nothing, so c's
     * extents go back and a's are mapped with them */
    ASSERT_OK(gpumem__pool_alloc(pool, 24 * GPUMEM_MIB, &f, &why));
    ASSERT_EQ(f, a);
    ASSERT_EQ(info(pool).reserved_bytes, 56 * GPUMEM_MIB);
    ASSERT_EQ(info(pool).current_bytes, 45 * GPUMEM_MIB);
    ASSERT_EQ(info(pool).num_ooms, 0);
    ASSERT_EQ(device_free(), 32 * GPUMEM_MIB);
    memset((void *)(uintptr_t)f, 0x5a, 24 * GPUMEM_MIB); /* mapped and writable */
    /* c's hole, unmapped again, lacks 56 MiB; the device has 32 and the pool
     * nothing more to give: an out of memory, and nothing changed (what the
     * landing mapped before the device refused went back) */
    ASSERT_STATUS(gpumem__pool_alloc(pool, 63 * GPUMEM_MIB, &g, &why),
                  GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_CONTAINS(why.text, "out of memory");
    ASSERT_EQ(info(pool).num_ooms, 1);
    ASSERT_EQ(info(pool).current_bytes, 45 * GPUMEM_MIB);
    ASSERT_EQ(info(pool).reserved_bytes, 56 * GPUMEM_MIB);
    /* what it can serve without mapping: c's hole's mapped top, [102,109) */
    ASSERT_EQ(info(pool).largest_free_block, 7 * GPUMEM_MIB);
    ASSERT_EQ(device_free(), 32 * GPUMEM_MIB);
    ASSERT_STATUS(gpumem__pool_free(pool, c, &why), GPUMEM_ERR_INVALID_POINTER);
    /* so does a growth the device cannot give whole */
    ASSERT_STATUS(gpumem__pool_alloc(pool, 100 * GPUMEM_MIB, &g, &why),
                  GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_EQ(info(pool).num_ooms, 2);
    ASSERT_EQ(info(pool).reserved_bytes, 56 * GPUMEM_MIB);
    ASSERT_EQ(device_free(), 32 * GPUMEM_MIB);
    /* the other pool lets go: the same request lands there and is served */
    ASSERT_OK(gpumem__pool_free(other, x, &why));
    ASSERT_OK(gpumem__pool_release_unused(other, &released, &why));
    ASSERT_OK(gpumem__pool_alloc(pool, 63 * GPUMEM_MIB, &g, &why));
    ASSERT_EQ(g, c);
    memset((void *)(uintptr_t)g, 0xa5, 63 * GPUMEM_MIB);
    ASSERT_EQ(((const unsigned char *)(uintptr_t)f)[24 * GPUMEM_MIB - 1], 0x5a);
    ASSERT_EQ(info(pool).reserved_bytes, 112 * GPUMEM_MIB);
    ASSERT_OK(gpumem__pool_free(pool, b, &why));
    ASSERT_OK(gpumem__pool_free(pool, d, &why));
    ASSERT_OK(gpumem__pool_free(pool, e, &why));
    ASSERT_OK(gpumem__pool_free(pool, f, &why));
    ASSERT_OK(gpumem__pool_free(pool, g, &why));
    gpumem__pool_destroy(pool);
    gpumem__pool_destroy(other);
    ASSERT_EQ(device_free(), 256 * GPUMEM_MIB);
    teardown();
}

/* A growth step the range places away from the free tail (in the hole a
 * released region left) may join a free chunk above it whose granules a release
 * gave back: the arena then holds the request, and the pool takes nothing more.
 * Whatever it takes, never past the budget: a fuzz input found a second step
 * whose mapping the budget could not hold fall back to a plain region sized by
 * the budget left before the first (34 MiB budget, 36 reserved). */
TEST(a_growth_step_away_from_the_tail_stays_within_the_budget)
{
    setup("pool-away:1GiB");
    struct pool *pool = make_pool(34 * GPUMEM_MIB, true);
    uint64_t a, b, x, c1, c2, t, r, released = 0;
    ASSERT_OK(gpumem__pool_alloc(pool, 8 * GPUMEM_MIB, &a, &why)); /* [0, 8) MiB */
    ASSERT_OK(gpumem__pool_alloc(pool, 8 * GPUMEM_MIB, &b, &why)); /* [8, 16) */
    ASSERT_OK(gpumem__pool_alloc(pool, 8 * GPUMEM_MIB, &x, &why)); /* [16, 24) */
    ASSERT_OK(gpumem__pool_free(pool, x, &why));
    ASSERT_OK(gpumem__pool_alloc(pool, 4 * GPUMEM_MIB, &c1, &why)); /* [16, 20) */
    ASSERT_OK(gpumem__pool_alloc(pool, 4 * GPUMEM_MIB, &c2, &why)); /* [20, 24) */
    ASSERT_EQ(c1, a + 16 * GPUMEM_MIB);
    ASSERT_EQ(c2, a + 20 * GPUMEM_MIB);
    /* [24, 32), its last 64 KiB the free tail */
    ASSERT_OK(gpumem__pool_alloc(pool, 8 * GPUMEM_MIB - 64 * 1024, &t, &why));
    ASSERT_EQ(t, a + 24 * GPUMEM_MIB);
    ASSERT_OK(gpumem__pool_free(pool, b, &why));
    ASSERT_OK(gpumem__pool_free(pool, c1, &why));
    /* b's region goes back whole (a hole of the range); c1's granules go back
     * and stay a free chunk of the arena */
    ASSERT_OK(gpumem__pool_release_unused(pool, &released, &why));
    ASSERT_EQ(info(pool).reserved_bytes, 20 * GPUMEM_MIB);
    gpumem__pool_reset_stats(pool);
    /* 6.66 MiB: no free chunk holds it; the step for what the tail lacks lands
     * in b's hole and joins c1's free chunk, which then holds it: nothing more
     * is taken, not even for a while */
    ASSERT_OK(gpumem__pool_alloc(pool, 6979584, &r, &why));
    ASSERT_TRUE(info(pool).reserved_bytes <= 34 * GPUMEM_MIB);
    ASSERT_EQ(r, a + 8 * GPUMEM_MIB);
    ASSERT_EQ(info(pool).reserved_bytes, 28 * GPUMEM_MIB);
    ASSERT_EQ(info(pool).peak_reserved_bytes, 28 * GPUMEM_MIB);
    memset((void *)(uintptr_t)r, 0x3c, 6979584);
    ASSERT_OK(gpumem__pool_free(pool, a, &why));
    ASSERT_OK(gpumem__pool_free(pool, c2, &why));
    ASSERT_OK(gpumem__pool_free(pool, t, &why));
    ASSERT_OK(gpumem__pool_free(pool, r, &why));
    gpumem__pool_destroy(pool);
    teardown();
}

/* The same away from the tail, with no free chunk to join: the step lands in a
 * released region's hole between live chunks, the range has no hole for the
 * whole request, and the budget left cannot map one either. The pool falls
 * back to a plain region for the whole request, never past the budget (38 MiB:
 * without the fix, a plain region sized by the budget left before the step
 * took it to 40). */
TEST(a_fallback_to_a_plain_region_stays_within_the_budget)
{
    setup("pool-fallback:1GiB");
    struct pool *pool = make_pool(38 * GPUMEM_MIB, true);
    uint64_t a, b, c, t, r, released = 0;
    ASSERT_OK(gpumem__pool_alloc(pool, 8 * GPUMEM_MIB, &a, &why)); /* [0, 8) MiB */
    ASSERT_OK(gpumem__pool_alloc(pool, 8 * GPUMEM_MIB, &b, &why)); /* [8, 16) */
    ASSERT_OK(gpumem__pool_alloc(pool, 8 * GPUMEM_MIB, &c, &why)); /* [16, 24) */
    ASSERT_OK(gpumem__pool_alloc(pool, 7 * GPUMEM_MIB, &t, &why)); /* [24, 31), tail 1 */
    ASSERT_EQ(t, a + 24 * GPUMEM_MIB);
    ASSERT_OK(gpumem__pool_free(pool, b, &why));
    ASSERT_OK(gpumem__pool_release_unused(pool, &released, &why));
    ASSERT_EQ(info(pool).reserved_bytes, 24 * GPUMEM_MIB);
    /* 8.5 MiB: the range's holes are 8 and 6 MiB (+ the 1 MiB tail) */
    gpumem_status s = gpumem__pool_alloc(pool, 17 * GPUMEM_MIB / 2, &r, &why);
    ASSERT_TRUE(info(pool).reserved_bytes <= 38 * GPUMEM_MIB);
    ASSERT_TRUE(info(pool).peak_reserved_bytes <= 38 * GPUMEM_MIB);
    ASSERT_OK(s);
    memset((void *)(uintptr_t)r, 0x3c, 17 * GPUMEM_MIB / 2);
    ASSERT_OK(gpumem__pool_free(pool, r, &why));
    ASSERT_OK(gpumem__pool_free(pool, a, &why));
    ASSERT_OK(gpumem__pool_free(pool, c, &why));
    ASSERT_OK(gpumem__pool_free(pool, t, &why));
    gpumem__pool_destroy(pool);
    teardown();

    /* With room for it, the plain region is the whole request, and only it.
     * Holes of 8, 6 and 6 MiB between live chunks, no hole at the range's end. */
    setup("pool-fallback-whole:1GiB");
    pool = make_pool(40 * GPUMEM_MIB, true);
    uint64_t held[8];
    static const uint64_t mib[] = {8, 8, 2, 6, 2, 6}; /* [0,8) [8,16) ... [26,32) */
    for (int i = 0; i < 6; i++)
        ASSERT_OK(gpumem__pool_alloc(pool, mib[i] * GPUMEM_MIB, &held[i], &why));
    ASSERT_OK(gpumem__pool_alloc(pool, 7 * GPUMEM_MIB, &t, &why)); /* [32, 39) */
    ASSERT_EQ(t, held[0] + 32 * GPUMEM_MIB);
    for (int i = 1; i < 6; i += 2)
        ASSERT_OK(gpumem__pool_free(pool, held[i], &why));
    ASSERT_OK(gpumem__pool_release_unused(pool, &released, &why));
    ASSERT_EQ(info(pool).reserved_bytes, 20 * GPUMEM_MIB);
    /* the step for what the tail lacks lands in the 8 MiB hole, alone; the
     * range has no 10 MiB hole; 10 MiB more, plain: 38 in all */
    ASSERT_OK(gpumem__pool_alloc(pool, 17 * GPUMEM_MIB / 2, &r, &why));
    ASSERT_EQ(info(pool).reserved_bytes, 38 * GPUMEM_MIB);
    memset((void *)(uintptr_t)r, 0x3c, 17 * GPUMEM_MIB / 2);
    ASSERT_OK(gpumem__pool_free(pool, r, &why));
    for (int i = 0; i < 6; i += 2)
        ASSERT_OK(gpumem__pool_free(pool, held[i], &why));
    ASSERT_OK(gpumem__pool_free(pool, t, &why));
    gpumem__pool_destroy(pool);
    teardown();
}

/* Before a growing pool maps past its peak of reserved bytes it gives back as
 * many granules of its holes as the mapping lacks, of those that stayed free
 * across the trim's window (GPUMEM_GROWTH_TRIM_WINDOW, default 1: while the
 * pool handed out its peak of reserved bytes); granules freed more recently stay
 * mapped, and the rest of the mapping raises the peak. The granules given back
 * stay free in the arena: an allocation that lands on them maps them again, and
 * largest_free_block counts only what is mapped. */
TEST(a_growing_pool_gives_idle_granules_back_before_its_peak_grows)
{
    setup("pool-bound:1GiB");
    ASSERT_TRUE(opts.growth_trim); /* the default */
    ASSERT_TRUE(opts.growth_trim_window == 1.0);
    struct pool *pool = make_pool(512 * GPUMEM_MIB, true);
    uint64_t a, b, d, e, f, g, x;
    ASSERT_OK(gpumem__pool_alloc(pool, 16 * GPUMEM_MIB, &a, &why)); /* [0, 16) */
    ASSERT_OK(gpumem__pool_alloc(pool, 16 * GPUMEM_MIB, &b, &why)); /* [16, 32) */
    ASSERT_OK(gpumem__pool_free(pool, a, &why)); /* a 16 MiB hole, just freed */
    /* 20 MiB fits no hole. The pool has handed out 32 MiB, its peak: a's
     * granules were freed inside the window, none goes, the peak grows */
    ASSERT_OK(gpumem__pool_alloc(pool, 20 * GPUMEM_MIB, &d, &why));
    ASSERT_EQ(d, b + 16 * GPUMEM_MIB);
    ASSERT_EQ(info(pool).reserved_bytes, 52 * GPUMEM_MIB);
    ASSERT_EQ(info(pool).peak_reserved_bytes, 52 * GPUMEM_MIB);
    ASSERT_EQ(info(pool).largest_free_block, 16 * GPUMEM_MIB);
    /* 60 MiB more handed out (more than the peak, 52), all in a's first granule:
     * its other seven stay as they were freed, before the window */
    for (int i = 0; i < 60; i++) {
        ASSERT_OK(gpumem__pool_alloc(pool, 1 * GPUMEM_MIB, &x, &why));
        ASSERT_EQ(x, a);
        ASSERT_OK(gpumem__pool_free(pool, x, &why));
    }
    /* 24 MiB past the peak: the seven idle granules go (14 MiB), the peak
     * grows by the 10 MiB left; the first granule, freed just now, stays */
    ASSERT_OK(gpumem__pool_alloc(pool, 24 * GPUMEM_MIB, &e, &why));
    ASSERT_EQ(e, d + 20 * GPUMEM_MIB);
    ASSERT_EQ(info(pool).reserved_bytes, 62 * GPUMEM_MIB);
    ASSERT_EQ(info(pool).peak_reserved_bytes, 62 * GPUMEM_MIB);
    ASSERT_EQ(device_free(), 1 * GPUMEM_GIB - 62 * GPUMEM_MIB);
    ASSERT_EQ(info(pool).current_bytes, 60 * GPUMEM_MIB);
    /* what the pool serves without mapping: a's first granule */
    ASSERT_EQ(info(pool).largest_free_block, 2 * GPUMEM_MIB);
    /* 8 MiB: best fit lands in a's hole, as without the trim, and maps its
     * granules 1-3 again; no idle granule is left, so the peak grows */
    ASSERT_OK(gpumem__pool_alloc(pool, 8 * GPUMEM_MIB, &f, &why));
    ASSERT_EQ(f, a);
    ASSERT_EQ(info(pool).reserved_bytes, 68 * GPUMEM_MIB);
    ASSERT_EQ(info(pool).peak_reserved_bytes, 68 * GPUMEM_MIB);
    memset((void *)(uintptr_t)f, 0x77, 8 * GPUMEM_MIB); /* mapped and writable */
    /* the rest of the hole is no allocation */
    ASSERT_STATUS(gpumem__pool_free(pool, a + 8 * GPUMEM_MIB, &why),
                  GPUMEM_ERR_INVALID_POINTER);
    ASSERT_EQ(info(pool).current_bytes, 68 * GPUMEM_MIB);
    /* below the peak, a freed chunk stays mapped and is placed in again */
    ASSERT_OK(gpumem__pool_free(pool, f, &why));
    ASSERT_OK(gpumem__pool_alloc(pool, 8 * GPUMEM_MIB, &g, &why));
    ASSERT_EQ(g, a);
    ASSERT_EQ(((const unsigned char *)(uintptr_t)g)[8 * GPUMEM_MIB - 1], 0x77);
    ASSERT_EQ(info(pool).reserved_bytes, 68 * GPUMEM_MIB);
    ASSERT_OK(gpumem__pool_free(pool, g, &why));
    /* a release gives every free granule back: regions wholly free go */
    ASSERT_OK(gpumem__pool_free(pool, b, &why));
    ASSERT_OK(gpumem__pool_free(pool, d, &why));
    ASSERT_OK(gpumem__pool_free(pool, e, &why));
    uint64_t released = 0;
    ASSERT_OK(gpumem__pool_release_unused(pool, &released, &why));
    ASSERT_EQ(released, 68 * GPUMEM_MIB);
    ASSERT_EQ(info(pool).reserved_bytes, 0);
    ASSERT_EQ(device_free(), 1 * GPUMEM_GIB);
    gpumem__pool_destroy(pool);
    teardown();
}

/* The trim's clock when a chunk lands on granules a release gave back
 * (gpumem__growth_back): it stands where it stood before that allocation, as it
 * does for a growth step. The chunk is counted live before its granules are
 * mapped; were its bytes on the clock, the window would end that much later and
 * a granule freed inside it would go (3e60e82: the cold driver calls of
 * training rose from 85.5 to 89.0 per 1,000 operations). In MiB: h's top
 * granule is stamped 32 when h is freed; the clock then reaches 40 + 7 = 47
 * and the window is the peak, 18, so the cut is 29 and the granule stays (with
 * the landing chunk's 6 on the clock the cut would be 35, past its stamp).
 * Regions of 8 granules or fewer are mapped one extent a granule (space.h), so
 * that any idle granule could go. */
TEST(a_landing_on_given_back_granules_trims_by_the_clock_before_it)
{
    setup("pool-bound:1GiB");
    struct pool *pool = make_pool(512 * GPUMEM_MIB, true);
    uint64_t w, a, b, h, c, x, t, y, released = 0;
    /* one region of 16 MiB, then four chunks in it, so that a's hole stays in
     * the arena when its granules are given back */
    ASSERT_OK(gpumem__pool_alloc(pool, 16 * GPUMEM_MIB, &w, &why));
    ASSERT_OK(gpumem__pool_free(pool, w, &why));
    ASSERT_OK(gpumem__pool_alloc(pool, 6 * GPUMEM_MIB, &a, &why)); /* [0, 6) */
    ASSERT_OK(gpumem__pool_alloc(pool, 2 * GPUMEM_MIB, &b, &why)); /* [6, 8) */
    ASSERT_OK(gpumem__pool_alloc(pool, 4 * GPUMEM_MIB, &h, &why)); /* [8, 12) */
    ASSERT_OK(gpumem__pool_alloc(pool, 4 * GPUMEM_MIB, &c, &why)); /* [12, 16) */
    ASSERT_EQ(a, w);
    ASSERT_EQ(c, w + 12 * GPUMEM_MIB);
    ASSERT_OK(gpumem__pool_free(pool, a, &why)); /* stamped 16 + 16 */
    ASSERT_OK(gpumem__pool_release_unused(pool, &released, &why));
    ASSERT_EQ(released, 6 * GPUMEM_MIB);         /* a's hole, unmapped, in the arena */
    ASSERT_OK(gpumem__pool_free(pool, h, &why)); /* stamped 22 + 10 = 32 */
    /* 8 MiB fits no hole: a growth step to [16, 24), the peak 18 */
    ASSERT_OK(gpumem__pool_alloc(pool, 8 * GPUMEM_MIB, &x, &why));
    ASSERT_EQ(x, c + 4 * GPUMEM_MIB);
    ASSERT_EQ(info(pool).peak_reserved_bytes, 18 * GPUMEM_MIB);
    /* 7 MiB handed out in h's low granule: its top one keeps its stamp */
    for (int i = 0; i < 7; i++) {
        ASSERT_OK(gpumem__pool_alloc(pool, 1 * GPUMEM_MIB, &t, &why));
        ASSERT_EQ(t, h);
        ASSERT_OK(gpumem__pool_free(pool, t, &why));
    }
    /* 6 MiB lands on a's hole: 6 MiB to map past the peak, nothing idle */
    ASSERT_OK(gpumem__pool_alloc(pool, 6 * GPUMEM_MIB, &y, &why));
    ASSERT_EQ(y, a);
    ASSERT_EQ(info(pool).reserved_bytes, 24 * GPUMEM_MIB);
    ASSERT_EQ(info(pool).peak_reserved_bytes, 24 * GPUMEM_MIB);
    ASSERT_EQ(info(pool).largest_free_block, 4 * GPUMEM_MIB); /* h's, mapped */
    ASSERT_OK(gpumem__pool_free(pool, y, &why));
    ASSERT_OK(gpumem__pool_free(pool, b, &why));
    ASSERT_OK(gpumem__pool_free(pool, c, &why));
    ASSERT_OK(gpumem__pool_free(pool, x, &why));
    gpumem__pool_destroy(pool);
    teardown();
}

/* The trim's promise: it never changes where an allocation goes, so a pool
 * that trims maps a part of what one that does not maps, at every moment, and
 * its peak is never higher, whatever its window. Three pools, trimming with the
 * default window (1), with none (0: every free granule is idle) and not
 * trimming, get the same random allocations and frees (up to 24 live, of 1-4 MiB
 * at first and up to 41 MiB at the end); the addresses must be the same
 * (relative to each pool's range), the reserved bytes never more than without
 * the trim, and every live allocation keep its first and last bytes through the
 * granules mapped and given back around it. */
TEST(the_trim_places_as_no_trim_and_never_maps_more)
{
    setup("pool-bound:4GiB");
    struct options o[3] = {opts, opts, opts};
    o[1].growth_trim_window = 0;
    o[2].growth_trim = false;
    struct pool *pools[3];
    for (int i = 0; i < 3; i++) {
        struct pool_params p = {.backend = backend,
                                .device = 0,
                                .budget = 1 * GPUMEM_GIB,
                                .growth = true,
                                .budget_reason = "test budget",
                                .map = &map,
                                .opts = &o[i]};
        snprintf(p.label, sizeof p.label, "/device:GPU:0");
        ASSERT_OK(gpumem__pool_create(&p, &pools[i], &why));
    }
    uint64_t live[3][24] = {{0}}, first[3] = {0, 0, 0}, rng = 0x9E3779B97F4A7C15ull;
    uint64_t sizes[24] = {0};
    for (int op = 0; op < 3000; op++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        size_t k = (size_t)(rng % 24);
        if (live[0][k]) {
            for (int i = 0; i < 3; i++) {
                const unsigned char *q = (const unsigned char *)(uintptr_t)live[i][k];
                ASSERT_EQ(q[0], (unsigned char)(k + 1));
                ASSERT_EQ(q[sizes[k] - 1], (unsigned char)(k + 1));
                ASSERT_OK(gpumem__pool_free(pools[i], live[i][k], &why));
                live[i][k] = 0;
            }
        } else {
            /* sizes that grow over the run: the early holes fall idle */
            sizes[k] = (1 + (rng >> 32) % (4 + (uint64_t)op / 80)) * GPUMEM_MIB -
                       (rng >> 8) % 4096 * 256;
            for (int i = 0; i < 3; i++) {
                ASSERT_OK(gpumem__pool_alloc(pools[i], sizes[k], &live[i][k], &why));
                if (!first[i])
                    first[i] = live[i][k];
                unsigned char *q = (unsigned char *)(uintptr_t)live[i][k];
                q[0] = q[sizes[k] - 1] = (unsigned char)(k + 1);
            }
            ASSERT_EQ(live[0][k] - first[0], live[2][k] - first[2]);
            ASSERT_EQ(live[1][k] - first[1], live[2][k] - first[2]);
        }
        ASSERT_TRUE(info(pools[0]).reserved_bytes <= info(pools[2]).reserved_bytes);
        ASSERT_TRUE(info(pools[1]).reserved_bytes <= info(pools[2]).reserved_bytes);
    }
    /* and the shortest window saved something on this churn */
    ASSERT_TRUE(info(pools[1]).peak_reserved_bytes < info(pools[2]).peak_reserved_bytes);
    for (int i = 0; i < 3; i++) {
        for (size_t k = 0; k < 24; k++)
            if (live[i][k])
                ASSERT_OK(gpumem__pool_free(pools[i], live[i][k], &why));
        gpumem__pool_destroy(pools[i]);
    }
    teardown();
}

/* The trim's messages at INFO, counted (the trim says once that it stops). */
static int trim_stops_logged;

static void count_trim_stops(void *user, int level, const char *message)
{
    (void)user;
    if (level == GPUMEM_LOG_INFO && strstr(message, "the trim stops"))
        trim_stops_logged++;
}

/* Hands out 32 MiB, more than the pool's peak, in the scratch hole at `s`, so
 * that every other free granule stays free across the trim's window. */
static void hand_out_in(struct pool *pool, uint64_t s)
{
    for (int i = 0; i < 32; i++) {
        uint64_t t;
        ASSERT_OK(gpumem__pool_alloc(pool, 1 * GPUMEM_MIB, &t, &why));
        ASSERT_EQ(t, s);
        ASSERT_OK(gpumem__pool_free(pool, t, &why));
    }
}

/* A workload that does not repeat within the trim's window makes it swap: two
 * holes used in turn, each idle across the window while the other is in use,
 * so each landing on one maps it past the peak and gives the other back. The
 * trim counts what allocations map back of what it gave back, and stops for
 * good once that reaches its peak (window 1): the pool then grows to the peak
 * it has without the trim, and the loop maps and unmaps nothing more. In MiB,
 * one region of 16 (one extent a granule): holes h1 [0, 4) and h2 [6, 12), a
 * scratch hole [4.25, 5.75) between two live quarters of a MiB (its granule is
 * never whole), k [12, 16) live; then z, 8 MiB that no hole holds. */
TEST(the_trim_stops_once_allocations_have_mapped_back_its_peak)
{
    setup("pool-regret:1GiB");
    opts.log = count_trim_stops;
    opts.log_level = GPUMEM_LOG_INFO;
    trim_stops_logged = 0;
    struct pool *pool = make_pool(512 * GPUMEM_MIB, true);
    const uint64_t q = GPUMEM_MIB / 4;
    uint64_t w, h1, s1, s, s2, h2, k, z, x;
    ASSERT_OK(gpumem__pool_alloc(pool, 16 * GPUMEM_MIB, &w, &why));
    ASSERT_OK(gpumem__pool_free(pool, w, &why));
    ASSERT_OK(gpumem__pool_alloc(pool, 4 * GPUMEM_MIB, &h1, &why));
    ASSERT_OK(gpumem__pool_alloc(pool, q, &s1, &why));
    ASSERT_OK(gpumem__pool_alloc(pool, 6 * q, &s, &why));
    ASSERT_OK(gpumem__pool_alloc(pool, q, &s2, &why));
    ASSERT_OK(gpumem__pool_alloc(pool, 6 * GPUMEM_MIB, &h2, &why));
    ASSERT_OK(gpumem__pool_alloc(pool, 4 * GPUMEM_MIB, &k, &why));
    ASSERT_EQ(h1, w);
    ASSERT_EQ(h2, w + 6 * GPUMEM_MIB);
    ASSERT_EQ(k, w + 12 * GPUMEM_MIB);
    ASSERT_OK(gpumem__pool_free(pool, h1, &why));
    ASSERT_OK(gpumem__pool_free(pool, s, &why));
    ASSERT_OK(gpumem__pool_free(pool, h2, &why));
    hand_out_in(pool, s);
    /* past the peak (16): both idle holes go (10 MiB), z maps 8 */
    ASSERT_OK(gpumem__pool_alloc(pool, 8 * GPUMEM_MIB, &z, &why));
    ASSERT_EQ(info(pool).reserved_bytes, 14 * GPUMEM_MIB);
    ASSERT_EQ(info(pool).peak_reserved_bytes, 16 * GPUMEM_MIB);
    /* the loop: h1's size, then h2's, each after the other hole fell idle;
     * expected reserved bytes after each landing (MiB): each maps its hole
     * past the peak and, but for the first, gives the other back; the trim's
     * mistakes add up to 4, 10, 14, 20: at 20, the peak, it stops, and the
     * next landing maps past the peak with nothing given back (24, as without
     * the trim: 16 + 8); nothing moves after */
    static const uint64_t reserved[] = {18, 20, 18, 20, 24, 24, 24, 24, 24, 24};
    for (int i = 0; i < 10; i++) {
        const uint64_t size = i % 2 == 0 ? 4 : 6, at = i % 2 == 0 ? h1 : h2;
        hand_out_in(pool, s);
        ASSERT_OK(gpumem__pool_alloc(pool, size * GPUMEM_MIB, &x, &why));
        ASSERT_EQ(x, at);
        memset((void *)(uintptr_t)x, 0x5a, size * GPUMEM_MIB); /* mapped, writable */
        ASSERT_EQ(info(pool).reserved_bytes, reserved[i] * GPUMEM_MIB);
        ASSERT_EQ(trim_stops_logged, i < 4 ? 0 : 1);
        ASSERT_OK(gpumem__pool_free(pool, x, &why));
    }
    ASSERT_EQ(info(pool).peak_reserved_bytes, 24 * GPUMEM_MIB);
    ASSERT_EQ(device_free(), 1 * GPUMEM_GIB - 24 * GPUMEM_MIB);
    /* a release still gives every free granule back */
    uint64_t released = 0;
    ASSERT_OK(gpumem__pool_release_unused(pool, &released, &why));
    ASSERT_EQ(released, 10 * GPUMEM_MIB); /* h1 and h2 */
    ASSERT_OK(gpumem__pool_free(pool, s1, &why));
    ASSERT_OK(gpumem__pool_free(pool, s2, &why));
    ASSERT_OK(gpumem__pool_free(pool, k, &why));
    ASSERT_OK(gpumem__pool_free(pool, z, &why));
    gpumem__pool_destroy(pool);
    opts.log = NULL;
    teardown();
}

/* A loop whose every step reaches the same peak: after the first steps, it maps
 * nothing more and gives nothing back. A granule mapped again comes back zeroed
 * (the simulated GPU's), so the bytes each step left in its temporaries must
 * still be there at the next. */
TEST(a_growing_pools_steady_state_maps_nothing)
{
    setup("pool-bound:1GiB");
    struct pool *pool = make_pool(512 * GPUMEM_MIB, true);
    static const uint64_t sizes[] = {10, 6, 3, 12, 7, 5}; /* MiB */
    uint64_t w, t[6], reserved = 0;
    ASSERT_OK(gpumem__pool_alloc(pool, 40 * GPUMEM_MIB, &w, &why));
    for (int step = 0; step < 12; step++) {
        for (int i = 0; i < 6; i++) {
            ASSERT_OK(gpumem__pool_alloc(pool, sizes[i] * GPUMEM_MIB, &t[i], &why));
            const unsigned char *p = (const unsigned char *)(uintptr_t)t[i];
            if (step >= 4) { /* written before: never mapped again since */
                ASSERT_NE(p[0], 0);
                ASSERT_NE(p[sizes[i] * GPUMEM_MIB - 1], 0);
            }
            memset((void *)(uintptr_t)t[i], 0x40 + i, sizes[i] * GPUMEM_MIB);
            if (i % 2 == 1) { /* a temporary of the step before, and this one */
                ASSERT_OK(gpumem__pool_free(pool, t[i - 1], &why));
            }
        }
        for (int i = 1; i < 6; i += 2)
            ASSERT_OK(gpumem__pool_free(pool, t[i], &why));
        if (step == 3)
            reserved = info(pool).reserved_bytes;
        if (step > 3) {
            ASSERT_EQ(info(pool).reserved_bytes, reserved);
            ASSERT_EQ(info(pool).peak_reserved_bytes, reserved);
        }
    }
    /* and its peak: live bytes and two granules' partial ends */
    ASSERT_TRUE(info(pool).peak_reserved_bytes <= info(pool).peak_bytes + 4 * GPUMEM_MIB);
    ASSERT_OK(gpumem__pool_free(pool, w, &why));
    gpumem__pool_destroy(pool);
    teardown();
}

int main(void)
{
    RUN(greedy_reserves_the_budget_up_front);
    RUN(every_pool_refills_holes_first);
    RUN(growth_extends_the_free_tail_by_the_shortfall);
    RUN(the_free_tail_serves_a_request_past_the_budget_left);
    RUN(a_shortfall_placed_away_from_the_tail_is_followed_by_a_whole_region);
    RUN(growth_never_passes_the_budget);
    RUN(release_unused_gives_whole_free_regions_back);
    RUN(greedy_pool_takes_its_budget_back_after_a_release);
    RUN(greedy_pool_grows_when_its_budget_is_no_longer_free);
    RUN(cached_regions_are_released_before_out_of_memory);
    RUN(bad_frees_change_nothing);
    RUN(a_chunk_may_span_two_growth_regions);
    RUN(pools_growing_at_once_each_get_their_map_entry);
    RUN(a_refused_region_leaves_no_promise_in_the_map);
    RUN(a_region_the_arena_refuses_and_the_device_keeps_stays_reserved);
    RUN(a_release_gives_granules_back_and_reuse_maps_them_again);
    RUN(a_landing_the_device_cannot_map_takes_the_pools_other_free_granules);
    RUN(a_growth_step_away_from_the_tail_stays_within_the_budget);
    RUN(a_fallback_to_a_plain_region_stays_within_the_budget);
    RUN(a_growing_pool_gives_idle_granules_back_before_its_peak_grows);
    RUN(a_landing_on_given_back_granules_trims_by_the_clock_before_it);
    RUN(the_trim_places_as_no_trim_and_never_maps_more);
    RUN(the_trim_stops_once_allocations_have_mapped_back_its_peak);
    RUN(a_growing_pools_steady_state_maps_nothing);
    HARNESS_EXIT();
}
