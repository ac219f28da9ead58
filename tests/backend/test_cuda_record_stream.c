/* Blocks used on several streams (gpumem_record_stream, PyTorch's
 * Tensor.record_stream) on the CUDA backend over the driver double, whose
 * streams a test holds unfinished (fakecuda_hold_stream) as if a kernel ran
 * there: a block recorded on other streams goes back, to any stream, only after
 * each of them has completed the work queued before the free (the free's own
 * stream included); the free's own stream costs nothing; a plain free waits
 * too; a second free or a record of a freed block is refused; a failed event
 * record leaves the block live, and a failure it logs reaches the log callback
 * with no lock held; events are reused; many recorded blocks; a
 * release and destroy wait for kept blocks; a forked child forgets them. */
#include "cuda_util.h"
#include "fork_util.h"

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#define T4 "Tesla T4:15GiB:7.5"

static void *const S1 = (void *)0x5151; /* stream handles: any pointer to the double */
static void *const S2 = (void *)0x5252;
static void *const S3 = (void *)0x5353;

/* ------------------------------------------------------------ the rule -- */

/* The case: a tensor of S1 used by a kernel on S2 (and S3), recorded,
 * freed: the next allocation gets its memory only once both kernels ran. */
TEST(a_recorded_block_waits_for_every_stream_it_was_used_on)
{
    fresh_driver(T4);
    gpumem_runtime *rt = limited(4 * MiB, false);
    if (!rt)
        return;
    void *c = NULL, *q = NULL;
    ASSERT_OK(gpumem_malloc_async(rt, 0, 4 * MiB, S1, &c)); /* the whole pool */
    ASSERT_OK(gpumem_record_stream(rt, c, S2));
    ASSERT_OK(gpumem_record_stream(rt, c, S3));
    ASSERT_OK(gpumem_record_stream(rt, c, S2)); /* twice: one stream */
    fakecuda_hold_stream(S2);
    fakecuda_hold_stream(S3);
    ASSERT_OK(gpumem_free_async(rt, c, S1));
    ASSERT_EQ(fakecuda_calls("cuEventRecord"), 3); /* S2, S3 and S1 itself */
    gpumem_memory_info mi = info_of(rt, 0);
    ASSERT_EQ(mi.current_bytes, 4 * MiB); /* kept: still allocated */
    ASSERT_EQ(mi.num_frees, 0);
    struct releaser r = {.streams = {S2, S3}, .ms = {60, 150}, .n = 2};
    double t0 = now_ms();
    start_releaser(&r);
    /* on S1 itself too: S2's and S3's kernels still use it */
    ASSERT_OK(gpumem_malloc_async(rt, 0, 4 * MiB, S1, &q));
    double waited = now_ms() - t0;
    pthread_join(r.thread, NULL);
    ASSERT_TRUE(q == c);
    if (waited < 140)
        HARNESS_FAIL("the block came back after %.0f ms, before S3's work (150 ms)",
                     waited);
    ASSERT_EQ(info_of(rt, 0).num_frees, 1);
    ASSERT_OK(gpumem_free_async(rt, q, S1));
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

TEST(the_frees_own_stream_must_finish_too)
{
    fresh_driver(T4);
    gpumem_runtime *rt = limited(4 * MiB, false);
    if (!rt)
        return;
    void *c = NULL, *q = NULL;
    ASSERT_OK(gpumem_malloc_async(rt, 0, 4 * MiB, S1, &c));
    ASSERT_OK(gpumem_record_stream(rt, c, S2)); /* S2 has nothing queued */
    fakecuda_hold_stream(S1);
    ASSERT_OK(gpumem_free_async(rt, c, S1));
    struct releaser r = {.streams = {S1}, .ms = {80}, .n = 1};
    double t0 = now_ms();
    start_releaser(&r);
    ASSERT_OK(gpumem_malloc_async(rt, 0, 4 * MiB, S2, &q)); /* another stream */
    double waited = now_ms() - t0;
    pthread_join(r.thread, NULL);
    ASSERT_TRUE(q == c);
    if (waited < 70)
        HARNESS_FAIL("S2 got the block after %.0f ms, before S1's work (80 ms)", waited);
    ASSERT_OK(gpumem_free_async(rt, q, S2));
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

/* A growing pool takes new memory rather than wait; once the streams are done,
 * the kept block is found complete without a wait and goes to anyone. */
TEST(a_growing_pool_grows_past_a_kept_block_and_collects_it_without_a_wait)
{
    fresh_driver(T4);
    gpumem_runtime *rt = limited(64 * MiB, true);
    if (!rt)
        return;
    void *c = NULL, *q = NULL, *p = NULL, *again = NULL;
    ASSERT_OK(gpumem_malloc_async(rt, 0, 2 * MiB, S1, &c));
    ASSERT_OK(gpumem_record_stream(rt, c, S2));
    fakecuda_hold_stream(S2);
    ASSERT_OK(gpumem_free_async(rt, c, S1));
    ASSERT_OK(gpumem_malloc_async(rt, 0, 2 * MiB, S1, &q)); /* not c: S2 still runs */
    ASSERT_TRUE(q != c);
    ASSERT_OK(gpumem_malloc(rt, 0, 2 * MiB, &p)); /* nor to a plain allocation */
    ASSERT_TRUE(p != c);
    ASSERT_EQ(fakecuda_calls("cuEventSynchronize"), 0); /* nobody waited */
    fakecuda_release_stream(S2);
    ASSERT_OK(gpumem_malloc_async(rt, 0, 2 * MiB, S3, &again)); /* a miss looks */
    ASSERT_TRUE(again == c);
    ASSERT_EQ(fakecuda_calls("cuEventSynchronize"), 0);
    ASSERT_OK(gpumem_free_async(rt, again, S3));
    ASSERT_OK(gpumem_free_async(rt, q, S1));
    ASSERT_OK(gpumem_free(rt, p));
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

TEST(recording_the_frees_own_stream_costs_nothing)
{
    fresh_driver(T4);
    gpumem_runtime *rt = limited(4 * MiB, false);
    if (!rt)
        return;
    void *c = NULL, *q = NULL;
    ASSERT_OK(gpumem_malloc_async(rt, 0, 4 * MiB, S1, &c));
    ASSERT_OK(gpumem_record_stream(rt, c, S1));
    fakecuda_hold_stream(S1);
    ASSERT_OK(gpumem_free_async(rt, c, S1));
    ASSERT_OK(gpumem_malloc_async(rt, 0, 4 * MiB, S1, &q)); /* S1's, at once */
    ASSERT_TRUE(q == c);
    ASSERT_EQ(fakecuda_calls("cuEventCreate"), 0);
    ASSERT_EQ(fakecuda_calls("cuEventRecord"), 0);
    fakecuda_release_stream(S1);
    ASSERT_OK(gpumem_free_async(rt, q, S1));
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

TEST(a_plain_free_of_a_recorded_block_waits_too)
{
    fresh_driver(T4);
    gpumem_runtime *rt = limited(4 * MiB, false);
    if (!rt)
        return;
    void *c = NULL, *q = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, 4 * MiB, &c));
    ASSERT_OK(gpumem_record_stream(rt, c, S2));
    fakecuda_hold_stream(S2);
    ASSERT_OK(gpumem_free(rt, c));
    ASSERT_EQ(fakecuda_calls("cuEventRecord"), 1); /* S2 only: a plain free has none */
    ASSERT_EQ(info_of(rt, 0).current_bytes, 4 * MiB);
    struct releaser r = {.streams = {S2}, .ms = {80}, .n = 1};
    double t0 = now_ms();
    start_releaser(&r);
    ASSERT_OK(gpumem_malloc(rt, 0, 4 * MiB, &q));
    double waited = now_ms() - t0;
    pthread_join(r.thread, NULL);
    ASSERT_TRUE(q == c);
    if (waited < 70)
        HARNESS_FAIL("the block came back after %.0f ms, before S2's work (80 ms)",
                     waited);
    ASSERT_OK(gpumem_free(rt, q)); /* its record went with the first free */
    ASSERT_EQ(fakecuda_calls("cuEventRecord"), 1);
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

/* ------------------------------------------------------------- misuse -- */

TEST(a_freed_or_foreign_block_is_refused)
{
    fresh_driver(T4);
    gpumem_runtime *rt = limited(8 * MiB, false);
    if (!rt)
        return;
    void *c = NULL;
    int local = 0;
    ASSERT_OK(gpumem_record_stream(rt, NULL, S2)); /* an empty tensor's */
    ASSERT_STATUS(gpumem_record_stream(rt, &local, S2), GPUMEM_ERR_INVALID_POINTER);
    ASSERT_CONTAINS(gpumem_last_error(), "gpumem_record_stream(");
    ASSERT_OK(gpumem_malloc_async(rt, 0, 1 * MiB, S1, &c));
    ASSERT_STATUS(gpumem_record_stream(rt, (char *)c + 256, S2),
                  GPUMEM_ERR_INVALID_POINTER);
    ASSERT_CONTAINS(gpumem_last_error(), "not the start of a live allocation");
    ASSERT_OK(gpumem_record_stream(rt, c, S2));
    fakecuda_hold_stream(S2);
    ASSERT_OK(gpumem_free_async(rt, c, S1));
    /* kept, still a live chunk: a second free and a record are refused */
    ASSERT_STATUS(gpumem_free_async(rt, c, S1), GPUMEM_ERR_INVALID_POINTER);
    ASSERT_CONTAINS(gpumem_last_error(), "freed already");
    ASSERT_STATUS(gpumem_free(rt, c), GPUMEM_ERR_INVALID_POINTER);
    ASSERT_STATUS(gpumem_record_stream(rt, c, S3), GPUMEM_ERR_INVALID_POINTER);
    ASSERT_CONTAINS(gpumem_last_error(), "freed already");
    ASSERT_EQ(info_of(rt, 0).current_bytes, 1 * MiB);
    fakecuda_release_stream(S2);
    uint64_t released = 0;
    ASSERT_OK(gpumem_release_unused(rt, 0, &released));
    ASSERT_EQ(info_of(rt, 0).current_bytes, 0);
    ASSERT_EQ(info_of(rt, 0).num_frees, 1);
    ASSERT_STATUS(gpumem_free(rt, c), GPUMEM_ERR_INVALID_POINTER); /* freed now */
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

TEST(a_failed_event_record_leaves_the_block_live_and_recorded)
{
    fresh_driver(T4);
    gpumem_runtime *rt = limited(4 * MiB, false);
    if (!rt)
        return;
    void *c = NULL, *q = NULL;
    ASSERT_OK(gpumem_malloc_async(rt, 0, 4 * MiB, S1, &c));
    ASSERT_OK(gpumem_record_stream(rt, c, S2));
    ASSERT_EQ(fakecuda_fail_nth("cuEventRecord", 1, 400 /* INVALID_HANDLE */), 0);
    ASSERT_STATUS(gpumem_free_async(rt, c, S1), GPUMEM_ERR_BACKEND);
    ASSERT_CONTAINS(gpumem_last_error(), "cuEventRecord");
    ASSERT_EQ(info_of(rt, 0).current_bytes, 4 * MiB); /* never handed out */
    fakecuda_hold_stream(S2);
    ASSERT_OK(gpumem_free_async(rt, c, S1)); /* again: its record still holds */
    struct releaser r = {.streams = {S2}, .ms = {60}, .n = 1};
    double t0 = now_ms();
    start_releaser(&r);
    ASSERT_OK(gpumem_malloc_async(rt, 0, 4 * MiB, S1, &q));
    double waited = now_ms() - t0;
    pthread_join(r.thread, NULL);
    ASSERT_TRUE(q == c);
    if (waited < 50)
        HARNESS_FAIL("the block came back after %.0f ms, before S2's work", waited);
    ASSERT_OK(gpumem_free_async(rt, q, S1));
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

/* A recorded block's free whose event record fails and whose context pop
 * fails after it: the second failure goes to the log, once the pool's lock is
 * let go (the first is the call's error), on both frees. */
TEST(a_failed_record_logs_with_no_lock_held)
{
    fresh_driver(T4);
    static struct probe p = {.lock = PTHREAD_MUTEX_INITIALIZER,
                             .done = PTHREAD_COND_INITIALIZER};
    gpumem_runtime *rt = probed_runtime(&p);
    if (!rt)
        return;
    void *c = NULL;
    ASSERT_OK(gpumem_malloc_async(rt, 0, 4 * MiB, S1, &c)); /* initializes */
    ASSERT_OK(gpumem_free_async(rt, c, S1));                /* S1 has a slot */
    ASSERT_OK(gpumem_malloc_async(rt, 0, 4 * MiB, S1, &c));
    ASSERT_OK(gpumem_record_stream(rt, c, S2));
    p.rt = rt;
    for (int plain = 0; plain < 2; plain++) {
        log_text[0] = '\0';
        /* the event is made (a push and a pop; the second free reuses it),
         * then recorded: the pop after the record fails */
        ASSERT_EQ(fakecuda_fail_nth("cuEventRecord", 1, 400 /* INVALID_HANDLE */), 0);
        ASSERT_EQ(fakecuda_fail_nth("cuCtxPopCurrent_v2", plain ? 1 : 2,
                                    CUDA_ERROR_INVALID_VALUE),
                  0);
        ASSERT_STATUS(plain ? gpumem_free(rt, c) : gpumem_free_async(rt, c, S1),
                      GPUMEM_ERR_BACKEND);
        ASSERT_CONTAINS(gpumem_last_error(), "cuEventRecord");
        failed_pop_logged();
    }
    probes_end(&p, 2);
    ASSERT_OK(gpumem_free(rt, c));
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

/* ------------------------------------------------------------ the cost -- */

TEST(events_are_reused_from_one_free_to_the_next)
{
    fresh_driver(T4);
    gpumem_runtime *rt = limited(64 * MiB, false);
    if (!rt)
        return;
    for (int i = 0; i < 10; i++) {
        void *c = NULL;
        ASSERT_OK(gpumem_malloc_async(rt, 0, 1 * MiB, S1, &c));
        ASSERT_OK(gpumem_record_stream(rt, c, S2));
        ASSERT_OK(gpumem_free_async(rt, c, S1));
        uint64_t released = 0; /* S2 and S1 idle: their events complete */
        ASSERT_OK(gpumem_release_unused(rt, 0, &released));
    }
    ASSERT_EQ(fakecuda_calls("cuEventCreate"), 2); /* S2's and S1's, then reused */
    ASSERT_EQ(fakecuda_calls("cuEventRecord"), 20);
    ASSERT_EQ(info_of(rt, 0).current_bytes, 0);
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

/* Many recorded blocks among unrecorded ones (the table grows, entries move
 * when others leave it): each is kept exactly when it was recorded. */
TEST(many_recorded_blocks_each_wait_and_no_other)
{
    fresh_driver(T4);
    enum { N = 200 };
    gpumem_runtime *rt = limited(N * 256 * KiB, false);
    if (!rt)
        return;
    static void *blocks[N];
    for (int i = 0; i < N; i++)
        ASSERT_OK(gpumem_malloc_async(rt, 0, 256 * KiB, S1, &blocks[i]));
    for (int i = 1; i < N; i += 2)
        ASSERT_OK(gpumem_record_stream(rt, blocks[i], S2));
    fakecuda_hold_stream(S2);
    for (int i = 0; i < N; i++) /* freed in a scattered order */
        ASSERT_OK(gpumem_free_async(rt, blocks[(i * 7) % N], S1));
    ASSERT_EQ(info_of(rt, 0).current_bytes, N / 2 * 256 * KiB);
    /* S1 gets back what only S1 used, at once, and nothing S2 may still use */
    static void *again[N];
    for (int i = 0; i < N / 2; i++) {
        ASSERT_OK(gpumem_malloc_async(rt, 0, 256 * KiB, S1, &again[i]));
        int at = -1;
        for (int j = 0; j < N; j++)
            if (blocks[j] == again[i])
                at = j;
        if (at < 0 || at % 2 != 0)
            HARNESS_FAIL("allocation %d got block %d, which S2 may still use", i, at);
    }
    ASSERT_EQ(fakecuda_calls("cuEventSynchronize"), 0);
    fakecuda_release_stream(S2);
    for (int i = 0; i < N / 2; i++) /* the pool is full: these wait, then get them */
        ASSERT_OK(gpumem_malloc_async(rt, 0, 256 * KiB, S1, &again[N / 2 + i]));
    for (int i = 0; i < N; i++)
        ASSERT_OK(gpumem_free_async(rt, again[i], S1));
    ASSERT_EQ(info_of(rt, 0).current_bytes, 0);
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

/* ------------------------------------------------ release and destroy -- */

TEST(release_and_destroy_wait_for_kept_blocks)
{
    fresh_driver(T4);
    gpumem_runtime *rt = limited(64 * MiB, true);
    if (!rt)
        return;
    void *a = NULL, *b = NULL;
    ASSERT_OK(gpumem_malloc_async(rt, 0, 8 * MiB, S1, &a));
    ASSERT_OK(gpumem_malloc_async(rt, 0, 8 * MiB, S1, &b));
    ASSERT_OK(gpumem_record_stream(rt, a, S2));
    ASSERT_OK(gpumem_record_stream(rt, b, S3));
    fakecuda_hold_stream(S2);
    fakecuda_hold_stream(S3);
    ASSERT_OK(gpumem_free_async(rt, a, S1));
    struct releaser r = {.streams = {S2}, .ms = {60}, .n = 1};
    double t0 = now_ms();
    start_releaser(&r);
    uint64_t released = 0;
    ASSERT_OK(gpumem_release_unused(rt, 0, &released));
    double waited = now_ms() - t0;
    pthread_join(r.thread, NULL);
    if (waited < 50)
        HARNESS_FAIL("release_unused returned after %.0f ms, before S2's work", waited);
    ASSERT_EQ(info_of(rt, 0).current_bytes, 8 * MiB); /* b only */
    ASSERT_OK(gpumem_free_async(rt, b, S1));          /* kept: S3 still runs */
    struct releaser r3 = {.streams = {S3}, .ms = {60}, .n = 1};
    t0 = now_ms();
    start_releaser(&r3);
    gpumem_runtime_destroy(rt); /* waits for S3 before giving the memory back */
    waited = now_ms() - t0;
    pthread_join(r3.thread, NULL);
    if (waited < 50)
        HARNESS_FAIL("destroy returned after %.0f ms, before S3's work", waited);
    check_driver_clean(0);
}

/* ------------------------------------------------------------- capture -- */

/* While a CUDA graph is captured the driver refuses event queries and waits
 * (global capture mode): gpumem makes none, fails rather than wait, and
 * records a kept block's events after the capture. */
TEST(during_a_capture_no_event_is_queried_recorded_or_waited_for)
{
    fresh_driver(T4);
    gpumem_runtime *rt = limited(8 * MiB, false);
    if (!rt)
        return;
    void *a = NULL, *c = NULL, *q = NULL;
    ASSERT_STATUS(gpumem_stream_capture(false), GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(gpumem_last_error(), "no capture is under way");
    ASSERT_OK(gpumem_malloc_async(rt, 0, 4 * MiB, S1, &a));
    ASSERT_OK(gpumem_malloc_async(rt, 0, 4 * MiB, S1, &c));
    ASSERT_OK(gpumem_record_stream(rt, c, S2));
    fakecuda_hold_stream(S1);
    fakecuda_hold_stream(S2);
    ASSERT_OK(gpumem_stream_capture(true));
    ASSERT_OK(gpumem_stream_capture(true)); /* two captures at once */
    ASSERT_OK(gpumem_free_async(rt, a, S1));
    ASSERT_OK(gpumem_free_async(rt, c, S1)); /* kept, its events later */
    ASSERT_STATUS(gpumem_malloc_async(rt, 0, 4 * MiB, S3, &q), GPUMEM_ERR_OUT_OF_MEMORY);
    uint64_t released = 0;
    ASSERT_OK(gpumem_release_unused(rt, 0, &released)); /* waits for nothing */
    ASSERT_OK(gpumem_stream_capture(false));
    ASSERT_STATUS(gpumem_malloc_async(rt, 0, 4 * MiB, S3, &q), GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_EQ(fakecuda_calls("cuEventQuery"), 0);
    ASSERT_EQ(fakecuda_calls("cuEventSynchronize"), 0);
    ASSERT_EQ(fakecuda_calls("cuEventRecord"), 0);
    ASSERT_OK(gpumem_stream_capture(false)); /* the last one ends */
    struct releaser r = {.streams = {S1, S2}, .ms = {40, 80}, .n = 2};
    double t0 = now_ms();
    start_releaser(&r);
    ASSERT_OK(gpumem_malloc_async(rt, 0, 8 * MiB, S3, &q)); /* now it waits */
    double waited = now_ms() - t0;
    pthread_join(r.thread, NULL);
    if (waited < 70)
        HARNESS_FAIL("the pool came back after %.0f ms, before S2's work (80 ms)",
                     waited);
    ASSERT_TRUE(fakecuda_calls("cuEventRecord") >= 3); /* c's two, S1's fence */
    ASSERT_OK(gpumem_free_async(rt, q, S3));
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

/* ---------------------------------------------------------------- fork -- */

struct parent_state {
    gpumem_runtime *rt;
    void *kept, *recorded;
    long parent;
};

static unsigned long driver_calls(void)
{
    unsigned long n = 0;
    for (size_t i = 0; fakecuda_entry_point(i); i++)
        n += fakecuda_calls_ever(fakecuda_entry_point(i));
    return n;
}

static void child_with_kept(void *arg)
{
    struct parent_state *ps = arg;
    unsigned long calls = driver_calls();
    char call[80];
    snprintf(call, sizeof call, "gpumem_record_stream(%p)", ps->recorded);
    expect_fork_refusal("record_stream", gpumem_record_stream(ps->rt, ps->recorded, S3),
                        call, "the one that initialized the runtime", ps->parent);
    snprintf(call, sizeof call, "gpumem_free_async(%p)", ps->recorded);
    expect_fork_refusal("free_async", gpumem_free_async(ps->rt, ps->recorded, S1), call,
                        "the one that initialized the runtime", ps->parent);
    gpumem_runtime_destroy(ps->rt); /* the parent's events: no driver call */
    ASSERT_EQ(driver_calls(), calls);
}

TEST(a_child_forgets_its_copy_of_kept_and_recorded_blocks_without_a_driver_call)
{
    fresh_driver(T4);
    struct parent_state ps = {.rt = limited(64 * MiB, true), .parent = (long)getpid()};
    if (!ps.rt)
        return;
    ASSERT_OK(gpumem_malloc_async(ps.rt, 0, 1 * MiB, S1, &ps.kept));
    ASSERT_OK(gpumem_malloc_async(ps.rt, 0, 1 * MiB, S1, &ps.recorded));
    ASSERT_OK(gpumem_record_stream(ps.rt, ps.kept, S2));
    ASSERT_OK(gpumem_record_stream(ps.rt, ps.recorded, S2));
    fakecuda_hold_stream(S2);
    ASSERT_OK(gpumem_free_async(ps.rt, ps.kept, S1));

    in_child("kept blocks", child_with_kept, &ps, 20);

    fakecuda_release_stream(S2);
    ASSERT_OK(gpumem_free_async(ps.rt, ps.recorded, S1));
    gpumem_runtime_destroy(ps.rt);
    check_driver_clean(0);
}

/* Simulated GPUs' streams are synchronous: a record is accepted, and nothing
 * waits. */
TEST(on_simulated_gpus_a_record_changes_nothing)
{
    clean_env();
    gpumem_status s;
    gpumem_runtime *rt = runtime_on(GPUMEM_BACKEND_SIM, &s);
    ASSERT_OK(s);
    void *c = NULL, *q = NULL;
    ASSERT_OK(gpumem_malloc_async(rt, 0, 1 * MiB, S1, &c));
    ASSERT_OK(gpumem_record_stream(rt, c, S2));
    ASSERT_OK(gpumem_free_async(rt, c, S1));
    ASSERT_OK(gpumem_malloc_async(rt, 0, 1 * MiB, S2, &q));
    ASSERT_TRUE(q == c);
    ASSERT_OK(gpumem_free(rt, q));
    gpumem_runtime_destroy(rt);
}

int main(void)
{
    RUN(a_recorded_block_waits_for_every_stream_it_was_used_on);
    RUN(the_frees_own_stream_must_finish_too);
    RUN(a_growing_pool_grows_past_a_kept_block_and_collects_it_without_a_wait);
    RUN(recording_the_frees_own_stream_costs_nothing);
    RUN(a_plain_free_of_a_recorded_block_waits_too);
    RUN(a_freed_or_foreign_block_is_refused);
    RUN(a_failed_event_record_leaves_the_block_live_and_recorded);
    RUN(a_failed_record_logs_with_no_lock_held);
    RUN(events_are_reused_from_one_free_to_the_next);
    RUN(many_recorded_blocks_each_wait_and_no_other);
    RUN(release_and_destroy_wait_for_kept_blocks);
    RUN(during_a_capture_no_event_is_queried_recorded_or_waited_for);
    RUN(a_child_forgets_its_copy_of_kept_and_recorded_blocks_without_a_driver_call);
    RUN(on_simulated_gpus_a_record_changes_nothing);
    HARNESS_EXIT();
}
