/* Public-API tests of several runtimes sharing one (simulated) GPU, as three
 * users share a 12 GB card: greedy default, growth, hard limits, destruction
 * giving memory back, separate device lists. Written from DESIGN.md and
 * include/gpumem.h only. */
#include "gpumem.h"
#include "harness.h"
#include "api_util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Touches the first and last byte of a big buffer (host memory on sim). */
static void touch(void *p, size_t size, unsigned char v)
{
    unsigned char *b = p;
    b[0] = v;
    b[size / 2] = v;
    b[size - 1] = v;
}

static bool touched(const void *p, size_t size, unsigned char v)
{
    const unsigned char *b = p;
    return b[0] == v && b[size / 2] == v && b[size - 1] == v;
}

#define TITAN "TITAN X:12GiB:6.1"

/* The field report: three users of one 12 GB card, TensorFlow's default. */
TEST(greedy_first_takes_almost_all)
{
    gpumem_runtime *a = sim_runtime(TITAN);
    if (!a)
        return;
    ASSERT_OK(gpumem_initialize(a));
    gpumem_memory_info mi = info_of(a, 0);
    ASSERT_EQ(mi.limit_bytes, 12 * GiB - 500 * MiB); /* CC 6.1: 500 MiB headroom */
    ASSERT_EQ(mi.reserved_bytes, 12 * GiB - 500 * MiB);
    gpumem_logical_device l = GPUMEM_STRUCT_INIT(gpumem_logical_device);
    size_t n = 0;
    ASSERT_OK(gpumem_list_logical_devices(a, &l, 1, &n));
    ASSERT_EQ(l.memory_limit_bytes, 12 * GiB - 500 * MiB);
    ASSERT_FALSE(l.memory_growth);

    /* The first user can use its budget. */
    void *big = NULL;
    ASSERT_OK(gpumem_malloc(a, 0, (size_t)(11 * GiB), &big));
    if (big)
        touch(big, (size_t)(11 * GiB), 0xA5);

    /* The second user finds 500 MiB free: less than 2 GiB, so 225 MiB headroom. */
    gpumem_runtime *b = sim_runtime(TITAN);
    if (b) {
        gpumem_memory_info mb = info_of(b, 0);
        ASSERT_EQ(mb.limit_bytes, 500 * MiB - 225 * MiB);
        ASSERT_EQ(mb.reserved_bytes, 500 * MiB - 225 * MiB);
        void *p = (void *)&mb;
        ASSERT_STATUS(gpumem_malloc(b, 0, (size_t)(3 * GiB), &p),
                      GPUMEM_ERR_OUT_OF_MEMORY);
        ASSERT_TRUE(p == (void *)&mb);
        const char *msg = gpumem_last_error();
        ASSERT_TRUE(msg[0] != '\0');
        if (strpbrk(msg, "0123456789") == NULL)
            HARNESS_FAIL("the OOM message gives no numbers: \"%s\"", msg);
        mb = info_of(b, 0);
        ASSERT_EQ(mb.num_ooms, 1);
        ASSERT_EQ(mb.current_bytes, 0);
        /* What it has, it can use. */
        ASSERT_OK(gpumem_malloc(b, 0, 100 * MiB, &p));
        ASSERT_OK(gpumem_free(b, p));
        gpumem_runtime_destroy(b);
    }
    if (big)
        ASSERT_TRUE(touched(big, (size_t)(11 * GiB), 0xA5));
    ASSERT_OK(gpumem_free(a, big));
    gpumem_runtime_destroy(a);
}

/* With growth, the three users each hold 3 GiB. */
TEST(growth_lets_three_share)
{
    gpumem_runtime *rt[3];
    void *p[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++) {
        rt[i] = sim_runtime("TITAN X (growth):12GiB:6.1");
        if (!rt[i]) {
            for (int j = 0; j < i; j++)
                gpumem_runtime_destroy(rt[j]);
            return;
        }
        ASSERT_OK(gpumem_set_memory_growth(rt[i], 0, true));
        ASSERT_OK(gpumem_initialize(rt[i]));
        gpumem_memory_info mi = info_of(rt[i], 0);
        ASSERT_EQ(mi.reserved_bytes, 0);
    }
    for (int i = 0; i < 3; i++) {
        ASSERT_OK(gpumem_malloc(rt[i], 0, (size_t)(3 * GiB), &p[i]));
        if (p[i])
            touch(p[i], (size_t)(3 * GiB), (unsigned char)(0x10 + i));
        gpumem_memory_info mi = info_of(rt[i], 0);
        ASSERT_EQ(mi.current_bytes, 3 * GiB);
        ASSERT_TRUE(mi.reserved_bytes >= 3 * GiB);
        ASSERT_LE(mi.reserved_bytes, mi.limit_bytes);
    }
    /* Distinct memory: each user's bytes are its own. */
    for (int i = 0; i < 3; i++) {
        if (p[i])
            ASSERT_TRUE(touched(p[i], (size_t)(3 * GiB), (unsigned char)(0x10 + i)));
        for (int j = 0; j < i; j++) {
            uintptr_t a0 = (uintptr_t)p[i], b0 = (uintptr_t)p[j];
            if (a0 < b0 + 3 * GiB && b0 < a0 + 3 * GiB)
                HARNESS_FAIL("users %d and %d overlap", i, j);
        }
    }
    for (int i = 0; i < 3; i++) {
        ASSERT_OK(gpumem_free(rt[i], p[i]));
        gpumem_runtime_destroy(rt[i]);
    }
}

/* A hard per-process cap (4 GiB): all three run; beyond the cap fails. */
TEST(limit_lets_three_share)
{
    gpumem_runtime *rt[3];
    for (int i = 0; i < 3; i++) {
        rt[i] = sim_runtime("TITAN X (limit):12GiB:6.1");
        if (!rt[i]) {
            for (int j = 0; j < i; j++)
                gpumem_runtime_destroy(rt[j]);
            return;
        }
        gpumem_logical_device_config cfg = GPUMEM_LOGICAL_DEVICE_LIMIT(4 * GiB);
        ASSERT_OK(gpumem_set_logical_device_configuration(rt[i], 0, &cfg, 1));
        ASSERT_OK(gpumem_initialize(rt[i]));
        gpumem_memory_info mi = info_of(rt[i], 0);
        ASSERT_EQ(mi.limit_bytes, 4 * GiB);
        ASSERT_EQ(mi.reserved_bytes, 4 * GiB); /* greedy within the cap */
    }
    void *p[3][4];
    memset(p, 0, sizeof p);
    for (int i = 0; i < 3; i++) {
        for (int k = 0; k < 4; k++) {
            ASSERT_OK(gpumem_malloc(rt[i], 0, (size_t)GiB, &p[i][k]));
            if (p[i][k])
                touch(p[i][k], (size_t)GiB, (unsigned char)(4 * i + k));
        }
        void *extra = (void *)&p;
        ASSERT_STATUS(gpumem_malloc(rt[i], 0, (size_t)GiB, &extra),
                      GPUMEM_ERR_OUT_OF_MEMORY);
        ASSERT_TRUE(extra == (void *)&p);
        ASSERT_TRUE(gpumem_last_error()[0] != '\0');
        gpumem_memory_info mi = info_of(rt[i], 0);
        ASSERT_EQ(mi.current_bytes, 4 * GiB);
        ASSERT_EQ(mi.reserved_bytes, 4 * GiB);
        ASSERT_EQ(mi.num_ooms, 1);
        ASSERT_EQ(mi.num_allocs, 4);
    }
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 4; k++) {
            if (p[i][k])
                ASSERT_TRUE(touched(p[i][k], (size_t)GiB, (unsigned char)(4 * i + k)));
            ASSERT_OK(gpumem_free(rt[i], p[i][k]));
        }
    for (int i = 0; i < 3; i++)
        gpumem_runtime_destroy(rt[i]);
}

/* A fraction (the 0.333 of the field report, here 0.25): four users fit. */
TEST(fraction_lets_four_share)
{
    gpumem_runtime *rt[4];
    for (int i = 0; i < 4; i++) {
        rt[i] = sim_runtime("TITAN X (fraction):12GiB:6.1");
        if (!rt[i]) {
            for (int j = 0; j < i; j++)
                gpumem_runtime_destroy(rt[j]);
            return;
        }
        ASSERT_OK(gpumem_set_memory_fraction(rt[i], 0, 0.25));
        gpumem_memory_info mi = info_of(rt[i], 0);
        ASSERT_EQ(mi.limit_bytes, 3 * GiB);
        ASSERT_EQ(mi.reserved_bytes, 3 * GiB);
    }
    for (int i = 0; i < 4; i++) {
        void *p = NULL;
        ASSERT_OK(gpumem_malloc(rt[i], 0, (size_t)(3 * GiB), &p));
        ASSERT_OK(gpumem_free(rt[i], p));
    }
    for (int i = 0; i < 4; i++)
        gpumem_runtime_destroy(rt[i]);
}

/* Destroying a runtime gives its memory back to the GPU. */
TEST(destroy_gives_memory_back)
{
    const char *dev = "TITAN X (destroy):12GiB:6.1";
    gpumem_runtime *a = sim_runtime(dev);
    if (!a)
        return;
    ASSERT_OK(gpumem_initialize(a));
    ASSERT_EQ(info_of(a, 0).reserved_bytes, 12 * GiB - 500 * MiB);
    void *pa = NULL;
    ASSERT_OK(gpumem_malloc(a, 0, (size_t)GiB, &pa)); /* destroyed with a live pointer */

    gpumem_runtime *b = sim_runtime(dev);
    if (!b) {
        gpumem_runtime_destroy(a);
        return;
    }
    ASSERT_EQ(info_of(b, 0).limit_bytes, 275 * MiB);
    gpumem_runtime_destroy(a);

    /* b's budget was fixed at its initialization. */
    void *p = NULL;
    ASSERT_STATUS(gpumem_malloc(b, 0, (size_t)(3 * GiB), &p), GPUMEM_ERR_OUT_OF_MEMORY);

    /* A newcomer finds everything but b's 275 MiB free. */
    gpumem_runtime *c = sim_runtime(dev);
    if (c) {
        gpumem_memory_info mc = info_of(c, 0);
        ASSERT_EQ(mc.limit_bytes, 12 * GiB - 275 * MiB - 500 * MiB);
        ASSERT_EQ(mc.reserved_bytes, mc.limit_bytes);
        ASSERT_OK(gpumem_malloc(c, 0, (size_t)(3 * GiB), &p));
        if (p)
            touch(p, (size_t)(3 * GiB), 0x3C);
        ASSERT_OK(gpumem_free(c, p));
        gpumem_runtime_destroy(c);
    }
    gpumem_runtime_destroy(b);

    /* All gone: the whole GPU is free again. */
    gpumem_runtime *d = sim_runtime(dev);
    if (d) {
        ASSERT_EQ(info_of(d, 0).limit_bytes, 12 * GiB - 500 * MiB);
        gpumem_runtime_destroy(d);
    }
}

/* A growth runtime's memory comes back on destroy too. */
TEST(destroy_gives_grown_memory_back)
{
    const char *dev = "GROWN-BACK:8GiB";
    gpumem_runtime *a = sim_runtime(dev);
    if (!a)
        return;
    ASSERT_OK(gpumem_set_memory_growth(a, 0, true));
    void *p = NULL;
    ASSERT_OK(gpumem_malloc(a, 0, (size_t)(5 * GiB), &p));
    gpumem_runtime *b = sim_runtime(dev);
    if (b) {
        gpumem_logical_device_config cfg = GPUMEM_LOGICAL_DEVICE_LIMIT(8 * GiB);
        ASSERT_OK(gpumem_set_logical_device_configuration(b, 0, &cfg, 1));
        uint64_t rb = info_of(b, 0).limit_bytes;
        ASSERT_LE(rb, 3 * GiB); /* at most what a left free */
        ASSERT_TRUE(rb > 0);
        gpumem_runtime_destroy(b);
    }
    gpumem_runtime_destroy(a);
    gpumem_runtime *c = sim_runtime(dev);
    if (c) {
        gpumem_logical_device_config cfg = GPUMEM_LOGICAL_DEVICE_LIMIT(8 * GiB);
        ASSERT_OK(gpumem_set_logical_device_configuration(c, 0, &cfg, 1));
        ASSERT_EQ(info_of(c, 0).limit_bytes, 8 * GiB);
        gpumem_runtime_destroy(c);
    }
}

/* Different device lists are different hardware. */
TEST(different_device_lists_do_not_share)
{
    gpumem_runtime *a = sim_runtime("TITAN X (one):12GiB:6.1");
    gpumem_runtime *b = sim_runtime("TITAN X (two):12GiB:6.1");
    if (a && b) {
        ASSERT_OK(gpumem_initialize(a));
        ASSERT_OK(gpumem_initialize(b));
        ASSERT_EQ(info_of(a, 0).limit_bytes, 12 * GiB - 500 * MiB);
        ASSERT_EQ(info_of(b, 0).limit_bytes, 12 * GiB - 500 * MiB);
        ASSERT_EQ(info_of(b, 0).reserved_bytes, 12 * GiB - 500 * MiB);
    }
    gpumem_runtime_destroy(a);
    gpumem_runtime_destroy(b);
}

/* The sharing is per GPU: a runtime that sees only GPU 0 leaves GPU 1 whole. */
TEST(sharing_is_per_gpu)
{
    const char *dev = "SHARE-A:8GiB,SHARE-B:8GiB";
    gpumem_runtime *a = sim_runtime(dev);
    if (!a)
        return;
    const int only0 = 0;
    ASSERT_OK(gpumem_set_visible_devices(a, &only0, 1));
    ASSERT_OK(gpumem_initialize(a));
    ASSERT_EQ(info_of(a, 0).reserved_bytes, 8 * GiB - 1536 * MiB);
    gpumem_runtime *b = sim_runtime(dev);
    if (b) {
        gpumem_logical_device l[2] = {GPUMEM_STRUCT_INIT(gpumem_logical_device)};
        size_t n = 0;
        ASSERT_OK(gpumem_list_logical_devices(b, l, 2, &n));
        ASSERT_EQ(n, 2);
        ASSERT_EQ(l[0].memory_limit_bytes,
                  1536 * MiB - 225 * MiB); /* GPU 0: 1.5 GiB free */
        ASSERT_EQ(l[1].memory_limit_bytes, 8 * GiB - 1536 * MiB); /* GPU 1: untouched */
        gpumem_runtime_destroy(b);
    }
    gpumem_runtime_destroy(a);
}

/* Sharing through the environment: two runtimes built from the same
 * GPUMEM_SIM_DEVICES share as two built from the same option string. */
TEST(environment_and_option_share)
{
    setenv("GPUMEM_BACKEND", "sim", 1);
    setenv("GPUMEM_SIM_DEVICES", "SHARE-ENV:8GiB", 1);
    gpumem_runtime *a = NULL;
    ASSERT_OK(gpumem_runtime_create(NULL, &a));
    unsetenv("GPUMEM_BACKEND");
    unsetenv("GPUMEM_SIM_DEVICES");
    if (!a)
        return;
    ASSERT_OK(gpumem_initialize(a));
    gpumem_runtime *b = sim_runtime("SHARE-ENV:8GiB");
    if (b) {
        ASSERT_EQ(info_of(b, 0).limit_bytes, 1536 * MiB - 225 * MiB);
        gpumem_runtime_destroy(b);
    }
    gpumem_runtime_destroy(a);
}

int main(void)
{
    unsetenv("GPUMEM_FORCE_ALLOW_GROWTH");
    unsetenv("TF_FORCE_GPU_ALLOW_GROWTH");
    unsetenv("GPUMEM_MEMORY_FRACTION");
    unsetenv("GPUMEM_MIN_SYSTEM_MEMORY_MB");
    unsetenv("TF_DEVICE_MIN_SYS_MEMORY_IN_MB");
    RUN(greedy_first_takes_almost_all);
    RUN(growth_lets_three_share);
    RUN(limit_lets_three_share);
    RUN(fraction_lets_four_share);
    RUN(destroy_gives_memory_back);
    RUN(destroy_gives_grown_memory_back);
    RUN(different_device_lists_do_not_share);
    RUN(sharing_is_per_gpu);
    RUN(environment_and_option_share);
    HARNESS_EXIT();
}
