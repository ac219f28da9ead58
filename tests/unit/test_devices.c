/* Budget arithmetic: the headroom table, fractions, limits, equal shares, and the
 * validation of logical configurations against a GPU's memory. */
#include "harness.h"
#include "runtime.h"

static struct options opts_default(void)
{
    struct options o;
    memset(&o, 0, sizeof o);
    return o;
}

TEST(headroom_table)
{
    struct options o = opts_default();
    ASSERT_EQ(gpumem__wanted_headroom(&o, 1 * GPUMEM_GIB, 8), 225 * GPUMEM_MIB);
    ASSERT_EQ(gpumem__wanted_headroom(&o, 12 * GPUMEM_GIB, 6), 500 * GPUMEM_MIB);
    ASSERT_EQ(gpumem__wanted_headroom(&o, 12 * GPUMEM_GIB, 5), 500 * GPUMEM_MIB);
    ASSERT_EQ(gpumem__wanted_headroom(&o, 12 * GPUMEM_GIB, 7), 1050 * GPUMEM_MIB);
    ASSERT_EQ(gpumem__wanted_headroom(&o, 40 * GPUMEM_GIB, 8), 1536 * GPUMEM_MIB);
    ASSERT_EQ(gpumem__wanted_headroom(&o, 80 * GPUMEM_GIB, 9), 1800 * GPUMEM_MIB);
    /* exactly 2 GiB free is not "less than 2 GiB" */
    ASSERT_EQ(gpumem__wanted_headroom(&o, 2 * GPUMEM_GIB, 8), 1536 * GPUMEM_MIB);
    ASSERT_EQ(gpumem__wanted_headroom(&o, 100 * GPUMEM_MIB, 8), 225 * GPUMEM_MIB);
    o.min_system_memory_set = true;
    o.min_system_memory_bytes = 64 * GPUMEM_MIB;
    ASSERT_EQ(gpumem__wanted_headroom(&o, 12 * GPUMEM_GIB, 6), 64 * GPUMEM_MIB);
    o.min_system_memory_bytes = 0;
    ASSERT_EQ(gpumem__wanted_headroom(&o, 12 * GPUMEM_GIB, 6), 0);
}

static uint64_t budgets[GPUMEM_MAX_LOGICAL_PER_GPU];
static char reasons[GPUMEM_MAX_LOGICAL_PER_GPU][BUDGET_REASON_LEN];

TEST(default_budget_is_free_minus_headroom)
{
    struct phys_config c = {0};
    gpumem__plan_budgets(&c, 12 * GPUMEM_GIB, 12 * GPUMEM_GIB, 500 * GPUMEM_MIB, budgets,
                         reasons);
    ASSERT_EQ(budgets[0], 12 * GPUMEM_GIB - 500 * GPUMEM_MIB);
    ASSERT_STREQ(
        reasons[0],
        "12.00 GiB free at initialization minus 500.00 MiB headroom for the driver");
}

/* Without a headroom the sentence says why: set to 0, or not less than the free
 * memory (as GPUMEM_MIN_SYSTEM_MEMORY_MB=8192 on a 4 GiB card; TensorFlow then
 * keeps none). It used to say "too little to keep a headroom" for both. */
TEST(no_headroom_says_why)
{
    struct phys_config c = {0};
    gpumem__plan_budgets(&c, 4 * GPUMEM_GIB, 4 * GPUMEM_GIB, 0, budgets, reasons);
    ASSERT_EQ(budgets[0], 4 * GPUMEM_GIB);
    ASSERT_STREQ(reasons[0],
                 "4.00 GiB free at initialization, no headroom for the driver "
                 "(the minimum system memory is 0)");
    gpumem__plan_budgets(&c, 4 * GPUMEM_GIB, 4 * GPUMEM_GIB, 8 * GPUMEM_GIB, budgets,
                         reasons);
    ASSERT_EQ(budgets[0], 4 * GPUMEM_GIB);
    ASSERT_STREQ(reasons[0],
                 "4.00 GiB free at initialization, no headroom for the driver "
                 "(the 8.00 GiB wanted is not less than the free memory)");
    /* the boundary: a headroom equal to the free memory is not kept, one less is */
    gpumem__plan_budgets(&c, 1 * GPUMEM_GIB, 225 * GPUMEM_MIB, 225 * GPUMEM_MIB, budgets,
                         reasons);
    ASSERT_EQ(budgets[0], 225 * GPUMEM_MIB);
    gpumem__plan_budgets(&c, 1 * GPUMEM_GIB, 226 * GPUMEM_MIB, 225 * GPUMEM_MIB, budgets,
                         reasons);
    ASSERT_EQ(budgets[0], 1 * GPUMEM_MIB);
}

TEST(fraction_of_total_capped_by_free)
{
    struct phys_config c = {0};
    c.fraction = 0.25;
    gpumem__plan_budgets(&c, 24 * GPUMEM_GIB, 24 * GPUMEM_GIB, 1536 * GPUMEM_MIB, budgets,
                         reasons);
    ASSERT_EQ(budgets[0], 6 * GPUMEM_GIB); /* no headroom with a fraction */
    ASSERT_CONTAINS(reasons[0], "fraction 0.25");
    gpumem__plan_budgets(&c, 24 * GPUMEM_GIB, 4 * GPUMEM_GIB, 1536 * GPUMEM_MIB, budgets,
                         reasons);
    ASSERT_EQ(budgets[0], 4 * GPUMEM_GIB); /* of total, but never more than is free */
    ASSERT_CONTAINS(reasons[0], "capped by the free memory");
    c.fraction = 1.0 / 3.0;
    gpumem__plan_budgets(&c, 12 * GPUMEM_GIB, 12 * GPUMEM_GIB, 0, budgets, reasons);
    ASSERT_EQ(budgets[0] % 256, 0);
    ASSERT_LE(budgets[0], 4 * GPUMEM_GIB);
    ASSERT_LE(4 * GPUMEM_GIB - 256, budgets[0]);
}

TEST(limits_take_what_is_left_in_order)
{
    struct phys_config c = {0};
    c.num_logical = 3;
    c.logical[0].memory_limit_bytes = 2 * GPUMEM_GIB;
    c.logical[1].memory_limit_bytes = 4 * GPUMEM_GIB;
    c.logical[2].memory_limit_bytes = 4 * GPUMEM_GIB;
    /* all capped: the whole free memory is usable, no headroom */
    gpumem__plan_budgets(&c, 16 * GPUMEM_GIB, 16 * GPUMEM_GIB, 1536 * GPUMEM_MIB, budgets,
                         reasons);
    ASSERT_EQ(budgets[0], 2 * GPUMEM_GIB);
    ASSERT_EQ(budgets[1], 4 * GPUMEM_GIB);
    ASSERT_EQ(budgets[2], 4 * GPUMEM_GIB);
    ASSERT_STREQ(reasons[1], "memory limit 4.00 GiB");
    /* only 7 GiB free: the last one gets what is left */
    gpumem__plan_budgets(&c, 16 * GPUMEM_GIB, 7 * GPUMEM_GIB, 1536 * GPUMEM_MIB, budgets,
                         reasons);
    ASSERT_EQ(budgets[0], 2 * GPUMEM_GIB);
    ASSERT_EQ(budgets[1], 4 * GPUMEM_GIB);
    ASSERT_EQ(budgets[2], 1 * GPUMEM_GIB);
    ASSERT_CONTAINS(reasons[2], "capped by");
}

TEST(uncapped_logical_devices_share_the_rest)
{
    struct phys_config c = {0};
    c.num_logical = 3;
    c.logical[0].memory_limit_bytes = 0;
    c.logical[1].memory_limit_bytes = 4 * GPUMEM_GIB;
    c.logical[2].memory_limit_bytes = 0;
    gpumem__plan_budgets(&c, 16 * GPUMEM_GIB, 16 * GPUMEM_GIB, 2 * GPUMEM_GIB, budgets,
                         reasons);
    ASSERT_EQ(budgets[1], 4 * GPUMEM_GIB);
    ASSERT_EQ(budgets[0], 5 * GPUMEM_GIB); /* (16 - 2 headroom - 4) / 2 */
    ASSERT_EQ(budgets[2], 5 * GPUMEM_GIB);
    ASSERT_CONTAINS(reasons[0], "equal share");
}

/* A limit is taken exactly, as far as the free memory goes: the driver's headroom
 * comes only out of what the devices without a limit share. */
TEST(limits_are_exact_beside_an_unlimited_device)
{
    struct phys_config c = {0};
    c.num_logical = 3;
    c.logical[0].memory_limit_bytes = 2 * GPUMEM_GIB;
    c.logical[1].memory_limit_bytes = 3 * GPUMEM_GIB / 2;
    c.logical[2].memory_limit_bytes = 0;
    gpumem__plan_budgets(&c, 4 * GPUMEM_GIB, 4 * GPUMEM_GIB, 1536 * GPUMEM_MIB, budgets,
                         reasons);
    ASSERT_EQ(budgets[0], 2 * GPUMEM_GIB);
    ASSERT_EQ(budgets[1], 3 * GPUMEM_GIB / 2);
    ASSERT_STREQ(reasons[1], "memory limit 1.50 GiB");
    ASSERT_EQ(budgets[2], 0); /* 0.5 GiB left, less than the headroom */
    ASSERT_STREQ(reasons[2], "an equal share of what the limited logical devices leave "
                             "of 4.00 GiB free at initialization minus 1.50 GiB "
                             "headroom for the driver");
    /* more free: the unlimited one gets the rest less the headroom */
    gpumem__plan_budgets(&c, 8 * GPUMEM_GIB, 8 * GPUMEM_GIB, 1536 * GPUMEM_MIB, budgets,
                         reasons);
    ASSERT_EQ(budgets[2], 3 * GPUMEM_GIB);
    /* less free than the limits: capped by the free memory, in order */
    gpumem__plan_budgets(&c, 8 * GPUMEM_GIB, 3 * GPUMEM_GIB, 1536 * GPUMEM_MIB, budgets,
                         reasons);
    ASSERT_EQ(budgets[1], 1 * GPUMEM_GIB);
    ASSERT_STREQ(reasons[1],
                 "memory limit 1.50 GiB, capped by 3.00 GiB free at initialization");
}

/* A limit that is not whole granules is rounded down, and the reason says so. */
TEST(a_limit_is_rounded_down_to_granules)
{
    struct phys_config c = {0};
    c.num_logical = 1;
    c.logical[0].memory_limit_bytes = 1000;
    gpumem__plan_budgets(&c, 4 * GPUMEM_GIB, 4 * GPUMEM_GIB, 1536 * GPUMEM_MIB, budgets,
                         reasons);
    ASSERT_EQ(budgets[0], 768);
    ASSERT_STREQ(reasons[0],
                 "memory limit 1000 B, rounded down to whole 256-byte granules");
}

TEST(limit_combined_with_fraction)
{
    struct phys_config c = {0};
    c.fraction = 0.5;
    c.num_logical = 2;
    c.logical[0].memory_limit_bytes = 3 * GPUMEM_GIB;
    c.logical[1].memory_limit_bytes = 8 * GPUMEM_GIB;
    gpumem__plan_budgets(&c, 16 * GPUMEM_GIB, 16 * GPUMEM_GIB, 0, budgets, reasons);
    ASSERT_EQ(budgets[0], 3 * GPUMEM_GIB);
    ASSERT_EQ(budgets[1], 5 * GPUMEM_GIB); /* the fraction's 8 GiB less the first's 3 */
}

TEST(check_logical_config_gives_both_numbers)
{
    gpumem_logical_device_config cfg[2] = {GPUMEM_LOGICAL_DEVICE_LIMIT(10 * GPUMEM_GIB),
                                           GPUMEM_LOGICAL_DEVICE_LIMIT(10 * GPUMEM_GIB)};
    ASSERT_STATUS(gpumem__check_logical_config("api", 1, 16 * GPUMEM_GIB, cfg, 2),
                  GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(gpumem_last_error(), "21474836480 bytes");
    ASSERT_CONTAINS(gpumem_last_error(), "17179869184 bytes");
    ASSERT_CONTAINS(gpumem_last_error(), "api(GPU:1)");
    cfg[0].memory_limit_bytes = 17 * GPUMEM_GIB;
    ASSERT_STATUS(gpumem__check_logical_config("api", 0, 16 * GPUMEM_GIB, cfg, 1),
                  GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(gpumem_last_error(), "18253611008 bytes");
    /* each limit fits, their sum overflows 64 bits */
    cfg[0].memory_limit_bytes = UINT64_MAX / 2 + 1;
    cfg[1].memory_limit_bytes = UINT64_MAX / 2 + 1;
    ASSERT_STATUS(gpumem__check_logical_config("api", 0, UINT64_MAX - 1, cfg, 2),
                  GPUMEM_ERR_INVALID_ARGUMENT);
    cfg[0].memory_limit_bytes = 8 * GPUMEM_GIB;
    cfg[1].memory_limit_bytes = 8 * GPUMEM_GIB;
    ASSERT_OK(gpumem__check_logical_config("api", 0, 16 * GPUMEM_GIB, cfg, 2));
    ASSERT_OK(gpumem__check_logical_config("api", 0, 16 * GPUMEM_GIB, NULL, 0));
    /* a limit below one granule could hold nothing */
    cfg[1].memory_limit_bytes = 255;
    ASSERT_STATUS(gpumem__check_logical_config("api", 0, 16 * GPUMEM_GIB, cfg, 2),
                  GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(gpumem_last_error(),
                    "memory limit 255 bytes of logical device 1 is less than one "
                    "256-byte granule");
    cfg[1].memory_limit_bytes = 256;
    ASSERT_OK(gpumem__check_logical_config("api", 0, 16 * GPUMEM_GIB, cfg, 2));
}

int main(void)
{
    RUN(headroom_table);
    RUN(limits_are_exact_beside_an_unlimited_device);
    RUN(a_limit_is_rounded_down_to_granules);
    RUN(default_budget_is_free_minus_headroom);
    RUN(no_headroom_says_why);
    RUN(fraction_of_total_capped_by_free);
    RUN(limits_take_what_is_left_in_order);
    RUN(uncapped_logical_devices_share_the_rest);
    RUN(limit_combined_with_fraction);
    RUN(check_logical_config_gives_both_numbers);
    HARNESS_EXIT();
}
