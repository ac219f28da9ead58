/* The event history through the public API on simulated GPUs:
 * gpumem_record_history (before and after initialization, re-sized, off),
 * GPUMEM_RECORD_HISTORY, the events a snapshot's device_traces shows for
 * allocations, frees, regions and out of memory, a ring that wraps, and
 * gpumem_history_trace's text (bench/'s trace format) for one device and for two
 * merged by time; a runtime with a history across fork(). The viewer's rules and the
 * replay are checked by tests/python/test_snapshot.py; the stream-ordered events on the
 * driver double by tests/backend/test_cuda_streams.c. */
#include "api_util.h"
#include "fork_util.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *text_of(gpumem_status (*fn)(gpumem_runtime *, int, char *, size_t, size_t *),
                     gpumem_runtime *rt, int logical)
{
    size_t n = 0;
    ASSERT_OK(fn(rt, logical, NULL, 0, &n));
    char *buf = malloc(n);
    ASSERT_OK(fn(rt, logical, buf, n, &n));
    ASSERT_EQ(strlen(buf) + 1, n);
    return buf;
}

static char *snapshot_of(gpumem_runtime *rt, int logical)
{
    return text_of(gpumem_snapshot_json, rt, logical);
}

static char *trace_of(gpumem_runtime *rt, int logical)
{
    return text_of(gpumem_history_trace, rt, logical);
}

/* The trace's operation lines (comments dropped), into a fresh string. */
static char *ops_of(const char *trace)
{
    if (!trace)
        return calloc(1, 1);
    char *out = calloc(1, strlen(trace) + 1);
    size_t n = 0;
    for (const char *p = trace; *p;) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) + 1 : strlen(p);
        if (*p != '#') {
            memcpy(out + n, p, len);
            n += len;
        }
        p += len;
    }
    return out;
}

/* The operation lines of the trace of `logical`. */
static char *trace_ops(gpumem_runtime *rt, int logical)
{
    char *trace = trace_of(rt, logical);
    char *ops = ops_of(trace);
    free(trace);
    return ops;
}

/* The actions of device `logical`'s trace in a snapshot, space-separated. */
static void actions_of(const char *snap, char *out, size_t cap)
{
    const char *p = strstr(snap, "\"device_traces\":[");
    ASSERT_TRUE(p != NULL);
    const char *end = strstr(p, "\"devices\":[");
    size_t n = 0;
    out[0] = '\0';
    for (const char *a = strstr(p, "\"action\":\""); a && a < end;
         a = strstr(a + 1, "\"action\":\"")) {
        a += strlen("\"action\":\"");
        const char *q = strchr(a, '"');
        int k = snprintf(out + n, cap - n, "%s%.*s", n ? " " : "", (int)(q - a), a);
        n += (size_t)k;
    }
}

TEST(off_by_default)
{
    gpumem_runtime *rt = sim_runtime("HIST:1GiB");
    void *p;
    ASSERT_OK(gpumem_malloc(rt, 0, 1000, &p));
    ASSERT_OK(gpumem_free(rt, p));
    char *snap = snapshot_of(rt, -1);
    ASSERT_CONTAINS(snap, "\"device_traces\":[[]]");
    ASSERT_CONTAINS(snap, "\"history_recording\":false,\"history_events\":0");
    char *trace = trace_of(rt, -1);
    ASSERT_CONTAINS(trace, "/device:GPU:0: the history is off");
    char *ops = ops_of(trace);
    ASSERT_STREQ(ops, "");
    free(ops);
    free(trace);
    free(snap);
    gpumem_runtime_destroy(rt);
}

TEST(events_of_a_growing_pool)
{
    gpumem_runtime *rt = sim_runtime("HIST:1GiB");
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    ASSERT_OK(gpumem_record_history(rt, 100)); /* before initialization */
    void *a, *b, *c;
    ASSERT_OK(gpumem_set_tag("weights"));
    ASSERT_OK(gpumem_malloc(rt, 0, 1000, &a));
    ASSERT_OK(gpumem_set_tag(NULL));
    ASSERT_OK(gpumem_malloc(rt, 0, 3000, &b));
    ASSERT_OK(gpumem_free(rt, a));
    ASSERT_OK(gpumem_malloc(rt, 0, 500, &c));
    ASSERT_STATUS(gpumem_malloc(rt, 0, 2 * GiB, &a), GPUMEM_ERR_OUT_OF_MEMORY);

    char *snap = snapshot_of(rt, -1);
    char actions[512];
    actions_of(snap, actions, sizeof actions);
    ASSERT_STREQ(actions,
                 "segment_map alloc alloc free_requested free_completed alloc oom");
    ASSERT_CONTAINS(snap, "\"size\":1024,\"stream\":0,\"time_us\":");
    ASSERT_CONTAINS(snap, ",\"requested_size\":1000,\"seq\":1,\"tag\":\"weights\","
                          "\"frames\":[{\"filename\":\"weights\"");
    ASSERT_CONTAINS(snap,
                    ",\"requested_size\":3000,\"seq\":2,\"tag\":null,\"frames\":[]}");
    ASSERT_CONTAINS(snap, "\"action\":\"oom\",\"addr\":0,\"size\":2147483648,");
    ASSERT_CONTAINS(snap, ",\"device_free\":");
    ASSERT_CONTAINS(snap, "\"history_recording\":true,\"history_events\":7,"
                          "\"history_dropped\":0");

    char *trace = trace_of(rt, 0);
    char *ops = ops_of(trace);
    ASSERT_STREQ(ops, "a d0.1 1000\na d0.2 3000\nf d0.1\na d0.3 500\n");
    ASSERT_CONTAINS(trace, "# d0 segment_map 0x");
    ASSERT_CONTAINS(trace, "# d0 out of memory: 2147483648 bytes asked for");
    ASSERT_CONTAINS(trace, "7 events held, 0 dropped");

    /* regions given back */
    ASSERT_OK(gpumem_free(rt, b));
    ASSERT_OK(gpumem_free(rt, c));
    uint64_t released = 0;
    ASSERT_OK(gpumem_release_unused(rt, 0, &released));
    ASSERT_TRUE(released > 0);
    char *after = snapshot_of(rt, -1);
    actions_of(after, actions, sizeof actions);
    ASSERT_CONTAINS(actions, "oom free_requested free_completed free_requested "
                             "free_completed segment_unmap");
    free(after);
    free(ops);
    free(trace);
    free(snap);
    gpumem_runtime_destroy(rt);
}

TEST(a_greedy_pool_and_the_variable)
{
    setenv("GPUMEM_RECORD_HISTORY", "50", 1);
    gpumem_runtime *rt = env_runtime("HIST:1GiB");
    unsetenv("GPUMEM_RECORD_HISTORY");
    void *p;
    ASSERT_OK(gpumem_malloc(rt, 0, 4096, &p));
    char *snap = snapshot_of(rt, -1);
    char actions[256];
    actions_of(snap, actions, sizeof actions);
    /* the budget taken at initialization, then the allocation */
    ASSERT_STREQ(actions, "segment_map alloc");
    ASSERT_CONTAINS(snap, "\"history_recording\":true");
    ASSERT_OK(gpumem_free(rt, p));
    free(snap);
    gpumem_runtime_destroy(rt);

    setenv("GPUMEM_RECORD_HISTORY", "lots", 1);
    gpumem_options o;
    ASSERT_OK(gpumem_options_init(&o));
    o.backend = GPUMEM_BACKEND_SIM;
    o.sim_devices = "1GiB";
    ASSERT_STATUS(gpumem_runtime_create(&o, &rt), GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(gpumem_last_error(), "GPUMEM_RECORD_HISTORY");
    unsetenv("GPUMEM_RECORD_HISTORY");
}

TEST(the_ring_wraps_and_resizes)
{
    gpumem_runtime *rt = sim_runtime("HIST:1GiB");
    ASSERT_OK(gpumem_initialize(rt));
    ASSERT_OK(gpumem_record_history(rt, 6)); /* after initialization */
    void *p;
    for (int i = 0; i < 10; i++) {
        ASSERT_OK(gpumem_malloc(rt, 0, 256 * (size_t)(i + 1), &p));
        ASSERT_OK(gpumem_free(rt, p));
    }
    /* 30 events (alloc, free asked, free done), the last 6 held: allocations 9
     * and 10, each with its free */
    char *snap = snapshot_of(rt, -1);
    ASSERT_CONTAINS(snap, "\"history_events\":6,\"history_dropped\":24");
    char actions[256];
    actions_of(snap, actions, sizeof actions);
    ASSERT_STREQ(actions, "alloc free_requested free_completed alloc free_requested "
                          "free_completed");
    char *ops = trace_ops(rt, 0);
    ASSERT_STREQ(ops, "a d0.9 2304\nf d0.9\na d0.10 2560\nf d0.10\n");
    free(ops);
    free(snap);

    /* a free whose allocation was dropped is left out, and counted */
    void *old;
    ASSERT_OK(gpumem_malloc(rt, 0, 512, &old));
    for (int i = 0; i < 3; i++) {
        ASSERT_OK(gpumem_malloc(rt, 0, 256, &p));
        ASSERT_OK(gpumem_free(rt, p));
    }
    ASSERT_OK(gpumem_free(rt, old));
    char *trace = trace_of(rt, 0);
    ops = ops_of(trace);
    /* held: the third's free completing, the fourth with its free, old's free */
    ASSERT_STREQ(ops, "a d0.14 256\nf d0.14\n");
    ASSERT_CONTAINS(trace, "# 1 frees of allocations made before the oldest event "
                           "held are left out");
    free(ops);
    free(trace);

    /* smaller: the newest kept; off: dropped; on again: from then on */
    ASSERT_OK(gpumem_record_history(rt, 2));
    snap = snapshot_of(rt, -1);
    actions_of(snap, actions, sizeof actions);
    ASSERT_STREQ(actions, "free_requested free_completed");
    free(snap);
    ASSERT_OK(gpumem_record_history(rt, 0));
    snap = snapshot_of(rt, -1);
    ASSERT_CONTAINS(snap, "\"device_traces\":[[]]");
    ASSERT_CONTAINS(snap, "\"history_recording\":false");
    free(snap);
    ASSERT_OK(gpumem_record_history(rt, 1000));
    ASSERT_OK(gpumem_malloc(rt, 0, 256, &p));
    snap = snapshot_of(rt, -1);
    actions_of(snap, actions, sizeof actions);
    ASSERT_STREQ(actions, "alloc");
    ASSERT_CONTAINS(snap, "\"seq\":15");
    free(snap);
    ASSERT_OK(gpumem_free(rt, p));

    ASSERT_STATUS(gpumem_record_history(rt, (size_t)GPUMEM_RECORD_HISTORY_MAX + 1),
                  GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(gpumem_last_error(), "gpumem_record_history(268435457)");
    gpumem_runtime_destroy(rt);
}

TEST(two_devices_merge_by_time)
{
    gpumem_runtime *rt = sim_runtime("HIST:1GiB,HIST:1GiB");
    ASSERT_OK(gpumem_record_history(rt, 100));
    void *p[6];
    for (int i = 0; i < 6; i++) {
        ASSERT_OK(gpumem_malloc(rt, i % 2, 256 * (size_t)(i + 1), &p[i]));
        usleep(1000); /* distinct times across the two rings */
    }
    ASSERT_OK(gpumem_free(rt, p[1]));
    usleep(1000);
    ASSERT_OK(gpumem_free(rt, p[0]));
    char *ops = trace_ops(rt, -1);
    ASSERT_STREQ(ops, "a d0.1 256\na d1.1 512\na d0.2 768\na d1.2 1024\na d0.3 1280\n"
                      "a d1.3 1536\nf d1.1\nf d0.1\n");
    free(ops);
    ops = trace_ops(rt, 1);
    ASSERT_STREQ(ops, "a d1.1 512\na d1.2 1024\na d1.3 1536\nf d1.1\n");
    free(ops);
    char *snap = snapshot_of(rt, 1);
    /* one device: the other's trace is empty, its index kept */
    ASSERT_TRUE(strstr(snap, "\"device_traces\":[[],[{\"action\":\"segment_map\"") !=
                NULL);
    free(snap);

    size_t n = 0;
    char small[16] = "untouched";
    ASSERT_STATUS(gpumem_history_trace(rt, -1, small, sizeof small, &n),
                  GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(gpumem_last_error(), "the trace is");
    ASSERT_STREQ(small, "untouched");
    ASSERT_STATUS(gpumem_history_trace(rt, 2, NULL, 0, &n), GPUMEM_ERR_NO_SUCH_DEVICE);
    ASSERT_STATUS(gpumem_history_trace_file(rt, -1, "/nonexistent-dir/x.trace"),
                  GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(gpumem_last_error(), "No such file or directory");

    char path[] = "/tmp/gpumem-trace-XXXXXX";
    int fd = mkstemp(path);
    ASSERT_TRUE(fd >= 0);
    close(fd);
    ASSERT_OK(gpumem_history_trace_file(rt, -1, path));
    char *want = trace_of(rt, -1);
    FILE *f = fopen(path, "r");
    char *got = calloc(1, strlen(want) + 16);
    size_t len = fread(got, 1, strlen(want) + 15, f);
    fclose(f);
    unlink(path);
    ASSERT_EQ(len, strlen(want));
    ASSERT_STREQ(got, want);
    free(got);
    free(want);
    for (int i = 2; i < 6; i++)
        ASSERT_OK(gpumem_free(rt, p[i]));
    gpumem_runtime_destroy(rt);
}

/* The child of a process whose runtime records: its copy is refused, and its
 * destroy frees the copy of the ring without touching the parent's. */
static void child_of_recording(void *arg)
{
    gpumem_runtime *rt = arg;
    size_t n = 0;
    ASSERT_STATUS(gpumem_record_history(rt, 10), GPUMEM_ERR_UNSUPPORTED);
    ASSERT_CONTAINS(gpumem_last_error(), "gpumem_record_history");
    ASSERT_STATUS(gpumem_history_trace(rt, -1, NULL, 0, &n), GPUMEM_ERR_UNSUPPORTED);
    gpumem_runtime_destroy(rt);
}

TEST(a_recording_runtime_across_fork)
{
    gpumem_runtime *rt = sim_runtime("HIST:1GiB");
    ASSERT_OK(gpumem_record_history(rt, 100));
    void *p;
    ASSERT_OK(gpumem_malloc(rt, 0, 4096, &p));
    in_child("recording runtime", child_of_recording, rt, 20);
    ASSERT_OK(gpumem_free(rt, p)); /* the parent goes on recording */
    char *ops = trace_ops(rt, 0);
    ASSERT_STREQ(ops, "a d0.1 4096\nf d0.1\n");
    free(ops);
    gpumem_runtime_destroy(rt);
}

int main(void)
{
    RUN(off_by_default);
    RUN(events_of_a_growing_pool);
    RUN(a_greedy_pool_and_the_variable);
    RUN(the_ring_wraps_and_resizes);
    RUN(two_devices_merge_by_time);
    RUN(a_recording_runtime_across_fork);
    HARNESS_EXIT();
}
