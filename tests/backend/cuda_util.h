/* Helpers of the CUDA backend's tests over the driver double: runtimes on the
 * CUDA backend (GPUMEM_CUDA_LIBRARY comes from meson's test environment), a
 * log that keeps what the library says, and the end-of-test check that the
 * driver holds nothing, saw no misuse and has the caller's contexts as they were. */
#ifndef GPUMEM_TEST_CUDA_UTIL_H
#define GPUMEM_TEST_CUDA_UTIL_H

#include "backend/cuda_api.h" /* CUresult values to inject */
#include "fakecuda.h"
#include "gpumem.h"
#include "harness.h"
#include "option_vars.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define KiB ((uint64_t)1024)
#define MiB (KiB * 1024)
#define GiB (MiB * 1024)

static char log_text[16384];
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

/* The log callback: any thread that calls gpumem may call it, so it appends under
 * a lock (tests read log_text when their threads have joined). */
static inline void keep_log(void *user, int level, const char *message)
{
    (void)user;
    pthread_mutex_lock(&log_lock);
    size_t n = strlen(log_text);
    snprintf(log_text + n, sizeof log_text - n, "[%d] %s\n", level, message);
    pthread_mutex_unlock(&log_lock);
}

/* A log callback that calls gpumem, as the header allows (no gpumem lock is
 * held when it runs), from another thread, and waits up to a second for the
 * call: a message delivered with the pool's lock held finds it stuck, where
 * the same call on the logging thread would hang the test. */
struct probe {
    gpumem_runtime *rt;
    pthread_mutex_t lock;
    pthread_cond_t done;
    int calls, returned, stuck;
};

static inline void *probe_call(void *arg)
{
    struct probe *p = arg;
    gpumem_memory_info mi = GPUMEM_STRUCT_INIT(gpumem_memory_info);
    (void)gpumem_get_memory_info(p->rt, 0, &mi);
    pthread_mutex_lock(&p->lock);
    p->returned++;
    pthread_cond_signal(&p->done);
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

static inline void probing_log(void *user, int level, const char *message)
{
    struct probe *p = user;
    keep_log(NULL, level, message);
    pthread_t t;
    if (!p->rt || pthread_create(&t, NULL, probe_call, p) != 0)
        return;
    pthread_detach(t);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 1;
    pthread_mutex_lock(&p->lock);
    int want = ++p->calls;
    while (p->returned < want)
        if (pthread_cond_timedwait(&p->done, &p->lock, &until) != 0) {
            p->stuck++;
            break;
        }
    pthread_mutex_unlock(&p->lock);
}

/* A runtime on the CUDA backend whose log goes to the probe (p->rt is set
 * when the test wants the probes made). */
static inline gpumem_runtime *probed_runtime(struct probe *p)
{
    gpumem_options o;
    gpumem_options_init(&o);
    o.backend = GPUMEM_BACKEND_CUDA;
    o.log = probing_log;
    o.log_user_data = p;
    o.log_level = GPUMEM_LOG_DEBUG;
    gpumem_runtime *rt = NULL;
    ASSERT_OK(gpumem_runtime_create(&o, &rt));
    return rt;
}

/* A call whose context pop failed after the call itself had failed: the pop
 * went to the log, and the context it left on the thread's stack is taken off. */
static inline void failed_pop_logged(void)
{
    ASSERT_CONTAINS(log_text, "cuCtxPopCurrent_v2");
    ASSERT_EQ(fakecuda_context_depth(), 1); /* the pop that failed */
    fakecuda_pop_context();
}

/* No more probes; the calls of those made return (the runtime may go then):
 * `calls` were made, and none found a lock held. */
static inline void probes_end(struct probe *p, int calls)
{
    p->rt = NULL;
    pthread_mutex_lock(&p->lock);
    while (p->returned < p->calls)
        pthread_cond_wait(&p->done, &p->lock);
    pthread_mutex_unlock(&p->lock);
    ASSERT_EQ(p->calls, calls);
    ASSERT_EQ(p->stuck, 0);
}

/* Unsets every variable of gpumem's table but the driver path, and the
 * driver's own CUDA_VISIBLE_DEVICES, so that the caller's shell cannot change
 * what a test sees. */
static inline void clean_env(void)
{
    static const struct {
        const char *name, *alias;
        enum gpumem_option_reader reader;
    } vars[] = {
#define CUDA_UTIL_ENV_VAR(name, alias, reader, ...) {name, alias, reader},
        GPUMEM_OPTION_VARS(CUDA_UTIL_ENV_VAR)
#undef CUDA_UTIL_ENV_VAR
    };
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        if (vars[i].reader == GPUMEM_READ_BY_PYTHON ||
            strcmp(vars[i].name, "GPUMEM_CUDA_LIBRARY") == 0)
            continue;
        unsetenv(vars[i].name);
        if (vars[i].alias)
            unsetenv(vars[i].alias);
    }
    /* The double's GPUs have the same UUIDs in every process, so the tests that
     * run at once would share one ledger in /dev/shm and admit against each
     * other; the ledger's tests over the double set their own folder and turn
     * it on (tests/api/test_ledger_runtime.c). */
    setenv("GPUMEM_LEDGER", "off", 1);
}

/* A fresh driver with `devices` (FAKECUDA_DEVICES syntax) and an empty log. */
static inline void fresh_driver(const char *devices)
{
    clean_env();
    fakecuda_reset();
    if (fakecuda_set_devices(devices) != 0)
        HARNESS_FAIL("fakecuda_set_devices(\"%s\") refused", devices);
    log_text[0] = '\0';
}

/* Creates a runtime on backend `kind`; NULL (and *status) when creation failed. */
static inline gpumem_runtime *runtime_on(int kind, gpumem_status *status)
{
    gpumem_options o;
    gpumem_options_init(&o);
    o.backend = kind;
    o.sim_devices = "gpumem simulated GPU:4GiB";
    o.log = keep_log;
    o.log_level = GPUMEM_LOG_DEBUG;
    gpumem_runtime *rt = NULL;
    gpumem_status s = gpumem_runtime_create(&o, &rt);
    if (status)
        *status = s;
    return s == GPUMEM_OK ? rt : NULL;
}

static inline gpumem_runtime *cuda_runtime(void)
{
    gpumem_status s;
    gpumem_runtime *rt = runtime_on(GPUMEM_BACKEND_CUDA, &s);
    if (!rt)
        HARNESS_FAIL("a runtime on the driver double: %s (%s)", gpumem_status_name(s),
                     gpumem_last_error());
    return rt;
}

/* A CUDA runtime whose logical device 0 has `limit` bytes, greedy (one region of
 * the whole budget: a request that finds no fit must wait or grow nothing) or
 * growing. */
static inline gpumem_runtime *limited(uint64_t limit, bool growth)
{
    gpumem_runtime *rt = cuda_runtime();
    if (!rt)
        return NULL;
    gpumem_logical_device_config cfg = GPUMEM_LOGICAL_DEVICE_LIMIT(limit);
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, &cfg, 1));
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, growth));
    ASSERT_OK(gpumem_initialize(rt));
    return rt;
}

/* Lets held streams' work complete (fakecuda_hold_stream), from another thread:
 * streams[i] after ms[i] milliseconds from the start, in order (ms rising). */
struct releaser {
    pthread_t thread;
    void *streams[3];
    unsigned ms[3];
    size_t n;
};

static inline void *release_later(void *arg)
{
    struct releaser *r = arg;
    unsigned slept = 0;
    for (size_t i = 0; i < r->n; i++) {
        usleep((r->ms[i] - slept) * 1000u);
        slept = r->ms[i];
        fakecuda_release_stream(r->streams[i]);
    }
    return NULL;
}

/* Starts r's thread; the caller joins r->thread. */
static inline void start_releaser(struct releaser *r)
{
    if (pthread_create(&r->thread, NULL, release_later, r) != 0)
        HARNESS_FAIL("pthread_create failed");
}

/* One stream's work, after `ms` milliseconds. */
static inline void release_after(struct releaser *r, void *stream, unsigned ms)
{
    *r = (struct releaser){.streams = {stream}, .ms = {ms}, .n = 1};
    start_releaser(r);
}

/* Milliseconds on the monotonic clock. */
static inline double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static inline gpumem_memory_info info_of(gpumem_runtime *rt, int logical)
{
    gpumem_memory_info mi;
    memset(&mi, 0, sizeof mi);
    mi.struct_size = sizeof mi;
    ASSERT_OK(gpumem_get_memory_info(rt, logical, &mi));
    return mi;
}

/* After the runtime is gone: the driver holds nothing of ours, saw no misuse, and
 * the thread's context stack is `depth` deep, as the test left it. */
static inline void check_driver_clean(int depth)
{
    struct fakecuda_live live;
    fakecuda_live(&live);
    ASSERT_EQ(live.allocations, 0);
    ASSERT_EQ(live.handles, 0);
    ASSERT_EQ(live.mappings, 0);
    ASSERT_EQ(live.reservations, 0);
    ASSERT_EQ(live.context_refs, 0);
    ASSERT_EQ(live.events, 0);
    if (fakecuda_misuses() != 0)
        HARNESS_FAIL("the driver saw %lu misuse(s), the last: %s", fakecuda_misuses(),
                     fakecuda_last_misuse());
    ASSERT_EQ(fakecuda_context_depth(), depth);
}

#endif /* GPUMEM_TEST_CUDA_UTIL_H */
