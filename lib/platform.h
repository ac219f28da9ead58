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

typedef struct {
    pthread_mutex_t mutex;
    int rank; /* enum gpumem_lock_rank */
} gpumem_mutex;

#define GPUMEM_MUTEX_INITIALIZER(rank)                                                   \
    {                                                                                    \
        PTHREAD_MUTEX_INITIALIZER, (rank)                                                \
    }

/* platform.c: whether the calling thread may take m now (a sibling: m's rank may
 * be one it holds, for locks of one kind taken in one fixed order), and the
 * record of what it holds. Debug builds call them from the wrappers below. */
bool gpumem__lock_order_ok(const gpumem_mutex *m, bool sibling);
void gpumem__lock_check(const gpumem_mutex *m, bool sibling);
void gpumem__lock_taken(const gpumem_mutex *m);
void gpumem__lock_released(const gpumem_mutex *m);

static inline void gpumem__mutex_init(gpumem_mutex *m, enum gpumem_lock_rank rank)
{
    pthread_mutex_init(&m->mutex, NULL);
    m->rank = (int)rank;
}
static inline void gpumem__mutex_destroy(gpumem_mutex *m)
{
    pthread_mutex_destroy(&m->mutex);
}
/* Takes m; `sibling`: the thread may hold others of m's rank. */
static inline void gpumem__mutex_lock_checked(gpumem_mutex *m, bool sibling)
{
#ifndef NDEBUG
    gpumem__lock_check(m, sibling);
#else
    (void)sibling;
#endif
    pthread_mutex_lock(&m->mutex);
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
    pthread_mutex_unlock(&m->mutex);
}
/* Takes the lock if it is free: true when taken; never waits, so it may be
 * tried in any order. */
static inline bool gpumem__mutex_trylock(gpumem_mutex *m)
{
    if (pthread_mutex_trylock(&m->mutex) != 0)
        return false;
#ifndef NDEBUG
    gpumem__lock_taken(m);
#endif
    return true;
}

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
