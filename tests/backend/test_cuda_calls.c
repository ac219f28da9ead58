/* The driver's price, counted, on the CUDA backend over the driver double: every
 * call the backend makes once the driver is open is in gpumem_list_driver_calls
 * (the double's own count of each entry point agrees, failed calls and the
 * clean-up after them included), with the time spent inside it; counters are per
 * GPU and survive threads racing on them; and a simulated GPU, which counts the
 * calls the CUDA backend makes for each of its operations, counts the same as
 * the double for one workload of plain gpumem_malloc/gpumem_free (growth, the
 * trim's unmaps, releases, a greedy pool; events aside: a simulated GPU's streams
 * are synchronous). The double's price list: what it charges for a workload is
 * the price of what gpumem counted (the bench's model of a GPU's time rests on
 * that), overrides from FAKECUDA_PRICES and fakecuda_set_price, and FAKECUDA_SPIN
 * spending the price inside the call, where gpumem's timing sees it. */
#include "cuda_util.h"
#include "driver_prices.h"

#include <pthread.h>

#define MAX_KINDS 64

struct calls {
    size_t n;
    gpumem_driver_call e[MAX_KINDS];
};

static struct calls read_calls(gpumem_runtime *rt, int physical)
{
    struct calls c;
    memset(&c, 0, sizeof c);
    c.e[0].struct_size = sizeof c.e[0];
    ASSERT_OK(gpumem_list_driver_calls(rt, physical, c.e, MAX_KINDS, &c.n));
    ASSERT_LE(c.n, MAX_KINDS);
    return c;
}

static const gpumem_driver_call *find(const struct calls *c, const char *name)
{
    for (size_t i = 0; i < c->n; i++)
        if (strcmp(c->e[i].name, name) == 0)
            return &c->e[i];
    HARNESS_FAIL("no entry \"%s\"", name);
    static const gpumem_driver_call none;
    return &none;
}

static bool is_event_call(const char *name)
{
    return strncmp(name, "cuEvent", 7) == 0 || strcmp(name, "cuStreamWaitEvent") == 0;
}

/* Every entry point gpumem lists was called as often as the double counted it
 * since its reset (the calls that open the driver are not in gpumem's list). */
static void expect_double_agrees(const struct calls *c)
{
    for (size_t i = 0; i < c->n; i++) {
        unsigned long seen = fakecuda_calls(c->e[i].name);
        if (c->e[i].calls != seen)
            HARNESS_FAIL("%s: gpumem counted %llu calls, the driver %lu", c->e[i].name,
                         (unsigned long long)c->e[i].calls, seen);
    }
}

static gpumem_runtime *runtime_with(int backend, const char *devices)
{
    gpumem_options o;
    gpumem_options_init(&o);
    o.backend = backend;
    o.sim_devices = devices;
    o.log = keep_log;
    o.log_level = GPUMEM_LOG_WARNING;
    gpumem_runtime *rt = NULL;
    gpumem_status s = gpumem_runtime_create(&o, &rt);
    if (s != GPUMEM_OK)
        HARNESS_FAIL("a runtime on backend %d: %s (%s)", backend, gpumem_status_name(s),
                     gpumem_last_error());
    return s == GPUMEM_OK ? rt : NULL;
}

/* --------------------------------------------------------------- workload -- */

#define LIVE 48

/* The same plain gpumem_malloc/gpumem_free on any backend: logical device 0 (GPU
 * 0, growing, 512 MiB) maps granules, gives some back through the trim and the
 * releases, and maps again; logical device 1 (GPU 1, greedy, 64 MiB) takes its
 * region, gives it back at a release and takes it again. Sizes from a fixed
 * seed: the same requests in the same order on every backend. */
static void workload(gpumem_runtime *rt)
{
    gpumem_logical_device_config l0 = GPUMEM_LOGICAL_DEVICE_LIMIT(512 * MiB);
    gpumem_logical_device_config l1 = GPUMEM_LOGICAL_DEVICE_LIMIT(64 * MiB);
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, &l0, 1));
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 1, &l1, 1));
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    ASSERT_OK(gpumem_set_memory_growth(rt, 1, false));
    void *live[LIVE] = {NULL};
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int op = 0; op < 2000; op++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        size_t slot = (size_t)(x >> 33) % LIVE;
        if (live[slot]) {
            ASSERT_OK(gpumem_free(rt, live[slot]));
            live[slot] = NULL;
        } else {
            /* mostly small, now and then several granules */
            size_t size = (x >> 60) == 0 ? (size_t)((x >> 40) % (24 * MiB)) + 1
                                         : (size_t)((x >> 40) % (512 * KiB)) + 1;
            ASSERT_OK(gpumem_malloc(rt, 0, size, &live[slot]));
        }
        if (op % 500 == 499) {
            uint64_t released = 0;
            ASSERT_OK(gpumem_release_unused(rt, -1, &released));
            void *p = NULL;
            ASSERT_OK(gpumem_malloc(rt, 1, 1 * MiB, &p)); /* GPU 1's region again */
            ASSERT_OK(gpumem_free(rt, p));
        }
    }
    for (size_t i = 0; i < LIVE; i++)
        ASSERT_OK(gpumem_free(rt, live[i]));
    uint64_t released = 0;
    ASSERT_OK(gpumem_release_unused(rt, -1, &released));
}

#define TWO_GPUS "Fake GPU:4GiB:8.0,Fake GPU:1GiB:8.0"

TEST(every_call_the_backend_makes_is_counted)
{
    fresh_driver(TWO_GPUS);
    gpumem_runtime *rt = cuda_runtime();
    if (!rt)
        return;
    workload(rt);
    /* stream-ordered frees, for the events: one given back on its own stream,
     * one taken by another stream once its work is done, one waited for */
    void *s1 = (void *)0x5151, *s2 = (void *)0x5252, *p = NULL, *q = NULL;
    ASSERT_OK(gpumem_malloc_async(rt, 0, 1 * MiB, s1, &p));
    ASSERT_OK(gpumem_free_async(rt, p, s1));
    ASSERT_OK(gpumem_malloc_async(rt, 0, 1 * MiB, s2, &q));
    ASSERT_OK(gpumem_free_async(rt, q, s2));
    fakecuda_hold_stream(s1);
    ASSERT_OK(gpumem_malloc_async(rt, 0, 3 * MiB, s1, &p));
    ASSERT_OK(gpumem_free_async(rt, p, s1));
    fakecuda_release_stream(s1);
    uint64_t released = 0;
    ASSERT_OK(gpumem_release_unused(rt, -1, &released));
    /* failed calls count too, with what undoes them: a refused access (unmap
     * and release follow), a refused allocation of the greedy pool's region */
    ASSERT_EQ(fakecuda_fail_nth("cuMemSetAccess", 1, CUDA_ERROR_OUT_OF_MEMORY), 0);
    ASSERT_STATUS(gpumem_malloc(rt, 0, 5 * MiB, &p), GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_EQ(fakecuda_fail_nth("cuMemAlloc_v2", 1, CUDA_ERROR_OUT_OF_MEMORY), 0);
    if (gpumem_malloc(rt, 1, 1 * MiB, &p) == GPUMEM_OK)
        ASSERT_OK(gpumem_free(rt, p));
    ASSERT_EQ(fakecuda_fault_pending(), 0);

    struct calls all = read_calls(rt, -1);
    expect_double_agrees(&all);
    static const char *const made[] = {
        "cuCtxPushCurrent_v2", "cuCtxPopCurrent_v2", "cuDevicePrimaryCtxRetain",
        "cuMemGetInfo_v2",     "cuMemAlloc_v2",      "cuMemFree_v2",
        "cuMemAddressReserve", "cuMemCreate",        "cuMemMap",
        "cuMemSetAccess",      "cuMemUnmap",         "cuMemRelease",
        "cuEventCreate",       "cuEventRecord"};
    for (size_t i = 0; i < sizeof made / sizeof made[0]; i++) {
        const gpumem_driver_call *e = find(&all, made[i]);
        if (e->calls == 0)
            HARNESS_FAIL("the workload made no %s: the check above proves nothing of it",
                         made[i]);
        if (e->ns == 0) /* each call into the double takes its lock: time passes */
            HARNESS_FAIL("%s: %llu calls in 0 ns", made[i], (unsigned long long)e->calls);
    }
    /* bytes: the four calls of a mapping are given its size, the refused one
     * and those undoing it too; nothing is mapped now, so all of it went back */
    uint64_t mapped = find(&all, "cuMemMap")->bytes;
    ASSERT_TRUE(mapped > 0 && mapped % (2 * MiB) == 0);
    ASSERT_EQ(find(&all, "cuMemCreate")->bytes, mapped);
    ASSERT_EQ(find(&all, "cuMemSetAccess")->bytes, mapped);
    ASSERT_EQ(find(&all, "cuMemRelease")->bytes, mapped);
    ASSERT_EQ(find(&all, "cuMemUnmap")->bytes, mapped);
    ASSERT_EQ(find(&all, "cuCtxPushCurrent_v2")->bytes, 0);
    ASSERT_EQ(find(&all, "cuStreamWaitEvent")->calls, 0);
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

TEST(each_gpu_counts_its_own)
{
    fresh_driver(TWO_GPUS);
    gpumem_runtime *rt = cuda_runtime();
    if (!rt)
        return;
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    ASSERT_OK(gpumem_set_memory_growth(rt, 1, true));
    ASSERT_OK(gpumem_initialize(rt));
    struct calls before0 = read_calls(rt, 0);
    void *p = NULL;
    ASSERT_OK(gpumem_malloc(rt, 1, 6 * MiB, &p));
    struct calls g0 = read_calls(rt, 0), g1 = read_calls(rt, 1), all = read_calls(rt, -1);
    for (size_t i = 0; i < g0.n; i++) {
        ASSERT_EQ(g0.e[i].calls, before0.e[i].calls); /* GPU 0 did nothing more */
        ASSERT_EQ(all.e[i].calls, g0.e[i].calls + g1.e[i].calls);
        ASSERT_EQ(all.e[i].bytes, g0.e[i].bytes + g1.e[i].bytes);
    }
    ASSERT_EQ(find(&g1, "cuMemCreate")->bytes, 6 * MiB);
    ASSERT_EQ(find(&g0, "cuMemCreate")->calls, 0);
    ASSERT_OK(gpumem_free(rt, p));
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

/* ----------------------------------------------------------------- threads -- */

struct racer {
    gpumem_runtime *rt;
    int logical;
};

static void *race(void *arg)
{
    struct racer *r = arg;
    for (int i = 0; i < 200; i++) {
        void *p = NULL;
        size_t size = (size_t)(i % 7 + 1) * MiB;
        if (gpumem_malloc(r->rt, r->logical, size, &p) != GPUMEM_OK)
            HARNESS_FAIL("racer %d: %s", r->logical, gpumem_last_error());
        else
            (void)gpumem_free(r->rt, p);
        if (i % 10 == 0)
            (void)gpumem_release_unused(r->rt, r->logical, NULL);
    }
    return NULL;
}

TEST(threads_count_together_without_losing_a_call)
{
    fresh_driver("Fake GPU:4GiB:8.0");
    gpumem_runtime *rt = cuda_runtime();
    if (!rt)
        return;
    enum { N = 4 };
    gpumem_logical_device_config cfg[N];
    for (int i = 0; i < N; i++)
        cfg[i] = (gpumem_logical_device_config)GPUMEM_LOGICAL_DEVICE_LIMIT(256 * MiB);
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, cfg, N));
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    pthread_t t[N];
    struct racer r[N];
    for (int i = 0; i < N; i++) {
        r[i] = (struct racer){rt, i};
        ASSERT_EQ(pthread_create(&t[i], NULL, race, &r[i]), 0);
    }
    for (int i = 0; i < N; i++)
        pthread_join(t[i], NULL);
    struct calls all = read_calls(rt, 0);
    expect_double_agrees(&all);
    ASSERT_TRUE(find(&all, "cuMemMap")->calls > 0);
    ASSERT_TRUE(find(&all, "cuMemUnmap")->calls > 0);
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

/* ----------------------------------------------- simulated GPUs agree -- */

/* A simulated GPU counts, per operation, the calls the CUDA backend makes for it
 * (lib/backend/sim.c): the same workload on both says the same, call for call
 * and byte for byte, but for the events (none on a simulated GPU) and the context
 * pushes and pops around them. A change to either backend that the other does
 * not follow fails here. */
TEST(a_simulated_gpu_counts_what_the_double_is_asked)
{
    fresh_driver(TWO_GPUS);
    gpumem_runtime *cuda = runtime_with(GPUMEM_BACKEND_CUDA, NULL);
    gpumem_runtime *sim = runtime_with(GPUMEM_BACKEND_SIM, TWO_GPUS);
    if (!cuda || !sim) {
        gpumem_runtime_destroy(cuda);
        gpumem_runtime_destroy(sim);
        return;
    }
    workload(cuda);
    workload(sim);
    for (int gpu = 0; gpu < 2; gpu++) {
        struct calls c = read_calls(cuda, gpu), s = read_calls(sim, gpu);
        ASSERT_EQ(c.n, s.n);
        uint64_t events = 0;
        for (size_t i = 0; i < c.n; i++)
            if (is_event_call(c.e[i].name))
                events += c.e[i].calls;
        for (size_t i = 0; i < c.n && i < s.n; i++) {
            const char *name = c.e[i].name;
            uint64_t want = c.e[i].calls;
            if (is_event_call(name))
                continue;
            if (strcmp(name, "cuCtxPushCurrent_v2") == 0 ||
                strcmp(name, "cuCtxPopCurrent_v2") == 0)
                want -= events; /* one push and pop around each event call */
            if (s.e[i].calls != want || s.e[i].bytes != c.e[i].bytes)
                HARNESS_FAIL("GPU:%d %s: simulated %llu calls of %llu bytes, the double "
                             "%llu of %llu",
                             gpu, name, (unsigned long long)s.e[i].calls,
                             (unsigned long long)s.e[i].bytes, (unsigned long long)want,
                             (unsigned long long)c.e[i].bytes);
        }
        /* the comparison saw the mappings, the trim's unmaps and memory info */
        if (gpu == 0) {
            ASSERT_TRUE(find(&s, "cuMemMap")->calls > 0);
            ASSERT_TRUE(find(&s, "cuMemUnmap")->calls > 0);
        } else {
            ASSERT_TRUE(find(&s, "cuMemAlloc_v2")->calls > 1);
            ASSERT_TRUE(find(&s, "cuMemFree_v2")->calls > 0);
        }
        ASSERT_TRUE(find(&s, "cuMemGetInfo_v2")->calls > 0);
    }
    gpumem_runtime_destroy(cuda);
    gpumem_runtime_destroy(sim);
    check_driver_clean(0);
}

/* ------------------------------------------------------------- the price -- */

/* The price of what rt counted on every GPU, by `prices`, in ns; *calls gets the
 * number of calls (each rounds its per-MiB part down by less than 1 ns). */
static double priced(gpumem_runtime *rt, const struct driver_prices *prices,
                     uint64_t *calls)
{
    struct calls c = read_calls(rt, -1);
    double ns = 0;
    *calls = 0;
    for (size_t i = 0; i < c.n; i++) {
        const struct driver_price *p = driver_price_of(prices, c.e[i].name);
        if (!p) {
            HARNESS_FAIL("%s has no price", c.e[i].name);
            continue;
        }
        ns += driver_price_ns(p, c.e[i].calls, c.e[i].bytes);
        *calls += c.e[i].calls;
    }
    return ns;
}

static void expect_charged(uint64_t charged, double want, uint64_t calls)
{
    if ((double)charged > want + 0.5 || (double)charged + (double)calls + 0.5 < want)
        HARNESS_FAIL("the double charged %llu ns for calls priced at %.0f ns",
                     (unsigned long long)charged, want);
}

TEST(the_double_charges_the_price_of_what_gpumem_counted)
{
    fresh_driver(TWO_GPUS);
    gpumem_runtime *rt = cuda_runtime();
    if (!rt)
        return;
    uint64_t opened = fakecuda_charged_ns(); /* cuInit and the device queries */
    ASSERT_TRUE(opened > 0);
    workload(rt);
    struct driver_prices prices;
    driver_prices_default(&prices);
    uint64_t calls;
    double want = priced(rt, &prices, &calls);
    expect_charged(fakecuda_charged_ns() - opened, want, calls);
    /* every entry point of both has a price: none is charged nothing by mistake */
    for (size_t i = 0; fakecuda_entry_point(i); i++)
        if (!driver_price_of(&prices, fakecuda_entry_point(i)))
            HARNESS_FAIL("the double's %s has no price", fakecuda_entry_point(i));
    /* the defaults: a 2 MiB granule's create, map, access, release and unmap
     * cost 44 us in all, as on an H200 */
    static const char *const mapping[] = {"cuMemCreate", "cuMemMap", "cuMemSetAccess",
                                          "cuMemRelease", "cuMemUnmap"};
    double granule = 0;
    for (size_t i = 0; i < 5; i++)
        granule += driver_price_ns(driver_price_of(&prices, mapping[i]), 1, 2 * MiB);
    ASSERT_EQ((uint64_t)granule, 44000);
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

TEST(prices_from_the_environment_and_the_setter)
{
    static const char spec[] = "*:100,cuMemMap:1000:500,cuMemCreate:7";
    setenv("FAKECUDA_PRICES", spec, 1);
    fresh_driver(TWO_GPUS);
    gpumem_runtime *rt = cuda_runtime();
    if (rt) {
        uint64_t opened = fakecuda_charged_ns();
        workload(rt);
        struct driver_prices prices;
        char err[256];
        driver_prices_default(&prices);
        ASSERT_EQ(driver_prices_parse(&prices, spec, err, sizeof err), 0);
        uint64_t calls;
        double want = priced(rt, &prices, &calls);
        expect_charged(fakecuda_charged_ns() - opened, want, calls);
        /* the setter, from now on */
        ASSERT_EQ(fakecuda_set_price("cuMemGetInfo_v2", 1000000, 0), 0);
        ASSERT_EQ(fakecuda_set_price("cuNoSuchCall", 1, 0), -1);
        uint64_t was = fakecuda_charged_ns();
        gpumem_runtime *other = cuda_runtime(); /* initialization asks free memory */
        if (other) {
            ASSERT_OK(gpumem_initialize(other));
            struct calls o = read_calls(other, -1);
            uint64_t info = find(&o, "cuMemGetInfo_v2")->calls;
            ASSERT_TRUE(info > 0);
            ASSERT_LE(was + info * 1000000, fakecuda_charged_ns());
            gpumem_runtime_destroy(other);
        }
        gpumem_runtime_destroy(rt);
    }
    /* a bad list is a misuse, named after the variable */
    setenv("FAKECUDA_PRICES", "cuMemMap:fast", 1);
    fakecuda_reset();
    ASSERT_EQ(fakecuda_set_devices(TWO_GPUS), 0);
    ASSERT_EQ(fakecuda_misuses(), 1);
    ASSERT_CONTAINS(fakecuda_last_misuse(), "FAKECUDA_PRICES: 'cuMemMap:fast' is not");
    unsetenv("FAKECUDA_PRICES");
    fakecuda_reset();
}

/* FAKECUDA_SPIN: the call takes its price, and gpumem, timing around the call,
 * sees it there (under the pool's lock, where the caller holds it). */
TEST(spinning_spends_the_price_inside_the_call)
{
    setenv("FAKECUDA_SPIN", "1", 1);
    fresh_driver("Fake GPU:4GiB:8.0");
    unsetenv("FAKECUDA_SPIN");
    ASSERT_EQ(fakecuda_set_price("*", 0, 0), 0);
    ASSERT_EQ(fakecuda_set_price("cuMemCreate", 2000000, 0), 0); /* 2 ms */
    gpumem_runtime *rt = cuda_runtime();
    if (!rt)
        return;
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    void *p = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, 5 * MiB, &p));
    struct calls c = read_calls(rt, 0);
    const uint64_t creates = find(&c, "cuMemCreate")->calls;
    const uint64_t spent = find(&c, "cuMemCreate")->ns;
    ASSERT_TRUE(creates > 0);
    ASSERT_LE(creates * 2000000, spent);
    ASSERT_EQ(fakecuda_charged_ns(), creates * 2000000);
    fakecuda_set_spin(0); /* and off again: the next maps take no time to speak of */
    ASSERT_OK(gpumem_free(rt, p));
    ASSERT_OK(gpumem_release_unused(rt, 0, NULL));
    ASSERT_OK(gpumem_malloc(rt, 0, 5 * MiB, &p));
    c = read_calls(rt, 0);
    uint64_t more = find(&c, "cuMemCreate")->calls - creates;
    ASSERT_TRUE(more > 0);
    ASSERT_TRUE(find(&c, "cuMemCreate")->ns - spent < more * 2000000);
    ASSERT_OK(gpumem_free(rt, p));
    gpumem_runtime_destroy(rt);
    check_driver_clean(0);
}

int main(void)
{
    RUN(every_call_the_backend_makes_is_counted);
    RUN(each_gpu_counts_its_own);
    RUN(threads_count_together_without_losing_a_call);
    RUN(a_simulated_gpu_counts_what_the_double_is_asked);
    RUN(the_double_charges_the_price_of_what_gpumem_counted);
    RUN(prices_from_the_environment_and_the_setter);
    RUN(spinning_spends_the_price_inside_the_call);
    HARNESS_EXIT();
}
