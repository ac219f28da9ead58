/* Stream-ordered allocation on simulated GPUs, whose streams are synchronous (a
 * block freed on one stream is free for every stream at once), through the public
 * API: gpumem_malloc_async and gpumem_free_async, size 0 on both allocation calls,
 * refused frees, the allocator struct's stream-ordered entries and its struct_size
 * rule, the PyTorch entry points and gpumem_torch_alloc on the default runtime,
 * and threads. The rule on a backend with events is tests/backend/test_cuda_streams.c. */
#include "api_util.h"

#include <pthread.h>

static void *const S1 = (void *)0x5151;
static void *const S2 = (void *)0x5252;

static gpumem_memory_info info(gpumem_runtime *rt, int logical)
{
    gpumem_memory_info mi = GPUMEM_STRUCT_INIT(gpumem_memory_info);
    ASSERT_OK(gpumem_get_memory_info(rt, logical, &mi));
    return mi;
}

TEST(on_simulated_gpus_a_stream_ordered_free_is_a_free)
{
    gpumem_runtime *rt = sim_runtime("STREAMS:1GiB");
    if (!rt)
        return;
    void *p = NULL, *q = NULL;
    ASSERT_OK(gpumem_malloc_async(rt, 0, 1 << 20, S1, &p));
    ASSERT_TRUE(p != NULL && (uintptr_t)p % 256 == 0);
    memset(p, 0xA5, 1 << 20); /* host memory, as gpumem_malloc's */
    ASSERT_OK(gpumem_free_async(rt, p, S1));
    ASSERT_OK(gpumem_malloc_async(rt, 0, 1 << 20, S2, &q));
    ASSERT_TRUE(q == p); /* the work is done: any stream may have it at once */
    gpumem_memory_info mi = info(rt, 0);
    ASSERT_EQ(mi.current_bytes, 1 << 20);
    ASSERT_EQ(mi.num_allocs, 2);
    ASSERT_EQ(mi.num_frees, 1);
    /* the two families mix: either free takes either allocation */
    ASSERT_OK(gpumem_free(rt, q));
    ASSERT_OK(gpumem_malloc(rt, 0, 4096, &p));
    ASSERT_OK(gpumem_free_async(rt, p, NULL)); /* NULL: the legacy default stream */
    ASSERT_EQ(info(rt, 0).current_bytes, 0);
    gpumem_runtime_destroy(rt);
}

TEST(refused_stream_ordered_frees_say_why)
{
    gpumem_runtime *rt = sim_runtime("STREAMS-BAD:1GiB,STREAMS-BAD2:1GiB");
    if (!rt)
        return;
    char local[16];
    void *p = NULL;
    ASSERT_OK(gpumem_free_async(rt, NULL, S1)); /* no-op */
    ASSERT_STATUS(gpumem_free_async(rt, local, S1), GPUMEM_ERR_INVALID_POINTER);
    char want[96];
    snprintf(want, sizeof want, "gpumem_free_async(%p): not a pointer", (void *)local);
    ASSERT_CONTAINS(gpumem_last_error(), want);
    ASSERT_OK(gpumem_malloc_async(rt, 1, 1 << 20, S1, &p));
    ASSERT_OK(gpumem_free_async(rt, p, S1));
    ASSERT_STATUS(gpumem_free_async(rt, p, S1), GPUMEM_ERR_INVALID_POINTER);
    snprintf(want, sizeof want, "gpumem_free_async(%p, stream 0x5151): not the start", p);
    ASSERT_CONTAINS(gpumem_last_error(), want);
    ASSERT_STATUS(gpumem_malloc_async(rt, 2, 256, S1, &p), GPUMEM_ERR_NO_SUCH_DEVICE);
    ASSERT_STATUS(gpumem_malloc_async(rt, 0, 256, S1, NULL), GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(gpumem_last_error(),
                    "gpumem_malloc_async(/device:GPU:0): `ptr` is NULL");
    ASSERT_STATUS(gpumem_malloc_async(rt, 0, (size_t)2 << 30, S2, &p),
                  GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_CONTAINS(gpumem_last_error(),
                    "gpumem_malloc_async(/device:GPU:0, 2.00 GiB, stream 0x5252): out of "
                    "memory");
    gpumem_runtime_destroy(rt);
}

TEST(size_zero_is_ok_and_null_and_counts_nothing)
{
    gpumem_runtime *rt = sim_runtime("STREAMS-ZERO:1GiB");
    if (!rt)
        return;
    void *p = (void *)&p;
    ASSERT_OK(gpumem_malloc(rt, 0, 0, &p));
    ASSERT_TRUE(p == NULL);
    p = (void *)&p;
    ASSERT_OK(gpumem_malloc_async(rt, 0, 0, S1, &p));
    ASSERT_TRUE(p == NULL);
    bool initialized = true;
    ASSERT_OK(gpumem_is_initialized(rt, &initialized));
    ASSERT_FALSE(initialized);
    ASSERT_OK(gpumem_free(rt, p)); /* free(NULL) stays a no-op */
    ASSERT_STATUS(gpumem_malloc(rt, 1, 0, &p), GPUMEM_ERR_NO_SUCH_DEVICE);
    ASSERT_STATUS(gpumem_malloc(rt, 0, 0, NULL), GPUMEM_ERR_INVALID_ARGUMENT);
    gpumem_memory_info mi = info(rt, 0);
    ASSERT_EQ(mi.num_allocs, 0);
    ASSERT_EQ(mi.current_bytes, 0);
    ASSERT_EQ(mi.peak_bytes, 0);
    gpumem_runtime_destroy(rt);
}

/* ------------------------------------------------------------ allocator -- */

TEST(the_allocator_struct_has_stream_ordered_entries)
{
    gpumem_runtime *rt = sim_runtime("STREAMS-ALLOC:1GiB");
    if (!rt)
        return;
    gpumem_allocator a = GPUMEM_STRUCT_INIT(gpumem_allocator);
    ASSERT_OK(gpumem_get_allocator(rt, 0, &a));
    ASSERT_EQ(a.struct_size, sizeof a);
    ASSERT_EQ(a.struct_size, GPUMEM_ALLOCATOR_SIZE_ASYNC);
    ASSERT_TRUE(a.allocate_async != NULL && a.deallocate_async != NULL);
    void *p = NULL;
    ASSERT_OK(a.allocate_async(&a, 1 << 20, S1, &p));
    ASSERT_EQ(info(rt, 0).current_bytes, 1 << 20);
    ASSERT_OK(a.deallocate_async(&a, p, S1));
    ASSERT_EQ(info(rt, 0).current_bytes, 0);
    ASSERT_OK(a.allocate_async(&a, 0, S1, &p));
    ASSERT_TRUE(p == NULL);
    ASSERT_STATUS(a.allocate_async(NULL, 256, S1, &p), GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(gpumem_last_error(),
                    "gpumem_allocator.allocate_async: `self` is NULL");
    ASSERT_STATUS(a.deallocate_async(NULL, p, S1), GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(gpumem_last_error(), "gpumem_allocator.deallocate_async");
    gpumem_runtime_destroy(rt);
}

/* A program built before the entries existed has a smaller struct and leaves
 * struct_size unset (0, or whatever its stack held): only the first version's
 * fields are written, never a byte past them. */
TEST(an_allocator_struct_of_the_first_version_is_not_written_past)
{
    gpumem_runtime *rt = sim_runtime("STREAMS-ALLOC-OLD:1GiB");
    if (!rt)
        return;
    static const uint32_t sizes[] = {0,  7,    (uint32_t)GPUMEM_ALLOCATOR_SIZE_0_2,
                                     40, 1000, 0xdeadbeef};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        union {
            gpumem_allocator a;
            unsigned char bytes[sizeof(gpumem_allocator)];
        } u;
        memset(&u, 0x5A, sizeof u);
        u.a.struct_size = sizes[i];
        ASSERT_OK(gpumem_get_allocator(rt, 0, &u.a));
        ASSERT_EQ(u.a.struct_size, GPUMEM_ALLOCATOR_SIZE_0_2);
        for (size_t k = GPUMEM_ALLOCATOR_SIZE_0_2; k < sizeof u; k++)
            if (u.bytes[k] != 0x5A)
                HARNESS_FAIL("struct_size %u: byte %zu was written", sizes[i], k);
        void *p = NULL;
        ASSERT_OK(u.a.allocate(&u.a, 4096, &p));
        ASSERT_OK(u.a.deallocate(&u.a, p));
    }
    gpumem_runtime_destroy(rt);
}

/* -------------------------------------------------------------- PyTorch -- */

/* The default runtime, from the environment: one simulated GPU named by
 * GPUMEM_BACKEND=sim (served to the hooks, unlike auto's fallback). */
TEST(pytorch_entry_points_are_stream_ordered)
{
    void *p = NULL, *q = NULL;
    ASSERT_OK(gpumem_torch_alloc(0, 0, S1, &p)); /* nothing, no error */
    ASSERT_TRUE(p == NULL);
    ASSERT_STATUS(gpumem_torch_alloc(-5, 0, S1, &p), GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(gpumem_last_error(), "gpumem_torch_alloc(GPU:0): negative size -5");
    ASSERT_STATUS(gpumem_torch_alloc(256, 0, S1, NULL), GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(gpumem_torch_alloc(256, 3, S1, &p), GPUMEM_ERR_NO_SUCH_DEVICE);
    ASSERT_CONTAINS(gpumem_last_error(), "gpumem_torch_alloc(GPU:3): no such GPU");
    ASSERT_TRUE(p == NULL); /* not written on failure */
    ASSERT_OK(gpumem_torch_alloc(1 << 20, 0, S1, &p));
    ASSERT_TRUE(p != NULL);
    gpumem_torch_free(p, 1 << 20, 0, S1);
    q = gpumem_torch_malloc(1 << 20, 0, S2);
    ASSERT_TRUE(q == p); /* synchronous streams: free for S2 at once */
    gpumem_torch_free(q, 1 << 20, 0, S2);
    gpumem_memory_info mi = info(NULL, 0);
    ASSERT_EQ(mi.current_bytes, 0);
    ASSERT_EQ(mi.num_allocs, 2);
    ASSERT_EQ(mi.num_frees, 2);
}

/* ------------------------------------------------------------- threads -- */

struct worker {
    gpumem_runtime *rt;
    int id;
    int failures;
};

static void *worker_run(void *arg)
{
    struct worker *w = arg;
    void *stream = (void *)(uintptr_t)(0x1000 + w->id);
    unsigned seed = (unsigned)w->id + 1;
    for (int i = 0; i < 2000; i++) {
        seed = seed * 1103515245u + 12345u;
        size_t size = (size_t)((seed >> 8) % (256 * 1024)) + 1;
        unsigned char *p = NULL;
        if (gpumem_malloc_async(w->rt, w->id % 2, size, stream, (void **)&p) !=
            GPUMEM_OK) {
            w->failures++;
            continue;
        }
        p[0] = p[size - 1] = (unsigned char)w->id;
        sched_yield();
        if (p[0] != (unsigned char)w->id || p[size - 1] != (unsigned char)w->id)
            w->failures += 1000;
        if ((i % 2 ? gpumem_free_async(w->rt, p, stream) : gpumem_free(w->rt, p)) !=
            GPUMEM_OK)
            w->failures += 1000;
    }
    return NULL;
}

TEST(eight_threads_on_eight_streams_and_two_devices)
{
    gpumem_runtime *rt = sim_runtime("STREAMS-THR:1GiB,STREAMS-THR2:1GiB");
    if (!rt)
        return;
    struct worker w[8];
    pthread_t t[8];
    for (int i = 0; i < 8; i++) {
        w[i] = (struct worker){rt, i, 0};
        pthread_create(&t[i], NULL, worker_run, &w[i]);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(t[i], NULL);
        ASSERT_EQ(w[i].failures, 0);
    }
    for (int l = 0; l < 2; l++) {
        gpumem_memory_info mi = info(rt, l);
        ASSERT_EQ(mi.current_bytes, 0);
        ASSERT_EQ(mi.num_allocs, 4 * 2000);
        ASSERT_EQ(mi.num_frees, 4 * 2000);
    }
    gpumem_runtime_destroy(rt);
}

int main(void)
{
    setenv("GPUMEM_BACKEND", "sim", 1);
    setenv("GPUMEM_SIM_DEVICES", "STREAMS-DEFAULT:1GiB", 1);
    unsetenv("GPUMEM_VISIBLE_DEVICES");
    unsetenv("CUDA_VISIBLE_DEVICES");
    RUN(on_simulated_gpus_a_stream_ordered_free_is_a_free);
    RUN(refused_stream_ordered_frees_say_why);
    RUN(size_zero_is_ok_and_null_and_counts_nothing);
    RUN(the_allocator_struct_has_stream_ordered_entries);
    RUN(an_allocator_struct_of_the_first_version_is_not_written_past);
    RUN(pytorch_entry_points_are_stream_ordered);
    RUN(eight_threads_on_eight_streams_and_two_devices);
    HARNESS_EXIT();
}
