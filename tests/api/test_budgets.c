/* Public-API tests of budgets: per-GPU fractions, fraction -1, limit vs fraction
 * vs free memory, several logical devices per GPU, uncapped logical devices
 * sharing the rest, the headroom table and its overrides, visibility.
 * Written from DESIGN.md and include/gpumem.h only. */
#include "gpumem.h"
#include "harness.h"
#include "api_util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Checks the logical devices' budgets, both in gpumem_logical_device and in
 * the memory info, and that greedy pools reserved them. */
static void expect_budgets(gpumem_runtime *rt, const uint64_t *want, size_t n)
{
    gpumem_logical_device l[16] = {GPUMEM_STRUCT_INIT(gpumem_logical_device)};
    size_t count = 0;
    ASSERT_OK(gpumem_list_logical_devices(rt, l, 16, &count));
    ASSERT_EQ(count, n);
    for (size_t i = 0; i < n && i < count; i++) {
        if (l[i].memory_limit_bytes != want[i])
            HARNESS_FAIL("logical %zu: memory_limit_bytes %" PRIu64 ", expected %" PRIu64
                         " (%" PRId64 " MiB off)",
                         i, l[i].memory_limit_bytes, want[i],
                         ((int64_t)l[i].memory_limit_bytes - (int64_t)want[i]) /
                             (int64_t)MiB);
        gpumem_memory_info mi = info_of(rt, (int)i);
        ASSERT_EQ(mi.limit_bytes, want[i]);
        ASSERT_EQ(mi.reserved_bytes, l[i].memory_growth ? 0 : want[i]);
    }
}

/* One GPU, default configuration: its budget. */
static uint64_t default_budget(const char *devices)
{
    gpumem_runtime *rt = sim_runtime(devices);
    if (!rt)
        return 0;
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true)); /* reserve nothing */
    uint64_t b = info_of(rt, 0).limit_bytes;
    gpumem_runtime_destroy(rt);
    return b;
}

/* ---------------------------------------------------------- fractions -- */

TEST(fraction_per_gpu)
{
    gpumem_runtime *rt = sim_runtime("FRAC-8:8GiB,FRAC-24:24GiB");
    if (!rt)
        return;
    ASSERT_OK(gpumem_set_memory_fraction(rt, 0, 0.25));
    ASSERT_OK(gpumem_set_memory_fraction(rt, 1, 0.5));
    double f0 = 0, f1 = 0;
    ASSERT_OK(gpumem_get_memory_fraction(rt, 0, &f0));
    ASSERT_OK(gpumem_get_memory_fraction(rt, 1, &f1));
    ASSERT_TRUE(f0 == 0.25);
    ASSERT_TRUE(f1 == 0.5);
    const uint64_t want[2] = {2 * GiB, 12 * GiB};
    expect_budgets(rt, want, 2);
    /* The budget is usable and is the cap. */
    void *p = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, (size_t)(2 * GiB), &p));
    void *q = (void *)&p;
    ASSERT_STATUS(gpumem_malloc(rt, 0, 256, &q), GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_OK(gpumem_free(rt, p));
    gpumem_runtime_destroy(rt);
}

TEST(fraction_every_gpu)
{
    gpumem_runtime *rt = sim_runtime("FRALL-8:8GiB,FRALL-24:24GiB");
    if (!rt)
        return;
    ASSERT_OK(gpumem_set_memory_fraction(rt, -1, 0.25));
    double f = 0;
    ASSERT_OK(gpumem_get_memory_fraction(rt, 0, &f));
    ASSERT_TRUE(f == 0.25);
    ASSERT_OK(gpumem_get_memory_fraction(rt, 1, &f));
    ASSERT_TRUE(f == 0.25);
    /* A per-GPU setting afterwards overrides GPU 1 only. */
    ASSERT_OK(gpumem_set_memory_fraction(rt, 1, 0.125));
    ASSERT_OK(gpumem_get_memory_fraction(rt, 0, &f));
    ASSERT_TRUE(f == 0.25);
    ASSERT_OK(gpumem_set_memory_growth(rt, 1, true));
    const uint64_t want[2] = {2 * GiB, 3 * GiB};
    expect_budgets(rt, want, 2);
    gpumem_runtime_destroy(rt);
}

TEST(fraction_zero_clears)
{
    gpumem_runtime *rt = sim_runtime("FRZERO:8GiB");
    if (!rt)
        return;
    ASSERT_OK(gpumem_set_memory_fraction(rt, 0, 0.5));
    ASSERT_OK(gpumem_set_memory_fraction(rt, 0, 0.0));
    double f = 1;
    ASSERT_OK(gpumem_get_memory_fraction(rt, 0, &f));
    ASSERT_TRUE(f == 0.0);
    ASSERT_OK(gpumem_set_memory_fraction(rt, -1, 0.5));
    ASSERT_OK(gpumem_set_memory_fraction(rt, -1, 0.0));
    const uint64_t want[1] = {8 * GiB - 1536 * MiB}; /* the default again */
    expect_budgets(rt, want, 1);
    gpumem_runtime_destroy(rt);
}

/* With a fraction, no headroom is kept back: 1.0 is the whole card. */
TEST(fraction_one_is_whole_gpu)
{
    gpumem_runtime *rt = sim_runtime("FRONE:4GiB");
    if (!rt)
        return;
    ASSERT_OK(gpumem_set_memory_fraction(rt, 0, 1.0));
    const uint64_t want[1] = {4 * GiB};
    expect_budgets(rt, want, 1);
    gpumem_runtime_destroy(rt);
}

/* The fraction is of the total memory, not of the free memory. */
TEST(fraction_of_total_not_free)
{
    const char *dev = "FRTOTAL:16GiB";
    gpumem_runtime *hog = sim_runtime(dev);
    if (!hog)
        return;
    gpumem_logical_device_config cfg = GPUMEM_LOGICAL_DEVICE_LIMIT(4 * GiB);
    ASSERT_OK(gpumem_set_logical_device_configuration(hog, 0, &cfg, 1));
    ASSERT_OK(gpumem_initialize(hog)); /* 12 GiB left free */
    gpumem_runtime *rt = sim_runtime(dev);
    if (rt) {
        ASSERT_OK(gpumem_set_memory_fraction(rt, 0, 0.5));
        const uint64_t want[1] = {8 * GiB}; /* 0.5 x 16 GiB, not 0.5 x 12 GiB */
        expect_budgets(rt, want, 1);
        gpumem_runtime_destroy(rt);
    }
    gpumem_runtime_destroy(hog);
}

/* ----------------------------------------------------- smallest wins -- */

TEST(limit_fraction_free_smallest_wins)
{
    const char *dev = "SMALLEST:16GiB";
    gpumem_runtime *a = sim_runtime(dev);
    if (!a)
        return;
    gpumem_logical_device_config a_cfg = GPUMEM_LOGICAL_DEVICE_LIMIT(10 * GiB);
    ASSERT_OK(gpumem_set_logical_device_configuration(a, 0, &a_cfg, 1));
    ASSERT_OK(gpumem_initialize(a));
    ASSERT_EQ(info_of(a, 0).reserved_bytes, 10 * GiB); /* 6 GiB left free */

    /* Free wins: limit 7 GiB, fraction 0.5 (8 GiB), 6 GiB free. */
    gpumem_runtime *b = sim_runtime(dev);
    if (b) {
        gpumem_logical_device_config cfg = GPUMEM_LOGICAL_DEVICE_LIMIT(7 * GiB);
        ASSERT_OK(gpumem_set_logical_device_configuration(b, 0, &cfg, 1));
        ASSERT_OK(gpumem_set_memory_fraction(b, 0, 0.5));
        const uint64_t want[1] = {6 * GiB};
        expect_budgets(b, want, 1);
        gpumem_runtime_destroy(b);
    }
    /* Limit wins: limit 3 GiB, fraction 0.5 (8 GiB), 6 GiB free. */
    gpumem_runtime *c = sim_runtime(dev);
    if (c) {
        gpumem_logical_device_config cfg = GPUMEM_LOGICAL_DEVICE_LIMIT(3 * GiB);
        ASSERT_OK(gpumem_set_logical_device_configuration(c, 0, &cfg, 1));
        ASSERT_OK(gpumem_set_memory_fraction(c, 0, 0.5));
        const uint64_t want[1] = {3 * GiB};
        expect_budgets(c, want, 1);
        gpumem_runtime_destroy(c);
    }
    /* Fraction wins: limit 7 GiB, fraction 0.25 (4 GiB), 6 GiB free. */
    gpumem_runtime *d = sim_runtime(dev);
    if (d) {
        gpumem_logical_device_config cfg = GPUMEM_LOGICAL_DEVICE_LIMIT(7 * GiB);
        ASSERT_OK(gpumem_set_logical_device_configuration(d, 0, &cfg, 1));
        ASSERT_OK(gpumem_set_memory_fraction(d, 0, 0.25));
        const uint64_t want[1] = {4 * GiB};
        expect_budgets(d, want, 1);
        gpumem_runtime_destroy(d);
    }
    /* Free wins over a fraction alone: 0.5 (8 GiB) with 6 GiB free. */
    gpumem_runtime *e = sim_runtime(dev);
    if (e) {
        ASSERT_OK(gpumem_set_memory_fraction(e, 0, 0.5));
        const uint64_t want[1] = {6 * GiB};
        expect_budgets(e, want, 1);
        gpumem_runtime_destroy(e);
    }
    /* Free wins over a limit alone. */
    gpumem_runtime *f = sim_runtime(dev);
    if (f) {
        gpumem_logical_device_config cfg = GPUMEM_LOGICAL_DEVICE_LIMIT(16 * GiB);
        ASSERT_OK(gpumem_set_logical_device_configuration(f, 0, &cfg, 1));
        ASSERT_OK(gpumem_set_memory_growth(f, 0, true));
        const uint64_t want[1] = {6 * GiB};
        expect_budgets(f, want, 1);
        gpumem_runtime_destroy(f);
    }
    gpumem_runtime_destroy(a);
}

/* A limit with no other runtime around: the limit, no headroom taken off. */
TEST(limit_alone_no_headroom)
{
    gpumem_runtime *rt = sim_runtime("LIMALONE:8GiB");
    if (!rt)
        return;
    gpumem_logical_device_config cfg = GPUMEM_LOGICAL_DEVICE_LIMIT(8 * GiB);
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, &cfg, 1));
    const uint64_t want[1] = {8 * GiB};
    expect_budgets(rt, want, 1);
    gpumem_runtime_destroy(rt);
}

/* --------------------------------------------- several logical devices -- */

TEST(logical_devices_each_with_own_limit_and_pool)
{
    gpumem_runtime *rt = sim_runtime("LOGICAL-OWN:16GiB");
    if (!rt)
        return;
    gpumem_logical_device_config cfg[3] = {GPUMEM_LOGICAL_DEVICE_LIMIT(1 * GiB),
                                           GPUMEM_LOGICAL_DEVICE_LIMIT(2 * GiB),
                                           GPUMEM_LOGICAL_DEVICE_LIMIT(3 * GiB)};
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, cfg, 3));
    const uint64_t want[3] = {1 * GiB, 2 * GiB, 3 * GiB};
    expect_budgets(rt, want, 3);

    /* Fill logical 0: it is full, logical 1 and 2 are not. */
    void *p0 = NULL, *p1 = NULL, *x = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, (size_t)GiB, &p0));
    ASSERT_STATUS(gpumem_malloc(rt, 0, 256, &x), GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_OK(gpumem_malloc(rt, 1, (size_t)(2 * GiB), &p1));
    ASSERT_STATUS(gpumem_malloc(rt, 1, 256, &x), GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_OK(gpumem_malloc(rt, 2, 256, &x));

    gpumem_memory_info m0 = info_of(rt, 0), m1 = info_of(rt, 1), m2 = info_of(rt, 2);
    ASSERT_EQ(m0.current_bytes, 1 * GiB);
    ASSERT_EQ(m0.num_ooms, 1);
    ASSERT_EQ(m0.num_allocs, 1);
    ASSERT_EQ(m1.current_bytes, 2 * GiB);
    ASSERT_EQ(m1.num_ooms, 1);
    ASSERT_EQ(m2.current_bytes, 256);
    ASSERT_EQ(m2.num_ooms, 0);
    ASSERT_EQ(m2.num_allocs, 1);

    /* A pointer of logical 0 is freed through the runtime, whichever pool. */
    ASSERT_OK(gpumem_free(rt, p0));
    ASSERT_OK(gpumem_free(rt, p1));
    ASSERT_OK(gpumem_free(rt, x));
    ASSERT_EQ(info_of(rt, 0).num_frees, 1);
    ASSERT_EQ(info_of(rt, 1).num_frees, 1);
    ASSERT_EQ(info_of(rt, 2).num_frees, 1);
    ASSERT_EQ(info_of(rt, 2).current_bytes, 0);
    gpumem_runtime_destroy(rt);
}

/* Logical devices without a limit share what the others leave of the GPU's
 * budget equally. */
TEST(uncapped_logical_devices_share_equally)
{
    /* No limit at all: the GPU's budget (16 GiB - 1536 MiB) halves. */
    gpumem_runtime *rt = sim_runtime("UNCAPPED-1:16GiB");
    if (rt) {
        gpumem_logical_device_config cfg[2] = {GPUMEM_LOGICAL_DEVICE_LIMIT(0),
                                               GPUMEM_LOGICAL_DEVICE_LIMIT(0)};
        ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, cfg, 2));
        const uint64_t want[2] = {(16 * GiB - 1536 * MiB) / 2,
                                  (16 * GiB - 1536 * MiB) / 2};
        expect_budgets(rt, want, 2);
        gpumem_runtime_destroy(rt);
    }
    /* A fraction (8 GiB) with one capped device (2 GiB): 6 GiB for two. */
    rt = sim_runtime("UNCAPPED-2:16GiB");
    if (rt) {
        gpumem_logical_device_config cfg[3] = {GPUMEM_LOGICAL_DEVICE_LIMIT(2 * GiB),
                                               GPUMEM_LOGICAL_DEVICE_LIMIT(0),
                                               GPUMEM_LOGICAL_DEVICE_LIMIT(0)};
        ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, cfg, 3));
        ASSERT_OK(gpumem_set_memory_fraction(rt, 0, 0.5));
        const uint64_t want[3] = {2 * GiB, 3 * GiB, 3 * GiB};
        expect_budgets(rt, want, 3);
        gpumem_runtime_destroy(rt);
    }
    /* Four uncapped devices with growth on a 12 GiB card, fraction 1: 3 GiB each. */
    rt = sim_runtime("UNCAPPED-3:12GiB");
    if (rt) {
        gpumem_logical_device_config cfg[4] = {GPUMEM_LOGICAL_DEVICE_LIMIT(0),
                                               GPUMEM_LOGICAL_DEVICE_LIMIT(0),
                                               GPUMEM_LOGICAL_DEVICE_LIMIT(0),
                                               GPUMEM_LOGICAL_DEVICE_LIMIT(0)};
        ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, cfg, 4));
        ASSERT_OK(gpumem_set_memory_fraction(rt, 0, 1.0));
        ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
        const uint64_t want[4] = {3 * GiB, 3 * GiB, 3 * GiB, 3 * GiB};
        expect_budgets(rt, want, 4);
        gpumem_runtime_destroy(rt);
    }
}

/* ------------------------------------------------------------ headroom -- */

TEST(headroom_table)
{
    static const struct {
        const char *dev;
        uint64_t budget;
    } cases[] = {
        {"HR-CC5:8GiB:5.2", 8 * GiB - 500 * MiB}, /* up to 6: 500 MiB */
        {"HR-CC6:12GiB:6.1", 12 * GiB - 500 * MiB},
        {"HR-CC7:16GiB:7.0", 16 * GiB - 1050 * MiB}, /* 7: 1050 MiB */
        {"HR-CC75:16GiB:7.5", 16 * GiB - 1050 * MiB},
        {"HR-CC8:40GiB:8.0", 40 * GiB - 1536 * MiB}, /* 8: 1536 MiB */
        {"HR-CC86:24GiB:8.6", 24 * GiB - 1536 * MiB},
        {"HR-DEFAULT:24GiB", 24 * GiB - 1536 * MiB}, /* CC 8.0 when not given */
        {"HR-CC9:80GiB:9.0", 80 * GiB - 1800 * MiB}, /* newer: 1800 MiB */
        {"HR-CC10:80GiB:10.0", 80 * GiB - 1800 * MiB},
        {"HR-2GiB:2GiB:6.1", 2 * GiB - 500 * MiB}, /* 2 GiB free is not less than 2 GiB */
        {"HR-SMALL:1GiB:9.0", 1 * GiB - 225 * MiB}, /* under 2 GiB free: 225 MiB */
        {"HR-SMALL2:2047MiB:7.0", 2047 * MiB - 225 * MiB},
        {"HR-TINY:200MiB", 200 * MiB},  /* headroom >= free: nothing kept */
        {"HR-EQUAL:225MiB", 225 * MiB}, /* headroom == free: nothing kept */
        {"HR-JUST:226MiB", 1 * MiB},
        {"HR-BYTES:536870912B", 512 * MiB - 225 * MiB},
        {"HR-TIB:1TiB:8.0", 1024 * GiB - 1536 * MiB},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t b = default_budget(cases[i].dev);
        if (b != cases[i].budget)
            HARNESS_FAIL("%s: budget %" PRIu64 " (%" PRIu64 " MiB), expected %" PRIu64
                         " (%" PRIu64 " MiB)",
                         cases[i].dev, b, b / MiB, cases[i].budget,
                         cases[i].budget / MiB);
    }
}

/* The table applies to what is free, not to the total. */
TEST(headroom_from_free_memory)
{
    const char *dev = "HR-FREE:12GiB:9.0";
    gpumem_runtime *hog = sim_runtime(dev);
    if (!hog)
        return;
    gpumem_logical_device_config cfg = GPUMEM_LOGICAL_DEVICE_LIMIT(11 * GiB);
    ASSERT_OK(gpumem_set_logical_device_configuration(hog, 0, &cfg, 1));
    ASSERT_OK(gpumem_initialize(hog)); /* 1 GiB left free */
    ASSERT_EQ(default_budget(dev), 1 * GiB - 225 * MiB);
    gpumem_runtime_destroy(hog);
}

TEST(headroom_override_gpumem)
{
    clear_env();
    setenv("GPUMEM_MIN_SYSTEM_MEMORY_MB", "1000", 1);
    gpumem_runtime *rt = env_runtime("HR-OVR-1:12GiB:6.1,HR-OVR-2:1GiB,HR-OVR-3:512MiB");
    clear_env();
    if (!rt)
        return;
    const uint64_t want[3] = {12 * GiB - 1000 * MiB, 1 * GiB - 1000 * MiB, 512 * MiB};
    expect_budgets(rt, want, 3);
    gpumem_runtime_destroy(rt);
}

TEST(headroom_override_tensorflow)
{
    clear_env();
    setenv("TF_DEVICE_MIN_SYS_MEMORY_IN_MB", "700", 1);
    gpumem_runtime *rt = env_runtime("HR-TF:12GiB:6.1,HR-TF-2:1GiB:9.0");
    clear_env();
    if (!rt)
        return;
    const uint64_t want[2] = {12 * GiB - 700 * MiB, 1 * GiB - 700 * MiB};
    expect_budgets(rt, want, 2);
    gpumem_runtime_destroy(rt);
}

TEST(headroom_override_zero)
{
    clear_env();
    setenv("GPUMEM_MIN_SYSTEM_MEMORY_MB", "0", 1);
    gpumem_runtime *rt = env_runtime("HR-ZERO:4GiB");
    clear_env();
    if (!rt)
        return;
    const uint64_t want[1] = {4 * GiB};
    expect_budgets(rt, want, 1);
    gpumem_runtime_destroy(rt);
}

/* The environment is read once, at creation. */
TEST(environment_read_at_create)
{
    clear_env();
    gpumem_runtime *rt = env_runtime("HR-ONCE:4GiB");
    if (!rt)
        return;
    setenv("GPUMEM_MIN_SYSTEM_MEMORY_MB", "100", 1);
    setenv("GPUMEM_MEMORY_FRACTION", "0.5", 1);
    const uint64_t want[1] = {4 * GiB - 1536 * MiB};
    expect_budgets(rt, want, 1);
    clear_env();
    gpumem_runtime_destroy(rt);
}

TEST(fraction_from_environment)
{
    clear_env();
    setenv("GPUMEM_MEMORY_FRACTION", "0.25", 1);
    gpumem_runtime *rt = env_runtime("ENVFRAC-A:8GiB,ENVFRAC-B:16GiB,ENVFRAC-C:4GiB");
    clear_env();
    if (!rt)
        return;
    double f = 0;
    ASSERT_OK(gpumem_get_memory_fraction(rt, 0, &f));
    ASSERT_TRUE(f == 0.25);
    ASSERT_OK(gpumem_get_memory_fraction(rt, 1, &f));
    ASSERT_TRUE(f == 0.25);
    /* The program may still change it per GPU before initialization. */
    ASSERT_OK(gpumem_set_memory_fraction(rt, 2, 0.5));
    const uint64_t want[3] = {2 * GiB, 4 * GiB, 2 * GiB};
    expect_budgets(rt, want, 3);
    gpumem_runtime_destroy(rt);
}

/* ---------------------------------------------------------- visibility -- */

TEST(hidden_gpus_have_no_logical_devices)
{
    const char *dev = "VIS-A:4GiB,VIS-B:4GiB,VIS-C:4GiB";
    gpumem_runtime *rt = sim_runtime(dev);
    if (!rt)
        return;
    const int one = 1;
    ASSERT_OK(gpumem_set_visible_devices(rt, &one, 1));
    gpumem_logical_device l[4] = {GPUMEM_STRUCT_INIT(gpumem_logical_device)};
    size_t n = 0;
    ASSERT_OK(gpumem_list_logical_devices(rt, l, 4, &n));
    ASSERT_EQ(n, 1);
    ASSERT_EQ(l[0].physical_index, 1);
    ASSERT_STREQ(l[0].name, "/device:GPU:0");
    ASSERT_EQ(l[0].memory_limit_bytes, 4 * GiB - 1536 * MiB);
    void *p = (void *)&n;
    ASSERT_STATUS(gpumem_malloc(rt, 1, 256, &p), GPUMEM_ERR_NO_SUCH_DEVICE);
    ASSERT_TRUE(p == (void *)&n);
    /* Still listed as physical devices. */
    ASSERT_OK(gpumem_list_physical_devices(rt, NULL, 0, &n));
    ASSERT_EQ(n, 3);

    /* Hidden GPUs reserved nothing: another runtime finds them whole. */
    gpumem_runtime *rt2 = sim_runtime(dev);
    if (rt2) {
        const uint64_t want[3] = {4 * GiB - 1536 * MiB, 1536 * MiB - 225 * MiB,
                                  4 * GiB - 1536 * MiB};
        gpumem_logical_device l2[4] = {GPUMEM_STRUCT_INIT(gpumem_logical_device)};
        ASSERT_OK(gpumem_set_memory_growth(rt2, 0, true));
        ASSERT_OK(gpumem_set_memory_growth(rt2, 1, true));
        ASSERT_OK(gpumem_set_memory_growth(rt2, 2, true));
        ASSERT_OK(gpumem_list_logical_devices(rt2, l2, 4, &n));
        ASSERT_EQ(n, 3);
        for (size_t i = 0; i < 3 && i < n; i++)
            ASSERT_EQ(l2[i].memory_limit_bytes, want[i]);
        gpumem_runtime_destroy(rt2);
    }
    gpumem_runtime_destroy(rt);
}

TEST(no_visible_gpus)
{
    gpumem_runtime *rt = sim_runtime("VIS-NONE-A:4GiB,VIS-NONE-B:4GiB");
    if (!rt)
        return;
    ASSERT_OK(gpumem_set_visible_devices(rt, NULL, 0));
    size_t n = 99;
    ASSERT_OK(gpumem_get_visible_devices(rt, NULL, 0, &n));
    ASSERT_EQ(n, 0);
    ASSERT_OK(gpumem_list_logical_devices(rt, NULL, 0, &n));
    ASSERT_EQ(n, 0);
    bool init = false;
    ASSERT_OK(gpumem_is_initialized(rt, &init));
    ASSERT_TRUE(init);
    void *p = NULL;
    ASSERT_STATUS(gpumem_malloc(rt, 0, 256, &p), GPUMEM_ERR_NO_SUCH_DEVICE);
    gpumem_memory_info mi = GPUMEM_STRUCT_INIT(gpumem_memory_info);
    ASSERT_STATUS(gpumem_get_memory_info(rt, 0, &mi), GPUMEM_ERR_NO_SUCH_DEVICE);
    uint64_t released = 5;
    ASSERT_OK(gpumem_release_unused(rt, -1, &released));
    ASSERT_EQ(released, 0);
    ASSERT_OK(gpumem_reset_memory_stats(rt, -1));
    ASSERT_OK(gpumem_list_physical_devices(rt, NULL, 0, &n));
    ASSERT_EQ(n, 2);
    /* The empty set is the setting in force. */
    ASSERT_OK(gpumem_set_visible_devices(rt, NULL, 0));
    gpumem_runtime_destroy(rt);
}

TEST(visibility_rejects_duplicates_and_keeps_previous)
{
    gpumem_runtime *rt = sim_runtime("VIS-DUP-A:4GiB,VIS-DUP-B:4GiB,VIS-DUP-C:4GiB");
    if (!rt)
        return;
    const int first[2] = {0, 2};
    ASSERT_OK(gpumem_set_visible_devices(rt, first, 2));
    const int dup[3] = {1, 1, 2};
    ASSERT_STATUS(gpumem_set_visible_devices(rt, dup, 3), GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_TRUE(gpumem_last_error()[0] != '\0');
    const int bad[2] = {1, 3};
    ASSERT_STATUS(gpumem_set_visible_devices(rt, bad, 2), GPUMEM_ERR_NO_SUCH_DEVICE);
    int v[3];
    size_t n = 0;
    ASSERT_OK(gpumem_get_visible_devices(rt, v, 3, &n));
    ASSERT_EQ(n, 2);
    ASSERT_EQ(v[0], 0);
    ASSERT_EQ(v[1], 2);
    gpumem_logical_device l[3] = {GPUMEM_STRUCT_INIT(gpumem_logical_device)};
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    ASSERT_OK(gpumem_set_memory_growth(rt, 2, true));
    ASSERT_OK(gpumem_list_logical_devices(rt, l, 3, &n));
    ASSERT_EQ(n, 2);
    ASSERT_EQ(l[0].physical_index, 0);
    ASSERT_EQ(l[1].physical_index, 2);
    ASSERT_STREQ(l[1].name, "/device:GPU:1");
    gpumem_runtime_destroy(rt);
}

/* Logical devices of several GPUs, with limits, fractions and defaults. */
TEST(mixed_machine)
{
    gpumem_runtime *rt = sim_runtime("MIX-8:8GiB:7.0,MIX-24:24GiB:8.6,MIX-12:12GiB:6.1");
    if (!rt)
        return;
    gpumem_logical_device_config c1[2] = {GPUMEM_LOGICAL_DEVICE_LIMIT(4 * GiB),
                                          GPUMEM_LOGICAL_DEVICE_LIMIT(6 * GiB)};
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 1, c1, 2));
    ASSERT_OK(gpumem_set_memory_fraction(rt, 2, 0.5));
    ASSERT_OK(gpumem_set_memory_growth(rt, 1, true));
    const uint64_t want[4] = {8 * GiB - 1050 * MiB, 4 * GiB, 6 * GiB, 6 * GiB};
    expect_budgets(rt, want, 4);
    gpumem_runtime_destroy(rt);
}

int main(void)
{
    clear_env();
    RUN(fraction_per_gpu);
    RUN(fraction_every_gpu);
    RUN(fraction_zero_clears);
    RUN(fraction_one_is_whole_gpu);
    RUN(fraction_of_total_not_free);
    RUN(limit_fraction_free_smallest_wins);
    RUN(limit_alone_no_headroom);
    RUN(logical_devices_each_with_own_limit_and_pool);
    RUN(uncapped_logical_devices_share_equally);
    RUN(headroom_table);
    RUN(headroom_from_free_memory);
    RUN(headroom_override_gpumem);
    RUN(headroom_override_tensorflow);
    RUN(headroom_override_zero);
    RUN(environment_read_at_create);
    RUN(fraction_from_environment);
    RUN(hidden_gpus_have_no_logical_devices);
    RUN(no_visible_gpus);
    RUN(visibility_rejects_duplicates_and_keeps_previous);
    RUN(mixed_machine);
    HARNESS_EXIT();
}
