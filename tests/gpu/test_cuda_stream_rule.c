/* The stream rule of gpumem_malloc_async/gpumem_free_async against the real CUDA
 * driver (suite 'gpu'): a stream's work is held unfinished by a host function
 * (cuLaunchHostFunc) that waits until the test opens a gate, so no kernel and
 * no compiler are needed. A block freed on that stream goes back to it at once;
 * another stream gets other memory while the pool can grow, and at its budget
 * waits, and is handed the block only after the held work has run. Exits 77
 * (skipped) where there is no driver or no GPU. */
#include "backend/cuda_api.h" /* the driver's types, gpumem's own declarations */
#include "gpumem.h"
#include "harness.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)

typedef void (*host_fn)(void *);
static struct {
    CUresult (*init)(unsigned);
    CUresult (*device_count)(int *);
    CUresult (*device_get)(CUdevice *, int);
    CUresult (*retain)(CUcontext *, CUdevice);
    CUresult (*release)(CUdevice);
    CUresult (*push)(CUcontext);
    CUresult (*pop)(CUcontext *);
    CUresult (*stream_create)(CUstream *, unsigned);
    CUresult (*stream_destroy)(CUstream);
    CUresult (*stream_synchronize)(CUstream);
    CUresult (*launch_host_func)(CUstream, host_fn, void *);
} cu;

/* A gate the host function waits at; `ran` is set when it returns. */
struct gate {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool open;
    atomic_bool ran;
};

static void wait_at_gate(void *arg)
{
    struct gate *g = arg;
    pthread_mutex_lock(&g->lock);
    while (!g->open)
        pthread_cond_wait(&g->cond, &g->lock);
    pthread_mutex_unlock(&g->lock);
    atomic_store(&g->ran, true);
}

static void gate_init(struct gate *g)
{
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->cond, NULL);
    g->open = false;
    atomic_init(&g->ran, false);
}

static void gate_open(struct gate *g)
{
    pthread_mutex_lock(&g->lock);
    g->open = true;
    pthread_cond_broadcast(&g->cond);
    pthread_mutex_unlock(&g->lock);
}

static void *open_later(void *arg)
{
    usleep(200 * 1000);
    gate_open(arg);
    return NULL;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void skip(const char *why)
{
    printf("no usable CUDA GPU: %s: skipped (it runs on a machine with an NVIDIA GPU and "
           "its driver)\n",
           why);
    exit(77);
}

static void load_driver(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        skip(dlerror());
    static const char *const names[] = {"cuInit",
                                        "cuDeviceGetCount",
                                        "cuDeviceGet",
                                        "cuDevicePrimaryCtxRetain",
                                        "cuDevicePrimaryCtxRelease_v2",
                                        "cuCtxPushCurrent_v2",
                                        "cuCtxPopCurrent_v2",
                                        "cuStreamCreate",
                                        "cuStreamDestroy_v2",
                                        "cuStreamSynchronize",
                                        "cuLaunchHostFunc"};
    void *slots[sizeof names / sizeof names[0]];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        slots[i] = dlsym(lib, names[i]);
        if (!slots[i])
            skip(names[i]);
    }
    _Static_assert(sizeof cu == sizeof slots, "one slot per entry point");
    memcpy(&cu, slots, sizeof cu);
    int count = 0;
    if (cu.init(0) != CUDA_SUCCESS || cu.device_count(&count) != CUDA_SUCCESS ||
        count < 1)
        skip("cuInit failed or no device");
}

#define CU_OK(expr)                                                                      \
    do {                                                                                 \
        CUresult r_ = (expr);                                                            \
        if (r_ != CUDA_SUCCESS)                                                          \
            HARNESS_FAIL("%s: CUresult %d", #expr, (int)r_);                             \
    } while (0)

static gpumem_runtime *runtime(size_t limit, bool growth)
{
    gpumem_options o;
    gpumem_options_init(&o);
    o.backend = GPUMEM_BACKEND_CUDA;
    o.flags = GPUMEM_OPTIONS_IGNORE_ENVIRONMENT;
    gpumem_runtime *rt = NULL;
    ASSERT_OK(gpumem_runtime_create(&o, &rt));
    if (!rt)
        return NULL;
    gpumem_logical_device_config cfg = GPUMEM_LOGICAL_DEVICE_LIMIT(limit);
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, &cfg, 1));
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, growth));
    ASSERT_OK(gpumem_initialize(rt));
    return rt;
}

static CUstream s1, s2;

/* Holds s1's work at a new gate; the caller opens it. */
static void hold_s1(struct gate *g)
{
    gate_init(g);
    CU_OK(cu.launch_host_func(s1, wait_at_gate, g));
}

TEST(a_pool_at_its_budget_waits_for_the_held_work)
{
    gpumem_runtime *rt = runtime(64 * MiB, false); /* greedy: one region */
    if (!rt)
        return;
    void *p = NULL, *q = NULL;
    ASSERT_OK(gpumem_malloc_async(rt, 0, 64 * MiB, s1, &p));
    struct gate g;
    hold_s1(&g);
    ASSERT_OK(gpumem_free_async(rt, p, s1));
    ASSERT_OK(gpumem_malloc_async(rt, 0, 64 * MiB, s1, &q)); /* its own stream: at once */
    ASSERT_TRUE(q == p);
    ASSERT_FALSE(atomic_load(&g.ran));
    ASSERT_OK(gpumem_free_async(rt, q, s1));
    pthread_t t;
    pthread_create(&t, NULL, open_later, &g);
    double t0 = now_ms();
    ASSERT_OK(gpumem_malloc_async(rt, 0, 64 * MiB, s2, &q)); /* waits */
    double waited = now_ms() - t0;
    ASSERT_TRUE(atomic_load(&g.ran)); /* not handed out before s1's work ran */
    ASSERT_TRUE(q == p);
    ASSERT_TRUE(waited >= 150);
    pthread_join(t, NULL);
    ASSERT_OK(gpumem_free_async(rt, q, s2));
    CU_OK(cu.stream_synchronize(s1));
    CU_OK(cu.stream_synchronize(s2));
    gpumem_runtime_destroy(rt);
}

TEST(a_growing_pool_gives_another_stream_other_memory_at_once)
{
    gpumem_runtime *rt = runtime(1024 * MiB, true);
    if (!rt)
        return;
    void *p = NULL, *q = NULL;
    ASSERT_OK(gpumem_malloc_async(rt, 0, 256 * MiB, s1, &p));
    struct gate g;
    hold_s1(&g);
    ASSERT_OK(gpumem_free_async(rt, p, s1));
    ASSERT_OK(gpumem_malloc_async(rt, 0, 256 * MiB, s2, &q)); /* issue 21's case */
    ASSERT_TRUE(q != p);
    ASSERT_FALSE(atomic_load(&g.ran));
    gate_open(&g);
    CU_OK(cu.stream_synchronize(s1));
    ASSERT_OK(gpumem_free_async(rt, q, s2));
    CU_OK(cu.stream_synchronize(s2));
    uint64_t released = 0;
    ASSERT_OK(gpumem_release_unused(rt, 0, &released));
    gpumem_runtime_destroy(rt);
}

int main(void)
{
    load_driver();
    CUdevice dev = 0;
    CUcontext ctx = NULL, popped = NULL;
    CU_OK(cu.device_get(&dev, 0));
    CU_OK(cu.retain(&ctx, dev));
    CU_OK(cu.push(ctx));
    CU_OK(cu.stream_create(&s1, 1 /* CU_STREAM_NON_BLOCKING */));
    CU_OK(cu.stream_create(&s2, 1));
    RUN(a_pool_at_its_budget_waits_for_the_held_work);
    RUN(a_growing_pool_gives_another_stream_other_memory_at_once);
    CU_OK(cu.stream_destroy(s1));
    CU_OK(cu.stream_destroy(s2));
    CU_OK(cu.pop(&popped));
    CU_OK(cu.release(dev));
    HARNESS_EXIT();
}
