/* The runtime: configuration tables, lifecycle state and the logical devices,
 * and what the runtime's files share (runtime.c, adopt.c, config.c, serve.c; the
 * hooks build on the calls at the end).
 *
 * State machine: CONFIGURING -> SERVING, once. While configuring, rt->lock guards
 * every table. Initialization builds the logical table and the pools under the
 * lock, then publishes SERVING with a release store; after that the tables are
 * immutable, so the serving paths (malloc, free, memory info) read them after an
 * acquire load without taking rt->lock. Lock order: rt->lock -> pool->lock ->
 * region map lock.
 *
 * Across fork(): a runtime whose device state came to exist in another process
 * (it was initialized there, or its backend holds that process's driver state)
 * is refused in the child before any lock is taken; one that holds only host
 * configuration is adopted by the first process that uses it (adopt.c). */
#ifndef GPUMEM_RUNTIME_H
#define GPUMEM_RUNTIME_H

#include "devices.h"
#include "structs.h"
#include "internal.h"
#include "pool.h"
#include "idle.h"
#include "share.h"

enum runtime_state { RUNTIME_CONFIGURING = 0, RUNTIME_SERVING = 1 };

struct logical_device {
    gpumem_logical_device desc;
    struct pool *pool;
};

struct gpumem_runtime {
    /* RUNTIME_MAGIC + the fork generation the runtime belongs to while it is
     * alive (adopt.c): one compare tells a live runtime of this
     * process from a destroyed one and from one inherited across fork(). */
    _Atomic uint64_t magic;
    long owner_pid;    /* the process it belongs to (created it, or adopted it) */
    bool is_default;   /* the process-wide default runtime (NULL in the API) */
    gpumem_mutex lock; /* configuration and initialization */
    _Atomic int state; /* enum runtime_state */
    struct options opts;
    struct backend *backend;
    size_t num_physical;
    gpumem_physical_device *physical; /* [num_physical] */
    struct phys_config *config;       /* [num_physical] */
    bool *visible;                    /* [num_physical] */
    size_t num_logical;
    struct logical_device *logical; /* [num_logical], built at initialization */
    char init_reason[64];           /* what initialized the devices */
    struct region_map regions;      /* address -> pool, for gpumem_free */
    /* The ledger of each GPU with pools (share.h), built at initialization:
     * [num_physical], NULL entries where there is none; and the pools of
     * rt->logical, GPU by GPU, for their give-back callbacks. */
    struct share **shares;
    struct pool **share_pools;
    struct idle *idle; /* the idle release (idle.h); NULL: none */
};

#define RUNTIME_MAGIC UINT64_C(0x67706d656d72746d) /* "gpmemrtm" */
#define RUNTIME_DEAD  UINT64_C(0x646561646465616d) /* "deaddeam" */

/* What a call names in the messages of resolve's rare failures, given as parts
 * so that nothing is formatted on the hot path. */
enum call_object {
    OBJ_NONE,     /* "api" */
    OBJ_LOGICAL,  /* "api(/device:GPU:index)"; -1: every logical device */
    OBJ_ALLOC,    /* "api(/device:GPU:index, size)" */
    OBJ_POINTER,  /* "api(ptr)" */
    OBJ_PHYSICAL, /* "api(GPU:index)"; -1: every GPU */
};

/* ------------------------------------------------------------- adopt.c -- */

/* RUNTIME_MAGIC plus this process's fork generation: the magic of this
 * process's live runtimes. */
extern _Atomic uint64_t gpumem__live_magic;
/* Watches fork() from now on (live magic and adoption lock follow each child). */
void gpumem__adopt_watch(void);
/* resolve_call's slow path: what it sorts out is said at its definition. */
GPUMEM_COLD gpumem_status gpumem__resolve_slow(gpumem_runtime *rt, const char *api,
                                               enum call_object kind, int index,
                                               uint64_t size, const void *ptr);
/* gpumem_runtime_destroy() of a handle whose magic is not the live one: the
 * copy of an inherited runtime is forgotten (see there); any other, left alone. */
void gpumem__runtime_forget(gpumem_runtime *rt);

/* ----------------------------------------------------------- runtime.c -- */

/* resolve_call's start when rt is NULL: the default runtime, created on first
 * use; a failure to create it fails every call that would use it. */
gpumem_status gpumem__default_runtime(gpumem_runtime **rt, const char *api);
/* Initializes rt unless another thread did meanwhile (takes rt->lock);
 * gpumem__ensure_initialized's slow path. */
gpumem_status gpumem__initialize_once(gpumem_runtime *rt, const char *reason);
/* Two-call idiom: validates out/capacity/count and, for an array of a
 * caller-sized struct (`k`; NULL for plain arrays), the struct_size of out[0],
 * whose value is *stride (see structs.h). */
gpumem_status gpumem__check_list_args(const char *api,
                                      const struct gpumem__struct_kind *k,
                                      const void *out, size_t capacity,
                                      const size_t *count, size_t *stride);

/* NO_SUCH_DEVICE for `logical`, not one of the n logical devices, with a
 * message that says which there are (gpumem__check_logical's failure). */
GPUMEM_COLD gpumem_status gpumem__no_such_logical(const char *api, int logical, size_t n);

/* `logical` is one of the n logical devices there are (or, before
 * initialization, that the configuration would build); else NO_SUCH_DEVICE with
 * a message that says which there are. The test inline: an allocation makes it,
 * and a call cost it 9 instructions. */
static inline gpumem_status gpumem__check_logical(const char *api, int logical, size_t n)
{
    if (logical >= 0 && (size_t)logical < n)
        return GPUMEM_OK;
    return gpumem__no_such_logical(api, logical, n);
}
/* The number of logical devices there are or, before initialization, that the
 * configuration would build (then under rt->lock). */
size_t gpumem__logical_count(gpumem_runtime *rt);
/* For the hooks and the snapshots: `logical` is a logical device of rt (NULL:
 * the default runtime) now or, before initialization, of what its configuration
 * would build; else NO_SUCH_DEVICE with the same message as every other call
 * taking an index. In runtime.c, below the serving and snapshot files that both
 * use it, so that neither needs the other's. */
gpumem_status gpumem__check_logical_index(gpumem_runtime *rt, const char *api,
                                          int logical);

/* NULL -> the default runtime; a handle that is not a live runtime of this
 * process fails. The magic also catches a destroyed runtime, but only until its
 * memory is reused (the header says so at gpumem_runtime_destroy): a registry of
 * live runtimes would cost a process-wide lock on every call. The parts after
 * `api` describe the call for the message when rt came from a parent process.
 * Inline, with its short name of when the runtime was one file: every entry
 * point's hot path starts here. */
static inline gpumem_status resolve_call(gpumem_runtime **rt, const char *api,
                                         enum call_object kind, int index, uint64_t size,
                                         const void *ptr)
{
    if (*rt == NULL) {
        gpumem_status s = gpumem__default_runtime(rt, api);
        if (s != GPUMEM_OK)
            return s;
    }
    /* Relaxed: an adoption (adopt.c) publishes nothing that the call then reads. */
    if (atomic_load_explicit(&(*rt)->magic, memory_order_relaxed) ==
        atomic_load_explicit(&gpumem__live_magic, memory_order_relaxed))
        return GPUMEM_OK;
    return gpumem__resolve_slow(*rt, api, kind, index, size, ptr);
}

static inline gpumem_status resolve(gpumem_runtime **rt, const char *api)
{
    return resolve_call(rt, api, OBJ_NONE, 0, 0, NULL);
}

static inline bool serving(const gpumem_runtime *rt)
{
    return atomic_load_explicit(&rt->state, memory_order_acquire) == RUNTIME_SERVING;
}

/* Initializes on first use; `reason` names the call ("the first gpumem_malloc()").
 * Inline: once serving, every malloc pays one load and a branch, not a call. */
static inline gpumem_status gpumem__ensure_initialized(gpumem_runtime *rt,
                                                       const char *reason)
{
    return serving(rt) ? GPUMEM_OK : gpumem__initialize_once(rt, reason);
}

/* ------------------------------------------------------------- serve.c -- */

/* gpumem_cuda_device_logical, with `api` naming the caller in its messages; *rt
 * (NULL: the default runtime) is resolved first, and on success is the runtime
 * it resolved to, for the caller's next call on it. */
gpumem_status gpumem__cuda_device_logical(gpumem_runtime **rt, const char *api,
                                          int cuda_device, int *logical);

/* ------------------------------------------------------ driver_stats.c -- */

/* The driver calls rt's backend counted on GPU `physical` (-1: every GPU, summed)
 * into totals, by enum driver_call (backend/driver_calls.h). pre: physical is
 * -1 or a GPU of rt. */
struct driver_call_totals;
void gpumem__runtime_driver_calls(gpumem_runtime *rt, int physical,
                                  struct driver_call_totals *totals);

#endif /* GPUMEM_RUNTIME_H */
