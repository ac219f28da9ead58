/* Public-API tests of the idle release (GPUMEM_GROWTH_IDLE_RELEASE_MS, issue 31
 * item 3): a growing pool that makes no allocation and no free for the period
 * gives its free memory back, live memory untouched; a busy pool, a greedy one,
 * one during a graph capture and one with the release off keep theirs; destroying a
 * runtime does not wait for the period; a forked child's destroy returns. Written from
 * README's row of the variable and include/gpumem.h. The periods are short (100-300 ms)
 * and every wait for a release polls up to a bound many times the period, so that a slow
 * machine (sanitizers) only makes the test wait longer, never fail. */
#include "gpumem.h"
#include "harness.h"
#include "api_util.h"
#include "fork_util.h"

#include <stdint.h>
#include <string.h>
#include <time.h>

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* A runtime over one simulated GPU of 4 GiB whose idle release waits `ms`
 * ("0": never), growth on or off, initialized. */
static gpumem_runtime *idle_runtime(const char *ms, bool growth)
{
    clear_env();
    setenv("GPUMEM_GROWTH_IDLE_RELEASE_MS", ms, 1);
    gpumem_runtime *rt = env_runtime("IDLE:4GiB");
    unsetenv("GPUMEM_GROWTH_IDLE_RELEASE_MS");
    if (!rt)
        return NULL;
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, growth));
    ASSERT_OK(gpumem_initialize(rt));
    return rt;
}

/* cuMemUnmap calls the GPU was asked for so far. */
static uint64_t unmaps(gpumem_runtime *rt)
{
    gpumem_driver_call c[64];
    size_t n = 0;
    memset(c, 0, sizeof c);
    c[0].struct_size = sizeof c[0];
    ASSERT_OK(gpumem_list_driver_calls(rt, 0, c, 64, &n));
    for (size_t i = 0; i < n && i < 64; i++)
        if (strcmp(c[i].name, "cuMemUnmap") == 0)
            return c[i].calls;
    HARNESS_FAIL("no cuMemUnmap among %zu driver calls", n);
    return 0;
}

/* Waits up to `limit_ms` for the pool's reserved bytes to fall to `at_most`;
 * returns them. Reading the memory info is no activity. */
static uint64_t reserved_within(gpumem_runtime *rt, uint64_t at_most, unsigned limit_ms)
{
    uint64_t until = now_ms() + limit_ms, r;
    while ((r = info_of(rt, 0).reserved_bytes) > at_most && now_ms() < until)
        sleep_ms(10);
    return r;
}

static void fill(void *p, size_t n, unsigned char v) { memset(p, v, n); }

static bool holds(const void *p, size_t n, unsigned char v)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != v)
            return false;
    return true;
}

TEST(an_idle_pool_gives_its_free_memory_back)
{
    gpumem_runtime *rt = idle_runtime("100", true);
    if (!rt)
        return;
    void *a = NULL, *b = NULL, *c = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, 64 * MiB, &a));
    ASSERT_OK(gpumem_malloc(rt, 0, 64 * MiB, &b));
    ASSERT_OK(gpumem_malloc(rt, 0, 32 * MiB, &c));
    fill(a, 64 * MiB, 0xa5);
    fill(c, 32 * MiB, 0x5a);
    ASSERT_OK(gpumem_free(rt, b)); /* a hole of 64 MiB between two live blocks */
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 160 * MiB);
    /* the hole goes back once the pool has been idle for the period */
    ASSERT_EQ(reserved_within(rt, 96 * MiB, 5000), 96 * MiB);
    ASSERT_TRUE(holds(a, 64 * MiB, 0xa5));
    ASSERT_TRUE(holds(c, 32 * MiB, 0x5a));
    /* released once: idle on, it unmaps nothing more */
    uint64_t after = unmaps(rt);
    sleep_ms(400);
    ASSERT_EQ(unmaps(rt), after);
    /* used again, it maps what it needs, then goes back when idle again */
    ASSERT_OK(gpumem_malloc(rt, 0, 64 * MiB, &b));
    fill(b, 64 * MiB, 0x3c);
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 160 * MiB);
    ASSERT_OK(gpumem_free(rt, a));
    ASSERT_OK(gpumem_free(rt, b));
    ASSERT_EQ(reserved_within(rt, 32 * MiB, 5000), 32 * MiB);
    ASSERT_TRUE(holds(c, 32 * MiB, 0x5a));
    ASSERT_EQ(info_of(rt, 0).current_bytes, 32 * MiB);
    ASSERT_OK(gpumem_free(rt, c));
    ASSERT_EQ(reserved_within(rt, 0, 5000), 0);
    gpumem_runtime_destroy(rt);
}

/* A pool that allocates or frees more often than the period keeps its memory:
 * no unmapping while it works, however long. */
TEST(a_busy_pool_keeps_its_memory)
{
    gpumem_runtime *rt = idle_runtime("300", true);
    if (!rt)
        return;
    void *p = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, 64 * MiB, &p));
    ASSERT_OK(gpumem_free(rt, p));
    uint64_t before = unmaps(rt), start = now_ms();
    unsigned rounds = 0;
    /* at least five periods, with a call every 10 ms; a slow spell of the machine
     * longer than the period would be idleness, so the check is of the unmaps
     * made while the loop's calls came close together */
    uint64_t longest_gap = 0, last = now_ms();
    while (now_ms() - start < 1500) {
        ASSERT_OK(gpumem_malloc(rt, 0, 64 * MiB, &p));
        ASSERT_OK(gpumem_free(rt, p));
        uint64_t t = now_ms();
        if (t - last > longest_gap)
            longest_gap = t - last;
        last = t;
        sleep_ms(10);
        rounds++;
    }
    if (longest_gap < 200)
        ASSERT_EQ(unmaps(rt), before);
    else
        printf("  (a gap of %llu ms between calls: the machine stalled; not checked)\n",
               (unsigned long long)longest_gap);
    ASSERT_TRUE(rounds > 10);
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 64 * MiB);
    /* and once it stops, it gives back */
    ASSERT_EQ(reserved_within(rt, 0, 5000), 0);
    gpumem_runtime_destroy(rt);
}

/* Not before the period: idle for two thirds of it, the pool still has it all. */
TEST(not_before_the_period)
{
    gpumem_runtime *rt = idle_runtime("1500", true);
    if (!rt)
        return;
    void *p = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, 64 * MiB, &p));
    ASSERT_OK(gpumem_free(rt, p));
    sleep_ms(1000);
    ASSERT_EQ(unmaps(rt), 0);
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 64 * MiB);
    ASSERT_EQ(reserved_within(rt, 0, 8000), 0);
    gpumem_runtime_destroy(rt);
}

/* While a CUDA graph is captured (gpumem_stream_capture), the idle release
 * makes no driver call, which could break the capture; it gives back at its
 * first look after the capture ends. */
TEST(no_release_during_a_capture)
{
    gpumem_runtime *rt = idle_runtime("100", true);
    if (!rt)
        return;
    void *p = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, 64 * MiB, &p));
    ASSERT_OK(gpumem_free(rt, p));
    ASSERT_OK(gpumem_stream_capture(true));
    sleep_ms(600);
    ASSERT_EQ(unmaps(rt), 0);
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 64 * MiB);
    ASSERT_OK(gpumem_stream_capture(false));
    ASSERT_EQ(reserved_within(rt, 0, 5000), 0);
    gpumem_runtime_destroy(rt);
}

TEST(zero_never_releases)
{
    gpumem_runtime *rt = idle_runtime("0", true);
    if (!rt)
        return;
    void *p = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, 64 * MiB, &p));
    ASSERT_OK(gpumem_free(rt, p));
    sleep_ms(500);
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 64 * MiB);
    ASSERT_EQ(unmaps(rt), 0);
    gpumem_runtime_destroy(rt);
}

/* A greedy pool keeps its budget, as TensorFlow's does. */
TEST(a_greedy_pool_keeps_its_budget)
{
    gpumem_runtime *rt = idle_runtime("50", false);
    if (!rt)
        return;
    uint64_t budget = info_of(rt, 0).reserved_bytes;
    ASSERT_TRUE(budget > 0);
    void *p = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, 64 * MiB, &p));
    ASSERT_OK(gpumem_free(rt, p));
    sleep_ms(400);
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, budget);
    gpumem_runtime_destroy(rt);
}

/* Destroying a runtime wakes the idle release's thread: it does not wait for
 * the next look (a quarter of a period of a minute here). */
TEST(destroy_does_not_wait_for_the_period)
{
    gpumem_runtime *rt = idle_runtime("60000", true);
    if (!rt)
        return;
    void *p = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, 8 * MiB, &p));
    ASSERT_OK(gpumem_free(rt, p));
    uint64_t t0 = now_ms();
    gpumem_runtime_destroy(rt);
    ASSERT_LE(now_ms() - t0, 5000);
}

static void child_destroys(void *arg)
{
    gpumem_runtime *rt = arg;
    void *p = NULL;
    ASSERT_STATUS(gpumem_malloc(rt, 0, MiB, &p), GPUMEM_ERR_UNSUPPORTED);
    gpumem_runtime_destroy(rt); /* the copy only: the thread is the parent's */
}

/* A forked child's copy of a runtime with an idle release: its destroy returns
 * (no join of a thread the child does not have), and the parent's release goes
 * on. */
TEST(a_forked_child_forgets_the_idle_release)
{
    gpumem_runtime *rt = idle_runtime("100", true);
    if (!rt)
        return;
    void *p = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, 16 * MiB, &p));
    ASSERT_OK(gpumem_free(rt, p));
    in_child("a_forked_child_forgets_the_idle_release", child_destroys, rt, 10);
    ASSERT_EQ(reserved_within(rt, 0, 5000), 0);
    gpumem_runtime_destroy(rt);
}

int main(void)
{
    RUN(an_idle_pool_gives_its_free_memory_back);
    RUN(a_busy_pool_keeps_its_memory);
    RUN(not_before_the_period);
    RUN(no_release_during_a_capture);
    RUN(zero_never_releases);
    RUN(a_greedy_pool_keeps_its_budget);
    RUN(destroy_does_not_wait_for_the_period);
    RUN(a_forked_child_forgets_the_idle_release);
    HARNESS_EXIT();
}
