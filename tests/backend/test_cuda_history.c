/* Snapshots and the event history on the CUDA backend over the driver double,
 * with its streams held (fakecuda_hold_stream): a block freed on a stream and
 * taken back on it names its new owner (sequence number, tag, stream, requested
 * size), a stream-ordered free completes at once (the block is its stream's
 * free memory), a free chunk a stream holds names that stream, each chunk
 * carries its stream, the trace of the run is what the program did, and an
 * out of memory that the history records logs a failed driver read with no
 * lock held. */
#include "cuda_util.h"

#include <stdlib.h>

#define T4 "Tesla T4:15GiB:7.5"

static void *const S1 = (void *)0x5151; /* 20817 */
static void *const S2 = (void *)0x5252; /* 21074 */

static gpumem_runtime *growing(uint64_t limit)
{
    gpumem_runtime *rt = cuda_runtime();
    if (!rt)
        return NULL;
    gpumem_logical_device_config cfg = GPUMEM_LOGICAL_DEVICE_LIMIT(limit);
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, &cfg, 1));
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    ASSERT_OK(gpumem_record_history(rt, 1000));
    ASSERT_OK(gpumem_initialize(rt));
    return rt;
}

static char *text_of(gpumem_status (*fn)(gpumem_runtime *, int, char *, size_t, size_t *),
                     gpumem_runtime *rt)
{
    size_t n = 0;
    ASSERT_OK(fn(rt, 0, NULL, 0, &n));
    char *buf = malloc(n);
    ASSERT_OK(fn(rt, 0, buf, n, &n));
    return buf;
}

/* The actions of the snapshot's trace, space-separated. */
static void actions_of(const char *snap, char *out, size_t cap)
{
    const char *p = strstr(snap, "\"device_traces\":[");
    ASSERT_TRUE(p != NULL);
    size_t n = 0;
    out[0] = '\0';
    for (const char *a = strstr(p, "\"action\":\""); a;
         a = strstr(a + 1, "\"action\":\"")) {
        a += strlen("\"action\":\"");
        const char *q = strchr(a, '"');
        n += (size_t)snprintf(out + n, cap - n, "%s%.*s", n ? " " : "", (int)(q - a), a);
    }
}

TEST(a_streams_memory_names_its_owners)
{
    fresh_driver(T4);
    gpumem_runtime *rt = growing(64 * MiB);
    if (!rt)
        return;
    void *p = NULL, *q = NULL, *r = NULL;
    ASSERT_OK(gpumem_set_tag("first"));
    ASSERT_OK(gpumem_malloc_async(rt, 0, 1 * MiB, S1, &p));
    fakecuda_hold_stream(S1); /* a kernel still runs on S1 */
    ASSERT_OK(gpumem_free_async(rt, p, S1));
    ASSERT_OK(gpumem_set_tag("second"));
    ASSERT_OK(gpumem_malloc_async(rt, 0, 1 * MiB - 4000, S1, &q));
    ASSERT_OK(gpumem_set_tag(NULL));
    ASSERT_TRUE(q == p);

    char want[256];
    char *snap = text_of(gpumem_snapshot_json, rt);
    snprintf(want, sizeof want,
             "{\"address\":%llu,\"size\":1044736,\"requested_size\":1044576,\"state\":"
             "\"active_allocated\",\"seq\":2,\"stream\":20817,\"tag\":\"second\"",
             (unsigned long long)(uintptr_t)q);
    ASSERT_CONTAINS(snap, want);
    char actions[512];
    actions_of(snap, actions, sizeof actions);
    /* a stream-ordered free completes at once: the block is S1's free memory */
    ASSERT_STREQ(actions, "segment_map alloc free_requested free_completed alloc");
    snprintf(want, sizeof want,
             "{\"action\":\"free_requested\",\"addr\":%llu,\"size\":1048576,"
             "\"stream\":20817,",
             (unsigned long long)(uintptr_t)p);
    ASSERT_CONTAINS(snap, want);
    ASSERT_CONTAINS(snap, "\"requested_size\":1044576,\"seq\":2,\"tag\":\"second\"");
    free(snap);
    /* a bad pointer, on a stream with free memory of its own: nothing recorded
     * (the actions below) */
    ASSERT_STATUS(gpumem_free_async(rt, (char *)q + 256, S1), GPUMEM_ERR_INVALID_POINTER);

    /* freed on S1 with its work queued: S1's free memory, which S2 does not get */
    ASSERT_OK(gpumem_free_async(rt, q, S1));
    ASSERT_OK(gpumem_malloc_async(rt, 0, 1 * MiB, S2, &r));
    ASSERT_TRUE(r != q); /* S1's work still runs: another region */
    snap = text_of(gpumem_snapshot_json, rt);
    actions_of(snap, actions, sizeof actions);
    ASSERT_STREQ(actions, "segment_map alloc free_requested free_completed alloc "
                          "free_requested free_completed segment_map alloc");
    /* S1's memory (q's block, joined with the free rest of its region) is
     * inactive and names S1, whose work may still use it */
    snprintf(want, sizeof want,
             "{\"address\":%llu,\"size\":2097152,\"requested_size\":0,\"state\":"
             "\"inactive\",\"seq\":0,\"stream\":20817,",
             (unsigned long long)(uintptr_t)q);
    ASSERT_CONTAINS(snap, want);
    free(snap);
    fakecuda_release_stream(S1);
    ASSERT_OK(gpumem_free_async(rt, r, S2));
    snap = text_of(gpumem_snapshot_json, rt);
    actions_of(snap, actions, sizeof actions);
    ASSERT_STREQ(actions, "segment_map alloc free_requested free_completed alloc "
                          "free_requested free_completed segment_map alloc "
                          "free_requested free_completed");
    snprintf(want, sizeof want,
             "{\"address\":%llu,\"size\":2097152,\"requested_size\":0,"
             "\"state\":\"inactive\",\"seq\":0,\"stream\":21074,",
             (unsigned long long)(uintptr_t)r);
    ASSERT_CONTAINS(snap, want); /* S2's now */
    free(snap);

    char *trace = text_of(gpumem_history_trace, rt);
    ASSERT_CONTAINS(trace, "\na d0.1 1048576\nf d0.1\na d0.2 1044576\nf d0.2\n");
    ASSERT_CONTAINS(trace, " 2097152\na d0.3 1048576\nf d0.3\n");
    free(trace);
    fakecuda_release_stream(S2);
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

TEST(each_chunk_carries_its_stream)
{
    fresh_driver(T4);
    gpumem_runtime *rt = growing(64 * MiB);
    if (!rt)
        return;
    void *a, *b, *c;
    ASSERT_OK(gpumem_malloc_async(rt, 0, 4096, S1, &a));
    ASSERT_OK(gpumem_malloc_async(rt, 0, 8192, S2, &b));
    ASSERT_OK(gpumem_malloc(rt, 0, 512, &c));
    char *snap = text_of(gpumem_snapshot_json, rt);
    char want[160];
    const struct {
        void *p;
        unsigned size, seq;
        unsigned long long stream;
    } chunks[] = {{a, 4096, 1, 20817}, {b, 8192, 2, 21074}, {c, 512, 3, 0}};
    for (size_t i = 0; i < 3; i++) {
        snprintf(want, sizeof want,
                 "{\"address\":%llu,\"size\":%u,\"requested_size\":%u,\"state\":"
                 "\"active_allocated\",\"seq\":%u,\"stream\":%llu,",
                 (unsigned long long)(uintptr_t)chunks[i].p, chunks[i].size,
                 chunks[i].size, chunks[i].seq, chunks[i].stream);
        ASSERT_CONTAINS(snap, want);
    }
    free(snap);
    ASSERT_OK(gpumem_free_async(rt, a, S1));
    ASSERT_OK(gpumem_free_async(rt, b, S2));
    ASSERT_OK(gpumem_free(rt, c));
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

/* An out of memory that the history records reads the device's free memory
 * (cuMemGetInfo_v2, a context pushed and popped): when that read fails and its
 * pop too, the second failure goes to the log once the pool's lock is let go,
 * for a request larger than the whole budget as for one that finds no room. */
TEST(an_out_of_memory_in_the_history_logs_with_no_lock_held)
{
    fresh_driver(T4);
    static struct probe p = {.lock = PTHREAD_MUTEX_INITIALIZER,
                             .done = PTHREAD_COND_INITIALIZER};
    gpumem_runtime *rt = probed_runtime(&p);
    if (!rt)
        return;
    gpumem_logical_device_config cfg = GPUMEM_LOGICAL_DEVICE_LIMIT(8 * MiB);
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, &cfg, 1));
    ASSERT_OK(gpumem_record_history(rt, 100));
    ASSERT_OK(gpumem_initialize(rt));
    void *q = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, 6 * MiB, &q));
    p.rt = rt;
    const uint64_t sizes[2] = {64 * MiB, 4 * MiB}; /* past the budget; no room */
    for (int i = 0; i < 2; i++) {
        void *r = NULL;
        log_text[0] = '\0';
        ASSERT_EQ(fakecuda_fail_nth("cuMemGetInfo_v2", 1, CUDA_ERROR_INVALID_VALUE), 0);
        ASSERT_EQ(fakecuda_fail_nth("cuCtxPopCurrent_v2", 1, CUDA_ERROR_INVALID_VALUE),
                  0);
        ASSERT_STATUS(gpumem_malloc(rt, 0, sizes[i], &r), GPUMEM_ERR_OUT_OF_MEMORY);
        failed_pop_logged();
    }
    probes_end(&p, 2);
    ASSERT_OK(gpumem_free(rt, q));
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

int main(void)
{
    RUN(a_streams_memory_names_its_owners);
    RUN(each_chunk_carries_its_stream);
    RUN(an_out_of_memory_in_the_history_logs_with_no_lock_held);
    HARNESS_EXIT();
}
