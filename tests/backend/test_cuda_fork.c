/* fork() and the CUDA backend, over the driver double (which, as the real driver,
 * fails every call in a forked child of the process that initialized it): in the
 * child a runtime of the parent is refused without one driver call, initialized
 * or only created (its cuInit ran at creation); destroying it there calls no
 * driver either; a new CUDA runtime, with GPUMEM_BACKEND=cuda or auto, is refused
 * too rather than failing in the driver or falling back to simulated GPUs; and a
 * thread of the parent caught in the driver with a pool's lock held at the fork
 * does not hang the child. */
#include "cuda_util.h"
#include "fork_util.h"

#include <pthread.h>
#include <unistd.h>

/* An entry point of the double (linked): called directly once, in a child. */
CUresult cuDeviceGetCount(int *count);

/* Every call the driver double has seen since it was loaded. */
static unsigned long driver_calls(void)
{
    unsigned long n = 0;
    for (size_t i = 0; fakecuda_entry_point(i); i++)
        n += fakecuda_calls_ever(fakecuda_entry_point(i));
    return n;
}

static void expect_refused(const char *what, gpumem_status s, const char *call,
                           const char *owner, long parent)
{
    expect_fork_refusal(what, s, call, owner, parent);
    /* a runtime created in the child would be refused too: not advised */
    if (strstr(gpumem_last_error(), "create and initialize a runtime"))
        HARNESS_FAIL("%s: \"%s\" advises a runtime in the child, which would fail", what,
                     gpumem_last_error());
}

struct parent_state {
    gpumem_runtime *rt;
    void *ptr;
    long parent;
};

/* Runtimes made in the child: refused for CUDA (and auto), fine on simulated GPUs. */
static void new_runtimes_in_child(long parent)
{
    static const char *const owner = "one that initialized the CUDA driver";
    gpumem_status s = GPUMEM_OK;
    ASSERT_TRUE(runtime_on(GPUMEM_BACKEND_CUDA, &s) == NULL);
    expect_refused("GPUMEM_BACKEND_CUDA", s, "gpumem_runtime_create", owner, parent);
    ASSERT_TRUE(runtime_on(GPUMEM_BACKEND_AUTO, &s) == NULL); /* no simulated GPUs */
    expect_refused("GPUMEM_BACKEND_AUTO", s, "gpumem_runtime_create", owner, parent);
    gpumem_runtime *sim = runtime_on(GPUMEM_BACKEND_SIM, &s);
    ASSERT_OK(s);
    if (!sim)
        return;
    void *p = NULL;
    ASSERT_OK(gpumem_malloc(sim, 0, 1 << 20, &p));
    ASSERT_OK(gpumem_free(sim, p));
    gpumem_runtime_destroy(sim);
}

static void child_of_initialized(void *arg)
{
    struct parent_state *ps = arg;
    const char *owner = "the one that initialized the runtime";
    unsigned long calls = driver_calls(), misuses = fakecuda_misuses();
    log_text[0] = '\0';

    void *p = NULL;
    expect_refused("malloc", gpumem_malloc(ps->rt, 0, 1 << 20, &p),
                   "gpumem_malloc(/device:GPU:0, 1.00 MiB)", owner, ps->parent);
    char call[64];
    snprintf(call, sizeof call, "gpumem_free(%p)", ps->ptr);
    expect_refused("free", gpumem_free(ps->rt, ps->ptr), call, owner, ps->parent);
    gpumem_memory_info mi = GPUMEM_STRUCT_INIT(gpumem_memory_info);
    expect_refused("memory info", gpumem_get_memory_info(ps->rt, 0, &mi),
                   "gpumem_get_memory_info(/device:GPU:0)", owner, ps->parent);
    uint64_t released = 0;
    expect_refused("release", gpumem_release_unused(ps->rt, -1, &released),
                   "gpumem_release_unused(every logical device)", owner, ps->parent);
    size_t kinds = 0;
    expect_refused("driver calls", gpumem_list_driver_calls(ps->rt, 0, NULL, 0, &kinds),
                   "gpumem_list_driver_calls(GPU:0)", owner, ps->parent);
    int logical = -1;
    expect_refused("CUDA device", gpumem_cuda_device_logical(ps->rt, 0, &logical),
                   "gpumem_cuda_device_logical(GPU:0)", owner, ps->parent);
    gpumem_runtime_destroy(ps->rt); /* the child's copy: no driver call */
    ASSERT_STREQ(log_text, "");     /* nothing logged, misleading or not */
    new_runtimes_in_child(ps->parent);

    ASSERT_EQ(driver_calls(), calls);
    ASSERT_EQ(fakecuda_misuses(), misuses);

    /* What gpumem kept the child from: the driver fails here. */
    int count = 0;
    ASSERT_EQ(cuDeviceGetCount(&count), CUDA_ERROR_NOT_INITIALIZED);
    ASSERT_CONTAINS(fakecuda_last_misuse(), "in a forked child");
}

TEST(a_cuda_runtime_initialized_before_fork_is_refused_without_a_driver_call)
{
    fresh_driver("Fake GPU:16GiB:8.0");
    struct parent_state ps = {.rt = cuda_runtime(), .parent = (long)getpid()};
    if (!ps.rt)
        return;
    ASSERT_OK(gpumem_set_memory_growth(ps.rt, 0, true));
    ASSERT_OK(gpumem_malloc(ps.rt, 0, 3 << 20, &ps.ptr));

    in_child("initialized CUDA runtime", child_of_initialized, &ps, 20);

    void *q = NULL;
    ASSERT_OK(gpumem_malloc(ps.rt, 0, 5 << 20, &q));
    ASSERT_EQ(info_of(ps.rt, 0).current_bytes, 8 << 20);
    ASSERT_OK(gpumem_free(ps.rt, q));
    ASSERT_OK(gpumem_free(ps.rt, ps.ptr));
    gpumem_runtime_destroy(ps.rt);
    check_driver_clean(0);
}

static void child_of_created(void *arg)
{
    struct parent_state *ps = arg;
    const char *owner = "the one that created the runtime";
    unsigned long calls = driver_calls(), misuses = fakecuda_misuses();
    expect_refused("growth", gpumem_set_memory_growth(ps->rt, 0, true),
                   "gpumem_set_memory_growth(GPU:0)", owner, ps->parent);
    ASSERT_CONTAINS(gpumem_last_error(), "which initialized the CUDA driver for it");
    void *p = NULL;
    expect_refused("malloc", gpumem_malloc(ps->rt, 0, 1 << 20, &p),
                   "gpumem_malloc(/device:GPU:0, 1.00 MiB)", owner, ps->parent);
    gpumem_runtime_destroy(ps->rt);
    ASSERT_EQ(driver_calls(), calls);
    ASSERT_EQ(fakecuda_misuses(), misuses);
}

/* Created, not initialized: it holds no memory, but its creation initialized the
 * driver, which the child cannot use (where PyTorch would say "Cannot
 * re-initialize CUDA in forked subprocess"). */
TEST(a_cuda_runtime_created_before_fork_is_refused_too)
{
    fresh_driver("Fake GPU:16GiB:8.0");
    struct parent_state ps = {.rt = cuda_runtime(), .parent = (long)getpid()};
    if (!ps.rt)
        return;

    in_child("created CUDA runtime", child_of_created, &ps, 20);

    bool initialized = true;
    ASSERT_OK(gpumem_is_initialized(ps.rt, &initialized));
    ASSERT_FALSE(initialized);
    ASSERT_OK(gpumem_set_memory_growth(ps.rt, 0, true));
    void *p = NULL;
    ASSERT_OK(gpumem_malloc(ps.rt, 0, 1 << 20, &p));
    ASSERT_OK(gpumem_free(ps.rt, p));
    gpumem_runtime_destroy(ps.rt);
    check_driver_clean(0);
}

/* ------------------------------------------------- a lock held at fork -- */

struct grower {
    gpumem_runtime *rt;
    void *ptr;
    gpumem_status status;
};

static void *grow(void *arg)
{
    struct grower *g = arg;
    g->status = gpumem_malloc(g->rt, 0, 4 << 20, &g->ptr);
    return NULL;
}

static void child_of_blocked(void *arg)
{
    struct parent_state *ps = arg;
    const char *owner = "the one that initialized the runtime";
    void *p = NULL;
    /* The pool's lock is held by the parent's thread, which does not exist here:
     * every call returns at once, and so does destroy. */
    expect_refused("malloc", gpumem_malloc(ps->rt, 0, 1 << 20, &p),
                   "gpumem_malloc(/device:GPU:0, 1.00 MiB)", owner, ps->parent);
    gpumem_memory_info mi = GPUMEM_STRUCT_INIT(gpumem_memory_info);
    expect_refused("memory info", gpumem_get_memory_info(ps->rt, 0, &mi),
                   "gpumem_get_memory_info(/device:GPU:0)", owner, ps->parent);
    char call[64];
    snprintf(call, sizeof call, "gpumem_free(%p)", ps->ptr);
    expect_refused("free", gpumem_free(ps->rt, ps->ptr), call, owner, ps->parent);
    uint64_t released = 0;
    expect_refused("release", gpumem_release_unused(ps->rt, 0, &released),
                   "gpumem_release_unused(/device:GPU:0)", owner, ps->parent);
    gpumem_runtime_destroy(ps->rt);
}

TEST(a_thread_in_the_driver_with_a_pool_lock_at_fork_does_not_hang_the_child)
{
    fresh_driver("Fake GPU:16GiB:8.0");
    struct parent_state ps = {.rt = cuda_runtime(), .parent = (long)getpid()};
    if (!ps.rt)
        return;
    ASSERT_OK(gpumem_set_memory_growth(ps.rt, 0, true));
    ASSERT_OK(gpumem_malloc(ps.rt, 0, 1 << 20, &ps.ptr)); /* a first region */
    /* The next growth maps new memory: its cuMemCreate waits in the driver while
     * the grower holds the pool's lock. */
    ASSERT_EQ(fakecuda_block_next("cuMemCreate"), 0);
    struct grower g = {.rt = ps.rt, .status = GPUMEM_ERR_BACKEND};
    pthread_t t;
    if (pthread_create(&t, NULL, grow, &g) != 0) {
        HARNESS_FAIL("pthread_create failed");
        return;
    }
    fakecuda_wait_blocked();

    in_child("pool lock held at fork", child_of_blocked, &ps, 10);

    fakecuda_unblock();
    pthread_join(t, NULL);
    ASSERT_OK(g.status);
    ASSERT_EQ(info_of(ps.rt, 0).current_bytes, 5 << 20);
    ASSERT_OK(gpumem_free(ps.rt, g.ptr));
    ASSERT_OK(gpumem_free(ps.rt, ps.ptr));
    gpumem_runtime_destroy(ps.rt);
    check_driver_clean(0);
}

int main(void)
{
    RUN(a_cuda_runtime_initialized_before_fork_is_refused_without_a_driver_call);
    RUN(a_cuda_runtime_created_before_fork_is_refused_too);
    RUN(a_thread_in_the_driver_with_a_pool_lock_at_fork_does_not_hang_the_child);
    HARNESS_EXIT();
}
