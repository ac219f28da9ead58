/* Portability and small helpers shared by every module: locks (ranked, and
 * checked in debug builds), once, atomics, fork hooks, overflow-checked arithmetic
 * and alignment. POSIX threads only for now; fork() where the system has it
 * (GPUMEM_HAVE_FORK). */
#ifndef GPUMEM_PLATFORM_H
#define GPUMEM_PLATFORM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>
#define GPUMEM_HAVE_FORK 1
#else
#define GPUMEM_HAVE_FORK 0
#endif

#if defined(__GNUC__)
#define GPUMEM_PRINTF(fmt_index, first_arg)                                              \
    __attribute__((format(printf, fmt_index, first_arg)))
#else
#define GPUMEM_PRINTF(fmt_index, first_arg)
#endif

/* A function on the hot path that its few callers must have inlined (a call's
 * entry and exit cost more than the checks it makes). */
#if defined(__GNUC__)
#define GPUMEM_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define GPUMEM_ALWAYS_INLINE inline
#endif

/* A function on a rare path: kept out of line, away from its callers' hot code. */
#if defined(__GNUC__)
#define GPUMEM_COLD __attribute__((cold, noinline))
#else
#define GPUMEM_COLD
#endif

/* Every gpumem lock has a rank, given at init, from the lock table of
 * docs/internals.md ("Locks"). A thread takes a lock only above the ranks of the
 * locks it holds, and nothing while it holds a leaf (rank >= GPUMEM_RANK_LEAF).
 * Debug builds (no NDEBUG) check it on every lock: the ranks each thread holds
 * are counted (platform.c), and a wrong order fails an assert before the thread
 * can wait, instead of a deadlock some day. Release builds check nothing. */
enum gpumem_lock_rank {
    GPUMEM_RANK_ADOPT = 1,    /* adopt.c: adoptions of inherited runtimes */
    GPUMEM_RANK_RUNTIME,      /* rt->lock: configuration, initialization */
    GPUMEM_RANK_POOL_MAP,     /* pool->map_lock: who maps and unmaps a pool's memory */
    GPUMEM_RANK_POOL,         /* pool->lock: a pool, its arena and its space */
    GPUMEM_RANK_SIM_REGISTRY, /* sim.c: the registry of simulated hardware */
    GPUMEM_RANK_LEDGER_ADMIT, /* ledger.c: this process's admissions to one ledger */
    GPUMEM_RANK_LEAF,         /* the leaves, from here on: */
    GPUMEM_RANK_REGION_MAP = GPUMEM_RANK_LEAF, /* the region map's writers */
    GPUMEM_RANK_SIM_DEVICE,                    /* sim.c: one simulated GPU */
    GPUMEM_RANK_CUDA,                          /* cuda.c: contexts, granularities */
    GPUMEM_RANK_LEDGER_FDS,                    /* ledger.c: open ledgers' fds */
    GPUMEM_RANK_IDLE,                          /* idle.c: the idle release's stop */
    GPUMEM_RANK_COUNT
};

/* The lock under every gpumem_mutex. On Linux, a word and the futex system
 * call (Drepper, "Futexes Are Tricky", mutex 3; Rust's standard library has
 * the same lock since 1.62): 0 free, 1 held, 2 held with a thread that may wait.
 * Taking a free lock is one compare-and-swap and letting it go one exchange,
 * both inline, where glibc's pthread_mutex_lock and _unlock ran 55 instructions
 * for the pair on every allocation and free (callgrind, docs/bench.md); a lock
 * that is held costs what it cost: the waiter sleeps in the kernel, it does not
 * spin. Its order to other threads comes from the acquire and release on the
 * word, which ThreadSanitizer sees as it sees any atomic. Elsewhere a POSIX
 * mutex. */
#if defined(__linux__)
#define GPUMEM_FUTEX_LOCKS 1
#else
#define GPUMEM_FUTEX_LOCKS 0
#endif

typedef struct {
#if GPUMEM_FUTEX_LOCKS
    _Atomic uint32_t state;
#else
    pthread_mutex_t mutex;
#endif
    int rank; /* enum gpumem_lock_rank */
} gpumem_mutex;

#if GPUMEM_FUTEX_LOCKS
#define GPUMEM_MUTEX_INITIALIZER(rank)                                                   \
    {                                                                                    \
        0, (rank)                                                                        \
    }
#else
#define GPUMEM_MUTEX_INITIALIZER(rank)                                                   \
    {                                                                                    \
        PTHREAD_MUTEX_INITIALIZER, (rank)                                                \
    }
#endif

/* platform.c: whether the calling thread may take m now (a sibling: m's rank may
 * be one it holds, for locks of one kind taken in one fixed order), and the
 * record of what it holds. Debug builds call them from the wrappers below. */
bool gpumem__lock_order_ok(const gpumem_mutex *m, bool sibling);
void gpumem__lock_check(const gpumem_mutex *m, bool sibling);
void gpumem__lock_taken(const gpumem_mutex *m);
void gpumem__lock_released(const gpumem_mutex *m);
#if GPUMEM_FUTEX_LOCKS
/* platform.c: the futex lock's ways when it is held (wait for it) and when a
 * thread may wait (wake one). */
void gpumem__mutex_wait(gpumem_mutex *m);
void gpumem__mutex_wake(gpumem_mutex *m);
#endif

static inline void gpumem__mutex_init(gpumem_mutex *m, enum gpumem_lock_rank rank)
{
#if GPUMEM_FUTEX_LOCKS
    atomic_init(&m->state, 0);
#else
    pthread_mutex_init(&m->mutex, NULL);
#endif
    m->rank = (int)rank;
}
static inline void gpumem__mutex_destroy(gpumem_mutex *m)
{
#if GPUMEM_FUTEX_LOCKS
    (void)m; /* a word: nothing to give back */
#else
    pthread_mutex_destroy(&m->mutex);
#endif
}
/* Takes and lets go of m without the rank record: the wrappers below, and the
 * fork handlers that must take locks in an order of their own (sim.c);
 * try_acquire never waits. */
static inline bool gpumem__mutex_try_acquire(gpumem_mutex *m)
{
#if GPUMEM_FUTEX_LOCKS
    uint32_t unheld = 0;
    return atomic_compare_exchange_strong_explicit(&m->state, &unheld, 1,
                                                   memory_order_acquire,
                                                   memory_order_relaxed);
#else
    return pthread_mutex_trylock(&m->mutex) == 0;
#endif
}
static inline void gpumem__mutex_acquire(gpumem_mutex *m)
{
#if GPUMEM_FUTEX_LOCKS
    if (!gpumem__mutex_try_acquire(m))
        gpumem__mutex_wait(m);
#else
    pthread_mutex_lock(&m->mutex);
#endif
}
static inline void gpumem__mutex_release(gpumem_mutex *m)
{
#if GPUMEM_FUTEX_LOCKS
    if (atomic_exchange_explicit(&m->state, 0, memory_order_release) == 2)
        gpumem__mutex_wake(m);
#else
    pthread_mutex_unlock(&m->mutex);
#endif
}
/* Takes m; `sibling`: the thread may hold others of m's rank. */
static inline void gpumem__mutex_lock_checked(gpumem_mutex *m, bool sibling)
{
#ifndef NDEBUG
    gpumem__lock_check(m, sibling);
#else
    (void)sibling;
#endif
    gpumem__mutex_acquire(m);
#ifndef NDEBUG
    gpumem__lock_taken(m);
#endif
}
static inline void gpumem__mutex_lock(gpumem_mutex *m)
{
    gpumem__mutex_lock_checked(m, false);
}
/* Takes m while the thread may hold others of its rank: only for locks of one
 * kind that every thread takes in the same order (sim.c's fork handler). */
static inline void gpumem__mutex_lock_sibling(gpumem_mutex *m)
{
    gpumem__mutex_lock_checked(m, true);
}
static inline void gpumem__mutex_unlock(gpumem_mutex *m)
{
#ifndef NDEBUG
    gpumem__lock_released(m);
#endif
    gpumem__mutex_release(m);
}
/* Takes the lock if it is free: true when taken; never waits, so it may be
 * tried in any order. */
static inline bool gpumem__mutex_trylock(gpumem_mutex *m)
{
    if (!gpumem__mutex_try_acquire(m))
        return false;
#ifndef NDEBUG
    gpumem__lock_taken(m);
#endif
    return true;
}

/* A condition to wait for under a gpumem_mutex (the idle release's thread): on
 * Linux a counter that every signal bumps, waited on with the futex call; else a
 * POSIX condition variable. A wait may end early: the waiter looks again. */
typedef struct {
#if GPUMEM_FUTEX_LOCKS
    _Atomic uint32_t seq;
#else
    pthread_cond_t cond;
#endif
} gpumem_cond;

/* platform.c. init: 0 or an errno value. wait: lets m go, sleeps until a
 * signal or the CLOCK_MONOTONIC time `until` (NULL: no limit), takes m again;
 * returns ETIMEDOUT once `until` has passed, else 0. broadcast: wakes every
 * waiter. */
int gpumem__cond_init(gpumem_cond *c);
void gpumem__cond_destroy(gpumem_cond *c);
int gpumem__cond_wait(gpumem_cond *c, gpumem_mutex *m, const struct timespec *until);
void gpumem__cond_broadcast(gpumem_cond *c);

/* Registers handlers that run around every fork() of the process (any NULL is
 * skipped): `prepare` in the parent just before, `parent` in the parent and
 * `child` in the child (on its only thread) just after. Call once per set of
 * handlers (pthread_once). Where there is no fork, nothing happens. */
static inline void gpumem__atfork(void (*prepare)(void), void (*parent)(void),
                                  void (*child)(void))
{
#if GPUMEM_HAVE_FORK
    pthread_atfork(prepare, parent, child);
#else
    (void)prepare;
    (void)parent;
    (void)child;
#endif
}

/* The calling process's id, for messages; 0 where there is no such thing. */
static inline long gpumem__process_id(void)
{
#if GPUMEM_HAVE_FORK
    return (long)getpid();
#else
    return 0;
#endif
}

/* a + b without wrapping: false on overflow. */
static inline bool gpumem__add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    if (a > UINT64_MAX - b)
        return false;
    *out = a + b;
    return true;
}

/* a + b, or UINT64_MAX when it overflows; a - b, or 0 below zero: figures that
 * count bytes and must neither wrap nor go negative (the ledger's). */
static inline uint64_t gpumem__sat_add_u64(uint64_t a, uint64_t b)
{
    uint64_t r;
    return gpumem__add_u64(a, b, &r) ? r : UINT64_MAX;
}
static inline uint64_t gpumem__sat_sub_u64(uint64_t a, uint64_t b)
{
    return a > b ? a - b : 0;
}

/* Rounds x up to a multiple of the power of two `align`: false on overflow. */
static inline bool gpumem__align_up(uint64_t x, uint64_t align, uint64_t *out)
{
    if (x > UINT64_MAX - (align - 1))
        return false;
    *out = (x + align - 1) & ~(align - 1);
    return true;
}

static inline uint64_t gpumem__align_down(uint64_t x, uint64_t align)
{
    return x & ~(align - 1);
}

static inline uint64_t gpumem__min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }
static inline uint64_t gpumem__max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }

#define GPUMEM_KIB (UINT64_C(1) << 10)
#define GPUMEM_MIB (UINT64_C(1) << 20)
#define GPUMEM_GIB (UINT64_C(1) << 30)
#define GPUMEM_TIB (UINT64_C(1) << 40)

#endif /* GPUMEM_PLATFORM_H */
