/* Adoption of inherited runtimes: what a forked child may do with the copies of
 * its parent's runtimes. The runtime's live magic follows the fork generation
 * (fork.h); a runtime whose magic is an earlier generation's is refused or
 * adopted here, and destroyed here as a copy (forgotten). Lock: adopt_lock, made
 * anew in each child, serializes adoptions; it is taken alone, and rt->lock only
 * tried under it, never waited on.
 *
 * A forked child inherits copies of the parent's runtimes. Their device memory
 * and driver state are the parent's (the CUDA driver fails every call in a
 * forked child of a process that initialized it), and a lock that another
 * thread of the parent held at the fork stays held in the child for good. So
 * the child must not use them.
 *
 * A fork handler counts generations (fork.c): a child's is one more than its
 * parent's. A live runtime's magic is RUNTIME_MAGIC plus the generation it
 * belongs to, and gpumem__live_magic is RUNTIME_MAGIC plus this process's: the
 * one compare with which resolve() already checked the magic now also catches a
 * runtime inherited across fork(), for the price of a load in place of an
 * immediate. On a mismatch, gpumem__resolve_slow() sorts it out:
 *  - a runtime bound to the process it came from (initialized there, or over a
 *    backend that holds that process's driver state: CUDA, whose cuInit ran at
 *    creation) is refused with GPUMEM_ERR_UNSUPPORTED, before any lock is taken
 *    or the backend called;
 *  - one that holds only host configuration (created over simulated GPUs and
 *    not initialized) is adopted by this process, as PyTorch lets a child use
 *    CUDA when its parent never initialized it; unless a thread of the parent
 *    was inside a call on it at the fork (configuring, reading the configuration
 *    or initializing: its lock stays held in the copy, and a writer may have left
 *    the tables half-changed), which is refused too.
 * gpumem_runtime_destroy() of an inherited runtime frees this process's copy of
 * its host bookkeeping only (gpumem__runtime_forget). */
#include "runtime.h"

#include "backend/backend.h"
#include "fork.h"

#include <stdio.h>
#include <stdlib.h>

/* RUNTIME_MAGIC plus this process's fork generation (runtime.h). */
_Atomic uint64_t gpumem__live_magic = RUNTIME_MAGIC;
/* Serializes adoptions; made anew in each child, since a thread of the parent may
 * have held it at the fork. */
static gpumem_mutex adopt_lock = GPUMEM_MUTEX_INITIALIZER(GPUMEM_RANK_ADOPT);

static pthread_once_t adopt_once = PTHREAD_ONCE_INIT;

/* In the child, on its only thread, before fork() returns there: after the fork
 * generation's handler (registered first, by adopt_watch), so it sees the
 * child's generation. */
static void adopt_child(void)
{
    atomic_store_explicit(&gpumem__live_magic, RUNTIME_MAGIC + gpumem__fork_generation(),
                          memory_order_relaxed);
    gpumem__mutex_init(&adopt_lock, GPUMEM_RANK_ADOPT);
}

static void adopt_watch(void)
{
    /* Counts generations from now on (registers its handler before ours), and
     * starts the live magic at this process's: a fork may have come between a
     * first call of gpumem__fork_generation (the CUDA backend's) and this one. */
    atomic_store_explicit(&gpumem__live_magic, RUNTIME_MAGIC + gpumem__fork_generation(),
                          memory_order_relaxed);
    gpumem__atfork(NULL, NULL, adopt_child);
}

void gpumem__adopt_watch(void) { pthread_once(&adopt_once, adopt_watch); }

/* A magic of a live runtime of an earlier generation: one inherited across
 * fork(). (RUNTIME_DEAD and garbage are far from RUNTIME_MAGIC.) */
static bool inherited(uint64_t magic, uint64_t live)
{
    return magic - RUNTIME_MAGIC < live - RUNTIME_MAGIC;
}

static void describe_call(char *buf, size_t n, const char *api, enum call_object kind,
                          int index, uint64_t size, const void *ptr)
{
    char bytes[GPUMEM_BYTES_BUF];
    switch (kind) {
    case OBJ_LOGICAL:
        if (index == -1)
            snprintf(buf, n, "%s(every logical device)", api);
        else
            snprintf(buf, n, "%s(/device:GPU:%d)", api, index);
        break;
    case OBJ_ALLOC:
        snprintf(buf, n, "%s(/device:GPU:%d, %s)", api, index,
                 gpumem__format_bytes(size, bytes, sizeof bytes));
        break;
    case OBJ_POINTER:
        snprintf(buf, n, "%s(%p)", api, ptr);
        break;
    case OBJ_PHYSICAL:
        if (index == -1)
            snprintf(buf, n, "%s(every GPU)", api);
        else
            snprintf(buf, n, "%s(GPU:%d)", api, index);
        break;
    default:
        snprintf(buf, n, "%s", api);
    }
}

/* rt's magic is not this process's live one: a runtime of this process that
 * another thread adopted meanwhile (GPUMEM_OK), one inherited across fork()
 * (refused, or adopted: see above), or a handle that is not a live
 * runtime's. Takes no lock unless it adopts. */
GPUMEM_COLD gpumem_status gpumem__resolve_slow(gpumem_runtime *rt, const char *api,
                                               enum call_object kind, int index,
                                               uint64_t size, const void *ptr)
{
    uint64_t live = atomic_load_explicit(&gpumem__live_magic, memory_order_relaxed);
    uint64_t magic = atomic_load_explicit(&rt->magic, memory_order_acquire);
    if (magic == live)
        return GPUMEM_OK;
    if (!inherited(magic, live))
        return gpumem__fail(
            GPUMEM_ERR_INVALID_ARGUMENT,
            "%s: the runtime handle is not a live gpumem runtime (destroyed?)", api);

    char call[192];
    describe_call(call, sizeof call, api, kind, index, size, ptr);
    const bool dflt = rt->is_default;
    const char *which = dflt ? "the default runtime" : "the runtime";
    /* On CUDA the driver cannot be initialized again in a forked child of a
     * process that initialized it, so a runtime of the child's own would fail
     * too: only 'spawn' helps there. */
    const char *remedy =
        rt->backend->process_bound
            ? "start worker processes with the 'spawn' method (a runtime created in "
              "the child would fail too: the CUDA driver cannot be initialized again "
              "in it)"
        : dflt ? "start worker processes with the 'spawn' method, or create and "
                 "initialize a runtime of its own in the child (gpumem_runtime_create)"
               : "create and initialize a runtime in the child, or start worker "
                 "processes with the 'spawn' method";
    const long self = gpumem__process_id();
    if (atomic_load_explicit(&rt->state, memory_order_acquire) == RUNTIME_SERVING) {
        /* Another thread of this process may have adopted and initialized it
         * since the magic was read: adoption stores the magic (release) before
         * initialization publishes SERVING (release), read above with acquire. A
         * runtime that was SERVING at the fork is never adopted, so its owner_pid
         * does not change. */
        if (atomic_load_explicit(&rt->magic, memory_order_relaxed) == live)
            return GPUMEM_OK;
        return gpumem__fail(GPUMEM_ERR_UNSUPPORTED,
                            "%s: this process (pid %ld) descends by fork() from the one "
                            "that initialized %s (pid %ld); device memory and the CUDA "
                            "driver cannot be used across fork(): %s",
                            call, self, which, rt->owner_pid, remedy);
    }
    if (rt->backend->process_bound) /* never adopted: owner_pid does not change */
        return gpumem__fail(GPUMEM_ERR_UNSUPPORTED,
                            "%s: this process (pid %ld) descends by fork() from the one "
                            "that created %s (pid %ld), which initialized the CUDA "
                            "driver for it; the driver cannot be used across fork(): %s",
                            call, self, which, rt->owner_pid, remedy);

    /* Only host configuration: adopt it, unless a thread of the parent held its
     * lock at the fork (no thread of this process can hold it yet: every call
     * on it has come here first). owner_pid is read under adopt_lock, which an
     * adoption holds while it writes it. */
    gpumem_status s = GPUMEM_OK;
    long parent = 0;
    bool adopted = false;
    gpumem__mutex_lock(&adopt_lock);
    if (atomic_load_explicit(&rt->magic, memory_order_relaxed) != live) {
        parent = rt->owner_pid;
        if (gpumem__mutex_trylock(&rt->lock)) {
            gpumem__mutex_unlock(&rt->lock);
            rt->owner_pid = self;
            atomic_store_explicit(&rt->magic, live, memory_order_release);
            adopted = true;
        } else {
            s = gpumem__fail(GPUMEM_ERR_UNSUPPORTED,
                             "%s: this process (pid %ld) descends by fork() from the one "
                             "that created %s (pid %ld), and another thread was inside "
                             "a call on it at the fork (configuring it, reading its "
                             "configuration or initializing it), whose lock stays held "
                             "in this copy of it: %s",
                             call, self, which, parent, remedy);
        }
    }
    gpumem__mutex_unlock(&adopt_lock);
    if (adopted)
        gpumem__log(&rt->opts, GPUMEM_LOG_INFO,
                    "gpumem: %s, created by pid %ld and not initialized, now belongs "
                    "to pid %ld, which descends from it by fork()",
                    which, parent, self);
    return s;
}

/* gpumem_runtime_destroy() of a runtime inherited across fork(): frees this
 * process's copy of its host bookkeeping, and nothing else. No backend call (the
 * device memory and the driver state are the parent's, which still uses them),
 * and no lock waited on: a lock that a thread of the parent held at the fork is
 * held here for good, and what it guards may be half-changed, so that part is
 * left as it is (a copy, lost in the child) rather than read. */

void gpumem__runtime_forget(gpumem_runtime *rt)
{
    uint64_t magic = atomic_load_explicit(&rt->magic, memory_order_relaxed);
    if (!inherited(magic,
                   atomic_load_explicit(&gpumem__live_magic, memory_order_relaxed)))
        return; /* not a live runtime of any process: nothing to free */
    atomic_store_explicit(&rt->magic, RUNTIME_DEAD, memory_order_relaxed);
    if (!gpumem__mutex_trylock(&rt->lock))
        return; /* inside a call at the fork: the tables may be torn */
    /* the idle release's thread is the parent's: the copy only */
    gpumem__idle_forget(rt->idle);
    for (size_t i = 0; i < rt->num_logical; i++)
        gpumem__pool_forget(rt->logical[i].pool);
    free(rt->logical);
    for (size_t p = 0; rt->shares && p < rt->num_physical; p++)
        gpumem__share_forget(rt->shares[p]); /* the slots stay the parent's */
    free(rt->shares);
    free(rt->share_pools);
    gpumem__region_map_forget(&rt->regions);
    rt->backend->ops->forget(rt->backend);
    free(rt->physical);
    free(rt->config);
    free(rt->visible);
    gpumem__mutex_unlock(&rt->lock); /* taken above; no other thread waits on it */
    free(rt);
}
