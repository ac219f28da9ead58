/* Public-API tests of fork(): a runtime initialized in the parent is refused in a
 * forked child, call by call, with a message that says why and what to do; its
 * destruction there frees the child's copy only; the parent goes on as before; a
 * runtime created but not initialized before the fork holds only configuration,
 * and the child may initialize and use it; the default runtime follows the same
 * rules. On simulated GPUs; tests/backend/test_cuda_fork.c has the CUDA side and
 * tests/unit/test_fork.c the locks held at the fork. */
#include "gpumem.h"
#include "harness.h"
#include "api_util.h"
#include "fork_util.h"

#include <pthread.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The message of a call refused because the runtime is the parent's: `owner`
 * says what the parent did ("initialized the runtime"). */
static void expect_refused(const char *what, gpumem_status s, const char *call,
                           const char *owner, long parent)
{
    char from[128];
    snprintf(from, sizeof from, "the one that %s", owner);
    expect_fork_refusal(what, s, call, from, parent);
}

struct inherited {
    gpumem_runtime *rt;
    void *ptr;              /* allocated in the parent */
    gpumem_allocator alloc; /* taken in the parent */
    long parent;
};

#define REFUSED(expr, call)                                                              \
    expect_refused(#expr, (expr), call, "initialized the runtime", in->parent)

static void child_of_initialized(void *arg)
{
    struct inherited *in = arg;
    gpumem_runtime *rt = in->rt;
    char call[128];

    /* Every call that takes the runtime, the hot ones first. */
    void *p = NULL;
    ASSERT_EQ(gpumem_malloc(rt, 0, 1 << 20, &p), GPUMEM_ERR_UNSUPPORTED);
    char want[512];
    snprintf(want, sizeof want,
             "gpumem_malloc(/device:GPU:0, 1.00 MiB): this process (pid %ld) descends by "
             "fork() from "
             "the one that initialized the runtime (pid %ld); device memory and the CUDA "
             "driver cannot be used across fork(): create and initialize a runtime in "
             "the child, or start worker processes with the 'spawn' method",
             (long)getpid(), in->parent);
    ASSERT_STREQ(gpumem_last_error(), want);
    ASSERT_TRUE(p == NULL);
    snprintf(call, sizeof call, "gpumem_free(%p)", in->ptr);
    REFUSED(gpumem_free(rt, in->ptr), call);
    gpumem_memory_info mi = GPUMEM_STRUCT_INIT(gpumem_memory_info);
    REFUSED(gpumem_get_memory_info(rt, 0, &mi), "gpumem_get_memory_info(/device:GPU:0)");
    REFUSED(gpumem_reset_memory_stats(rt, -1),
            "gpumem_reset_memory_stats(every logical device)");
    uint64_t released = 12345;
    REFUSED(gpumem_release_unused(rt, 0, &released),
            "gpumem_release_unused(/device:GPU:0)");
    ASSERT_EQ(released, 12345);
    REFUSED(gpumem_initialize(rt), "gpumem_initialize");
    bool b = false;
    REFUSED(gpumem_is_initialized(rt, &b), "gpumem_is_initialized");
    gpumem_backend_kind kind;
    REFUSED(gpumem_get_backend(rt, &kind), "gpumem_get_backend");
    size_t count = 0;
    REFUSED(gpumem_list_physical_devices(rt, NULL, 0, &count),
            "gpumem_list_physical_devices");
    REFUSED(gpumem_list_logical_devices(rt, NULL, 0, &count),
            "gpumem_list_logical_devices");
    int visible[] = {0};
    REFUSED(gpumem_set_visible_devices(rt, visible, 1), "gpumem_set_visible_devices");
    REFUSED(gpumem_get_visible_devices(rt, NULL, 0, &count),
            "gpumem_get_visible_devices");
    REFUSED(gpumem_set_memory_growth(rt, 0, true), "gpumem_set_memory_growth(GPU:0)");
    REFUSED(gpumem_get_memory_growth(rt, 0, &b), "gpumem_get_memory_growth(GPU:0)");
    REFUSED(gpumem_set_memory_fraction(rt, -1, 0.5),
            "gpumem_set_memory_fraction(every GPU)");
    double fraction;
    REFUSED(gpumem_get_memory_fraction(rt, 0, &fraction),
            "gpumem_get_memory_fraction(GPU:0)");
    REFUSED(gpumem_set_logical_device_configuration(rt, 0, NULL, 0),
            "gpumem_set_logical_device_configuration(GPU:0)");
    REFUSED(gpumem_get_logical_device_configuration(rt, 0, NULL, 0, &count),
            "gpumem_get_logical_device_configuration(GPU:0)");
    REFUSED(gpumem_list_driver_calls(rt, -1, NULL, 0, &count),
            "gpumem_list_driver_calls(every GPU)");
    int logical = -1;
    REFUSED(gpumem_cuda_device_logical(rt, 0, &logical),
            "gpumem_cuda_device_logical(GPU:0)");
    gpumem_allocator a;
    REFUSED(gpumem_get_allocator(rt, 0, &a), "gpumem_get_allocator(/device:GPU:0)");
    REFUSED(in->alloc.allocate(&in->alloc, 4096, &p),
            "gpumem_malloc(/device:GPU:0, 4.00 KiB)");
    REFUSED(in->alloc.deallocate(&in->alloc, in->ptr), call);

    /* Destroying it frees the child's copy and nothing else (the parent checks
     * that its memory is still there). */
    gpumem_runtime_destroy(rt);

    /* A runtime of the child's own works, on the same simulated GPUs: the
     * child's copy of them still books what the parent reserved. */
    gpumem_runtime *own = sim_runtime("FORK-INIT:1GiB");
    if (!own)
        return;
    ASSERT_OK(gpumem_malloc(own, 0, 1 << 20, &p));
    memset(p, 0xC5, 1 << 20);
    gpumem_memory_info oi = info_of(own, 0);
    ASSERT_EQ(oi.current_bytes, 1 << 20);
    ASSERT_LE(oi.limit_bytes, 1 * GiB - 256 * MiB); /* the parent's 256 MiB stay taken */
    ASSERT_OK(gpumem_free(own, p));
    gpumem_runtime_destroy(own);
}

TEST(a_runtime_initialized_before_fork_is_refused_in_the_child)
{
    struct inherited in = {.parent = (long)getpid()};
    in.rt = sim_runtime("FORK-INIT:1GiB");
    if (!in.rt)
        return;
    gpumem_logical_device_config limit = GPUMEM_LOGICAL_DEVICE_LIMIT(256 * MiB);
    ASSERT_OK(gpumem_set_logical_device_configuration(in.rt, 0, &limit, 1));
    ASSERT_OK(gpumem_malloc(in.rt, 0, 3 * MiB, &in.ptr));
    memset(in.ptr, 0x5A, 3 * MiB);
    ASSERT_OK(gpumem_get_allocator(in.rt, 0, &in.alloc));

    in_child("initialized runtime", child_of_initialized, &in, 20);

    /* The parent is untouched: its memory, its numbers, and it still allocates. */
    ASSERT_EQ(((unsigned char *)in.ptr)[3 * MiB - 1], 0x5A);
    gpumem_memory_info mi = info_of(in.rt, 0);
    ASSERT_EQ(mi.current_bytes, 3 * MiB);
    ASSERT_EQ(mi.num_allocs, 1);
    void *q = NULL, *r = NULL;
    ASSERT_OK(gpumem_malloc(in.rt, 0, 5 * MiB, &q));
    ASSERT_OK(in.alloc.allocate(&in.alloc, 4096, &r));
    ASSERT_OK(gpumem_free(in.rt, q));
    ASSERT_OK(in.alloc.deallocate(&in.alloc, r));
    ASSERT_OK(gpumem_free(in.rt, in.ptr));
    ASSERT_EQ(info_of(in.rt, 0).num_frees, 3);
    gpumem_runtime_destroy(in.rt);
}

/* --------------------------------------------- created, not initialized -- */

struct log_record {
    int messages;
    char last[1024];
};

static void record_log(void *user_data, int level, const char *message)
{
    struct log_record *r = user_data;
    (void)level;
    r->messages++;
    snprintf(r->last, sizeof r->last, "%s", message);
}

struct configured {
    gpumem_runtime *rt;
    struct log_record *log;
    long parent;
};

static void grandchild_of_adopted(void *arg)
{
    struct configured *c = arg;
    void *p = NULL;
    expect_refused("grandchild malloc", gpumem_malloc(c->rt, 1, 1 << 20, &p),
                   "gpumem_malloc(/device:GPU:1, 1.00 MiB)", "initialized the runtime",
                   c->parent);
    gpumem_runtime_destroy(c->rt);
}

/* Every driver call rt counted, on all its GPUs. */
static uint64_t driver_calls(gpumem_runtime *rt)
{
    gpumem_driver_call e[64] = {GPUMEM_STRUCT_INIT(gpumem_driver_call)};
    size_t n = 0;
    uint64_t calls = 0;
    ASSERT_OK(gpumem_list_driver_calls(rt, -1, e, 64, &n));
    for (size_t i = 0; i < n && i < 64; i++)
        calls += e[i].calls;
    return calls;
}

static void child_of_configured(void *arg)
{
    struct configured *c = arg;
    gpumem_runtime *rt = c->rt;
    bool initialized = true;
    ASSERT_OK(gpumem_is_initialized(rt, &initialized)); /* adopts it */
    ASSERT_FALSE(initialized);
    ASSERT_CONTAINS(c->log->last, "not initialized, now belongs to pid ");
    /* The parent's configuration, still changeable, then applied here. */
    bool growth = false;
    ASSERT_OK(gpumem_get_memory_growth(rt, 0, &growth));
    ASSERT_TRUE(growth);
    ASSERT_OK(gpumem_set_memory_fraction(rt, 0, 0.5));
    gpumem_logical_device devs[3] = {GPUMEM_STRUCT_INIT(gpumem_logical_device)};
    size_t n = 0;
    ASSERT_OK(gpumem_list_logical_devices(rt, devs, 3, &n));
    ASSERT_EQ(n, 2);
    ASSERT_EQ(devs[0].memory_limit_bytes, 128 * MiB);
    ASSERT_TRUE(devs[1].memory_growth);
    uint64_t calls = driver_calls(rt); /* this process's own from the adoption on */
    void *p = NULL;
    ASSERT_OK(gpumem_malloc(rt, 1, 1 << 20, &p));
    memset(p, 0x77, 1 << 20);
    ASSERT_EQ(info_of(rt, 1).current_bytes, 1 << 20);
    ASSERT_TRUE(driver_calls(rt) > calls);

    /* Now initialized here, it belongs to this process: a fork of it refuses it. */
    struct configured mine = {.rt = rt, .log = c->log, .parent = (long)getpid()};
    in_child("grandchild", grandchild_of_adopted, &mine, 20);

    ASSERT_OK(gpumem_free(rt, p));
    gpumem_runtime_destroy(rt);
}

TEST(a_runtime_created_but_not_initialized_before_fork_works_in_the_child)
{
    static struct log_record log;
    struct configured c = {.log = &log, .parent = (long)getpid()};
    c.rt = sim_runtime_logged("FORK-CONFIG:1GiB", record_log, &log, GPUMEM_LOG_INFO);
    if (!c.rt)
        return;
    ASSERT_OK(gpumem_set_memory_growth(c.rt, 0, true));
    gpumem_logical_device_config limits[2] = {GPUMEM_LOGICAL_DEVICE_LIMIT(128 * MiB),
                                              {.memory_limit_bytes = 256 * MiB}};
    ASSERT_OK(gpumem_set_logical_device_configuration(c.rt, 0, limits, 2));

    ASSERT_EQ(driver_calls(c.rt), 0); /* nothing before initialization */
    in_child("configured runtime", child_of_configured, &c, 30);
    ASSERT_EQ(driver_calls(c.rt), 0); /* the child counted in its copy */

    /* What the child did happened to its copy: here it is still configurable. */
    bool initialized = true;
    ASSERT_OK(gpumem_is_initialized(c.rt, &initialized));
    ASSERT_FALSE(initialized);
    double fraction = 1;
    ASSERT_OK(gpumem_get_memory_fraction(c.rt, 0, &fraction));
    ASSERT_TRUE(fraction == 0);
    void *p = NULL;
    ASSERT_OK(gpumem_malloc(c.rt, 0, 1 << 20, &p));
    ASSERT_OK(gpumem_free(c.rt, p));
    gpumem_runtime_destroy(c.rt);
}

/* ------------------------------------------------------ default runtime -- */

static void child_of_default(void *arg)
{
    struct inherited *in = arg;
    const char *owner = "initialized the default runtime";
    void *p = NULL;
    expect_refused("default malloc", gpumem_malloc(NULL, 0, 2 << 20, &p),
                   "gpumem_malloc(/device:GPU:0, 2.00 MiB)", owner, in->parent);
    ASSERT_CONTAINS(gpumem_last_error(),
                    "start worker processes with the 'spawn' method, or create and "
                    "initialize a runtime of its own in the child");
    char call[64];
    snprintf(call, sizeof call, "gpumem_free(%p)", in->ptr);
    expect_refused("default free", gpumem_free(NULL, in->ptr), call, owner, in->parent);
    gpumem_memory_info mi = GPUMEM_STRUCT_INIT(gpumem_memory_info);
    expect_refused("default memory info", gpumem_get_memory_info(NULL, 0, &mi),
                   "gpumem_get_memory_info(/device:GPU:0)", owner, in->parent);
    gpumem_allocator a;
    expect_refused("default allocator", gpumem_get_allocator(NULL, 0, &a),
                   "gpumem_get_allocator(/device:GPU:0)", owner, in->parent);
    /* PyTorch's hook: NULL, and the reason in the last error. */
    ASSERT_TRUE(gpumem_torch_malloc(1 << 20, 0, NULL) == NULL);
    expect_refused("torch malloc", GPUMEM_ERR_UNSUPPORTED, "gpumem_torch_malloc(GPU:0)",
                   owner, in->parent);
    gpumem_torch_free(in->ptr, 1 << 20, 0, NULL); /* changes nothing */
    gpumem_runtime_destroy(NULL);                 /* ignored, as everywhere */

    /* A runtime of its own works. */
    gpumem_runtime *own = env_runtime("FORK-DEFAULT:1GiB");
    if (!own)
        return;
    ASSERT_OK(gpumem_malloc(own, 0, 1 << 20, &p));
    ASSERT_OK(gpumem_free(own, p));
    gpumem_runtime_destroy(own);
}

/* ------------------------------------------------- adopted by many threads -- */

#define ADOPTERS 16

struct adopters {
    gpumem_runtime *rt;
    pthread_barrier_t start;
    pthread_mutex_t lock;
    int refused;
    char message[1024];
};

static void *adopt_and_allocate(void *arg)
{
    struct adopters *a = arg;
    pthread_barrier_wait(&a->start);
    void *p = NULL;
    gpumem_status s = gpumem_malloc(a->rt, 0, 4096, &p); /* adopts, initializes */
    if (s != GPUMEM_OK) {
        pthread_mutex_lock(&a->lock);
        a->refused++;
        snprintf(a->message, sizeof a->message, "%s: %s", gpumem_status_name(s),
                 gpumem_last_error());
        pthread_mutex_unlock(&a->lock);
    } else {
        (void)gpumem_free(a->rt, p);
    }
    return NULL;
}

static void child_adopts_on_many_threads(void *arg)
{
    struct adopters *a = arg;
    pthread_t t[ADOPTERS];
    pthread_barrier_init(&a->start, NULL, ADOPTERS);
    pthread_mutex_init(&a->lock, NULL);
    for (int i = 0; i < ADOPTERS; i++)
        ASSERT_EQ(pthread_create(&t[i], NULL, adopt_and_allocate, a), 0);
    for (int i = 0; i < ADOPTERS; i++)
        pthread_join(t[i], NULL);
    if (a->refused)
        HARNESS_FAIL("%d of %d threads refused their own runtime: %s", a->refused,
                     ADOPTERS, a->message);
    gpumem_runtime_destroy(a->rt);
}

/* Threads of a child that use a configured runtime at once: one adopts and
 * initializes it while the others are still deciding; none may be refused as
 * though the runtime were still the parent's (each round is a new fork). */
TEST(threads_of_a_child_adopt_a_configured_runtime_together)
{
    for (int round = 0; round < 200; round++) {
        struct adopters a = {0};
        if (!(a.rt = sim_runtime("FORK-ADOPT:1GiB")))
            return;
        ASSERT_OK(gpumem_set_memory_growth(a.rt, 0, true));
        bool passed = in_child("adopters", child_adopts_on_many_threads, &a, 20);
        gpumem_runtime_destroy(a.rt);
        if (!passed)
            break;
    }
}

TEST(the_default_runtime_initialized_before_fork_is_refused_in_the_child)
{
    clear_env();
    setenv("GPUMEM_BACKEND", "sim", 1);
    setenv("GPUMEM_SIM_DEVICES", "FORK-DEFAULT:1GiB", 1);
    setenv("GPUMEM_FORCE_ALLOW_GROWTH", "true", 1);
    /* no idle release's thread: the parent forks with one thread, since
     * ThreadSanitizer cannot follow a child of a threaded parent that starts
     * threads (the child's own runtime would start its idle thread); test_idle
     * forks a runtime with that thread */
    setenv("GPUMEM_GROWTH_IDLE_RELEASE_MS", "0", 1);
    struct inherited in = {.parent = (long)getpid()};
    ASSERT_OK(gpumem_malloc(NULL, 0, 1 << 20, &in.ptr));

    in_child("default runtime", child_of_default, &in, 20);

    void *q = NULL;
    ASSERT_OK(gpumem_malloc(NULL, 0, 1 << 20, &q));
    gpumem_memory_info mi = GPUMEM_STRUCT_INIT(gpumem_memory_info);
    ASSERT_OK(gpumem_get_memory_info(NULL, 0, &mi));
    ASSERT_EQ(mi.current_bytes, 2 << 20);
    ASSERT_OK(gpumem_free(NULL, q));
    ASSERT_OK(gpumem_free(NULL, in.ptr));
    clear_env();
}

int main(void)
{
    RUN(a_runtime_initialized_before_fork_is_refused_in_the_child);
    RUN(a_runtime_created_but_not_initialized_before_fork_works_in_the_child);
    RUN(threads_of_a_child_adopt_a_configured_runtime_together);
    RUN(the_default_runtime_initialized_before_fork_is_refused_in_the_child);
    HARNESS_EXIT();
}
