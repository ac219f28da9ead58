/* A fuzz target for stream-ordered memory on the CUDA backend, over the driver
 * double (tests/fakecuda): allocations and frees on four streams that an input
 * may hold busy (the legacy default one among them), on 40 more (so that a 32nd
 * stream waits for the least recently used slot) and plain ones, blocks
 * recorded on other streams (record_stream), held streams let complete,
 * releases, peak resets, bad frees and CUDA graph captures begun and ended, in
 * any order, on one or two logical devices of one GPU (a stream's memory kept
 * apart in each), in greedy or growing pools, with or without CUDA's virtual
 * memory management, the trim and the history. The double's waits complete
 * the work they wait for (fakecuda_set_wait_completes), so one thread reaches
 * every path, and a held stream is held until gpumem waits for it or the input
 * lets it complete.
 *
 * What must hold, after every call:
 * - the header's rule for streams: memory freed on a stream whose work may
 *   still run goes to no other stream, nor to a plain allocation, before that
 *   work has completed; a block recorded on other streams goes to nobody
 *   before their work and the free's stream's have completed;
 * - live blocks never overlap, and keep what was written into them;
 * - every call returns one of its documented statuses, with a message when it
 *   fails; a bad free is refused;
 * - no event is queried, waited for or recorded while a capture is under way;
 * - current <= reserved <= the limit, the peaks at or above, and current at
 *   least the live blocks (blocks kept for their streams count too);
 * - the double sees no misuse, and destroy gives it everything back.
 *
 * Input: byte 0 the configuration (bit 0 growth, 1 no virtual memory
 * management, 2-3 the limit: 8, 16, 32 or 64 MiB, 4 the history, 5 the trim
 * off, 6 a trim window of 0, 7 two logical devices on the GPU, each with that
 * limit), then four bytes per call. Built and run like
 * fuzz_api.c, with the double (tests/meson.build). */
#define FUZZ_TARGET "fuzz-streams"
#include "backend/cuda_api.h" /* CUresult values to inject */
#include "fakecuda.h"
#include "fuzz_calls.h"
#include "gpumem.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LIVE    48
#define MAX_PENDING 256
#define STREAMS     44 /* 4 named, then 40 more: more than a pool's 31 slots */
#define HELD        4  /* the streams an input may hold busy */
#define PLAIN       (-1)
#define MiB         ((size_t)1 << 20)
#define CHUNK(size) (((size) + 255) / 256 * 256) /* what a block takes */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void *streams[STREAMS] = {NULL, (void *)0x5151, (void *)0x5252, (void *)0x5353};

/* The entry points made to fail: whatever fails among them, gpumem gives back
 * what it took (a failed give-back, which leaves memory with the driver, or a
 * failed pop, which leaves a context on the thread's stack, are for
 * test_cuda_faults.c). */
static const char *const faulty[] = {
    "cuEventCreate",       "cuEventRecord",  "cuEventQuery", "cuEventSynchronize",
    "cuMemAlloc_v2",       "cuMemCreate",    "cuMemMap",     "cuMemSetAccess",
    "cuMemAddressReserve", "cuMemGetInfo_v2"};
#define FAULTY (sizeof faulty / sizeof faulty[0])

struct live {
    unsigned char *p;
    size_t size;
    int stream;        /* allocated on (PLAIN: gpumem_malloc) */
    int logical;       /* the logical device it came from */
    uint64_t recorded; /* streams it was used on (record_stream), a bit each */
    unsigned char mark;
};

/* Memory freed whose streams' work may still run: no allocation on another
 * stream may overlap it while `waits` (streams still held) is not empty, and
 * none at all when the block was recorded on other streams. */
struct pending {
    uintptr_t lo, hi;
    uint64_t waits;
    int own; /* the stream that may take it again at once, PLAIN: none */
};

struct state {
    gpumem_runtime *rt;
    size_t limit; /* each logical device's */
    int nlogical; /* on the one GPU: 1 or 2 */
    struct live live[MAX_LIVE];
    size_t nlive;
    struct pending pending[MAX_PENDING];
    size_t npending;
    unsigned char next_mark;
    bool faults;  /* a driver call was made to fail: BACKEND may come back */
    int captures; /* gpumem_stream_capture(true) not yet ended */
    bool trace;   /* FUZZ_STREAMS_TRACE set: each call to stderr */
};

static uint64_t held_now(void)
{
    uint64_t held = 0;
    for (int i = 0; i < HELD; i++)
        if (fakecuda_stream_held(streams[i]))
            held |= UINT64_C(1) << i;
    return held;
}

/* Streams whose work completed (gpumem waited for it, or the input let it
 * complete) no longer hold what was freed on them. */
static void settle(struct state *s)
{
    uint64_t held = held_now();
    size_t k = 0;
    for (size_t i = 0; i < s->npending; i++) {
        struct pending e = s->pending[i];
        e.waits &= held;
        if (e.waits)
            s->pending[k++] = e;
    }
    s->npending = k;
}

static void add_pending(struct state *s, uintptr_t lo, uintptr_t hi, uint64_t waits,
                        int own)
{
    if (!waits)
        return;
    if (s->npending == MAX_PENDING)
        die("too many pending ranges for the model", "add_pending");
    s->pending[s->npending++] = (struct pending){lo, hi, waits, own};
}

/* A new block [p, p+size) on `stream`: it may take only memory no stream's
 * work may still use, or its own stream's. What it takes is live now, out of
 * the pending ranges. */
static void check_new(struct state *s, unsigned char *p, size_t size, int stream,
                      const char *call)
{
    uintptr_t lo = (uintptr_t)p, hi = lo + CHUNK(size);
    for (size_t i = 0; i < s->nlive; i++) {
        uintptr_t a = (uintptr_t)s->live[i].p, b = a + CHUNK(s->live[i].size);
        if (lo < b && a < hi)
            die("a new block overlaps a live one", call);
    }
    size_t n = s->npending;
    for (size_t i = 0; i < n; i++) {
        struct pending e = s->pending[i];
        if (!(lo < e.hi && e.lo < hi))
            continue;
        if (e.own == PLAIN || e.own != stream)
            die("a new block takes memory whose stream's work may still run", call);
        /* its own stream's: what is left of the range stays pending */
        s->pending[i].hi = s->pending[i].lo; /* emptied; the rest appended */
        if (e.lo < lo)
            add_pending(s, e.lo, lo, e.waits, e.own);
        if (hi < e.hi)
            add_pending(s, hi, e.hi, e.waits, e.own);
    }
    size_t k = 0;
    for (size_t i = 0; i < s->npending; i++)
        if (s->pending[i].lo < s->pending[i].hi)
            s->pending[k++] = s->pending[i];
    s->npending = k;
}

static size_t size_of(const struct state *s, uint8_t a, uint8_t b)
{
    /* 1 byte to half the limit, log-uniform, then a fraction more */
    unsigned top = 0;
    while (((size_t)1 << (top + 1)) <= s->limit / 2)
        top++;
    size_t size = (size_t)1 << (a % (top + 1));
    return size + (size_t)b * size / 256;
}

static void do_malloc(struct state *s, int logical, int stream, size_t size)
{
    const char *call = stream == PLAIN ? "gpumem_malloc" : "gpumem_malloc_async";
    unsigned char *p = NULL;
    gpumem_status r =
        only(stream == PLAIN ? gpumem_malloc(s->rt, logical, size, (void **)&p)
                             : gpumem_malloc_async(s->rt, logical, size, streams[stream],
                                                   (void **)&p),
             ST(OK) | ST(ERR_OUT_OF_MEMORY) | (s->faults ? ST(ERR_BACKEND) : 0), call);
    settle(s); /* a wait may have completed streams' work */
    if (r != GPUMEM_OK)
        return;
    if (!p)
        die("no pointer", call);
    if (s->trace)
        fprintf(stderr, "  -> %p\n", (void *)p);
    check_new(s, p, size, stream, call);
    if (s->nlive == MAX_LIVE) { /* no room in the model: give it back */
        if (known(gpumem_free(s->rt, p), "gpumem_free") != GPUMEM_OK)
            die("a fresh block's free failed", "gpumem_free");
        return;
    }
    unsigned char mark = ++s->next_mark;
    p[0] = p[size - 1] = p[size / 2] = mark;
    s->live[s->nlive++] = (struct live){p, size, stream, logical, 0, mark};
}

/* Frees live block i on `stream` (PLAIN: gpumem_free). */
static void do_free(struct state *s, size_t i, int stream)
{
    struct live l = s->live[i];
    if (l.p[0] != l.mark || l.p[l.size - 1] != l.mark || l.p[l.size / 2] != l.mark)
        die("a live block's contents changed", "a block's check");
    uint64_t held = held_now();
    const char *call = stream == PLAIN ? "gpumem_free" : "gpumem_free_async";
    uint64_t own = stream == PLAIN ? 0 : UINT64_C(1) << stream,
             others = l.recorded & ~own;
    /* a recorded block's events, or a stream's first free waiting for room
     * among the streams' slots, may fail; that wait is refused during a
     * capture: the block stays the caller's */
    unsigned listed =
        ST(OK) |
        (s->faults && (others || own) ? ST(ERR_BACKEND) | ST(ERR_OUT_OF_MEMORY) : 0) |
        (s->captures && own ? ST(ERR_UNSUPPORTED) : 0);
    gpumem_status r =
        only(stream == PLAIN ? gpumem_free(s->rt, l.p)
                             : gpumem_free_async(s->rt, l.p, streams[stream]),
             listed, call);
    if (r != GPUMEM_OK) {
        settle(s);
        return;
    }
    s->live[i] = s->live[--s->nlive];
    uintptr_t lo = (uintptr_t)l.p, hi = lo + CHUNK(l.size);
    if (others) /* nobody's before every stream it was used on is done */
        add_pending(s, lo, hi, held & (others | own), PLAIN);
    else if (own) /* its stream's at once (a record on it costs nothing) */
        add_pending(s, lo, hi, held & own, stream);
    settle(s);
}

static void bad_frees(struct state *s, size_t i, int stream)
{
    unsigned char *inside = s->live[i].p + 1; /* 256-byte aligned blocks */
    if (known(gpumem_free_async(s->rt, inside, streams[stream]), "gpumem_free_async") !=
            GPUMEM_ERR_INVALID_POINTER ||
        known(gpumem_free(s->rt, inside), "gpumem_free") != GPUMEM_ERR_INVALID_POINTER)
        die("a pointer inside a block was freed", "a bad free");
    settle(s);
}

static void check_info(struct state *s, int logical)
{
    gpumem_memory_info info = GPUMEM_STRUCT_INIT(gpumem_memory_info);
    only(gpumem_get_memory_info(s->rt, logical, &info), ST(OK), "gpumem_get_memory_info");
    uint64_t live = 0;
    for (size_t i = 0; i < s->nlive; i++)
        if (s->live[i].logical == logical)
            live += CHUNK(s->live[i].size);
    if (info.current_bytes < live || info.current_bytes > info.reserved_bytes ||
        info.reserved_bytes > s->limit || info.peak_bytes < info.current_bytes ||
        info.peak_reserved_bytes < info.reserved_bytes)
        die("the figures disagree", "gpumem_get_memory_info");
}

/* The event calls that the driver refuses during a capture in CUDA's global
 * mode, made so far (none may be made while one is under way). */
static unsigned long captures_events(const struct state *s)
{
    (void)s;
    return fakecuda_calls("cuEventQuery") + fakecuda_calls("cuEventSynchronize") +
           fakecuda_calls("cuEventRecord");
}

static void call(struct state *s, const uint8_t op[4])
{
    /* half the calls on the four named streams, half on 40 more (so that an
     * input reaches the 32nd stream's wait for the least recently used one) */
    int stream = op[1] % 8 < 4 ? op[1] % HELD : HELD + op[2] % (STREAMS - HELD);
    int logical = s->nlogical > 1 ? op[1] / 8 % 2 : 0;
    size_t i = s->nlive ? op[2] % s->nlive : 0;
    if (s->trace)
        fprintf(stderr,
                "op %u stream %d block %zu (%p, %zu bytes, on %d, recorded %llx) "
                "size %zu held %llx\n",
                op[0] % 14, stream, i, s->nlive ? (void *)s->live[i].p : NULL,
                s->nlive ? s->live[i].size : 0, s->nlive ? s->live[i].stream : 0,
                (unsigned long long)(s->nlive ? s->live[i].recorded : 0),
                size_of(s, op[2], op[3]), (unsigned long long)held_now());
    unsigned long events_before = captures_events(s);
    switch (op[0] % 14) {
    case 0:
    case 1:
        do_malloc(s, logical, stream, size_of(s, op[2], op[3]));
        break;
    case 2:
        do_malloc(s, logical, PLAIN, size_of(s, op[2], op[3]));
        break;
    case 3:
    case 4: /* mostly on the stream it was allocated on */
        if (s->nlive)
            do_free(s, i,
                    op[3] % 4 && s->live[i].stream != PLAIN ? s->live[i].stream : stream);
        break;
    case 5:
        if (s->nlive)
            do_free(s, i, PLAIN);
        break;
    case 6:
        if (s->nlive) {
            only(gpumem_record_stream(s->rt, s->live[i].p, streams[stream]), ST(OK),
                 "gpumem_record_stream");
            s->live[i].recorded |= UINT64_C(1) << stream;
        }
        break;
    case 7:
        if (stream < HELD && fakecuda_hold_stream(streams[stream]) != 0)
            die("the double holds no more streams", "fakecuda_hold_stream");
        break;
    case 8:
        fakecuda_release_stream(streams[stream]);
        settle(s);
        break;
    case 9: {
        uint64_t released = 0;
        int which = op[2] % 2 ? -1 : logical; /* -1: every logical device */
        gpumem_status r =
            only(gpumem_release_unused(s->rt, which, &released),
                 ST(OK) | (s->faults ? ST(ERR_BACKEND) : 0), "gpumem_release_unused");
        settle(s); /* it waited for every stream of the pools it released */
        if (r != GPUMEM_OK)
            break; /* a wait failed: that stream's memory is its own still */
        if (s->npending && (which == -1 || s->nlogical == 1) && !s->captures)
            die("memory still pending after a release waited for it",
                "gpumem_release_unused");
        break;
    }
    case 10:
        if (s->nlive)
            bad_frees(s, i, stream);
        break;
    case 11: /* the n-th call of an entry point from now fails */
        if (fakecuda_fail_nth(faulty[op[1] % FAULTY], 1 + op[2] % 4,
                              op[3] % 2 ? CUDA_ERROR_OUT_OF_MEMORY
                                        : CUDA_ERROR_LAUNCH_FAILED) != 0)
            die("the double has no such entry point", "fakecuda_fail_nth");
        s->faults = true;
        break;
    case 12: /* a CUDA graph capture begins or ends (gpumem.torch's graph pools) */
        if (op[3] % 2 && s->captures < 2) {
            only(gpumem_stream_capture(true), ST(OK), "gpumem_stream_capture");
            s->captures++;
        } else if (s->captures) {
            only(gpumem_stream_capture(false), ST(OK), "gpumem_stream_capture");
            s->captures--;
        }
        break;
    default:
        if (op[3] % 2)
            only(gpumem_reset_memory_stats(s->rt, logical), ST(OK),
                 "gpumem_reset_memory_stats");
        break;
    }
    if (s->captures && captures_events(s) != events_before)
        die("an event was queried, waited for or recorded during a capture", "a call");
    for (int k = 0; k < s->nlogical; k++)
        check_info(s, k);
    if (fakecuda_misuses())
        die(fakecuda_last_misuse(), "the driver double");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t cfg = data[0];
    for (int k = HELD; k < STREAMS; k++) /* any pointer is a stream to the double */
        streams[k] = (void *)(uintptr_t)(0x6000 + k);
    Dl_info double_of;
    union { /* a function's address as dladdr takes it */
        void (*fn)(void);
        void *addr;
    } in_double = {.fn = fakecuda_reset};
    if (!getenv("GPUMEM_CUDA_LIBRARY") && /* a libFuzzer run: the double linked in */
        dladdr(in_double.addr, &double_of) && double_of.dli_fname)
        setenv("GPUMEM_CUDA_LIBRARY", double_of.dli_fname, 1);
    setenv("GPUMEM_LEDGER", "off", 1);
    if (cfg & 0x40)
        setenv("GPUMEM_GROWTH_TRIM_WINDOW", "0", 1);
    else
        unsetenv("GPUMEM_GROWTH_TRIM_WINDOW");
    fakecuda_reset();
    if (fakecuda_set_devices("Tesla T4:15GiB:7.5") != 0)
        die("the double refused its devices", "fakecuda_set_devices");
    fakecuda_set_vmm(!(cfg & 2));
    fakecuda_set_wait_completes(1);

    static struct state s;
    memset(&s, 0, sizeof s);
    s.limit = (size_t)8 * MiB << (cfg >> 2 & 3);
    s.nlogical = cfg & 0x80 ? 2 : 1;
    s.trace = getenv("FUZZ_STREAMS_TRACE") != NULL;
    if (s.trace)
        fprintf(stderr,
                "input: growth %d, vmm %d, %d logical of %zu MiB, history %d, trim %s\n",
                cfg & 1, !(cfg & 2), s.nlogical, s.limit / MiB, !!(cfg & 0x10),
                cfg & 0x20   ? "off"
                : cfg & 0x40 ? "window 0"
                             : "on");
    gpumem_options o;
    gpumem_options_init(&o);
    o.backend = GPUMEM_BACKEND_CUDA;
    if (cfg & 0x20)
        o.flags |= GPUMEM_OPTIONS_NO_TRIM_GROWTH;
    if (known(gpumem_runtime_create(&o, &s.rt), "gpumem_runtime_create") != GPUMEM_OK)
        die("no runtime on the driver double", "gpumem_runtime_create");
    gpumem_logical_device_config limits[2] = {GPUMEM_LOGICAL_DEVICE_LIMIT(s.limit),
                                              GPUMEM_LOGICAL_DEVICE_LIMIT(s.limit)};
    if (known(gpumem_set_logical_device_configuration(s.rt, 0, limits,
                                                      (size_t)s.nlogical),
              "gpumem_set_logical_device_configuration") != GPUMEM_OK ||
        known(gpumem_set_memory_growth(s.rt, 0, cfg & 1), "gpumem_set_memory_growth") !=
            GPUMEM_OK ||
        (cfg & 0x10 &&
         known(gpumem_record_history(s.rt, 64), "gpumem_record_history") != GPUMEM_OK) ||
        known(gpumem_initialize(s.rt), "gpumem_initialize") != GPUMEM_OK)
        die("the configuration was refused", "configuring");

    for (size_t at = 1; at + 4 <= size; at += 4)
        call(&s, data + at);

    for (size_t k = 0; k < FAULTY; k++) /* what is still armed, disarmed */
        (void)fakecuda_fail_nth(faulty[k], 0, 0);
    for (; s.captures; s.captures--) /* captures are the process's: all ended */
        only(gpumem_stream_capture(false), ST(OK), "gpumem_stream_capture");
    for (int k = 0; k < STREAMS; k++)
        fakecuda_release_stream(streams[k]);
    while (s.nlive)
        do_free(&s, s.nlive - 1, PLAIN);
    gpumem_runtime_destroy(s.rt);
    struct fakecuda_live left;
    fakecuda_live(&left);
    if (left.allocations || left.handles || left.mappings || left.reservations ||
        left.context_refs || left.events || fakecuda_misuses())
        die("the driver double still holds something, or saw a misuse",
            "gpumem_runtime_destroy");
    return 0;
}
