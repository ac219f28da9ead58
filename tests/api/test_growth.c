/* Public-API tests of growth, statistics and release: growth reserves nothing
 * at initialization and grows on demand up to the budget (a limit included),
 * per-GPU growth, the growth environment variables, peak and reset,
 * largest_free_block, release_unused on growth and greedy pools, num_ooms.
 * Written from DESIGN.md and include/gpumem.h only. */
#include "gpumem.h"
#include "harness.h"
#include "api_util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The budget a fresh greedy runtime with a limit of the whole card gets on GPU 0
 * of `dev`: exactly what the hardware has free now. */
static uint64_t free_now(const char *dev, uint64_t total)
{
    gpumem_runtime *probe = sim_runtime(dev);
    if (!probe)
        return 0;
    gpumem_logical_device_config cfg = GPUMEM_LOGICAL_DEVICE_LIMIT(total);
    ASSERT_OK(gpumem_set_logical_device_configuration(probe, 0, &cfg, 1));
    ASSERT_OK(gpumem_set_memory_growth(probe, 0, true)); /* take nothing */
    uint64_t f = info_of(probe, 0).limit_bytes;
    gpumem_runtime_destroy(probe);
    return f;
}

/* Invariants of every snapshot. */
static void check_invariants(const gpumem_memory_info *mi)
{
    ASSERT_LE(mi->current_bytes, mi->reserved_bytes);
    ASSERT_LE(mi->current_bytes, mi->peak_bytes);
    ASSERT_LE(mi->reserved_bytes, mi->peak_reserved_bytes);
    ASSERT_LE(mi->reserved_bytes, mi->limit_bytes);
    ASSERT_LE(mi->largest_free_block, mi->reserved_bytes - mi->current_bytes);
    ASSERT_EQ(mi->current_bytes % 256, 0);
}

/* ------------------------------------------------------------- growth -- */

TEST(growth_reserves_nothing_at_init)
{
    const char *dev = "GROW-INIT:8GiB";
    gpumem_runtime *rt = sim_runtime(dev);
    if (!rt)
        return;
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    bool g = false;
    ASSERT_OK(gpumem_get_memory_growth(rt, 0, &g));
    ASSERT_TRUE(g);
    ASSERT_OK(gpumem_initialize(rt));
    gpumem_logical_device l = GPUMEM_STRUCT_INIT(gpumem_logical_device);
    size_t n = 0;
    ASSERT_OK(gpumem_list_logical_devices(rt, &l, 1, &n));
    ASSERT_TRUE(l.memory_growth);
    ASSERT_EQ(l.memory_limit_bytes, 8 * GiB - 1536 * MiB);
    gpumem_memory_info mi = info_of(rt, 0);
    ASSERT_EQ(mi.reserved_bytes, 0);
    ASSERT_EQ(mi.peak_reserved_bytes, 0);
    ASSERT_EQ(mi.current_bytes, 0);
    ASSERT_EQ(mi.largest_free_block, 0);
    ASSERT_EQ(mi.limit_bytes, 8 * GiB - 1536 * MiB);
    /* The hardware is untouched. */
    ASSERT_EQ(free_now(dev, 8 * GiB), 8 * GiB);
    gpumem_runtime_destroy(rt);
}

TEST(growth_on_demand)
{
    const char *dev = "GROW-DEMAND:8GiB";
    gpumem_runtime *rt = sim_runtime(dev);
    if (!rt)
        return;
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    void *a = NULL, *b = NULL, *c = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, (size_t)MiB, &a));
    gpumem_memory_info m1 = info_of(rt, 0);
    check_invariants(&m1);
    ASSERT_EQ(m1.current_bytes, MiB);
    ASSERT_TRUE(m1.reserved_bytes >= MiB);
    ASSERT_EQ(m1.peak_reserved_bytes, m1.reserved_bytes);
    /* The hardware lost what the pool reserved, no more. */
    ASSERT_EQ(free_now(dev, 8 * GiB), 8 * GiB - m1.reserved_bytes);

    ASSERT_OK(gpumem_malloc(rt, 0, 100, &b));
    gpumem_memory_info m2 = info_of(rt, 0);
    check_invariants(&m2);
    ASSERT_EQ(m2.current_bytes, MiB + 256);
    ASSERT_TRUE(m2.reserved_bytes >= m1.reserved_bytes);

    /* A big request grows the pool further. */
    ASSERT_OK(gpumem_malloc(rt, 0, (size_t)(3 * GiB), &c));
    gpumem_memory_info m3 = info_of(rt, 0);
    check_invariants(&m3);
    ASSERT_EQ(m3.current_bytes, 3 * GiB + MiB + 256);
    ASSERT_TRUE(m3.reserved_bytes >= 3 * GiB + MiB + 256);
    if (c) {
        memset(c, 0x77, 4096);
        ((unsigned char *)c)[3 * GiB - 1] = 0x77;
    }
    ASSERT_OK(gpumem_free(rt, a));
    ASSERT_OK(gpumem_free(rt, b));
    ASSERT_OK(gpumem_free(rt, c));
    gpumem_memory_info m4 = info_of(rt, 0);
    check_invariants(&m4);
    ASSERT_EQ(m4.current_bytes, 0);
    ASSERT_EQ(m4.reserved_bytes, m3.reserved_bytes); /* cached until released */
    gpumem_runtime_destroy(rt);
}

/* Growth never takes more than the budget (the default budget here). */
TEST(growth_capped_by_budget)
{
    gpumem_runtime *rt = sim_runtime("GROW-CAP:4GiB:6.1");
    if (!rt)
        return;
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    const uint64_t budget = 4 * GiB - 500 * MiB;
    void *p[64];
    int n = 0;
    gpumem_status s = GPUMEM_OK;
    while (n < 64) {
        s = gpumem_malloc(rt, 0, (size_t)(256 * MiB), &p[n]);
        gpumem_memory_info mi = info_of(rt, 0);
        check_invariants(&mi);
        ASSERT_LE(mi.reserved_bytes, budget);
        if (s != GPUMEM_OK)
            break;
        n++;
    }
    ASSERT_STATUS(s, GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_TRUE((uint64_t)n * 256 * MiB <= budget);
    ASSERT_TRUE(n >= 1);
    gpumem_memory_info mi = info_of(rt, 0);
    ASSERT_EQ(mi.num_ooms, 1);
    ASSERT_EQ(mi.num_allocs, (uint64_t)n);
    for (int i = 0; i < n; i++)
        ASSERT_OK(gpumem_free(rt, p[i]));
    /* After a release, one request of the whole budget fits. */
    ASSERT_OK(gpumem_release_unused(rt, 0, NULL));
    void *all = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, (size_t)budget, &all));
    mi = info_of(rt, 0);
    ASSERT_EQ(mi.reserved_bytes, budget);
    ASSERT_OK(gpumem_free(rt, all));
    gpumem_runtime_destroy(rt);
}

/* Growth with a limit grows up to the limit, never past it. */
TEST(growth_with_limit)
{
    gpumem_runtime *rt = sim_runtime("GROW-LIMIT:8GiB");
    if (!rt)
        return;
    gpumem_logical_device_config cfg = GPUMEM_LOGICAL_DEVICE_LIMIT(64 * MiB);
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, &cfg, 1));
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    gpumem_logical_device l = GPUMEM_STRUCT_INIT(gpumem_logical_device);
    size_t n = 0;
    ASSERT_OK(gpumem_list_logical_devices(rt, &l, 1, &n));
    ASSERT_TRUE(l.memory_growth);
    ASSERT_EQ(l.memory_limit_bytes, 64 * MiB);
    gpumem_memory_info mi = info_of(rt, 0);
    ASSERT_EQ(mi.reserved_bytes, 0);
    ASSERT_EQ(mi.limit_bytes, 64 * MiB);

    /* More than the limit: refused, nothing past the limit taken. */
    void *p = (void *)&n;
    ASSERT_STATUS(gpumem_malloc(rt, 0, (size_t)(64 * MiB + 1), &p),
                  GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_TRUE(p == (void *)&n);
    mi = info_of(rt, 0);
    check_invariants(&mi);
    ASSERT_EQ(mi.num_ooms, 1);

    /* In small steps: never past the limit. */
    void *ps[128];
    int k = 0;
    for (; k < 128; k++) {
        gpumem_status s = gpumem_malloc(rt, 0, (size_t)MiB, &ps[k]);
        mi = info_of(rt, 0);
        check_invariants(&mi);
        ASSERT_LE(mi.reserved_bytes, 64 * MiB);
        if (s != GPUMEM_OK) {
            ASSERT_STATUS(s, GPUMEM_ERR_OUT_OF_MEMORY);
            break;
        }
    }
    ASSERT_TRUE(k <= 64);
    ASSERT_TRUE(k >= 32); /* grows to a good part of the limit at least */
    for (int i = 0; i < k; i++)
        ASSERT_OK(gpumem_free(rt, ps[i]));
    ASSERT_OK(gpumem_release_unused(rt, 0, NULL));
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 0);

    /* The whole limit in one request: fits exactly. */
    ASSERT_OK(gpumem_malloc(rt, 0, (size_t)(64 * MiB), &p));
    mi = info_of(rt, 0);
    ASSERT_EQ(mi.reserved_bytes, 64 * MiB);
    ASSERT_EQ(mi.current_bytes, 64 * MiB);
    void *q = NULL;
    ASSERT_STATUS(gpumem_malloc(rt, 0, 256, &q), GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 64 * MiB);
    ASSERT_OK(gpumem_free(rt, p));
    gpumem_runtime_destroy(rt);
}

/* Growth combines with several logical devices, each growing in its own pool. */
TEST(growth_with_logical_devices)
{
    gpumem_runtime *rt = sim_runtime("GROW-LOGICAL:8GiB");
    if (!rt)
        return;
    gpumem_logical_device_config cfg[2] = {GPUMEM_LOGICAL_DEVICE_LIMIT(1 * GiB),
                                           GPUMEM_LOGICAL_DEVICE_LIMIT(2 * GiB)};
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, cfg, 2));
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    gpumem_logical_device l[2] = {GPUMEM_STRUCT_INIT(gpumem_logical_device)};
    size_t n = 0;
    ASSERT_OK(gpumem_list_logical_devices(rt, l, 2, &n));
    ASSERT_EQ(n, 2);
    ASSERT_TRUE(l[0].memory_growth);
    ASSERT_TRUE(l[1].memory_growth);
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 0);
    ASSERT_EQ(info_of(rt, 1).reserved_bytes, 0);
    void *a = NULL, *b = NULL, *x = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, (size_t)GiB, &a));
    ASSERT_STATUS(gpumem_malloc(rt, 0, 256, &x), GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_EQ(info_of(rt, 1).reserved_bytes, 0); /* the other pool did not grow */
    ASSERT_OK(gpumem_malloc(rt, 1, (size_t)(2 * GiB), &b));
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 1 * GiB);
    ASSERT_EQ(info_of(rt, 1).reserved_bytes, 2 * GiB);
    ASSERT_OK(gpumem_free(rt, a));
    ASSERT_OK(gpumem_free(rt, b));
    gpumem_runtime_destroy(rt);
}

TEST(growth_differs_between_gpus)
{
    gpumem_runtime *rt = sim_runtime("GROW-PER-A:8GiB,GROW-PER-B:8GiB,GROW-PER-C:8GiB");
    if (!rt)
        return;
    ASSERT_OK(gpumem_set_memory_growth(rt, 1, true));
    bool g[3];
    for (int i = 0; i < 3; i++)
        ASSERT_OK(gpumem_get_memory_growth(rt, i, &g[i]));
    ASSERT_FALSE(g[0]);
    ASSERT_TRUE(g[1]);
    ASSERT_FALSE(g[2]);
    gpumem_logical_device l[3] = {GPUMEM_STRUCT_INIT(gpumem_logical_device)};
    size_t n = 0;
    ASSERT_OK(gpumem_list_logical_devices(rt, l, 3, &n));
    ASSERT_EQ(n, 3);
    ASSERT_FALSE(l[0].memory_growth);
    ASSERT_TRUE(l[1].memory_growth);
    ASSERT_FALSE(l[2].memory_growth);
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 8 * GiB - 1536 * MiB);
    ASSERT_EQ(info_of(rt, 1).reserved_bytes, 0);
    ASSERT_EQ(info_of(rt, 2).reserved_bytes, 8 * GiB - 1536 * MiB);
    gpumem_runtime_destroy(rt);
}

/* --------------------------------------------------------- environment -- */

/* Both GPUs of rt (one logical device each, initialized by this call) grow, and
 * reserved nothing, when `growth`; else they reserved their whole budgets. */
static void applied_growth_is(gpumem_runtime *rt, bool growth)
{
    gpumem_logical_device l[2] = {GPUMEM_STRUCT_INIT(gpumem_logical_device)};
    size_t n = 0;
    ASSERT_OK(gpumem_list_logical_devices(rt, l, 2, &n));
    ASSERT_EQ(n, 2);
    for (size_t i = 0; i < n && i < 2; i++) {
        ASSERT_EQ(l[i].memory_growth, growth);
        ASSERT_EQ(info_of(rt, (int)i).reserved_bytes,
                  growth ? 0 : l[i].memory_limit_bytes);
    }
}

static void check_env_growth(const char *var, const char *value, bool expect)
{
    clear_env();
    setenv(var, value, 1);
    gpumem_runtime *rt = env_runtime(expect ? "ENV-GROWTH-ON:4GiB,ENV-GROWTH-ON2:4GiB"
                                            : "ENV-GROWTH-OFF:4GiB,ENV-GROWTH-OFF2:4GiB");
    clear_env();
    if (!rt)
        return;
    for (int i = 0; i < 2; i++) {
        bool g = !expect;
        ASSERT_OK(gpumem_get_memory_growth(rt, i, &g));
        if (g != expect)
            HARNESS_FAIL("%s=%s: GPU %d growth %d, expected %d", var, value, i, g,
                         expect);
    }
    applied_growth_is(rt, expect);
    gpumem_runtime_destroy(rt);
}

TEST(force_allow_growth_environment)
{
    check_env_growth("GPUMEM_FORCE_ALLOW_GROWTH", "true", true);
    check_env_growth("TF_FORCE_GPU_ALLOW_GROWTH", "true", true);
    check_env_growth("GPUMEM_FORCE_ALLOW_GROWTH", "false", false);
    check_env_growth("TF_FORCE_GPU_ALLOW_GROWTH", "false", false);
}

static char forced_log[2048];
static void keep_forced_log(void *user, int level, const char *message)
{
    (void)user;
    size_t n = strlen(forced_log);
    snprintf(forced_log + n, sizeof forced_log - n, "[%d] %s\n", level, message);
}

/* As TensorFlow's TF_FORCE_GPU_ALLOW_GROWTH overrides its configuration (with a
 * line in its log), the variable decides every GPU's growth at initialization,
 * over an explicit gpumem_set_memory_growth, which it names in the log at WARNING.
 * Before, an explicit call won, so an administrator's `true` did not stop a
 * program that asked for a greedy pool from taking the card. */
static void check_forced_over_explicit(const char *var, bool forced)
{
    clear_env();
    setenv(var, forced ? "true" : "false", 1);
    gpumem_options o;
    ASSERT_OK(gpumem_options_init(&o));
    o.backend = GPUMEM_BACKEND_SIM;
    o.sim_devices = "FORCED:4GiB,FORCED2:4GiB";
    o.log = keep_forced_log;
    o.log_level = GPUMEM_LOG_WARNING;
    forced_log[0] = '\0';
    gpumem_runtime *rt = NULL;
    ASSERT_OK(gpumem_runtime_create(&o, &rt));
    clear_env();
    if (!rt)
        return;
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, !forced));
    bool g = forced;
    ASSERT_OK(gpumem_get_memory_growth(rt, 0, &g)); /* the setting, as TensorFlow's */
    ASSERT_EQ(g, !forced);
    ASSERT_OK(gpumem_initialize(rt));
    applied_growth_is(rt, forced);
    char want[200];
    snprintf(want, sizeof want,
             "[1] gpumem: GPU:0: memory growth %s, overriding the %s set for it, because "
             "%s is set\n",
             forced ? "on" : "off", forced ? "off" : "on", var);
    ASSERT_STREQ(forced_log, want); /* GPU:1 was not set otherwise: nothing to say */
    gpumem_runtime_destroy(rt);
}

TEST(force_allow_growth_overrides_an_explicit_setting)
{
    check_forced_over_explicit("GPUMEM_FORCE_ALLOW_GROWTH", true);
    check_forced_over_explicit("TF_FORCE_GPU_ALLOW_GROWTH", true);
    check_forced_over_explicit("GPUMEM_FORCE_ALLOW_GROWTH", false);
    check_forced_over_explicit("TF_FORCE_GPU_ALLOW_GROWTH", false);
}

TEST(growth_environment_read_at_create)
{
    clear_env();
    gpumem_runtime *rt = env_runtime("ENV-GROWTH-LATE:4GiB");
    if (!rt)
        return;
    setenv("GPUMEM_FORCE_ALLOW_GROWTH", "true", 1);
    bool g = true;
    ASSERT_OK(gpumem_get_memory_growth(rt, 0, &g));
    ASSERT_FALSE(g);
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 4 * GiB - 1536 * MiB);
    clear_env();
    gpumem_runtime_destroy(rt);
}

/* ------------------------------------------------------ peak and reset -- */

TEST(peak_and_reset_memory_stats)
{
    gpumem_runtime *rt = sim_runtime("STATS:8GiB,STATS-2:8GiB");
    if (!rt)
        return;
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    ASSERT_OK(gpumem_set_memory_growth(rt, 1, true));
    /* Before initialization: nothing to reset, and it initializes nothing. */
    ASSERT_OK(gpumem_reset_memory_stats(rt, 0));
    ASSERT_OK(gpumem_reset_memory_stats(rt, -1));
    bool init = true;
    ASSERT_OK(gpumem_is_initialized(rt, &init));
    ASSERT_FALSE(init);

    void *a = NULL, *b = NULL, *x = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, (size_t)MiB, &a));
    ASSERT_OK(gpumem_malloc(rt, 0, (size_t)(2 * MiB), &b));
    ASSERT_OK(gpumem_free(rt, b));
    ASSERT_STATUS(gpumem_malloc(rt, 0, (size_t)(100 * GiB), &x),
                  GPUMEM_ERR_OUT_OF_MEMORY);
    gpumem_memory_info mi = info_of(rt, 0);
    check_invariants(&mi);
    ASSERT_EQ(mi.current_bytes, MiB);
    ASSERT_EQ(mi.peak_bytes, 3 * MiB);
    ASSERT_EQ(mi.num_allocs, 2);
    ASSERT_EQ(mi.num_frees, 1);
    ASSERT_EQ(mi.num_ooms, 1);
    ASSERT_EQ(mi.live_blocks, 1);
    ASSERT_EQ(mi.peak_live_blocks, 2);
    ASSERT_EQ(mi.num_allocs_total, 2);
    ASSERT_EQ(mi.freed_total_bytes, 2 * MiB);
    const uint64_t reserved = mi.reserved_bytes;
    ASSERT_TRUE(reserved >= 3 * MiB);
    ASSERT_EQ(mi.peak_reserved_bytes, reserved);

    /* Logical 1 has its own counters. */
    void *c = NULL;
    ASSERT_OK(gpumem_malloc(rt, 1, 512, &c));
    gpumem_memory_info m1 = info_of(rt, 1);
    ASSERT_EQ(m1.num_allocs, 1);
    ASSERT_EQ(m1.current_bytes, 512);

    ASSERT_OK(gpumem_reset_memory_stats(rt, 0));
    mi = info_of(rt, 0);
    check_invariants(&mi);
    ASSERT_EQ(mi.current_bytes, MiB);
    ASSERT_EQ(mi.peak_bytes, MiB); /* peak := current */
    ASSERT_EQ(mi.reserved_bytes, reserved);
    ASSERT_EQ(mi.peak_reserved_bytes, reserved);
    ASSERT_EQ(mi.num_allocs, 0);
    ASSERT_EQ(mi.num_frees, 0);
    ASSERT_EQ(mi.num_ooms, 0);
    ASSERT_EQ(mi.peak_live_blocks, 1); /* := live_blocks */
    ASSERT_EQ(mi.num_allocs_total, 2); /* the totals are never reset */
    ASSERT_EQ(mi.freed_total_bytes, 2 * MiB);
    /* Logical 1 untouched by a reset of logical 0. */
    ASSERT_EQ(info_of(rt, 1).num_allocs, 1);

    /* Counting resumes from the reset. */
    ASSERT_OK(gpumem_free(rt, a));
    mi = info_of(rt, 0);
    ASSERT_EQ(mi.current_bytes, 0);
    ASSERT_EQ(mi.peak_bytes, MiB);
    ASSERT_EQ(mi.num_frees, 1);
    ASSERT_EQ(mi.num_allocs, 0);
    ASSERT_EQ(mi.live_blocks, 0);
    ASSERT_EQ(mi.peak_live_blocks, 1);
    void *more[3];
    for (int i = 0; i < 3; i++)
        ASSERT_OK(gpumem_malloc(rt, 0, 4096, &more[i]));
    for (int i = 0; i < 3; i++)
        ASSERT_OK(gpumem_free(rt, more[i]));
    mi = info_of(rt, 0);
    ASSERT_EQ(mi.num_allocs, 3);
    ASSERT_EQ(mi.num_allocs_total, 5);
    ASSERT_EQ(mi.peak_live_blocks, 3);
    ASSERT_EQ(mi.live_blocks, 0);

    /* Releasing drops reserved; a reset sets peak_reserved to it. */
    uint64_t released = 0;
    ASSERT_OK(gpumem_release_unused(rt, 0, &released));
    mi = info_of(rt, 0);
    ASSERT_EQ(mi.reserved_bytes, 0);
    ASSERT_EQ(mi.peak_reserved_bytes, reserved);
    ASSERT_OK(gpumem_reset_memory_stats(rt, -1));
    mi = info_of(rt, 0);
    ASSERT_EQ(mi.peak_reserved_bytes, 0);
    ASSERT_EQ(mi.peak_bytes, 0);
    ASSERT_EQ(mi.num_frees, 0);
    m1 = info_of(rt, 1); /* -1: every logical device */
    ASSERT_EQ(m1.num_allocs, 0);
    ASSERT_EQ(m1.peak_bytes, 512);
    ASSERT_EQ(m1.current_bytes, 512);
    ASSERT_OK(gpumem_free(rt, c));
    gpumem_runtime_destroy(rt);
}

/* ------------------------------------------------- largest_free_block -- */

/* On a greedy pool that cannot grow, largest_free_block is exactly the largest
 * request that succeeds. */
static void check_largest_is_exact(gpumem_runtime *rt, const char *when)
{
    gpumem_memory_info mi = info_of(rt, 0);
    check_invariants(&mi);
    const uint64_t lfb = mi.largest_free_block;
    ASSERT_EQ(lfb % 256, 0);
    void *p = NULL;
    if (lfb > 0) {
        gpumem_status s = gpumem_malloc(rt, 0, (size_t)lfb, &p);
        if (s != GPUMEM_OK)
            HARNESS_FAIL("%s: malloc(largest_free_block %" PRIu64 "): %s", when, lfb,
                         gpumem_status_name(s));
        else {
            ASSERT_EQ(info_of(rt, 0).reserved_bytes, mi.reserved_bytes);
            ASSERT_OK(gpumem_free(rt, p));
        }
    }
    gpumem_status s = gpumem_malloc(rt, 0, (size_t)lfb + 1, &p);
    if (s != GPUMEM_ERR_OUT_OF_MEMORY) {
        HARNESS_FAIL("%s: malloc(largest_free_block + 1 = %" PRIu64 "): %s", when,
                     lfb + 1, gpumem_status_name(s));
        if (s == GPUMEM_OK)
            gpumem_free(rt, p);
    }
}

/* PyTorch's inactive split blocks (gpumem_memory_info's inactive_split_*): the
 * free chunks of a segment that holds others, each with its mapped bytes; each
 * allocation and free adds its net change, an increase to the _total and maybe
 * the peak. */
static void check_split(const gpumem_memory_info *mi, uint64_t blocks,
                        uint64_t peak_blocks, uint64_t blocks_total, uint64_t bytes,
                        uint64_t peak_bytes, uint64_t bytes_total)
{
    ASSERT_EQ(mi->inactive_split_blocks, blocks);
    ASSERT_EQ(mi->peak_inactive_split_blocks, peak_blocks);
    ASSERT_EQ(mi->inactive_split_blocks_total, blocks_total);
    ASSERT_EQ(mi->inactive_split_bytes, bytes);
    ASSERT_EQ(mi->peak_inactive_split_bytes, peak_bytes);
    ASSERT_EQ(mi->inactive_split_bytes_total, bytes_total);
}

TEST(inactive_split_greedy_pool)
{
    gpumem_runtime *rt = sim_runtime("SPLIT:8GiB");
    if (!rt)
        return;
    gpumem_logical_device_config cfg = GPUMEM_LOGICAL_DEVICE_LIMIT(64 * MiB);
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, &cfg, 1));
    ASSERT_OK(gpumem_initialize(rt));
    gpumem_memory_info mi = info_of(rt, 0);
    check_split(&mi, 0, 0, 0, 0, 0, 0); /* one segment, one free chunk: not split */
    void *a, *b, *c;
    ASSERT_OK(gpumem_malloc(rt, 0, (size_t)MiB, &a)); /* the rest: 63 MiB, split */
    mi = info_of(rt, 0);
    check_split(&mi, 1, 1, 1, 63 * MiB, 63 * MiB, 63 * MiB);
    ASSERT_OK(gpumem_malloc(rt, 0, (size_t)(2 * MiB), &b));
    ASSERT_OK(gpumem_malloc(rt, 0, (size_t)MiB, &c)); /* a b c, then 60 MiB free */
    mi = info_of(rt, 0);
    check_split(&mi, 1, 1, 1, 60 * MiB, 63 * MiB, 63 * MiB);
    ASSERT_OK(gpumem_free(rt, b)); /* a block more, between live ones */
    mi = info_of(rt, 0);
    check_split(&mi, 2, 2, 2, 62 * MiB, 63 * MiB, 65 * MiB);
    ASSERT_OK(gpumem_free(rt, c)); /* joins both: one block less, 1 MiB more */
    mi = info_of(rt, 0);
    check_split(&mi, 1, 2, 2, 63 * MiB, 63 * MiB, 66 * MiB);
    ASSERT_OK(gpumem_free(rt, a)); /* the segment is one free chunk again */
    mi = info_of(rt, 0);
    check_split(&mi, 0, 2, 2, 0, 63 * MiB, 66 * MiB);
    ASSERT_OK(gpumem_reset_memory_stats(rt, 0)); /* peaks := now; totals stay */
    mi = info_of(rt, 0);
    check_split(&mi, 0, 0, 2, 0, 0, 66 * MiB);
    ASSERT_OK(gpumem_malloc(rt, 0, 4096, &a));
    mi = info_of(rt, 0);
    check_split(&mi, 1, 1, 3, 64 * MiB - 4096, 64 * MiB - 4096, 130 * MiB - 4096);
    uint64_t released = 1;
    ASSERT_OK(gpumem_release_unused(rt, 0, &released)); /* a live block: keeps it */
    ASSERT_EQ(released, 0);
    ASSERT_EQ(info_of(rt, 0).inactive_split_bytes, 64 * MiB - 4096);
    ASSERT_OK(gpumem_free(rt, a));
    ASSERT_OK(gpumem_release_unused(rt, 0, &released)); /* the region goes */
    mi = info_of(rt, 0);
    ASSERT_EQ(mi.segments, 0);
    check_split(&mi, 0, 1, 3, 0, 64 * MiB - 4096, 130 * MiB - 4096);
    gpumem_runtime_destroy(rt);
}

TEST(inactive_split_growth_pool)
{
    gpumem_runtime *rt = sim_runtime("SPLIT-GROW:8GiB");
    if (!rt)
        return;
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    void *x, *a, *b, *c;
    ASSERT_OK(gpumem_malloc(rt, 0, (size_t)(96 * MiB), &x)); /* a region of 96 MiB */
    gpumem_memory_info mi = info_of(rt, 0);
    check_split(&mi, 0, 0, 0, 0, 0, 0); /* taken whole */
    ASSERT_OK(gpumem_free(rt, x));
    mi = info_of(rt, 0);
    check_split(&mi, 0, 0, 0, 0, 0, 0); /* one free chunk: not split */
    ASSERT_OK(gpumem_malloc(rt, 0, (size_t)(32 * MiB), &a));
    ASSERT_OK(gpumem_malloc(rt, 0, (size_t)(32 * MiB), &b));
    ASSERT_OK(gpumem_malloc(rt, 0, (size_t)(31 * MiB), &c));
    mi = info_of(rt, 0);
    check_split(&mi, 1, 1, 1, MiB, 64 * MiB, 64 * MiB); /* c's rest */
    ASSERT_OK(gpumem_free(rt, b));
    mi = info_of(rt, 0);
    check_split(&mi, 2, 2, 2, 33 * MiB, 64 * MiB, 96 * MiB);
    /* The release unmaps the extents (12 MiB: eight to the region) wholly
     * inside b: 8 MiB of b stay mapped, and counted, with c's rest. */
    uint64_t released = 0;
    ASSERT_OK(gpumem_release_unused(rt, 0, &released));
    mi = info_of(rt, 0);
    ASSERT_EQ(mi.reserved_bytes, 72 * MiB);
    check_split(&mi, 2, 2, 2, 9 * MiB, 64 * MiB, 96 * MiB);
    /* b's place again: mapped back, taken whole */
    ASSERT_OK(gpumem_malloc(rt, 0, (size_t)(32 * MiB), &b));
    mi = info_of(rt, 0);
    check_split(&mi, 1, 2, 2, MiB, 64 * MiB, 96 * MiB);
    ASSERT_OK(gpumem_free(rt, a));
    ASSERT_OK(gpumem_free(rt, b));
    mi = info_of(rt, 0);
    check_split(&mi, 2, 2, 3, 65 * MiB, 65 * MiB, 160 * MiB);
    ASSERT_OK(gpumem_free(rt, c)); /* the segment is one free chunk */
    mi = info_of(rt, 0);
    check_split(&mi, 0, 2, 3, 0, 65 * MiB, 160 * MiB);
    ASSERT_EQ(mi.live_blocks, 0);
    gpumem_runtime_destroy(rt);
}

TEST(inactive_split_unmapped_block)
{
    gpumem_runtime *rt = sim_runtime("SPLIT-GONE:8GiB");
    if (!rt)
        return;
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    void *x, *a, *b, *c;
    ASSERT_OK(gpumem_malloc(rt, 0, (size_t)(96 * MiB), &x)); /* eight 12 MiB extents */
    ASSERT_OK(gpumem_free(rt, x));
    ASSERT_OK(gpumem_malloc(rt, 0, (size_t)(12 * MiB), &a));
    ASSERT_OK(gpumem_malloc(rt, 0, (size_t)(12 * MiB), &b));
    ASSERT_OK(gpumem_malloc(rt, 0, (size_t)(12 * MiB), &c));
    ASSERT_OK(gpumem_free(rt, b));
    gpumem_memory_info mi = info_of(rt, 0);
    check_split(&mi, 2, 2, 2, 72 * MiB, 84 * MiB, 96 * MiB);
    /* b is one extent, and the rest after c five: all given back, so neither
     * is counted (none of it is cached) */
    uint64_t released = 0;
    ASSERT_OK(gpumem_release_unused(rt, 0, &released));
    mi = info_of(rt, 0);
    ASSERT_EQ(mi.reserved_bytes, 24 * MiB);
    check_split(&mi, 0, 2, 2, 0, 84 * MiB, 96 * MiB);
    /* a joins b: one block with a's 12 MiB mapped, a block more */
    ASSERT_OK(gpumem_free(rt, a));
    mi = info_of(rt, 0);
    check_split(&mi, 1, 2, 3, 12 * MiB, 84 * MiB, 108 * MiB);
    /* c joins both: the segment is one free chunk */
    ASSERT_OK(gpumem_free(rt, c));
    mi = info_of(rt, 0);
    check_split(&mi, 0, 2, 3, 0, 84 * MiB, 108 * MiB);
    gpumem_runtime_destroy(rt);
}

TEST(largest_free_block_greedy)
{
    gpumem_runtime *rt = sim_runtime("LFB-GREEDY:8GiB");
    if (!rt)
        return;
    gpumem_logical_device_config cfg = GPUMEM_LOGICAL_DEVICE_LIMIT(256 * MiB);
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, &cfg, 1));
    gpumem_memory_info mi = info_of(rt, 0);
    ASSERT_EQ(mi.reserved_bytes, 256 * MiB);
    ASSERT_TRUE(mi.largest_free_block > 0);
    check_largest_is_exact(rt, "fresh");

    /* Fragment: four 32 MiB blocks, free the second. */
    void *p[4] = {NULL, NULL, NULL, NULL};
    for (int i = 0; i < 4; i++)
        ASSERT_OK(gpumem_malloc(rt, 0, (size_t)(32 * MiB), &p[i]));
    check_largest_is_exact(rt, "four blocks");
    ASSERT_OK(gpumem_free(rt, p[1]));
    check_largest_is_exact(rt, "a hole");
    /* Fill the tail, so the hole is what is left. */
    mi = info_of(rt, 0);
    void *tail[8];
    int nt = 0;
    while (nt < 8 && info_of(rt, 0).largest_free_block > 32 * MiB) {
        uint64_t lfb = info_of(rt, 0).largest_free_block;
        if (gpumem_malloc(rt, 0, (size_t)(lfb - 32 * MiB), &tail[nt]) != GPUMEM_OK)
            break;
        nt++;
    }
    mi = info_of(rt, 0);
    ASSERT_TRUE(mi.largest_free_block >= 32 * MiB);
    check_largest_is_exact(rt, "hole and filled tail");
    /* Free everything: coalesced back into the whole. */
    for (int i = 0; i < nt; i++)
        ASSERT_OK(gpumem_free(rt, tail[i]));
    ASSERT_OK(gpumem_free(rt, p[0]));
    ASSERT_OK(gpumem_free(rt, p[2]));
    ASSERT_OK(gpumem_free(rt, p[3]));
    check_largest_is_exact(rt, "all freed");
    ASSERT_EQ(info_of(rt, 0).current_bytes, 0);
    gpumem_runtime_destroy(rt);
}

TEST(largest_free_block_growth)
{
    gpumem_runtime *rt = sim_runtime("LFB-GROWTH:8GiB");
    if (!rt)
        return;
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    ASSERT_EQ(info_of(rt, 0).largest_free_block, 0);
    void *a = NULL, *b = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, (size_t)MiB, &a));
    gpumem_memory_info mi = info_of(rt, 0);
    check_invariants(&mi);
    if (mi.largest_free_block > 0) {
        /* Succeeds without growing. */
        ASSERT_OK(gpumem_malloc(rt, 0, (size_t)mi.largest_free_block, &b));
        ASSERT_EQ(info_of(rt, 0).reserved_bytes, mi.reserved_bytes);
        ASSERT_OK(gpumem_free(rt, b));
    }
    ASSERT_OK(gpumem_free(rt, a));
    mi = info_of(rt, 0);
    check_invariants(&mi);
    ASSERT_TRUE(mi.largest_free_block >= MiB); /* the freed block, coalesced */
    gpumem_runtime_destroy(rt);
}

/* ------------------------------------------------------ release_unused -- */

TEST(release_unused_before_init)
{
    gpumem_runtime *rt = sim_runtime("RELEASE-BEFORE:4GiB");
    if (!rt)
        return;
    uint64_t r = 99;
    ASSERT_OK(gpumem_release_unused(rt, 0, &r));
    ASSERT_EQ(r, 0);
    r = 99;
    ASSERT_OK(gpumem_release_unused(rt, -1, &r));
    ASSERT_EQ(r, 0);
    bool init = true;
    ASSERT_OK(gpumem_is_initialized(rt, &init));
    ASSERT_FALSE(init);
    gpumem_runtime_destroy(rt);
}

TEST(release_unused_growth_pool)
{
    const char *dev = "RELEASE-GROWTH:8GiB";
    gpumem_runtime *rt = sim_runtime(dev);
    if (!rt)
        return;
    gpumem_logical_device_config cfg = GPUMEM_LOGICAL_DEVICE_LIMIT(2 * GiB);
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, &cfg, 1));
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    void *a = NULL, *b = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, (size_t)(512 * MiB), &a));
    ASSERT_OK(gpumem_malloc(rt, 0, (size_t)(1 * GiB), &b));
    gpumem_memory_info mi = info_of(rt, 0);
    const uint64_t reserved = mi.reserved_bytes;
    ASSERT_TRUE(reserved >= 1536 * MiB);
    ASSERT_EQ(free_now(dev, 8 * GiB), 8 * GiB - reserved);

    /* With everything in use, at most the unused regions go. */
    uint64_t r = 0;
    ASSERT_OK(gpumem_release_unused(rt, 0, &r));
    mi = info_of(rt, 0);
    check_invariants(&mi);
    ASSERT_EQ(mi.reserved_bytes + r, reserved);
    ASSERT_TRUE(mi.reserved_bytes >= 1536 * MiB);
    if (a && b) {
        memset(a, 0x5A, 4096);
        memset(b, 0xA5, 4096);
    }

    ASSERT_OK(gpumem_free(rt, a));
    ASSERT_OK(gpumem_free(rt, b));
    const uint64_t before = info_of(rt, 0).reserved_bytes;
    r = 0;
    ASSERT_OK(gpumem_release_unused(rt, 0, &r));
    ASSERT_EQ(r, before);
    mi = info_of(rt, 0);
    ASSERT_EQ(mi.reserved_bytes, 0);
    ASSERT_EQ(mi.peak_reserved_bytes, reserved); /* peak stays */
    ASSERT_EQ(mi.largest_free_block, 0);
    /* The bytes are free for others again. */
    ASSERT_EQ(free_now(dev, 8 * GiB), 8 * GiB);
    /* A second release has nothing to give. */
    r = 7;
    ASSERT_OK(gpumem_release_unused(rt, 0, &r));
    ASSERT_EQ(r, 0);
    /* And the pool grows again, up to its budget. */
    void *all = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, (size_t)(2 * GiB), &all));
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 2 * GiB);
    ASSERT_OK(gpumem_free(rt, all));
    gpumem_runtime_destroy(rt);
}

TEST(release_unused_greedy_pool)
{
    const char *dev = "RELEASE-GREEDY:8GiB";
    gpumem_runtime *rt = sim_runtime(dev);
    if (!rt)
        return;
    gpumem_logical_device_config cfg = GPUMEM_LOGICAL_DEVICE_LIMIT(2 * GiB);
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, &cfg, 1));
    ASSERT_OK(gpumem_initialize(rt));
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 2 * GiB);
    ASSERT_EQ(free_now(dev, 8 * GiB), 6 * GiB);

    /* A live allocation pins its region. */
    void *a = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, (size_t)MiB, &a));
    if (a)
        memset(a, 0x3C, (size_t)MiB);
    uint64_t r = 0;
    ASSERT_OK(gpumem_release_unused(rt, 0, &r));
    gpumem_memory_info mi = info_of(rt, 0);
    check_invariants(&mi);
    ASSERT_EQ(mi.reserved_bytes + r, 2 * GiB);
    ASSERT_TRUE(mi.reserved_bytes >= MiB);
    if (a) {
        size_t bad = 0;
        for (size_t i = 0; i < MiB; i++)
            bad += ((unsigned char *)a)[i] != 0x3C;
        ASSERT_EQ(bad, 0);
    }
    ASSERT_OK(gpumem_free(rt, a));

    /* All free: the whole reservation goes back. */
    const uint64_t before = info_of(rt, 0).reserved_bytes;
    r = 0;
    ASSERT_OK(gpumem_release_unused(rt, -1, &r));
    ASSERT_EQ(r, before);
    mi = info_of(rt, 0);
    ASSERT_EQ(mi.reserved_bytes, 0);
    ASSERT_EQ(mi.peak_reserved_bytes, 2 * GiB);
    ASSERT_EQ(mi.limit_bytes, 2 * GiB); /* the budget is unchanged */
    ASSERT_EQ(free_now(dev, 8 * GiB), 8 * GiB);

    /* Another runtime takes the whole GPU meanwhile: the pool cannot grow. */
    gpumem_runtime *hog = sim_runtime(dev);
    if (hog) {
        gpumem_logical_device_config all = GPUMEM_LOGICAL_DEVICE_LIMIT(8 * GiB);
        ASSERT_OK(gpumem_set_logical_device_configuration(hog, 0, &all, 1));
        ASSERT_OK(gpumem_initialize(hog));
        ASSERT_EQ(info_of(hog, 0).reserved_bytes, 8 * GiB);
        void *x = (void *)&r;
        ASSERT_STATUS(gpumem_malloc(rt, 0, (size_t)MiB, &x), GPUMEM_ERR_OUT_OF_MEMORY);
        ASSERT_TRUE(x == (void *)&r);
        ASSERT_EQ(info_of(rt, 0).num_ooms, 1);
        gpumem_runtime_destroy(hog);
    }

    /* The pool takes memory again on demand, up to its budget and no further. */
    void *p = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, (size_t)(2 * GiB), &p));
    mi = info_of(rt, 0);
    ASSERT_EQ(mi.reserved_bytes, 2 * GiB);
    void *x = NULL;
    ASSERT_STATUS(gpumem_malloc(rt, 0, 256, &x), GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 2 * GiB);
    ASSERT_EQ(free_now(dev, 8 * GiB), 6 * GiB);
    ASSERT_OK(gpumem_free(rt, p));
    gpumem_runtime_destroy(rt);
}

/* Issue 22, item 5, the reproducer: a greedy pool with a 1 GiB limit on a 2 GiB
 * GPU releases its memory; another runtime grows into the GPU. The pool serves
 * its requests by growing (a 4 KiB request takes 2 MiB, not a 4 KiB region, and
 * 100 MiB ones extend that region by what they lack), and takes its whole budget
 * back once the GPU has it free again. */
TEST(release_unused_greedy_pool_when_the_gpu_filled_up)
{
    const char *dev = "RELEASE-GREEDY-SHARED:2GiB";
    gpumem_runtime *rt = sim_runtime(dev);
    gpumem_runtime *other = rt ? sim_runtime(dev) : NULL;
    if (!other) {
        gpumem_runtime_destroy(rt);
        return;
    }
    gpumem_logical_device_config cfg = GPUMEM_LOGICAL_DEVICE_LIMIT(1 * GiB);
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, &cfg, 1));
    ASSERT_OK(gpumem_initialize(rt));
    uint64_t r = 0;
    ASSERT_OK(gpumem_release_unused(rt, 0, &r));
    ASSERT_EQ(r, 1 * GiB);
    gpumem_logical_device_config most = GPUMEM_LOGICAL_DEVICE_LIMIT(1536 * MiB);
    ASSERT_OK(gpumem_set_logical_device_configuration(other, 0, &most, 1));
    ASSERT_OK(gpumem_set_memory_growth(other, 0, true));
    ASSERT_OK(gpumem_initialize(other));
    void *hog = NULL;
    ASSERT_OK(gpumem_malloc(other, 0, (size_t)(1536 * MiB), &hog));

    void *small = NULL, *big[3] = {NULL, NULL, NULL};
    ASSERT_OK(gpumem_malloc(rt, 0, 4096, &small));
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 2 * MiB);
    for (int i = 0; i < 3; i++)
        ASSERT_OK(gpumem_malloc(rt, 0, (size_t)(100 * MiB), &big[i]));
    gpumem_memory_info mi = info_of(rt, 0);
    check_invariants(&mi);
    ASSERT_EQ(mi.reserved_bytes, 302 * MiB); /* 4 KiB + 300 MiB, rounded to 2 MiB */
    ASSERT_EQ(mi.num_ooms, 0);
    ASSERT_EQ(mi.largest_free_block, 2 * MiB - 4096);

    /* the other runtime gives its memory back: the next growth takes the budget */
    ASSERT_OK(gpumem_free(other, hog));
    ASSERT_OK(gpumem_release_unused(other, 0, &r));
    void *p = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, (size_t)(200 * MiB), &p));
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 1 * GiB);
    ASSERT_OK(gpumem_free(rt, p));
    ASSERT_OK(gpumem_free(rt, small));
    for (int i = 0; i < 3; i++)
        ASSERT_OK(gpumem_free(rt, big[i]));
    gpumem_runtime_destroy(other);
    gpumem_runtime_destroy(rt);
}

/* A default greedy pool (no limit) releases too. */
TEST(release_unused_default_greedy)
{
    const char *dev = "RELEASE-DEFAULT:12GiB:6.1";
    gpumem_runtime *rt = sim_runtime(dev);
    if (!rt)
        return;
    ASSERT_OK(gpumem_initialize(rt));
    ASSERT_EQ(free_now(dev, 12 * GiB), 500 * MiB);
    uint64_t r = 0;
    ASSERT_OK(gpumem_release_unused(rt, 0, &r));
    ASSERT_EQ(r, 12 * GiB - 500 * MiB);
    ASSERT_EQ(free_now(dev, 12 * GiB), 12 * GiB);
    /* The released bytes are usable by a second user. */
    gpumem_runtime *other = sim_runtime(dev);
    if (other) {
        ASSERT_EQ(info_of(other, 0).limit_bytes, 12 * GiB - 500 * MiB);
        void *q = NULL;
        ASSERT_OK(gpumem_malloc(other, 0, (size_t)(3 * GiB), &q));
        ASSERT_OK(gpumem_free(other, q));
        gpumem_runtime_destroy(other);
    }
    gpumem_runtime_destroy(rt);
}

/* release_unused(-1) covers every logical device. */
TEST(release_unused_every_logical_device)
{
    const char *dev = "RELEASE-ALL-A:4GiB,RELEASE-ALL-B:4GiB";
    gpumem_runtime *rt = sim_runtime(dev);
    if (!rt)
        return;
    gpumem_logical_device_config cfg[2] = {GPUMEM_LOGICAL_DEVICE_LIMIT(1 * GiB),
                                           GPUMEM_LOGICAL_DEVICE_LIMIT(1 * GiB)};
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, cfg, 2));
    gpumem_logical_device_config one = GPUMEM_LOGICAL_DEVICE_LIMIT(2 * GiB);
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 1, &one, 1));
    ASSERT_OK(gpumem_set_memory_growth(rt, 1, true));
    void *p = NULL;
    ASSERT_OK(gpumem_malloc(rt, 2, (size_t)GiB, &p));
    ASSERT_OK(gpumem_free(rt, p));
    const uint64_t grown = info_of(rt, 2).reserved_bytes;
    ASSERT_TRUE(grown >= GiB);
    uint64_t r = 0;
    ASSERT_OK(gpumem_release_unused(rt, -1, &r));
    ASSERT_EQ(r, 2 * GiB + grown);
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(info_of(rt, i).reserved_bytes, 0);
    /* A single logical device's release leaves the others alone. */
    void *a = NULL, *b = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, 256, &a));
    ASSERT_OK(gpumem_malloc(rt, 1, 256, &b));
    ASSERT_OK(gpumem_free(rt, a));
    ASSERT_OK(gpumem_free(rt, b));
    const uint64_t r1 = info_of(rt, 1).reserved_bytes;
    ASSERT_TRUE(r1 > 0);
    ASSERT_OK(gpumem_release_unused(rt, 0, NULL));
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 0);
    ASSERT_EQ(info_of(rt, 1).reserved_bytes, r1);
    gpumem_runtime_destroy(rt);
}

/* ---------------------------------------------------------- num_ooms -- */

TEST(num_ooms_counts)
{
    gpumem_runtime *rt = sim_runtime("OOMS:2GiB");
    if (!rt)
        return;
    gpumem_logical_device_config cfg = GPUMEM_LOGICAL_DEVICE_LIMIT(16 * MiB);
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, &cfg, 1));
    void *p = NULL, *x = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, (size_t)(16 * MiB), &p));
    for (int i = 0; i < 5; i++)
        ASSERT_STATUS(gpumem_malloc(rt, 0, (size_t)(1 + i), &x),
                      GPUMEM_ERR_OUT_OF_MEMORY);
    /* Failures of other kinds are not out-of-memory. */
    ASSERT_STATUS(gpumem_malloc(rt, 0, 256, NULL), GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_OK(gpumem_malloc(rt, 0, 0, &x)); /* size 0: no error, no allocation */
    ASSERT_TRUE(x == NULL);
    ASSERT_STATUS(gpumem_malloc(rt, 3, 256, &x), GPUMEM_ERR_NO_SUCH_DEVICE);
    gpumem_memory_info mi = info_of(rt, 0);
    ASSERT_EQ(mi.num_ooms, 5);
    ASSERT_EQ(mi.num_allocs, 1);
    ASSERT_EQ(mi.current_bytes, 16 * MiB);
    ASSERT_OK(gpumem_free(rt, p));
    ASSERT_OK(gpumem_malloc(rt, 0, (size_t)(8 * MiB), &p));
    ASSERT_EQ(info_of(rt, 0).num_ooms, 5);
    ASSERT_OK(gpumem_free(rt, p));
    gpumem_runtime_destroy(rt);
}

int main(void)
{
    clear_env();
    RUN(growth_reserves_nothing_at_init);
    RUN(growth_on_demand);
    RUN(growth_capped_by_budget);
    RUN(growth_with_limit);
    RUN(growth_with_logical_devices);
    RUN(growth_differs_between_gpus);
    RUN(force_allow_growth_environment);
    RUN(force_allow_growth_overrides_an_explicit_setting);
    RUN(growth_environment_read_at_create);
    RUN(peak_and_reset_memory_stats);
    RUN(inactive_split_greedy_pool);
    RUN(inactive_split_growth_pool);
    RUN(inactive_split_unmapped_block);
    RUN(largest_free_block_greedy);
    RUN(largest_free_block_growth);
    RUN(release_unused_before_init);
    RUN(release_unused_growth_pool);
    RUN(release_unused_greedy_pool);
    RUN(release_unused_greedy_pool_when_the_gpu_filled_up);
    RUN(release_unused_default_greedy);
    RUN(release_unused_every_logical_device);
    RUN(num_ooms_counts);
    HARNESS_EXIT();
}
