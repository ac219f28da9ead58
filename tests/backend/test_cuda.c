/* The public API on the CUDA backend over the driver double: enumeration, auto,
 * greedy budgets, growth with and without VMM (a chunk across two growth steps,
 * memory back in the driver's free count), limits, logical devices, driver OOM
 * with release and retry, the caller's context, threads, no driver or device,
 * error messages. `test_cuda env` / `env-init` read FAKECUDA_* (meson.build). */
#include "cuda_util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#define H100 "NVIDIA H100 80GB HBM3:80GiB:9.0"
#define T4   "Tesla T4:15GiB:7.5"

/* The driver double's own entry points, called directly by the test below. */
#define DECLARE(name, params) CUresult name params;
CUDA_API_ALL(DECLARE)
#undef DECLARE

/* ------------------------------------------------- the double's own checks -- */

TEST(the_double_catches_misuse)
{
    fresh_driver(T4);
    CUdeviceptr p = 0;
    CUcontext ctx = NULL, popped = NULL;
    ASSERT_EQ(cuMemAlloc_v2(&p, 4096), CUDA_ERROR_NOT_INITIALIZED);
    ASSERT_CONTAINS(fakecuda_last_misuse(), "before cuInit");
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    ASSERT_EQ(cuMemAlloc_v2(&p, 4096), CUDA_ERROR_INVALID_CONTEXT);
    ASSERT_CONTAINS(fakecuda_last_misuse(), "without a current context");
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxPushCurrent_v2(ctx), CUDA_SUCCESS);
    ASSERT_EQ(cuMemAlloc_v2(&p, 4096), CUDA_SUCCESS);
    ASSERT_EQ(cuMemFree_v2(p + 256), CUDA_ERROR_INVALID_VALUE);
    ASSERT_CONTAINS(fakecuda_last_misuse(), "interior pointer");
    ASSERT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
    ASSERT_EQ(cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE);
    ASSERT_CONTAINS(fakecuda_last_misuse(), "double free");
    ASSERT_EQ(cuMemRelease(12345), CUDA_ERROR_INVALID_VALUE);
    ASSERT_CONTAINS(fakecuda_last_misuse(), "not a live handle");
    ASSERT_EQ(cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
    ASSERT_TRUE(popped == ctx);
    ASSERT_EQ(cuCtxPopCurrent_v2(&popped), CUDA_ERROR_INVALID_CONTEXT);
    ASSERT_CONTAINS(fakecuda_last_misuse(), "no context on the stack");
    ASSERT_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
    ASSERT_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_ERROR_INVALID_CONTEXT);
    ASSERT_CONTAINS(fakecuda_last_misuse(), "not retained");
    ASSERT_EQ(fakecuda_misuses(), 7);
    fakecuda_reset();
}

/* ---------------------------------------------------------- enumeration -- */

TEST(each_gpu_has_the_drivers_uuid_as_nvidia_smi_prints_it)
{
    fresh_driver(H100 "," T4 "," T4);
    static const unsigned char mine[16] = {0x5e, 0x1f, 0x00, 0xff, 0x12, 0x34,
                                           0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0,
                                           0x01, 0x02, 0x03, 0x04};
    fakecuda_set_uuid(1, mine);
    fakecuda_set_uuid(2, NULL); /* the driver cannot tell */
    gpumem_runtime *rt = cuda_runtime();
    if (!rt)
        return;
    gpumem_physical_device d[3] = {GPUMEM_STRUCT_INIT(gpumem_physical_device)};
    size_t n = 0;
    ASSERT_OK(gpumem_list_physical_devices(rt, d, 3, &n));
    ASSERT_EQ(n, 3);
    ASSERT_STREQ(d[0].uuid, "GPU-fa4ec0da-0000-4000-8000-000000000000");
    ASSERT_STREQ(d[1].uuid, "GPU-5e1f00ff-1234-5678-9abc-def001020304");
    ASSERT_STREQ(d[2].uuid, "");
    ASSERT_EQ(d[2].total_bytes, 15 * GiB); /* the GPU works all the same */
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

TEST(enumeration_comes_from_the_driver)
{
    fresh_driver(H100 "," T4);
    gpumem_runtime *rt = cuda_runtime();
    if (!rt)
        return;
    gpumem_physical_device d[4] = {GPUMEM_STRUCT_INIT(gpumem_physical_device)};
    size_t n = 0;
    ASSERT_OK(gpumem_list_physical_devices(rt, d, 4, &n));
    ASSERT_EQ(n, 2);
    ASSERT_STREQ(d[0].name, "/physical_device:GPU:0");
    ASSERT_STREQ(d[0].model, "NVIDIA H100 80GB HBM3");
    ASSERT_EQ(d[0].total_bytes, 80 * GiB);
    ASSERT_EQ(d[0].compute_major, 9);
    ASSERT_EQ(d[0].compute_minor, 0);
    ASSERT_STREQ(d[1].name, "/physical_device:GPU:1");
    ASSERT_STREQ(d[1].model, "Tesla T4");
    ASSERT_EQ(d[1].total_bytes, 15 * GiB);
    ASSERT_EQ(d[1].compute_major, 7);
    ASSERT_EQ(d[1].compute_minor, 5);
    /* enumerating initializes nothing: no context, no memory */
    struct fakecuda_live live;
    fakecuda_live(&live);
    ASSERT_EQ(live.context_refs, 0);
    ASSERT_EQ(fakecuda_calls("cuDevicePrimaryCtxRetain"), 0);
    ASSERT_EQ(fakecuda_calls("cuMemGetInfo_v2"), 0);
    ASSERT_EQ(fakecuda_free_bytes(0), 80 * GiB);
    ASSERT_CONTAINS(log_text, "2 devices, virtual memory management available");
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

TEST(auto_picks_cuda_when_the_driver_has_a_device)
{
    fresh_driver(T4);
    gpumem_status s;
    gpumem_runtime *rt = runtime_on(GPUMEM_BACKEND_AUTO, &s);
    ASSERT_OK(s);
    if (!rt)
        return;
    gpumem_physical_device d = GPUMEM_STRUCT_INIT(gpumem_physical_device);
    size_t n = 0;
    ASSERT_OK(gpumem_list_physical_devices(rt, &d, 1, &n));
    ASSERT_EQ(n, 1);
    ASSERT_STREQ(d.model, "Tesla T4");
    gpumem_backend_kind kind = GPUMEM_BACKEND_AUTO;
    ASSERT_OK(gpumem_get_backend(rt, &kind));
    ASSERT_EQ(kind, GPUMEM_BACKEND_CUDA);
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

/* --------------------------------------------------------------- greedy -- */

TEST(greedy_reserves_free_memory_minus_headroom)
{
    fresh_driver(H100 "," T4 ":1GiB"); /* another process holds 1 GiB of the T4 */
    gpumem_runtime *rt = cuda_runtime();
    if (!rt)
        return;
    ASSERT_OK(gpumem_initialize(rt));
    gpumem_logical_device l[2] = {GPUMEM_STRUCT_INIT(gpumem_logical_device)};
    size_t n = 0;
    ASSERT_OK(gpumem_list_logical_devices(rt, l, 2, &n));
    ASSERT_EQ(n, 2);
    /* TensorFlow's table: 1800 MiB for compute capability 9, 1050 MiB for 7 */
    ASSERT_EQ(l[0].memory_limit_bytes, 80 * GiB - 1800 * MiB);
    ASSERT_EQ(l[1].memory_limit_bytes, 14 * GiB - 1050 * MiB);
    ASSERT_FALSE(l[0].memory_growth);
    /* one allocation of the budget each, at initialization; the headroom is left */
    ASSERT_EQ(fakecuda_calls("cuMemAlloc_v2"), 2);
    ASSERT_EQ(fakecuda_free_bytes(0), 1800 * MiB);
    ASSERT_EQ(fakecuda_free_bytes(1), 1050 * MiB);
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 80 * GiB - 1800 * MiB);

    void *a = NULL, *b = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, 1 * GiB, &a));
    ASSERT_OK(gpumem_malloc(rt, 1, 100, &b));
    ASSERT_EQ(fakecuda_calls("cuMemAlloc_v2"), 2); /* served from the reservation */
    ASSERT_EQ(info_of(rt, 0).current_bytes, 1 * GiB);

    /* release_unused gives a wholly free greedy region back, for real */
    ASSERT_OK(gpumem_free(rt, a));
    uint64_t released = 0;
    ASSERT_OK(gpumem_release_unused(rt, 0, &released));
    ASSERT_EQ(released, 80 * GiB - 1800 * MiB);
    ASSERT_EQ(fakecuda_free_bytes(0), 80 * GiB);
    ASSERT_EQ(fakecuda_calls("cuMemFree_v2"), 1);
    /* and takes its budget back on demand */
    ASSERT_OK(gpumem_malloc(rt, 0, 1 * MiB, &a));
    ASSERT_EQ(fakecuda_free_bytes(0), 1800 * MiB);
    ASSERT_OK(gpumem_free(rt, a));
    ASSERT_OK(gpumem_free(rt, b));
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

TEST(the_headroom_is_taken_after_the_context_and_may_be_overridden)
{
    fresh_driver(H100);
    fakecuda_set_context_bytes(512 * MiB); /* what a primary context costs */
    setenv("GPUMEM_MIN_SYSTEM_MEMORY_MB", "4096", 1);
    gpumem_runtime *rt = cuda_runtime();
    unsetenv("GPUMEM_MIN_SYSTEM_MEMORY_MB");
    if (!rt)
        return;
    ASSERT_OK(gpumem_initialize(rt));
    /* free memory is read with the context made: 80 GiB - 512 MiB, minus 4 GiB */
    ASSERT_EQ(info_of(rt, 0).limit_bytes, 80 * GiB - 512 * MiB - 4 * GiB);
    ASSERT_EQ(fakecuda_free_bytes(0), 4 * GiB);
    gpumem_runtime_destroy(rt);
    ASSERT_EQ(fakecuda_free_bytes(0), 80 * GiB); /* the context is released too */
    check_driver_clean(0);
}

/* --------------------------------------------------------------- growth -- */

/* A growing pool of GPU 0: a 19 MiB chunk (a 20 MiB region), then a 3 MiB one
 * that the region's free 1 MiB tail cannot hold: with virtual memory management
 * the tail is extended by the 2 MiB it lacks (22 MiB in all), with plain
 * allocations a second 20 MiB region is taken (40 MiB). */
static void grow_twice(gpumem_runtime *rt, void **a, void **b, uint64_t reserved)
{
    ASSERT_OK(gpumem_malloc(rt, 0, 19 * MiB, a));
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 20 * MiB);
    ASSERT_OK(gpumem_malloc(rt, 0, 3 * MiB, b));
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, reserved);
}

TEST(virtual_memory_growth_spans_growth_steps_and_gives_memory_back)
{
    fresh_driver(H100);
    gpumem_runtime *rt = cuda_runtime();
    if (!rt)
        return;
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    ASSERT_OK(gpumem_initialize(rt));
    ASSERT_EQ(fakecuda_calls("cuMemAlloc_v2"), 0); /* growth takes nothing yet */
    uint64_t before = fakecuda_free_bytes(0);

    void *a = NULL, *b = NULL;
    grow_twice(rt, &a, &b, 22 * MiB);
    /* one address range for the whole budget; two regions side by side, the
     * first's 10 granules (2 MiB) mapped in 5 extents of 2, the second's 1 */
    ASSERT_EQ(fakecuda_calls("cuMemAddressReserve"), 1);
    ASSERT_EQ(fakecuda_calls("cuMemCreate"), 6);
    ASSERT_EQ(fakecuda_calls("cuMemMap"), 6);
    ASSERT_EQ(fakecuda_calls("cuMemSetAccess"), 6);
    ASSERT_EQ(fakecuda_calls("cuMemRelease"), 6);
    ASSERT_EQ(fakecuda_calls("cuMemAlloc_v2"), 0);
    ASSERT_EQ(fakecuda_free_bytes(0), before - 22 * MiB);
    /* the 3 MiB chunk starts in the first region's tail and runs into the second */
    ASSERT_EQ((uintptr_t)b, (uintptr_t)a + 19 * MiB);
    memset(b, 0x5a, 3 * MiB); /* mapped and open for writing across the boundary */
    ASSERT_EQ(((unsigned char *)b)[3 * MiB - 1], 0x5a);

    /* a chunk spanning both regions keeps both, and the extents it lies on: the
     * 4 whole extents of the free 19 MiB before it go back, not the one it
     * shares with them */
    ASSERT_OK(gpumem_free(rt, a));
    uint64_t released = 1;
    ASSERT_OK(gpumem_release_unused(rt, 0, &released));
    ASSERT_EQ(released, 16 * MiB);
    ASSERT_EQ(fakecuda_free_bytes(0), before - 6 * MiB);
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 6 * MiB);
    ASSERT_EQ(((unsigned char *)b)[3 * MiB - 1], 0x5a);
    /* all free: both regions are unmapped and the driver has the memory again */
    ASSERT_OK(gpumem_free(rt, b));
    ASSERT_OK(gpumem_release_unused(rt, 0, &released));
    ASSERT_EQ(released, 6 * MiB);
    ASSERT_EQ(fakecuda_free_bytes(0), before);
    /* a run of extents side by side in one call: the 4 before b, then b's
     * region's 2 and the first's last as two runs */
    ASSERT_EQ(fakecuda_calls("cuMemUnmap"), 3);
    struct fakecuda_live live;
    fakecuda_live(&live);
    ASSERT_EQ(live.mappings, 0);
    ASSERT_EQ(live.handles, 0);
    ASSERT_EQ(live.reservations, 1); /* the range stays for the next growth */
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 0);

    /* growing again maps at the lowest hole: the start of the range */
    void *c = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, 5 * MiB, &c));
    ASSERT_EQ((uintptr_t)c, (uintptr_t)a);
    ASSERT_EQ(fakecuda_calls("cuMemAddressReserve"), 1);
    ASSERT_OK(gpumem_free(rt, c));
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

/* Inside a region: a 16 MiB region (8 granules, each mapped on its own: a
 * region of up to eight is) holds a (5 MiB), b (6 MiB) and c (5 MiB). With b
 * freed, gpumem_release_unused gives back the whole granules of the free chunk,
 * 2 of b's (not the ones it shares with a and c), while a and c keep their
 * data; a later allocation on b's place maps its granules again. */
TEST(free_granules_inside_a_region_go_back_and_are_mapped_again)
{
    fresh_driver(H100);
    gpumem_runtime *rt = cuda_runtime();
    if (!rt)
        return;
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    void *x = NULL, *a = NULL, *b = NULL, *c = NULL, *d = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, 16 * MiB, &x));
    ASSERT_OK(gpumem_free(rt, x));
    uint64_t before = fakecuda_free_bytes(0);
    ASSERT_OK(gpumem_malloc(rt, 0, 5 * MiB, &a));
    ASSERT_OK(gpumem_malloc(rt, 0, 6 * MiB, &b));
    ASSERT_OK(gpumem_malloc(rt, 0, 5 * MiB, &c));
    ASSERT_EQ((uintptr_t)a, (uintptr_t)x);
    ASSERT_EQ((uintptr_t)c, (uintptr_t)x + 11 * MiB);
    memset(a, 0x11, 5 * MiB);
    memset(c, 0x33, 5 * MiB);
    ASSERT_OK(gpumem_free(rt, b));
    unsigned long unmaps = fakecuda_calls("cuMemUnmap");
    uint64_t released = 0;
    ASSERT_OK(gpumem_release_unused(rt, 0, &released));
    ASSERT_EQ(released, 4 * MiB);
    ASSERT_EQ(fakecuda_calls("cuMemUnmap"), unmaps + 1); /* the 2, side by side */
    ASSERT_EQ(fakecuda_free_bytes(0), before + 4 * MiB);
    gpumem_memory_info mi = info_of(rt, 0);
    ASSERT_EQ(mi.reserved_bytes, 12 * MiB);
    ASSERT_EQ(mi.current_bytes, 10 * MiB);
    /* the live neighbours and the granules they share with b are untouched */
    for (size_t i = 0; i < 5 * MiB; i += 4096) {
        ASSERT_EQ(((unsigned char *)a)[i], 0x11);
        ASSERT_EQ(((unsigned char *)c)[i], 0x33);
    }
    ASSERT_EQ(((unsigned char *)a)[5 * MiB - 1], 0x11);
    ASSERT_EQ(((unsigned char *)c)[5 * MiB - 1], 0x33);
    /* nothing more to give back */
    ASSERT_OK(gpumem_release_unused(rt, 0, &released));
    ASSERT_EQ(released, 0);

    /* b's place is the best fit for 6 MiB: its 2 granules are mapped again */
    unsigned long creates = fakecuda_calls("cuMemCreate");
    ASSERT_OK(gpumem_malloc(rt, 0, 6 * MiB, &d));
    ASSERT_EQ((uintptr_t)d, (uintptr_t)b);
    ASSERT_EQ(fakecuda_calls("cuMemCreate"), creates + 2);
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 16 * MiB);
    ASSERT_EQ(fakecuda_free_bytes(0), before);
    memset(d, 0x22, 6 * MiB); /* mapped and open for writing again */
    ASSERT_EQ(((unsigned char *)a)[5 * MiB - 1], 0x11);
    ASSERT_EQ(((unsigned char *)c)[0], 0x33);
    ASSERT_OK(gpumem_free(rt, a));
    ASSERT_OK(gpumem_free(rt, c));
    ASSERT_OK(gpumem_free(rt, d));
    ASSERT_OK(gpumem_release_unused(rt, 0, &released));
    ASSERT_EQ(released, 16 * MiB);
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 0);
    ASSERT_EQ(fakecuda_free_bytes(0), before + 16 * MiB);
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

/* Before out of memory is reported: a 16 MiB region (8 granules, each its own
 * mapping) holds a (4 MiB), a free 6 MiB hole, c (4 MiB) and a free 2 MiB tail;
 * the card has nothing left. An 8 MiB request lacks 6 MiB beyond the tail, which
 * the driver refuses; the pool gives back the free chunks' 4 whole granules, so
 * the driver has 8 MiB again, and the retry maps 3 new granules and the tail's
 * one again. */
TEST(free_granules_go_back_before_out_of_memory)
{
    fresh_driver("Small:1GiB:8.0");
    /* the release before out of memory, not the trim before the peak grows,
     * which would give b's granules back first */
    setenv("GPUMEM_GROWTH_TRIM", "off", 1);
    gpumem_runtime *rt = cuda_runtime();
    unsetenv("GPUMEM_GROWTH_TRIM");
    if (!rt)
        return;
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    void *x = NULL, *a = NULL, *b = NULL, *c = NULL, *r = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, 16 * MiB, &x));
    ASSERT_OK(gpumem_free(rt, x));
    ASSERT_OK(gpumem_malloc(rt, 0, 4 * MiB, &a));
    ASSERT_OK(gpumem_malloc(rt, 0, 6 * MiB, &b));
    ASSERT_OK(gpumem_malloc(rt, 0, 4 * MiB, &c));
    ASSERT_OK(gpumem_free(rt, b));
    memset(a, 0x44, 4 * MiB);
    memset(c, 0x55, 4 * MiB);
    fakecuda_set_used_elsewhere(0, fakecuda_free_bytes(0));
    ASSERT_EQ(fakecuda_free_bytes(0), 0);
    ASSERT_OK(gpumem_malloc(rt, 0, 8 * MiB, &r));
    ASSERT_EQ((uintptr_t)r, (uintptr_t)x + 14 * MiB); /* the tail, extended */
    memset(r, 0x66, 8 * MiB);
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 16 * MiB); /* 8 granules mapped */
    ASSERT_EQ(fakecuda_free_bytes(0), 0); /* the retry took the 8 MiB given back */
    ASSERT_EQ(((unsigned char *)a)[4 * MiB - 1], 0x44);
    ASSERT_EQ(((unsigned char *)c)[0], 0x55);
    ASSERT_OK(gpumem_free(rt, a));
    ASSERT_OK(gpumem_free(rt, c));
    ASSERT_OK(gpumem_free(rt, r));
    fakecuda_set_used_elsewhere(0, 0);
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

/* The range's layout is plain best fit: a growth step takes the smallest hole that
 * holds it, the lowest first, even when a hole a little larger lies above. */
TEST(growth_fills_the_lowest_hole_of_the_range)
{
    fresh_driver(H100);
    gpumem_runtime *rt = cuda_runtime();
    if (!rt)
        return;
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    gpumem_logical_device_config c = GPUMEM_LOGICAL_DEVICE_LIMIT(62 * MiB);
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, &c, 1));
    void *a = NULL, *b = NULL, *x = NULL, *y = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, 20 * MiB, &a));
    ASSERT_OK(gpumem_malloc(rt, 0, 20 * MiB, &b));
    ASSERT_EQ((uintptr_t)b, (uintptr_t)a + 20 * MiB);
    /* the range: a hole of 20 MiB at its start, b, and a hole of 22 MiB */
    ASSERT_OK(gpumem_free(rt, a));
    uint64_t released = 0;
    ASSERT_OK(gpumem_release_unused(rt, 0, &released));
    ASSERT_EQ(released, 20 * MiB);
    ASSERT_OK(gpumem_malloc(rt, 0, 20 * MiB, &x));
    ASSERT_EQ((uintptr_t)x, (uintptr_t)a);
    /* so the 22 MiB hole is whole for a larger step, and no plain block is needed */
    ASSERT_OK(gpumem_malloc(rt, 0, 21 * MiB, &y));
    ASSERT_EQ((uintptr_t)y, (uintptr_t)a + 40 * MiB);
    ASSERT_EQ(fakecuda_calls("cuMemAlloc_v2"), 0);
    ASSERT_OK(gpumem_free(rt, b));
    ASSERT_OK(gpumem_free(rt, x));
    ASSERT_OK(gpumem_free(rt, y));
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

/* Two faults in a row: cuMemSetAccess fails, and so does the cuMemUnmap that
 * undoes the mapping. Those addresses stay mapped, so the range's layout keeps
 * them placed: later growth goes to the next hole (before, every later growth
 * retried the same addresses and failed), and at destroy the range, which still
 * holds that mapping, is left reserved rather than freed under it. */
TEST(a_mapping_that_cannot_be_undone_keeps_its_addresses)
{
    fresh_driver(H100);
    gpumem_runtime *rt = cuda_runtime();
    if (!rt)
        return;
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    ASSERT_OK(gpumem_initialize(rt));
    ASSERT_EQ(fakecuda_fail_nth("cuMemSetAccess", 1, CUDA_ERROR_INVALID_VALUE), 0);
    ASSERT_EQ(fakecuda_fail_nth("cuMemUnmap", 1, CUDA_ERROR_INVALID_VALUE), 0);
    void *p = NULL;
    ASSERT_STATUS(gpumem_malloc(rt, 0, 1024, &p), GPUMEM_ERR_BACKEND);
    ASSERT_CONTAINS(gpumem_last_error(), "cuMemSetAccess");
    struct fakecuda_live live;
    fakecuda_live(&live);
    ASSERT_EQ(live.mappings, 1);
    void *q = NULL, *r = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, 1024, &q));
    ASSERT_OK(gpumem_malloc(rt, 0, 64 * MiB, &r));
    ASSERT_OK(gpumem_free(rt, q));
    ASSERT_OK(gpumem_free(rt, r));
    gpumem_runtime_destroy(rt);
    fakecuda_live(&live);
    ASSERT_EQ(live.mappings, 1);     /* the one the driver would not undo */
    ASSERT_EQ(live.reservations, 1); /* and the range around it */
    ASSERT_EQ(live.allocations, 0);
    if (fakecuda_misuses() != 0)
        HARNESS_FAIL("the driver saw %lu misuse(s), the last: %s", fakecuda_misuses(),
                     fakecuda_last_misuse());
}

/* GPU:0 of one H100 on the double, with virtual memory management as `vmm` says,
 * growing under a 64 MiB limit, initialized; NULL when it cannot be made. */
static gpumem_runtime *growing_under_64_mib(bool vmm)
{
    fresh_driver(H100);
    fakecuda_set_vmm(vmm);
    return limited(64 * MiB, true);
}

/* With 2 MiB of the budget reserved, 62 MiB more can be had and not another 2,
 * and the pool and the driver then both count the whole 64 MiB (free_before: the
 * driver's free bytes before the 2 MiB). */
static void takes_the_rest_of_64_mib(gpumem_runtime *rt, uint64_t free_before)
{
    void *p = NULL, *q = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, 62 * MiB, &p));
    ASSERT_STATUS(gpumem_malloc(rt, 0, 2 * MiB, &q), GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 64 * MiB);
    ASSERT_EQ(free_before - fakecuda_free_bytes(0), 64 * MiB);
    ASSERT_OK(gpumem_free(rt, p));
}

/* A growth step of 2 MiB (the granularity) fails, and undoing it fails too, so the
 * driver keeps the step's memory: after cuMemRelease of the mapped handle fails
 * (the mapping is then undone, but the handle holds the memory), after cuMemMap
 * fails and so does the cuMemRelease undoing cuMemCreate, or after cuMemSetAccess
 * fails and so does the cuMemUnmap undoing the mapping. Each time the 2 MiB stay in
 * reserved_bytes and count against the 64 MiB limit (before, the pool forgot them
 * and went on to hold 66 MiB of the driver's memory), the failure that started it
 * is the one returned, and the log names the refusal and the 2 MiB kept. */
static void kept_after_a_failed_step(const char *first, const char *then,
                                     const char *logged)
{
    gpumem_runtime *rt = growing_under_64_mib(true);
    if (!rt)
        return;
    uint64_t free_before = fakecuda_free_bytes(0);
    ASSERT_EQ(fakecuda_fail_nth(first, 1, CUDA_ERROR_INVALID_VALUE), 0);
    if (then)
        ASSERT_EQ(fakecuda_fail_nth(then, 1, CUDA_ERROR_INVALID_VALUE), 0);
    void *p = NULL;
    ASSERT_STATUS(gpumem_malloc(rt, 0, 1024, &p), GPUMEM_ERR_BACKEND);
    ASSERT_CONTAINS(gpumem_last_error(), first);
    ASSERT_CONTAINS(log_text, logged);
    ASSERT_CONTAINS(log_text, "a growth step of 2.00 MiB failed, and the device keeps "
                              "its memory, which stays reserved");
    ASSERT_EQ(free_before - fakecuda_free_bytes(0), 2 * MiB);
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 2 * MiB);
    ASSERT_EQ(info_of(rt, 0).peak_reserved_bytes, 2 * MiB);
    takes_the_rest_of_64_mib(rt, free_before);
    gpumem_runtime_destroy(rt);
}

TEST(a_failed_growth_step_whose_memory_the_driver_keeps_stays_reserved)
{
    kept_after_a_failed_step("cuMemRelease", NULL, "cuMemRelease after mapping");
    kept_after_a_failed_step("cuMemMap", "cuMemRelease",
                             "cuMemRelease of 2097152 bytes on GPU:0, undoing a failed "
                             "mapping: the memory stays taken");
    kept_after_a_failed_step("cuMemSetAccess", "cuMemUnmap",
                             "undoing a failed mapping: the addresses stay mapped");
}

/* Outside a context scope, the context pop after cuMemAlloc_v2 fails, and so does
 * cuMemFree_v2 giving the new memory back: the driver keeps it, so the pool is
 * handed it and books it. Before, the reservation was reported as failed and
 * forgotten, and the pool went on to hold the driver's memory without counting
 * it. A greedy pool's initialization takes its budget outside any scope: its
 * first pop follows cuMemGetInfo_v2, its second cuMemAlloc_v2. Both failures
 * are in the log; initialization succeeds. */
TEST(memory_taken_before_a_failed_pop_that_cannot_be_given_back_is_kept)
{
    fresh_driver(H100);
    fakecuda_set_vmm(0);
    gpumem_runtime *rt = cuda_runtime();
    if (!rt)
        return;
    gpumem_logical_device_config c = GPUMEM_LOGICAL_DEVICE_LIMIT(64 * MiB);
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, &c, 1));
    uint64_t free_before = fakecuda_free_bytes(0);
    unsigned long taken_before = fakecuda_calls("cuMemAlloc_v2");
    ASSERT_EQ(fakecuda_fail_nth("cuCtxPopCurrent_v2", 2, CUDA_ERROR_INVALID_VALUE), 0);
    ASSERT_EQ(fakecuda_fail_nth("cuMemFree_v2", 1, CUDA_ERROR_INVALID_VALUE), 0);
    ASSERT_OK(gpumem_initialize(rt));
    ASSERT_EQ(fakecuda_calls("cuMemAlloc_v2"), taken_before + 1);
    ASSERT_TRUE(!fakecuda_fault_pending());
    ASSERT_CONTAINS(log_text, "cuCtxPopCurrent_v2 on GPU:0");
    ASSERT_CONTAINS(log_text, "cuMemFree_v2");
    ASSERT_CONTAINS(log_text, "the reservation is kept and used");
    ASSERT_EQ(fakecuda_context_depth(), 1); /* the pop that failed */
    fakecuda_pop_context();
    ASSERT_EQ(free_before - fakecuda_free_bytes(0), 64 * MiB);
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 64 * MiB);
    void *p = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, 64 * MiB, &p));
    ASSERT_OK(gpumem_free(rt, p));
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

/* An allocation's driver calls share one context push (a scope, backend.h): the
 * pop is the scope's, made once its work is booked. When it fails, the memory
 * or range just taken (cuMemAlloc_v2 without VMM, cuMemAddressReserve with it)
 * stays the pool's, nothing is given back, the failure goes to the log, and the
 * allocation succeeds. */
static void a_scope_whose_pop_fails(bool vmm, unsigned long pop, const char *taken)
{
    gpumem_runtime *rt = growing_under_64_mib(vmm);
    if (!rt)
        return;
    uint64_t free_before = fakecuda_free_bytes(0);
    unsigned long taken_before = fakecuda_calls(taken);
    unsigned long pushes = fakecuda_calls("cuCtxPushCurrent_v2");
    ASSERT_EQ(fakecuda_fail_nth("cuCtxPopCurrent_v2", pop, CUDA_ERROR_INVALID_VALUE), 0);
    void *p = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, 1024, &p));
    ASSERT_EQ(fakecuda_calls(taken), taken_before + 1);
    ASSERT_EQ(fakecuda_calls("cuCtxPushCurrent_v2"), pushes + 1); /* one for all */
    ASSERT_TRUE(!fakecuda_fault_pending());
    ASSERT_CONTAINS(log_text, "cuCtxPopCurrent_v2 on GPU:0");
    ASSERT_CONTAINS(log_text, "closing a context scope");
    ASSERT_EQ(fakecuda_context_depth(), 1); /* the pop that failed */
    fakecuda_pop_context();
    ASSERT_EQ(free_before - fakecuda_free_bytes(0), 2 * MiB);
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 2 * MiB);
    takes_the_rest_of_64_mib(rt, free_before);
    ASSERT_OK(gpumem_free(rt, p));
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

TEST(an_allocations_calls_share_one_push_and_a_failed_pop_keeps_its_memory)
{
    /* the granularity query, the range and the mapping: one push, one pop */
    a_scope_whose_pop_fails(false, 1, "cuMemAlloc_v2");
    a_scope_whose_pop_fails(true, 1, "cuMemAddressReserve");
}

TEST(growth_without_virtual_memory_uses_plain_allocations)
{
    fresh_driver(H100);
    fakecuda_set_vmm(0);
    gpumem_runtime *rt = cuda_runtime();
    if (!rt)
        return;
    ASSERT_CONTAINS(log_text, "virtual memory management not supported by the devices");
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    uint64_t before = 0;
    ASSERT_OK(gpumem_initialize(rt));
    before = fakecuda_free_bytes(0);
    void *a = NULL, *b = NULL;
    grow_twice(rt, &a, &b, 40 * MiB);
    ASSERT_EQ(fakecuda_calls("cuMemAlloc_v2"), 2);
    ASSERT_EQ(fakecuda_calls("cuMemAddressReserve"), 0);
    ASSERT_EQ(fakecuda_calls("cuMemCreate"), 0);
    ASSERT_EQ(fakecuda_free_bytes(0), before - 40 * MiB);
    /* separate allocations are separate memory: the chunk starts a new region */
    ASSERT_NE((uintptr_t)b, (uintptr_t)a + 19 * MiB);
    ASSERT_EQ(info_of(rt, 0).largest_free_block, 17 * MiB);
    ASSERT_OK(gpumem_free(rt, a));
    uint64_t released = 0;
    ASSERT_OK(gpumem_release_unused(rt, 0, &released));
    ASSERT_EQ(released, 20 * MiB);
    ASSERT_EQ(fakecuda_free_bytes(0), before - 20 * MiB);
    ASSERT_OK(gpumem_free(rt, b));
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

TEST(gpumem_cuda_vmm_false_keeps_growth_on_plain_allocations)
{
    fresh_driver(H100); /* the double offers VMM */
    setenv("GPUMEM_CUDA_VMM", "false", 1);
    gpumem_runtime *rt = cuda_runtime();
    unsetenv("GPUMEM_CUDA_VMM");
    if (!rt)
        return;
    ASSERT_CONTAINS(log_text, "virtual memory management turned off (GPUMEM_CUDA_VMM)");
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    void *a = NULL, *b = NULL;
    grow_twice(rt, &a, &b, 40 * MiB);
    ASSERT_EQ(fakecuda_calls("cuMemAlloc_v2"), 2);
    ASSERT_EQ(fakecuda_calls("cuMemAddressReserve"), 0);
    ASSERT_EQ(fakecuda_calls("cuMemCreate"), 0);
    ASSERT_OK(gpumem_free(rt, a));
    ASSERT_OK(gpumem_free(rt, b));
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);

    /* a value that is not a boolean fails runtime creation, naming the variable */
    setenv("GPUMEM_CUDA_VMM", "maybe", 1);
    gpumem_status s = GPUMEM_OK;
    rt = runtime_on(GPUMEM_BACKEND_CUDA, &s);
    unsetenv("GPUMEM_CUDA_VMM");
    ASSERT_TRUE(rt == NULL);
    ASSERT_EQ(s, GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(gpumem_last_error(), "GPUMEM_CUDA_VMM");
}

TEST(a_budget_that_is_not_whole_granules_ends_with_a_plain_region)
{
    /* 5 MiB + 512 KiB of budget, 2 MiB granules: 4 MiB can be mapped, the rest
     * (1.5 MiB) only as a plain allocation. */
    fresh_driver(H100);
    gpumem_runtime *rt = cuda_runtime();
    if (!rt)
        return;
    gpumem_logical_device_config cfg = GPUMEM_LOGICAL_DEVICE_LIMIT(5 * MiB + 512 * KiB);
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, &cfg, 1));
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    void *a = NULL, *b = NULL, *c = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, 3 * MiB, &a)); /* medium: 20 MiB, clipped to 4 MiB */
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 4 * MiB);
    ASSERT_EQ(fakecuda_calls("cuMemCreate"), 2); /* one per granule */
    ASSERT_OK(gpumem_malloc(rt, 0, 1 * MiB + 256 * KiB, &b));
    ASSERT_EQ(fakecuda_calls("cuMemAlloc_v2"), 1);
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 5 * MiB + 512 * KiB);
    ASSERT_STATUS(gpumem_malloc(rt, 0, 2 * MiB, &c), GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_OK(gpumem_free(rt, a));
    ASSERT_OK(gpumem_free(rt, b));
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

/* ------------------------------------------------ limits, logical devices -- */

TEST(limits_and_logical_devices)
{
    fresh_driver(H100 "," T4);
    gpumem_runtime *rt = cuda_runtime();
    if (!rt)
        return;
    gpumem_logical_device_config two[2] = {GPUMEM_LOGICAL_DEVICE_LIMIT(1 * GiB),
                                           GPUMEM_LOGICAL_DEVICE_LIMIT(2 * GiB)};
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, two, 2));
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    ASSERT_OK(gpumem_set_memory_fraction(rt, 1, 0.5)); /* greedy, half the T4 */
    gpumem_logical_device l[4] = {GPUMEM_STRUCT_INIT(gpumem_logical_device)};
    size_t n = 0;
    ASSERT_OK(gpumem_list_logical_devices(rt, l, 4, &n));
    ASSERT_EQ(n, 3);
    ASSERT_EQ(l[0].memory_limit_bytes, 1 * GiB);
    ASSERT_EQ(l[1].memory_limit_bytes, 2 * GiB);
    ASSERT_EQ(l[2].physical_index, 1);
    ASSERT_EQ(l[2].memory_limit_bytes, 15 * GiB / 2);
    ASSERT_EQ(fakecuda_free_bytes(1), 15 * GiB - 15 * GiB / 2);

    void *a = NULL, *b = NULL, *c = NULL, *d = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, 600 * MiB, &a));
    ASSERT_STATUS(gpumem_malloc(rt, 0, 600 * MiB, &b), GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_CONTAINS(gpumem_last_error(), "budget 1.00 GiB");
    ASSERT_LE(info_of(rt, 0).reserved_bytes, 1 * GiB);
    ASSERT_EQ(info_of(rt, 0).num_ooms, 1);
    ASSERT_OK(gpumem_malloc(rt, 1, 1536 * MiB, &c));
    ASSERT_OK(gpumem_malloc(rt, 2, 7 * GiB, &d));
    /* each growing logical device has its own address range */
    ASSERT_EQ(fakecuda_calls("cuMemAddressReserve"), 2);
    ASSERT_EQ(fakecuda_free_bytes(0), 80 * GiB - 600 * MiB - 1536 * MiB);
    ASSERT_OK(gpumem_free(rt, a));
    ASSERT_OK(gpumem_free(rt, c));
    ASSERT_OK(gpumem_free(rt, d));
    uint64_t released = 0;
    ASSERT_OK(gpumem_release_unused(rt, -1, &released));
    ASSERT_EQ(released, 600 * MiB + 1536 * MiB + 15 * GiB / 2);
    ASSERT_EQ(fakecuda_free_bytes(0), 80 * GiB);
    ASSERT_EQ(fakecuda_free_bytes(1), 15 * GiB);
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

/* ---------------------------------------------------- out of memory, retry -- */

/* Two 100 MiB regions, the first freed; then other processes leave the card 50
 * MiB: a 150 MiB growth fails in the driver, the pool gives back its free region
 * and the retry succeeds. A 200 MiB one fails even so: out of memory, with the
 * driver's error name. With virtual memory management each growth is mapped in
 * at most eight extents, and given back in one call: the first try maps two of
 * 20 MiB before the driver refuses the third and unmaps them again, the release
 * unmaps the free region's eight, and the 200 MiB growth fails on its first
 * extent (26 MiB). One granule at a time, that was 25 maps and 75 unmaps. */
static void release_then_retry(bool vmm)
{
    fresh_driver("Small:1GiB:8.0");
    fakecuda_set_vmm(vmm);
    /* the release, not the trim before the peak grows, which would give part
     * of a's hot granules back first (as much as its budget has left) */
    setenv("GPUMEM_GROWTH_TRIM", "off", 1);
    gpumem_runtime *rt = cuda_runtime();
    unsetenv("GPUMEM_GROWTH_TRIM");
    if (!rt)
        return;
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    void *a = NULL, *b = NULL, *c = NULL, *d = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, 100 * MiB, &a));
    ASSERT_OK(gpumem_malloc(rt, 0, 100 * MiB, &b));
    ASSERT_OK(gpumem_free(rt, a));
    fakecuda_set_used_elsewhere(0, 1 * GiB - 200 * MiB - 50 * MiB);
    ASSERT_EQ(fakecuda_free_bytes(0), 50 * MiB);

    ASSERT_OK(gpumem_malloc(rt, 0, 150 * MiB, &c));
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 250 * MiB);
    /* the two undone in one call, the free region's eight in another */
    ASSERT_EQ(fakecuda_calls(vmm ? "cuMemUnmap" : "cuMemFree_v2"), vmm ? 2 : 1);
    if (vmm) /* 8 for each region, two made and undone */
        ASSERT_EQ(fakecuda_calls("cuMemCreate"), 8 + 8 + 3 + 8);
    ASSERT_EQ(fakecuda_free_bytes(0), 0);

    ASSERT_STATUS(gpumem_malloc(rt, 0, 200 * MiB, &d), GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_CONTAINS(gpumem_last_error(),
                    "gpumem_malloc(/device:GPU:0, 200.00 MiB): out of memory");
    ASSERT_CONTAINS(
        gpumem_last_error(),
        vmm ? "cuMemCreate(27262976) on GPU:0 failed: CUDA_ERROR_OUT_OF_MEMORY (2)"
            : "cuMemAlloc_v2(209715200) on GPU:0 failed: "
              "CUDA_ERROR_OUT_OF_MEMORY (2)");
    ASSERT_EQ(info_of(rt, 0).num_ooms, 1);
    ASSERT_OK(gpumem_free(rt, b));
    ASSERT_OK(gpumem_free(rt, c));
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

TEST(driver_out_of_memory_releases_and_retries_with_vmm) { release_then_retry(true); }
TEST(driver_out_of_memory_releases_and_retries_without_vmm) { release_then_retry(false); }

/* A runtime over a fresh 1 GiB driver double whose GPU:0 grows, with a limit
 * (0: none), and holds one free 20 MiB region; NULL if none could be made. */
static gpumem_runtime *with_a_free_region(bool vmm, uint64_t limit)
{
    fresh_driver("Small:1GiB:8.0");
    fakecuda_set_vmm(vmm);
    gpumem_runtime *rt = cuda_runtime();
    if (!rt)
        return NULL;
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    gpumem_logical_device_config capped = GPUMEM_LOGICAL_DEVICE_LIMIT(limit);
    if (limit)
        ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, &capped, 1));
    void *a = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, 19 * MiB, &a));
    ASSERT_OK(gpumem_free(rt, a));
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 20 * MiB);
    return rt;
}

/* The driver refuses to unmap one mapping from its n-th cuMemUnmap on (or to
 * free a block, cuMemFree_v2): the call for the run of mappings that holds it,
 * and the call for that mapping alone that gpumem tries next, then no more. */
static void refuse_release(bool vmm, unsigned long n, CUresult code)
{
    ASSERT_EQ(fakecuda_fail_nth(vmm ? "cuMemUnmap" : "cuMemFree_v2", n, code), 0);
    if (vmm)
        ASSERT_EQ(fakecuda_fail_then("cuMemUnmap", code), 0);
}

/* The driver refuses to take a free 20 MiB region back (cuMemUnmap, or
 * cuMemFree_v2 without virtual memory management), with any error: a release
 * does not run out of memory, so it is GPUMEM_ERR_BACKEND. The driver still
 * holds what it refused (with virtual memory management one 2 MiB granule, the
 * other 9 go back; without, the region), so the pool keeps it in reserved_bytes
 * and counts it against its 40 MiB limit: a 39 MiB request then fails instead of
 * growing past the limit. gpumem_release_unused returns the failure, says in
 * *released what went back, and the log names the region. */
static void refused_release(bool vmm, CUresult code)
{
    const char *fn = vmm ? "cuMemUnmap" : "cuMemFree_v2";
    uint64_t kept = vmm ? 4 * MiB : 20 * MiB; /* an extent of 2 granules, or all */
    gpumem_runtime *rt = with_a_free_region(vmm, 40 * MiB);
    if (!rt)
        return;
    void *b = NULL;
    refuse_release(vmm, 1, code);
    uint64_t released = 12345;
    ASSERT_STATUS(gpumem_release_unused(rt, 0, &released), GPUMEM_ERR_BACKEND);
    ASSERT_CONTAINS(gpumem_last_error(), "gpumem_release_unused(/device:GPU:0): ");
    ASSERT_CONTAINS(gpumem_last_error(), fn);
    ASSERT_EQ(released, 20 * MiB - kept);
    ASSERT_CONTAINS(log_text, "a free region of 20.00 MiB at 0x");
    ASSERT_CONTAINS(log_text, "could not be given back and stays reserved");
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, kept);

    ASSERT_STATUS(gpumem_malloc(rt, 0, 39 * MiB, &b), GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_CONTAINS(gpumem_last_error(),
                    vmm ? "only 36.00 MiB of the budget is not reserved"
                        : "only 20.00 MiB of the budget is not reserved");
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, kept);
    ASSERT_EQ(1 * GiB - fakecuda_free_bytes(0), kept); /* and nothing more */
    ASSERT_OK(gpumem_malloc(rt, 0, 19 * MiB, &b));
    ASSERT_OK(gpumem_free(rt, b));
    gpumem_runtime_destroy(rt);

    struct fakecuda_live live;
    fakecuda_live(&live);
    if (vmm)
        ASSERT_EQ(live.mappings, 1);
    else
        ASSERT_EQ(live.allocations, 1);
}

/* The same refusal on the out-of-memory path: a 30 MiB growth fails in the
 * driver (with virtual memory management, the 10 MiB it lacks beyond the free
 * 20 MiB tail: the driver has 4 MiB free, so 2 granules are mapped, and unmapped
 * again, before it refuses the third), the pool tries to give its free 20 MiB
 * region back, the driver refuses (with virtual memory management, the second
 * cuMemUnmap, for the region's run, and then its first extent's: the first
 * undid the two granules in one call), and the retry, if any, fails too. The message says
 * both, and the log names the region. */
static void refused_release_before_a_retry(bool vmm)
{
    const char *fn = vmm ? "cuMemUnmap" : "cuMemFree_v2";
    gpumem_runtime *rt = with_a_free_region(vmm, 0);
    if (!rt)
        return;
    void *b = NULL;
    fakecuda_set_used_elsewhere(0, fakecuda_free_bytes(0) - 4 * MiB);
    refuse_release(vmm, vmm ? 2 : 1, CUDA_ERROR_LAUNCH_FAILED);

    ASSERT_STATUS(gpumem_malloc(rt, 0, 30 * MiB, &b), GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_CONTAINS(gpumem_last_error(), "CUDA_ERROR_OUT_OF_MEMORY (2)");
    ASSERT_CONTAINS(gpumem_last_error(), "; giving free regions back failed: ");
    ASSERT_CONTAINS(gpumem_last_error(), fn);
    ASSERT_CONTAINS(gpumem_last_error(), "CUDA_ERROR_LAUNCH_FAILED (719)");
    ASSERT_CONTAINS(log_text, "could not be given back and stays reserved");
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, vmm ? 4 * MiB : 20 * MiB);
    fakecuda_set_used_elsewhere(0, 0);
    gpumem_runtime_destroy(rt);
}

/* Two free regions, the driver refuses the first (with virtual memory management,
 * its first granule): the call fails, and *released still says what went back. */
static void partly_refused_release(bool vmm)
{
    gpumem_runtime *rt = with_a_free_region(vmm, 0);
    if (!rt)
        return;
    void *a = NULL, *b = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, 20 * MiB, &a)); /* the free region */
    ASSERT_OK(gpumem_malloc(rt, 0, 19 * MiB, &b)); /* a second one */
    ASSERT_OK(gpumem_free(rt, a));
    ASSERT_OK(gpumem_free(rt, b));
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 40 * MiB);
    refuse_release(vmm, 1, CUDA_ERROR_LAUNCH_FAILED);
    uint64_t released = 12345;
    ASSERT_STATUS(gpumem_release_unused(rt, -1, &released), GPUMEM_ERR_BACKEND);
    ASSERT_EQ(released, vmm ? 36 * MiB : 20 * MiB);
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, vmm ? 4 * MiB : 20 * MiB);
    gpumem_runtime_destroy(rt);
}

TEST(a_region_the_driver_keeps_stays_reserved_with_vmm)
{
    refused_release(true, CUDA_ERROR_LAUNCH_FAILED);
    refused_release(true, CUDA_ERROR_OUT_OF_MEMORY); /* still a backend failure */
    refused_release_before_a_retry(true);
    partly_refused_release(true);
}

TEST(a_region_the_driver_keeps_stays_reserved_without_vmm)
{
    refused_release(false, CUDA_ERROR_LAUNCH_FAILED);
    refused_release(false, CUDA_ERROR_OUT_OF_MEMORY);
    refused_release_before_a_retry(false);
    partly_refused_release(false);
}

TEST(greedy_reservation_out_of_memory_leaves_the_runtime_configurable)
{
    fresh_driver(T4);
    gpumem_runtime *rt = cuda_runtime();
    if (!rt)
        return;
    fakecuda_fail_nth("cuMemAlloc_v2", 1, CUDA_ERROR_OUT_OF_MEMORY);
    ASSERT_STATUS(gpumem_initialize(rt), GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_CONTAINS(gpumem_last_error(), "reserving the budget of /device:GPU:0 failed");
    ASSERT_CONTAINS(gpumem_last_error(), "CUDA_ERROR_OUT_OF_MEMORY (2)");
    bool init = true;
    ASSERT_OK(gpumem_is_initialized(rt, &init));
    ASSERT_FALSE(init);
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true)); /* still configurable */
    ASSERT_OK(gpumem_initialize(rt));
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

static void *initialize_thread(void *arg)
{
    gpumem_runtime *rt = arg;
    static gpumem_status s;
    s = gpumem_initialize(rt);
    return &s;
}

/* Memory that goes while a greedy budget is being taken (another process's
 * context, a program without gpumem, seen by no ledger): the driver refuses the
 * budget it was planned from, and the GPU is planned again from what it says
 * now, instead of initialization failing (issue 31: 32 processes starting at
 * once on one card). */
TEST(a_budget_refused_while_it_is_taken_is_planned_again)
{
    fresh_driver(T4);
    gpumem_runtime *rt = cuda_runtime();
    if (!rt)
        return;
    ASSERT_EQ(fakecuda_block_next("cuMemAlloc_v2"), 0);
    pthread_t t;
    ASSERT_EQ(pthread_create(&t, NULL, initialize_thread, rt), 0);
    fakecuda_wait_blocked(); /* planned from 15 GiB free: 15 GiB - 1050 MiB */
    fakecuda_set_used_elsewhere(0, 4 * GiB);
    fakecuda_unblock();
    void *status = NULL;
    pthread_join(t, &status);
    ASSERT_OK(*(gpumem_status *)status);
    ASSERT_EQ(fakecuda_calls("cuMemAlloc_v2"), 2);
    gpumem_memory_info mi = info_of(rt, 0);
    ASSERT_EQ(mi.limit_bytes, 11 * GiB - 1050 * MiB);
    ASSERT_EQ(mi.reserved_bytes, mi.limit_bytes);
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

/* ------------------------------------------------------ the map lock -- */

/* A pass that maps or unmaps lets the pool's lock go around each driver call
 * (docs/internals.md, the POOL_MAP row): while a release waits inside
 * cuMemUnmap, another thread allocates and frees memory that is mapped, and
 * one that lands on memory being given back waits for the release, then maps
 * it again. */
struct mapper_work {
    gpumem_runtime *rt;
    size_t size;
    uint64_t released;
    gpumem_status status;
    atomic_bool done;
};

static void *release_thread(void *arg)
{
    struct mapper_work *w = arg;
    w->status = gpumem_release_unused(w->rt, 0, &w->released);
    atomic_store(&w->done, true);
    return NULL;
}

static void *alloc_free_thread(void *arg)
{
    struct mapper_work *w = arg;
    void *p = NULL;
    w->status = gpumem_malloc(w->rt, 0, w->size, &p);
    if (w->status == GPUMEM_OK)
        w->status = gpumem_free(w->rt, p);
    atomic_store(&w->done, true);
    return NULL;
}

/* Whether w is done within `ms` milliseconds. */
static bool done_within(struct mapper_work *w, int ms)
{
    for (int i = 0; i < ms && !atomic_load(&w->done); i++)
        usleep(1000);
    return atomic_load(&w->done);
}

TEST(work_that_maps_nothing_goes_on_while_a_release_unmaps)
{
    gpumem_runtime *rt = growing_under_64_mib(true);
    if (!rt)
        return;
    void *a = NULL, *b = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, 8 * MiB, &a)); /* a region of its own */
    ASSERT_OK(gpumem_malloc(rt, 0, 7 * MiB, &b)); /* 1 MiB free after it */
    ASSERT_OK(gpumem_free(rt, a));
    ASSERT_EQ(fakecuda_block_next("cuMemUnmap"), 0);
    struct mapper_work rel = {.rt = rt}, other = {.rt = rt, .size = 512 * 1024};
    pthread_t t1, t2;
    ASSERT_EQ(pthread_create(&t1, NULL, release_thread, &rel), 0);
    fakecuda_wait_blocked(); /* a's region, inside cuMemUnmap */
    ASSERT_EQ(pthread_create(&t2, NULL, alloc_free_thread, &other), 0);
    /* best fit takes the 1 MiB after b, mapped: no wait for the release */
    ASSERT_TRUE(done_within(&other, 10000));
    ASSERT_OK(other.status);
    ASSERT_FALSE(atomic_load(&rel.done));
    fakecuda_unblock();
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    ASSERT_OK(rel.status);
    ASSERT_EQ(rel.released, 8 * MiB);
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 8 * MiB);
    ASSERT_OK(gpumem_free(rt, b));
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

TEST(an_allocation_on_memory_being_given_back_waits_then_maps_it)
{
    gpumem_runtime *rt = growing_under_64_mib(true);
    if (!rt)
        return;
    void *x = NULL, *hole = NULL, *y = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, 4 * MiB, &x));    /* [0, 4) */
    ASSERT_OK(gpumem_malloc(rt, 0, 8 * MiB, &hole)); /* [4, 12) */
    ASSERT_OK(gpumem_malloc(rt, 0, 4 * MiB, &y));    /* [12, 16) */
    ASSERT_OK(gpumem_free(rt, hole)); /* its extents go back in the release */
    ASSERT_EQ(fakecuda_block_next("cuMemUnmap"), 0);
    struct mapper_work rel = {.rt = rt}, other = {.rt = rt, .size = 8 * MiB};
    pthread_t t1, t2;
    ASSERT_EQ(pthread_create(&t1, NULL, release_thread, &rel), 0);
    fakecuda_wait_blocked();
    ASSERT_EQ(pthread_create(&t2, NULL, alloc_free_thread, &other), 0);
    /* it lands on the hole, whose extents are being unmapped: it waits */
    ASSERT_FALSE(done_within(&other, 200));
    fakecuda_unblock();
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    ASSERT_OK(rel.status);
    ASSERT_EQ(rel.released, 8 * MiB);
    ASSERT_OK(other.status); /* mapped again, then freed */
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 16 * MiB);
    uint64_t released = 0;
    ASSERT_OK(gpumem_release_unused(rt, 0, &released));
    ASSERT_EQ(released, 8 * MiB);
    ASSERT_OK(gpumem_free(rt, x));
    ASSERT_OK(gpumem_free(rt, y));
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

/* ------------------------------------------------------------- contexts -- */

struct thread_work {
    gpumem_runtime *rt;
    int ok;
};

static void *other_thread(void *arg)
{
    struct thread_work *w = arg;
    void *p = NULL;
    w->ok = gpumem_malloc(w->rt, 0, 1 * MiB, &p) == GPUMEM_OK &&
            gpumem_free(w->rt, p) == GPUMEM_OK && fakecuda_context_depth() == 0;
    return NULL;
}

TEST(the_callers_context_is_left_as_it_was)
{
    fresh_driver(H100 "," T4);
    const void *mine = fakecuda_push_user_context(1);
#define UNCHANGED()                                                                      \
    do {                                                                                 \
        ASSERT_TRUE(fakecuda_current_context() == mine);                                 \
        ASSERT_EQ(fakecuda_context_depth(), 1);                                          \
    } while (0)
    gpumem_runtime *rt = cuda_runtime();
    if (!rt)
        return;
    UNCHANGED();
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    ASSERT_OK(gpumem_initialize(rt));
    UNCHANGED();
    void *a = NULL, *b = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, 19 * MiB, &a));
    UNCHANGED();
    ASSERT_OK(gpumem_malloc(rt, 1, 1 * MiB, &b));
    UNCHANGED();
    gpumem_memory_info mi = GPUMEM_STRUCT_INIT(gpumem_memory_info);
    ASSERT_OK(gpumem_get_memory_info(rt, 0, &mi));
    ASSERT_OK(gpumem_free(rt, a));
    ASSERT_OK(gpumem_free(rt, b));
    UNCHANGED();
    struct thread_work w = {rt, 0};
    pthread_t t;
    pthread_create(&t, NULL, other_thread, &w);
    pthread_join(t, NULL);
    ASSERT_TRUE(w.ok);
    uint64_t released = 0;
    ASSERT_OK(gpumem_release_unused(rt, -1, &released));
    UNCHANGED();
    /* every push was matched by a pop */
    ASSERT_EQ(fakecuda_calls("cuCtxPushCurrent_v2"),
              fakecuda_calls("cuCtxPopCurrent_v2"));
    ASSERT_TRUE(fakecuda_calls("cuCtxPushCurrent_v2") > 0);
    gpumem_runtime_destroy(rt);
    UNCHANGED();
    ASSERT_EQ(fakecuda_calls("cuCtxPushCurrent_v2"),
              fakecuda_calls("cuCtxPopCurrent_v2"));
    check_driver_clean(1);
    fakecuda_pop_context();
#undef UNCHANGED
}

/* Four threads allocate and free on two growing logical devices (one range
 * each) while the main thread gives unused memory back: every thread's context
 * stack stays balanced and the driver ends with nothing. */
struct churn {
    gpumem_runtime *rt;
    unsigned seed;
    int failures;
};

static void *churn_thread(void *arg)
{
    struct churn *c = arg;
    void *live[16] = {0};
    for (int i = 0; i < 400; i++) {
        c->seed = c->seed * 1103515245u + 12345u;
        int slot = (int)(c->seed >> 8) % 16;
        if (live[slot]) {
            c->failures += gpumem_free(c->rt, live[slot]) != GPUMEM_OK;
            live[slot] = NULL;
        } else {
            size_t size = ((c->seed >> 12) % 4096 + 1) * 1024; /* 1 KiB .. 4 MiB */
            c->failures += gpumem_malloc(c->rt, (int)(c->seed >> 4) % 2, size,
                                         &live[slot]) != GPUMEM_OK;
        }
        c->failures += fakecuda_context_depth() != 0;
    }
    for (int k = 0; k < 16; k++)
        if (live[k])
            c->failures += gpumem_free(c->rt, live[k]) != GPUMEM_OK;
    return NULL;
}

TEST(threads_share_the_backend)
{
    fresh_driver(H100);
    gpumem_runtime *rt = cuda_runtime();
    if (!rt)
        return;
    gpumem_logical_device_config two[2] = {GPUMEM_LOGICAL_DEVICE_LIMIT(1 * GiB),
                                           GPUMEM_LOGICAL_DEVICE_LIMIT(1 * GiB)};
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, two, 2));
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    ASSERT_OK(gpumem_initialize(rt));
    struct churn work[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        work[i] = (struct churn){rt, 1234u + 77u * (unsigned)i, 0};
        pthread_create(&t[i], NULL, churn_thread, &work[i]);
    }
    for (int r = 0; r < 50; r++) {
        uint64_t released;
        ASSERT_OK(gpumem_release_unused(rt, -1, &released));
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        ASSERT_EQ(work[i].failures, 0);
    }
    ASSERT_EQ(info_of(rt, 0).current_bytes + info_of(rt, 1).current_bytes, 0);
    ASSERT_EQ(fakecuda_calls("cuMemAddressReserve"), 2);
    ASSERT_EQ(fakecuda_calls("cuCtxPushCurrent_v2"),
              fakecuda_calls("cuCtxPopCurrent_v2"));
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

/* ------------------------------------------------ no driver, no device -- */

/* Whatever cuInit's error, even CUDA_ERROR_OUT_OF_MEMORY, CUDA is not available;
 * auto falls back to simulated GPUs, and warns of it when the error is not one of
 * a machine without a GPU (`broken`: a GPU whose driver fails). */
static void cuinit_fails(CUresult code, const char *name, bool broken)
{
    char want[128];
    fresh_driver(H100);
    fakecuda_set_init_error(code);
    gpumem_status s;
    gpumem_runtime *rt = runtime_on(GPUMEM_BACKEND_CUDA, &s);
    ASSERT_TRUE(rt == NULL);
    ASSERT_STATUS(s, GPUMEM_ERR_BACKEND);
    snprintf(want, sizeof want, "is not available: cuInit(0) failed: %s", name);
    ASSERT_CONTAINS(gpumem_last_error(),
                    "the CUDA backend (gpumem_options.backend = GPUMEM_BACKEND_CUDA) ");
    ASSERT_CONTAINS(gpumem_last_error(), want);
    ASSERT_TRUE(strchr(gpumem_last_error(), '\n') == NULL);

    rt = runtime_on(GPUMEM_BACKEND_AUTO, &s);
    ASSERT_OK(s);
    if (rt) {
        gpumem_physical_device d = GPUMEM_STRUCT_INIT(gpumem_physical_device);
        size_t n = 0;
        ASSERT_OK(gpumem_list_physical_devices(rt, &d, 1, &n));
        ASSERT_STREQ(d.model, "gpumem simulated GPU");
        snprintf(want, sizeof want,
                 broken ? "[1] gpumem: the CUDA driver is there but does not work "
                          "(cuInit(0) failed: %s"
                        : "[2] gpumem: no CUDA (cuInit(0) failed: %s",
                 name);
        ASSERT_CONTAINS(log_text, want);
        ASSERT_CONTAINS(log_text, "using simulated GPUs");
        ASSERT_TRUE(strstr(log_text, broken ? "no CUDA" : "does not work") == NULL);
        gpumem_runtime_destroy(rt);
    }
    check_driver_clean(0);
}

TEST(cuinit_failure_fails_cuda_and_auto_simulates)
{
    cuinit_fails(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH,
                 "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH (803)", true);
    cuinit_fails(CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY (2)", true);
    /* the stub libcuda of a container started without the GPU: no GPU here */
    cuinit_fails(CUDA_ERROR_STUB_LIBRARY, "CUDA_ERROR_STUB_LIBRARY (34)", false);
}

/* cuInit's CUDA_ERROR_NOT_INITIALIZED, as in a child forked after another library
 * initialized CUDA: both cuda and auto fail, saying why; no simulated GPUs. */
TEST(cuinit_not_initialized_fails_auto_too)
{
    static const char *const said =
        "cuInit(0) failed: CUDA_ERROR_NOT_INITIALIZED (3): driver not initialized (as in "
        "a process forked from one that had initialized CUDA, through gpumem or another "
        "library: start it with the 'spawn' method)";
    fresh_driver(H100);
    fakecuda_set_init_error(CUDA_ERROR_NOT_INITIALIZED);
    gpumem_status s;
    ASSERT_TRUE(runtime_on(GPUMEM_BACKEND_CUDA, &s) == NULL);
    ASSERT_STATUS(s, GPUMEM_ERR_BACKEND);
    ASSERT_CONTAINS(gpumem_last_error(), said);
    ASSERT_TRUE(runtime_on(GPUMEM_BACKEND_AUTO, &s) == NULL);
    ASSERT_STATUS(s, GPUMEM_ERR_BACKEND);
    ASSERT_CONTAINS(gpumem_last_error(), said);
    ASSERT_TRUE(strstr(log_text, "simulated GPUs") == NULL);
    check_driver_clean(0);
}

TEST(no_device_fails_cuda_and_auto_simulates)
{
    fresh_driver("");
    gpumem_status s;
    ASSERT_TRUE(runtime_on(GPUMEM_BACKEND_CUDA, &s) == NULL);
    ASSERT_STATUS(s, GPUMEM_ERR_BACKEND);
    ASSERT_CONTAINS(gpumem_last_error(), "cuInit(0) failed: CUDA_ERROR_NO_DEVICE (100)");
    ASSERT_TRUE(strstr(gpumem_last_error(), "CUDA_VISIBLE_DEVICES") == NULL);
    /* the variable that may have hidden every device is quoted when set */
    setenv("CUDA_VISIBLE_DEVICES", "", 1);
    ASSERT_TRUE(runtime_on(GPUMEM_BACKEND_CUDA, &s) == NULL);
    unsetenv("CUDA_VISIBLE_DEVICES");
    ASSERT_CONTAINS(
        gpumem_last_error(),
        "cuInit(0) with CUDA_VISIBLE_DEVICES='' failed: CUDA_ERROR_NO_DEVICE");
    /* a long one (eight UUIDs): its first 160 characters, "..." and the error */
    char uuids[8 * 41] = "", want[256];
    for (int i = 0; i < 8; i++)
        snprintf(uuids + strlen(uuids), sizeof uuids - strlen(uuids),
                 "%sGPU-8f2e1c3a-0000-1111-2222-33334444555%d", i ? "," : "", i);
    setenv("CUDA_VISIBLE_DEVICES", uuids, 1);
    ASSERT_TRUE(runtime_on(GPUMEM_BACKEND_CUDA, &s) == NULL);
    unsetenv("CUDA_VISIBLE_DEVICES");
    snprintf(want, sizeof want,
             "cuInit(0) with CUDA_VISIBLE_DEVICES='%.160s...' failed: "
             "CUDA_ERROR_NO_DEVICE (100)",
             uuids);
    ASSERT_CONTAINS(gpumem_last_error(), want);
    gpumem_runtime *rt = runtime_on(GPUMEM_BACKEND_AUTO, &s);
    ASSERT_OK(s);
    ASSERT_CONTAINS(log_text, "CUDA_ERROR_NO_DEVICE");
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

/* ------------------------------------------------------------ messages -- */

TEST(driver_errors_name_the_call_the_device_and_the_error)
{
    fresh_driver(H100 "," T4);
    fakecuda_set_vmm(0);
    gpumem_runtime *rt = cuda_runtime();
    if (!rt)
        return;
    ASSERT_OK(gpumem_set_memory_growth(rt, 1, true));
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    void *p = NULL;
    fakecuda_fail_nth("cuMemAlloc_v2", 1, CUDA_ERROR_LAUNCH_FAILED);
    ASSERT_STATUS(gpumem_malloc(rt, 1, 100, &p), GPUMEM_ERR_BACKEND);
    ASSERT_STREQ(
        gpumem_last_error(),
        "gpumem_malloc(/device:GPU:1, 100 B): cuMemAlloc_v2(2097152) on GPU:1 failed: "
        "CUDA_ERROR_LAUNCH_FAILED (719): unspecified launch failure");
    /* without the driver's names, the number */
    fakecuda_fail_nth("cuMemAlloc_v2", 1, CUDA_ERROR_LAUNCH_FAILED);
    fakecuda_fail_nth("cuGetErrorName", 1, CUDA_ERROR_INVALID_VALUE);
    fakecuda_fail_nth("cuGetErrorString", 1, CUDA_ERROR_INVALID_VALUE);
    ASSERT_STATUS(gpumem_malloc(rt, 0, 100, &p), GPUMEM_ERR_BACKEND);
    ASSERT_STREQ(
        gpumem_last_error(),
        "gpumem_malloc(/device:GPU:0, 100 B): cuMemAlloc_v2(2097152) on GPU:0 failed: "
        "CUresult 719");
    /* the runtime goes on */
    ASSERT_OK(gpumem_malloc(rt, 0, 100, &p));
    ASSERT_OK(gpumem_free(rt, p));
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

/* ---------------------------------------- configured by the environment -- */

/* meson: FAKECUDA_DEVICES="Env GPU A:8GiB:8.6,Env GPU B:4GiB:6.1:1GiB"
 * FAKECUDA_VMM=0 FAKECUDA_FAIL=cuMemAlloc_v2:1 */
static int run_env(void)
{
    harness_case = "env";
    clean_env();
    gpumem_runtime *rt = cuda_runtime();
    if (!rt)
        HARNESS_EXIT();
    gpumem_physical_device d[2] = {GPUMEM_STRUCT_INIT(gpumem_physical_device)};
    size_t n = 0;
    ASSERT_OK(gpumem_list_physical_devices(rt, d, 2, &n));
    ASSERT_EQ(n, 2);
    ASSERT_STREQ(d[0].model, "Env GPU A");
    ASSERT_EQ(d[0].compute_minor, 6);
    ASSERT_EQ(d[1].total_bytes, 4 * GiB);
    ASSERT_CONTAINS(log_text, "virtual memory management not supported");
    /* the first allocation fails: initialization reports it and may be retried */
    ASSERT_STATUS(gpumem_initialize(rt), GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_OK(gpumem_initialize(rt));
    ASSERT_EQ(info_of(rt, 1).limit_bytes, 3 * GiB - 500 * MiB);
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
    printf("%s env\n", harness_failures ? "FAIL" : "ok  ");
    HARNESS_EXIT();
}

/* meson: FAKECUDA_INIT_ERROR=CUDA_ERROR_NO_DEVICE */
static int run_env_init(void)
{
    harness_case = "env-init";
    clean_env();
    gpumem_status s;
    ASSERT_TRUE(runtime_on(GPUMEM_BACKEND_CUDA, &s) == NULL);
    ASSERT_STATUS(s, GPUMEM_ERR_BACKEND);
    ASSERT_CONTAINS(gpumem_last_error(), "cuInit(0) failed: CUDA_ERROR_NO_DEVICE (100)");
    ASSERT_TRUE(strstr(gpumem_last_error(), "CUDA_VISIBLE_DEVICES") == NULL);
    /* the variable that may have hidden every device is quoted when set */
    setenv("CUDA_VISIBLE_DEVICES", "", 1);
    ASSERT_TRUE(runtime_on(GPUMEM_BACKEND_CUDA, &s) == NULL);
    unsetenv("CUDA_VISIBLE_DEVICES");
    ASSERT_CONTAINS(
        gpumem_last_error(),
        "cuInit(0) with CUDA_VISIBLE_DEVICES='' failed: CUDA_ERROR_NO_DEVICE");
    gpumem_runtime *rt = runtime_on(GPUMEM_BACKEND_AUTO, &s);
    ASSERT_OK(s);
    gpumem_runtime_destroy(rt);
    printf("%s env-init\n", harness_failures ? "FAIL" : "ok  ");
    HARNESS_EXIT();
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "env") == 0)
        return run_env();
    if (argc > 1 && strcmp(argv[1], "env-init") == 0)
        return run_env_init();
    RUN(the_double_catches_misuse);
    RUN(enumeration_comes_from_the_driver);
    RUN(auto_picks_cuda_when_the_driver_has_a_device);
    RUN(greedy_reserves_free_memory_minus_headroom);
    RUN(the_headroom_is_taken_after_the_context_and_may_be_overridden);
    RUN(each_gpu_has_the_drivers_uuid_as_nvidia_smi_prints_it);
    RUN(virtual_memory_growth_spans_growth_steps_and_gives_memory_back);
    RUN(free_granules_inside_a_region_go_back_and_are_mapped_again);
    RUN(free_granules_go_back_before_out_of_memory);
    RUN(growth_fills_the_lowest_hole_of_the_range);
    RUN(a_mapping_that_cannot_be_undone_keeps_its_addresses);
    RUN(a_failed_growth_step_whose_memory_the_driver_keeps_stays_reserved);
    RUN(memory_taken_before_a_failed_pop_that_cannot_be_given_back_is_kept);
    RUN(an_allocations_calls_share_one_push_and_a_failed_pop_keeps_its_memory);
    RUN(work_that_maps_nothing_goes_on_while_a_release_unmaps);
    RUN(an_allocation_on_memory_being_given_back_waits_then_maps_it);
    RUN(growth_without_virtual_memory_uses_plain_allocations);
    RUN(gpumem_cuda_vmm_false_keeps_growth_on_plain_allocations);
    RUN(a_budget_that_is_not_whole_granules_ends_with_a_plain_region);
    RUN(limits_and_logical_devices);
    RUN(driver_out_of_memory_releases_and_retries_with_vmm);
    RUN(driver_out_of_memory_releases_and_retries_without_vmm);
    RUN(a_region_the_driver_keeps_stays_reserved_with_vmm);
    RUN(a_region_the_driver_keeps_stays_reserved_without_vmm);
    RUN(greedy_reservation_out_of_memory_leaves_the_runtime_configurable);
    RUN(a_budget_refused_while_it_is_taken_is_planned_again);
    RUN(the_callers_context_is_left_as_it_was);
    RUN(threads_share_the_backend);
    RUN(cuinit_failure_fails_cuda_and_auto_simulates);
    RUN(cuinit_not_initialized_fails_auto_too);
    RUN(no_device_fails_cuda_and_auto_simulates);
    RUN(driver_errors_name_the_call_the_device_and_the_error);
    HARNESS_EXIT();
}
