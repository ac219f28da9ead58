/* gpumem's own allocators for the bench.
 *
 * arena: the arena alone (lib/arena.c) over one region of the capacity, at an
 *        address of no meaning (the arena never dereferences it), as in a pool
 *        that does not grow.
 * api:   the public API on a simulated GPU, as a program sees it: a runtime made
 *        with GPUMEM_OPTIONS_IGNORE_ENVIRONMENT, one simulated GPU a little larger
 *        than the capacity, one logical device whose memory_limit is the capacity,
 *        greedy (the whole limit reserved at initialization) or growing
 *        (--growth); gpumem_malloc and gpumem_free with their locks, the region
 *        map lookup and the argument checks.
 * api-cuda: the same on the real CUDA device 0 (bench/run_cuda.sh); the device
 *        must hold the capacity.
 * api-async, api-cuda-async: the same through gpumem_malloc_async and
 *        gpumem_free_async on the legacy default stream (NULL), the path
 *        gpumem.torch takes for PyTorch's default stream. On a simulated GPU
 *        streams are synchronous: what the stream-ordered entry points add to
 *        the plain path. On CUDA (the driver double too): a stream's own
 *        memory, served again to it at once, with no driver call once warm.
 * Both report the driver calls their runtime made (gpumem_list_driver_calls),
 * which the replay prices (bench/replay.c). */
#include "allocators.h"

#include "arena.h"
#include "gpumem.h"
#include "platform.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARENA_BASE (UINT64_C(1) << 40) /* any granule-aligned address will do */

/* ------------------------------------------------------------------- arena -- */

static void *arena_create(const struct bench_config *cfg)
{
    struct arena *a = NULL;
    uint64_t cap = gpumem__align_down(cfg->capacity, ARENA_GRANULE);
    if (gpumem__arena_create(NULL, &a) != ARENA_OK) {
        fprintf(stderr, "arena: out of host memory\n");
        return NULL;
    }
    if (cap && gpumem__arena_add_region(a, ARENA_BASE, cap, true) != ARENA_OK) {
        fprintf(stderr, "arena: cannot add a region of %llu bytes\n",
                (unsigned long long)cap);
        gpumem__arena_destroy(a);
        return NULL;
    }
    return a;
}

static void arena_destroy(void *ctx) { gpumem__arena_destroy(ctx); }

BENCH_ENTRY static int bench_op_arena_alloc(void *ctx, uint64_t size, uint64_t *handle)
{
    uint64_t got;
    return gpumem__arena_alloc(ctx, size, handle, &got);
}

static void arena_free(void *ctx, uint64_t handle)
{
    gpumem__arena_free(ctx, handle, NULL);
}

BENCH_ENTRY static void bench_op_arena_free(void *ctx, uint64_t handle)
{
    arena_free(ctx, handle);
}

static void arena_stats(void *ctx, struct bench_stats *out)
{
    struct arena_stats s;
    gpumem__arena_stats(ctx, &s);
    out->peak_reserved = s.capacity_bytes;
    out->metadata_bytes = s.metadata_bytes;
    out->live_chunks = s.live_chunks;
    out->free_chunks = s.free_chunks;
}

const struct bench_allocator bench_arena_allocator = {
    .name = "arena",
    .about = "gpumem's arena alone over one region of the capacity",
    .has_capacity = true,
    .has_growth = false,
    .create = arena_create,
    .destroy = arena_destroy,
    .alloc = bench_op_arena_alloc,
    .free = bench_op_arena_free,
    .free_untimed = arena_free,
    .stats = arena_stats,
};

/* --------------------------------------------------------------------- api -- */

struct api_ctx {
    gpumem_runtime *rt;
};

/* GPUMEM_BENCH_RECORD_HISTORY=N: the event history on, N events (the runtime
 * ignores the environment, GPUMEM_RECORD_HISTORY included), to measure its cost. */
static gpumem_status api_record_history(gpumem_runtime *rt)
{
    const char *n = getenv("GPUMEM_BENCH_RECORD_HISTORY");
    return n && *n ? gpumem_record_history(rt, (size_t)strtoull(n, NULL, 10)) : GPUMEM_OK;
}

/* GPUMEM_BENCH_GROWTH_TRIM_WINDOW=X: the runtime reads GPUMEM_GROWTH_TRIM_WINDOW=X,
 * a variable gpumem_options has no field for. So that it reads nothing else from
 * the environment, every other GPUMEM_ variable but the bench's own leaves this
 * process's environment first. Returns whether the runtime must read it. */
static bool api_trim_window(void)
{
    extern char **environ;
    const char *w = getenv("GPUMEM_BENCH_GROWTH_TRIM_WINDOW");
    if (!w || !*w)
        return false;
    char value[64];
    snprintf(value, sizeof value, "%s", w);
    for (size_t i = 0; environ[i];) {
        char name[256];
        size_t n = strcspn(environ[i], "=");
        if (strncmp(environ[i], "GPUMEM_", 7) == 0 &&
            strncmp(environ[i], "GPUMEM_BENCH_", 13) != 0 && n < sizeof name) {
            memcpy(name, environ[i], n);
            name[n] = '\0';
            unsetenv(name); /* environ shifts down: look at i again */
        } else {
            i++;
        }
    }
    setenv("GPUMEM_GROWTH_TRIM_WINDOW", value, 1);
    return true;
}

/* backend: GPUMEM_BACKEND_SIM, or GPUMEM_BACKEND_CUDA for the real GPU 0 */
static void *api_create_on(const struct bench_config *cfg, int backend)
{
    char devices[64];
    gpumem_options o;
    gpumem_options_init(&o);
    o.flags = api_trim_window() ? 0 : GPUMEM_OPTIONS_IGNORE_ENVIRONMENT;
    /* GPUMEM_BENCH_GROWTH_TRIM=1 / 0: as GPUMEM_GROWTH_TRIM=on / off, which the
     * runtime does not read here (unset: the default, on) */
    const char *trim = getenv("GPUMEM_BENCH_GROWTH_TRIM");
    if (trim && strcmp(trim, "1") == 0)
        o.flags |= GPUMEM_OPTIONS_TRIM_GROWTH;
    else if (trim && strcmp(trim, "0") == 0)
        o.flags |= GPUMEM_OPTIONS_NO_TRIM_GROWTH;
    o.backend = backend;
    /* the simulated GPU holds the limit with room to spare; a limit is never cut
     * by the driver headroom, so the pool's budget is exactly the capacity */
    uint64_t limit = gpumem__align_down(cfg->capacity, ARENA_GRANULE);
    uint64_t total = gpumem__align_down(limit, GPUMEM_MIB) + 64 * GPUMEM_MIB;
    snprintf(devices, sizeof devices, "%lluB", (unsigned long long)total);
    if (backend == GPUMEM_BACKEND_SIM)
        o.sim_devices = devices;
    struct api_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        fprintf(stderr, "api: out of host memory\n");
        return NULL;
    }
    gpumem_logical_device_config ld = GPUMEM_LOGICAL_DEVICE_LIMIT(limit);
    gpumem_status s;
    if ((s = gpumem_runtime_create(&o, &c->rt)) != GPUMEM_OK ||
        (s = gpumem_set_memory_growth(c->rt, 0, cfg->growth)) != GPUMEM_OK ||
        (s = gpumem_set_logical_device_configuration(c->rt, 0, &ld, 1)) != GPUMEM_OK ||
        (s = gpumem_initialize(c->rt)) != GPUMEM_OK ||
        (s = api_record_history(c->rt)) != GPUMEM_OK) {
        fprintf(stderr, "api: %s: %s\n", gpumem_status_string(s), gpumem_last_error());
        gpumem_runtime_destroy(c->rt);
        free(c);
        return NULL;
    }
    return c;
}

static void *api_create(const struct bench_config *cfg)
{
    return api_create_on(cfg, GPUMEM_BACKEND_SIM);
}

static void *api_cuda_create(const struct bench_config *cfg)
{
    return api_create_on(cfg, GPUMEM_BACKEND_CUDA);
}

static void api_destroy(void *ctx)
{
    struct api_ctx *c = ctx;
    gpumem_runtime_destroy(c->rt);
    free(c);
}

BENCH_ENTRY static int bench_op_api_alloc(void *ctx, uint64_t size, uint64_t *handle)
{
    struct api_ctx *c = ctx;
    void *p;
    /* gpumem_malloc refuses 0, which the replay (and the arena) count as one
     * granule: ask for 1 byte, as the malloc baseline does */
    if (gpumem_malloc(c->rt, 0, size ? (size_t)size : 1, &p) != GPUMEM_OK)
        return 1;
    *handle = (uint64_t)(uintptr_t)p;
    return 0;
}

static void api_free(void *ctx, uint64_t handle)
{
    struct api_ctx *c = ctx;
    gpumem_free(c->rt, (void *)(uintptr_t)handle);
}

BENCH_ENTRY static void bench_op_api_free(void *ctx, uint64_t handle)
{
    api_free(ctx, handle);
}

static void api_stats(void *ctx, struct bench_stats *out)
{
    struct api_ctx *c = ctx;
    gpumem_memory_info info = GPUMEM_STRUCT_INIT(gpumem_memory_info);
    *out = (struct bench_stats){0};
    if (gpumem_get_memory_info(c->rt, 0, &info) == GPUMEM_OK)
        out->peak_reserved = info.peak_reserved_bytes;
}

static void api_driver_calls(void *ctx, struct bench_driver_calls *out)
{
    struct api_ctx *c = ctx;
    gpumem_driver_call e[BENCH_DRIVER_KINDS] = {GPUMEM_STRUCT_INIT(gpumem_driver_call)};
    size_t n = 0;
    out->n = 0;
    if (gpumem_list_driver_calls(c->rt, -1, e, BENCH_DRIVER_KINDS, &n) != GPUMEM_OK) {
        fprintf(stderr, "api: %s\n", gpumem_last_error());
        return;
    }
    for (size_t i = 0; i < n && i < BENCH_DRIVER_KINDS; i++) {
        snprintf(out->e[i].name, sizeof out->e[i].name, "%s", e[i].name);
        out->e[i].calls = e[i].calls;
        out->e[i].ns = e[i].ns;
        out->e[i].bytes = e[i].bytes;
        out->n++;
    }
}

BENCH_ENTRY static int bench_op_api_async_alloc(void *ctx, uint64_t size,
                                                uint64_t *handle)
{
    struct api_ctx *c = ctx;
    void *p;
    if (gpumem_malloc_async(c->rt, 0, size ? (size_t)size : 1, NULL, &p) != GPUMEM_OK)
        return 1;
    *handle = (uint64_t)(uintptr_t)p;
    return 0;
}

static void api_async_free(void *ctx, uint64_t handle)
{
    struct api_ctx *c = ctx;
    gpumem_free_async(c->rt, (void *)(uintptr_t)handle, NULL);
}

BENCH_ENTRY static void bench_op_api_async_free(void *ctx, uint64_t handle)
{
    api_async_free(ctx, handle);
}

/* The four gpumem allocators differ in their runtime's backend and their entry
 * points only. */
#define API_ALLOCATOR(NAME, ABOUT, CREATE, OP)                                           \
    {                                                                                    \
        .name = NAME, .about = ABOUT, .has_capacity = true, .has_growth = true,          \
        .create = CREATE, .destroy = api_destroy, .alloc = bench_op_##OP##_alloc,        \
        .free = bench_op_##OP##_free, .free_untimed = OP##_free, .stats = api_stats,     \
        .driver_calls = api_driver_calls,                                                \
    }

const struct bench_allocator bench_api_allocator =
    API_ALLOCATOR("api",
                  "gpumem_malloc/gpumem_free on a simulated GPU (limit = capacity)",
                  api_create, api);

/* The same on the real GPU 0 (bench/run_cuda.sh): the limit is the capacity, which
 * the device must hold. */
const struct bench_allocator bench_api_cuda_allocator =
    API_ALLOCATOR("api-cuda",
                  "gpumem_malloc/gpumem_free on CUDA device 0 (limit = capacity)",
                  api_cuda_create, api);

const struct bench_allocator bench_api_async_allocator =
    API_ALLOCATOR("api-async",
                  "gpumem_malloc_async/gpumem_free_async on the default stream of a "
                  "simulated GPU (limit = capacity)",
                  api_create, api_async);

const struct bench_allocator bench_api_cuda_async_allocator =
    API_ALLOCATOR("api-cuda-async",
                  "gpumem_malloc_async/gpumem_free_async on the default stream of CUDA "
                  "device 0 (limit = capacity)",
                  api_cuda_create, api_async);
