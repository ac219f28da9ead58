/* gpumem_list_driver_calls on simulated GPUs: the two-call idiom over a fixed
 * list of entry points, per GPU and summed, nothing initialized and nothing
 * counted before initialization, what a growing pool's mappings and a greedy
 * pool's region count, and the argument checks. The CUDA side (every call the
 * backend makes is counted; a simulated GPU and the driver double count the same
 * for one workload): tests/backend/test_cuda_calls.c. */
#include "api_util.h"

#define MAX_KINDS 64

struct calls {
    size_t n;
    gpumem_driver_call e[MAX_KINDS];
};

static struct calls read_calls(gpumem_runtime *rt, int physical)
{
    struct calls c;
    memset(&c, 0, sizeof c);
    c.e[0].struct_size = sizeof c.e[0];
    ASSERT_OK(gpumem_list_driver_calls(rt, physical, c.e, MAX_KINDS, &c.n));
    ASSERT_LE(c.n, MAX_KINDS);
    return c;
}

static const gpumem_driver_call *find(const struct calls *c, const char *name)
{
    for (size_t i = 0; i < c->n; i++)
        if (strcmp(c->e[i].name, name) == 0)
            return &c->e[i];
    HARNESS_FAIL("no entry \"%s\" among %zu", name, c->n);
    static const gpumem_driver_call none;
    return &none;
}

static uint64_t calls_of(const struct calls *c, const char *name)
{
    return find(c, name)->calls;
}

static uint64_t total_calls(const struct calls *c)
{
    uint64_t n = 0;
    for (size_t i = 0; i < c->n; i++)
        n += c->e[i].calls;
    return n;
}

TEST(the_list_is_fixed_and_follows_the_two_call_idiom)
{
    gpumem_runtime *rt = sim_runtime("DC-A:2GiB,DC-B:1GiB");
    if (!rt)
        return;
    size_t count = 0;
    ASSERT_OK(gpumem_list_driver_calls(rt, -1, NULL, 0, &count));
    ASSERT_TRUE(count >= 20);
    struct calls all = read_calls(rt, -1);
    ASSERT_EQ(all.n, count);
    /* every entry named, once, each a driver symbol; the ones the backends make */
    for (size_t i = 0; i < all.n; i++) {
        ASSERT_EQ(all.e[i].struct_size, sizeof all.e[i]);
        ASSERT_TRUE(strncmp(all.e[i].name, "cu", 2) == 0);
        for (size_t j = 0; j < i; j++)
            if (strcmp(all.e[i].name, all.e[j].name) == 0)
                HARNESS_FAIL("\"%s\" listed twice", all.e[i].name);
    }
    static const char *const expected[] = {"cuCtxPushCurrent_v2",
                                           "cuCtxPopCurrent_v2",
                                           "cuDevicePrimaryCtxRetain",
                                           "cuMemGetInfo_v2",
                                           "cuMemAlloc_v2",
                                           "cuMemFree_v2",
                                           "cuMemAddressReserve",
                                           "cuMemAddressFree",
                                           "cuMemCreate",
                                           "cuMemMap",
                                           "cuMemSetAccess",
                                           "cuMemUnmap",
                                           "cuMemRelease",
                                           "cuEventCreate",
                                           "cuEventRecord",
                                           "cuEventQuery",
                                           "cuEventSynchronize",
                                           "cuStreamWaitEvent"};
    for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++)
        (void)find(&all, expected[i]);
    /* a short capacity fills what fits and reports the whole count */
    gpumem_driver_call few[3];
    memset(few, 0x5A, sizeof few);
    few[0].struct_size = sizeof few[0];
    size_t n = 0;
    ASSERT_OK(gpumem_list_driver_calls(rt, 0, few, 2, &n));
    ASSERT_EQ(n, count);
    ASSERT_STREQ(few[0].name, all.e[0].name);
    ASSERT_STREQ(few[1].name, all.e[1].name);
    ASSERT_EQ(few[2].struct_size, 0x5A5A5A5A); /* past the capacity: untouched */
    gpumem_runtime_destroy(rt);
}

TEST(reading_initializes_nothing_and_nothing_is_counted_before)
{
    gpumem_runtime *rt = sim_runtime("DC-C:1GiB");
    if (!rt)
        return;
    size_t count = 0;
    gpumem_physical_device d[1] = {GPUMEM_STRUCT_INIT(gpumem_physical_device)};
    ASSERT_OK(gpumem_list_physical_devices(rt, d, 1, &count));
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    struct calls c = read_calls(rt, 0);
    ASSERT_EQ(total_calls(&c), 0);
    bool on = true;
    ASSERT_OK(gpumem_is_initialized(rt, &on));
    ASSERT_FALSE(on);
    /* initialization asks each GPU for its free memory */
    ASSERT_OK(gpumem_initialize(rt));
    c = read_calls(rt, 0);
    uint64_t info = calls_of(&c, "cuMemGetInfo_v2");
    ASSERT_TRUE(info >= 1);
    ASSERT_EQ(calls_of(&c, "cuDevicePrimaryCtxRetain"), 1); /* once per GPU */
    ASSERT_TRUE(calls_of(&c, "cuCtxPushCurrent_v2") >= info);
    ASSERT_EQ(calls_of(&c, "cuCtxPushCurrent_v2"), calls_of(&c, "cuCtxPopCurrent_v2"));
    gpumem_runtime_destroy(rt);
}

/* What the counters must say whatever the pool's policy of the day: a growing
 * pool maps whole granules (each one a create, a map, an access and a release of
 * the same bytes), every push has its pop, and the counters only grow. */
TEST(a_growing_pool_counts_its_mappings)
{
    gpumem_runtime *rt = sim_runtime("DC-D:1GiB");
    if (!rt)
        return;
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    void *p[8];
    for (int i = 0; i < 8; i++)
        ASSERT_OK(gpumem_malloc(rt, 0, (size_t)(i + 1) * 3 * MiB, &p[i]));
    struct calls grown = read_calls(rt, 0);
    uint64_t maps = calls_of(&grown, "cuMemMap");
    ASSERT_TRUE(maps > 0);
    const uint64_t mapped = find(&grown, "cuMemMap")->bytes;
    ASSERT_TRUE(mapped >= 108 * MiB); /* 3 + 6 + ... + 24 MiB live */
    ASSERT_EQ(mapped % (2 * MiB), 0);
    ASSERT_EQ(find(&grown, "cuMemCreate")->bytes, mapped);
    ASSERT_EQ(find(&grown, "cuMemSetAccess")->bytes, mapped);
    ASSERT_EQ(find(&grown, "cuMemRelease")->bytes, mapped);
    ASSERT_EQ(calls_of(&grown, "cuMemCreate"), maps);
    ASSERT_EQ(calls_of(&grown, "cuMemSetAccess"), maps);
    ASSERT_EQ(calls_of(&grown, "cuMemRelease"), maps);
    ASSERT_TRUE(calls_of(&grown, "cuMemAddressReserve") >= 1);
    /* the backend asks once per GPU and keeps the answer, as the CUDA one does */
    ASSERT_EQ(calls_of(&grown, "cuMemGetAllocationGranularity"), 1);
    ASSERT_EQ(calls_of(&grown, "cuCtxPushCurrent_v2"),
              calls_of(&grown, "cuCtxPopCurrent_v2"));
    ASSERT_EQ(calls_of(&grown, "cuEventCreate"), 0); /* synchronous streams */
    /* the simulation's own time is booked under the call doing the work */
    ASSERT_TRUE(find(&grown, "cuMemMap")->ns > 0);
    ASSERT_EQ(find(&grown, "cuCtxPushCurrent_v2")->ns, 0);
    for (int i = 0; i < 8; i++)
        ASSERT_OK(gpumem_free(rt, p[i]));
    uint64_t released = 0;
    ASSERT_OK(gpumem_release_unused(rt, 0, &released));
    ASSERT_TRUE(released > 0);
    /* nothing is mapped now: every byte ever mapped has been unmapped */
    struct calls after = read_calls(rt, 0);
    ASSERT_EQ(find(&after, "cuMemUnmap")->bytes, find(&after, "cuMemMap")->bytes);
    ASSERT_LE(mapped, find(&after, "cuMemMap")->bytes);
    for (size_t i = 0; i < after.n; i++)
        ASSERT_LE(grown.e[i].calls, after.e[i].calls);
    ASSERT_EQ(calls_of(&after, "cuCtxPushCurrent_v2"),
              calls_of(&after, "cuCtxPopCurrent_v2"));
    gpumem_runtime_destroy(rt);
}

/* Issue 31's goal for large growth: one 64 GiB request on a growing pool maps
 * in a few physical allocations (at most 64 driver calls, every kind counted;
 * it was 131,077, four calls a 2 MiB granule) and is given back in as few
 * (at most 64; it was 32,768 unmaps; now 3: its eight extents side by side go
 * in one unmap). The simulated GPU reserves host address
 * space without memory behind it, and nothing here touches the bytes. */
TEST(a_large_growth_maps_and_gives_back_in_a_few_calls)
{
    gpumem_runtime *rt = sim_runtime("DC-L:80GiB");
    if (!rt)
        return;
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    ASSERT_OK(gpumem_initialize(rt));
    struct calls start = read_calls(rt, 0);
    void *p = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, (size_t)64 * 1024 * MiB, &p));
    struct calls grown = read_calls(rt, 0);
    ASSERT_LE(total_calls(&grown) - total_calls(&start), 64);
    /* one context push for the whole growth (a scope, backend.h) */
    ASSERT_EQ(calls_of(&grown, "cuCtxPushCurrent_v2") -
                  calls_of(&start, "cuCtxPushCurrent_v2"),
              1);
    ASSERT_EQ(find(&grown, "cuMemMap")->bytes, (uint64_t)64 * 1024 * MiB);
    ASSERT_OK(gpumem_free(rt, p));
    uint64_t released = 0;
    ASSERT_OK(gpumem_release_unused(rt, 0, &released));
    ASSERT_EQ(released, (uint64_t)64 * 1024 * MiB);
    struct calls after = read_calls(rt, 0);
    ASSERT_LE(total_calls(&after) - total_calls(&grown), 64);
    ASSERT_EQ(calls_of(&after, "cuCtxPushCurrent_v2") -
                  calls_of(&grown, "cuCtxPushCurrent_v2"),
              1);
    ASSERT_EQ(find(&after, "cuMemUnmap")->bytes, (uint64_t)64 * 1024 * MiB);
    /* its eight extents side by side: one unmap, a push and a pop */
    ASSERT_EQ(calls_of(&after, "cuMemUnmap") - calls_of(&grown, "cuMemUnmap"), 1);
    ASSERT_EQ(total_calls(&after) - total_calls(&grown), 3);
    gpumem_runtime_destroy(rt);
}

/* Out of memory on a pool grown in small steps and left fragmented: 64
 * requests of 8 MiB, each growing the pool by what it lacks (so each is mapped
 * in 4 extents of one granule), every other one freed, then a request the GPU
 * has no room for (past the budget of 799 MiB) until the pool gives its 32
 * holes back. A hole's extents lie
 * side by side and go back in one call (cuMemUnmap takes a run of whole
 * mappings): the give-back costs one unmap per hole, not one per granule (it
 * was 128), and the retry's growth a few calls more (here one plain region:
 * the holes stay placed in the address range, whose free end is too short). */
TEST(out_of_memory_on_a_fragmented_pool_gives_each_hole_back_in_one_call)
{
    gpumem_runtime *rt = sim_runtime("DC-O:1GiB");
    if (!rt)
        return;
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    void *p[64], *big = NULL;
    for (int i = 0; i < 64; i++)
        ASSERT_OK(gpumem_malloc(rt, 0, 8 * MiB, &p[i]));
    for (int i = 0; i < 64; i += 2)
        ASSERT_OK(gpumem_free(rt, p[i]));
    struct calls before = read_calls(rt, 0);
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 512 * MiB);
    ASSERT_OK(gpumem_malloc(rt, 0, 500 * MiB, &big)); /* 512 reserved: past the budget */
    struct calls after = read_calls(rt, 0);
    uint64_t unmaps = calls_of(&after, "cuMemUnmap") - calls_of(&before, "cuMemUnmap");
    uint64_t all = total_calls(&after) - total_calls(&before);
    printf("  out of memory: %llu unmaps, %llu calls in all\n",
           (unsigned long long)unmaps, (unsigned long long)all);
    ASSERT_EQ(unmaps, 32); /* one per hole */
    ASSERT_EQ(find(&after, "cuMemUnmap")->bytes - find(&before, "cuMemUnmap")->bytes,
              256 * MiB);
    ASSERT_LE(all, 32 + 16); /* the give-back, a push and a pop, the retry */
    ASSERT_OK(gpumem_free(rt, big));
    for (int i = 1; i < 64; i += 2)
        ASSERT_OK(gpumem_free(rt, p[i]));
    gpumem_runtime_destroy(rt);
}

TEST(each_gpu_counts_its_own_and_minus_one_sums_them)
{
    gpumem_runtime *rt = sim_runtime("DC-E:1GiB,DC-F:2GiB");
    if (!rt)
        return;
    gpumem_logical_device_config limit = GPUMEM_LOGICAL_DEVICE_LIMIT(256 * MiB);
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 1, &limit, 1));
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    ASSERT_OK(gpumem_initialize(rt)); /* GPU 1, greedy: its region now */
    struct calls g0 = read_calls(rt, 0), g1 = read_calls(rt, 1), all = read_calls(rt, -1);
    ASSERT_EQ(calls_of(&g0, "cuMemAlloc_v2"), 0);
    ASSERT_EQ(calls_of(&g1, "cuMemAlloc_v2"), 1);
    ASSERT_EQ(find(&g1, "cuMemAlloc_v2")->bytes, 256 * MiB);
    ASSERT_EQ(all.n, g0.n);
    for (size_t i = 0; i < all.n; i++) {
        ASSERT_STREQ(all.e[i].name, g0.e[i].name);
        ASSERT_EQ(all.e[i].calls, g0.e[i].calls + g1.e[i].calls);
        ASSERT_EQ(all.e[i].bytes, g0.e[i].bytes + g1.e[i].bytes);
        ASSERT_EQ(all.e[i].ns, g0.e[i].ns + g1.e[i].ns);
    }
    /* a second runtime on the same simulated GPUs counts its own calls */
    gpumem_runtime *other = sim_runtime("DC-E:1GiB,DC-F:2GiB");
    if (other) {
        struct calls o = read_calls(other, -1);
        ASSERT_EQ(total_calls(&o), 0);
        gpumem_runtime_destroy(other);
    }
    gpumem_runtime_destroy(rt);
}

TEST(bad_arguments_change_nothing)
{
    gpumem_runtime *rt = sim_runtime("DC-G:1GiB,DC-H:1GiB");
    if (!rt)
        return;
    gpumem_driver_call one = GPUMEM_STRUCT_INIT(gpumem_driver_call);
    size_t count = 7;
    ASSERT_STATUS(gpumem_list_driver_calls(rt, 2, &one, 1, &count),
                  GPUMEM_ERR_NO_SUCH_DEVICE);
    ASSERT_CONTAINS(gpumem_last_error(),
                    "gpumem_list_driver_calls(GPU:2): no such physical device (this "
                    "runtime has 2 GPUs; -1 sums them all)");
    ASSERT_STATUS(gpumem_list_driver_calls(rt, -2, &one, 1, &count),
                  GPUMEM_ERR_NO_SUCH_DEVICE);
    ASSERT_EQ(count, 7);
    ASSERT_STATUS(gpumem_list_driver_calls(rt, 0, &one, 1, NULL),
                  GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(gpumem_last_error(), "gpumem_list_driver_calls: `count` is NULL");
    ASSERT_STATUS(gpumem_list_driver_calls(rt, 0, NULL, 3, &count),
                  GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_EQ(count, 7);
    ASSERT_EQ(one.name[0], '\0');
    gpumem_runtime_destroy(rt);
}

int main(void)
{
    RUN(the_list_is_fixed_and_follows_the_two_call_idiom);
    RUN(reading_initializes_nothing_and_nothing_is_counted_before);
    RUN(a_growing_pool_counts_its_mappings);
    RUN(a_large_growth_maps_and_gives_back_in_a_few_calls);
    RUN(out_of_memory_on_a_fragmented_pool_gives_each_hole_back_in_one_call);
    RUN(each_gpu_counts_its_own_and_minus_one_sums_them);
    RUN(bad_arguments_change_nothing);
    HARNESS_EXIT();
}
