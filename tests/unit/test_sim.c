/* The simulated backend: devices from the spec, reservations that are real host
 * memory, free-memory accounting, and hardware shared by every runtime in the
 * process that names the same device list. */
#include "backend/backend.h"
#include "harness.h"

/* The reason of the last backend call that failed. */
static struct reason why;

static struct options load(const char *devices)
{
    gpumem_options u;
    struct options o;
    gpumem_options_init(&u);
    u.flags = GPUMEM_OPTIONS_IGNORE_ENVIRONMENT;
    u.backend = GPUMEM_BACKEND_SIM;
    u.sim_devices = devices;
    gpumem_status s = gpumem__options_load(&u, &o);
    if (s != GPUMEM_OK)
        HARNESS_FAIL("options: %s", gpumem_last_error());
    return o;
}

TEST(devices_from_the_spec)
{
    struct options o = load("TITAN X:12GiB:6.1,A100:40GiB:8.0,2GiB");
    struct backend *b;
    ASSERT_OK(gpumem__sim_open(&o, &b, &why));
    ASSERT_EQ(b->ops->device_count(b), 3);
    ASSERT_TRUE(b->regions_contiguous);
    ASSERT_TRUE(b->host_accessible);
    gpumem_physical_device d = GPUMEM_STRUCT_INIT(gpumem_physical_device);
    ASSERT_OK(b->ops->device_props(b, 0, &d, &why));
    ASSERT_STREQ(d.model, "TITAN X");
    ASSERT_EQ(d.total_bytes, 12 * GPUMEM_GIB);
    ASSERT_EQ(d.compute_major, 6);
    ASSERT_EQ(d.compute_minor, 1);
    ASSERT_OK(b->ops->device_props(b, 2, &d, &why));
    ASSERT_EQ(d.total_bytes, 2 * GPUMEM_GIB);
    ASSERT_EQ(d.compute_major, 8);
    uint64_t free_bytes, total;
    ASSERT_OK(b->ops->mem_info(b, 1, &free_bytes, &total, &why));
    ASSERT_EQ(free_bytes, 40 * GPUMEM_GIB);
    ASSERT_EQ(total, 40 * GPUMEM_GIB);
    b->ops->destroy(b);
}

TEST(reservations_are_writable_and_accounted)
{
    struct options o = load("acct:1GiB");
    struct backend *b;
    ASSERT_OK(gpumem__sim_open(&o, &b, &why));
    uint64_t a1, a2, free_bytes, total;
    ASSERT_OK(b->ops->alloc_region(b, 0, 256 * GPUMEM_MIB, &a1, &why));
    ASSERT_OK(b->ops->alloc_region(b, 0, 512 * GPUMEM_MIB, &a2, &why));
    ASSERT_EQ(a1 % 256, 0);
    ASSERT_TRUE(a2 >= a1 + 256 * GPUMEM_MIB || a1 >= a2 + 512 * GPUMEM_MIB);
    memset((void *)(uintptr_t)a1, 0xab, 256 * GPUMEM_MIB);
    ASSERT_EQ(((unsigned char *)(uintptr_t)a1)[12345], 0xab);
    ASSERT_OK(b->ops->mem_info(b, 0, &free_bytes, &total, &why));
    ASSERT_EQ(free_bytes, 256 * GPUMEM_MIB);
    uint64_t a3;
    ASSERT_STATUS(b->ops->alloc_region(b, 0, 512 * GPUMEM_MIB, &a3, &why),
                  GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_CONTAINS(why.text, "cannot give 512.00 MiB");
    ASSERT_CONTAINS(why.text, "256.00 MiB free");
    ASSERT_OK(b->ops->free_region(b, 0, a1, 256 * GPUMEM_MIB, &why));
    ASSERT_OK(b->ops->mem_info(b, 0, &free_bytes, &total, &why));
    ASSERT_EQ(free_bytes, 512 * GPUMEM_MIB);
    /* released pages were given back: they read as zero again */
    ASSERT_OK(b->ops->alloc_region(b, 0, 256 * GPUMEM_MIB, &a3, &why));
    if (a3 == a1)
        ASSERT_EQ(((unsigned char *)(uintptr_t)a3)[12345], 0);
    ASSERT_STATUS(b->ops->free_region(b, 0, a1 + 256, 256, &why), GPUMEM_ERR_BACKEND);
    ASSERT_OK(b->ops->free_region(b, 0, a3, 256 * GPUMEM_MIB, &why));
    ASSERT_OK(b->ops->free_region(b, 0, a2, 512 * GPUMEM_MIB, &why));
    b->ops->destroy(b);
}

/* Like a driver, which maps pages anywhere, the device gives any region that fits
 * its free memory, also when that memory is in pieces: its address space is
 * twice its memory. */
TEST(free_memory_in_pieces_still_gives_a_region_that_fits)
{
    struct options o = load("pieces:1GiB");
    struct backend *b;
    ASSERT_OK(gpumem__sim_open(&o, &b, &why));
    uint64_t a, c, big, free_bytes, total;
    ASSERT_OK(b->ops->alloc_region(b, 0, 300 * GPUMEM_MIB, &a, &why));
    ASSERT_OK(b->ops->alloc_region(b, 0, 1 * GPUMEM_MIB, &c, &why));
    ASSERT_OK(b->ops->free_region(b, 0, a, 300 * GPUMEM_MIB, &why));
    ASSERT_OK(b->ops->alloc_region(b, 0, 800 * GPUMEM_MIB, &big, &why));
    memset((void *)(uintptr_t)big, 0x5a,
           800 * GPUMEM_MIB); /* memory, not just addresses */
    ASSERT_OK(b->ops->mem_info(b, 0, &free_bytes, &total, &why));
    ASSERT_EQ(free_bytes, 223 * GPUMEM_MIB);
    ASSERT_EQ(total, GPUMEM_GIB);
    /* and never more than its memory */
    ASSERT_STATUS(b->ops->alloc_region(b, 0, 224 * GPUMEM_MIB, &a, &why),
                  GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_CONTAINS(why.text, "cannot give 224.00 MiB: 223.00 MiB free");
    ASSERT_STATUS(b->ops->alloc_region(b, 0, 223 * GPUMEM_MIB + 1, &a, &why),
                  GPUMEM_ERR_OUT_OF_MEMORY); /* a granule more, once rounded */
    ASSERT_OK(b->ops->alloc_region(b, 0, 223 * GPUMEM_MIB, &a, &why));
    ASSERT_OK(b->ops->mem_info(b, 0, &free_bytes, &total, &why));
    ASSERT_EQ(free_bytes, 0);
    ASSERT_OK(b->ops->free_region(b, 0, a, 223 * GPUMEM_MIB, &why));
    ASSERT_OK(b->ops->free_region(b, 0, big, 800 * GPUMEM_MIB, &why));
    ASSERT_OK(b->ops->free_region(b, 0, c, 1 * GPUMEM_MIB, &why));
    ASSERT_OK(b->ops->mem_info(b, 0, &free_bytes, &total, &why));
    ASSERT_EQ(free_bytes, GPUMEM_GIB);
    b->ops->destroy(b);
}

TEST(same_device_list_shares_the_hardware)
{
    struct options o = load("shared:4GiB");
    struct options same = load("shared:4096MiB"); /* the same list, spelled otherwise */
    struct options other = load("shared:8GiB");
    struct backend *b1, *b2, *b3;
    ASSERT_OK(gpumem__sim_open(&o, &b1, &why));
    ASSERT_OK(gpumem__sim_open(&same, &b2, &why));
    ASSERT_OK(gpumem__sim_open(&other, &b3, &why));
    uint64_t addr, free_bytes, total;
    ASSERT_OK(b1->ops->alloc_region(b1, 0, 3 * GPUMEM_GIB, &addr, &why));
    ASSERT_OK(b2->ops->mem_info(b2, 0, &free_bytes, &total, &why));
    ASSERT_EQ(free_bytes, 1 * GPUMEM_GIB);
    ASSERT_OK(b3->ops->mem_info(b3, 0, &free_bytes, &total, &why));
    ASSERT_EQ(free_bytes, 8 * GPUMEM_GIB);
    /* the hardware outlives the first runtime that named it */
    b1->ops->destroy(b1);
    ASSERT_OK(b2->ops->mem_info(b2, 0, &free_bytes, &total, &why));
    ASSERT_EQ(free_bytes, 1 * GPUMEM_GIB);
    ASSERT_OK(b2->ops->free_region(b2, 0, addr, 3 * GPUMEM_GIB, &why));
    b2->ops->destroy(b2);
    b3->ops->destroy(b3);
}

TEST(a_huge_gpu_costs_nothing_until_touched)
{
    struct options o = load("H100:80GiB:9.0,big:1TiB");
    struct backend *b;
    gpumem_status s = gpumem__sim_open(&o, &b, &why);
#if defined(__SANITIZE_THREAD__)
    if (s != GPUMEM_OK) { /* its shadow memory cannot cover 1 TiB of host space */
        printf("     skipped under ThreadSanitizer: %s\n", why.text);
        return;
    }
#endif
    ASSERT_OK(s);
    if (s != GPUMEM_OK)
        return;
    uint64_t addr;
    ASSERT_OK(b->ops->alloc_region(b, 1, 900 * GPUMEM_GIB, &addr, &why));
    ((volatile char *)(uintptr_t)addr)[0] = 1; /* one page committed, not 900 GiB */
    ASSERT_OK(b->ops->free_region(b, 1, addr, 900 * GPUMEM_GIB, &why));
    b->ops->destroy(b);
}

TEST(address_space_exhaustion_fails_cleanly)
{
    /* 3 x 64 TiB cannot fit a 47-bit user address space: the third mapping fails,
     * the first two are undone, and the message names the device. */
    struct options o = load("vast:64TiB,vast:64TiB,vast:64TiB");
    struct backend *b = NULL;
    ASSERT_STATUS(gpumem__sim_open(&o, &b, &why), GPUMEM_ERR_BACKEND);
    ASSERT_CONTAINS(why.text, "mmap of 64.00 TiB");
    ASSERT_TRUE(b == NULL);
    /* and the registry is still usable afterwards */
    struct options small = load("after-vast:1GiB");
    ASSERT_OK(gpumem__sim_open(&small, &b, &why));
    b->ops->destroy(b);
}

TEST(no_gpus)
{
    struct options o = load("");
    struct backend *b;
    ASSERT_OK(gpumem__sim_open(&o, &b, &why));
    ASSERT_EQ(b->ops->device_count(b), 0);
    b->ops->destroy(b);
}

/* The model of CUDA's virtual memory management: a range without memory, 2 MiB
 * granules mapped into it (writable, zeroed, counted as used) and unmapped (the
 * memory free again, the other granules' contents kept), on one count with the
 * plain regions. */
TEST(address_spaces_map_and_unmap_granules)
{
    struct options o = load("vmm:64MiB");
    struct backend *b;
    ASSERT_OK(gpumem__sim_open(&o, &b, &why));
    const uint64_t g = 2 * GPUMEM_MIB;
    uint64_t gran = 0, base = 0, free_bytes, total, region, other;
    bool stuck = true, held = true;
    ASSERT_OK(b->ops->space_granularity(b, 0, &gran, &why));
    ASSERT_EQ(gran, g);
    ASSERT_OK(b->ops->space_alloc_range(b, 0, 128 * GPUMEM_MIB, &base, &why));
    ASSERT_EQ(base % g, 0);
    ASSERT_OK(b->ops->mem_info(b, 0, &free_bytes, &total, &why));
    ASSERT_EQ(free_bytes, 64 * GPUMEM_MIB); /* addresses are not memory */

    ASSERT_OK(b->ops->space_map(b, 0, base, g, &stuck, &held, &why));
    ASSERT_TRUE(!stuck && !held);
    ASSERT_OK(b->ops->space_map(b, 0, base + g, g, &stuck, &held, &why));
    ASSERT_OK(b->ops->mem_info(b, 0, &free_bytes, &total, &why));
    ASSERT_EQ(free_bytes, 60 * GPUMEM_MIB);
    unsigned char *p = (unsigned char *)(uintptr_t)base;
    ASSERT_EQ(p[100], 0);
    memset(p, 0x5a, 2 * g);

    ASSERT_OK(b->ops->space_unmap(b, 0, base, g, &why));
    ASSERT_OK(b->ops->mem_info(b, 0, &free_bytes, &total, &why));
    ASSERT_EQ(free_bytes, 62 * GPUMEM_MIB);
    ASSERT_EQ(p[g], 0x5a); /* the granule still mapped keeps its contents */
    ASSERT_EQ(p[2 * g - 1], 0x5a);
    ASSERT_OK(b->ops->space_map(b, 0, base, g, &stuck, &held, &why));
    ASSERT_EQ(p[0], 0); /* new memory */
    ASSERT_EQ(p[g - 1], 0);

    /* mapped granules and plain regions draw on one count */
    ASSERT_OK(b->ops->alloc_region(b, 0, 60 * GPUMEM_MIB, &region, &why));
    ASSERT_STATUS(b->ops->space_map(b, 0, base + 2 * g, g, &stuck, &held, &why),
                  GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_CONTAINS(why.text, "cannot give 2.00 MiB");
    ASSERT_TRUE(!stuck && !held);
    ASSERT_STATUS(b->ops->alloc_region(b, 0, 4 * GPUMEM_MIB, &other, &why),
                  GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_OK(b->ops->free_region(b, 0, region, 60 * GPUMEM_MIB, &why));
    ASSERT_OK(b->ops->space_unmap(b, 0, base, g, &why));
    ASSERT_OK(b->ops->space_unmap(b, 0, base + g, g, &why));
    ASSERT_OK(b->ops->mem_info(b, 0, &free_bytes, &total, &why));
    ASSERT_EQ(free_bytes, 64 * GPUMEM_MIB);
    ASSERT_OK(b->ops->space_free_range(b, 0, base, 128 * GPUMEM_MIB, &why));
    b->ops->destroy(b);
}

/* The calls device `dev` of b counted since `before`, kind by kind, as
 * "name:calls:bytes" for the kinds that changed, in the list's order. */
static void count_changes(struct backend *b, int dev,
                          const struct driver_call_totals *before, char *out, size_t n)
{
    struct driver_call_totals now[DRIVER_CALL_COUNT];
    memset(now, 0, sizeof now);
    gpumem__driver_counts_add(b->driver_calls, (size_t)dev, (size_t)dev, now);
    size_t len = 0;
    out[0] = '\0';
    for (size_t k = 0; k < DRIVER_CALL_COUNT; k++) {
        uint64_t calls = now[k].calls - before[k].calls;
        uint64_t bytes = now[k].bytes - before[k].bytes;
        if (calls && len < n)
            len += (size_t)snprintf(out + len, n - len, "%s%s:%llu:%llu", len ? " " : "",
                                    gpumem__driver_call_name(k),
                                    (unsigned long long)calls, (unsigned long long)bytes);
    }
}

/* One operation's calls: what the CUDA backend (cuda.c) makes for it. */
#define EXPECT_CALLS(b, dev, op, want)                                                   \
    do {                                                                                 \
        struct driver_call_totals before_[DRIVER_CALL_COUNT];                            \
        char got_[512];                                                                  \
        memset(before_, 0, sizeof before_);                                              \
        gpumem__driver_counts_add((b)->driver_calls, (size_t)(dev), (size_t)(dev),       \
                                  before_);                                              \
        op;                                                                              \
        count_changes((b), (dev), before_, got_, sizeof got_);                           \
        ASSERT_STREQ(got_, want);                                                        \
    } while (0)

#define PUSH "cuCtxPushCurrent_v2:1:0 cuCtxPopCurrent_v2:1:0"

TEST(each_operation_counts_the_calls_the_cuda_backend_makes)
{
    struct options o = load("calls-a:64MiB,calls-b:64MiB");
    struct backend *b;
    ASSERT_OK(gpumem__sim_open(&o, &b, &why));
    const uint64_t g = 2 * GPUMEM_MIB;
    uint64_t gran, base, free_bytes, total, region;
    bool stuck, held;
    /* the first operation on a device retains its primary context */
    EXPECT_CALLS(b, 1, ASSERT_OK(b->ops->mem_info(b, 1, &free_bytes, &total, &why)),
                 PUSH " cuDevicePrimaryCtxRetain:1:0 cuMemGetInfo_v2:1:0");
    EXPECT_CALLS(b, 1, ASSERT_OK(b->ops->mem_info(b, 1, &free_bytes, &total, &why)),
                 PUSH " cuMemGetInfo_v2:1:0");
    /* the granularity is asked once per device, then known */
    EXPECT_CALLS(b, 1, ASSERT_OK(b->ops->space_granularity(b, 1, &gran, &why)),
                 PUSH " cuMemGetAllocationGranularity:1:0");
    EXPECT_CALLS(b, 1, ASSERT_OK(b->ops->space_granularity(b, 1, &gran, &why)), "");
    EXPECT_CALLS(b, 1, ASSERT_OK(b->ops->space_alloc_range(b, 1, 16 * g, &base, &why)),
                 PUSH " cuMemAddressReserve:1:33554432");
    EXPECT_CALLS(b, 1,
                 ASSERT_OK(b->ops->space_map(b, 1, base, 3 * g, &stuck, &held, &why)),
                 PUSH
                 " cuMemCreate:1:6291456 cuMemMap:1:6291456 cuMemSetAccess:1:6291456 "
                 "cuMemRelease:1:6291456");
    EXPECT_CALLS(b, 1, ASSERT_OK(b->ops->space_unmap(b, 1, base, 3 * g, &why)),
                 PUSH " cuMemUnmap:1:6291456");
    EXPECT_CALLS(b, 1,
                 ASSERT_OK(b->ops->alloc_region(b, 1, 60 * GPUMEM_MIB, &region, &why)),
                 PUSH " cuMemAlloc_v2:1:62914560");
    /* refused memory: the CUDA backend's cuMemCreate fails, nothing follows it */
    EXPECT_CALLS(b, 1,
                 ASSERT_STATUS(b->ops->space_map(b, 1, base, 4 * g, &stuck, &held, &why),
                               GPUMEM_ERR_OUT_OF_MEMORY),
                 PUSH " cuMemCreate:1:8388608");
    EXPECT_CALLS(b, 1,
                 ASSERT_STATUS(b->ops->alloc_region(b, 1, 8 * GPUMEM_MIB, &region, &why),
                               GPUMEM_ERR_OUT_OF_MEMORY),
                 PUSH " cuMemAlloc_v2:1:8388608");
    EXPECT_CALLS(b, 1,
                 ASSERT_OK(b->ops->free_region(b, 1, region, 60 * GPUMEM_MIB, &why)),
                 PUSH " cuMemFree_v2:1:62914560");
    EXPECT_CALLS(b, 1, ASSERT_OK(b->ops->space_free_range(b, 1, base, 16 * g, &why)),
                 PUSH " cuMemAddressFree:1:33554432");
    /* device 0 was not touched; a second backend on the same hardware counts
     * its own, from its own first retain */
    EXPECT_CALLS(b, 0, (void)0, "");
    struct driver_call_totals zero[DRIVER_CALL_COUNT];
    memset(zero, 0, sizeof zero);
    char got[512];
    count_changes(b, 0, zero, got, sizeof got);
    ASSERT_STREQ(got, "");
    struct backend *c;
    ASSERT_OK(gpumem__sim_open(&o, &c, &why));
    EXPECT_CALLS(c, 1, ASSERT_OK(c->ops->mem_info(c, 1, &free_bytes, &total, &why)),
                 PUSH " cuDevicePrimaryCtxRetain:1:0 cuMemGetInfo_v2:1:0");
    c->ops->destroy(c);
    b->ops->destroy(b);
}

int main(void)
{
    RUN(devices_from_the_spec);
    RUN(reservations_are_writable_and_accounted);
    RUN(free_memory_in_pieces_still_gives_a_region_that_fits);
    RUN(same_device_list_shares_the_hardware);
    RUN(a_huge_gpu_costs_nothing_until_touched);
    RUN(address_space_exhaustion_fails_cleanly);
    RUN(no_gpus);
    RUN(address_spaces_map_and_unmap_granules);
    RUN(each_operation_counts_the_calls_the_cuda_backend_makes);
    HARNESS_EXIT();
}
