/* Public-API thread tests: concurrent malloc/free on one runtime and several
 * logical devices with data verification; concurrent implicit initialization;
 * configuration racing initialization; the default runtime created from many
 * threads; per-thread last error. Written from DESIGN.md and include/gpumem.h only. */
#include "gpumem.h"
#include "harness.h"
#include "api_util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Checks from several threads: failures are counted atomically here and reported
 * by the main thread (the harness counter is not thread-safe). */
static pthread_mutex_t report_lock = PTHREAD_MUTEX_INITIALIZER;
#define THREAD_FAIL(...)                                                                 \
    do {                                                                                 \
        pthread_mutex_lock(&report_lock);                                                \
        HARNESS_FAIL(__VA_ARGS__);                                                       \
        pthread_mutex_unlock(&report_lock);                                              \
    } while (0)

/* xorshift64*: deterministic per thread. */
static uint64_t rnd(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

/* ------------------------------------------------------------ stress -- */

#define STRESS_THREADS 8
#define STRESS_ITERS   6000
#define STRESS_LIVE    48
#define STRESS_LOGICAL 4
#define EXCHANGE_SLOTS 32

struct buf {
    unsigned char *p;
    size_t size;
    unsigned char tag;
    int logical;
};

struct stress {
    gpumem_runtime *rt;
    pthread_barrier_t start;
    pthread_mutex_t xlock;
    struct buf exchange[EXCHANGE_SLOTS]; /* buffers handed to other threads */
    /* per thread, per logical device: successful mallocs and frees */
    uint64_t allocs[STRESS_THREADS][STRESS_LOGICAL];
    uint64_t frees[STRESS_THREADS][STRESS_LOGICAL];
};

struct stress_arg {
    struct stress *s;
    int id;
};

static void fill(struct buf *b) { memset(b->p, b->tag, b->size); }

static bool intact(const struct buf *b)
{
    for (size_t i = 0; i < b->size; i++)
        if (b->p[i] != b->tag)
            return false;
    return true;
}

static void verify_and_free(struct stress *s, int id, struct buf *b)
{
    if (!intact(b))
        THREAD_FAIL("thread %d: buffer %p (%zu bytes, logical %d) was overwritten", id,
                    (void *)b->p, b->size, b->logical);
    gpumem_status st = gpumem_free(s->rt, b->p);
    if (st != GPUMEM_OK)
        THREAD_FAIL("thread %d: free(%p): %s (%s)", id, (void *)b->p,
                    gpumem_status_name(st), gpumem_last_error());
    else
        s->frees[id][b->logical]++;
    b->p = NULL;
}

static void *stress_thread(void *arg)
{
    struct stress_arg *a = arg;
    struct stress *s = a->s;
    const int id = a->id;
    uint64_t seed = 0x9E3779B97F4A7C15ull * (uint64_t)(id + 1);
    struct buf live[STRESS_LIVE];
    memset(live, 0, sizeof live);
    pthread_barrier_wait(&s->start);

    for (int it = 0; it < STRESS_ITERS; it++) {
        uint64_t r = rnd(&seed);
        int slot = (int)(r % STRESS_LIVE);
        struct buf *b = &live[slot];
        if (b->p) {
            if ((r >> 20) % 8 == 0) {
                /* Hand it to another thread through the exchange. */
                int x = (int)((r >> 24) % EXCHANGE_SLOTS);
                struct buf taken = {0};
                pthread_mutex_lock(&s->xlock);
                taken = s->exchange[x];
                s->exchange[x] = *b;
                pthread_mutex_unlock(&s->xlock);
                b->p = NULL;
                if (taken.p)
                    verify_and_free(s, id, &taken);
            } else {
                verify_and_free(s, id, b);
            }
            continue;
        }
        size_t size;
        uint64_t kind = (r >> 8) % 16;
        if (kind < 10)
            size = 1 + (size_t)((r >> 32) % 512);
        else if (kind < 15)
            size = 1 + (size_t)((r >> 32) % (16 * 1024));
        else
            size = 1 + (size_t)((r >> 32) % (256 * 1024));
        b->logical = (int)((r >> 40) % STRESS_LOGICAL);
        b->size = size;
        b->tag = (unsigned char)(r >> 48);
        void *p = NULL;
        gpumem_status st = gpumem_malloc(s->rt, b->logical, size, &p);
        if (st != GPUMEM_OK || p == NULL) {
            THREAD_FAIL("thread %d: malloc(%d, %zu): %s (%s)", id, b->logical, size,
                        gpumem_status_name(st), gpumem_last_error());
            continue;
        }
        if ((uintptr_t)p % 256 != 0)
            THREAD_FAIL("thread %d: malloc returned %p, not 256-aligned", id, p);
        s->allocs[id][b->logical]++;
        b->p = p;
        fill(b);
    }
    for (int i = 0; i < STRESS_LIVE; i++)
        if (live[i].p)
            verify_and_free(s, id, &live[i]);
    return NULL;
}

TEST(concurrent_malloc_free)
{
    static struct stress s;
    memset(&s, 0, sizeof s);
    /* GPU 0: three logical devices with limits, greedy; GPU 1: one logical device
     * with growth and a limit. */
    s.rt = sim_runtime("THR-STRESS-A:4GiB,THR-STRESS-B:4GiB");
    if (!s.rt)
        return;
    gpumem_logical_device_config c0[3] = {GPUMEM_LOGICAL_DEVICE_LIMIT(128 * MiB),
                                          GPUMEM_LOGICAL_DEVICE_LIMIT(128 * MiB),
                                          GPUMEM_LOGICAL_DEVICE_LIMIT(128 * MiB)};
    gpumem_logical_device_config c1[1] = {GPUMEM_LOGICAL_DEVICE_LIMIT(256 * MiB)};
    ASSERT_OK(gpumem_set_logical_device_configuration(s.rt, 0, c0, 3));
    ASSERT_OK(gpumem_set_logical_device_configuration(s.rt, 1, c1, 1));
    ASSERT_OK(gpumem_set_memory_growth(s.rt, 1, true));
    size_t count = 0;
    ASSERT_OK(gpumem_list_logical_devices(s.rt, NULL, 0, &count));
    ASSERT_EQ(count, STRESS_LOGICAL);
    uint64_t lfb_before[3];
    for (int l = 0; l < 3; l++) {
        lfb_before[l] = info_of(s.rt, l).largest_free_block;
        ASSERT_TRUE(lfb_before[l] > 0);
    }

    pthread_barrier_init(&s.start, NULL, STRESS_THREADS);
    pthread_mutex_init(&s.xlock, NULL);
    pthread_t t[STRESS_THREADS];
    struct stress_arg args[STRESS_THREADS];
    for (int i = 0; i < STRESS_THREADS; i++) {
        args[i].s = &s;
        args[i].id = i;
        pthread_create(&t[i], NULL, stress_thread, &args[i]);
    }
    for (int i = 0; i < STRESS_THREADS; i++)
        pthread_join(t[i], NULL);
    /* Leftovers in the exchange: freed by the main thread. */
    for (int x = 0; x < EXCHANGE_SLOTS; x++)
        if (s.exchange[x].p)
            verify_and_free(&s, 0, &s.exchange[x]);

    for (int l = 0; l < STRESS_LOGICAL; l++) {
        uint64_t allocs = 0, frees = 0;
        for (int i = 0; i < STRESS_THREADS; i++) {
            allocs += s.allocs[i][l];
            frees += s.frees[i][l];
        }
        gpumem_memory_info mi = info_of(s.rt, l);
        ASSERT_EQ(allocs, frees);
        ASSERT_EQ(mi.num_allocs, allocs);
        ASSERT_EQ(mi.num_frees, frees);
        ASSERT_EQ(mi.current_bytes, 0);
        ASSERT_EQ(mi.num_ooms, 0);
        ASSERT_TRUE(mi.num_allocs > 1000);
        ASSERT_TRUE(mi.peak_bytes > 0);
        ASSERT_LE(mi.peak_bytes, mi.limit_bytes);
        ASSERT_LE(mi.reserved_bytes, mi.limit_bytes);
        ASSERT_LE(mi.peak_reserved_bytes, mi.limit_bytes);
    }
    /* Everything coalesced back: the greedy pools are as whole as at the start. */
    for (int l = 0; l < 3; l++) {
        ASSERT_EQ(info_of(s.rt, l).largest_free_block, lfb_before[l]);
        void *p = NULL;
        ASSERT_OK(gpumem_malloc(s.rt, l, (size_t)lfb_before[l], &p));
        ASSERT_OK(gpumem_free(s.rt, p));
    }
    pthread_barrier_destroy(&s.start);
    pthread_mutex_destroy(&s.xlock);
    gpumem_runtime_destroy(s.rt);
}

/* ----------------------------------------- frees racing region changes -- */

/* gpumem_free finds a pointer's pool without a lock while other threads' pools
 * take regions (growth) and give them back (release_unused): every free of a
 * live pointer must find its pool, and every pointer must read back what its
 * thread wrote. Each thread has its own growing logical device; one more thread
 * releases unused memory of all of them in a loop. */
#define CHURN_THREADS 4
#define CHURN_ITERS   10000
#define CHURN_LIVE    16

struct churn {
    gpumem_runtime *rt;
    atomic_int stop;
    atomic_int failures;
    char first_failure[256];
    pthread_mutex_t lock;
};

struct churn_arg {
    struct churn *c;
    int logical;
};

static void churn_fail(struct churn *c, const char *what, gpumem_status s)
{
    pthread_mutex_lock(&c->lock);
    if (atomic_fetch_add(&c->failures, 1) == 0)
        snprintf(c->first_failure, sizeof c->first_failure, "%s: %s (%s)", what,
                 gpumem_status_name(s), gpumem_last_error());
    pthread_mutex_unlock(&c->lock);
}

static void *churn_thread(void *p)
{
    struct churn_arg *a = p;
    uint64_t seed = 0x9E3779B97F4A7C15ull * (uint64_t)(a->logical + 1);
    unsigned char *live[CHURN_LIVE] = {0};
    size_t sizes[CHURN_LIVE] = {0};
    for (int it = 0; it < CHURN_ITERS; it++) {
        int slot = (int)(rnd(&seed) % CHURN_LIVE);
        if (live[slot]) {
            if (live[slot][0] != (unsigned char)a->logical ||
                live[slot][sizes[slot] - 1] != (unsigned char)slot)
                churn_fail(a->c, "a pointer reads back another value", GPUMEM_OK);
            gpumem_status s = gpumem_free(a->c->rt, live[slot]);
            if (s != GPUMEM_OK)
                churn_fail(a->c, "gpumem_free of a live pointer", s);
            live[slot] = NULL;
            continue;
        }
        /* 256 B to 3 MiB: new 2 MiB and 20 MiB regions keep coming and going */
        size_t size = (size_t)256 << (rnd(&seed) % 14);
        void *q = NULL;
        gpumem_status s = gpumem_malloc(a->c->rt, a->logical, size, &q);
        if (s != GPUMEM_OK) {
            churn_fail(a->c, "gpumem_malloc", s);
            continue;
        }
        live[slot] = q;
        sizes[slot] = size;
        live[slot][0] = (unsigned char)a->logical;
        live[slot][size - 1] = (unsigned char)slot;
    }
    for (int slot = 0; slot < CHURN_LIVE; slot++)
        if (live[slot] && gpumem_free(a->c->rt, live[slot]) != GPUMEM_OK)
            churn_fail(a->c, "gpumem_free at the end", GPUMEM_OK);
    return NULL;
}

static void *release_thread(void *p)
{
    struct churn *c = p;
    while (!atomic_load(&c->stop)) {
        uint64_t released = 0;
        gpumem_status s = gpumem_release_unused(c->rt, -1, &released);
        if (s != GPUMEM_OK)
            churn_fail(c, "gpumem_release_unused", s);
    }
    return NULL;
}

TEST(frees_race_growth_and_release)
{
    struct churn c = {.rt = sim_runtime("CHURN:16GiB")};
    if (!c.rt)
        return;
    atomic_init(&c.stop, 0);
    atomic_init(&c.failures, 0);
    pthread_mutex_init(&c.lock, NULL);
    gpumem_logical_device_config cfg[CHURN_THREADS];
    for (int i = 0; i < CHURN_THREADS; i++)
        cfg[i] = (gpumem_logical_device_config)GPUMEM_LOGICAL_DEVICE_LIMIT(1 * GiB);
    ASSERT_OK(gpumem_set_memory_growth(c.rt, 0, true));
    ASSERT_OK(gpumem_set_logical_device_configuration(c.rt, 0, cfg, CHURN_THREADS));
    ASSERT_OK(gpumem_initialize(c.rt));

    pthread_t t[CHURN_THREADS], releaser;
    struct churn_arg args[CHURN_THREADS];
    pthread_create(&releaser, NULL, release_thread, &c);
    for (int i = 0; i < CHURN_THREADS; i++) {
        args[i] = (struct churn_arg){.c = &c, .logical = i};
        pthread_create(&t[i], NULL, churn_thread, &args[i]);
    }
    for (int i = 0; i < CHURN_THREADS; i++)
        pthread_join(t[i], NULL);
    atomic_store(&c.stop, 1);
    pthread_join(releaser, NULL);

    if (atomic_load(&c.failures) != 0)
        HARNESS_FAIL("%d failures; the first: %s", atomic_load(&c.failures),
                     c.first_failure);
    for (int l = 0; l < CHURN_THREADS; l++) {
        gpumem_memory_info mi = info_of(c.rt, l);
        ASSERT_EQ(mi.current_bytes, 0);
        ASSERT_EQ(mi.num_allocs, mi.num_frees);
        ASSERT_TRUE(mi.num_allocs > CHURN_ITERS / 4);
    }
    uint64_t released = 0;
    ASSERT_OK(gpumem_release_unused(c.rt, -1, &released));
    for (int l = 0; l < CHURN_THREADS; l++)
        ASSERT_EQ(info_of(c.rt, l).reserved_bytes, 0);
    pthread_mutex_destroy(&c.lock);
    gpumem_runtime_destroy(c.rt);
}

/* ------------------------------------------ concurrent initialization -- */

#define INIT_THREADS 16
#define INIT_ROUNDS  12

struct init_race {
    gpumem_runtime *rt;
    pthread_barrier_t start;
    gpumem_status status[INIT_THREADS];
    void *ptr[INIT_THREADS];
};

struct init_arg {
    struct init_race *r;
    int id;
};

static void *init_thread(void *arg)
{
    struct init_arg *a = arg;
    struct init_race *r = a->r;
    pthread_barrier_wait(&r->start);
    switch (a->id % 4) {
    case 0:
        r->status[a->id] = gpumem_malloc(r->rt, 0, 4096, &r->ptr[a->id]);
        break;
    case 1: {
        gpumem_memory_info mi = GPUMEM_STRUCT_INIT(gpumem_memory_info);
        r->status[a->id] = gpumem_get_memory_info(r->rt, 0, &mi);
        break;
    }
    case 2: {
        size_t n;
        r->status[a->id] = gpumem_list_logical_devices(r->rt, NULL, 0, &n);
        break;
    }
    default:
        r->status[a->id] = gpumem_initialize(r->rt);
        break;
    }
    return NULL;
}

TEST(concurrent_implicit_initialization)
{
    for (int round = 0; round < INIT_ROUNDS; round++) {
        char devices[64];
        snprintf(devices, sizeof devices, "THR-INIT-%d:8GiB:7.0", round);
        struct init_race r;
        memset(&r, 0, sizeof r);
        r.rt = sim_runtime(devices);
        if (!r.rt)
            return;
        pthread_barrier_init(&r.start, NULL, INIT_THREADS);
        pthread_t t[INIT_THREADS];
        struct init_arg args[INIT_THREADS];
        for (int i = 0; i < INIT_THREADS; i++) {
            args[i].r = &r;
            args[i].id = i;
            pthread_create(&t[i], NULL, init_thread, &args[i]);
        }
        for (int i = 0; i < INIT_THREADS; i++)
            pthread_join(t[i], NULL);
        pthread_barrier_destroy(&r.start);

        int mallocs = 0;
        for (int i = 0; i < INIT_THREADS; i++) {
            if (r.status[i] != GPUMEM_OK)
                HARNESS_FAIL("round %d thread %d: %s", round, i,
                             gpumem_status_name(r.status[i]));
            if (i % 4 == 0) {
                mallocs++;
                for (int j = 0; j < i; j += 4)
                    if (r.ptr[i] && r.ptr[i] == r.ptr[j])
                        HARNESS_FAIL("round %d: threads %d and %d got the same pointer",
                                     round, i, j);
            }
        }
        bool init = false;
        ASSERT_OK(gpumem_is_initialized(r.rt, &init));
        ASSERT_TRUE(init);
        gpumem_memory_info mi = info_of(r.rt, 0);
        /* One pool, built once: the budget reserved once (8 GiB free, CC 7.0:
         * headroom 1050 MiB). */
        ASSERT_EQ(mi.limit_bytes, 8 * GiB - 1050 * MiB);
        ASSERT_EQ(mi.reserved_bytes, 8 * GiB - 1050 * MiB);
        ASSERT_EQ(mi.num_allocs, (uint64_t)mallocs);
        ASSERT_EQ(mi.current_bytes, (uint64_t)mallocs * 4096);
        /* The hardware saw one reservation: a second runtime finds 1050 MiB free
         * (less than 2 GiB: headroom 225 MiB). */
        gpumem_runtime *rt2 = sim_runtime(devices);
        if (rt2) {
            gpumem_memory_info m2 = info_of(rt2, 0);
            ASSERT_EQ(m2.limit_bytes, 1050 * MiB - 225 * MiB);
            gpumem_runtime_destroy(rt2);
        }
        /* The message names one initializer. */
        ASSERT_STATUS(gpumem_set_memory_growth(r.rt, 0, true),
                      GPUMEM_ERR_ALREADY_INITIALIZED);
        const char *msg = gpumem_last_error();
        ASSERT_CONTAINS(msg, "already initialized");
        for (int i = 0; i < INIT_THREADS; i += 4)
            ASSERT_OK(gpumem_free(r.rt, r.ptr[i]));
        gpumem_runtime_destroy(r.rt);
    }
}

/* ------------------------------------- configuration racing initialize -- */

struct config_race {
    gpumem_runtime *rt;
    pthread_barrier_t start;
    gpumem_status config_status, init_status;
};

static void *race_config(void *arg)
{
    struct config_race *r = arg;
    pthread_barrier_wait(&r->start);
    r->config_status = gpumem_set_memory_growth(r->rt, 0, true);
    return NULL;
}

static void *race_init(void *arg)
{
    struct config_race *r = arg;
    pthread_barrier_wait(&r->start);
    r->init_status = gpumem_initialize(r->rt);
    return NULL;
}

/* Either the configuration came first (accepted and applied) or initialization
 * did (refused, nothing changed); never accepted-but-ignored. */
TEST(configuration_races_initialization)
{
    int before = 0, after = 0;
    for (int round = 0; round < 40; round++) {
        char devices[64];
        snprintf(devices, sizeof devices, "THR-CFGRACE-%d:2GiB", round);
        struct config_race r;
        memset(&r, 0, sizeof r);
        r.rt = sim_runtime(devices);
        if (!r.rt)
            return;
        pthread_barrier_init(&r.start, NULL, 2);
        pthread_t a, b;
        pthread_create(&a, NULL, race_config, &r);
        pthread_create(&b, NULL, race_init, &r);
        pthread_join(a, NULL);
        pthread_join(b, NULL);
        pthread_barrier_destroy(&r.start);
        ASSERT_OK(r.init_status);
        bool g = false;
        ASSERT_OK(gpumem_get_memory_growth(r.rt, 0, &g));
        gpumem_logical_device l = GPUMEM_STRUCT_INIT(gpumem_logical_device);
        size_t n = 0;
        ASSERT_OK(gpumem_list_logical_devices(r.rt, &l, 1, &n));
        gpumem_memory_info mi = info_of(r.rt, 0);
        if (r.config_status == GPUMEM_OK) {
            before++;
            ASSERT_TRUE(g);
            ASSERT_TRUE(l.memory_growth);
            ASSERT_EQ(mi.reserved_bytes, 0);
        } else if (r.config_status == GPUMEM_ERR_ALREADY_INITIALIZED) {
            after++;
            ASSERT_FALSE(g);
            ASSERT_FALSE(l.memory_growth);
            ASSERT_EQ(mi.reserved_bytes, mi.limit_bytes);
        } else {
            HARNESS_FAIL("round %d: set_memory_growth: %s", round,
                         gpumem_status_name(r.config_status));
        }
        gpumem_runtime_destroy(r.rt);
    }
    printf("# configuration first %d times, initialization first %d times\n", before,
           after);
}

/* ----------------------------------------- the default runtime, raced -- */

#define DEFAULT_THREADS 8

struct default_race {
    pthread_barrier_t start;
    gpumem_status status[DEFAULT_THREADS];
    void *ptr[DEFAULT_THREADS];
};

struct default_arg {
    struct default_race *r;
    int id;
};

static void *default_thread(void *arg)
{
    struct default_arg *a = arg;
    pthread_barrier_wait(&a->r->start);
    a->r->status[a->id] = gpumem_malloc(NULL, 0, 1000, &a->r->ptr[a->id]);
    return NULL;
}

TEST(default_runtime_from_many_threads)
{
    setenv("GPUMEM_BACKEND", "sim", 1);
    setenv("GPUMEM_SIM_DEVICES", "THR-DEFAULT:2GiB", 1);
    setenv("GPUMEM_FORCE_ALLOW_GROWTH", "true", 1);
    static struct default_race r;
    pthread_barrier_init(&r.start, NULL, DEFAULT_THREADS);
    pthread_t t[DEFAULT_THREADS];
    struct default_arg args[DEFAULT_THREADS];
    for (int i = 0; i < DEFAULT_THREADS; i++) {
        args[i].r = &r;
        args[i].id = i;
        pthread_create(&t[i], NULL, default_thread, &args[i]);
    }
    for (int i = 0; i < DEFAULT_THREADS; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&r.start);
    for (int i = 0; i < DEFAULT_THREADS; i++) {
        ASSERT_OK(r.status[i]);
        for (int j = 0; j < i; j++)
            if (r.ptr[i] && r.ptr[i] == r.ptr[j])
                HARNESS_FAIL("threads %d and %d got the same pointer", i, j);
    }
    /* One default runtime: it counts all eight allocations. */
    gpumem_memory_info mi = GPUMEM_STRUCT_INIT(gpumem_memory_info);
    ASSERT_OK(gpumem_get_memory_info(NULL, 0, &mi));
    ASSERT_EQ(mi.num_allocs, DEFAULT_THREADS);
    ASSERT_EQ(mi.current_bytes, DEFAULT_THREADS * 1024);
    for (int i = 0; i < DEFAULT_THREADS; i++)
        ASSERT_OK(gpumem_free(NULL, r.ptr[i]));
    ASSERT_OK(gpumem_get_memory_info(NULL, 0, &mi));
    ASSERT_EQ(mi.current_bytes, 0);
    ASSERT_EQ(mi.num_frees, DEFAULT_THREADS);
}

/* ------------------------------------------------- last error per thread -- */

struct lasterr {
    gpumem_runtime *rt;
    pthread_barrier_t step;
    char initial[2][256];
    char mine[2][1024];
    char later[2][1024];
    gpumem_status status[2];
};

struct lasterr_arg {
    struct lasterr *e;
    int id;
};

static void *lasterr_thread(void *arg)
{
    struct lasterr *e = ((struct lasterr_arg *)arg)->e;
    const int id = ((struct lasterr_arg *)arg)->id;
    snprintf(e->initial[id], sizeof e->initial[id], "%s", gpumem_last_error());
    pthread_barrier_wait(&e->step);
    if (id == 0) {
        e->status[0] = gpumem_malloc(e->rt, 0, 256, NULL); /* ptr NULL */
    }
    pthread_barrier_wait(&e->step);
    if (id == 1) {
        void *p;
        e->status[1] = gpumem_malloc(e->rt, 7, 256, &p); /* no such device */
    }
    pthread_barrier_wait(&e->step);
    snprintf(e->mine[id], sizeof e->mine[id], "%s", gpumem_last_error());
    /* A success does not clear it. */
    bool init;
    if (gpumem_is_initialized(e->rt, &init) != GPUMEM_OK)
        THREAD_FAIL("is_initialized failed");
    snprintf(e->later[id], sizeof e->later[id], "%s", gpumem_last_error());
    return NULL;
}

TEST(last_error_is_per_thread)
{
    static struct lasterr e;
    memset(&e, 0, sizeof e);
    e.rt = sim_runtime("THR-LASTERR:1GiB");
    if (!e.rt)
        return;
    /* The main thread's own failure. */
    ASSERT_STATUS(gpumem_set_memory_fraction(e.rt, 0, 5.0), GPUMEM_ERR_INVALID_ARGUMENT);
    char main_msg[1024];
    snprintf(main_msg, sizeof main_msg, "%s", gpumem_last_error());
    ASSERT_TRUE(main_msg[0] != '\0');

    pthread_barrier_init(&e.step, NULL, 2);
    struct lasterr_arg args[2] = {{&e, 0}, {&e, 1}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, lasterr_thread, &args[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&e.step);

    ASSERT_STATUS(e.status[0], GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(e.status[1], GPUMEM_ERR_NO_SUCH_DEVICE);
    for (int i = 0; i < 2; i++) {
        ASSERT_STREQ(e.initial[i], ""); /* a new thread has no error */
        ASSERT_TRUE(e.mine[i][0] != '\0');
        ASSERT_STREQ(e.later[i], e.mine[i]);
    }
    if (strcmp(e.mine[0], e.mine[1]) == 0)
        HARNESS_FAIL("both threads see the same message: \"%s\"", e.mine[0]);
    if (strcmp(e.mine[0], main_msg) == 0 || strcmp(e.mine[1], main_msg) == 0)
        HARNESS_FAIL("a thread sees the main thread's message: \"%s\"", main_msg);
    /* The main thread's message is its own still. */
    ASSERT_STREQ(gpumem_last_error(), main_msg);
    gpumem_runtime_destroy(e.rt);
}

int main(void)
{
    unsetenv("GPUMEM_BACKEND");
    unsetenv("GPUMEM_SIM_DEVICES");
    unsetenv("GPUMEM_FORCE_ALLOW_GROWTH");
    unsetenv("TF_FORCE_GPU_ALLOW_GROWTH");
    unsetenv("GPUMEM_MEMORY_FRACTION");
    unsetenv("GPUMEM_MIN_SYSTEM_MEMORY_MB");
    unsetenv("TF_DEVICE_MIN_SYS_MEMORY_IN_MB");
    RUN(last_error_is_per_thread);
    RUN(concurrent_malloc_free);
    RUN(frees_race_growth_and_release);
    RUN(concurrent_implicit_initialization);
    RUN(configuration_races_initialization);
    RUN(default_runtime_from_many_threads);
    HARNESS_EXIT();
}
