/* The lock order of docs/internals.md ("Locks"), as debug builds check it
 * (platform.h): a lock only above the ranks a thread holds, nothing under a
 * leaf, siblings of one kind only through gpumem__mutex_lock_sibling; a wrong
 * order stops the program at the lock, before it can wait. Release builds keep
 * no record: the test is skipped there. */
#include "runtime.h"

#include "harness.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

TEST(a_lock_is_taken_only_above_the_ranks_held)
{
    gpumem_mutex rt = GPUMEM_MUTEX_INITIALIZER(GPUMEM_RANK_RUNTIME);
    gpumem_mutex pool = GPUMEM_MUTEX_INITIALIZER(GPUMEM_RANK_POOL);
    gpumem_mutex pool2 = GPUMEM_MUTEX_INITIALIZER(GPUMEM_RANK_POOL);
    gpumem_mutex map = GPUMEM_MUTEX_INITIALIZER(GPUMEM_RANK_REGION_MAP);
    gpumem_mutex dev = GPUMEM_MUTEX_INITIALIZER(GPUMEM_RANK_SIM_DEVICE);
    gpumem_mutex dev2 = GPUMEM_MUTEX_INITIALIZER(GPUMEM_RANK_SIM_DEVICE);

    ASSERT_TRUE(gpumem__lock_order_ok(&pool, false)); /* nothing held */
    gpumem__mutex_lock(&rt);
    gpumem__mutex_lock(&pool);
    ASSERT_FALSE(gpumem__lock_order_ok(&rt, false));    /* below the pool */
    ASSERT_FALSE(gpumem__lock_order_ok(&pool2, false)); /* beside it */
    ASSERT_TRUE(gpumem__lock_order_ok(&map, false));
    gpumem__mutex_lock(&map);
    /* under a leaf, nothing, not even a leaf of a higher rank */
    ASSERT_FALSE(gpumem__lock_order_ok(&dev, false));
    ASSERT_FALSE(gpumem__lock_order_ok(&dev, true));
    gpumem__mutex_unlock(&map);
    ASSERT_TRUE(gpumem__lock_order_ok(&dev, false));
    gpumem__mutex_lock(&dev);
    ASSERT_FALSE(gpumem__lock_order_ok(&dev2, false));
    ASSERT_TRUE(gpumem__lock_order_ok(&dev2, true)); /* siblings, in one order */
    gpumem__mutex_unlock(&dev);
    /* released out of order: what is held is counted, not stacked */
    gpumem__mutex_unlock(&rt);
    ASSERT_TRUE(gpumem__lock_order_ok(&rt, false) == false); /* the pool still */
    gpumem__mutex_unlock(&pool);
    ASSERT_TRUE(gpumem__lock_order_ok(&rt, false));
    /* a trylock never waits, so it is not checked, but what it takes counts */
    ASSERT_TRUE(gpumem__mutex_trylock(&pool));
    ASSERT_TRUE(gpumem__mutex_trylock(&rt));
    ASSERT_FALSE(gpumem__lock_order_ok(&pool2, false));
    gpumem__mutex_unlock(&pool);
    gpumem__mutex_unlock(&rt);
    ASSERT_TRUE(gpumem__lock_order_ok(&pool2, false));
}

/* A runtime's own locks: its region map's lock is a leaf, taken under the
 * runtime's lock, never the other way round. */
TEST(a_runtimes_locks_in_their_order)
{
    gpumem_options o;
    gpumem_options_init(&o);
    o.backend = GPUMEM_BACKEND_SIM;
    o.flags = GPUMEM_OPTIONS_IGNORE_ENVIRONMENT;
    o.sim_devices = "UNIT-LOCKS:1GiB";
    gpumem_runtime *rt = NULL;
    ASSERT_OK(gpumem_runtime_create(&o, &rt));
    if (!rt)
        return;
    void *p = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, 4096, &p)); /* every lock taken and let go */
    ASSERT_OK(gpumem_free(rt, p));
    ASSERT_TRUE(gpumem__lock_order_ok(&rt->lock, false));
    gpumem__mutex_lock(&rt->lock);
    ASSERT_TRUE(gpumem__lock_order_ok(&rt->regions.lock, false));
    gpumem__mutex_unlock(&rt->lock);
    gpumem__mutex_lock(&rt->regions.lock);
    ASSERT_FALSE(gpumem__lock_order_ok(&rt->lock, false));
    gpumem__mutex_unlock(&rt->regions.lock);
    gpumem_runtime_destroy(rt);
}

/* The wrong order itself, in a child: a pool's lock, then a runtime's. The child
 * must die of the assert (SIGABRT) at the second lock, before it can wait on it. */
TEST(a_wrong_order_stops_the_program)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        HARNESS_FAIL("fork failed");
        return;
    }
    if (pid == 0) {
        gpumem_mutex rt = GPUMEM_MUTEX_INITIALIZER(GPUMEM_RANK_RUNTIME);
        gpumem_mutex pool = GPUMEM_MUTEX_INITIALIZER(GPUMEM_RANK_POOL);
        alarm(10);
        gpumem__mutex_lock(&pool);
        gpumem__mutex_lock(&rt);
        _exit(0); /* not caught */
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status));
    if (WIFSIGNALED(status))
        ASSERT_EQ(WTERMSIG(status), SIGABRT);
}

#ifdef NDEBUG
static const bool checked = false;
#else
static const bool checked = true;
#endif

int main(void)
{
    if (!checked) {
        puts("release build: no lock-order record to check");
        return 77;
    }
    RUN(a_lock_is_taken_only_above_the_ranks_held);
    RUN(a_runtimes_locks_in_their_order);
    RUN(a_wrong_order_stops_the_program);
    HARNESS_EXIT();
}
