/* The slow ways of the futex lock and the condition (platform.h), and the
 * lock-order check of debug builds: per thread, how many locks of each rank it
 * holds. No lock of its own: the record is _Thread_local. A forked child's only
 * thread inherits the forking thread's record, which is what it holds there. */
#include "platform.h"

#include <assert.h>
#include <errno.h>

#if GPUMEM_FUTEX_LOCKS
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>

/* The word's address for the system call, which takes a plain int. */
static uint32_t *word(_Atomic uint32_t *w) { return (uint32_t *)w; }

void gpumem__mutex_wait(gpumem_mutex *m)
{
    /* Marked 2 before each sleep, so that the holder's release wakes a thread;
     * taken when the exchange finds it free (it stays 2: a waiter's release may
     * then wake one that need not wait, never miss one that must). */
    while (atomic_exchange_explicit(&m->state, 2, memory_order_acquire) != 0)
        syscall(SYS_futex, word(&m->state), FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
}

void gpumem__mutex_wake(gpumem_mutex *m)
{
    syscall(SYS_futex, word(&m->state), FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

int gpumem__cond_init(gpumem_cond *c)
{
    atomic_init(&c->seq, 0);
    return 0;
}

void gpumem__cond_destroy(gpumem_cond *c) { (void)c; }

int gpumem__cond_wait(gpumem_cond *c, gpumem_mutex *m, const struct timespec *until)
{
    /* read under m: a signal after it changes the count, and the sleep below
     * returns at once */
    uint32_t seen = atomic_load_explicit(&c->seq, memory_order_relaxed);
    gpumem__mutex_release(m);
    /* FUTEX_WAIT_BITSET takes an absolute time, on CLOCK_MONOTONIC */
    long r = syscall(SYS_futex, word(&c->seq), FUTEX_WAIT_BITSET_PRIVATE, seen, until,
                     NULL, FUTEX_BITSET_MATCH_ANY);
    int err = r == 0 ? 0 : errno;
    gpumem__mutex_acquire(m);
    return err == ETIMEDOUT ? ETIMEDOUT : 0;
}

void gpumem__cond_broadcast(gpumem_cond *c)
{
    atomic_fetch_add_explicit(&c->seq, 1, memory_order_relaxed);
    syscall(SYS_futex, word(&c->seq), FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}
#else
int gpumem__cond_init(gpumem_cond *c)
{
    pthread_condattr_t attr;
    int err = pthread_condattr_init(&attr);
    if (err)
        return err;
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    err = pthread_cond_init(&c->cond, &attr);
    pthread_condattr_destroy(&attr);
    return err;
}

void gpumem__cond_destroy(gpumem_cond *c) { pthread_cond_destroy(&c->cond); }

int gpumem__cond_wait(gpumem_cond *c, gpumem_mutex *m, const struct timespec *until)
{
    int err = until ? pthread_cond_timedwait(&c->cond, &m->mutex, until)
                    : pthread_cond_wait(&c->cond, &m->mutex);
    return err == ETIMEDOUT ? ETIMEDOUT : 0;
}

void gpumem__cond_broadcast(gpumem_cond *c) { pthread_cond_broadcast(&c->cond); }
#endif

static _Thread_local unsigned held[GPUMEM_RANK_COUNT];

bool gpumem__lock_order_ok(const gpumem_mutex *m, bool sibling)
{
    for (int r = 0; r < GPUMEM_RANK_COUNT; r++) {
        if (held[r] == 0)
            continue;
        if (sibling && r == m->rank)
            continue; /* one kind, one fixed order */
        if (r >= m->rank || r >= GPUMEM_RANK_LEAF)
            return false; /* not above what it holds, or under a leaf */
    }
    return true;
}

void gpumem__lock_check(const gpumem_mutex *m, bool sibling)
{
    assert(m->rank > 0 && m->rank < GPUMEM_RANK_COUNT && "a lock without a rank");
    assert(gpumem__lock_order_ok(m, sibling) &&
           "gpumem lock taken out of order (docs/internals.md, Locks)");
    (void)m, (void)sibling;
}

void gpumem__lock_taken(const gpumem_mutex *m) { held[m->rank]++; }

void gpumem__lock_released(const gpumem_mutex *m)
{
    assert(held[m->rank] > 0 && "a gpumem lock released that was not held");
    held[m->rank]--;
}
