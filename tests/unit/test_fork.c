/* fork() with a gpumem lock held by another thread of the parent, which the
 * child never has: its calls on the parent's runtime must not wait for the
 * lock. The runtime's lock (a configuration call or the initialization in
 * flight) and the region map's; a pool's lock is tests/backend/test_cuda_fork.c's
 * (a thread caught in the driver). */
#include "runtime.h"

#include "fork_util.h"
#include "harness.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define MiB (UINT64_C(1) << 20)

/* A thread that takes the given locks, says so, and holds them until told. */
struct holder {
    gpumem_mutex *locks[2];
    pthread_mutex_t m;
    pthread_cond_t c;
    bool holding, release;
    pthread_t thread;
};

static void *hold(void *arg)
{
    struct holder *h = arg;
    for (int i = 0; i < 2 && h->locks[i]; i++)
        gpumem__mutex_lock(h->locks[i]);
    pthread_mutex_lock(&h->m);
    h->holding = true;
    pthread_cond_broadcast(&h->c);
    while (!h->release)
        pthread_cond_wait(&h->c, &h->m);
    pthread_mutex_unlock(&h->m);
    for (int i = 1; i >= 0; i--)
        if (h->locks[i])
            gpumem__mutex_unlock(h->locks[i]);
    return NULL;
}

static bool start_holding(struct holder *h, gpumem_mutex *a, gpumem_mutex *b)
{
    memset(h, 0, sizeof *h);
    h->locks[0] = a;
    h->locks[1] = b;
    pthread_mutex_init(&h->m, NULL);
    pthread_cond_init(&h->c, NULL);
    if (pthread_create(&h->thread, NULL, hold, h) != 0) {
        HARNESS_FAIL("pthread_create failed");
        return false;
    }
    pthread_mutex_lock(&h->m);
    while (!h->holding)
        pthread_cond_wait(&h->c, &h->m);
    pthread_mutex_unlock(&h->m);
    return true;
}

static void stop_holding(struct holder *h)
{
    pthread_mutex_lock(&h->m);
    h->release = true;
    pthread_cond_broadcast(&h->c);
    pthread_mutex_unlock(&h->m);
    pthread_join(h->thread, NULL);
}

static gpumem_runtime *sim_runtime(const char *devices)
{
    gpumem_options o;
    gpumem_options_init(&o);
    o.backend = GPUMEM_BACKEND_SIM;
    o.flags = GPUMEM_OPTIONS_IGNORE_ENVIRONMENT;
    o.sim_devices = devices;
    gpumem_runtime *rt = NULL;
    ASSERT_OK(gpumem_runtime_create(&o, &rt));
    return rt;
}

struct child_arg {
    gpumem_runtime *rt;
    void *ptr;
    const char *reason; /* expected in every message */
};

static void child_calls(void *arg)
{
    struct child_arg *a = arg;
    void *p = NULL;
    ASSERT_STATUS(gpumem_set_memory_growth(a->rt, 0, true), GPUMEM_ERR_UNSUPPORTED);
    ASSERT_CONTAINS(gpumem_last_error(), a->reason);
    ASSERT_STATUS(gpumem_malloc(a->rt, 0, MiB, &p), GPUMEM_ERR_UNSUPPORTED);
    ASSERT_CONTAINS(gpumem_last_error(), a->reason);
    bool b;
    ASSERT_STATUS(gpumem_get_memory_growth(a->rt, 0, &b), GPUMEM_ERR_UNSUPPORTED);
    if (a->ptr)
        ASSERT_STATUS(gpumem_free(a->rt, a->ptr), GPUMEM_ERR_UNSUPPORTED);
    gpumem_runtime_destroy(a->rt); /* returns: leaves the torn parts as they are */
}

/* Created, not initialized, and a thread of the parent inside a configuration
 * call at the fork: the child cannot know what it had changed, so it does not
 * adopt the runtime. */
TEST(a_runtime_being_configured_at_fork_is_refused_not_waited_for)
{
    gpumem_runtime *rt = sim_runtime("UNIT-FORK-CONFIG:1GiB");
    if (!rt)
        return;
    struct holder h;
    if (!start_holding(&h, &rt->lock, NULL))
        return;
    struct child_arg a = {rt, NULL, "another thread was inside a call on it at the fork"};
    in_child("runtime lock held", child_calls, &a, 10);
    stop_holding(&h);
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    gpumem_runtime_destroy(rt);
}

/* Initialized, with its lock and the region map's held at the fork. */
TEST(an_initialized_runtime_with_locks_held_at_fork_is_refused_not_waited_for)
{
    gpumem_runtime *rt = sim_runtime("UNIT-FORK-INIT:1GiB");
    if (!rt)
        return;
    void *p = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, MiB, &p));
    struct holder h;
    if (!start_holding(&h, &rt->lock, &rt->regions.lock))
        return;
    struct child_arg a = {rt, p,
                          "descends by fork() from the one that initialized the runtime"};
    in_child("runtime and region map locks held", child_calls, &a, 10);
    stop_holding(&h);
    ASSERT_OK(gpumem_free(rt, p));
    gpumem_runtime_destroy(rt);
}

int main(void)
{
    RUN(a_runtime_being_configured_at_fork_is_refused_not_waited_for);
    RUN(an_initialized_runtime_with_locks_held_at_fork_is_refused_not_waited_for);
    HARNESS_EXIT();
}
