/* The runtime's lifecycle: the process-wide default runtime, create and destroy,
 * and initialization (configure -> initialize -> serve, once). The entry points
 * of the other phases are config.c (configuration), serve.c (serving) and
 * adopt.c (a runtime inherited across fork()); runtime.h has what they share.
 *
 * Every entry point resolves its runtime first (NULL -> the default runtime,
 * created once from the environment; a stale handle is caught by its magic when
 * possible), validates its arguments before changing anything, and leaves through
 * a single exit when it holds a lock. Initialization takes rt->lock and publishes
 * SERVING last (release); the logical table is immutable from then on. */
#include "runtime.h"

#include "backend/backend.h"
#include "structs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

unsigned gpumem_version(void) { return GPUMEM_VERSION_NUMBER; }

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

/* NULL -> the default runtime, created on first use; resolve_call's slow start. */
gpumem_status gpumem__default_runtime(gpumem_runtime **rt, const char *api)
{
    pthread_once(&default_once, default_create);
    if (default_status != GPUMEM_OK)
        return gpumem__fail(default_status,
                            "%s: the default runtime could not be created: %s", api,
                            default_error);
    *rt = default_runtime;
    return GPUMEM_OK;
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
    gpumem__adopt_watch(); /* watch fork() from now on */
    gpumem_runtime *rt = calloc(1, sizeof *rt);
    if (!rt)
        return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY,
                            "gpumem_runtime_create: out of host memory");
    struct reason why;
    gpumem_status s = gpumem__options_load(opts, &rt->opts);
    rt->opts.warn_to_stderr = is_default;
    rt->is_default = is_default;
    if (s == GPUMEM_OK && (s = gpumem__backend_open(&rt->opts, &rt->backend, &why)))
        s = gpumem__fail(s, "gpumem_runtime_create: %s", why.text);
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
        s = rt->backend->ops->device_props(rt->backend, (int)i, d, &why);
        if (s != GPUMEM_OK) {
            s = gpumem__fail(s, "gpumem_runtime_create: %s", why.text);
            goto fail;
        }
        d->index = (int)i;
        snprintf(d->name, sizeof d->name, "/physical_device:GPU:%zu", i);
        rt->config[i].growth = rt->opts.force_growth;
        rt->config[i].fraction = rt->opts.memory_fraction;
        rt->visible[i] = true;
    }
    gpumem__mutex_init(&rt->lock, GPUMEM_RANK_RUNTIME);
    gpumem__region_map_init(&rt->regions);
    atomic_init(&rt->state, RUNTIME_CONFIGURING);
    rt->owner_pid = gpumem__process_id();
    atomic_store_explicit(&rt->magic,
                          atomic_load_explicit(&gpumem__live_magic, memory_order_relaxed),
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

/* The idle release's thread first, then the ledgers: their threads release the
 * pools' memory, and the pools publish into the ledgers' mappings. */
static void destroy_pools(gpumem_runtime *rt)
{
    gpumem__idle_stop(rt->idle);
    rt->idle = NULL;
    for (size_t p = 0; rt->shares && p < rt->num_physical; p++)
        gpumem__share_close(rt->shares[p]);
    free(rt->shares);
    rt->shares = NULL;
    free(rt->share_pools);
    rt->share_pools = NULL;
    for (size_t i = 0; i < rt->num_logical; i++)
        gpumem__pool_destroy(rt->logical[i].pool);
    free(rt->logical);
    rt->logical = NULL;
    rt->num_logical = 0;
}

void gpumem_runtime_destroy(gpumem_runtime *rt)
{
    if (!rt)
        return;
    uint64_t magic = atomic_load_explicit(&rt->magic, memory_order_relaxed);
    uint64_t live = atomic_load_explicit(&gpumem__live_magic, memory_order_relaxed);
    if (magic != live) {
        gpumem__runtime_forget(rt); /* inherited: its copy; else not a live runtime */
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

/* Two-call idiom: validates out/capacity/count. */
gpumem_status gpumem__check_list_args(const char *api,
                                      const struct gpumem__struct_kind *k,
                                      const void *out, size_t capacity,
                                      const size_t *count, size_t *stride)
{
    if (!count)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "%s: `count` is NULL", api);
    if (!out && capacity)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "%s: `out` is NULL but capacity is %zu", api, capacity);
    return k ? gpumem__struct_check(api, "out[0]", k, out, capacity, stride) : GPUMEM_OK;
}

GPUMEM_COLD gpumem_status gpumem__no_such_logical(const char *api, int logical, size_t n)
{
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

size_t gpumem__logical_count(gpumem_runtime *rt)
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

gpumem_status gpumem__check_logical_index(gpumem_runtime *rt, const char *api,
                                          int logical)
{
    gpumem_status s = resolve_call(&rt, api, OBJ_LOGICAL, logical, 0, NULL);
    if (s != GPUMEM_OK)
        return s;
    return gpumem__check_logical(api, logical, gpumem__logical_count(rt));
}

/* -------------------------------------------------------- initialization -- */

/* Whether logical device j of a GPU configured as c admits its whole budget in
 * the ledger at initialization: a greedy pool, or a growing one whose budget is a
 * limit (a fraction, or the logical device's own); a growing pool without one
 * admits what it grows by. */
static bool admits_whole(const struct phys_config *c, size_t j, bool growth)
{
    return !growth || c->fraction > 0.0 ||
           (c->num_logical > 0 && c->logical[j].memory_limit_bytes > 0);
}

/* GPU p's ledger, when there is to be one: a real GPU's, or a shared simulated
 * one's (a process's own simulated GPUs are no other process's: no file). */
static void open_share(gpumem_runtime *rt, size_t p)
{
    char gpu[32];
    snprintf(gpu, sizeof gpu, "GPU:%zu", p);
    /* host memory is the simulated GPUs' (backend.h): a backend is told by what
     * it says of itself, not by its name */
    bool own_sim = rt->backend->host_accessible && !rt->opts.sim_machine[0];
    struct share_params sp = {
        .opts = &rt->opts,
        .backend = rt->backend,
        .device = (int)p,
        .gpu = gpu,
        .uuid = own_sim ? "" : rt->physical[p].uuid,
        .total_bytes = rt->physical[p].total_bytes,
    };
    gpumem__share_open(&sp, &rt->shares[p]);
}

/* What plan_gpu's step needs to plan GPU p's budgets (gpumem__plan_budgets). */
struct gpu_plan {
    const gpumem_runtime *rt;
    size_t p;
    bool growth;
    uint64_t total_bytes;
    uint64_t *budgets;
    char (*reasons)[BUDGET_REASON_LEN];
};

/* share_plan_fn: the budgets of the GPU's logical devices from `avail`, the free
 * memory they may count, and what each admits whole. Pure: it runs under the
 * ledger's admission lock. */
static void plan_budgets(void *ctx, uint64_t avail, uint64_t *want)
{
    const struct gpu_plan *g = ctx;
    const struct phys_config *c = &g->rt->config[g->p];
    uint64_t headroom =
        gpumem__wanted_headroom(&g->rt->opts, avail, g->rt->physical[g->p].compute_major);
    gpumem__plan_budgets(c, g->total_bytes, avail, headroom, g->budgets, g->reasons);
    size_t count = c->num_logical ? c->num_logical : 1;
    for (size_t j = 0; j < count; j++)
        want[j] = admits_whole(c, j, g->growth) ? g->budgets[j] : 0;
}

/* Plans the budgets of GPU p's logical devices from its free memory and admits
 * those that admit whole (admits_whole; admitted[j]: what logical device j
 * admitted). With a ledger, the plan is made and admitted in one step under its
 * admission lock (gpumem__share_plan), from what the other processes leave:
 * processes that start together are planned one after the other, and the late
 * ones get what is left, 0 when nothing is. pre: rt->lock held, GPU p's share
 * open. */
static gpumem_status plan_gpu(gpumem_runtime *rt, size_t p, bool growth,
                              uint64_t *budgets, char (*reasons)[BUDGET_REASON_LEN],
                              uint64_t *admitted)
{
    static const char api[] = "gpumem_initialize";
    const struct phys_config *c = &rt->config[p];
    unsigned count = (unsigned)(c->num_logical ? c->num_logical : 1);
    struct reason why;
    uint64_t free_bytes, total_bytes;
    gpumem_status s =
        rt->backend->ops->mem_info(rt->backend, (int)p, &free_bytes, &total_bytes, &why);
    if (s != GPUMEM_OK)
        return gpumem__fail(s, "%s: %s", api, why.text);
    struct gpu_plan g = {rt, p, growth, total_bytes, budgets, reasons};
    memset(admitted, 0, count * sizeof *admitted);
    if (!rt->shares[p]) { /* no other process counts: the driver's free memory */
        uint64_t want[GPUMEM_MAX_LOGICAL_PER_GPU];
        plan_budgets(&g, free_bytes, want);
        return GPUMEM_OK;
    }
    s = gpumem__share_plan(rt->shares[p], count, plan_budgets, &g, admitted, &why);
    if (s != GPUMEM_OK)
        return gpumem__fail(s, "%s: GPU:%zu: %s", api, p, why.text);
    return GPUMEM_OK;
}

/* Makes GPU p's pools, logical devices rt->logical[first, first + count), from
 * their budgets. pre: rt->lock held. */
static gpumem_status make_pools(gpumem_runtime *rt, size_t p, bool growth, size_t first,
                                const uint64_t *budgets,
                                char (*reasons)[BUDGET_REASON_LEN])
{
    const struct phys_config *c = &rt->config[p];
    size_t count = c->num_logical ? c->num_logical : 1;
    struct reason why;
    for (size_t j = 0; j < count; j++) {
        size_t k = first + j;
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
        gpumem__share_device(rt->shares[p], (unsigned)j, ld->desc.name, growth,
                             budgets[j], admits_whole(c, j, growth), &pp.share);
        gpumem_status s = gpumem__pool_create(&pp, &ld->pool, &why);
        if (s != GPUMEM_OK)
            return gpumem__fail(s, "gpumem_initialize: %s", why.text);
        rt->num_logical = k + 1;
        rt->share_pools[k] = ld->pool;
    }
    return GPUMEM_OK;
}

/* Builds GPU p's logical devices from rt->logical[*k] on: plans their budgets,
 * makes their pools and takes the greedy budgets; *k moves past them. When the
 * driver refuses a budget that the plan counted, the GPU's pools are destroyed,
 * their admissions taken back, and the GPU planned again from what the driver
 * says now: memory may have gone outside the ledger meanwhile (another process's
 * CUDA context, a program without gpumem, another runtime of this process on the
 * same simulated GPUs), and the late process of several that start together
 * then gets what is left instead of failing. A plan that comes out as the
 * refused one is not tried again (nothing went: the refusal stands), nor one
 * after TAKE_ATTEMPTS plans. pre: rt->lock held. */
#define TAKE_ATTEMPTS 4
static gpumem_status build_gpu(gpumem_runtime *rt, size_t p, bool growth, size_t *k)
{
    static const char api[] = "gpumem_initialize";
    char buf[GPUMEM_BYTES_BUF];
    const struct phys_config *c = &rt->config[p];
    size_t count = c->num_logical ? c->num_logical : 1, first = *k, refused_at = 0;
    uint64_t refused[GPUMEM_MAX_LOGICAL_PER_GPU];
    struct reason why, refusal;
    for (int attempt = 1;; attempt++) {
        uint64_t budgets[GPUMEM_MAX_LOGICAL_PER_GPU],
            admitted[GPUMEM_MAX_LOGICAL_PER_GPU];
        char reasons[GPUMEM_MAX_LOGICAL_PER_GPU][BUDGET_REASON_LEN];
        gpumem_status s = plan_gpu(rt, p, growth, budgets, reasons, admitted);
        if (s != GPUMEM_OK)
            return s;
        bool again =
            attempt > 1 && memcmp(budgets, refused, count * sizeof *budgets) == 0;
        s = again ? GPUMEM_ERR_OUT_OF_MEMORY
                  : make_pools(rt, p, growth, first, budgets, reasons);
        size_t j = 0;
        for (; s == GPUMEM_OK && j < count; j++)
            s = gpumem__pool_take_budget(rt->logical[first + j].pool, &why);
        if (s == GPUMEM_OK) {
            for (j = 0; j < count; j++)
                gpumem__log(&rt->opts, GPUMEM_LOG_INFO,
                            "gpumem: /device:GPU:%zu on GPU:%zu: budget %s (%s), memory "
                            "growth %s",
                            first + j, p,
                            gpumem__format_bytes(budgets[j], buf, sizeof buf), reasons[j],
                            growth ? "on" : "off");
            gpumem__share_give(rt->shares[p], &rt->share_pools[first], count);
            *k = first + count;
            return GPUMEM_OK;
        }
        for (size_t i = first; i < rt->num_logical; i++) {
            gpumem__pool_destroy(rt->logical[i].pool);
            rt->logical[i].pool = NULL;
            rt->share_pools[i] = NULL;
        }
        rt->num_logical = first;
        for (size_t i = 0; i < count; i++)
            gpumem__share_unadmit(rt->shares[p], (unsigned)i, admitted[i]);
        if (j == 0 && !again) /* making a pool failed: gpumem__fail said why */
            return s;
        if (!again) { /* the driver refused logical device first + j - 1 */
            refused_at = first + j - 1;
            refusal = why;
            memcpy(refused, budgets, count * sizeof *budgets);
        }
        if (again || s != GPUMEM_ERR_OUT_OF_MEMORY || attempt == TAKE_ATTEMPTS)
            return gpumem__fail(s,
                                "%s: reserving the budget of /device:GPU:%zu failed: %s",
                                api, refused_at, refusal.text);
        gpumem__log(&rt->opts, GPUMEM_LOG_INFO,
                    "gpumem: GPU:%zu: the driver refused the budget of /device:GPU:%zu "
                    "(%s); planning GPU:%zu again",
                    p, refused_at, refusal.text, p);
    }
}

/* Builds the logical table and the pools, GPU by GPU, and reserves the greedy
 * budgets. pre: rt->lock held, state CONFIGURING. On failure nothing stays
 * reserved. */
static gpumem_status runtime_init(gpumem_runtime *rt, const char *reason)
{
    static const char api[] = "gpumem_initialize";
    gpumem_status s = GPUMEM_OK;
    size_t n = 0;
    for (size_t p = 0; p < rt->num_physical; p++)
        if (rt->visible[p])
            n += rt->config[p].num_logical ? rt->config[p].num_logical : 1;
    rt->logical = calloc(n ? n : 1, sizeof *rt->logical);
    rt->shares = calloc(rt->num_physical ? rt->num_physical : 1, sizeof *rt->shares);
    rt->share_pools = calloc(n ? n : 1, sizeof *rt->share_pools);
    if (!rt->logical || !rt->shares || !rt->share_pools) {
        destroy_pools(rt);
        return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "%s: out of host memory", api);
    }
    size_t k = 0;
    for (size_t p = 0; p < rt->num_physical; p++) {
        if (!rt->visible[p])
            continue;
        bool growth = rt->config[p].growth;
        if (rt->opts.force_growth_set && growth != rt->opts.force_growth) {
            /* as TensorFlow's TF_FORCE_GPU_ALLOW_GROWTH overrides its config */
            growth = rt->opts.force_growth;
            gpumem__warn(&rt->opts,
                         "gpumem: GPU:%zu: memory growth %s, overriding the %s set for "
                         "it, because %s is set",
                         p, growth ? "on" : "off", growth ? "off" : "on",
                         rt->opts.force_growth_var);
        }
        open_share(rt, p);
        if ((s = build_gpu(rt, p, growth, &k)) != GPUMEM_OK) {
            destroy_pools(rt);
            return s;
        }
    }
    gpumem__idle_start(&rt->opts, rt->share_pools, rt->num_logical, &rt->idle);
    snprintf(rt->init_reason, sizeof rt->init_reason, "%s", reason);
    atomic_store_explicit(&rt->state, RUNTIME_SERVING, memory_order_release);
    return GPUMEM_OK;
}

/* Initializes on first use; `reason` names the call ("the first gpumem_malloc()"). */
gpumem_status gpumem__initialize_once(gpumem_runtime *rt, const char *reason)
{
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
    return gpumem__ensure_initialized(rt, "an explicit gpumem_initialize()");
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
    /* as gpumem.h defines them: SIM, the memory is host memory */
    *kind = rt->backend->host_accessible ? GPUMEM_BACKEND_SIM : GPUMEM_BACKEND_CUDA;
    return GPUMEM_OK;
}

gpumem_status gpumem_list_logical_devices(gpumem_runtime *rt, gpumem_logical_device *out,
                                          size_t capacity, size_t *count)
{
    static const char api[] = "gpumem_list_logical_devices";
    size_t stride;
    gpumem_status s = resolve(&rt, api);
    if (s == GPUMEM_OK)
        s = gpumem__check_list_args(api, &gpumem__logical_device_struct, out, capacity,
                                    count, &stride);
    if (s == GPUMEM_OK)
        s = gpumem__ensure_initialized(rt, "the first gpumem_list_logical_devices()");
    if (s != GPUMEM_OK)
        return s;
    for (size_t i = 0; i < rt->num_logical && i < capacity; i++)
        gpumem__struct_put(&gpumem__logical_device_struct, out, stride, i,
                           &rt->logical[i].desc);
    *count = rt->num_logical;
    return GPUMEM_OK;
}
