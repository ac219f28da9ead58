/* Public-API tests of the lifecycle: enumeration (two-call idiom), names, models,
 * compute capability, logical numbering, configure -> initialize -> serve, the
 * implicit initializers, configuration after initialization, the default runtime.
 * Written from DESIGN.md and include/gpumem.h only. */
#include "gpumem.h"
#include "harness.h"
#include "api_util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <string.h>

static bool initialized(gpumem_runtime *rt)
{
    bool b = true;
    ASSERT_OK(gpumem_is_initialized(rt, &b));
    return b;
}

TEST(version)
{
    ASSERT_EQ(gpumem_version(), GPUMEM_VERSION_NUMBER);
    ASSERT_EQ(GPUMEM_VERSION_NUMBER, 200); /* 0.2.0 */
}

TEST(options_init_defaults)
{
    gpumem_options o;
    memset(&o, 0xAB, sizeof o);
    ASSERT_OK(gpumem_options_init(&o));
    ASSERT_EQ(o.struct_size, sizeof(gpumem_options));
    ASSERT_EQ(o.flags, 0);
    ASSERT_EQ(o.backend, GPUMEM_BACKEND_FROM_ENV);
    ASSERT_EQ(o.log_level, 0);
    ASSERT_TRUE(o.sim_devices == NULL);
    ASSERT_TRUE(o.log == NULL);
    ASSERT_TRUE(o.log_user_data == NULL);
}

TEST(physical_devices_two_call)
{
    gpumem_runtime *rt = sim_runtime("TITAN X:12GiB:6.1,A100:40GiB:8.0,24GiB");
    if (!rt)
        return;
    size_t count = 12345;
    ASSERT_OK(gpumem_list_physical_devices(rt, NULL, 0, &count));
    ASSERT_EQ(count, 3);

    /* Short capacity: fills what fits, reports the full count, leaves the rest. */
    gpumem_physical_device d[5];
    memset(d, 0x5A, sizeof d);
    d[0].struct_size = sizeof d[0]; /* the first element's is every element's */
    count = 0;
    ASSERT_OK(gpumem_list_physical_devices(rt, d, 2, &count));
    ASSERT_EQ(count, 3);
    ASSERT_EQ(d[0].index, 0);
    ASSERT_EQ(d[1].index, 1);
    ASSERT_EQ(d[2].index, 0x5A5A5A5A); /* untouched */

    /* Capacity 0 with a buffer: nothing read or written, full count. */
    memset(d, 0x5A, sizeof d);
    count = 0;
    ASSERT_OK(gpumem_list_physical_devices(rt, d, 0, &count));
    ASSERT_EQ(count, 3);
    ASSERT_EQ(d[0].index, 0x5A5A5A5A);

    /* Ample capacity. */
    memset(d, 0, sizeof d);
    d[0].struct_size = sizeof d[0];
    count = 0;
    ASSERT_OK(gpumem_list_physical_devices(rt, d, 5, &count));
    ASSERT_EQ(count, 3);
    ASSERT_STREQ(d[0].name, "/physical_device:GPU:0");
    ASSERT_STREQ(d[1].name, "/physical_device:GPU:1");
    ASSERT_STREQ(d[2].name, "/physical_device:GPU:2");
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(d[i].index, i);
    ASSERT_STREQ(d[0].model, "TITAN X");
    ASSERT_STREQ(d[1].model, "A100");
    ASSERT_TRUE(d[2].model[0] != '\0'); /* unnamed simulated GPU still has a model */
    ASSERT_EQ(d[0].total_bytes, 12 * GiB);
    ASSERT_EQ(d[1].total_bytes, 40 * GiB);
    ASSERT_EQ(d[2].total_bytes, 24 * GiB);
    ASSERT_EQ(d[0].compute_major, 6);
    ASSERT_EQ(d[0].compute_minor, 1);
    ASSERT_EQ(d[1].compute_major, 8);
    ASSERT_EQ(d[1].compute_minor, 0);
    ASSERT_EQ(d[2].compute_major, 8); /* default 8.0 */
    ASSERT_EQ(d[2].compute_minor, 0);

    ASSERT_FALSE(initialized(rt)); /* enumeration never initializes */
    gpumem_runtime_destroy(rt);
}

TEST(sim_device_sizes_and_units)
{
    gpumem_runtime *rt =
        sim_runtime("U-B:1048576B,U-K:2048KiB,U-M:3MiB:7.5,U-G:1GiB:9.0,U-T:1TiB:10.2");
    if (!rt)
        return;
    gpumem_physical_device d[5] = {GPUMEM_STRUCT_INIT(gpumem_physical_device)};
    size_t count = 0;
    ASSERT_OK(gpumem_list_physical_devices(rt, d, 5, &count));
    ASSERT_EQ(count, 5);
    if (count == 5) {
        ASSERT_EQ(d[0].total_bytes, 1 * MiB);
        ASSERT_EQ(d[1].total_bytes, 2 * MiB);
        ASSERT_EQ(d[2].total_bytes, 3 * MiB);
        ASSERT_EQ(d[3].total_bytes, 1 * GiB);
        ASSERT_EQ(d[4].total_bytes, 1024 * GiB);
        ASSERT_STREQ(d[2].model, "U-M");
        ASSERT_EQ(d[2].compute_major, 7);
        ASSERT_EQ(d[2].compute_minor, 5);
        ASSERT_EQ(d[3].compute_major, 9);
        ASSERT_EQ(d[4].compute_major, 10);
        ASSERT_EQ(d[4].compute_minor, 2);
    }
    ASSERT_FALSE(initialized(rt));
    gpumem_runtime_destroy(rt);
}

TEST(logical_devices_two_call)
{
    gpumem_runtime *rt = sim_runtime("LTC-A:4GiB,LTC-B:4GiB,LTC-C:4GiB");
    if (!rt)
        return;
    gpumem_logical_device_config cfg[3] = {GPUMEM_LOGICAL_DEVICE_LIMIT(256 * MiB),
                                           GPUMEM_LOGICAL_DEVICE_LIMIT(256 * MiB),
                                           GPUMEM_LOGICAL_DEVICE_LIMIT(512 * MiB)};
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, cfg, 3));
    for (int g = 0; g < 3; g++)
        ASSERT_OK(gpumem_set_memory_growth(rt, g, true));
    ASSERT_FALSE(initialized(rt));

    size_t count = 0;
    ASSERT_OK(gpumem_list_logical_devices(rt, NULL, 0, &count));
    ASSERT_EQ(count, 5); /* 3 on GPU 0, one each on GPUs 1 and 2 */

    gpumem_logical_device l[6];
    memset(l, 0x5A, sizeof l);
    l[0].struct_size = sizeof l[0];
    count = 0;
    ASSERT_OK(gpumem_list_logical_devices(rt, l, 2, &count));
    ASSERT_EQ(count, 5);
    ASSERT_EQ(l[0].index, 0);
    ASSERT_EQ(l[1].index, 1);
    ASSERT_EQ(l[2].index, 0x5A5A5A5A);

    memset(l, 0, sizeof l);
    l[0].struct_size = sizeof l[0];
    ASSERT_OK(gpumem_list_logical_devices(rt, l, 6, &count));
    ASSERT_EQ(count, 5);
    const int phys[5] = {0, 0, 0, 1, 2};
    const char *names[5] = {"/device:GPU:0", "/device:GPU:1", "/device:GPU:2",
                            "/device:GPU:3", "/device:GPU:4"};
    for (int i = 0; i < 5; i++) {
        ASSERT_EQ(l[i].index, i);
        ASSERT_STREQ(l[i].name, names[i]);
        ASSERT_EQ(l[i].physical_index, phys[i]);
        ASSERT_TRUE(l[i].memory_growth);
    }
    ASSERT_EQ(l[0].memory_limit_bytes, 256 * MiB);
    ASSERT_EQ(l[1].memory_limit_bytes, 256 * MiB);
    ASSERT_EQ(l[2].memory_limit_bytes, 512 * MiB);
    ASSERT_EQ(l[3].memory_limit_bytes, 4 * GiB - 1536 * MiB);
    ASSERT_EQ(l[4].memory_limit_bytes, 4 * GiB - 1536 * MiB);
    gpumem_runtime_destroy(rt);
}

TEST(visible_devices_two_call)
{
    gpumem_runtime *rt = sim_runtime("VTC-A:1GiB,VTC-B:1GiB,VTC-C:1GiB");
    if (!rt)
        return;
    int v[4];
    size_t count = 0;
    ASSERT_OK(gpumem_get_visible_devices(rt, NULL, 0, &count));
    ASSERT_EQ(count, 3); /* default: all visible */
    ASSERT_OK(gpumem_get_visible_devices(rt, v, 4, &count));
    ASSERT_EQ(count, 3);
    if (count == 3) {
        ASSERT_EQ(v[0], 0);
        ASSERT_EQ(v[1], 1);
        ASSERT_EQ(v[2], 2);
    }

    const int want[2] = {2, 0}; /* given out of order: reported ascending */
    ASSERT_OK(gpumem_set_visible_devices(rt, want, 2));
    count = 0;
    ASSERT_OK(gpumem_get_visible_devices(rt, NULL, 0, &count));
    ASSERT_EQ(count, 2);
    v[0] = v[1] = v[2] = -7;
    ASSERT_OK(gpumem_get_visible_devices(rt, v, 1, &count));
    ASSERT_EQ(count, 2);
    ASSERT_EQ(v[0], 0);
    ASSERT_EQ(v[1], -7); /* untouched */
    ASSERT_OK(gpumem_get_visible_devices(rt, v, 4, &count));
    ASSERT_EQ(count, 2);
    ASSERT_EQ(v[0], 0);
    ASSERT_EQ(v[1], 2);

    /* Invisible GPUs are still listed as physical devices. */
    ASSERT_OK(gpumem_list_physical_devices(rt, NULL, 0, &count));
    ASSERT_EQ(count, 3);
    ASSERT_FALSE(initialized(rt));
    gpumem_runtime_destroy(rt);
}

TEST(logical_configuration_two_call)
{
    gpumem_runtime *rt = sim_runtime("LCT-A:8GiB,LCT-B:8GiB");
    if (!rt)
        return;
    size_t count = 99;
    ASSERT_OK(gpumem_get_logical_device_configuration(rt, 0, NULL, 0, &count));
    ASSERT_EQ(count, 0); /* default */

    gpumem_logical_device_config cfg[3] = {GPUMEM_LOGICAL_DEVICE_LIMIT(1 * GiB),
                                           GPUMEM_LOGICAL_DEVICE_LIMIT(2 * GiB),
                                           GPUMEM_LOGICAL_DEVICE_LIMIT(3 * GiB)};
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 1, cfg, 3));
    ASSERT_OK(gpumem_get_logical_device_configuration(rt, 1, NULL, 0, &count));
    ASSERT_EQ(count, 3);

    gpumem_logical_device_config out[4];
    memset(out, 0x5A, sizeof out);
    out[0].struct_size = sizeof out[0];
    ASSERT_OK(gpumem_get_logical_device_configuration(rt, 1, out, 2, &count));
    ASSERT_EQ(count, 3);
    ASSERT_EQ(out[0].memory_limit_bytes, 1 * GiB);
    ASSERT_EQ(out[1].memory_limit_bytes, 2 * GiB);
    ASSERT_EQ(out[2].memory_limit_bytes, 0x5A5A5A5A5A5A5A5Aull); /* untouched */

    ASSERT_OK(gpumem_get_logical_device_configuration(rt, 1, out, 4, &count));
    ASSERT_EQ(count, 3);
    ASSERT_EQ(out[2].memory_limit_bytes, 3 * GiB);
    ASSERT_OK(gpumem_get_logical_device_configuration(rt, 0, out, 4, &count));
    ASSERT_EQ(count, 0);

    /* Reset any number of times; n = 0 restores the default. */
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 1, cfg, 1));
    ASSERT_OK(gpumem_get_logical_device_configuration(rt, 1, out, 4, &count));
    ASSERT_EQ(count, 1);
    ASSERT_EQ(out[0].memory_limit_bytes, 1 * GiB);
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 1, NULL, 0));
    ASSERT_OK(gpumem_get_logical_device_configuration(rt, 1, out, 4, &count));
    ASSERT_EQ(count, 0);
    ASSERT_FALSE(initialized(rt));
    gpumem_runtime_destroy(rt);
}

/* Every configuration call and getter, made any number of times, before
 * initialization: nothing initializes. */
TEST(configuration_does_not_initialize)
{
    gpumem_runtime *rt = sim_runtime("CDI-A:8GiB,CDI-B:8GiB");
    if (!rt)
        return;
    bool b = true;
    ASSERT_OK(gpumem_is_initialized(rt, &b));
    ASSERT_FALSE(b);

    size_t count;
    gpumem_physical_device pd[2] = {GPUMEM_STRUCT_INIT(gpumem_physical_device)};
    ASSERT_OK(gpumem_list_physical_devices(rt, pd, 2, &count));
    int vis[2];
    ASSERT_OK(gpumem_get_visible_devices(rt, vis, 2, &count));
    gpumem_backend_kind kind = GPUMEM_BACKEND_AUTO;
    ASSERT_OK(gpumem_get_backend(rt, &kind));
    ASSERT_EQ(kind, GPUMEM_BACKEND_SIM); /* what the runtime runs on, never AUTO */
    ASSERT_EQ(gpumem_get_backend(rt, NULL), GPUMEM_ERR_INVALID_ARGUMENT);
    bool g;
    double f;
    for (int round = 0; round < 3; round++) {
        ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
        ASSERT_OK(gpumem_set_memory_growth(rt, 0, false));
        ASSERT_OK(gpumem_get_memory_growth(rt, 1, &g));
        ASSERT_OK(gpumem_set_memory_fraction(rt, -1, 0.5));
        ASSERT_OK(gpumem_set_memory_fraction(rt, 1, 0.25));
        ASSERT_OK(gpumem_set_memory_fraction(rt, -1, 0.0));
        ASSERT_OK(gpumem_get_memory_fraction(rt, 0, &f));
        const int one = 1;
        ASSERT_OK(gpumem_set_visible_devices(rt, &one, 1));
        ASSERT_OK(gpumem_set_visible_devices(rt, NULL, 0));
        const int both[2] = {0, 1};
        ASSERT_OK(gpumem_set_visible_devices(rt, both, 2));
        gpumem_logical_device_config cfg[2] = {GPUMEM_LOGICAL_DEVICE_LIMIT(1 * GiB),
                                               GPUMEM_LOGICAL_DEVICE_LIMIT(1 * GiB)};
        ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, cfg, 2));
        ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, NULL, 0));
        ASSERT_OK(gpumem_get_logical_device_configuration(rt, 0, cfg, 2, &count));
    }
    /* Before initialization there is nothing to reset or release. */
    ASSERT_OK(gpumem_reset_memory_stats(rt, -1));
    uint64_t released = 77;
    ASSERT_OK(gpumem_release_unused(rt, -1, &released));
    ASSERT_EQ(released, 0);
    ASSERT_OK(gpumem_release_unused(rt, -1, NULL));

    ASSERT_OK(gpumem_is_initialized(rt, &b));
    ASSERT_FALSE(b);
    gpumem_runtime_destroy(rt);
}

/* The configuration set before initialization is what initialization uses. */
TEST(configuration_is_applied_at_initialize)
{
    gpumem_runtime *rt = sim_runtime("CAI-A:8GiB,CAI-B:8GiB");
    if (!rt)
        return;
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, false)); /* last one counts */
    ASSERT_OK(gpumem_set_memory_growth(rt, 1, true));
    ASSERT_OK(gpumem_set_memory_fraction(rt, 0, 0.5));
    ASSERT_OK(gpumem_initialize(rt));
    gpumem_logical_device l[2] = {GPUMEM_STRUCT_INIT(gpumem_logical_device)};
    size_t count = 0;
    ASSERT_OK(gpumem_list_logical_devices(rt, l, 2, &count));
    ASSERT_EQ(count, 2);
    ASSERT_FALSE(l[0].memory_growth);
    ASSERT_TRUE(l[1].memory_growth);
    ASSERT_EQ(l[0].memory_limit_bytes, 4 * GiB);
    ASSERT_EQ(l[1].memory_limit_bytes, 8 * GiB - 1536 * MiB);
    gpumem_memory_info mi = info_of(rt, 0);
    ASSERT_EQ(mi.reserved_bytes, 4 * GiB); /* greedy: whole budget at init */
    ASSERT_EQ(mi.limit_bytes, 4 * GiB);
    mi = info_of(rt, 1);
    ASSERT_EQ(mi.reserved_bytes, 0); /* growth: nothing yet */
    gpumem_runtime_destroy(rt);
}

TEST(explicit_initialize_idempotent)
{
    gpumem_runtime *rt = sim_runtime("EII:8GiB:6.1");
    if (!rt)
        return;
    ASSERT_FALSE(initialized(rt));
    ASSERT_OK(gpumem_initialize(rt));
    ASSERT_TRUE(initialized(rt));
    ASSERT_OK(gpumem_initialize(rt));
    ASSERT_OK(gpumem_initialize(rt));
    ASSERT_TRUE(initialized(rt));
    gpumem_memory_info mi = info_of(rt, 0);
    ASSERT_EQ(mi.limit_bytes, 8 * GiB - 500 * MiB);
    ASSERT_EQ(mi.reserved_bytes, 8 * GiB - 500 * MiB);

    /* Reserved once, not three times: a second runtime on the same hardware
     * finds 500 MiB free (less than 2 GiB: headroom 225 MiB). */
    gpumem_runtime *rt2 = sim_runtime("EII:8GiB:6.1");
    if (rt2) {
        mi = info_of(rt2, 0);
        ASSERT_EQ(mi.limit_bytes, 500 * MiB - 225 * MiB);
        gpumem_runtime_destroy(rt2);
    }
    gpumem_runtime_destroy(rt);
}

/* After initialization by `how`, a change fails with ALREADY_INITIALIZED, a
 * message that says so and names what initialized the devices, and changes
 * nothing. */
static void check_initialized_by(gpumem_runtime *rt, const char *what)
{
    bool g = true;
    ASSERT_TRUE(initialized(rt));
    ASSERT_STATUS(gpumem_set_memory_growth(rt, 0, true), GPUMEM_ERR_ALREADY_INITIALIZED);
    char msg[512];
    copy_error(msg, sizeof msg);
    ASSERT_CONTAINS(msg, "already initialized");
    ASSERT_CONTAINS(msg, what);
    ASSERT_OK(gpumem_get_memory_growth(rt, 0, &g));
    ASSERT_FALSE(g);
    gpumem_logical_device l = GPUMEM_STRUCT_INIT(gpumem_logical_device);
    size_t count = 0;
    ASSERT_OK(gpumem_list_logical_devices(rt, &l, 1, &count));
    ASSERT_EQ(count, 1);
    ASSERT_FALSE(l.memory_growth);
}

TEST(implicit_init_by_list_logical_devices)
{
    gpumem_runtime *rt = sim_runtime("IMP-L:2GiB");
    if (!rt)
        return;
    size_t count = 0;
    ASSERT_OK(gpumem_list_logical_devices(rt, NULL, 0, &count));
    ASSERT_EQ(count, 1);
    check_initialized_by(rt, "list_logical_devices");
    gpumem_runtime_destroy(rt);
}

TEST(implicit_init_by_malloc)
{
    gpumem_runtime *rt = sim_runtime("IMP-M:2GiB");
    if (!rt)
        return;
    void *p = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, 1000, &p));
    ASSERT_TRUE(p != NULL);
    check_initialized_by(rt, "malloc");
    ASSERT_OK(gpumem_free(rt, p));
    gpumem_runtime_destroy(rt);
}

TEST(implicit_init_by_get_memory_info)
{
    gpumem_runtime *rt = sim_runtime("IMP-I:2GiB");
    if (!rt)
        return;
    gpumem_memory_info mi = GPUMEM_STRUCT_INIT(gpumem_memory_info);
    ASSERT_OK(gpumem_get_memory_info(rt, 0, &mi));
    check_initialized_by(rt, "get_memory_info");
    gpumem_runtime_destroy(rt);
}

TEST(explicit_init_named_in_message)
{
    gpumem_runtime *rt = sim_runtime("IMP-E:2GiB");
    if (!rt)
        return;
    ASSERT_OK(gpumem_initialize(rt));
    ASSERT_STATUS(gpumem_set_memory_fraction(rt, 0, 0.5), GPUMEM_ERR_ALREADY_INITIALIZED);
    char msg[512];
    copy_error(msg, sizeof msg);
    ASSERT_CONTAINS(msg, "already initialized");
    if (strstr(msg, "gpumem_initialize") == NULL && strstr(msg, "explicit") == NULL)
        HARNESS_FAIL("message does not name the explicit gpumem_initialize: \"%s\"", msg);
    gpumem_runtime_destroy(rt);
}

/* The first initializer is the one named, not a later call. */
TEST(first_initializer_is_named)
{
    gpumem_runtime *rt = sim_runtime("IMP-F:2GiB");
    if (!rt)
        return;
    void *p = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, 256, &p));
    ASSERT_OK(gpumem_initialize(rt));
    size_t count;
    ASSERT_OK(gpumem_list_logical_devices(rt, NULL, 0, &count));
    ASSERT_STATUS(gpumem_set_memory_growth(rt, 0, true), GPUMEM_ERR_ALREADY_INITIALIZED);
    char msg[512];
    copy_error(msg, sizeof msg);
    ASSERT_CONTAINS(msg, "malloc");
    ASSERT_OK(gpumem_free(rt, p));
    gpumem_runtime_destroy(rt);
}

/* Every kind of change after initialization fails and changes nothing; setting
 * the value already in force succeeds. */
TEST(configuration_after_initialization)
{
    gpumem_runtime *rt = sim_runtime("CAF-A:8GiB,CAF-B:8GiB,CAF-C:8GiB");
    if (!rt)
        return;
    const int vis[2] = {0, 1};
    gpumem_logical_device_config cfg[2] = {GPUMEM_LOGICAL_DEVICE_LIMIT(1 * GiB),
                                           GPUMEM_LOGICAL_DEVICE_LIMIT(2 * GiB)};
    ASSERT_OK(gpumem_set_visible_devices(rt, vis, 2));
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    ASSERT_OK(gpumem_set_memory_growth(rt, 1, true));
    ASSERT_OK(gpumem_set_memory_fraction(rt, 0, 0.5));
    ASSERT_OK(gpumem_set_memory_fraction(rt, 1, 0.5));
    ASSERT_OK(gpumem_set_memory_fraction(rt, 2, 0.5));
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 1, cfg, 2));
    ASSERT_OK(gpumem_initialize(rt));

    gpumem_logical_device before[4] = {GPUMEM_STRUCT_INIT(gpumem_logical_device)};
    size_t nbefore = 0;
    ASSERT_OK(gpumem_list_logical_devices(rt, before, 4, &nbefore));
    ASSERT_EQ(nbefore, 3);

    char msg[512];
#define EXPECT_ALREADY(call)                                                             \
    do {                                                                                 \
        ASSERT_STATUS(call, GPUMEM_ERR_ALREADY_INITIALIZED);                             \
        copy_error(msg, sizeof msg);                                                     \
        ASSERT_CONTAINS(msg, "already initialized");                                     \
    } while (0)

    /* Changes: refused. */
    EXPECT_ALREADY(gpumem_set_memory_growth(rt, 0, false));
    EXPECT_ALREADY(gpumem_set_memory_growth(rt, 1, false));
    EXPECT_ALREADY(gpumem_set_memory_fraction(rt, 0, 0.25));
    EXPECT_ALREADY(gpumem_set_memory_fraction(rt, 0, 0.0));
    EXPECT_ALREADY(gpumem_set_memory_fraction(rt, -1, 0.75));
    const int all[3] = {0, 1, 2};
    const int only1[1] = {1};
    EXPECT_ALREADY(gpumem_set_visible_devices(rt, all, 3));
    EXPECT_ALREADY(gpumem_set_visible_devices(rt, only1, 1));
    EXPECT_ALREADY(gpumem_set_visible_devices(rt, NULL, 0));
    EXPECT_ALREADY(gpumem_set_logical_device_configuration(rt, 1, cfg, 1));
    EXPECT_ALREADY(gpumem_set_logical_device_configuration(rt, 1, NULL, 0));
    EXPECT_ALREADY(gpumem_set_logical_device_configuration(rt, 0, cfg, 2));
    gpumem_logical_device_config other[2] = {GPUMEM_LOGICAL_DEVICE_LIMIT(1 * GiB),
                                             GPUMEM_LOGICAL_DEVICE_LIMIT(3 * GiB)};
    EXPECT_ALREADY(gpumem_set_logical_device_configuration(rt, 1, other, 2));
#undef EXPECT_ALREADY

    /* The values in force: accepted, nothing happens (a re-run notebook cell). */
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    ASSERT_OK(gpumem_set_memory_growth(rt, 1, true));
    ASSERT_OK(gpumem_set_memory_fraction(rt, 0, 0.5));
    ASSERT_OK(gpumem_set_memory_fraction(rt, -1, 0.5));
    const int vis_again[2] = {1, 0};
    ASSERT_OK(gpumem_set_visible_devices(rt, vis, 2));
    ASSERT_OK(gpumem_set_visible_devices(rt, vis_again, 2));
    gpumem_logical_device_config same[2] = {GPUMEM_LOGICAL_DEVICE_LIMIT(1 * GiB),
                                            GPUMEM_LOGICAL_DEVICE_LIMIT(2 * GiB)};
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 1, same, 2));
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, NULL, 0));

    /* Nothing changed. */
    bool g;
    double f;
    ASSERT_OK(gpumem_get_memory_growth(rt, 0, &g));
    ASSERT_TRUE(g);
    ASSERT_OK(gpumem_get_memory_growth(rt, 1, &g));
    ASSERT_TRUE(g);
    for (int i = 0; i < 2; i++) {
        f = -1;
        ASSERT_OK(gpumem_get_memory_fraction(rt, i, &f));
        ASSERT_TRUE(f == 0.5);
    }
    int v[3];
    size_t count = 0;
    ASSERT_OK(gpumem_get_visible_devices(rt, v, 3, &count));
    ASSERT_EQ(count, 2);
    ASSERT_EQ(v[0], 0);
    ASSERT_EQ(v[1], 1);
    gpumem_logical_device_config got[3] = {
        GPUMEM_STRUCT_INIT(gpumem_logical_device_config)};
    ASSERT_OK(gpumem_get_logical_device_configuration(rt, 1, got, 3, &count));
    ASSERT_EQ(count, 2);
    ASSERT_EQ(got[0].memory_limit_bytes, 1 * GiB);
    ASSERT_EQ(got[1].memory_limit_bytes, 2 * GiB);
    ASSERT_OK(gpumem_get_logical_device_configuration(rt, 0, got, 3, &count));
    ASSERT_EQ(count, 0);

    gpumem_logical_device after[4] = {GPUMEM_STRUCT_INIT(gpumem_logical_device)};
    size_t nafter = 0;
    ASSERT_OK(gpumem_list_logical_devices(rt, after, 4, &nafter));
    ASSERT_EQ(nafter, nbefore);
    for (size_t i = 0; i < nafter && i < 4; i++) {
        ASSERT_EQ(after[i].physical_index, before[i].physical_index);
        ASSERT_EQ(after[i].memory_limit_bytes, before[i].memory_limit_bytes);
        ASSERT_EQ(after[i].memory_growth, before[i].memory_growth);
        ASSERT_STREQ(after[i].name, before[i].name);
    }
    /* The configuration in force: GPU 0 growth, fraction 0.5; GPU 1 split. */
    ASSERT_EQ(after[0].physical_index, 0);
    ASSERT_TRUE(after[0].memory_growth);
    ASSERT_EQ(after[0].memory_limit_bytes, 4 * GiB);
    ASSERT_EQ(after[1].physical_index, 1);
    ASSERT_EQ(after[1].memory_limit_bytes, 1 * GiB);
    ASSERT_EQ(after[2].physical_index, 1);
    ASSERT_EQ(after[2].memory_limit_bytes, 2 * GiB);

    /* Still serves. */
    void *p = NULL;
    ASSERT_OK(gpumem_malloc(rt, 2, 4096, &p));
    ASSERT_OK(gpumem_free(rt, p));
    gpumem_runtime_destroy(rt);
}

TEST(logical_numbering_across_visible_gpus)
{
    gpumem_runtime *rt = sim_runtime("NUM-A:4GiB,NUM-B:4GiB,NUM-C:4GiB,NUM-D:4GiB");
    if (!rt)
        return;
    const int vis[3] = {3, 0, 2};
    ASSERT_OK(gpumem_set_visible_devices(rt, vis, 3));
    gpumem_logical_device_config c0[2] = {GPUMEM_LOGICAL_DEVICE_LIMIT(512 * MiB),
                                          GPUMEM_LOGICAL_DEVICE_LIMIT(256 * MiB)};
    gpumem_logical_device_config c2[3] = {GPUMEM_LOGICAL_DEVICE_LIMIT(128 * MiB),
                                          GPUMEM_LOGICAL_DEVICE_LIMIT(128 * MiB),
                                          GPUMEM_LOGICAL_DEVICE_LIMIT(64 * MiB)};
    gpumem_logical_device_config c1[2] = {GPUMEM_LOGICAL_DEVICE_LIMIT(64 * MiB),
                                          GPUMEM_LOGICAL_DEVICE_LIMIT(
                                              64 * MiB)}; /* hidden GPU */
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, c0, 2));
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 1, c1, 2));
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 2, c2, 3));
    ASSERT_OK(gpumem_set_memory_growth(rt, 2, true));
    ASSERT_OK(gpumem_set_memory_growth(rt, 3, true));

    gpumem_logical_device l[8] = {GPUMEM_STRUCT_INIT(gpumem_logical_device)};
    size_t count = 0;
    ASSERT_OK(gpumem_list_logical_devices(rt, l, 8, &count));
    ASSERT_EQ(count, 6);
    if (count == 6) {
        const int phys[6] = {0, 0, 2, 2, 2, 3};
        const uint64_t lim[6] = {512 * MiB, 256 * MiB, 128 * MiB,
                                 128 * MiB, 64 * MiB,  4 * GiB - 1536 * MiB};
        const bool growth[6] = {false, false, true, true, true, true};
        for (int i = 0; i < 6; i++) {
            char name[64];
            snprintf(name, sizeof name, "/device:GPU:%d", i);
            ASSERT_EQ(l[i].index, i);
            ASSERT_STREQ(l[i].name, name);
            ASSERT_EQ(l[i].physical_index, phys[i]);
            ASSERT_EQ(l[i].memory_limit_bytes, lim[i]);
            ASSERT_EQ(l[i].memory_growth, growth[i]);
            gpumem_memory_info mi = info_of(rt, i);
            ASSERT_EQ(mi.limit_bytes, lim[i]);
            ASSERT_EQ(mi.reserved_bytes, growth[i] ? 0 : lim[i]);
        }
    }
    void *p = (void *)&count;
    ASSERT_STATUS(gpumem_malloc(rt, 6, 256, &p), GPUMEM_ERR_NO_SUCH_DEVICE);
    ASSERT_TRUE(p == (void *)&count); /* out-parameter untouched on failure */
    gpumem_runtime_destroy(rt);
}

TEST(malloc_alignment_and_host_access)
{
    gpumem_runtime *rt = sim_runtime("ALN:1GiB");
    if (!rt)
        return;
    const size_t sizes[] = {1, 100, 255, 256, 257, 4000, 65536, 1000001};
    void *p[sizeof sizes / sizeof sizes[0]];
    const size_t n = sizeof sizes / sizeof sizes[0];
    uint64_t expect = 0;
    for (size_t i = 0; i < n; i++) {
        p[i] = NULL;
        ASSERT_OK(gpumem_malloc(rt, 0, sizes[i], &p[i]));
        ASSERT_TRUE(p[i] != NULL);
        ASSERT_EQ((uintptr_t)p[i] % 256, 0);
        if (p[i])
            memset(p[i], (int)(0x10 + i), sizes[i]);
        expect += (sizes[i] + 255) / 256 * 256;
    }
    gpumem_memory_info mi = info_of(rt, 0);
    ASSERT_EQ(mi.current_bytes, expect);
    ASSERT_EQ(mi.num_allocs, n);
    for (size_t i = 0; i < n; i++) {
        const unsigned char *b = p[i];
        size_t bad = 0;
        for (size_t k = 0; b && k < sizes[i]; k++)
            bad += b[k] != (unsigned char)(0x10 + i);
        ASSERT_EQ(bad, 0);
    }
    for (size_t i = 0; i < n; i++)
        ASSERT_OK(gpumem_free(rt, p[i]));
    mi = info_of(rt, 0);
    ASSERT_EQ(mi.current_bytes, 0);
    ASSERT_EQ(mi.num_frees, n);
    gpumem_runtime_destroy(rt);
}

TEST(one_hundred_bytes_count_256)
{
    gpumem_runtime *rt = sim_runtime("G256:1GiB");
    if (!rt)
        return;
    void *p = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, 100, &p));
    gpumem_memory_info mi = info_of(rt, 0);
    ASSERT_EQ(mi.current_bytes, 256);
    ASSERT_EQ(mi.peak_bytes, 256);
    ASSERT_OK(gpumem_free(rt, p));
    gpumem_runtime_destroy(rt);
}

/* The process-wide default runtime (NULL), created from the environment on
 * first use. Runs first, before any other case touches the environment. */
TEST(default_runtime)
{
    /* gpumem_free(NULL, NULL) does nothing: it neither creates the default
     * runtime (from a bad environment here) nor fails */
    setenv("GPUMEM_BACKEND", "bogus", 1);
    ASSERT_OK(gpumem_free(NULL, NULL));
    setenv("GPUMEM_BACKEND", "sim", 1);
    setenv("GPUMEM_SIM_DEVICES", "DEFAULT-RT:2GiB:7.0,DEFAULT-RT2:1GiB", 1);
    unsetenv("GPUMEM_FORCE_ALLOW_GROWTH");
    unsetenv("TF_FORCE_GPU_ALLOW_GROWTH");
    unsetenv("GPUMEM_MEMORY_FRACTION");
    unsetenv("GPUMEM_MIN_SYSTEM_MEMORY_MB");
    unsetenv("TF_DEVICE_MIN_SYS_MEMORY_IN_MB");

    gpumem_physical_device d[3] = {GPUMEM_STRUCT_INIT(gpumem_physical_device)};
    size_t count = 0;
    ASSERT_OK(gpumem_list_physical_devices(NULL, d, 3, &count));
    ASSERT_EQ(count, 2);
    if (count != 2)
        return;
    ASSERT_STREQ(d[0].model, "DEFAULT-RT");
    ASSERT_EQ(d[0].total_bytes, 2 * GiB);
    ASSERT_EQ(d[0].compute_major, 7);
    bool b = true;
    ASSERT_OK(gpumem_is_initialized(NULL, &b));
    ASSERT_FALSE(b);
    ASSERT_OK(gpumem_set_memory_growth(NULL, 1, true));

    void *p = NULL;
    ASSERT_OK(gpumem_malloc(NULL, 0, 1000, &p));
    ASSERT_TRUE(p != NULL);
    if (p)
        memset(p, 0x42, 1000);
    ASSERT_OK(gpumem_is_initialized(NULL, &b));
    ASSERT_TRUE(b);
    gpumem_memory_info mi = GPUMEM_STRUCT_INIT(gpumem_memory_info);
    ASSERT_OK(gpumem_get_memory_info(NULL, 0, &mi));
    ASSERT_EQ(mi.current_bytes, 1024);
    ASSERT_EQ(mi.limit_bytes, 2 * GiB - 1050 * MiB);
    ASSERT_EQ(mi.reserved_bytes, 2 * GiB - 1050 * MiB);
    ASSERT_OK(gpumem_get_memory_info(NULL, 1, &mi));
    ASSERT_EQ(mi.reserved_bytes, 0); /* growth on GPU 1 */

    gpumem_runtime_destroy(NULL); /* ignored */
    ASSERT_OK(gpumem_get_memory_info(NULL, 0, &mi));
    ASSERT_EQ(mi.current_bytes, 1024);
    ASSERT_OK(gpumem_free(NULL, p));
    ASSERT_OK(gpumem_get_memory_info(NULL, 0, &mi));
    ASSERT_EQ(mi.current_bytes, 0);
    ASSERT_EQ(mi.num_frees, 1);

    /* Configuration after initialization applies to the default runtime too. */
    ASSERT_STATUS(gpumem_set_memory_growth(NULL, 0, true),
                  GPUMEM_ERR_ALREADY_INITIALIZED);

    /* The default runtime is a runtime of its own: an explicit runtime's
     * pointer is not its pointer. */
    gpumem_runtime *rt = sim_runtime("DEFAULT-OTHER:1GiB");
    if (rt) {
        void *q = NULL;
        ASSERT_OK(gpumem_malloc(rt, 0, 256, &q));
        ASSERT_STATUS(gpumem_free(NULL, q), GPUMEM_ERR_INVALID_POINTER);
        ASSERT_OK(gpumem_free(rt, q));
        gpumem_runtime_destroy(rt);
    }
}

/* Runtimes are independent: configuring and initializing one does not touch
 * another. */
TEST(runtimes_are_independent)
{
    gpumem_runtime *a = sim_runtime("IND-A:4GiB");
    gpumem_runtime *b = sim_runtime("IND-B:4GiB");
    if (!a || !b) {
        gpumem_runtime_destroy(a);
        gpumem_runtime_destroy(b);
        return;
    }
    ASSERT_OK(gpumem_set_memory_growth(a, 0, true));
    ASSERT_OK(gpumem_initialize(a));
    ASSERT_FALSE(initialized(b));
    bool g = true;
    ASSERT_OK(gpumem_get_memory_growth(b, 0, &g));
    ASSERT_FALSE(g);
    ASSERT_OK(gpumem_set_memory_fraction(b, 0, 0.5));
    gpumem_memory_info mi = info_of(b, 0);
    ASSERT_EQ(mi.limit_bytes, 2 * GiB);
    gpumem_runtime_destroy(a);
    gpumem_runtime_destroy(b);
}

/* The log callback: levels up to log_level only, a message, the calling thread. */
struct log_record {
    pthread_t caller;
    int max_level;
    int calls, bad_level, bad_thread, bad_message;
};

static void log_fn(void *user, int level, const char *message)
{
    struct log_record *r = user;
    r->calls++;
    if (level < GPUMEM_LOG_ERROR || level > r->max_level)
        r->bad_level++;
    if (!pthread_equal(pthread_self(), r->caller))
        r->bad_thread++;
    if (message == NULL || message[0] == '\0')
        r->bad_message++;
}

static void exercise_log(int max_level, const char *devices)
{
    struct log_record r;
    memset(&r, 0, sizeof r);
    r.caller = pthread_self();
    r.max_level = max_level;
    gpumem_options o;
    ASSERT_OK(gpumem_options_init(&o));
    o.backend = GPUMEM_BACKEND_SIM;
    o.flags = GPUMEM_OPTIONS_IGNORE_ENVIRONMENT;
    o.sim_devices = devices;
    o.log = log_fn;
    o.log_user_data = &r;
    o.log_level = max_level;
    gpumem_runtime *rt = NULL;
    ASSERT_OK(gpumem_runtime_create(&o, &rt));
    if (!rt)
        return;
    ASSERT_OK(gpumem_set_memory_growth(rt, 1, true));
    ASSERT_STATUS(gpumem_set_memory_fraction(rt, 0, 2.0), GPUMEM_ERR_INVALID_ARGUMENT);
    void *p = NULL, *x = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, 4096, &p));
    ASSERT_OK(gpumem_malloc(rt, 1, 4096, &x));
    ASSERT_STATUS(gpumem_malloc(rt, 0, (size_t)(64 * GiB), &x), GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_STATUS(gpumem_free(rt, (char *)p + 256), GPUMEM_ERR_INVALID_POINTER);
    ASSERT_OK(gpumem_free(rt, p));
    ASSERT_OK(gpumem_release_unused(rt, -1, NULL));
    gpumem_runtime_destroy(rt);
    ASSERT_EQ(r.bad_level, 0);
    ASSERT_EQ(r.bad_thread, 0);
    ASSERT_EQ(r.bad_message, 0);
}

TEST(log_callback)
{
    exercise_log(GPUMEM_LOG_DEBUG, "LOG-DEBUG:1GiB,LOG-DEBUG2:1GiB");
    exercise_log(GPUMEM_LOG_WARNING, "LOG-WARN:1GiB,LOG-WARN2:1GiB");
    exercise_log(GPUMEM_LOG_ERROR, "LOG-ERROR:1GiB,LOG-ERROR2:1GiB");
}

/* A callback that calls gpumem for every message: the messages logged with a lock
 * held (initialization's, a growth's, a region given back before an out-of-memory)
 * reach it once the lock is let go, and its calls, one of them failing, leave the
 * logged call's own result and last error as they were. */
struct reentry {
    gpumem_runtime *rt;
    int messages, levels[GPUMEM_LOG_DEBUG + 1], info_failed;
};

static void reentering_log(void *user_data, int level, const char *message)
{
    struct reentry *r = user_data;
    (void)message;
    r->messages++;
    if (level >= 0 && level <= GPUMEM_LOG_DEBUG)
        r->levels[level]++;
    if (!r->rt)
        return;
    gpumem_memory_info mi = GPUMEM_STRUCT_INIT(gpumem_memory_info);
    if (gpumem_get_memory_info(r->rt, 0, &mi) != GPUMEM_OK)
        r->info_failed++;
    void *p = NULL;
    (void)gpumem_malloc(r->rt, 0, 256, NULL); /* fails: ptr NULL */
    (void)p;
}

TEST(a_log_callback_may_call_gpumem)
{
    struct reentry r;
    memset(&r, 0, sizeof r);
    r.rt = sim_runtime_logged("LOG-REENTRY:1GiB", reentering_log, &r, GPUMEM_LOG_DEBUG);
    if (!r.rt)
        return;
    gpumem_logical_device_config limit = GPUMEM_LOGICAL_DEVICE_LIMIT(64 * MiB);
    ASSERT_OK(gpumem_set_logical_device_configuration(r.rt, 0, &limit, 1));
    ASSERT_OK(gpumem_set_memory_growth(r.rt, 0, true));
    void *a = NULL, *b = NULL, *c = NULL, *d = NULL;
    ASSERT_OK(gpumem_malloc(r.rt, 0, 30 * MiB, &a)); /* initializes, then grows */
    ASSERT_OK(gpumem_malloc(r.rt, 0, 30 * MiB, &b));
    ASSERT_OK(gpumem_free(r.rt, a));
    ASSERT_OK(gpumem_malloc(r.rt, 0, 32 * MiB, &c)); /* gives a's region back first */
    ASSERT_OK(gpumem_free(r.rt, b));
    ASSERT_STATUS(gpumem_malloc(r.rt, 0, 60 * MiB, &d), GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_CONTAINS(gpumem_last_error(),
                    "gpumem_malloc(/device:GPU:0, 60.00 MiB): out of memory");
    int before = r.messages;
    ASSERT_OK(gpumem_free(r.rt, c));
    uint64_t released = 0;
    ASSERT_OK(gpumem_release_unused(r.rt, 0, &released));
    ASSERT_EQ(released, 32 * MiB);
    ASSERT_TRUE(r.messages > before);
    gpumem_runtime *rt = r.rt;
    r.rt = NULL; /* no calls into a runtime being destroyed */
    gpumem_runtime_destroy(rt);
    ASSERT_TRUE(r.levels[GPUMEM_LOG_INFO] >= 2);  /* the budget, the release */
    ASSERT_TRUE(r.levels[GPUMEM_LOG_DEBUG] >= 5); /* 3 regions reserved, 2 given back */
    ASSERT_EQ(r.info_failed, 0);
}

/* An allocator holds a logical index: taken before a configuration change, it
 * allocates on whatever that index names once the runtime initializes (here GPU 0's
 * second half, where it named GPU 1), or fails when the index is gone. */
TEST(an_allocator_taken_before_a_configuration_change_follows_its_index)
{
    gpumem_runtime *rt = sim_runtime("ALLOC-IDX:1GiB,ALLOC-IDX2:2GiB");
    if (!rt)
        return;
    gpumem_allocator on1, on2;
    ASSERT_OK(gpumem_get_allocator(rt, 1, &on1)); /* GPU 1, as configured now */
    ASSERT_EQ(gpumem_get_allocator(rt, 2, &on2), GPUMEM_ERR_NO_SUCH_DEVICE);
    gpumem_logical_device_config halves[2] = {GPUMEM_LOGICAL_DEVICE_LIMIT(256u << 20),
                                              {.memory_limit_bytes = 256u << 20}};
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, halves, 2));
    ASSERT_OK(gpumem_get_allocator(rt, 2, &on2));
    int visible[] = {0};
    ASSERT_OK(gpumem_set_visible_devices(rt, visible, 1)); /* 2 is gone again */
    void *p = NULL;
    ASSERT_OK(on1.allocate(&on1, 1 << 20, &p));
    gpumem_logical_device devs[2] = {GPUMEM_STRUCT_INIT(gpumem_logical_device)};
    size_t n = 0;
    ASSERT_OK(gpumem_list_logical_devices(rt, devs, 2, &n));
    ASSERT_EQ(n, 2);
    ASSERT_EQ(devs[1].physical_index, 0);
    gpumem_memory_info info = GPUMEM_STRUCT_INIT(gpumem_memory_info);
    ASSERT_OK(gpumem_get_memory_info(rt, 1, &info));
    ASSERT_EQ(info.current_bytes, 1u << 20);
    ASSERT_EQ(info.limit_bytes, 256u << 20);
    void *q = NULL;
    ASSERT_EQ(on2.allocate(&on2, 1 << 20, &q), GPUMEM_ERR_NO_SUCH_DEVICE);
    ASSERT_CONTAINS(gpumem_last_error(), "(/device:GPU:2): no such logical device");
    ASSERT_OK(on1.deallocate(&on1, p));
    gpumem_runtime_destroy(rt);
}

int main(void)
{
    RUN(default_runtime);
    RUN(version);
    RUN(options_init_defaults);
    RUN(physical_devices_two_call);
    RUN(sim_device_sizes_and_units);
    RUN(logical_devices_two_call);
    RUN(visible_devices_two_call);
    RUN(logical_configuration_two_call);
    RUN(configuration_does_not_initialize);
    RUN(configuration_is_applied_at_initialize);
    RUN(explicit_initialize_idempotent);
    RUN(implicit_init_by_list_logical_devices);
    RUN(implicit_init_by_malloc);
    RUN(implicit_init_by_get_memory_info);
    RUN(explicit_init_named_in_message);
    RUN(first_initializer_is_named);
    RUN(configuration_after_initialization);
    RUN(logical_numbering_across_visible_gpus);
    RUN(malloc_alignment_and_host_access);
    RUN(one_hundred_bytes_count_256);
    RUN(runtimes_are_independent);
    RUN(log_callback);
    RUN(a_log_callback_may_call_gpumem);
    RUN(an_allocator_taken_before_a_configuration_change_follows_its_index);
    HARNESS_EXIT();
}
