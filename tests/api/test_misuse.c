/* Public-API misuse tests (table-driven where it fits, in the spirit of jemalloc's
 * test suite): every bad argument returns its status with a message, changes
 * nothing, and the runtime keeps working. Written from DESIGN.md and
 * include/gpumem.h only. */
#include "gpumem.h"
#include "harness.h"
#include "api_util.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Table machinery: each misuse runs on a fresh thread, whose last error is "",
 * so the message checked is the one this call produced. */

struct ctx {
    gpumem_runtime *rt;    /* the runtime under test */
    gpumem_runtime *other; /* another runtime */
    void *live_1k;         /* live allocation of 1 KiB */
    void *live_4k;         /* live allocation of 4 KiB */
    void *freed;           /* an allocation already freed */
    void *others;          /* a live allocation of `other` */
    void *host;            /* a libc malloc pointer */
    uint64_t budget;       /* logical device 0's budget */
};

struct misuse {
    const char *name;
    gpumem_status (*fn)(struct ctx *c);
    gpumem_status expected;
};

struct op_run {
    const struct misuse *m;
    struct ctx *c;
    gpumem_status status;
    char before[256];
    char msg[1024];
};

static void *op_thread(void *arg)
{
    struct op_run *r = arg;
    copy_error(r->before, sizeof r->before);
    r->status = r->m->fn(r->c);
    copy_error(r->msg, sizeof r->msg);
    return NULL;
}

/* Runs m on a fresh thread; checks status and message. */
static void run_misuse(const struct misuse *m, struct ctx *c)
{
    struct op_run r;
    memset(&r, 0, sizeof r);
    r.m = m;
    r.c = c;
    pthread_t t;
    if (pthread_create(&t, NULL, op_thread, &r) != 0) {
        HARNESS_FAIL("pthread_create");
        return;
    }
    pthread_join(t, NULL);
    if (r.before[0] != '\0')
        HARNESS_FAIL("%s: a new thread's last error is \"%s\", expected \"\"", m->name,
                     r.before);
    if (r.status != m->expected)
        HARNESS_FAIL("%s: got %s, expected %s (message: %s)", m->name,
                     gpumem_status_name(r.status), gpumem_status_name(m->expected),
                     r.msg);
    if (r.msg[0] == '\0')
        HARNESS_FAIL("%s: %s with an empty message", m->name,
                     gpumem_status_name(r.status));
}

/* ------------------------------------------------- serving-phase misuse -- */

static gpumem_status s_malloc_null_out(struct ctx *c)
{
    return gpumem_malloc(c->rt, 0, 256, NULL);
}
/* Size 0 succeeds (as cudaMalloc), but still on a logical device that exists. */
static gpumem_status s_malloc_size0_l1(struct ctx *c)
{
    void *p = (void *)c;
    gpumem_status s = gpumem_malloc(c->rt, 1, 0, &p);
    if (p != (void *)c)
        HARNESS_FAIL("malloc(size 0) on a missing device wrote its out-parameter");
    return s;
}
static gpumem_status s_malloc_oom(struct ctx *c, size_t size)
{
    void *p = (void *)c;
    gpumem_status s = gpumem_malloc(c->rt, 0, size, &p);
    if (s == GPUMEM_OK)
        gpumem_free(c->rt, p);
    else if (p != (void *)c)
        HARNESS_FAIL("failed malloc(%zu) wrote its out-parameter", size);
    return s;
}
static gpumem_status s_malloc_size_max(struct ctx *c)
{
    return s_malloc_oom(c, SIZE_MAX);
}
static gpumem_status s_malloc_size_max_m100(struct ctx *c)
{
    return s_malloc_oom(c, SIZE_MAX - 100);
}
static gpumem_status s_malloc_size_max_m255(struct ctx *c)
{
    return s_malloc_oom(c, SIZE_MAX - 255);
}
static gpumem_status s_malloc_half_max(struct ctx *c)
{
    return s_malloc_oom(c, SIZE_MAX / 2 + 1);
}
static gpumem_status s_malloc_budget_p1(struct ctx *c)
{
    return s_malloc_oom(c, (size_t)c->budget + 1);
}
static gpumem_status s_malloc_device_x2(struct ctx *c)
{
    return s_malloc_oom(c, (size_t)(8 * GiB));
}
static gpumem_status s_malloc_logical(struct ctx *c, int logical)
{
    void *p = (void *)c;
    gpumem_status s = gpumem_malloc(c->rt, logical, 256, &p);
    if (p != (void *)c)
        HARNESS_FAIL("failed malloc(logical %d) wrote its out-parameter", logical);
    return s;
}
static gpumem_status s_malloc_l1(struct ctx *c) { return s_malloc_logical(c, 1); }
static gpumem_status s_malloc_lm1(struct ctx *c) { return s_malloc_logical(c, -1); }
static gpumem_status s_malloc_lmax(struct ctx *c) { return s_malloc_logical(c, INT_MAX); }
static gpumem_status s_malloc_lmin(struct ctx *c) { return s_malloc_logical(c, INT_MIN); }
static gpumem_status s_info_null(struct ctx *c)
{
    return gpumem_get_memory_info(c->rt, 0, NULL);
}
static gpumem_status s_info_l1(struct ctx *c)
{
    gpumem_memory_info mi = GPUMEM_STRUCT_INIT(gpumem_memory_info);
    return gpumem_get_memory_info(c->rt, 1, &mi);
}
static gpumem_status s_info_lm1(struct ctx *c)
{
    gpumem_memory_info mi = GPUMEM_STRUCT_INIT(gpumem_memory_info);
    return gpumem_get_memory_info(c->rt, -1, &mi);
}
static gpumem_status s_reset_l1(struct ctx *c)
{
    return gpumem_reset_memory_stats(c->rt, 1);
}
static gpumem_status s_reset_lm2(struct ctx *c)
{
    return gpumem_reset_memory_stats(c->rt, -2);
}
static gpumem_status s_release_l1(struct ctx *c)
{
    uint64_t r = 12345;
    gpumem_status s = gpumem_release_unused(c->rt, 1, &r);
    if (r != 12345)
        HARNESS_FAIL("failed release_unused wrote its out-parameter");
    return s;
}
static gpumem_status s_release_lm2(struct ctx *c)
{
    return gpumem_release_unused(c->rt, -2, NULL);
}
static gpumem_status s_list_logical_null_count(struct ctx *c)
{
    gpumem_logical_device l[2] = {GPUMEM_STRUCT_INIT(gpumem_logical_device)};
    return gpumem_list_logical_devices(c->rt, l, 2, NULL);
}
static gpumem_status s_is_init_null(struct ctx *c)
{
    return gpumem_is_initialized(c->rt, NULL);
}
static gpumem_status s_free_host(struct ctx *c) { return gpumem_free(c->rt, c->host); }
static gpumem_status s_free_stack(struct ctx *c)
{
    char local[512];
    memset(local, 1, sizeof local);
    void *volatile p = local + 256 - ((uintptr_t)(local + 256) % 256); /* 256-aligned */
    return gpumem_free(c->rt, p);
}
static gpumem_status s_free_interior_256(struct ctx *c)
{
    return gpumem_free(c->rt, (char *)c->live_1k + 256);
}
static gpumem_status s_free_interior_1(struct ctx *c)
{
    return gpumem_free(c->rt, (char *)c->live_1k + 1);
}
static gpumem_status s_free_interior_4k(struct ctx *c)
{
    return gpumem_free(c->rt, (char *)c->live_4k + 1024);
}
static gpumem_status s_free_interior_last(struct ctx *c)
{
    return gpumem_free(c->rt, (char *)c->live_4k + 4095);
}
static gpumem_status s_free_minus_256(struct ctx *c)
{
    return gpumem_free(c->rt, (char *)c->live_4k - 256);
}
static gpumem_status s_free_other_rt(struct ctx *c)
{
    return gpumem_free(c->rt, c->others);
}
static gpumem_status s_free_double(struct ctx *c) { return gpumem_free(c->rt, c->freed); }
static gpumem_status s_free_one(struct ctx *c)
{
    return gpumem_free(c->rt, (void *)(uintptr_t)1);
}
static gpumem_status s_free_high(struct ctx *c)
{
    return gpumem_free(c->rt, (void *)(UINTPTR_MAX - 255));
}
static gpumem_status s_free_256(struct ctx *c)
{
    return gpumem_free(c->rt, (void *)(uintptr_t)256);
}

static const struct misuse serving_misuse[] = {
    {"malloc ptr NULL", s_malloc_null_out, GPUMEM_ERR_INVALID_ARGUMENT},
    {"malloc size 0 on logical 1 (only 0 exists)", s_malloc_size0_l1,
     GPUMEM_ERR_NO_SUCH_DEVICE},
    {"malloc SIZE_MAX", s_malloc_size_max, GPUMEM_ERR_OUT_OF_MEMORY},
    {"malloc SIZE_MAX-100", s_malloc_size_max_m100, GPUMEM_ERR_OUT_OF_MEMORY},
    {"malloc SIZE_MAX-255", s_malloc_size_max_m255, GPUMEM_ERR_OUT_OF_MEMORY},
    {"malloc SIZE_MAX/2+1", s_malloc_half_max, GPUMEM_ERR_OUT_OF_MEMORY},
    {"malloc budget+1", s_malloc_budget_p1, GPUMEM_ERR_OUT_OF_MEMORY},
    {"malloc 2x the device", s_malloc_device_x2, GPUMEM_ERR_OUT_OF_MEMORY},
    {"malloc logical 1 (only 0 exists)", s_malloc_l1, GPUMEM_ERR_NO_SUCH_DEVICE},
    {"malloc logical -1", s_malloc_lm1, GPUMEM_ERR_NO_SUCH_DEVICE},
    {"malloc logical INT_MAX", s_malloc_lmax, GPUMEM_ERR_NO_SUCH_DEVICE},
    {"malloc logical INT_MIN", s_malloc_lmin, GPUMEM_ERR_NO_SUCH_DEVICE},
    {"get_memory_info out NULL", s_info_null, GPUMEM_ERR_INVALID_ARGUMENT},
    {"get_memory_info logical 1", s_info_l1, GPUMEM_ERR_NO_SUCH_DEVICE},
    {"get_memory_info logical -1", s_info_lm1, GPUMEM_ERR_NO_SUCH_DEVICE},
    {"reset_memory_stats logical 1", s_reset_l1, GPUMEM_ERR_NO_SUCH_DEVICE},
    {"reset_memory_stats logical -2", s_reset_lm2, GPUMEM_ERR_NO_SUCH_DEVICE},
    {"release_unused logical 1", s_release_l1, GPUMEM_ERR_NO_SUCH_DEVICE},
    {"release_unused logical -2", s_release_lm2, GPUMEM_ERR_NO_SUCH_DEVICE},
    {"list_logical_devices count NULL", s_list_logical_null_count,
     GPUMEM_ERR_INVALID_ARGUMENT},
    {"is_initialized out NULL", s_is_init_null, GPUMEM_ERR_INVALID_ARGUMENT},
    {"free of a libc heap pointer", s_free_host, GPUMEM_ERR_INVALID_POINTER},
    {"free of a stack address", s_free_stack, GPUMEM_ERR_INVALID_POINTER},
    {"free of an interior pointer (+256)", s_free_interior_256,
     GPUMEM_ERR_INVALID_POINTER},
    {"free of an interior pointer (+1)", s_free_interior_1, GPUMEM_ERR_INVALID_POINTER},
    {"free of an interior pointer (+1024 of 4 KiB)", s_free_interior_4k,
     GPUMEM_ERR_INVALID_POINTER},
    {"free of an interior pointer (last byte)", s_free_interior_last,
     GPUMEM_ERR_INVALID_POINTER},
    {"free of a pointer 256 before an allocation", s_free_minus_256,
     GPUMEM_ERR_INVALID_POINTER},
    {"free of another runtime's pointer", s_free_other_rt, GPUMEM_ERR_INVALID_POINTER},
    {"double free", s_free_double, GPUMEM_ERR_INVALID_POINTER},
    {"free of (void *)1", s_free_one, GPUMEM_ERR_INVALID_POINTER},
    {"free of (void *)256", s_free_256, GPUMEM_ERR_INVALID_POINTER},
    {"free of UINTPTR_MAX-255", s_free_high, GPUMEM_ERR_INVALID_POINTER},
};

static bool same_counters(const gpumem_memory_info *a, const gpumem_memory_info *b)
{
    return a->current_bytes == b->current_bytes && a->num_allocs == b->num_allocs &&
           a->num_frees == b->num_frees && a->peak_bytes == b->peak_bytes &&
           a->reserved_bytes == b->reserved_bytes && a->limit_bytes == b->limit_bytes;
}

TEST(serving_misuse_table)
{
    struct ctx c;
    memset(&c, 0, sizeof c);
    /* A 4 GiB GPU of which logical device 0 gets a 1 GiB budget, greedy. One
     * logical device only, so logical 1 does not exist. */
    c.rt = sim_runtime("MIS-SERVE:4GiB");
    c.other = sim_runtime("MIS-OTHER:1GiB");
    if (!c.rt || !c.other)
        goto out;
    gpumem_logical_device_config cfg = GPUMEM_LOGICAL_DEVICE_LIMIT(1 * GiB);
    ASSERT_OK(gpumem_set_logical_device_configuration(c.rt, 0, &cfg, 1));
    ASSERT_OK(gpumem_set_memory_growth(c.other, 0, true));
    c.budget = 1 * GiB;
    c.host = malloc(4096);
    ASSERT_OK(gpumem_malloc(c.rt, 0, 1024, &c.live_1k));
    ASSERT_OK(gpumem_malloc(c.rt, 0, 4096, &c.live_4k));
    ASSERT_OK(gpumem_malloc(c.rt, 0, 2048, &c.freed));
    ASSERT_OK(gpumem_free(c.rt, c.freed));
    ASSERT_OK(gpumem_malloc(c.other, 0, 1024, &c.others));
    if (!c.live_1k || !c.live_4k || !c.others || !c.host)
        goto out;
    memset(c.live_1k, 0xA1, 1024);
    memset(c.live_4k, 0xB4, 4096);
    memset(c.others, 0xC7, 1024);

    gpumem_memory_info other_before = GPUMEM_STRUCT_INIT(gpumem_memory_info);
    ASSERT_OK(gpumem_get_memory_info(c.other, 0, &other_before));

    for (size_t i = 0; i < sizeof serving_misuse / sizeof serving_misuse[0]; i++) {
        const struct misuse *m = &serving_misuse[i];
        gpumem_memory_info before = GPUMEM_STRUCT_INIT(gpumem_memory_info),
                           after = GPUMEM_STRUCT_INIT(gpumem_memory_info);
        ASSERT_OK(gpumem_get_memory_info(c.rt, 0, &before));
        run_misuse(m, &c);
        ASSERT_OK(gpumem_get_memory_info(c.rt, 0, &after));
        if (!same_counters(&before, &after))
            HARNESS_FAIL("%s changed the pool: current %" PRIu64 "->%" PRIu64
                         ", allocs %" PRIu64 "->%" PRIu64 ", frees %" PRIu64 "->%" PRIu64
                         ", peak %" PRIu64 "->%" PRIu64 ", reserved %" PRIu64
                         "->%" PRIu64,
                         m->name, before.current_bytes, after.current_bytes,
                         before.num_allocs, after.num_allocs, before.num_frees,
                         after.num_frees, before.peak_bytes, after.peak_bytes,
                         before.reserved_bytes, after.reserved_bytes);
        uint64_t ooms =
            before.num_ooms + (m->expected == GPUMEM_ERR_OUT_OF_MEMORY ? 1 : 0);
        if (after.num_ooms != ooms)
            HARNESS_FAIL("%s: num_ooms %" PRIu64 " -> %" PRIu64 ", expected %" PRIu64,
                         m->name, before.num_ooms, after.num_ooms, ooms);
        /* The runtime still works. */
        void *p = NULL;
        gpumem_status s = gpumem_malloc(c.rt, 0, 512, &p);
        if (s != GPUMEM_OK)
            HARNESS_FAIL("after %s: malloc fails: %s", m->name, gpumem_status_name(s));
        else {
            memset(p, 0x11, 512);
            s = gpumem_free(c.rt, p);
            if (s != GPUMEM_OK)
                HARNESS_FAIL("after %s: free fails: %s", m->name, gpumem_status_name(s));
        }
    }

    /* The live allocations survived every bad free, untouched. */
    size_t bad = 0;
    for (size_t k = 0; k < 1024; k++)
        bad += ((unsigned char *)c.live_1k)[k] != 0xA1 ||
               ((unsigned char *)c.others)[k] != 0xC7;
    for (size_t k = 0; k < 4096; k++)
        bad += ((unsigned char *)c.live_4k)[k] != 0xB4;
    ASSERT_EQ(bad, 0);

    gpumem_memory_info other_after = GPUMEM_STRUCT_INIT(gpumem_memory_info);
    ASSERT_OK(gpumem_get_memory_info(c.other, 0, &other_after));
    ASSERT_TRUE(same_counters(&other_before, &other_after));
    ASSERT_EQ(other_after.num_frees, 0);

    ASSERT_OK(gpumem_free(c.rt, c.live_1k));
    ASSERT_OK(gpumem_free(c.rt, c.live_4k));
    ASSERT_OK(gpumem_free(c.other, c.others));
    ASSERT_STATUS(gpumem_free(c.rt, c.live_1k), GPUMEM_ERR_INVALID_POINTER);
    gpumem_memory_info mi = GPUMEM_STRUCT_INIT(gpumem_memory_info);
    ASSERT_OK(gpumem_get_memory_info(c.rt, 0, &mi));
    ASSERT_EQ(mi.current_bytes, 0);
    ASSERT_EQ(mi.num_allocs, mi.num_frees);
out:
    free(c.host);
    gpumem_runtime_destroy(c.rt);
    gpumem_runtime_destroy(c.other);
}

/* --------------------------------------------- configuration misuse -- */

static gpumem_status c_list_phys_null_count(struct ctx *c)
{
    gpumem_physical_device d[2] = {GPUMEM_STRUCT_INIT(gpumem_physical_device)};
    return gpumem_list_physical_devices(c->rt, d, 2, NULL);
}
static gpumem_status c_list_phys_null_out_cap(struct ctx *c)
{
    size_t n = 4242;
    gpumem_status s = gpumem_list_physical_devices(c->rt, NULL, 3, &n);
    if (n != 4242)
        HARNESS_FAIL("failed list_physical_devices wrote *count");
    return s;
}
static gpumem_status c_get_visible_null_count(struct ctx *c)
{
    int v[2];
    return gpumem_get_visible_devices(c->rt, v, 2, NULL);
}
static gpumem_status c_get_cfg_null_count(struct ctx *c)
{
    gpumem_logical_device_config cfg[2] = {
        GPUMEM_STRUCT_INIT(gpumem_logical_device_config)};
    return gpumem_get_logical_device_configuration(c->rt, 0, cfg, 2, NULL);
}
static gpumem_status c_get_growth_null(struct ctx *c)
{
    return gpumem_get_memory_growth(c->rt, 0, NULL);
}
static gpumem_status c_get_fraction_null(struct ctx *c)
{
    return gpumem_get_memory_fraction(c->rt, 0, NULL);
}
static gpumem_status c_set_growth_2(struct ctx *c)
{
    return gpumem_set_memory_growth(c->rt, 2, true);
}
static gpumem_status c_set_growth_m2(struct ctx *c)
{
    return gpumem_set_memory_growth(c->rt, -2, true);
}
static gpumem_status c_set_growth_max(struct ctx *c)
{
    return gpumem_set_memory_growth(c->rt, INT_MAX, true);
}
static gpumem_status c_set_growth_min(struct ctx *c)
{
    return gpumem_set_memory_growth(c->rt, INT_MIN, false);
}
static gpumem_status c_get_growth_2(struct ctx *c)
{
    bool g = true;
    return gpumem_get_memory_growth(c->rt, 2, &g);
}
static gpumem_status c_fraction(struct ctx *c, int physical, double f)
{
    return gpumem_set_memory_fraction(c->rt, physical, f);
}
static gpumem_status c_fraction_nan(struct ctx *c) { return c_fraction(c, 0, NAN); }
static gpumem_status c_fraction_nan_all(struct ctx *c) { return c_fraction(c, -1, NAN); }
static gpumem_status c_fraction_neg(struct ctx *c) { return c_fraction(c, 0, -0.1); }
static gpumem_status c_fraction_neg_tiny(struct ctx *c)
{
    return c_fraction(c, 1, -1e-300);
}
static gpumem_status c_fraction_gt1(struct ctx *c) { return c_fraction(c, 0, 1.0001); }
static gpumem_status c_fraction_2_all(struct ctx *c) { return c_fraction(c, -1, 2.0); }
static gpumem_status c_fraction_inf(struct ctx *c) { return c_fraction(c, 0, INFINITY); }
static gpumem_status c_fraction_minf(struct ctx *c)
{
    return c_fraction(c, 0, -INFINITY);
}
static gpumem_status c_fraction_dev2(struct ctx *c) { return c_fraction(c, 2, 0.5); }
static gpumem_status c_fraction_devm2(struct ctx *c) { return c_fraction(c, -2, 0.5); }
static gpumem_status c_get_fraction_2(struct ctx *c)
{
    double f = 0;
    return gpumem_get_memory_fraction(c->rt, 2, &f);
}
static gpumem_status c_cfg_null_n1(struct ctx *c)
{
    return gpumem_set_logical_device_configuration(c->rt, 0, NULL, 1);
}
static gpumem_status c_cfg_too_many(struct ctx *c)
{
    static gpumem_logical_device_config many[GPUMEM_MAX_LOGICAL_PER_GPU + 1] = {
        GPUMEM_STRUCT_INIT(gpumem_logical_device_config)};
    for (size_t i = 0; i < GPUMEM_MAX_LOGICAL_PER_GPU + 1; i++)
        many[i].memory_limit_bytes = 1 * MiB;
    return gpumem_set_logical_device_configuration(c->rt, 0, many,
                                                   GPUMEM_MAX_LOGICAL_PER_GPU + 1);
}
static gpumem_status c_cfg_dev2(struct ctx *c)
{
    gpumem_logical_device_config cfg = GPUMEM_LOGICAL_DEVICE_LIMIT(1 * GiB);
    return gpumem_set_logical_device_configuration(c->rt, 2, &cfg, 1);
}
static gpumem_status c_cfg_devm2(struct ctx *c)
{
    gpumem_logical_device_config cfg = GPUMEM_LOGICAL_DEVICE_LIMIT(1 * GiB);
    return gpumem_set_logical_device_configuration(c->rt, -2, &cfg, 1);
}
static gpumem_status c_cfg_limit_gt_total(struct ctx *c)
{
    gpumem_logical_device_config cfg = GPUMEM_LOGICAL_DEVICE_LIMIT(13 * GiB);
    return gpumem_set_logical_device_configuration(c->rt, 0, &cfg, 1);
}
static gpumem_status c_cfg_limit_gt_total_by1(struct ctx *c)
{
    gpumem_logical_device_config cfg[2] = {GPUMEM_LOGICAL_DEVICE_LIMIT(1 * GiB),
                                           GPUMEM_LOGICAL_DEVICE_LIMIT(4 * GiB + 1)};
    return gpumem_set_logical_device_configuration(c->rt, 1, cfg, 2);
}
static gpumem_status c_cfg_sum_gt_total(struct ctx *c)
{
    gpumem_logical_device_config cfg[3] = {GPUMEM_LOGICAL_DEVICE_LIMIT(6 * GiB),
                                           GPUMEM_LOGICAL_DEVICE_LIMIT(6 * GiB),
                                           GPUMEM_LOGICAL_DEVICE_LIMIT(1 * MiB)};
    return gpumem_set_logical_device_configuration(c->rt, 0, cfg, 3);
}
static gpumem_status c_cfg_sum_overflow(struct ctx *c)
{
    gpumem_logical_device_config cfg[2] = {GPUMEM_LOGICAL_DEVICE_LIMIT(UINT64_MAX - 255),
                                           GPUMEM_LOGICAL_DEVICE_LIMIT(512)};
    return gpumem_set_logical_device_configuration(c->rt, 0, cfg, 2);
}
static gpumem_status c_get_cfg_dev2(struct ctx *c)
{
    size_t n = 0;
    return gpumem_get_logical_device_configuration(c->rt, 2, NULL, 0, &n);
}
static gpumem_status c_visible_null_n1(struct ctx *c)
{
    return gpumem_set_visible_devices(c->rt, NULL, 1);
}
static gpumem_status c_visible_dup(struct ctx *c)
{
    const int v[2] = {0, 0};
    return gpumem_set_visible_devices(c->rt, v, 2);
}
static gpumem_status c_visible_dup3(struct ctx *c)
{
    const int v[3] = {1, 0, 1};
    return gpumem_set_visible_devices(c->rt, v, 3);
}
static gpumem_status c_visible_range(struct ctx *c)
{
    const int v[2] = {0, 2};
    return gpumem_set_visible_devices(c->rt, v, 2);
}
static gpumem_status c_visible_neg(struct ctx *c)
{
    const int v[1] = {-1};
    return gpumem_set_visible_devices(c->rt, v, 1);
}
static gpumem_status c_create_null_out(struct ctx *c)
{
    (void)c;
    gpumem_options o;
    gpumem_options_init(&o);
    o.backend = GPUMEM_BACKEND_SIM;
    o.flags = GPUMEM_OPTIONS_IGNORE_ENVIRONMENT;
    o.sim_devices = "MIS-NULLOUT:1GiB";
    return gpumem_runtime_create(&o, NULL);
}
static gpumem_status c_options_init_null(struct ctx *c)
{
    (void)c;
    return gpumem_options_init(NULL);
}

static const struct misuse config_misuse[] = {
    {"list_physical_devices count NULL", c_list_phys_null_count,
     GPUMEM_ERR_INVALID_ARGUMENT},
    {"list_physical_devices out NULL, capacity 3", c_list_phys_null_out_cap,
     GPUMEM_ERR_INVALID_ARGUMENT},
    {"get_visible_devices count NULL", c_get_visible_null_count,
     GPUMEM_ERR_INVALID_ARGUMENT},
    {"get_logical_device_configuration count NULL", c_get_cfg_null_count,
     GPUMEM_ERR_INVALID_ARGUMENT},
    {"get_memory_growth out NULL", c_get_growth_null, GPUMEM_ERR_INVALID_ARGUMENT},
    {"get_memory_fraction out NULL", c_get_fraction_null, GPUMEM_ERR_INVALID_ARGUMENT},
    {"set_memory_growth GPU 2 of 2", c_set_growth_2, GPUMEM_ERR_NO_SUCH_DEVICE},
    {"set_memory_growth GPU -2", c_set_growth_m2, GPUMEM_ERR_NO_SUCH_DEVICE},
    {"set_memory_growth GPU INT_MAX", c_set_growth_max, GPUMEM_ERR_NO_SUCH_DEVICE},
    {"set_memory_growth GPU INT_MIN", c_set_growth_min, GPUMEM_ERR_NO_SUCH_DEVICE},
    {"get_memory_growth GPU 2 of 2", c_get_growth_2, GPUMEM_ERR_NO_SUCH_DEVICE},
    {"set_memory_fraction NaN", c_fraction_nan, GPUMEM_ERR_INVALID_ARGUMENT},
    {"set_memory_fraction NaN on every GPU", c_fraction_nan_all,
     GPUMEM_ERR_INVALID_ARGUMENT},
    {"set_memory_fraction -0.1", c_fraction_neg, GPUMEM_ERR_INVALID_ARGUMENT},
    {"set_memory_fraction -1e-300", c_fraction_neg_tiny, GPUMEM_ERR_INVALID_ARGUMENT},
    {"set_memory_fraction 1.0001", c_fraction_gt1, GPUMEM_ERR_INVALID_ARGUMENT},
    {"set_memory_fraction 2 on every GPU", c_fraction_2_all, GPUMEM_ERR_INVALID_ARGUMENT},
    {"set_memory_fraction +inf", c_fraction_inf, GPUMEM_ERR_INVALID_ARGUMENT},
    {"set_memory_fraction -inf", c_fraction_minf, GPUMEM_ERR_INVALID_ARGUMENT},
    {"set_memory_fraction GPU 2 of 2", c_fraction_dev2, GPUMEM_ERR_NO_SUCH_DEVICE},
    {"set_memory_fraction GPU -2", c_fraction_devm2, GPUMEM_ERR_NO_SUCH_DEVICE},
    {"get_memory_fraction GPU 2 of 2", c_get_fraction_2, GPUMEM_ERR_NO_SUCH_DEVICE},
    {"set_logical_device_configuration NULL, n 1", c_cfg_null_n1,
     GPUMEM_ERR_INVALID_ARGUMENT},
    {"set_logical_device_configuration n 65", c_cfg_too_many,
     GPUMEM_ERR_INVALID_ARGUMENT},
    {"set_logical_device_configuration GPU 2 of 2", c_cfg_dev2,
     GPUMEM_ERR_NO_SUCH_DEVICE},
    {"set_logical_device_configuration GPU -2", c_cfg_devm2, GPUMEM_ERR_NO_SUCH_DEVICE},
    {"set_logical_device_configuration limit > total", c_cfg_limit_gt_total,
     GPUMEM_ERR_INVALID_ARGUMENT},
    {"set_logical_device_configuration limit total+1", c_cfg_limit_gt_total_by1,
     GPUMEM_ERR_INVALID_ARGUMENT},
    {"set_logical_device_configuration sum > total", c_cfg_sum_gt_total,
     GPUMEM_ERR_INVALID_ARGUMENT},
    {"set_logical_device_configuration sum overflows", c_cfg_sum_overflow,
     GPUMEM_ERR_INVALID_ARGUMENT},
    {"get_logical_device_configuration GPU 2 of 2", c_get_cfg_dev2,
     GPUMEM_ERR_NO_SUCH_DEVICE},
    {"set_visible_devices NULL, n 1", c_visible_null_n1, GPUMEM_ERR_INVALID_ARGUMENT},
    {"set_visible_devices {0, 0}", c_visible_dup, GPUMEM_ERR_INVALID_ARGUMENT},
    {"set_visible_devices {1, 0, 1}", c_visible_dup3, GPUMEM_ERR_INVALID_ARGUMENT},
    {"set_visible_devices {0, 2}", c_visible_range, GPUMEM_ERR_NO_SUCH_DEVICE},
    {"set_visible_devices {-1}", c_visible_neg, GPUMEM_ERR_NO_SUCH_DEVICE},
    {"runtime_create out NULL", c_create_null_out, GPUMEM_ERR_INVALID_ARGUMENT},
    {"options_init NULL", c_options_init_null, GPUMEM_ERR_INVALID_ARGUMENT},
};

/* The configuration as a comparable snapshot. */
struct config_snapshot {
    bool growth[2];
    double fraction[2];
    size_t ncfg[2];
    uint64_t limits[2][4];
    size_t nvisible;
    int visible[2];
};

static void snapshot(gpumem_runtime *rt, struct config_snapshot *s)
{
    memset(s, 0, sizeof *s);
    for (int g = 0; g < 2; g++) {
        ASSERT_OK(gpumem_get_memory_growth(rt, g, &s->growth[g]));
        ASSERT_OK(gpumem_get_memory_fraction(rt, g, &s->fraction[g]));
        gpumem_logical_device_config cfg[4];
        memset(cfg, 0, sizeof cfg);
        cfg[0].struct_size = sizeof cfg[0];
        ASSERT_OK(gpumem_get_logical_device_configuration(rt, g, cfg, 4, &s->ncfg[g]));
        for (int i = 0; i < 4; i++)
            s->limits[g][i] = cfg[i].memory_limit_bytes;
    }
    ASSERT_OK(gpumem_get_visible_devices(rt, s->visible, 2, &s->nvisible));
}

static bool same_snapshot(const struct config_snapshot *a,
                          const struct config_snapshot *b)
{
    for (int g = 0; g < 2; g++) {
        if (a->growth[g] != b->growth[g] || a->fraction[g] != b->fraction[g] ||
            a->ncfg[g] != b->ncfg[g])
            return false;
        for (int i = 0; i < 4; i++)
            if (a->limits[g][i] != b->limits[g][i])
                return false;
    }
    if (a->nvisible != b->nvisible)
        return false;
    for (size_t i = 0; i < a->nvisible && i < 2; i++)
        if (a->visible[i] != b->visible[i])
            return false;
    return true;
}

TEST(configuration_misuse_table)
{
    struct ctx c;
    memset(&c, 0, sizeof c);
    c.rt = sim_runtime("MIS-CFG-A:12GiB,MIS-CFG-B:4GiB");
    if (!c.rt)
        return;
    /* A non-default configuration, to see that failures keep it. */
    const gpumem_logical_device_config cfg[2] = {GPUMEM_LOGICAL_DEVICE_LIMIT(1 * GiB),
                                                 GPUMEM_LOGICAL_DEVICE_LIMIT(2 * GiB)};
    ASSERT_OK(gpumem_set_logical_device_configuration(c.rt, 0, cfg, 2));
    ASSERT_OK(gpumem_set_memory_fraction(c.rt, 1, 0.5));
    ASSERT_OK(gpumem_set_memory_growth(c.rt, 1, true));
    const int vis[2] = {0, 1};
    ASSERT_OK(gpumem_set_visible_devices(c.rt, vis, 2));
    struct config_snapshot before;
    snapshot(c.rt, &before);
    ASSERT_EQ(before.ncfg[0], 2);
    ASSERT_TRUE(before.fraction[1] == 0.5);

    for (size_t i = 0; i < sizeof config_misuse / sizeof config_misuse[0]; i++) {
        const struct misuse *m = &config_misuse[i];
        run_misuse(m, &c);
        struct config_snapshot after;
        snapshot(c.rt, &after);
        if (!same_snapshot(&before, &after))
            HARNESS_FAIL("%s changed the configuration", m->name);
        bool init = true;
        ASSERT_OK(gpumem_is_initialized(c.rt, &init));
        if (init)
            HARNESS_FAIL("%s initialized the runtime", m->name);
    }

    /* The runtime still works, with the configuration set before. */
    gpumem_logical_device l[4] = {GPUMEM_STRUCT_INIT(gpumem_logical_device)};
    size_t count = 0;
    ASSERT_OK(gpumem_list_logical_devices(c.rt, l, 4, &count));
    ASSERT_EQ(count, 3);
    if (count == 3) {
        ASSERT_EQ(l[0].memory_limit_bytes, 1 * GiB);
        ASSERT_EQ(l[1].memory_limit_bytes, 2 * GiB);
        ASSERT_EQ(l[2].memory_limit_bytes, 2 * GiB); /* 0.5 of 4 GiB */
        ASSERT_TRUE(l[2].memory_growth);
    }
    void *p = NULL;
    ASSERT_OK(gpumem_malloc(c.rt, 2, 1 * MiB, &p));
    ASSERT_OK(gpumem_free(c.rt, p));
    gpumem_runtime_destroy(c.rt);
}

/* A logical index out of range says how many logical devices there are, in
 * the same words from every call that takes one. */
/* A refused fraction is shown with every digit: 1 + 2^-52 is not "1". */
TEST(a_refused_fraction_is_shown_exactly)
{
    gpumem_runtime *rt = sim_runtime("4GiB");
    if (!rt)
        return;
    ASSERT_STATUS(gpumem_set_memory_fraction(rt, 0, 1.0 + DBL_EPSILON),
                  GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(gpumem_last_error(), "fraction 1.0000000000000002 is not in [0, 1]");
    gpumem_runtime_destroy(rt);
}

TEST(no_such_logical_device_messages)
{
    static const struct {
        const char *devices;
        int visible; /* -1: all */
        const char *says;
    } cases[] = {
        {"", -1, "there are none: no GPU is visible"},
        {"4GiB", 0, "there are none: no GPU is visible"},
        {"4GiB", -1, "there is one, /device:GPU:0)"},
        {"4GiB,4GiB,4GiB", -1, "there are 3, /device:GPU:0 to /device:GPU:2)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gpumem_runtime *rt = sim_runtime(cases[i].devices);
        if (!rt)
            return;
        if (cases[i].visible == 0)
            ASSERT_OK(gpumem_set_visible_devices(rt, NULL, 0));
        /* before initialization, against what the configuration would build */
        ASSERT_EQ(gpumem_reset_memory_stats(rt, 3), GPUMEM_ERR_NO_SUCH_DEVICE);
        ASSERT_CONTAINS(gpumem_last_error(), cases[i].says);
        void *p = NULL;
        ASSERT_EQ(gpumem_malloc(rt, 3, 256, &p), GPUMEM_ERR_NO_SUCH_DEVICE);
        ASSERT_CONTAINS(gpumem_last_error(),
                        "gpumem_malloc(/device:GPU:3): no such logical device");
        ASSERT_CONTAINS(gpumem_last_error(), cases[i].says);
        gpumem_allocator a;
        ASSERT_EQ(gpumem_get_allocator(rt, 3, &a), GPUMEM_ERR_NO_SUCH_DEVICE);
        ASSERT_CONTAINS(gpumem_last_error(),
                        "gpumem_get_allocator(/device:GPU:3): no such logical device");
        ASSERT_CONTAINS(gpumem_last_error(), cases[i].says);
        if (cases[i].devices[0]) {
            ASSERT_OK(gpumem_initialize(rt));
            ASSERT_EQ(gpumem_get_allocator(rt, 3, &a), GPUMEM_ERR_NO_SUCH_DEVICE);
            ASSERT_CONTAINS(gpumem_last_error(), cases[i].says); /* and after */
        }
        gpumem_runtime_destroy(rt);
    }
}

/* With GPU 0 split in two, logical device 1 lies on GPU 0 and GPU 1 is logical
 * device 2: messages name a logical device /device:GPU:k and a physical one GPU:N,
 * so neither can be read as the other. */
TEST(messages_tell_logical_devices_from_physical_gpus)
{
    gpumem_runtime *rt = sim_runtime("1GiB,1GiB");
    if (!rt)
        return;
    gpumem_logical_device_config halves[2] = {GPUMEM_LOGICAL_DEVICE_LIMIT(256u << 20),
                                              {.memory_limit_bytes = 256u << 20}};
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, halves, 2));
    void *p = NULL;
    ASSERT_EQ(gpumem_malloc(rt, 1, 300u << 20, &p), GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_CONTAINS(gpumem_last_error(), "gpumem_malloc(/device:GPU:1, 300.00 MiB): ");
    ASSERT_CONTAINS(gpumem_last_error(), "budget 256.00 MiB");
    ASSERT_EQ(gpumem_set_memory_growth(rt, 1, true), GPUMEM_ERR_ALREADY_INITIALIZED);
    ASSERT_CONTAINS(gpumem_last_error(), "gpumem_set_memory_growth(GPU:1): ");
    ASSERT_OK(gpumem_malloc(rt, 2, 300u << 20, &p)); /* all of GPU 1 */
    ASSERT_EQ(gpumem_free(rt, (char *)p + 256), GPUMEM_ERR_INVALID_POINTER);
    ASSERT_CONTAINS(gpumem_last_error(), "live allocation on /device:GPU:2 ");
    ASSERT_OK(gpumem_free(rt, p));
    gpumem_runtime_destroy(rt);
}

/* A limit or a sum of limits above the GPU's total memory: refused when set,
 * with both numbers (in bytes, decimal) in the message, previous kept. */
TEST(limit_above_total_message)
{
    gpumem_runtime *rt = sim_runtime("MIS-LIM:12GiB");
    if (!rt)
        return;
    const gpumem_logical_device_config prev[2] = {GPUMEM_LOGICAL_DEVICE_LIMIT(1 * GiB),
                                                  GPUMEM_LOGICAL_DEVICE_LIMIT(2 * GiB)};
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, prev, 2));
    char msg[1024];

    gpumem_logical_device_config one = GPUMEM_LOGICAL_DEVICE_LIMIT(13 * GiB);
    ASSERT_STATUS(gpumem_set_logical_device_configuration(rt, 0, &one, 1),
                  GPUMEM_ERR_INVALID_ARGUMENT);
    copy_error(msg, sizeof msg);
    ASSERT_CONTAINS(msg, "13958643712"); /* the limit */
    ASSERT_CONTAINS(msg, "12884901888"); /* the total */

    gpumem_logical_device_config two[2] = {GPUMEM_LOGICAL_DEVICE_LIMIT(8 * GiB),
                                           GPUMEM_LOGICAL_DEVICE_LIMIT(6 * GiB)};
    ASSERT_STATUS(gpumem_set_logical_device_configuration(rt, 0, two, 2),
                  GPUMEM_ERR_INVALID_ARGUMENT);
    copy_error(msg, sizeof msg);
    ASSERT_CONTAINS(msg, "15032385536"); /* the sum */
    ASSERT_CONTAINS(msg, "12884901888"); /* the total */

    gpumem_logical_device_config out[3] = {
        GPUMEM_STRUCT_INIT(gpumem_logical_device_config)};
    size_t count = 0;
    ASSERT_OK(gpumem_get_logical_device_configuration(rt, 0, out, 3, &count));
    ASSERT_EQ(count, 2);
    ASSERT_EQ(out[0].memory_limit_bytes, 1 * GiB);
    ASSERT_EQ(out[1].memory_limit_bytes, 2 * GiB);

    /* Exactly the total is not above it. */
    gpumem_logical_device_config full[2] = {GPUMEM_LOGICAL_DEVICE_LIMIT(4 * GiB),
                                            GPUMEM_LOGICAL_DEVICE_LIMIT(8 * GiB)};
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, full, 2));
    ASSERT_OK(gpumem_get_logical_device_configuration(rt, 0, out, 3, &count));
    ASSERT_EQ(count, 2);
    ASSERT_EQ(out[1].memory_limit_bytes, 8 * GiB);
    gpumem_runtime_destroy(rt);
}

/* ------------------------------------------------------ environment -- */

struct env_case {
    const char *var, *value;
    bool backend_from_env; /* leave opts.backend 0 (the case is about GPUMEM_BACKEND) */
    bool sim_from_env;     /* leave opts.sim_devices NULL */
};

static const struct env_case bad_env[] = {
    {"GPUMEM_MEMORY_FRACTION", "abc", false, false},
    {"GPUMEM_MEMORY_FRACTION", "0.5x", false, false},
    {"GPUMEM_MEMORY_FRACTION", "1.5", false, false},
    {"GPUMEM_MEMORY_FRACTION", "-0.25", false, false},
    {"GPUMEM_MEMORY_FRACTION", "nan", false, false},
    {"GPUMEM_SIM_DEVICES", "12GB", false, true},
    {"GPUMEM_SIM_DEVICES", "TITAN X:12GiB:six", false, true},
    {"GPUMEM_SIM_DEVICES", "12GiB,,4GiB", false, true},
    {"GPUMEM_SIM_DEVICES", "lots", false, true},
    {"GPUMEM_BACKEND", "tpu", true, false},
    {"GPUMEM_FORCE_ALLOW_GROWTH", "maybe", false, false},
    {"TF_FORCE_GPU_ALLOW_GROWTH", "maybe", false, false},
    {"GPUMEM_MIN_SYSTEM_MEMORY_MB", "lots", false, false},
    {"GPUMEM_MIN_SYSTEM_MEMORY_MB", "12abc", false, false},
    {"TF_DEVICE_MIN_SYS_MEMORY_IN_MB", "lots", false, false},
    {"GPUMEM_LOG_LEVEL", "verbose", false, false},
    {"GPUMEM_LOG_LEVEL", "3", false, false},
};

TEST(bad_environment_values)
{
    for (size_t i = 0; i < sizeof bad_env / sizeof bad_env[0]; i++) {
        const struct env_case *e = &bad_env[i];
        clear_env();
        setenv(e->var, e->value, 1);
        if (e->backend_from_env)
            unsetenv("GPUMEM_SIM_DEVICES");
        gpumem_options o;
        ASSERT_OK(gpumem_options_init(&o));
        o.backend = e->backend_from_env ? GPUMEM_BACKEND_FROM_ENV : GPUMEM_BACKEND_SIM;
        o.sim_devices = e->sim_from_env ? NULL : "MIS-ENV:1GiB";
        gpumem_runtime *rt = (gpumem_runtime *)&o; /* sentinel */
        gpumem_status s = gpumem_runtime_create(&o, &rt);
        char msg[1024];
        copy_error(msg, sizeof msg);
        if (s != GPUMEM_ERR_INVALID_ARGUMENT)
            HARNESS_FAIL("%s=\"%s\": gpumem_runtime_create returned %s, expected "
                         "GPUMEM_ERR_INVALID_ARGUMENT (message: %s)",
                         e->var, e->value, gpumem_status_name(s), msg);
        else if (strstr(msg, e->var) == NULL)
            HARNESS_FAIL("%s=\"%s\": message does not name the variable: \"%s\"", e->var,
                         e->value, msg);
        if (s == GPUMEM_OK)
            gpumem_runtime_destroy(rt);
        else if (rt != (gpumem_runtime *)&o)
            HARNESS_FAIL("%s=\"%s\": failed create wrote *out", e->var, e->value);
    }
    clear_env();
}

/* The control: good values of the same variables are accepted. */
TEST(good_environment_values)
{
    clear_env();
    setenv("GPUMEM_BACKEND", "sim", 1);
    setenv("GPUMEM_SIM_DEVICES", "MIS-GOOD:2GiB,MIS-GOOD2:12GiB:7.0", 1);
    setenv("GPUMEM_FORCE_ALLOW_GROWTH", "false", 1);
    setenv("GPUMEM_MEMORY_FRACTION", "0.5", 1);
    setenv("GPUMEM_MIN_SYSTEM_MEMORY_MB", "300", 1);
    gpumem_runtime *rt = NULL;
    ASSERT_OK(gpumem_runtime_create(NULL, &rt));
    clear_env();
    if (!rt)
        return;
    gpumem_physical_device d[3] = {GPUMEM_STRUCT_INIT(gpumem_physical_device)};
    size_t count = 0;
    ASSERT_OK(gpumem_list_physical_devices(rt, d, 3, &count));
    ASSERT_EQ(count, 2);
    ASSERT_STREQ(d[1].model, "MIS-GOOD2");
    ASSERT_EQ(d[1].total_bytes, 12 * GiB);
    double f = 0;
    ASSERT_OK(gpumem_get_memory_fraction(rt, 1, &f));
    ASSERT_TRUE(f == 0.5);
    gpumem_runtime_destroy(rt);
}

/* GPUMEM_OPTIONS_IGNORE_ENVIRONMENT: bad variables do not matter; NULL
 * sim_devices means the default ("16GiB"). */
TEST(ignore_environment_flag)
{
    clear_env();
    setenv("GPUMEM_BACKEND", "tpu", 1);
    setenv("GPUMEM_SIM_DEVICES", "12GB", 1);
    setenv("GPUMEM_MEMORY_FRACTION", "abc", 1);
    setenv("GPUMEM_FORCE_ALLOW_GROWTH", "maybe", 1);
    setenv("GPUMEM_MIN_SYSTEM_MEMORY_MB", "lots", 1);
    gpumem_options o;
    ASSERT_OK(gpumem_options_init(&o));
    o.backend = GPUMEM_BACKEND_SIM;
    o.flags = GPUMEM_OPTIONS_IGNORE_ENVIRONMENT;
    gpumem_runtime *rt = NULL;
    ASSERT_OK(gpumem_runtime_create(&o, &rt));
    clear_env();
    if (!rt)
        return;
    gpumem_physical_device d[2] = {GPUMEM_STRUCT_INIT(gpumem_physical_device)};
    size_t count = 0;
    ASSERT_OK(gpumem_list_physical_devices(rt, d, 2, &count));
    ASSERT_EQ(count, 1);
    ASSERT_EQ(d[0].total_bytes, 16 * GiB);
    bool g = true;
    ASSERT_OK(gpumem_get_memory_growth(rt, 0, &g));
    ASSERT_FALSE(g);
    double f = 1;
    ASSERT_OK(gpumem_get_memory_fraction(rt, 0, &f));
    ASSERT_TRUE(f == 0.0);
    gpumem_runtime_destroy(rt);
}

TEST(bad_options)
{
    clear_env();
    struct {
        const char *what;
        int32_t backend;
        const char *sim;
        const char *needle;
    } cases[] = {
        {"backend 42", 42, "MIS-OPT:1GiB", "backend"},
        {"backend -1", -1, "MIS-OPT:1GiB", "backend"},
        {"sim_devices 12GB", GPUMEM_BACKEND_SIM, "12GB", "sim_devices"},
        {"sim_devices bad compute capability", GPUMEM_BACKEND_SIM, "X:1GiB:x.y",
         "sim_devices"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gpumem_options o;
        ASSERT_OK(gpumem_options_init(&o));
        o.flags = GPUMEM_OPTIONS_IGNORE_ENVIRONMENT;
        o.backend = cases[i].backend;
        o.sim_devices = cases[i].sim;
        gpumem_runtime *rt = NULL;
        gpumem_status s = gpumem_runtime_create(&o, &rt);
        char msg[1024];
        copy_error(msg, sizeof msg);
        if (s != GPUMEM_ERR_INVALID_ARGUMENT)
            HARNESS_FAIL("%s: got %s, expected GPUMEM_ERR_INVALID_ARGUMENT",
                         cases[i].what, gpumem_status_name(s));
        else if (strstr(msg, cases[i].needle) == NULL)
            HARNESS_FAIL("%s: message does not name \"%s\": \"%s\"", cases[i].what,
                         cases[i].needle, msg);
        if (s == GPUMEM_OK)
            gpumem_runtime_destroy(rt);
    }
}

/* ------------------------------------------------------- statuses -- */

TEST(status_strings_and_names)
{
    static const struct {
        gpumem_status s;
        const char *name;
    } all[] = {
        {GPUMEM_OK, "GPUMEM_OK"},
        {GPUMEM_ERR_INVALID_ARGUMENT, "GPUMEM_ERR_INVALID_ARGUMENT"},
        {GPUMEM_ERR_NO_SUCH_DEVICE, "GPUMEM_ERR_NO_SUCH_DEVICE"},
        {GPUMEM_ERR_ALREADY_INITIALIZED, "GPUMEM_ERR_ALREADY_INITIALIZED"},
        {GPUMEM_ERR_OUT_OF_MEMORY, "GPUMEM_ERR_OUT_OF_MEMORY"},
        {GPUMEM_ERR_INVALID_POINTER, "GPUMEM_ERR_INVALID_POINTER"},
        {GPUMEM_ERR_BACKEND, "GPUMEM_ERR_BACKEND"},
        {GPUMEM_ERR_UNSUPPORTED, "GPUMEM_ERR_UNSUPPORTED"},
    };
    const size_t n = sizeof all / sizeof all[0];
    /* The numbers are stable. */
    for (size_t i = 0; i < n; i++)
        ASSERT_EQ(all[i].s, i);
    for (size_t i = 0; i < n; i++) {
        const char *str = gpumem_status_string(all[i].s);
        const char *name = gpumem_status_name(all[i].s);
        ASSERT_TRUE(str != NULL && str[0] != '\0');
        ASSERT_TRUE(name != NULL);
        if (name)
            ASSERT_STREQ(name, all[i].name);
        if (str) {
            if (strcmp(str, "unknown gpumem status") == 0)
                HARNESS_FAIL("status %s has the unknown string", all[i].name);
            for (size_t j = 0; j < i; j++)
                if (strcmp(str, gpumem_status_string(all[j].s)) == 0)
                    HARNESS_FAIL("%s and %s share the string \"%s\"", all[i].name,
                                 all[j].name, str);
        }
    }
    ASSERT_CONTAINS(gpumem_status_string(GPUMEM_ERR_OUT_OF_MEMORY), "out of memory");
    const int unknown[] = {8, 9, 100, -1, INT_MAX, INT_MIN};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        ASSERT_STREQ(gpumem_status_string((gpumem_status)unknown[i]),
                     "unknown gpumem status");
        ASSERT_STREQ(gpumem_status_name((gpumem_status)unknown[i]), "GPUMEM_ERR_UNKNOWN");
    }
}

TEST(free_null_is_noop)
{
    gpumem_runtime *rt = sim_runtime("MIS-FREENULL:1GiB");
    if (!rt)
        return;
    void *p = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, 300, &p));
    gpumem_memory_info before = GPUMEM_STRUCT_INIT(gpumem_memory_info),
                       after = GPUMEM_STRUCT_INIT(gpumem_memory_info);
    ASSERT_OK(gpumem_get_memory_info(rt, 0, &before));
    ASSERT_OK(gpumem_free(rt, NULL));
    ASSERT_OK(gpumem_free(rt, NULL));
    ASSERT_OK(gpumem_get_memory_info(rt, 0, &after));
    ASSERT_TRUE(same_counters(&before, &after));
    ASSERT_EQ(after.num_frees, 0); /* counts non-NULL pointers only */
    ASSERT_OK(gpumem_free(rt, p));
    gpumem_runtime_destroy(rt);
}

TEST(options_init_null)
{
    ASSERT_STATUS(gpumem_options_init(NULL), GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_TRUE(gpumem_last_error()[0] != '\0');
}

/* Failures of one call do not stick: the next good call succeeds, and a success
 * does not clear the message. */
TEST(last_error_survives_success)
{
    gpumem_runtime *rt = sim_runtime("MIS-LASTERR:1GiB");
    if (!rt)
        return;
    ASSERT_STATUS(gpumem_set_memory_fraction(rt, 0, 3.0), GPUMEM_ERR_INVALID_ARGUMENT);
    char first[1024];
    copy_error(first, sizeof first);
    ASSERT_TRUE(first[0] != '\0');
    bool g;
    ASSERT_OK(gpumem_get_memory_growth(rt, 0, &g));
    ASSERT_STREQ(gpumem_last_error(), first);
    ASSERT_OK(gpumem_set_memory_fraction(rt, 0, 1.0));
    gpumem_runtime_destroy(rt);
}

/* A runtime's pointers after its destruction are not another runtime's. */
TEST(destroyed_runtimes_pointer)
{
    gpumem_runtime *a = sim_runtime("MIS-DESTROY-A:1GiB");
    gpumem_runtime *b = sim_runtime("MIS-DESTROY-B:1GiB");
    if (!a || !b) {
        gpumem_runtime_destroy(a);
        gpumem_runtime_destroy(b);
        return;
    }
    void *p = NULL;
    ASSERT_OK(gpumem_malloc(a, 0, 4096, &p));
    gpumem_runtime_destroy(a);
    ASSERT_STATUS(gpumem_free(b, p), GPUMEM_ERR_INVALID_POINTER);
    gpumem_memory_info mi = GPUMEM_STRUCT_INIT(gpumem_memory_info);
    ASSERT_OK(gpumem_get_memory_info(b, 0, &mi));
    ASSERT_EQ(mi.num_frees, 0);
    gpumem_runtime_destroy(b);
}

/* "Nothing aborts or prints on bad input": stdout and stderr stay empty while
 * a batch of bad calls runs. */
TEST(nothing_printed_on_bad_input)
{
    clear_env();
    gpumem_runtime *rt = sim_runtime("MIS-QUIET:1GiB");
    if (!rt)
        return;
    FILE *tmp = tmpfile();
    if (!tmp) {
        HARNESS_FAIL("tmpfile");
        gpumem_runtime_destroy(rt);
        return;
    }
    fflush(stdout);
    fflush(stderr);
    int saved_out = dup(1), saved_err = dup(2);
    dup2(fileno(tmp), 1);
    dup2(fileno(tmp), 2);

    gpumem_status got[12];
    int n = 0;
    void *p = NULL;
    char local[64];
    got[n++] = gpumem_set_memory_fraction(rt, 0, NAN);
    got[n++] = gpumem_set_memory_growth(rt, 9, true);
    got[n++] = gpumem_list_physical_devices(rt, NULL, 0, NULL);
    got[n++] = gpumem_malloc(rt, 0, 256, NULL);
    got[n++] = gpumem_malloc(rt, 0, SIZE_MAX, &p);
    got[n++] = gpumem_malloc(rt, 5, 256, &p);
    got[n++] = gpumem_free(rt, local);
    gpumem_initialize(rt);
    got[n++] = gpumem_set_memory_growth(rt, 0, true); /* after initialization */
    setenv("GPUMEM_MEMORY_FRACTION", "abc", 1);
    gpumem_options o;
    gpumem_options_init(&o);
    o.backend = GPUMEM_BACKEND_SIM;
    o.sim_devices = "MIS-QUIET-2:1GiB";
    gpumem_runtime *bad = NULL;
    got[n++] = gpumem_runtime_create(&o, &bad);
    unsetenv("GPUMEM_MEMORY_FRACTION");
    got[n++] = gpumem_options_init(NULL);

    fflush(stdout);
    fflush(stderr);
    dup2(saved_out, 1);
    dup2(saved_err, 2);
    close(saved_out);
    close(saved_err);
    long size = -1;
    if (fseek(tmp, 0, SEEK_END) == 0)
        size = ftell(tmp);
    if (size != 0) {
        char text[512] = "";
        rewind(tmp);
        size_t r = fread(text, 1, sizeof text - 1, tmp);
        text[r] = '\0';
        HARNESS_FAIL("the library printed %ld bytes on bad input: \"%s\"", size, text);
    }
    fclose(tmp);
    const gpumem_status want[] = {
        GPUMEM_ERR_INVALID_ARGUMENT, GPUMEM_ERR_NO_SUCH_DEVICE,
        GPUMEM_ERR_INVALID_ARGUMENT, GPUMEM_ERR_INVALID_ARGUMENT,
        GPUMEM_ERR_OUT_OF_MEMORY,    GPUMEM_ERR_NO_SUCH_DEVICE,
        GPUMEM_ERR_INVALID_POINTER,  GPUMEM_ERR_ALREADY_INITIALIZED,
        GPUMEM_ERR_INVALID_ARGUMENT, GPUMEM_ERR_INVALID_ARGUMENT,
    };
    ASSERT_EQ(n, sizeof want / sizeof want[0]);
    for (int i = 0; i < n; i++)
        if (got[i] != want[i])
            HARNESS_FAIL("quiet call %d: got %s, expected %s", i,
                         gpumem_status_name(got[i]), gpumem_status_name(want[i]));
    if (got[8] == GPUMEM_OK)
        gpumem_runtime_destroy(bad);
    gpumem_runtime_destroy(rt);
}

/* gpumem_cuda_device_logical: a framework's CUDA ordinal is a physical index,
 * served by the first logical device on that GPU; a hidden GPU or a number past
 * the last is refused, and so are a NULL `logical` and a handle that is not a
 * runtime's, without initializing anything. */
TEST(cuda_device_logical_maps_ordinals_to_first_logical_devices)
{
    clear_env();
    gpumem_runtime *rt = sim_runtime("MIS-ORD-A:1GiB,MIS-ORD-B:1GiB,MIS-ORD-C:1GiB");
    if (!rt)
        return;
    int logical = -7;
    ASSERT_STATUS(gpumem_cuda_device_logical(rt, 0, NULL), GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(gpumem_last_error(), "`logical` is NULL");
    uint64_t junk[64] = {0};
    ASSERT_STATUS(gpumem_cuda_device_logical((gpumem_runtime *)junk, 0, &logical),
                  GPUMEM_ERR_INVALID_ARGUMENT);
    bool initialized = true;
    ASSERT_OK(gpumem_is_initialized(rt, &initialized));
    ASSERT_FALSE(initialized);
    ASSERT_EQ(logical, -7);

    gpumem_logical_device_config halves[2] = {GPUMEM_LOGICAL_DEVICE_LIMIT(256 * MiB),
                                              GPUMEM_LOGICAL_DEVICE_LIMIT(256 * MiB)};
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, halves, 2));
    int visible[] = {0, 2};
    ASSERT_OK(gpumem_set_visible_devices(rt, visible, 2));
    ASSERT_OK(gpumem_cuda_device_logical(rt, 2, &logical)); /* GPU 2: /device:GPU:2 */
    ASSERT_EQ(logical, 2);
    ASSERT_OK(gpumem_is_initialized(rt, &initialized));
    ASSERT_TRUE(initialized);
    ASSERT_OK(gpumem_cuda_device_logical(rt, 0, &logical)); /* GPU 0's first half */
    ASSERT_EQ(logical, 0);
    logical = -7;
    ASSERT_STATUS(gpumem_cuda_device_logical(rt, 1, &logical), GPUMEM_ERR_NO_SUCH_DEVICE);
    ASSERT_STREQ(gpumem_last_error(),
                 "gpumem_cuda_device_logical(GPU:1): GPU:1 is hidden by "
                 "gpumem_set_visible_devices, so it has no logical device");
    for (int bad = -1; bad <= 3; bad += 4) {
        ASSERT_STATUS(gpumem_cuda_device_logical(rt, bad, &logical),
                      GPUMEM_ERR_NO_SUCH_DEVICE);
        ASSERT_CONTAINS(gpumem_last_error(), "no such GPU (there are 3)");
    }
    ASSERT_EQ(logical, -7);
    gpumem_runtime_destroy(rt);
}

/* A refused free says why: a pointer that is not the runtime's, or one inside a pool
 * that is not (or no longer) an allocation's start; the same with one pool, whose
 * arena alone checks a free, and with two, routed by the region map. */
TEST(refused_frees_say_why_with_one_pool_and_with_two)
{
    static const char not_ours[] =
        "not a pointer returned by gpumem_malloc of this runtime";
    static const char not_start[] = "not the start of a live allocation on /device:GPU:";
    gpumem_runtime *other = sim_runtime("WHY-OTHER:1GiB");
    void *others = NULL;
    ASSERT_OK(gpumem_malloc(other, 0, 4096, &others));
    for (size_t pools = 1; pools <= 2; pools++) {
        gpumem_runtime *rt = sim_runtime("WHY:4GiB");
        gpumem_logical_device_config cfg[2] = {GPUMEM_LOGICAL_DEVICE_LIMIT(1 * GiB),
                                               GPUMEM_LOGICAL_DEVICE_LIMIT(1 * GiB)};
        ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, cfg, pools));
        void *p = NULL, *q = NULL;
        ASSERT_OK(gpumem_malloc(rt, 0, 4096, &p));
        ASSERT_OK(gpumem_malloc(rt, (int)pools - 1, 4096, &q));
        int local = 0;
        void *host = malloc(64);
        const struct {
            void *ptr;
            const char *says;
        } cases[] = {
            {(char *)p + 256, not_start},
            {(char *)q + 1, not_start},
            {others, not_ours},
            {&local, not_ours},
            {host, not_ours},
            {(void *)(uintptr_t)256, not_ours},
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            ASSERT_STATUS(gpumem_free(rt, cases[i].ptr), GPUMEM_ERR_INVALID_POINTER);
            ASSERT_CONTAINS(gpumem_last_error(), cases[i].says);
        }
        ASSERT_OK(gpumem_free(rt, q));
        ASSERT_STATUS(gpumem_free(rt, q), GPUMEM_ERR_INVALID_POINTER); /* twice */
        ASSERT_CONTAINS(gpumem_last_error(), not_start);
        ASSERT_OK(gpumem_free(rt, p));
        free(host);
        gpumem_runtime_destroy(rt);
    }
    ASSERT_OK(gpumem_free(other, others));
    gpumem_runtime_destroy(other);
}

int main(void)
{
    clear_env();
    RUN(status_strings_and_names);
    RUN(options_init_null);
    RUN(a_refused_fraction_is_shown_exactly);
    RUN(no_such_logical_device_messages);
    RUN(messages_tell_logical_devices_from_physical_gpus);
    RUN(serving_misuse_table);
    RUN(configuration_misuse_table);
    RUN(limit_above_total_message);
    RUN(free_null_is_noop);
    RUN(last_error_survives_success);
    RUN(destroyed_runtimes_pointer);
    RUN(cuda_device_logical_maps_ordinals_to_first_logical_devices);
    RUN(refused_frees_say_why_with_one_pool_and_with_two);
    RUN(bad_options);
    RUN(bad_environment_values);
    RUN(good_environment_values);
    RUN(ignore_environment_flag);
    RUN(nothing_printed_on_bad_input);
    HARNESS_EXIT();
}
