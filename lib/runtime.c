/* The runtime: the public API's entry points, the lifecycle (configure ->
 * initialize -> serve), the process-wide default runtime, and the locking.
 *
 * Every entry point resolves its runtime first (NULL -> the default runtime,
 * created once from the environment; a stale handle is caught by its magic when
 * possible), validates its arguments before changing anything, and leaves through
 * a single exit when it holds a lock. Configuration after initialization succeeds
 * only when it would change nothing (as in TensorFlow, so that a re-run notebook
 * cell does not fail); otherwise it says what initialized the devices.
 *
 * fork(): see "fork" below. A runtime whose device state belongs to the parent
 * is refused in a forked child by the same compare that checks the magic. */
#include "runtime.h"

#include "backend/backend.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RUNTIME_MAGIC UINT64_C(0x67706d656d72746d) /* "gpmemrtm" */
#define RUNTIME_DEAD  UINT64_C(0x646561646465616d) /* "deaddeam" */

unsigned gpumem_version(void) { return GPUMEM_VERSION_NUMBER; }

/* ----------------------------------------------------------------- fork -- */

/* A forked child inherits copies of the parent's runtimes. Their device memory
 * and driver state are the parent's (the CUDA driver fails every call in a
 * forked child of a process that initialized it), and a lock that another
 * thread of the parent held at the fork stays held in the child for good. So
 * the child must not use them.
 *
 * A fork handler counts generations: a child's is one more than its parent's.
 * A live runtime's magic is RUNTIME_MAGIC plus the generation it belongs to, and
 * live_magic is RUNTIME_MAGIC plus this process's: the one compare with which
 * resolve() already checked the magic now also catches a runtime inherited
 * across fork(), for the price of a load in place of an immediate. On a
 * mismatch, resolve_slow() sorts it out:
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
 * its host bookkeeping only (runtime_forget). */

static _Atomic unsigned fork_generation;
static _Atomic uint64_t live_magic = RUNTIME_MAGIC;
/* Serializes adoptions; made anew in each child, since a thread of the parent may
 * have held it at the fork. */
static gpumem_mutex adopt_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

/* In the child, on its only thread, before fork() returns there. */
static void fork_child(void)
{
    unsigned g = atomic_load_explicit(&fork_generation, memory_order_relaxed) + 1;
    atomic_store_explicit(&fork_generation, g, memory_order_relaxed);
    atomic_store_explicit(&live_magic, RUNTIME_MAGIC + g, memory_order_relaxed);
    gpumem__mutex_init(&adopt_lock);
}

static void fork_watch(void) { gpumem__atfork(NULL, NULL, fork_child); }

unsigned gpumem__fork_generation(void)
{
    pthread_once(&fork_once, fork_watch);
    return atomic_load_explicit(&fork_generation, memory_order_relaxed);
}

/* A magic of a live runtime of an earlier generation: one inherited across
 * fork(). (RUNTIME_DEAD and garbage are far from RUNTIME_MAGIC.) */
static bool inherited(uint64_t magic, uint64_t live)
{
    return magic - RUNTIME_MAGIC < live - RUNTIME_MAGIC;
}

/* ------------------------------------------------------ default runtime -- */

static pthread_once_t default_once = PTHREAD_ONCE_INIT;
static gpumem_runtime *default_runtime;
static gpumem_status default_status;
static char default_error[512];

static gpumem_status runtime_create(const gpumem_options *opts, bool is_default,
                                    gpumem_runtime **out);

static void default_create(void)
{
    default_status = runtime_create(NULL, true, &default_runtime);
    if (default_status != GPUMEM_OK)
        snprintf(default_error, sizeof default_error, "%s", gpumem_last_error());
}

/* What a call names in the messages of resolve's rare failures, given as parts
 * so that nothing is formatted on the hot path. */
enum call_object {
    OBJ_NONE,     /* "api" */
    OBJ_LOGICAL,  /* "api(/device:GPU:index)"; -1: every logical device */
    OBJ_ALLOC,    /* "api(/device:GPU:index, size)" */
    OBJ_POINTER,  /* "api(ptr)" */
    OBJ_PHYSICAL, /* "api(GPU:index)"; -1: every GPU */
};

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
 * (refused, or adopted: see "fork" above), or a handle that is not a live
 * runtime's. Takes no lock unless it adopts. */
static GPUMEM_COLD gpumem_status resolve_slow(gpumem_runtime *rt, const char *api,
                                              enum call_object kind, int index,
                                              uint64_t size, const void *ptr)
{
    uint64_t live = atomic_load_explicit(&live_magic, memory_order_relaxed);
    uint64_t magic = atomic_load_explicit(&rt->magic, memory_order_acquire);
    if (magic == live)
        return GPUMEM_OK;
    if (!inherited(magic, live))
        return gpumem__fail(
            GPUMEM_ERR_INVALID_ARGUMENT,
            "%s: the runtime handle is not a live gpumem runtime (destroyed?)", api);

    char call[192];
    describe_call(call, sizeof call, api, kind, index, size, ptr);
    const bool dflt = rt == default_runtime;
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

/* NULL -> the default runtime; a handle that is not a live runtime of this
 * process fails. The magic also catches a destroyed runtime, but only until its
 * memory is reused (the header says so at gpumem_runtime_destroy): a registry of
 * live runtimes would cost a process-wide lock on every call. The parts after
 * `api` describe the call for the message when rt came from a parent process. */
static inline gpumem_status resolve_call(gpumem_runtime **rt, const char *api,
                                         enum call_object kind, int index, uint64_t size,
                                         const void *ptr)
{
    if (*rt == NULL) {
        pthread_once(&default_once, default_create);
        if (default_status != GPUMEM_OK)
            return gpumem__fail(default_status,
                                "%s: the default runtime could not be created: %s", api,
                                default_error);
        *rt = default_runtime;
    }
    /* Relaxed: an adoption (above) publishes nothing that the call then reads. */
    if (atomic_load_explicit(&(*rt)->magic, memory_order_relaxed) ==
        atomic_load_explicit(&live_magic, memory_order_relaxed))
        return GPUMEM_OK;
    return resolve_slow(*rt, api, kind, index, size, ptr);
}

static inline gpumem_status resolve(gpumem_runtime **rt, const char *api)
{
    return resolve_call(rt, api, OBJ_NONE, 0, 0, NULL);
}

static bool serving(const gpumem_runtime *rt)
{
    return atomic_load_explicit(&rt->state, memory_order_acquire) == RUNTIME_SERVING;
}

/* --------------------------------------------------------- create/destroy -- */

gpumem_status gpumem_runtime_create(const gpumem_options *opts, gpumem_runtime **out)
{
    return runtime_create(opts, false, out);
}

static gpumem_status runtime_create(const gpumem_options *opts, bool is_default,
                                    gpumem_runtime **out)
{
    if (!out)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "gpumem_runtime_create: `out` is NULL");
    (void)gpumem__fork_generation(); /* watch fork() from now on */
    gpumem_runtime *rt = calloc(1, sizeof *rt);
    if (!rt)
        return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY,
                            "gpumem_runtime_create: out of host memory");
    gpumem_status s = gpumem__options_load(opts, &rt->opts);
    rt->opts.warn_to_stderr = is_default;
    if (s == GPUMEM_OK)
        s = gpumem__backend_open(&rt->opts, &rt->backend);
    if (s != GPUMEM_OK) {
        free(rt);
        return s;
    }
    size_t n = rt->backend->ops->device_count(rt->backend);
    rt->num_physical = n;
    rt->physical = calloc(n ? n : 1, sizeof *rt->physical);
    rt->config = calloc(n ? n : 1, sizeof *rt->config);
    rt->visible = calloc(n ? n : 1, sizeof *rt->visible);
    if (!rt->physical || !rt->config || !rt->visible) {
        s = gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY,
                         "gpumem_runtime_create: out of host memory");
        goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        gpumem_physical_device *d = &rt->physical[i];
        s = rt->backend->ops->device_props(rt->backend, (int)i, d);
        if (s != GPUMEM_OK)
            goto fail;
        d->index = (int)i;
        snprintf(d->name, sizeof d->name, "/physical_device:GPU:%zu", i);
        rt->config[i].growth = rt->opts.force_growth;
        rt->config[i].fraction = rt->opts.memory_fraction;
        rt->visible[i] = true;
    }
    gpumem__mutex_init(&rt->lock);
    gpumem__region_map_init(&rt->regions);
    atomic_init(&rt->state, RUNTIME_CONFIGURING);
    rt->owner_pid = gpumem__process_id();
    atomic_store_explicit(&rt->magic,
                          atomic_load_explicit(&live_magic, memory_order_relaxed),
                          memory_order_release);
    *out = rt;
    return GPUMEM_OK;

fail:
    free(rt->physical);
    free(rt->config);
    free(rt->visible);
    rt->backend->ops->destroy(rt->backend);
    free(rt);
    return s;
}

static void destroy_pools(gpumem_runtime *rt)
{
    for (size_t i = 0; i < rt->num_logical; i++)
        gpumem__pool_destroy(rt->logical[i].pool);
    free(rt->logical);
    rt->logical = NULL;
    rt->num_logical = 0;
}

/* gpumem_runtime_destroy() of a runtime inherited across fork(): frees this
 * process's copy of its host bookkeeping, and nothing else. No backend call (the
 * device memory and the driver state are the parent's, which still uses them),
 * and no lock waited on: a lock that a thread of the parent held at the fork is
 * held here for good, and what it guards may be half-changed, so that part is
 * left as it is (a copy, lost in the child) rather than read. */
static void runtime_forget(gpumem_runtime *rt)
{
    atomic_store_explicit(&rt->magic, RUNTIME_DEAD, memory_order_relaxed);
    if (!gpumem__mutex_trylock(&rt->lock))
        return; /* inside a call at the fork: the tables may be torn */
    for (size_t i = 0; i < rt->num_logical; i++)
        gpumem__pool_forget(rt->logical[i].pool);
    free(rt->logical);
    gpumem__region_map_forget(&rt->regions);
    rt->backend->ops->forget(rt->backend);
    free(rt->physical);
    free(rt->config);
    free(rt->visible);
    free(rt); /* its lock with it: taken above, and never to be waited on */
}

void gpumem_runtime_destroy(gpumem_runtime *rt)
{
    if (!rt)
        return;
    uint64_t magic = atomic_load_explicit(&rt->magic, memory_order_relaxed);
    uint64_t live = atomic_load_explicit(&live_magic, memory_order_relaxed);
    if (magic != live) {
        if (inherited(magic, live))
            runtime_forget(rt);
        return;
    }
    atomic_store_explicit(&rt->magic, RUNTIME_DEAD, memory_order_relaxed);
    destroy_pools(rt);
    rt->backend->ops->destroy(rt->backend);
    gpumem__region_map_destroy(&rt->regions);
    gpumem__mutex_destroy(&rt->lock);
    free(rt->physical);
    free(rt->config);
    free(rt->visible);
    free(rt);
}

/* ------------------------------------------------------------- helpers -- */

static gpumem_status check_physical(const gpumem_runtime *rt, const char *api,
                                    int physical)
{
    if (physical < 0 || (size_t)physical >= rt->num_physical)
        return gpumem__fail(
            GPUMEM_ERR_NO_SUCH_DEVICE,
            "%s(GPU:%d): no such physical device (this runtime has %zu GPU%s)", api,
            physical, rt->num_physical, rt->num_physical == 1 ? "" : "s");
    return GPUMEM_OK;
}

/* `logical` is one of the n logical devices there are (or, before
 * initialization, that the configuration would build); else NO_SUCH_DEVICE with
 * a message that says which there are. */
static gpumem_status check_logical_of(const char *api, int logical, size_t n)
{
    if (logical >= 0 && (size_t)logical < n)
        return GPUMEM_OK;
    if (n == 0)
        return gpumem__fail(
            GPUMEM_ERR_NO_SUCH_DEVICE,
            "%s(/device:GPU:%d): no such logical device (there are none: no GPU "
            "is visible)",
            api, logical);
    if (n == 1)
        return gpumem__fail(GPUMEM_ERR_NO_SUCH_DEVICE,
                            "%s(/device:GPU:%d): no such logical device (there is one, "
                            "/device:GPU:0)",
                            api, logical);
    return gpumem__fail(GPUMEM_ERR_NO_SUCH_DEVICE,
                        "%s(/device:GPU:%d): no such logical device (there are %zu, "
                        "/device:GPU:0 to /device:GPU:%zu)",
                        api, logical, n, n - 1);
}

static gpumem_status check_logical(const gpumem_runtime *rt, const char *api, int logical)
{
    return check_logical_of(api, logical, rt->num_logical);
}

static gpumem_status already_initialized(const gpumem_runtime *rt, const char *api,
                                         const char *object)
{
    return gpumem__fail(GPUMEM_ERR_ALREADY_INITIALIZED,
                        "%s(%s): the devices are already initialized (by %s), so this "
                        "configuration can no longer change; make configuration calls "
                        "before that",
                        api, object, rt->init_reason);
}

/* Two-call idiom: validates out/capacity/count. */
static gpumem_status check_list_args(const char *api, const void *out, size_t capacity,
                                     const size_t *count)
{
    if (!count)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "%s: `count` is NULL", api);
    if (!out && capacity)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "%s: `out` is NULL but capacity is %zu", api, capacity);
    return GPUMEM_OK;
}

/* ---------------------------------------------------------- enumeration -- */

gpumem_status gpumem_list_physical_devices(gpumem_runtime *rt,
                                           gpumem_physical_device *out, size_t capacity,
                                           size_t *count)
{
    static const char api[] = "gpumem_list_physical_devices";
    gpumem_status s = resolve(&rt, api);
    if (s == GPUMEM_OK)
        s = check_list_args(api, out, capacity, count);
    if (s != GPUMEM_OK)
        return s;
    /* The physical table never changes after creation. */
    for (size_t i = 0; i < rt->num_physical && i < capacity; i++)
        out[i] = rt->physical[i];
    *count = rt->num_physical;
    return GPUMEM_OK;
}

/* ----------------------------------------------------------- visibility -- */

gpumem_status gpumem_set_visible_devices(gpumem_runtime *rt, const int *physical,
                                         size_t n)
{
    static const char api[] = "gpumem_set_visible_devices";
    gpumem_status s = resolve(&rt, api);
    if (s != GPUMEM_OK)
        return s;
    if (!physical && n)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "%s: `physical` is NULL but n is %zu", api, n);
    gpumem__mutex_lock(&rt->lock);
    bool *want = calloc(rt->num_physical ? rt->num_physical : 1, sizeof *want);
    if (!want) {
        s = gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "%s: out of host memory", api);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if ((s = check_physical(rt, api, physical[i])) != GPUMEM_OK)
            goto out;
        if (want[physical[i]]) {
            s = gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "%s: GPU:%d is listed twice",
                             api, physical[i]);
            goto out;
        }
        want[physical[i]] = true;
    }
    if (serving(rt)) {
        if (memcmp(want, rt->visible, rt->num_physical * sizeof *want) != 0)
            s = already_initialized(rt, api, "visible devices");
        goto out;
    }
    memcpy(rt->visible, want, rt->num_physical * sizeof *want);
out:
    gpumem__mutex_unlock(&rt->lock);
    free(want);
    return s;
}

gpumem_status gpumem_get_visible_devices(gpumem_runtime *rt, int *out, size_t capacity,
                                         size_t *count)
{
    static const char api[] = "gpumem_get_visible_devices";
    gpumem_status s = resolve(&rt, api);
    if (s == GPUMEM_OK)
        s = check_list_args(api, out, capacity, count);
    if (s != GPUMEM_OK)
        return s;
    gpumem__mutex_lock(&rt->lock);
    size_t k = 0;
    for (size_t i = 0; i < rt->num_physical; i++) {
        if (!rt->visible[i])
            continue;
        if (k < capacity)
            out[k] = (int)i;
        k++;
    }
    *count = k;
    gpumem__mutex_unlock(&rt->lock);
    return GPUMEM_OK;
}

/* --------------------------------------------------------------- growth -- */

gpumem_status gpumem_set_memory_growth(gpumem_runtime *rt, int physical, bool enable)
{
    static const char api[] = "gpumem_set_memory_growth";
    char object[32];
    gpumem_status s = resolve_call(&rt, api, OBJ_PHYSICAL, physical, 0, NULL);
    if (s != GPUMEM_OK)
        return s;
    gpumem__mutex_lock(&rt->lock);
    if ((s = check_physical(rt, api, physical)) != GPUMEM_OK)
        goto out;
    if (serving(rt)) {
        snprintf(object, sizeof object, "GPU:%d", physical);
        if (rt->config[physical].growth != enable)
            s = already_initialized(rt, api, object);
        goto out;
    }
    rt->config[physical].growth = enable;
out:
    gpumem__mutex_unlock(&rt->lock);
    return s;
}

/* The getters of a per-GPU setting: *copy receives GPU `physical`'s
 * configuration, read under the lock, once rt, `out` (named `name` in the
 * message) and the index are checked. */
static gpumem_status read_config(gpumem_runtime *rt, const char *api, int physical,
                                 const void *out, const char *name,
                                 struct phys_config *copy)
{
    gpumem_status s = resolve_call(&rt, api, OBJ_PHYSICAL, physical, 0, NULL);
    if (s != GPUMEM_OK)
        return s;
    if (!out)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "%s: `%s` is NULL", api, name);
    gpumem__mutex_lock(&rt->lock);
    if ((s = check_physical(rt, api, physical)) == GPUMEM_OK)
        *copy = rt->config[physical];
    gpumem__mutex_unlock(&rt->lock);
    return s;
}

gpumem_status gpumem_get_memory_growth(gpumem_runtime *rt, int physical, bool *enabled)
{
    struct phys_config c;
    gpumem_status s =
        read_config(rt, "gpumem_get_memory_growth", physical, enabled, "enabled", &c);
    if (s == GPUMEM_OK)
        *enabled = c.growth;
    return s;
}

/* ------------------------------------------------------------- fraction -- */

gpumem_status gpumem_set_memory_fraction(gpumem_runtime *rt, int physical,
                                         double fraction)
{
    static const char api[] = "gpumem_set_memory_fraction";
    char object[32];
    gpumem_status s = resolve_call(&rt, api, OBJ_PHYSICAL, physical, 0, NULL);
    if (s != GPUMEM_OK)
        return s;
    snprintf(object, sizeof object, physical == -1 ? "every GPU" : "GPU:%d", physical);
    if (isnan(fraction) || fraction < 0.0 || fraction > 1.0)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "%s(%s): fraction %.17g is not in [0, 1] (0 clears it)", api,
                            object, fraction);
    gpumem__mutex_lock(&rt->lock);
    size_t first = 0, last = rt->num_physical;
    if (physical != -1) {
        if ((s = check_physical(rt, api, physical)) != GPUMEM_OK)
            goto out;
        first = (size_t)physical;
        last = first + 1;
    }
    if (serving(rt)) {
        for (size_t i = first; i < last; i++)
            if (rt->config[i].fraction != fraction)
                s = already_initialized(rt, api, object);
        goto out;
    }
    for (size_t i = first; i < last; i++)
        rt->config[i].fraction = fraction;
out:
    gpumem__mutex_unlock(&rt->lock);
    return s;
}

gpumem_status gpumem_get_memory_fraction(gpumem_runtime *rt, int physical,
                                         double *fraction)
{
    struct phys_config c;
    gpumem_status s =
        read_config(rt, "gpumem_get_memory_fraction", physical, fraction, "fraction", &c);
    if (s == GPUMEM_OK)
        *fraction = c.fraction;
    return s;
}

/* ------------------------------------------------------ logical devices -- */

static bool same_logical_config(const struct phys_config *c,
                                const gpumem_logical_device_config *configs, size_t n)
{
    if (c->num_logical != n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (c->logical[i].memory_limit_bytes != configs[i].memory_limit_bytes ||
            c->logical[i].priority != configs[i].priority)
            return false;
    return true;
}

gpumem_status gpumem_set_logical_device_configuration(
    gpumem_runtime *rt, int physical, const gpumem_logical_device_config *configs,
    size_t n)
{
    static const char api[] = "gpumem_set_logical_device_configuration";
    char object[32];
    gpumem_status s = resolve_call(&rt, api, OBJ_PHYSICAL, physical, 0, NULL);
    if (s != GPUMEM_OK)
        return s;
    if (!configs && n)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "%s(GPU:%d): `configs` is NULL but n is %zu", api, physical,
                            n);
    if (n > GPUMEM_MAX_LOGICAL_PER_GPU)
        return gpumem__fail(
            GPUMEM_ERR_INVALID_ARGUMENT,
            "%s(GPU:%d): %zu logical devices requested; at most %d per GPU", api,
            physical, n, GPUMEM_MAX_LOGICAL_PER_GPU);
    gpumem__mutex_lock(&rt->lock);
    if ((s = check_physical(rt, api, physical)) != GPUMEM_OK)
        goto out;
    s = gpumem__check_logical_config(api, physical, rt->physical[physical].total_bytes,
                                     configs, n);
    if (s != GPUMEM_OK)
        goto out;
    struct phys_config *c = &rt->config[physical];
    if (serving(rt)) {
        snprintf(object, sizeof object, "GPU:%d", physical);
        if (!same_logical_config(c, configs, n))
            s = already_initialized(rt, api, object);
        goto out;
    }
    c->num_logical = n;
    for (size_t i = 0; i < n; i++)
        c->logical[i] = configs[i];
out:
    gpumem__mutex_unlock(&rt->lock);
    return s;
}

gpumem_status gpumem_get_logical_device_configuration(gpumem_runtime *rt, int physical,
                                                      gpumem_logical_device_config *out,
                                                      size_t capacity, size_t *count)
{
    static const char api[] = "gpumem_get_logical_device_configuration";
    gpumem_status s = resolve_call(&rt, api, OBJ_PHYSICAL, physical, 0, NULL);
    if (s == GPUMEM_OK)
        s = check_list_args(api, out, capacity, count);
    if (s != GPUMEM_OK)
        return s;
    gpumem__mutex_lock(&rt->lock);
    if ((s = check_physical(rt, api, physical)) == GPUMEM_OK) {
        const struct phys_config *c = &rt->config[physical];
        for (size_t i = 0; i < c->num_logical && i < capacity; i++)
            out[i] = c->logical[i];
        *count = c->num_logical;
    }
    gpumem__mutex_unlock(&rt->lock);
    return s;
}

/* -------------------------------------------------------- initialization -- */

/* Builds the logical table and the pools, and reserves the greedy budgets.
 * pre: rt->lock held, state CONFIGURING. On failure nothing stays reserved. */
static gpumem_status runtime_init(gpumem_runtime *rt, const char *reason)
{
    static const char api[] = "gpumem_initialize";
    char buf[GPUMEM_BYTES_BUF];
    gpumem_status s = GPUMEM_OK;
    size_t n = 0;
    for (size_t p = 0; p < rt->num_physical; p++)
        if (rt->visible[p])
            n += rt->config[p].num_logical ? rt->config[p].num_logical : 1;
    rt->logical = calloc(n ? n : 1, sizeof *rt->logical);
    if (!rt->logical)
        return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "%s: out of host memory", api);

    size_t k = 0;
    for (size_t p = 0; p < rt->num_physical; p++) {
        if (!rt->visible[p])
            continue;
        const struct phys_config *c = &rt->config[p];
        bool growth = c->growth;
        if (rt->opts.force_growth_set && growth != rt->opts.force_growth) {
            /* as TensorFlow's TF_FORCE_GPU_ALLOW_GROWTH overrides its config */
            growth = rt->opts.force_growth;
            gpumem__warn(&rt->opts,
                         "gpumem: GPU:%zu: memory growth %s, overriding the %s set for "
                         "it, because %s is set",
                         p, growth ? "on" : "off", growth ? "off" : "on",
                         rt->opts.force_growth_var);
        }
        uint64_t free_bytes, total_bytes;
        s = rt->backend->ops->mem_info(rt->backend, (int)p, &free_bytes, &total_bytes);
        if (s != GPUMEM_OK)
            goto fail;
        uint64_t headroom =
            gpumem__wanted_headroom(&rt->opts, free_bytes, rt->physical[p].compute_major);
        uint64_t budgets[GPUMEM_MAX_LOGICAL_PER_GPU];
        char reasons[GPUMEM_MAX_LOGICAL_PER_GPU][BUDGET_REASON_LEN];
        gpumem__plan_budgets(c, total_bytes, free_bytes, headroom, budgets, reasons);
        size_t count = c->num_logical ? c->num_logical : 1;
        for (size_t j = 0; j < count; j++, k++) {
            struct logical_device *ld = &rt->logical[k];
            ld->desc.index = (int)k;
            snprintf(ld->desc.name, sizeof ld->desc.name, "/device:GPU:%zu", k);
            ld->desc.physical_index = (int)p;
            ld->desc.memory_limit_bytes = budgets[j];
            ld->desc.memory_growth = growth;
            struct pool_params pp = {
                .backend = rt->backend,
                .device = (int)p,
                .budget = budgets[j],
                .growth = growth,
                .budget_reason = reasons[j],
                .map = &rt->regions,
                .opts = &rt->opts,
            };
            snprintf(pp.label, sizeof pp.label, "/device:GPU:%zu", k);
            rt->num_logical = k + 1;
            if ((s = gpumem__pool_create(&pp, &ld->pool)) != GPUMEM_OK)
                goto fail;
            gpumem__log(
                &rt->opts, GPUMEM_LOG_INFO,
                "gpumem: /device:GPU:%zu on GPU:%zu: budget %s (%s), memory growth %s", k,
                p, gpumem__format_bytes(budgets[j], buf, sizeof buf), reasons[j],
                growth ? "on" : "off");
        }
    }
    for (size_t i = 0; i < rt->num_logical; i++) {
        if ((s = gpumem__pool_reserve_budget(rt->logical[i].pool)) != GPUMEM_OK) {
            char cause[512];
            snprintf(cause, sizeof cause, "%s", gpumem_last_error());
            s = gpumem__fail(s, "%s: reserving the budget of /device:GPU:%zu failed: %s",
                             api, i, cause);
            goto fail;
        }
    }
    snprintf(rt->init_reason, sizeof rt->init_reason, "%s", reason);
    atomic_store_explicit(&rt->state, RUNTIME_SERVING, memory_order_release);
    return GPUMEM_OK;

fail:
    destroy_pools(rt);
    return s;
}

/* Initializes on first use; `reason` names the call ("the first gpumem_malloc()"). */
static gpumem_status ensure_initialized(gpumem_runtime *rt, const char *reason)
{
    if (serving(rt))
        return GPUMEM_OK;
    gpumem__log_hold(); /* initialization logs with rt->lock held */
    gpumem__mutex_lock(&rt->lock);
    gpumem_status s = serving(rt) ? GPUMEM_OK : runtime_init(rt, reason);
    gpumem__mutex_unlock(&rt->lock);
    gpumem__log_release();
    return s;
}

gpumem_status gpumem_initialize(gpumem_runtime *rt)
{
    gpumem_status s = resolve(&rt, "gpumem_initialize");
    if (s != GPUMEM_OK)
        return s;
    return ensure_initialized(rt, "an explicit gpumem_initialize()");
}

gpumem_status gpumem_is_initialized(gpumem_runtime *rt, bool *initialized)
{
    gpumem_status s = resolve(&rt, "gpumem_is_initialized");
    if (s != GPUMEM_OK)
        return s;
    if (!initialized)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "gpumem_is_initialized: `initialized` is NULL");
    *initialized = serving(rt);
    return GPUMEM_OK;
}

gpumem_status gpumem_get_backend(gpumem_runtime *rt, gpumem_backend_kind *kind)
{
    gpumem_status s = resolve(&rt, "gpumem_get_backend");
    if (s != GPUMEM_OK)
        return s;
    if (!kind)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "gpumem_get_backend: `kind` is NULL");
    *kind = strcmp(rt->backend->ops->name, "cuda") == 0 ? GPUMEM_BACKEND_CUDA
                                                        : GPUMEM_BACKEND_SIM;
    return GPUMEM_OK;
}

gpumem_status gpumem_list_logical_devices(gpumem_runtime *rt, gpumem_logical_device *out,
                                          size_t capacity, size_t *count)
{
    static const char api[] = "gpumem_list_logical_devices";
    gpumem_status s = resolve(&rt, api);
    if (s == GPUMEM_OK)
        s = check_list_args(api, out, capacity, count);
    if (s == GPUMEM_OK)
        s = ensure_initialized(rt, "the first gpumem_list_logical_devices()");
    if (s != GPUMEM_OK)
        return s;
    for (size_t i = 0; i < rt->num_logical && i < capacity; i++)
        out[i] = rt->logical[i].desc;
    *count = rt->num_logical;
    return GPUMEM_OK;
}

/* -------------------------------------------------------------- serving -- */

gpumem_status gpumem_malloc(gpumem_runtime *rt, int logical, size_t size, void **ptr)
{
    static const char api[] = "gpumem_malloc";
    gpumem_status s = resolve_call(&rt, api, OBJ_ALLOC, logical, (uint64_t)size, NULL);
    if (s != GPUMEM_OK)
        return s;
    if (!ptr)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "%s(/device:GPU:%d): `ptr` is NULL", api, logical);
    if (size == 0)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "%s(/device:GPU:%d): size is 0; ask for at least one byte",
                            api, logical);
    if ((s = ensure_initialized(rt, "the first gpumem_malloc()")) != GPUMEM_OK)
        return s;
    if ((s = check_logical(rt, api, logical)) != GPUMEM_OK)
        return s;
    uint64_t addr;
    s = gpumem__pool_alloc(rt->logical[logical].pool, (uint64_t)size, &addr);
    if (s == GPUMEM_OK)
        *ptr = (void *)(uintptr_t)addr;
    return s;
}

gpumem_status gpumem_free(gpumem_runtime *rt, void *ptr)
{
    static const char api[] = "gpumem_free";
    if (ptr == NULL)
        return GPUMEM_OK; /* like free(NULL): not even the default runtime is made */
    gpumem_status s = resolve_call(&rt, api, OBJ_POINTER, 0, 0, ptr);
    if (s != GPUMEM_OK)
        return s;
    uint64_t addr = (uint64_t)(uintptr_t)ptr;
    if (serving(rt)) {
        /* The pool's arena validates under the pool's lock: a racing double free
         * gets INVALID_POINTER, not corruption. With one pool, that check is the
         * whole of it, and the region map, which routes a pointer to its pool, is
         * read only to tell a pointer that is not this runtime's from one that is
         * not (or no longer) an allocation's start. */
        if (rt->num_logical == 1) {
            s = gpumem__pool_free(rt->logical[0].pool, addr);
            if (s == GPUMEM_OK || gpumem__region_map_find(&rt->regions, addr))
                return s;
        } else {
            struct pool *pool = gpumem__region_map_find(&rt->regions, addr);
            if (pool)
                return gpumem__pool_free(pool, addr);
        }
    }
    return gpumem__fail(GPUMEM_ERR_INVALID_POINTER,
                        "%s(%p): not a pointer returned by gpumem_malloc of this runtime "
                        "(never allocated, another runtime's, or in memory already "
                        "released)",
                        api, ptr);
}

gpumem_status gpumem_get_memory_info(gpumem_runtime *rt, int logical,
                                     gpumem_memory_info *out)
{
    static const char api[] = "gpumem_get_memory_info";
    gpumem_status s = resolve_call(&rt, api, OBJ_LOGICAL, logical, 0, NULL);
    if (s != GPUMEM_OK)
        return s;
    if (!out)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "%s(/device:GPU:%d): `out` is NULL", api, logical);
    if ((s = ensure_initialized(rt, "the first gpumem_get_memory_info()")) != GPUMEM_OK)
        return s;
    if ((s = check_logical(rt, api, logical)) != GPUMEM_OK)
        return s;
    gpumem__pool_info(rt->logical[logical].pool, out);
    return GPUMEM_OK;
}

/* The number of logical devices there are or, before initialization, that the
 * configuration would build. */
static size_t logical_count_any_time(gpumem_runtime *rt)
{
    if (serving(rt))
        return rt->num_logical;
    gpumem__mutex_lock(&rt->lock);
    size_t n = 0;
    for (size_t p = 0; p < rt->num_physical; p++)
        if (rt->visible[p])
            n += rt->config[p].num_logical ? rt->config[p].num_logical : 1;
    gpumem__mutex_unlock(&rt->lock);
    return n;
}

/* Before initialization there are no pools: checks `logical` (-1: all) against
 * the configuration that initialization would build, so that a bad index fails
 * the same way before and after. */
static gpumem_status check_logical_any_time(gpumem_runtime *rt, const char *api,
                                            int logical)
{
    if (logical == -1)
        return GPUMEM_OK;
    return check_logical_of(api, logical, logical_count_any_time(rt));
}

gpumem_status gpumem__check_logical_index(gpumem_runtime *rt, const char *api,
                                          int logical)
{
    gpumem_status s = resolve_call(&rt, api, OBJ_LOGICAL, logical, 0, NULL);
    if (s != GPUMEM_OK)
        return s;
    return check_logical_of(api, logical, logical_count_any_time(rt));
}

gpumem_status gpumem__cuda_device_logical(gpumem_runtime *rt, const char *api,
                                          int cuda_device, int *logical)
{
    char reason[64];
    snprintf(reason, sizeof reason, "the first %s()", api);
    gpumem_status s = resolve_call(&rt, api, OBJ_PHYSICAL, cuda_device, 0, NULL);
    if (s != GPUMEM_OK)
        return s;
    if (!logical)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "%s(GPU:%d): `logical` is NULL",
                            api, cuda_device);
    if ((s = ensure_initialized(rt, reason)) != GPUMEM_OK)
        return s;
    if (rt->opts.backend == GPUMEM_BACKEND_AUTO && strcmp(rt->backend->ops->name, "cuda"))
        return gpumem__fail(
            GPUMEM_ERR_UNSUPPORTED,
            "%s(GPU:%d): no CUDA driver could be used, so GPUMEM_BACKEND=auto fell back "
            "to simulated GPUs, whose memory is host memory; set GPUMEM_BACKEND=cuda to "
            "see why (or GPUMEM_BACKEND=sim to test on simulated GPUs)",
            api, cuda_device);
    if (cuda_device < 0 || (size_t)cuda_device >= rt->num_physical)
        return gpumem__fail(GPUMEM_ERR_NO_SUCH_DEVICE,
                            "%s(GPU:%d): no such GPU (there %s %zu)", api, cuda_device,
                            rt->num_physical == 1 ? "is" : "are", rt->num_physical);
    for (size_t i = 0; i < rt->num_logical; i++)
        if (rt->logical[i].desc.physical_index == cuda_device) {
            *logical = (int)i;
            return GPUMEM_OK;
        }
    return gpumem__fail(GPUMEM_ERR_NO_SUCH_DEVICE,
                        "%s(GPU:%d): GPU:%d is hidden by gpumem_set_visible_devices, so "
                        "it has no logical device",
                        api, cuda_device, cuda_device);
}

gpumem_status gpumem_cuda_device_logical(gpumem_runtime *rt, int cuda_device,
                                         int *logical)
{
    return gpumem__cuda_device_logical(rt, "gpumem_cuda_device_logical", cuda_device,
                                       logical);
}

gpumem_status gpumem_reset_memory_stats(gpumem_runtime *rt, int logical)
{
    static const char api[] = "gpumem_reset_memory_stats";
    gpumem_status s = resolve_call(&rt, api, OBJ_LOGICAL, logical, 0, NULL);
    if (s == GPUMEM_OK)
        s = check_logical_any_time(rt, api, logical);
    if (s != GPUMEM_OK || !serving(rt))
        return s;
    for (size_t i = 0; i < rt->num_logical; i++)
        if (logical == -1 || (size_t)logical == i)
            gpumem__pool_reset_stats(rt->logical[i].pool);
    return GPUMEM_OK;
}

gpumem_status gpumem_release_unused(gpumem_runtime *rt, int logical, uint64_t *released)
{
    static const char api[] = "gpumem_release_unused";
    uint64_t total = 0;
    gpumem_status s = resolve_call(&rt, api, OBJ_LOGICAL, logical, 0, NULL);
    if (s == GPUMEM_OK)
        s = check_logical_any_time(rt, api, logical);
    if (s != GPUMEM_OK)
        return s;
    if (serving(rt)) {
        for (size_t i = 0; i < rt->num_logical; i++) {
            if (logical != -1 && (size_t)logical != i)
                continue;
            uint64_t bytes = 0;
            gpumem_status si = gpumem__pool_release_unused(rt->logical[i].pool, &bytes);
            total += bytes;
            if (si != GPUMEM_OK && s == GPUMEM_OK)
                s = si;
        }
    }
    if (released) /* also after a refused region: the others went back */
        *released = total;
    return s;
}
