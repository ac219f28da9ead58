/* Stream-ordered allocation on the CUDA backend over the driver double, whose
 * events a test holds unfinished (fakecuda_hold_stream) and then lets complete:
 * a block freed on a stream goes back at once to that stream, coalesced with its
 * other frees and with no driver call, to no other stream until its work
 * completes, then to any; a growing pool takes new memory rather than wait, and
 * when memory is short (no room to grow) a request waits for the other streams
 * instead of failing (plain gpumem_malloc too); one fence per stream, recorded
 * only when memory passes; a 32nd stream waits for the least recently used one,
 * and during a graph capture is refused instead; bad pointers change nothing;
 * a training-like loop makes no driver call once warm;
 * every event call's failure is reported and never hands out memory whose work
 * may still run; the counters; release, destroy and fork with streams' memory;
 * threads. */
#include "cuda_util.h"
#include "fork_util.h"

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#define T4 "Tesla T4:15GiB:7.5"

static void *const S1 = (void *)0x5151; /* stream handles: any pointer to the double */
static void *const S2 = (void *)0x5252;

/* Every entry point's calls since the last fakecuda_reset (or `since`). */
static unsigned long all_calls(void)
{
    unsigned long n = 0;
    for (size_t i = 0; fakecuda_entry_point(i); i++)
        n += fakecuda_calls(fakecuda_entry_point(i));
    return n;
}

/* ------------------------------------------------------------ the rule -- */

TEST(a_block_goes_back_to_its_own_stream_at_once_with_no_driver_call)
{
    fresh_driver(T4);
    gpumem_runtime *rt = limited(4 * MiB, false);
    if (!rt)
        return;
    void *p = NULL, *q = NULL;
    ASSERT_OK(gpumem_malloc_async(rt, 0, 1 * MiB, S1, &p));
    fakecuda_hold_stream(S1); /* a kernel still runs on S1 */
    unsigned long calls = all_calls();
    ASSERT_OK(gpumem_free_async(rt, p, S1));
    ASSERT_OK(gpumem_malloc_async(rt, 0, 1 * MiB, S1, &q));
    ASSERT_TRUE(q == p); /* S1 runs its work in order: safe at once */
    ASSERT_OK(gpumem_free_async(rt, q, S1));
    ASSERT_OK(gpumem_malloc_async(rt, 0, 256 * KiB, S1, &q));
    ASSERT_TRUE(q == p); /* any size: the freed block is S1's free memory */
    ASSERT_OK(gpumem_free_async(rt, q, S1));
    ASSERT_EQ(all_calls(), calls); /* no event, no query, no context */
    ASSERT_EQ(fakecuda_events_incomplete(), 0);
    gpumem_memory_info mi = info_of(rt, 0);
    ASSERT_EQ(mi.current_bytes, 0);
    ASSERT_EQ(mi.num_allocs, 3);
    ASSERT_EQ(mi.num_frees, 3);
    ASSERT_EQ(mi.largest_free_block, 4 * MiB); /* its: it serves S1 without growing */
    fakecuda_release_stream(S1);
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

TEST(a_streams_frees_coalesce_and_serve_it_whole)
{
    fresh_driver(T4);
    gpumem_runtime *rt = limited(8 * MiB, false);
    if (!rt)
        return;
    void *a = NULL, *b = NULL, *c = NULL, *q = NULL;
    ASSERT_OK(gpumem_malloc_async(rt, 0, 2 * MiB, S1, &a));
    ASSERT_OK(gpumem_malloc_async(rt, 0, 2 * MiB, S1, &b));
    ASSERT_OK(gpumem_malloc_async(rt, 0, 4 * MiB, S1, &c)); /* the whole pool */
    fakecuda_hold_stream(S1);
    unsigned long calls = all_calls();
    ASSERT_OK(gpumem_free_async(rt, b, S1));
    ASSERT_OK(gpumem_free_async(rt, a, S1));
    ASSERT_OK(gpumem_malloc_async(rt, 0, 4 * MiB, S1, &q)); /* a and b, joined */
    ASSERT_TRUE(q == (a < b ? a : b));
    ASSERT_EQ(all_calls(), calls);
    ASSERT_OK(gpumem_free_async(rt, q, S1));
    ASSERT_OK(gpumem_free_async(rt, c, S1));
    ASSERT_OK(gpumem_malloc_async(rt, 0, 8 * MiB, S1, &q)); /* everything, joined */
    ASSERT_EQ(all_calls(), calls);
    ASSERT_OK(gpumem_free_async(rt, q, S1));
    fakecuda_release_stream(S1);
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

TEST(another_stream_does_not_get_a_block_whose_work_still_runs)
{
    fresh_driver(T4);
    gpumem_runtime *rt = limited(256 * MiB, true);
    if (!rt)
        return;
    void *p = NULL, *q = NULL, *r = NULL;
    ASSERT_OK(gpumem_malloc_async(rt, 0, 16 * MiB, S1, &p));
    gpumem_memory_info before = info_of(rt, 0);
    ASSERT_OK(gpumem_malloc_async(rt, 0, 1 * MiB, S2, &q)); /* S2 frees too: it has */
    ASSERT_OK(gpumem_free_async(rt, q, S2));                /* memory of its own */
    fakecuda_hold_stream(S1);
    ASSERT_OK(gpumem_free_async(rt, p, S1));
    gpumem_memory_info freed = info_of(rt, 0);
    ASSERT_EQ(freed.current_bytes, 0);
    ASSERT_EQ(freed.reserved_bytes, before.reserved_bytes + 2 * MiB);
    ASSERT_OK(gpumem_malloc_async(rt, 0, 16 * MiB, S2, &q)); /* grows instead */
    ASSERT_TRUE(q != p);
    ASSERT_OK(gpumem_malloc(rt, 0, 16 * MiB, &r)); /* nor a plain allocation */
    ASSERT_TRUE(r != p);
    ASSERT_EQ(fakecuda_calls("cuEventSynchronize"), 0); /* nobody waited */
    /* S2 grew its own region (its free 1 MiB at the tail) by what it lacked */
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 3 * before.reserved_bytes);
    /* a double free, whatever the stream */
    ASSERT_STATUS(gpumem_free_async(rt, p, S1), GPUMEM_ERR_INVALID_POINTER);
    ASSERT_CONTAINS(gpumem_last_error(), "not the start of a live allocation");
    ASSERT_STATUS(gpumem_free(rt, p), GPUMEM_ERR_INVALID_POINTER);
    ASSERT_STATUS(gpumem_free_async(rt, (char *)q + 256, S2), GPUMEM_ERR_INVALID_POINTER);
    ASSERT_EQ(info_of(rt, 0).current_bytes, 32 * MiB);
    fakecuda_release_stream(S1);
    ASSERT_OK(gpumem_free(rt, q));
    ASSERT_OK(gpumem_free_async(rt, r, S2));
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

TEST(a_completed_block_goes_to_any_stream_without_a_wait)
{
    fresh_driver(T4);
    gpumem_runtime *rt = limited(4 * MiB, false);
    if (!rt)
        return;
    void *p = NULL, *q = NULL;
    ASSERT_OK(gpumem_malloc_async(rt, 0, 4 * MiB, S1, &p)); /* the whole pool */
    fakecuda_hold_stream(S1);
    ASSERT_OK(gpumem_free_async(rt, p, S1));
    fakecuda_release_stream(S1); /* its work completes */
    unsigned long events = fakecuda_calls("cuEventCreate");
    ASSERT_OK(gpumem_malloc_async(rt, 0, 4 * MiB, S2, &q));
    ASSERT_TRUE(q == p);
    ASSERT_EQ(fakecuda_calls("cuEventSynchronize"), 0); /* found done, not waited */
    ASSERT_EQ(fakecuda_calls("cuEventRecord"), 1);      /* one fence for S1 */
    ASSERT_EQ(fakecuda_calls("cuEventCreate"), events + 1);
    ASSERT_OK(gpumem_free_async(rt, q, S2));
    ASSERT_OK(gpumem_malloc(rt, 0, 4 * MiB, &p)); /* and to a plain allocation */
    ASSERT_TRUE(q == p);
    ASSERT_EQ(fakecuda_calls("cuEventCreate"), events + 2); /* S2's fence */
    ASSERT_OK(gpumem_free(rt, p));
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

/* One fence stands for everything a stream freed before it: many blocks, one
 * record, one wait. */
static void waits_for_the_stream(bool plain)
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
    double t0 = now_ms(); /* before the releaser starts its 100 ms */
    release_after(&rel, S1, 100);
    gpumem_status s = plain ? gpumem_malloc(rt, 0, 4 * MiB, &q)
                            : gpumem_malloc_async(rt, 0, 4 * MiB, S2, &q);
    double waited = now_ms() - t0;
    pthread_join(rel.thread, NULL);
    ASSERT_OK(s);
    ASSERT_TRUE(q == (a < b ? a : b)); /* waited for, coalesced, handed out */
    ASSERT_TRUE(waited >= 100);
    ASSERT_EQ(fakecuda_calls("cuEventSynchronize"), 1);
    gpumem_memory_info mi = info_of(rt, 0);
    ASSERT_EQ(mi.num_ooms, 0);
    ASSERT_EQ(mi.current_bytes, 4 * MiB);
    ASSERT_OK(gpumem_free(rt, q));
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

TEST(when_memory_is_short_malloc_async_waits_for_the_other_stream)
{
    waits_for_the_stream(false);
}

TEST(when_memory_is_short_plain_malloc_waits_too) { waits_for_the_stream(true); }

/* Growth is preferred to a wait while the budget has room (PyTorch's and
 * cudaMallocAsync's choice); at the budget the other stream is waited for. */
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
    release_after(&rel, S1, 20);
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

TEST(out_of_memory_comes_after_every_wait)
{
    fresh_driver(T4);
    gpumem_runtime *rt = limited(4 * MiB, false);
    if (!rt)
        return;
    void *a = NULL, *b = NULL, *q = NULL;
    ASSERT_OK(gpumem_malloc_async(rt, 0, 2 * MiB, S1, &a));
    ASSERT_OK(gpumem_malloc_async(rt, 0, 2 * MiB, S1, &b));
    ASSERT_OK(gpumem_free_async(rt, a, S1));
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

/* ------------------------------------------------- the price of streams -- */

/* A training step's tensors (sizes drawn anew every step) on one stream, and a
 * few more on a second one: once warm, the first makes no driver call at all,
 * and the pair very few (bench/streams prices the same loops). */
static unsigned long steady_calls(bool second_stream)
{
    fresh_driver(T4);
    gpumem_runtime *rt = limited(512 * MiB, true);
    if (!rt)
        return ~0ul;
    unsigned seed = 7;
    void *p[64], *s2[8];
    unsigned long calls = 0;
    for (int step = 0; step < 60; step++) {
        if (step == 20)
            calls = all_calls();
        for (int i = 0; i < 64; i++) {
            seed = seed * 1103515245u + 12345u;
            size_t size = (size_t)(64 * KiB) + (seed >> 8) % (4 * MiB);
            ASSERT_OK(gpumem_malloc_async(rt, 0, size, S1, &p[i]));
        }
        for (int i = 0; second_stream && i < 8; i++) {
            seed = seed * 1103515245u + 12345u;
            ASSERT_OK(gpumem_malloc_async(rt, 0, (size_t)(seed >> 8) % (2 * MiB) + 1, S2,
                                          &s2[i]));
        }
        for (int i = 63; i >= 0; i--)
            ASSERT_OK(gpumem_free_async(rt, p[i], S1));
        for (int i = 0; second_stream && i < 8; i++)
            ASSERT_OK(gpumem_free_async(rt, s2[i], S2));
    }
    calls = all_calls() - calls;
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
    return calls;
}

TEST(the_steady_path_makes_no_driver_call)
{
    ASSERT_EQ(steady_calls(false), 0); /* 40 steps, 5,120 operations */
    unsigned long two = steady_calls(true);
    printf("     two streams: %lu driver calls in 5,760 operations\n", two);
    ASSERT_LE(two, 5 * 6); /* at most 5 per 1,000 */
}

TEST(one_event_per_stream_recorded_only_when_memory_passes)
{
    fresh_driver(T4);
    gpumem_runtime *rt = limited(4 * MiB, false);
    if (!rt)
        return;
    void *p = NULL;
    for (int round = 0; round < 50;
         round++) { /* the pool passes from S1 to S2 and back */
        void *s = round % 2 ? S2 : S1;
        ASSERT_OK(gpumem_malloc_async(rt, 0, 4 * MiB, s, &p));
        ASSERT_OK(gpumem_free_async(rt, p, s));
    }
    ASSERT_EQ(fakecuda_calls("cuEventCreate"), 2);  /* a fence per stream, reused */
    ASSERT_EQ(fakecuda_calls("cuEventRecord"), 49); /* one per passing */
    ASSERT_EQ(fakecuda_calls("cuEventSynchronize"), 0);
    struct fakecuda_live live;
    fakecuda_live(&live);
    ASSERT_EQ(live.events, 2);
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

TEST(more_streams_than_slots_wait_for_the_least_recently_used)
{
    fresh_driver(T4);
    gpumem_runtime *rt = limited(64 * MiB, true);
    if (!rt)
        return;
    void *p = NULL, *first = (void *)0x1000;
    fakecuda_hold_stream(first); /* its memory stays its own: never found done */
    struct releaser rel = {0};
    for (uintptr_t i = 0; i < 32; i++) { /* 31 slots */
        void *s = (void *)(0x1000 + i);
        ASSERT_OK(gpumem_malloc_async(rt, 0, 1 * MiB, s, &p));
        if (i == 31) { /* the first stream, least recently used, makes room */
            release_after(&rel, first, 20);
            /* but not for a bad pointer: that changes nothing, waits for nobody */
            ASSERT_STATUS(gpumem_free_async(rt, (char *)p + 256, s),
                          GPUMEM_ERR_INVALID_POINTER);
            ASSERT_EQ(fakecuda_calls("cuEventSynchronize"), 0);
        }
        ASSERT_OK(gpumem_free_async(rt, p, s));
    }
    pthread_join(rel.thread, NULL);
    ASSERT_EQ(fakecuda_calls("cuEventSynchronize"), 1);
    ASSERT_EQ(info_of(rt, 0).current_bytes, 0);
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

/* During a capture no stream may be waited for: a 32nd stream's first free,
 * which would wait for the least recently used one, is refused and changes
 * nothing; after the capture it frees as usual. */
TEST(during_a_capture_a_32nd_stream_finds_no_slot_and_nothing_changes)
{
    fresh_driver(T4);
    gpumem_runtime *rt = limited(64 * MiB, false); /* room: no look at the streams */
    if (!rt)
        return;
    void *p = NULL, *q[31], *guard = NULL, *last = (void *)(0x1000 + 31);
    /* side by side, then freed: each stream's block stays apart, its own */
    for (uintptr_t i = 0; i < 31; i++)
        ASSERT_OK(gpumem_malloc_async(rt, 0, 1 * MiB, (void *)(0x1000 + i), &q[i]));
    ASSERT_OK(gpumem_malloc_async(rt, 0, 1 * MiB, last, &p));
    ASSERT_OK(gpumem_malloc(rt, 0, 1 * MiB, &guard));
    for (uintptr_t i = 0; i < 31; i++) /* 31 slots, each holding memory */
        ASSERT_OK(gpumem_free_async(rt, q[i], (void *)(0x1000 + i)));
    uint64_t current = info_of(rt, 0).current_bytes;
    ASSERT_OK(gpumem_stream_capture(true));
    ASSERT_STATUS(gpumem_free_async(rt, p, last), GPUMEM_ERR_UNSUPPORTED);
    ASSERT_CONTAINS(gpumem_last_error(), "none may be waited for during a CUDA graph "
                                         "capture");
    ASSERT_EQ(info_of(rt, 0).current_bytes, current); /* still the caller's */
    ASSERT_EQ(fakecuda_calls("cuEventSynchronize"), 0);
    ASSERT_OK(gpumem_stream_capture(false));
    ASSERT_OK(gpumem_free_async(rt, p, last)); /* the least recently used, drained */
    ASSERT_EQ(fakecuda_calls("cuEventSynchronize"), 1);
    ASSERT_EQ(info_of(rt, 0).current_bytes, current - 1 * MiB);
    ASSERT_OK(gpumem_free(rt, guard));
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

/* -------------------------------------------------------------- failures -- */

TEST(a_failed_record_or_query_keeps_the_memory_its_streams)
{
    fresh_driver(T4);
    gpumem_runtime *rt = limited(4 * MiB, false);
    if (!rt)
        return;
    void *p = NULL, *q = NULL;
    ASSERT_OK(gpumem_malloc_async(rt, 0, 4 * MiB, S1, &p));
    ASSERT_OK(gpumem_free_async(rt, p, S1));
    fakecuda_fail_nth("cuEventRecord", 1, CUDA_ERROR_LAUNCH_FAILED);
    fakecuda_fail_nth("cuEventSynchronize", 1, CUDA_ERROR_LAUNCH_FAILED);
    /* the look fails (logged), then the wait: nothing of S1's is handed out */
    ASSERT_STATUS(gpumem_malloc_async(rt, 0, 4 * MiB, S2, &q), GPUMEM_ERR_BACKEND);
    ASSERT_CONTAINS(log_text, "memory freed on stream 0x5151 stays that stream's: "
                              "cuEventRecord(stream 0x5151) on GPU:0 failed: "
                              "CUDA_ERROR_LAUNCH_FAILED");
    ASSERT_CONTAINS(gpumem_last_error(), "gpumem_malloc_async(/device:GPU:0, 4.00 MiB, "
                                         "stream 0x5252): cuEventSynchronize on GPU:0 "
                                         "failed: CUDA_ERROR_LAUNCH_FAILED");
    ASSERT_TRUE(q == NULL);
    log_text[0] = '\0';
    fakecuda_fail_nth("cuEventQuery", 1, CUDA_ERROR_LAUNCH_FAILED);
    ASSERT_OK(gpumem_malloc_async(rt, 0, 4 * MiB, S2, &q)); /* the query fails: waits */
    ASSERT_CONTAINS(log_text, "stays that stream's: cuEventQuery on GPU:0 failed: "
                              "CUDA_ERROR_LAUNCH_FAILED");
    ASSERT_TRUE(q == p);
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
    ASSERT_EQ(released, 0); /* S1's memory keeps its region */
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
    ASSERT_OK(gpumem_malloc_async(rt, 0, 4 * MiB, S2, &p)); /* S1's fence made */
    ASSERT_OK(gpumem_free(rt, p));
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

/* The idle release (GPUMEM_GROWTH_IDLE_RELEASE_MS) never waits for a stream:
 * what a stream whose work completed freed goes back, what a stream still
 * running freed stays its own (a query, no cuEventSynchronize); the next looks
 * try again, so it goes back once that work is done, with no call of the
 * program's. */
TEST(the_idle_release_gives_back_completed_streams_memory_without_a_wait)
{
    fresh_driver(T4);
    setenv("GPUMEM_GROWTH_IDLE_RELEASE_MS", "300", 1);
    gpumem_runtime *rt = limited(64 * MiB, true);
    unsetenv("GPUMEM_GROWTH_IDLE_RELEASE_MS");
    if (!rt)
        return;
    void *p = NULL, *q = NULL;
    ASSERT_OK(gpumem_malloc_async(rt, 0, 8 * MiB, S1, &p));
    ASSERT_OK(gpumem_malloc_async(rt, 0, 8 * MiB, S2, &q));
    fakecuda_hold_stream(S1); /* a kernel still runs on S1 */
    ASSERT_OK(gpumem_free_async(rt, p, S1));
    ASSERT_OK(gpumem_free_async(rt, q, S2));
    double until = now_ms() + 5000;
    while (info_of(rt, 0).reserved_bytes > 8 * MiB && now_ms() < until)
        usleep(10 * 1000);
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 8 * MiB); /* S2's went back */
    ASSERT_EQ(fakecuda_calls("cuEventSynchronize"), 0);
    fakecuda_release_stream(S1); /* its work completes: a later look finds it */
    until = now_ms() + 5000;
    while (info_of(rt, 0).reserved_bytes > 0 && now_ms() < until)
        usleep(10 * 1000);
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 0);
    ASSERT_EQ(fakecuda_used_bytes(0), 0);
    ASSERT_EQ(fakecuda_calls("cuEventSynchronize"), 0);
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

/* ------------------------------------------------------ inactive split -- */

/* PyTorch's inactive split blocks of logical device 0 as its snapshot shows
 * them: the free blocks of segments that hold others (streams' free memory
 * included), each with its mapped bytes (a block with none is none). What
 * gpumem_memory_info's inactive_split_blocks and _bytes count. */
static void split_of_snapshot(gpumem_runtime *rt, uint64_t *blocks, uint64_t *bytes,
                              uint64_t *segments)
{
    size_t n = 0;
    ASSERT_OK(gpumem_snapshot_json(rt, 0, NULL, 0, &n));
    char *snap = malloc(n);
    ASSERT_TRUE(snap != NULL);
    ASSERT_OK(gpumem_snapshot_json(rt, 0, snap, n, &n));
    const char *end = strstr(snap, "\"device_traces\"");
    if (!end)
        end = snap + strlen(snap);
    *blocks = *bytes = *segments = 0;
    const char *p = snap;
    while ((p = strstr(p, "\"blocks\":[")) && p < end) {
        p += strlen("\"blocks\":[");
        const char *next = strstr(p, "\"blocks\":[");
        const char *stop = next && next < end ? next : end;
        uint64_t count = 0, b = 0, sz = 0;
        for (const char *q = strstr(p, "{\"address\":"); q && q < stop;) {
            const char *nq = strstr(q + 1, "{\"address\":");
            if (!nq || nq > stop)
                nq = stop;
            unsigned long long size = 0, unmapped = 0;
            const char *f = strstr(q, "\"size\":");
            ASSERT_TRUE(f && f < nq && sscanf(f + 7, "%llu", &size) == 1);
            const char *st = strstr(q, "\"state\":\"inactive\"");
            const char *u = strstr(q, "\"unmapped_size\":");
            if (u && u < nq)
                ASSERT_TRUE(sscanf(u + 16, "%llu", &unmapped) == 1);
            if (st && st < nq && size > unmapped) {
                b++;
                sz += size - unmapped;
            }
            count++;
            q = nq < stop ? nq : NULL;
        }
        ++*segments;
        if (count > 1) {
            *blocks += b;
            *bytes += sz;
        }
        p = stop;
    }
    free(snap);
}

/* Random stream-ordered and plain allocations and frees on two streams whose
 * work is held and let complete, blocks recorded on the other stream
 * (record_stream: kept, then freed to anyone), releases, frees of freed blocks
 * and of pointers inside them (refused): after each call the
 * counted figures are the snapshot's, and the peaks and totals hold them.
 * While a stream's work is held, only that stream allocates (a stream's free
 * memory joins anyone's next to it: a plain allocation would wait for the
 * held work). Without `vmm`, a growing pool takes plain regions, each a
 * segment: frees and allocations inside segments that hold others take the
 * steady path, and those that make or take a whole one the exact path. */
static void split_with_streams(bool growth, bool vmm, unsigned larger)
{
    fresh_driver(T4);
    fakecuda_set_vmm(vmm); /* without: plain regions, a segment each (the next
                              fresh_driver turns it on again) */
    gpumem_runtime *rt = limited((vmm && !larger ? 64 : 256) * MiB, growth);
    if (!rt)
        return;
    void *const streams[2] = {S1, S2};
    void *live[48];
    void *on[48];
    size_t nlive = 0;
    int held[2] = {0, 0}; /* steps since held, 0: not held */
    uint64_t rng = growth ? 99 : 7, most_segments = 0;
    for (int step = 0; step < 3000; step++) {
        rng = rng * 6364136223846793005u + 1442695040888963407u;
        unsigned r = (unsigned)(rng >> 33) % 100, k = (unsigned)(rng >> 20) % 2;
        /* 48 of them fit, with what streams hold; 8 times as large in plain
         * regions, so that they take many */
        size_t size = (size_t)256 << ((rng >> 40) % 11 + (vmm ? larger : 3));
        if (held[0] || held[1]) /* allocations there only: no wait for it */
            k = held[0] ? 0 : 1;
        if (r < 40 && nlive < 48 && (r < 30 || !(held[0] || held[1]))) {
            void *p = NULL;
            gpumem_status s = r < 30 ? gpumem_malloc_async(rt, 0, size, streams[k], &p)
                                     : gpumem_malloc(rt, 0, size, &p);
            if (s == GPUMEM_OK && p) {
                on[nlive] = r < 30 ? streams[k] : NULL;
                live[nlive++] = p;
            }
        } else if (r < 80 && nlive) {
            size_t i = (size_t)(rng >> 45) % nlive;
            if (r < 45 && on[i]) /* used on the other stream too */
                ASSERT_OK(gpumem_record_stream(rt, live[i], on[i] == S1 ? S2 : S1));
            if (r < 65 && on[i])
                ASSERT_OK(gpumem_free_async(rt, live[i], on[i]));
            else
                ASSERT_OK(gpumem_free(rt, live[i]));
            if (r % 4 == 0) { /* freed again, or inside: refused, nothing counted */
                ASSERT_STATUS(gpumem_free_async(rt, live[i], streams[k]),
                              GPUMEM_ERR_INVALID_POINTER);
                ASSERT_STATUS(gpumem_free_async(rt, (char *)live[i] + 1, streams[k]),
                              GPUMEM_ERR_INVALID_POINTER);
            }
            live[i] = live[--nlive];
            on[i] = on[nlive];
        } else if (r < 95 && !held[0] && !held[1]) { /* one at a time */
            fakecuda_hold_stream(streams[k]);
            held[k] = 1;
        } else if (!held[0] && !held[1]) { /* it waits for the streams' work */
            uint64_t released = 0;
            ASSERT_OK(gpumem_release_unused(rt, 0, &released));
        }
        for (int j = 0; j < 2; j++) /* a held stream's work completes soon: nothing
                                        waits for it long, nor for good */
            if (held[j] && ++held[j] > 8) {
                fakecuda_release_stream(streams[j]);
                held[j] = 0;
            }
        uint64_t blocks, bytes, segments;
        split_of_snapshot(rt, &blocks, &bytes, &segments);
        most_segments = segments > most_segments ? segments : most_segments;
        gpumem_memory_info mi = info_of(rt, 0);
        if (mi.inactive_split_blocks != blocks || mi.inactive_split_bytes != bytes)
            fprintf(
                stderr,
                "step %d (r %u): counted %llu blocks, %llu bytes; snapshot %llu, %llu\n",
                step, r, (unsigned long long)mi.inactive_split_blocks,
                (unsigned long long)mi.inactive_split_bytes, (unsigned long long)blocks,
                (unsigned long long)bytes);
        ASSERT_EQ(mi.inactive_split_blocks, blocks);
        ASSERT_EQ(mi.inactive_split_bytes, bytes);
        ASSERT_LE(blocks, mi.peak_inactive_split_blocks);
        ASSERT_LE(blocks, mi.inactive_split_blocks_total);
        ASSERT_LE(bytes, mi.peak_inactive_split_bytes);
        ASSERT_LE(bytes, mi.inactive_split_bytes_total);
        if (blocks != mi.inactive_split_blocks)
            break;
    }
    for (int k = 0; k < 2; k++)
        if (held[k])
            fakecuda_release_stream(streams[k]);
    for (size_t i = 0; i < nlive; i++)
        ASSERT_OK(gpumem_free(rt, live[i]));
    gpumem_runtime_destroy(rt);
    if (growth && !vmm) /* several segments, in 20 MiB regions (3 in this run) */
        ASSERT_TRUE(most_segments >= 3);
}

TEST(the_inactive_split_figures_are_the_snapshots_with_streams)
{
    split_with_streams(false, true, 0);
    split_with_streams(true, true, 0);
    split_with_streams(true, false, 0);
    split_with_streams(true, true, 4);
}

/* Streams' free memory handed to anyone (their work done) that leaves the
 * segment one free chunk: no split block is left, and the change is counted
 * there (its decrease, then the allocation's increase: the total goes up by
 * one, as the pool's recount after the hand-over says; without it the
 * allocation's steady path would count nothing). Two streams, since a
 * stream's free memory joins anyone's beside it: theirs stay two chunks. */
TEST(a_hand_over_that_leaves_a_whole_segment_is_counted)
{
    fresh_driver(T4);
    gpumem_runtime *rt = limited(4 * MiB, false);
    if (!rt)
        return;
    uint64_t blocks, bytes, segments;
    void *p1 = NULL, *p2 = NULL, *q = NULL;
    ASSERT_OK(gpumem_malloc_async(rt, 0, 2 * MiB, S1, &p1)); /* split: 1 */
    ASSERT_OK(gpumem_malloc_async(rt, 0, 2 * MiB, S2, &p2)); /* the rest: 0 */
    fakecuda_hold_stream(S1);
    fakecuda_hold_stream(S2);
    ASSERT_OK(gpumem_free_async(rt, p1, S1));
    ASSERT_OK(gpumem_free_async(rt, p2, S2)); /* two streams' chunks: 2 */
    gpumem_memory_info mi = info_of(rt, 0);
    split_of_snapshot(rt, &blocks, &bytes, &segments);
    ASSERT_EQ(blocks, 2);
    ASSERT_EQ(mi.inactive_split_blocks, 2);
    ASSERT_EQ(mi.inactive_split_bytes, 4 * MiB);
    ASSERT_EQ(mi.inactive_split_blocks_total, 3);
    /* their work completes; anyone has nothing: both are handed over, the
     * segment is one free chunk (none split), and the allocation splits it */
    fakecuda_release_stream(S1);
    fakecuda_release_stream(S2);
    ASSERT_OK(gpumem_malloc(rt, 0, 3 * MiB, &q));
    mi = info_of(rt, 0);
    split_of_snapshot(rt, &blocks, &bytes, &segments);
    ASSERT_EQ(blocks, 1);
    ASSERT_EQ(bytes, 1 * MiB);
    ASSERT_EQ(mi.inactive_split_blocks, 1);
    ASSERT_EQ(mi.inactive_split_bytes, 1 * MiB);
    ASSERT_EQ(mi.inactive_split_blocks_total, 4);
    ASSERT_EQ(mi.peak_inactive_split_blocks, 2);
    ASSERT_OK(gpumem_free(rt, q));
    mi = info_of(rt, 0);
    ASSERT_EQ(mi.inactive_split_blocks, 0); /* one free chunk: the whole segment */
    ASSERT_EQ(mi.inactive_split_bytes, 0);
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
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
    RUN(a_block_goes_back_to_its_own_stream_at_once_with_no_driver_call);
    RUN(a_streams_frees_coalesce_and_serve_it_whole);
    RUN(another_stream_does_not_get_a_block_whose_work_still_runs);
    RUN(a_completed_block_goes_to_any_stream_without_a_wait);
    RUN(when_memory_is_short_malloc_async_waits_for_the_other_stream);
    RUN(when_memory_is_short_plain_malloc_waits_too);
    RUN(a_growing_pool_grows_rather_than_wait_and_waits_at_its_budget);
    RUN(out_of_memory_comes_after_every_wait);
    RUN(the_steady_path_makes_no_driver_call);
    RUN(one_event_per_stream_recorded_only_when_memory_passes);
    RUN(more_streams_than_slots_wait_for_the_least_recently_used);
    RUN(during_a_capture_a_32nd_stream_finds_no_slot_and_nothing_changes);
    RUN(a_failed_record_or_query_keeps_the_memory_its_streams);
    RUN(a_failed_wait_fails_the_call_and_hands_nothing_out);
    RUN(a_failed_event_destroy_is_logged);
    RUN(release_unused_waits_for_pending_blocks);
    RUN(the_idle_release_gives_back_completed_streams_memory_without_a_wait);
    RUN(destroy_waits_for_pending_blocks_then_destroys_the_events);
    RUN(size_zero_is_null_on_both_and_counts_nothing);
    RUN(the_inactive_split_figures_are_the_snapshots_with_streams);
    RUN(a_hand_over_that_leaves_a_whole_segment_is_counted);
    RUN(eight_threads_on_eight_streams);
    RUN(a_child_destroys_its_copy_of_pending_blocks_without_a_driver_call);
    RUN(a_thread_waiting_for_a_pending_block_at_fork_does_not_hang_the_child);
    HARNESS_EXIT();
}
