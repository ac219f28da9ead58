/* Every driver call failing in turn: for each entry point and n = 1, 2, ... the
 * n-th call fails during a scenario over the whole public API, with and without
 * VMM. Each run must report it (status and the driver's error name, in the
 * message or, when nothing can return it, the log), keep context pushes and pops
 * balanced and leave in the driver only what a refused release must leave.
 * usage: test_cuda_faults [PART/PARTS]: with it, only the entry points (and the
 * out-of-memory faults) of every PARTS-th index from the PART-th fail, so that
 * the PARTS parts together make exactly the runs of one whole run, side by side
 * (Meson runs two parts: under ThreadSanitizer one whole run takes over a
 * minute). */
#include "cuda_util.h"

#include <pthread.h>
#include <time.h>

/* Lets a held stream's work complete when the step that may wait for it is done,
 * or after 20 ms if that step waits for it (when a fault made it wait): from
 * another thread, so that the step does not wait for good, and costs nothing
 * when it does not wait. */
struct release_watch {
    pthread_mutex_t lock;
    pthread_cond_t done_cond;
    bool done;
    void *stream;
};

static void *release_when_done(void *arg)
{
    struct release_watch *w = arg;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 20 * 1000 * 1000;
    if (until.tv_nsec >= 1000000000) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&w->lock);
    while (!w->done && pthread_cond_timedwait(&w->done_cond, &w->lock, &until) == 0)
        ;
    pthread_mutex_unlock(&w->lock);
    fakecuda_release_stream(w->stream);
    return NULL;
}

struct outcome {
    const char *step;     /* the first step that failed, or NULL */
    gpumem_status status; /* its status */
    char message[1024];   /* its message */
    char books[512];      /* the first difference between the driver and the pools */
};

/* After every step, on each GPU, the memory the driver holds is what the pools on
 * it count as reserved: memory the driver keeps after a refused release or a
 * failed undo is booked, and nothing booked is missing. Without pools (creation
 * or initialization failed and took them down) memory the driver keeps must be
 * named in the log as kept. */
static void check_books(gpumem_runtime *rt, const char *step, struct outcome *out)
{
    if (out->books[0])
        return;
    uint64_t reserved[2] = {0, 0};
    bool initialized = false;
    gpumem_logical_device l[4] = {GPUMEM_STRUCT_INIT(gpumem_logical_device)};
    size_t n = 0;
    if (gpumem_is_initialized(rt, &initialized) == GPUMEM_OK && initialized &&
        gpumem_list_logical_devices(rt, l, 4, &n) != GPUMEM_OK)
        n = 0;
    for (size_t i = 0; i < n; i++) {
        gpumem_memory_info mi = GPUMEM_STRUCT_INIT(gpumem_memory_info);
        if (gpumem_get_memory_info(rt, l[i].index, &mi) == GPUMEM_OK)
            reserved[l[i].physical_index] += mi.reserved_bytes;
    }
    for (int dev = 0; dev < 2; dev++)
        if (fakecuda_used_bytes(dev) != reserved[dev] &&
            !(n == 0 && strstr(log_text, "the device keeps these"))) {
            snprintf(out->books, sizeof out->books,
                     "after '%s', GPU:%d: the driver holds %llu bytes, the pools "
                     "count %llu as reserved",
                     step, dev, (unsigned long long)fakecuda_used_bytes(dev),
                     (unsigned long long)reserved[dev]);
            return;
        }
}

#define STEP(name, expr)                                                                 \
    do {                                                                                 \
        gpumem_status s_ = (expr);                                                       \
        if (s_ != GPUMEM_OK) {                                                           \
            out->step = name;                                                            \
            out->status = s_;                                                            \
            snprintf(out->message, sizeof out->message, "%s", gpumem_last_error());      \
        }                                                                                \
        check_books(rt, name, out);                                                      \
        if (s_ != GPUMEM_OK)                                                             \
            goto done;                                                                   \
    } while (0)

/* The step that gives free regions back before it retries: when the driver
 * refuses the release, it fails as out of memory with the refusal in its message. */
#define RETRY_STEP "malloc 30 MiB (release and retry)"

static void scenario(struct outcome *out)
{
    memset(out, 0, sizeof *out);
    gpumem_status created;
    gpumem_runtime *rt = runtime_on(GPUMEM_BACKEND_CUDA, &created);
    if (!rt) {
        out->step = "gpumem_runtime_create";
        out->status = created;
        snprintf(out->message, sizeof out->message, "%s", gpumem_last_error());
        return;
    }
    gpumem_physical_device d[2] = {GPUMEM_STRUCT_INIT(gpumem_physical_device)};
    size_t n;
    void *a = NULL, *b = NULL, *c = NULL, *e = NULL, *f = NULL, *g = NULL, *h = NULL;
    void *const s1 = (void *)0x51, *const s2 = (void *)0x52; /* two streams */
    uint64_t released;
    gpumem_memory_info mi = GPUMEM_STRUCT_INIT(gpumem_memory_info);
    gpumem_logical_device_config halves[2] = {GPUMEM_LOGICAL_DEVICE_LIMIT(4 * GiB),
                                              GPUMEM_LOGICAL_DEVICE_LIMIT(4 * GiB)};
    STEP("list", gpumem_list_physical_devices(rt, d, 2, &n));
    STEP("growth", gpumem_set_memory_growth(rt, 0, true));
    STEP("logical", gpumem_set_logical_device_configuration(rt, 1, halves, 2));
    STEP("initialize", gpumem_initialize(rt));
    STEP("malloc 19 MiB", gpumem_malloc(rt, 0, 19 * MiB, &a));
    STEP("malloc 3 MiB", gpumem_malloc(rt, 0, 3 * MiB, &b));
    STEP("malloc greedy", gpumem_malloc(rt, 2, 1 * MiB, &c));
    STEP("info", gpumem_get_memory_info(rt, 0, &mi));
    STEP("free a", gpumem_free(rt, a));
    STEP("free b", gpumem_free(rt, b));
    STEP("free c", gpumem_free(rt, c));
    STEP("release_unused", gpumem_release_unused(rt, -1, &released));
    STEP("malloc again", gpumem_malloc(rt, 0, 1 * MiB, &e));
    STEP("free again", gpumem_free(rt, e));
    /* stream-ordered: frees that serve their own stream again with no driver
     * call; a request on s2 that finds no fit looks at s1's memory (its fence
     * made, recorded and queried, not ready: s1's work is held until a thread
     * lets it go, so that a fault that makes the step wait waits a moment, not
     * for good), then a plain one that queries it again and gets it;
     * release_unused records and waits for s2's fence; the events destroyed at
     * the end. */
    STEP("malloc_async s1", gpumem_malloc_async(rt, 0, 1 * MiB, s1, &g));
    STEP("malloc_async s2", gpumem_malloc_async(rt, 0, 1 * MiB, s2, &h));
    fakecuda_hold_stream(s1);
    STEP("free_async s1", gpumem_free_async(rt, g, s1));
    STEP("free_async s2", gpumem_free_async(rt, h, s2));
    STEP("malloc_async s1 again", gpumem_malloc_async(rt, 0, 1 * MiB, s1, &g));
    STEP("free_async s1 again", gpumem_free_async(rt, g, s1));
    struct release_watch watch = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
                                  false, s1};
    pthread_t releaser;
    bool releasing = pthread_create(&releaser, NULL, release_when_done, &watch) == 0;
    gpumem_status looked = gpumem_malloc_async(rt, 0, 8 * MiB, s2, &h);
    if (releasing) {
        pthread_mutex_lock(&watch.lock);
        watch.done = true;
        pthread_cond_signal(&watch.done_cond);
        pthread_mutex_unlock(&watch.lock);
        pthread_join(releaser, NULL);
    } else {
        fakecuda_release_stream(s1);
    }
    STEP("malloc_async s2 looks at s1", looked);
    STEP("free_async s2 again", gpumem_free_async(rt, h, s2));
    STEP("malloc takes s1's", gpumem_malloc(rt, 0, 64 * MiB, &e));
    STEP("free it", gpumem_free(rt, e));
    STEP("release_unused streams", gpumem_release_unused(rt, 0, &released));
    /* the out-of-memory path: with 10 MiB left on the card, a 30 MiB growth fails
     * in the driver; the pool gives its free regions back and tries once more */
    STEP("malloc 19 MiB again", gpumem_malloc(rt, 0, 19 * MiB, &a));
    STEP("free a again", gpumem_free(rt, a));
    fakecuda_set_used_elsewhere(0, fakecuda_free_bytes(0) - 10 * MiB);
    STEP(RETRY_STEP, gpumem_malloc(rt, 0, 30 * MiB, &f));
    STEP("free f", gpumem_free(rt, f));
done:
    fakecuda_release_stream(s1); /* destroy waits for the pending blocks' work */
    gpumem_runtime_destroy(rt);
}

/* What a refused release of `fn` leaves behind, if anything. */
static bool leak_allowed(const char *fn, const struct fakecuda_live *l)
{
    bool none = !l->allocations && !l->handles && !l->mappings && !l->reservations &&
                !l->context_refs;
    bool block = l->allocations == 1 && !l->handles && !l->mappings && !l->reservations &&
                 !l->context_refs;
    bool mapped = !l->allocations && l->handles == 1 && l->mappings == 1 &&
                  l->reservations == 1 && !l->context_refs;
    bool range = !l->allocations && !l->handles && !l->mappings && l->reservations == 1 &&
                 !l->context_refs;
    bool handle = !l->allocations && l->handles == 1 && !l->mappings &&
                  !l->reservations && !l->context_refs;
    bool context = !l->allocations && !l->handles && !l->mappings && !l->reservations &&
                   l->context_refs == 1;
    if (none)
        return true;
    if (strcmp(fn, "cuMemFree_v2") == 0)
        return block;
    if (strcmp(fn, "cuMemUnmap") == 0)
        return mapped;
    if (strcmp(fn, "cuMemAddressFree") == 0)
        return range;
    if (strcmp(fn, "cuMemRelease") == 0)
        return handle;
    if (strcmp(fn, "cuDevicePrimaryCtxRelease_v2") == 0)
        return context;
    if (strcmp(fn, "cuCtxPushCurrent_v2") == 0) /* the push before a release */
        return block || mapped || range;
    return false;
}

static unsigned long runs, reported_in_message, reported_in_log, recovered;
static size_t part = 1, parts = 1; /* this run's share of the faults: PART/PARTS */

/* Whether the faults of index i (an entry point's, or an out-of-memory kind's)
 * are this part's. */
static bool ours(size_t i) { return i % parts == part - 1; }

/* One run with the n-th call of fn failing with `code`. Returns false when the
 * fault was not reached (n is past the scenario's calls of fn). */
static bool run_once(const char *devices, bool vmm, const char *fn, unsigned long n,
                     CUresult code, const char *code_name)
{
    fresh_driver(devices);
    fakecuda_set_vmm(vmm);
    fakecuda_fail_nth(fn, n, code);
    struct outcome out;
    scenario(&out);
    if (fakecuda_fault_pending()) {
        if (out.step)
            HARNESS_FAIL("%s (vmm %d): with no fault, step '%s' failed: %s", fn, vmm,
                         out.step, out.message);
        return false;
    }
    runs++;
    char where[96];
    snprintf(where, sizeof where, "%s #%lu failing with %s (vmm %d)", fn, n, code_name,
             vmm);
    if (out.books[0])
        HARNESS_FAIL("%s: %s", where, out.books);

    if (out.step) {
        gpumem_status want = code == CUDA_ERROR_OUT_OF_MEMORY ? GPUMEM_ERR_OUT_OF_MEMORY
                                                              : GPUMEM_ERR_BACKEND;
        if (strcmp(out.step, RETRY_STEP) == 0 &&
            strstr(out.message, "giving free regions back failed"))
            want = GPUMEM_ERR_OUT_OF_MEMORY;
        if (out.status != want)
            HARNESS_FAIL("%s: step '%s' returned %s, expected %s: %s", where, out.step,
                         gpumem_status_name(out.status), gpumem_status_name(want),
                         out.message);
        if (!strstr(out.message, code_name))
            HARNESS_FAIL("%s: the message does not name %s: %s", where, code_name,
                         out.message);
        if (code != CUDA_ERROR_OUT_OF_MEMORY && !strstr(out.message, fn))
            HARNESS_FAIL("%s: the message does not name the call: %s", where,
                         out.message);
        if (strchr(out.message, '\n'))
            HARNESS_FAIL("%s: the message is not one line: %s", where, out.message);
        reported_in_message++;
    } else if (code == CUDA_ERROR_OUT_OF_MEMORY) {
        recovered++; /* a smaller region, or a release and retry, served it */
    } else if (strncmp(fn, "cuGetError", 10) == 0) {
        /* only a message's wording failed, and the message was not needed: the
         * out-of-memory failure it described was recovered from */
        recovered++;
    } else {
        /* Nothing could return it (a fallback, or the runtime's destroy): the log
         * must say it. */
        char needle[128];
        snprintf(needle, sizeof needle, "%s", fn);
        if (!strstr(log_text, needle) || !strstr(log_text, code_name))
            HARNESS_FAIL("%s: the scenario succeeded and the log does not tell:\n%s",
                         where, log_text);
        reported_in_log++;
    }

    bool popped_failed = strcmp(fn, "cuCtxPopCurrent_v2") == 0;
    int depth = fakecuda_context_depth();
    if (depth != (popped_failed ? 1 : 0))
        HARNESS_FAIL("%s: the context stack is %d deep after the run", where, depth);
    unsigned long misuses = fakecuda_misuses();
    /* A pop that failed left the primary context on this thread's stack; its
     * release at destroy is then what the driver double flags, rightly. */
    if (misuses && !(popped_failed && strstr(fakecuda_last_misuse(), "context stack")))
        HARNESS_FAIL("%s: the driver saw %lu misuse(s), the last: %s", where, misuses,
                     fakecuda_last_misuse());
    while (fakecuda_context_depth() > 0)
        fakecuda_pop_context();
    struct fakecuda_live live;
    fakecuda_live(&live);
    if (!leak_allowed(fn, &live))
        HARNESS_FAIL("%s: the driver still holds allocations %lu, handles %lu, mappings "
                     "%lu, ranges %lu, context references %lu",
                     where, live.allocations, live.handles, live.mappings,
                     live.reservations, live.context_refs);
    return true;
}

static void every_call_fails_in_turn(bool vmm)
{
    const char *devices = "NVIDIA H100 80GB HBM3:80GiB:9.0,Tesla T4:15GiB:7.5";
    for (size_t i = 0; fakecuda_entry_point(i); i++) {
        const char *fn = fakecuda_entry_point(i);
        for (unsigned long n = 1; ours(i) && n < 500; n++)
            if (!run_once(devices, vmm, fn, n, CUDA_ERROR_LAUNCH_FAILED,
                          "CUDA_ERROR_LAUNCH_FAILED (719)"))
                break;
    }
    static const char *const allocating[] = {"cuMemAlloc_v2", "cuMemCreate",
                                             "cuMemAddressReserve", "cuEventCreate"};
    for (size_t i = 0; i < sizeof allocating / sizeof allocating[0]; i++)
        for (unsigned long n = 1; ours(i) && n < 500; n++)
            if (!run_once(devices, vmm, allocating[i], n, CUDA_ERROR_OUT_OF_MEMORY,
                          "CUDA_ERROR_OUT_OF_MEMORY (2)"))
                break;
}

static unsigned long pair_runs;

/* One run with the n-th call of fn failing and then, once it has, the next call of
 * `then` (a cleanup, a retry or the next step) failing too. The first failure may
 * be recovered from or lost behind the second, so only what must hold whatever
 * happens is checked: the books after every step, a one-line status naming one of
 * the two, balanced contexts and no misuse. Returns false when the first fault was
 * not reached. */
static bool run_pair(const char *devices, bool vmm, const char *fn, unsigned long n,
                     const char *then)
{
    fresh_driver(devices);
    fakecuda_set_vmm(vmm);
    fakecuda_fail_nth(fn, n, CUDA_ERROR_LAUNCH_FAILED);
    fakecuda_fail_then(then, CUDA_ERROR_UNKNOWN);
    struct outcome out;
    scenario(&out);
    bool first_fired = fakecuda_calls(fn) >= n;
    if (!first_fired)
        return false;
    bool then_fired = !fakecuda_fault_pending();
    fakecuda_fail_then(then, 0); /* disarm before the checks call anything */
    fakecuda_fail_nth(then, 0, 0);
    pair_runs++;
    char where[160];
    snprintf(where, sizeof where, "%s #%lu, then %s%s (vmm %d)", fn, n, then,
             then_fired ? "" : " (not reached)", vmm);
    if (out.books[0])
        HARNESS_FAIL("%s: %s", where, out.books);
    if (out.step) {
        if (out.status != GPUMEM_ERR_BACKEND && out.status != GPUMEM_ERR_OUT_OF_MEMORY)
            HARNESS_FAIL("%s: step '%s' returned %s: %s", where, out.step,
                         gpumem_status_name(out.status), out.message);
        /* "CUresult 719" when the failing second call was cuGetErrorName */
        if (!strstr(out.message, "719") && !strstr(out.message, "999"))
            HARNESS_FAIL("%s: the message names neither failure: %s", where, out.message);
        if (strchr(out.message, '\n'))
            HARNESS_FAIL("%s: the message is not one line: %s", where, out.message);
    }
    int failed_pops = (strcmp(fn, "cuCtxPopCurrent_v2") == 0) +
                      (then_fired && strcmp(then, "cuCtxPopCurrent_v2") == 0);
    if (fakecuda_context_depth() != failed_pops)
        HARNESS_FAIL("%s: the context stack is %d deep after the run", where,
                     fakecuda_context_depth());
    unsigned long misuses = fakecuda_misuses();
    if (misuses && !(failed_pops && strstr(fakecuda_last_misuse(), "context stack")))
        HARNESS_FAIL("%s: the driver saw %lu misuse(s), the last: %s", where, misuses,
                     fakecuda_last_misuse());
    while (fakecuda_context_depth() > 0)
        fakecuda_pop_context();
    return true;
}

/* Every entry point failing in turn (as above), each time followed by a failure of
 * the next call of each entry point. */
static void every_call_fails_in_turn_and_then_another(bool vmm)
{
    const char *devices = "NVIDIA H100 80GB HBM3:80GiB:9.0,Tesla T4:15GiB:7.5";
    for (size_t i = 0; fakecuda_entry_point(i); i++) {
        const char *fn = fakecuda_entry_point(i);
        for (unsigned long n = 1; ours(i) && n < 500; n++) {
            bool reached = true;
            for (size_t j = 0; reached && fakecuda_entry_point(j); j++)
                reached = run_pair(devices, vmm, fn, n, fakecuda_entry_point(j));
            if (!reached)
                break;
        }
    }
}

TEST(every_call_fails_in_turn_with_vmm) { every_call_fails_in_turn(true); }
TEST(every_call_fails_in_turn_without_vmm) { every_call_fails_in_turn(false); }
TEST(every_call_fails_in_turn_and_then_another_with_vmm)
{
    every_call_fails_in_turn_and_then_another(true);
}
TEST(every_call_fails_in_turn_and_then_another_without_vmm)
{
    every_call_fails_in_turn_and_then_another(false);
}

TEST(the_scenario_passes_without_faults)
{
    for (int vmm = 0; vmm <= 1; vmm++) {
        fresh_driver("NVIDIA H100 80GB HBM3:80GiB:9.0,Tesla T4:15GiB:7.5");
        fakecuda_set_vmm(vmm);
        struct outcome out;
        scenario(&out);
        if (out.step)
            HARNESS_FAIL("vmm %d: step '%s' failed: %s", vmm, out.step, out.message);
        check_driver_clean(0);
    }
}

TEST(every_entry_point_was_exercised)
{
    for (size_t i = 0; fakecuda_entry_point(i); i++)
        if (fakecuda_calls_ever(fakecuda_entry_point(i)) == 0)
            HARNESS_FAIL("the backend never called %s", fakecuda_entry_point(i));
    printf(
        "     %lu runs with a fault: %lu reported by the failing call, %lu in the log, "
        "%lu out-of-memory faults recovered by a smaller region or a release; %lu runs "
        "with a second fault after the first\n",
        runs, reported_in_message, reported_in_log, recovered, pair_runs);
}

int main(int argc, char **argv)
{
    if (argc > 2 || (argc == 2 && (sscanf(argv[1], "%zu/%zu", &part, &parts) != 2 ||
                                   parts < 1 || part < 1 || part > parts))) {
        fprintf(stderr, "usage: %s [PART/PARTS], 1 <= PART <= PARTS\n", argv[0]);
        return 2;
    }
    if (parts > 1)
        printf("part %zu of %zu: the faults of entry points %zu, %zu, ...\n", part, parts,
               part, part + parts);
    RUN(the_scenario_passes_without_faults);
    RUN(every_call_fails_in_turn_with_vmm);
    RUN(every_call_fails_in_turn_without_vmm);
    RUN(every_call_fails_in_turn_and_then_another_with_vmm);
    RUN(every_call_fails_in_turn_and_then_another_without_vmm);
    RUN(every_entry_point_was_exercised);
    HARNESS_EXIT();
}
