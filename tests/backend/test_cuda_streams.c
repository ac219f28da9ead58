/* Stream-ordered allocation on the CUDA backend over the driver double, whose
 * events a test holds unfinished (fakecuda_hold_stream) and then lets complete:
 * a block freed on a stream goes back at once to that stream, to no other until
 * its work completes, then to any; a growing pool takes new memory rather than
 * wait, and when memory is short (no room to grow) a request waits for the
 * oldest pending block instead of failing (plain gpumem_malloc too);
 * events are pooled; every event call's failure is reported and never hands out
 * memory whose work may still run; the counters; release, destroy and fork with
 * pending blocks; threads. */
#include "cuda_util.h"
#include "fork_util.h"

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#define T4 "Tesla T4:15GiB:7.5"

static void *const S1 = (void *)0x5151; /* stream handles: any pointer to the double */
static void *const S2 = (void *)0x5252;

/* A CUDA runtime whose logical device 0 has `limit` bytes, greedy (growth false:
 * one region of the whole budget) or growing. */
static gpumem_runtime *limited(uint64_t limit, bool growth)
{
    gpumem_runtime *rt = cuda_runtime();
    if (!rt)
        return NULL;
    gpumem_logical_device_config cfg = GPUMEM_LOGICAL_DEVICE_LIMIT(limit);
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, &cfg, 1));
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, growth));
    ASSERT_OK(gpumem_initialize(rt));
    return rt;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Lets a held stream's work complete after `ms` milliseconds, from another thread. */
struct releaser {
    pthread_t thread;
    void *stream;
    unsigned ms;
};

static void *release_later(void *arg)
{
    struct releaser *r = arg;
    usleep(r->ms * 1000u);
    fakecuda_release_stream(r->stream);
    return NULL;
}

static void release_after(struct releaser *r, void *stream, unsigned ms)
{
    r->stream = stream;
    r->ms = ms;
    if (pthread_create(&r->thread, NULL, release_later, r) != 0)
        HARNESS_FAIL("pthread_create failed");
}

/* ------------------------------------------------------------ the rule -- */

TEST(a_block_goes_back_to_its_own_stream_at_once)
{
    fresh_driver(T4);
    gpumem_runtime *rt = limited(64 * MiB, true);
    if (!rt)
        return;
    void *p = NULL, *q = NULL;
    ASSERT_OK(gpumem_malloc_async(rt, 0, 1 * MiB, S1, &p));
    fakecuda_hold_stream(S1); /* a kernel still runs on S1 */
    ASSERT_OK(gpumem_free_async(rt, p, S1));
    ASSERT_EQ(fakecuda_events_incomplete(), 1);
    ASSERT_OK(gpumem_malloc_async(rt, 0, 1 * MiB, S1, &q));
    ASSERT_TRUE(q == p); /* S1 runs its work in order: safe at once */
    /* a little smaller still fits (within a quarter); much smaller does not */
    ASSERT_OK(gpumem_free_async(rt, q, S1));
    ASSERT_OK(gpumem_malloc_async(rt, 0, 900 * KiB, S1, &q));
    ASSERT_TRUE(q == p);
    ASSERT_OK(gpumem_free_async(rt, q, S1));
    ASSERT_OK(gpumem_malloc_async(rt, 0, 256 * KiB, S1, &q));
    ASSERT_TRUE(q != p);
    gpumem_memory_info mi = info_of(rt, 0);
    ASSERT_EQ(mi.current_bytes, 256 * KiB); /* p is pending: not in use */
    ASSERT_EQ(mi.num_allocs, 4);
    ASSERT_EQ(mi.num_frees, 3);
    fakecuda_release_stream(S1);
    ASSERT_OK(gpumem_free_async(rt, q, S1));
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

TEST(another_stream_does_not_get_a_block_whose_work_still_runs)
{
    fresh_driver(T4);
    gpumem_runtime *rt = limited(64 * MiB, true);
    if (!rt)
        return;
    void *p = NULL, *q = NULL, *r = NULL;
    ASSERT_OK(gpumem_malloc_async(rt, 0, 256 * MiB / 16, S1, &p)); /* 16 MiB */
    gpumem_memory_info before = info_of(rt, 0);
    fakecuda_hold_stream(S1);
    ASSERT_OK(gpumem_free_async(rt, p, S1));
    gpumem_memory_info pending = info_of(rt, 0);
    ASSERT_EQ(pending.current_bytes, 0);
    ASSERT_EQ(pending.reserved_bytes, before.reserved_bytes);
    ASSERT_EQ(pending.largest_free_block, before.largest_free_block); /* not free */
    /* issue 21's report: the next tensor of that size on S2 must not get it */
    ASSERT_OK(gpumem_malloc_async(rt, 0, 16 * MiB, S2, &q));
    ASSERT_TRUE(q != p);
    ASSERT_OK(gpumem_malloc(rt, 0, 16 * MiB, &r)); /* nor a plain allocation */
    ASSERT_TRUE(r != p);
    /* a double free, either way, is refused and changes nothing */
    ASSERT_STATUS(gpumem_free_async(rt, p, S1), GPUMEM_ERR_INVALID_POINTER);
    ASSERT_CONTAINS(gpumem_last_error(), "already freed on /device:GPU:0 (by "
                                         "gpumem_free_async");
    ASSERT_STATUS(gpumem_free(rt, p), GPUMEM_ERR_INVALID_POINTER);
    ASSERT_STATUS(gpumem_free_async(rt, (char *)q + 256, S2), GPUMEM_ERR_INVALID_POINTER);
    ASSERT_EQ(info_of(rt, 0).current_bytes, 32 * MiB);
    fakecuda_release_stream(S1);
    ASSERT_OK(gpumem_free(rt, q));
    ASSERT_OK(gpumem_free_async(rt, r, S2));
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

TEST(a_completed_block_goes_to_any_stream)
{
    fresh_driver(T4);
    gpumem_runtime *rt = limited(4 * MiB, false); /* greedy: one region, no growth */
    if (!rt)
        return;
    void *p = NULL, *q = NULL;
    ASSERT_OK(gpumem_malloc_async(rt, 0, 4 * MiB, S1, &p)); /* the whole pool */
    fakecuda_hold_stream(S1);
    ASSERT_OK(gpumem_free_async(rt, p, S1));
    fakecuda_release_stream(S1);
    ASSERT_OK(gpumem_malloc_async(rt, 0, 4 * MiB, S2, &q));
    ASSERT_TRUE(q == p);
    ASSERT_EQ(fakecuda_calls("cuEventSynchronize"), 0); /* found done, not waited */
    ASSERT_OK(gpumem_free_async(rt, q, S2));
    ASSERT_OK(gpumem_malloc(rt, 0, 4 * MiB, &p)); /* and to a plain allocation */
    ASSERT_TRUE(q == p);
    ASSERT_OK(gpumem_free(rt, p));
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

/* ---------------------------------------------------- memory is short -- */

static void waits_for_the_oldest(bool plain)
{
    fresh_driver(T4);
    gpumem_runtime *rt = limited(4 * MiB, false);
    if (!rt)
        return;
    void *a = NULL, *b = NULL, *q = NULL;
    ASSERT_OK(gpumem_malloc_async(rt, 0, 2 * MiB, S1, &a));
    ASSERT_OK(gpumem_malloc_async(rt, 0, 2 * MiB, S1, &b));
    fakecuda_hold_stream(S1);
    ASSERT_OK(gpumem_free_async(rt, a, S1));
    ASSERT_OK(gpumem_free_async(rt, b, S1));
    struct releaser rel;
    release_after(&rel, S1, 150);
    double t0 = now_ms();
    gpumem_status s = plain ? gpumem_malloc(rt, 0, 4 * MiB, &q)
                            : gpumem_malloc_async(rt, 0, 4 * MiB, S2, &q);
    double waited = now_ms() - t0;
    pthread_join(rel.thread, NULL);
    ASSERT_OK(s);
    ASSERT_TRUE(q == (a < b ? a : b)); /* both waited for, coalesced, handed out */
    ASSERT_TRUE(waited >= 100);
    ASSERT_EQ(fakecuda_calls("cuEventSynchronize"), 2);
    gpumem_memory_info mi = info_of(rt, 0);
    ASSERT_EQ(mi.num_ooms, 0);
    ASSERT_EQ(mi.current_bytes, 4 * MiB);
    ASSERT_OK(gpumem_free(rt, q));
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

TEST(when_memory_is_short_malloc_async_waits_for_the_oldest_pending_block)
{
    waits_for_the_oldest(false);
}

TEST(when_memory_is_short_plain_malloc_waits_too) { waits_for_the_oldest(true); }

/* A growing pool with room in its budget takes new memory rather than wait for
 * another stream's work (issue 21's 256 MiB tensors, scaled down); at its budget,
 * it waits. */
TEST(a_growing_pool_grows_rather_than_wait_and_waits_at_its_budget)
{
    fresh_driver(T4);
    gpumem_runtime *rt = limited(128 * MiB, true);
    if (!rt)
        return;
    void *p = NULL, *q = NULL, *r = NULL;
    ASSERT_OK(gpumem_malloc_async(rt, 0, 64 * MiB, S1, &p));
    uint64_t reserved = info_of(rt, 0).reserved_bytes;
    fakecuda_hold_stream(S1);
    ASSERT_OK(gpumem_free_async(rt, p, S1));
    ASSERT_OK(gpumem_malloc_async(rt, 0, 64 * MiB, S2, &q));
    ASSERT_TRUE(q != p);
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 2 * reserved);
    ASSERT_EQ(fakecuda_calls("cuEventSynchronize"), 0);
    struct releaser rel;
    release_after(&rel, S1, 50);
    ASSERT_OK(gpumem_malloc_async(rt, 0, 64 * MiB, S2, &r)); /* the budget is full */
    pthread_join(rel.thread, NULL);
    ASSERT_TRUE(r == p);
    ASSERT_EQ(fakecuda_calls("cuEventSynchronize"), 1);
    ASSERT_EQ(info_of(rt, 0).num_ooms, 0);
    ASSERT_OK(gpumem_free_async(rt, q, S2));
    ASSERT_OK(gpumem_free_async(rt, r, S2));
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

/* Out of memory only when nothing is pending any more, after the waits. */
TEST(out_of_memory_comes_after_every_wait)
{
    fresh_driver(T4);
    gpumem_runtime *rt = limited(4 * MiB, false);
    if (!rt)
        return;
    void *a = NULL, *b = NULL, *q = NULL;
    ASSERT_OK(gpumem_malloc_async(rt, 0, 2 * MiB, S1, &a));
    ASSERT_OK(gpumem_malloc_async(rt, 0, 2 * MiB, S1, &b));
    ASSERT_OK(gpumem_free_async(rt, a, S1)); /* completes at once */
    ASSERT_STATUS(gpumem_malloc_async(rt, 0, 4 * MiB, S2, &q), GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_CONTAINS(gpumem_last_error(), "gpumem_malloc_async(/device:GPU:0, 4.00 MiB, "
                                         "stream 0x5252): out of memory");
    ASSERT_EQ(info_of(rt, 0).num_ooms, 1);
    ASSERT_OK(gpumem_malloc_async(rt, 0, 2 * MiB, S2, &q)); /* a's memory is free */
    ASSERT_TRUE(q == a);                                    /* the only free chunk */
    ASSERT_OK(gpumem_free(rt, q));
    ASSERT_OK(gpumem_free(rt, b));
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

/* ------------------------------------------------------------- events -- */

TEST(events_are_pooled_not_made_per_free)
{
    fresh_driver(T4);
    gpumem_runtime *rt = limited(64 * MiB, true);
    if (!rt)
        return;
    void *p[4];
    for (int warm = 0; warm < 2; warm++) {
        for (int i = 0; i < 4; i++)
            ASSERT_OK(gpumem_malloc_async(rt, 0, 1 * MiB, i % 2 ? S1 : S2, &p[i]));
        for (int i = 0; i < 4; i++)
            ASSERT_OK(gpumem_free_async(rt, p[i], i % 2 ? S1 : S2));
    }
    unsigned long made = fakecuda_calls("cuEventCreate");
    ASSERT_LE(made, 4);
    for (int round = 0; round < 200; round++) {
        for (int i = 0; i < 4; i++)
            ASSERT_OK(gpumem_malloc_async(rt, 0, (size_t)(i + 1) * MiB, i % 2 ? S1 : S2,
                                          &p[i]));
        for (int i = 0; i < 4; i++)
            ASSERT_OK(gpumem_free_async(rt, p[i], i % 2 ? S1 : S2));
    }
    ASSERT_LE(fakecuda_calls("cuEventCreate"), made + 4); /* pooled after warm-up */
    ASSERT_EQ(fakecuda_calls("cuEventRecord"), 8 + 800);
    struct fakecuda_live live;
    fakecuda_live(&live);
    ASSERT_EQ(live.events, fakecuda_calls("cuEventCreate"));
    gpumem_runtime_destroy(rt);
    check_driver_clean(0); /* every event destroyed */
}

TEST(a_free_whose_event_cannot_be_made_or_recorded_changes_nothing)
{
    fresh_driver(T4);
    gpumem_runtime *rt = limited(4 * MiB, false);
    if (!rt)
        return;
    void *p = NULL, *q = NULL;
    ASSERT_OK(gpumem_malloc_async(rt, 0, 4 * MiB, S1, &p));
    fakecuda_fail_nth("cuEventCreate", 1, CUDA_ERROR_LAUNCH_FAILED);
    ASSERT_STATUS(gpumem_free_async(rt, p, S1), GPUMEM_ERR_BACKEND);
    ASSERT_CONTAINS(gpumem_last_error(), "gpumem_free_async(");
    ASSERT_CONTAINS(gpumem_last_error(), "cuEventCreate on GPU:0 failed: "
                                         "CUDA_ERROR_LAUNCH_FAILED");
    fakecuda_fail_nth("cuEventCreate", 1, CUDA_ERROR_OUT_OF_MEMORY);
    ASSERT_STATUS(gpumem_free_async(rt, p, S1), GPUMEM_ERR_OUT_OF_MEMORY);
    fakecuda_fail_nth("cuEventRecord", 1, CUDA_ERROR_LAUNCH_FAILED);
    ASSERT_STATUS(gpumem_free_async(rt, p, S1), GPUMEM_ERR_BACKEND);
    ASSERT_CONTAINS(gpumem_last_error(), "cuEventRecord(stream 0x5151) on GPU:0 failed");
    /* still the caller's, in use, and handed to nobody */
    gpumem_memory_info mi = info_of(rt, 0);
    ASSERT_EQ(mi.current_bytes, 4 * MiB);
    ASSERT_EQ(mi.num_frees, 0);
    ASSERT_STATUS(gpumem_malloc_async(rt, 0, 4 * MiB, S1, &q), GPUMEM_ERR_OUT_OF_MEMORY);
    /* the event made for the refused record is kept for the next free */
    unsigned long made = fakecuda_calls("cuEventCreate");
    ASSERT_OK(gpumem_free_async(rt, p, S1));
    ASSERT_EQ(fakecuda_calls("cuEventCreate"), made);
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

TEST(a_failed_query_keeps_the_block_pending)
{
    fresh_driver(T4);
    gpumem_runtime *rt = limited(4 * MiB, false);
    if (!rt)
        return;
    void *p = NULL, *q = NULL;
    ASSERT_OK(gpumem_malloc_async(rt, 0, 2 * MiB, S1, &p));
    ASSERT_OK(gpumem_malloc_async(rt, 0, 2 * MiB, S2, &q));
    void *base = p < q ? p : q;
    fakecuda_hold_stream(S1);
    ASSERT_OK(gpumem_free_async(rt, p, S1));
    fakecuda_release_stream(S1); /* done, but the driver fails to say so */
    fakecuda_fail_nth("cuEventQuery", 1, CUDA_ERROR_LAUNCH_FAILED);
    ASSERT_OK(gpumem_free_async(rt, q, S2)); /* its look at p's event fails */
    ASSERT_CONTAINS(log_text, "stays pending: cuEventQuery on GPU:0 failed: "
                              "CUDA_ERROR_LAUNCH_FAILED");
    ASSERT_EQ(fakecuda_calls("cuEventQuery"), 1);
    /* p was not taken for free: the next look finds it done */
    ASSERT_OK(gpumem_malloc_async(rt, 0, 4 * MiB, S2, &q));
    ASSERT_TRUE(q == base);
    ASSERT_OK(gpumem_free(rt, q));
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

TEST(a_failed_wait_fails_the_call_and_hands_nothing_out)
{
    fresh_driver(T4);
    gpumem_runtime *rt = limited(4 * MiB, false);
    if (!rt)
        return;
    void *p = NULL, *q = NULL;
    ASSERT_OK(gpumem_malloc_async(rt, 0, 4 * MiB, S1, &p));
    fakecuda_hold_stream(S1);
    ASSERT_OK(gpumem_free_async(rt, p, S1));
    fakecuda_fail_nth("cuEventSynchronize", 1, CUDA_ERROR_LAUNCH_FAILED);
    ASSERT_STATUS(gpumem_malloc_async(rt, 0, 4 * MiB, S2, &q), GPUMEM_ERR_BACKEND);
    ASSERT_CONTAINS(gpumem_last_error(), "gpumem_malloc_async(/device:GPU:0, 4.00 MiB, "
                                         "stream 0x5252): cuEventSynchronize on GPU:0 "
                                         "failed: CUDA_ERROR_LAUNCH_FAILED");
    ASSERT_TRUE(q == NULL);
    fakecuda_fail_nth("cuEventSynchronize", 1, CUDA_ERROR_LAUNCH_FAILED);
    uint64_t released = 1;
    ASSERT_STATUS(gpumem_release_unused(rt, 0, &released), GPUMEM_ERR_BACKEND);
    ASSERT_CONTAINS(gpumem_last_error(), "cuEventSynchronize on GPU:0 failed");
    ASSERT_EQ(released, 0); /* the pending block keeps its region */
    struct releaser rel;
    release_after(&rel, S1, 20);
    ASSERT_OK(gpumem_malloc(rt, 0, 4 * MiB, &q)); /* waits again, and gets it */
    pthread_join(rel.thread, NULL);
    ASSERT_TRUE(q == p);
    ASSERT_OK(gpumem_free(rt, q));
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

TEST(a_failed_event_destroy_is_logged)
{
    fresh_driver(T4);
    gpumem_runtime *rt = limited(4 * MiB, false);
    if (!rt)
        return;
    void *p = NULL;
    ASSERT_OK(gpumem_malloc_async(rt, 0, 1 * MiB, S1, &p));
    ASSERT_OK(gpumem_free_async(rt, p, S1));
    fakecuda_fail_nth("cuEventDestroy_v2", 1, CUDA_ERROR_LAUNCH_FAILED);
    gpumem_runtime_destroy(rt);
    ASSERT_CONTAINS(log_text,
                    "cuEventDestroy_v2 on GPU:0 failed: CUDA_ERROR_LAUNCH_FAILED");
    struct fakecuda_live live;
    fakecuda_live(&live);
    ASSERT_EQ(live.events, 1); /* the driver kept it; nothing else */
    ASSERT_EQ(live.allocations, 0);
    ASSERT_EQ(fakecuda_misuses(), 0);
}

/* --------------------------------------------- release, destroy, size 0 -- */

TEST(release_unused_waits_for_pending_blocks)
{
    fresh_driver(T4);
    gpumem_runtime *rt = limited(64 * MiB, true);
    if (!rt)
        return;
    void *p = NULL;
    ASSERT_OK(gpumem_malloc_async(rt, 0, 8 * MiB, S1, &p));
    uint64_t reserved = info_of(rt, 0).reserved_bytes;
    fakecuda_hold_stream(S1);
    ASSERT_OK(gpumem_free_async(rt, p, S1));
    struct releaser rel;
    release_after(&rel, S1, 50);
    uint64_t released = 0;
    ASSERT_OK(gpumem_release_unused(rt, 0, &released));
    pthread_join(rel.thread, NULL);
    ASSERT_EQ(released, reserved);
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 0);
    ASSERT_EQ(fakecuda_used_bytes(0), 0);
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

TEST(destroy_waits_for_pending_blocks_then_destroys_the_events)
{
    fresh_driver(T4);
    gpumem_runtime *rt = limited(64 * MiB, true);
    if (!rt)
        return;
    void *p = NULL;
    ASSERT_OK(gpumem_malloc_async(rt, 0, 8 * MiB, S1, &p));
    fakecuda_hold_stream(S1);
    ASSERT_OK(gpumem_free_async(rt, p, S1));
    struct releaser rel;
    release_after(&rel, S1, 50);
    gpumem_runtime_destroy(rt);
    pthread_join(rel.thread, NULL);
    ASSERT_EQ(fakecuda_calls("cuEventSynchronize"), 1);
    check_driver_clean(0);
}

TEST(size_zero_is_null_on_both_and_counts_nothing)
{
    fresh_driver(T4);
    gpumem_runtime *rt = cuda_runtime();
    if (!rt)
        return;
    void *p = (void *)&p;
    ASSERT_OK(gpumem_malloc_async(rt, 0, 0, S1, &p));
    ASSERT_TRUE(p == NULL);
    p = (void *)&p;
    ASSERT_OK(gpumem_malloc(rt, 0, 0, &p));
    ASSERT_TRUE(p == NULL);
    bool initialized = true;
    ASSERT_OK(gpumem_is_initialized(rt, &initialized));
    ASSERT_FALSE(initialized); /* nothing to allocate: nothing initialized */
    ASSERT_STATUS(gpumem_malloc_async(rt, 3, 0, S1, &p), GPUMEM_ERR_NO_SUCH_DEVICE);
    ASSERT_OK(gpumem_free_async(rt, NULL, S1));
    gpumem_memory_info mi = info_of(rt, 0);
    ASSERT_EQ(mi.num_allocs, 0);
    ASSERT_EQ(mi.num_frees, 0);
    ASSERT_EQ(mi.current_bytes, 0);
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

/* ------------------------------------------------------------ threads -- */

struct worker {
    gpumem_runtime *rt;
    void *stream;
    unsigned seed;
    int failures;
};

/* Each thread on its own stream: allocations, writes (the double's memory is host
 * memory) and checks that nobody else wrote, stream-ordered frees; the small
 * budget makes requests wait for each other's pending blocks. */
static void *worker_run(void *arg)
{
    struct worker *w = arg;
    for (int i = 0; i < 400; i++) {
        w->seed = w->seed * 1103515245u + 12345u;
        size_t size = (size_t)((w->seed >> 8) % (1 * MiB)) + 1;
        unsigned char *p = NULL;
        if (gpumem_malloc_async(w->rt, 0, size, w->stream, (void **)&p) != GPUMEM_OK) {
            w->failures++;
            continue;
        }
        unsigned char tag = (unsigned char)(uintptr_t)w->stream;
        p[0] = tag;
        p[size - 1] = tag;
        sched_yield();
        if (p[0] != tag || p[size - 1] != tag)
            w->failures += 1000; /* handed to two threads at once */
        if (gpumem_free_async(w->rt, p, w->stream) != GPUMEM_OK)
            w->failures += 1000;
    }
    return NULL;
}

TEST(eight_threads_on_eight_streams)
{
    fresh_driver(T4);
    fakecuda_set_vmm(0); /* plain regions: host memory the threads write */
    gpumem_runtime *rt = limited(16 * MiB, false);
    if (!rt)
        return;
    struct worker w[8];
    pthread_t t[8];
    for (int i = 0; i < 8; i++) {
        w[i] = (struct worker){rt, (void *)(uintptr_t)(0x100 + i), (unsigned)i + 1, 0};
        pthread_create(&t[i], NULL, worker_run, &w[i]);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(t[i], NULL);
        ASSERT_EQ(w[i].failures, 0);
    }
    gpumem_memory_info mi = info_of(rt, 0);
    ASSERT_EQ(mi.current_bytes, 0);
    ASSERT_EQ(mi.num_allocs, 8 * 400);
    ASSERT_EQ(mi.num_ooms, 0);
    uint64_t released = 0;
    ASSERT_OK(gpumem_release_unused(rt, 0, &released));
    ASSERT_EQ(released, 16 * MiB);
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

/* --------------------------------------------------------------- fork -- */

struct parent_state {
    gpumem_runtime *rt;
    void *ptr;
    long parent;
};

static unsigned long driver_calls(void)
{
    unsigned long n = 0;
    for (size_t i = 0; fakecuda_entry_point(i); i++)
        n += fakecuda_calls_ever(fakecuda_entry_point(i));
    return n;
}

static void child_with_pending(void *arg)
{
    struct parent_state *ps = arg;
    unsigned long calls = driver_calls();
    void *p = NULL;
    expect_fork_refusal("malloc_async", gpumem_malloc_async(ps->rt, 0, 1 << 20, S2, &p),
                        "gpumem_malloc_async(/device:GPU:0, 1.00 MiB)",
                        "the one that initialized the runtime", ps->parent);
    char call[64];
    snprintf(call, sizeof call, "gpumem_free_async(%p)", ps->ptr);
    expect_fork_refusal("free_async", gpumem_free_async(ps->rt, ps->ptr, S2), call,
                        "the one that initialized the runtime", ps->parent);
    gpumem_runtime_destroy(ps->rt); /* the parent's events: no cuEventDestroy */
    ASSERT_EQ(driver_calls(), calls);
}

TEST(a_child_destroys_its_copy_of_pending_blocks_without_a_driver_call)
{
    fresh_driver(T4);
    struct parent_state ps = {.rt = limited(64 * MiB, true), .parent = (long)getpid()};
    if (!ps.rt)
        return;
    void *p = NULL;
    ASSERT_OK(gpumem_malloc_async(ps.rt, 0, 1 * MiB, S1, &p));
    ASSERT_OK(gpumem_malloc_async(ps.rt, 0, 1 * MiB, S2, &ps.ptr));
    fakecuda_hold_stream(S1);
    ASSERT_OK(gpumem_free_async(ps.rt, p, S1));

    in_child("pending blocks", child_with_pending, &ps, 20);

    fakecuda_release_stream(S1);
    ASSERT_OK(gpumem_free_async(ps.rt, ps.ptr, S2));
    gpumem_runtime_destroy(ps.rt);
    check_driver_clean(0);
}

struct waiter {
    gpumem_runtime *rt;
    void *ptr;
    gpumem_status status;
};

static void *wait_in_malloc(void *arg)
{
    struct waiter *w = arg;
    w->status = gpumem_malloc_async(w->rt, 0, 4 * MiB, S2, &w->ptr);
    return NULL;
}

static void child_of_waiting(void *arg)
{
    struct parent_state *ps = arg;
    void *p = NULL;
    expect_fork_refusal("malloc_async", gpumem_malloc_async(ps->rt, 0, 1 << 20, S2, &p),
                        "gpumem_malloc_async(/device:GPU:0, 1.00 MiB)",
                        "the one that initialized the runtime", ps->parent);
    gpumem_runtime_destroy(ps->rt); /* the pool's lock is held: left alone */
}

/* A thread of the parent waits in cuEventSynchronize, the pool's lock held, at
 * the fork: the child's calls and destroy return at once. */
TEST(a_thread_waiting_for_a_pending_block_at_fork_does_not_hang_the_child)
{
    fresh_driver(T4);
    struct parent_state ps = {.rt = limited(4 * MiB, false), .parent = (long)getpid()};
    if (!ps.rt)
        return;
    void *p = NULL;
    ASSERT_OK(gpumem_malloc_async(ps.rt, 0, 4 * MiB, S1, &p));
    fakecuda_hold_stream(S1);
    ASSERT_OK(gpumem_free_async(ps.rt, p, S1));
    struct waiter w = {ps.rt, NULL, GPUMEM_ERR_BACKEND};
    pthread_t t;
    ASSERT_EQ(fakecuda_block_next("cuEventSynchronize"), 0);
    if (pthread_create(&t, NULL, wait_in_malloc, &w) != 0) {
        HARNESS_FAIL("pthread_create failed");
        return;
    }
    fakecuda_wait_blocked();

    in_child("a wait at fork", child_of_waiting, &ps, 10);

    fakecuda_unblock();
    fakecuda_release_stream(S1);
    pthread_join(t, NULL);
    ASSERT_OK(w.status);
    ASSERT_TRUE(w.ptr == p);
    ASSERT_OK(gpumem_free(ps.rt, w.ptr));
    gpumem_runtime_destroy(ps.rt);
    check_driver_clean(0);
}

int main(void)
{
    RUN(a_block_goes_back_to_its_own_stream_at_once);
    RUN(another_stream_does_not_get_a_block_whose_work_still_runs);
    RUN(a_completed_block_goes_to_any_stream);
    RUN(when_memory_is_short_malloc_async_waits_for_the_oldest_pending_block);
    RUN(when_memory_is_short_plain_malloc_waits_too);
    RUN(a_growing_pool_grows_rather_than_wait_and_waits_at_its_budget);
    RUN(out_of_memory_comes_after_every_wait);
    RUN(events_are_pooled_not_made_per_free);
    RUN(a_free_whose_event_cannot_be_made_or_recorded_changes_nothing);
    RUN(a_failed_query_keeps_the_block_pending);
    RUN(a_failed_wait_fails_the_call_and_hands_nothing_out);
    RUN(a_failed_event_destroy_is_logged);
    RUN(release_unused_waits_for_pending_blocks);
    RUN(destroy_waits_for_pending_blocks_then_destroys_the_events);
    RUN(size_zero_is_null_on_both_and_counts_nothing);
    RUN(eight_threads_on_eight_streams);
    RUN(a_child_destroys_its_copy_of_pending_blocks_without_a_driver_call);
    RUN(a_thread_waiting_for_a_pending_block_at_fork_does_not_hang_the_child);
    HARNESS_EXIT();
}
