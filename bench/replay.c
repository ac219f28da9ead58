/* gpumem-replay: replays an allocation trace (DESIGN.md's format) against one
 * allocator and reports nanoseconds per operation, peaks and failures.
 *
 *   gpumem-replay [--allocator NAME] [--capacity BYTES | --capacity-factor X]
 *                 [--growth] [--repeat N] [--find-min-capacity]
 *                 [--robust-min-capacity] [--json] TRACE
 *
 * The trace is parsed into an array before anything is timed (IDs interned to
 * indices). One untimed replay warms the allocator up, then N timed replays run on
 * the same instance and the median is reported. Every replay ends with nothing
 * allocated: what the trace leaves live is freed, untimed.
 *
 * peak_live_bytes is the trace's own peak of live bytes with each size rounded up
 * to 256 bytes (the alignment of cudaMalloc and of every allocator here), so it is
 * the same for every allocator and capacities are comparable. The capacity
 * defaults to twice that. --find-min-capacity scans upwards, on fresh instances,
 * for the smallest capacity on the grid 1.000, 1.001, ... times peak_live_bytes at
 * which one replay has no failed allocation. --robust-min-capacity also finds the
 * robust minimum capacity (issue 34): the smallest factor f on the same grid from
 * which every point f, f + 0.001, ..., f + 0.100 (f and the next 100 points: every
 * larger pool up to +10% of the peak) replays without a failure, so that an isolated
 * clean point among failing ones (luck in the layout) does not count.
 *
 * The driver's price (allocators that count their driver calls: api, api-cuda and
 * their -async kinds):
 * over the timed replays (with --repeat 0, over the one untimed replay), the
 * calls per 1,000 operations (driver_calls_per_1000_ops, and by entry point in
 * the JSON's driver_calls), the time spent inside them per operation
 * (driver_ns_per_op, as gpumem measured it; per entry point, every one listed,
 * in the JSON's driver_calls with its price_ns), their price per operation by the
 * price list of the driver double (tests/fakecuda/driver_prices.h;
 * GPUMEM_BENCH_PRICES=NAME:NS[:NS_PER_MIB],... overrides entries) and
 * modelled_ns_per_op, the time a GPU would take: ns_per_op with the time inside
 * the driver replaced by the calls' price (ns_per_op - driver_ns_per_op +
 * priced_driver_ns_per_op; the first the median replay's, the others over every
 * timed replay). On a simulated GPU or the double, which answer at once (or
 * nearly: the double's host work), that adds the price; on a real GPU it
 * replaces the driver's own time by the list's (alike when the list is right:
 * bench/run_cuda.sh prints the GPU's price per call to check it by); with
 * FAKECUDA_SPIN, the double's spent price by the same. Replaced, not added to:
 * the measured time holds the time inside the driver already.
 *
 * Under callgrind, the timed replays alone are counted: run with
 * --collect-atstart=no --toggle-collect='bench_op_*'
 * --zero-before=bench_timed_replays_begin. The first two count the allocator's
 * entry points only; the last zeroes the counts when the timed replays begin, so
 * that the untimed replay and the --find-min-capacity scan are left out. What a
 * replay leaves live is freed through each allocator's free_untimed, which is not
 * an entry point, so it is not counted either. */
#include "allocators.h"
#include "bench_version.h"
#include "driver_prices.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NO_HANDLE      UINT64_MAX
#define DEFAULT_FACTOR 2.0
#define MAX_REPEAT     100000
#define MIN_K          1000 /* the grid's points k / 1000, 1.000 to 64.000 */
#define MAX_K          64000
#define ROBUST_SPAN    100 /* the robust measure's window: +10% in 0.1% steps */

enum { OP_ALLOC = 0, OP_FREE = 1 };

struct op {
    uint64_t size; /* OP_ALLOC only */
    uint32_t id;   /* interned index */
    uint32_t kind;
};

struct trace {
    struct op *ops;
    size_t nops, nids;
    uint64_t peak_live; /* sizes rounded to 256 bytes */
    size_t nallocs;
    uint64_t *free_clock; /* per allocation: allocations made before its free */
};

static const struct bench_allocator *const allocators[] = {
    &bench_arena_allocator,          &bench_api_allocator,
    &bench_first_fit_allocator,      &bench_tlsf_allocator,
    &bench_malloc_allocator,         &bench_clairvoyant_allocator,
    &bench_api_cuda_allocator,       &bench_api_async_allocator,
    &bench_api_cuda_async_allocator,
};
#define NUM_ALLOCATORS (sizeof allocators / sizeof allocators[0])

/* ----------------------------------------------------------------- parsing -- */

struct intern {
    char **keys; /* owned copies; NULL = empty */
    uint32_t *vals;
    size_t cap, count;
};

static uint64_t hash_token(const char *s, size_t n)
{
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * UINT64_C(0x100000001b3);
    return h;
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "gpumem-replay: out of host memory\n");
        exit(2);
    }
    return p;
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (!p) {
        fprintf(stderr, "gpumem-replay: out of host memory\n");
        exit(2);
    }
    return p;
}

static void intern_grow(struct intern *t)
{
    size_t cap = t->cap ? t->cap * 2 : 1024;
    char **keys = xcalloc(cap, sizeof *keys);
    uint32_t *vals = xcalloc(cap, sizeof *vals);
    for (size_t i = 0; i < t->cap; i++) {
        if (!t->keys[i])
            continue;
        size_t j = (size_t)hash_token(t->keys[i], strlen(t->keys[i])) & (cap - 1);
        while (keys[j])
            j = (j + 1) & (cap - 1);
        keys[j] = t->keys[i];
        vals[j] = t->vals[i];
    }
    free(t->keys);
    free(t->vals);
    t->keys = keys;
    t->vals = vals;
    t->cap = cap;
}

/* The index of token s[0..n), a new one if `create`; UINT32_MAX if unknown. */
static uint32_t intern(struct intern *t, const char *s, size_t n, bool create)
{
    if ((t->count + 1) * 2 > t->cap)
        intern_grow(t);
    size_t j = (size_t)hash_token(s, n) & (t->cap - 1);
    while (t->keys[j]) {
        if (strncmp(t->keys[j], s, n) == 0 && t->keys[j][n] == '\0')
            return t->vals[j];
        j = (j + 1) & (t->cap - 1);
    }
    if (!create)
        return UINT32_MAX;
    char *k = xmalloc(n + 1);
    memcpy(k, s, n);
    k[n] = '\0';
    t->keys[j] = k;
    t->vals[j] = (uint32_t)t->count;
    return (uint32_t)t->count++;
}

static void intern_free(struct intern *t)
{
    for (size_t i = 0; i < t->cap; i++)
        free(t->keys[i]);
    free(t->keys);
    free(t->vals);
}

static const char *skip_space(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\r')
        p++;
    return p;
}

static const char *token_end(const char *p)
{
    while (*p && *p != ' ' && *p != '\t' && *p != '\r' && *p != '\n' && *p != '#')
        p++;
    return p;
}

static bool load_trace(const char *path, struct trace *tr)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "gpumem-replay: %s: %s\n", path, strerror(errno));
        return false;
    }
    size_t cap = 1 << 16, len = 0;
    char *text = xmalloc(cap);
    size_t got;
    while ((got = fread(text + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (cap - len - 1 == 0) {
            cap *= 2;
            char *t = realloc(text, cap);
            if (!t) {
                fprintf(stderr, "gpumem-replay: out of host memory\n");
                exit(2);
            }
            text = t;
        }
    }
    int read_error = ferror(f) ? errno : 0;
    fclose(f);
    if (read_error) { /* a directory, say: fopen succeeds, read(2) does not */
        fprintf(stderr, "gpumem-replay: %s: %s\n", path, strerror(read_error));
        free(text);
        return false;
    }
    const char *nul = memchr(text, '\0', len);
    if (nul) { /* the parser below would stop there and drop the rest */
        size_t at = 1;
        for (const char *c = text; c < nul; c++)
            at += *c == '\n';
        fprintf(stderr, "gpumem-replay: %s:%zu: a NUL byte; a trace is text\n", path, at);
        free(text);
        return false;
    }
    text[len] = '\0';

    size_t ocap = 1024, nops = 0, line = 0;
    struct op *ops = xmalloc(ocap * sizeof *ops);
    struct intern ids = {NULL, NULL, 0, 0};
    uint64_t *live = NULL; /* rounded size per id while live, 0 when not */
    size_t live_cap = 0;
    uint64_t cur = 0, peak = 0;
    size_t nallocs = 0;
    bool ok = true;
    for (char *p = text; *p && ok; line++) {
        char *eol = strchr(p, '\n');
        if (eol)
            *eol = '\0';
        const char *q = skip_space(p);
        if (*q && *q != '#') {
            char kind = *q;
            const char *ide = NULL, *ids_ = skip_space(q + 1);
            if ((kind != 'a' && kind != 'f') || (q[1] != ' ' && q[1] != '\t'))
                goto bad;
            ide = token_end(ids_);
            if (ide == ids_)
                goto bad;
            if (nops == ocap) {
                ocap *= 2;
                struct op *t = realloc(ops, ocap * sizeof *ops);
                if (!t) {
                    fprintf(stderr, "gpumem-replay: out of host memory\n");
                    exit(2);
                }
                ops = t;
            }
            uint32_t id = intern(&ids, ids_, (size_t)(ide - ids_), kind == 'a');
            if (id == UINT32_MAX) {
                fprintf(stderr, "gpumem-replay: %s:%zu: free of unknown ID\n", path,
                        line + 1);
                ok = false;
                break;
            }
            if (id >= live_cap) {
                size_t nc = live_cap ? live_cap * 2 : 1024;
                uint64_t *t = realloc(live, nc * sizeof *t);
                if (!t) {
                    fprintf(stderr, "gpumem-replay: out of host memory\n");
                    exit(2);
                }
                memset(t + live_cap, 0, (nc - live_cap) * sizeof *t);
                live = t;
                live_cap = nc;
            }
            const char *r = skip_space(ide);
            if (kind == 'a') {
                char *end;
                errno = 0;
                unsigned long long size = strtoull(r, &end, 10);
                if (errno == ERANGE && isdigit((unsigned char)*r)) {
                    fprintf(stderr,
                            "gpumem-replay: %s:%zu: size %.*s is past 2^64 - 1 bytes\n",
                            path, line + 1, (int)(token_end(r) - r), r);
                    ok = false;
                    break;
                }
                if (end == r || errno || (*skip_space(end) && *skip_space(end) != '#') ||
                    !isdigit((unsigned char)*r))
                    goto bad;
                if (live[id]) {
                    fprintf(stderr, "gpumem-replay: %s:%zu: ID allocated twice\n", path,
                            line + 1);
                    ok = false;
                    break;
                }
                uint64_t rounded =
                    size <= 256 ? 256 : ((uint64_t)size + 255) & ~UINT64_C(255);
                if (rounded < size || cur > UINT64_MAX - rounded) { /* wrapped */
                    fprintf(stderr,
                            "gpumem-replay: %s:%zu: size %llu takes the live bytes "
                            "past 2^64\n",
                            path, line + 1, size);
                    ok = false;
                    break;
                }
                live[id] = rounded;
                cur += rounded;
                if (cur > peak)
                    peak = cur;
                nallocs++;
                ops[nops++] = (struct op){(uint64_t)size, id, OP_ALLOC};
            } else {
                if (*r && *r != '#')
                    goto bad;
                if (!live[id]) {
                    fprintf(stderr, "gpumem-replay: %s:%zu: free of an ID not live\n",
                            path, line + 1);
                    ok = false;
                    break;
                }
                cur -= live[id];
                live[id] = 0;
                ops[nops++] = (struct op){0, id, OP_FREE};
            }
        }
        if (!eol)
            break;
        p = eol + 1;
        continue;
    bad:
        fprintf(stderr, "gpumem-replay: %s:%zu: expected 'a ID SIZE' or 'f ID'\n", path,
                line + 1);
        ok = false;
    }
    free(text);
    free(live);
    tr->ops = ops;
    tr->nops = nops;
    tr->nids = ids.count;
    tr->peak_live = peak;
    tr->nallocs = nallocs;
    tr->free_clock = NULL; /* lifetimes() fills it for the allocator that uses it */
    intern_free(&ids);
    if (ok && nops == 0) {
        fprintf(stderr, "gpumem-replay: %s: no operations\n", path);
        ok = false;
    }
    return ok;
}

/* Every allocation's lifetime, for the clairvoyant baseline: free_clock[k] is the
 * number of allocations the trace makes before allocation k is freed, UINT64_MAX
 * if it never is. */
static void lifetimes(struct trace *tr)
{
    size_t *open = xmalloc(tr->nids * sizeof *open);
    tr->free_clock = xmalloc(tr->nallocs * sizeof *tr->free_clock);
    size_t k = 0;
    for (size_t i = 0; i < tr->nops; i++) {
        const struct op *o = &tr->ops[i];
        if (o->kind == OP_ALLOC) {
            tr->free_clock[k] = UINT64_MAX;
            open[o->id] = k++;
        } else {
            tr->free_clock[open[o->id]] = k;
        }
    }
    free(open);
}

/* ------------------------------------------------------------------ replay -- */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One pass over the trace; returns the number of failed allocations. With
 * stop_at_failure, returns at the first one. Live handles stay in handles[]. */
static size_t replay_once(const struct bench_allocator *A, void *ctx,
                          const struct trace *tr, uint64_t *handles, bool stop_at_failure)
{
    size_t failures = 0;
    int (*alloc)(void *, uint64_t, uint64_t *) = A->alloc;
    void (*release)(void *, uint64_t) = A->free;
    for (size_t i = 0; i < tr->nops; i++) {
        const struct op *o = &tr->ops[i];
        if (o->kind == OP_ALLOC) {
            if (alloc(ctx, o->size, &handles[o->id]) != 0) {
                handles[o->id] = NO_HANDLE;
                failures++;
                if (stop_at_failure)
                    break;
            }
        } else if (handles[o->id] != NO_HANDLE) {
            release(ctx, handles[o->id]);
            handles[o->id] = NO_HANDLE;
        }
    }
    return failures;
}

/* Frees what a replay left live (a trace that does not free everything, or a run
 * cut short), outside the clock and outside the entry points callgrind counts. */
static void free_leftovers(const struct bench_allocator *A, void *ctx,
                           const struct trace *tr, uint64_t *handles)
{
    for (size_t id = 0; id < tr->nids; id++) {
        if (handles[id] != NO_HANDLE) {
            A->free_untimed(ctx, handles[id]);
            handles[id] = NO_HANDLE;
        }
    }
}

static int cmp_u64(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

/* factor times peak_live, rounded up to 256 bytes; in long double, whose 64-bit
 * mantissa (x86) holds any peak exactly, so that factor 1 is never below it. */
static uint64_t capacity_for(double factor, uint64_t peak_live)
{
    long double c = ceill((long double)factor * (long double)peak_live / 256.0L) * 256.0L;
    return c >= 18446744073709551360.0L ? UINT64_MAX & ~UINT64_C(255) : (uint64_t)c;
}

/* Where the timed replays begin: callgrind's --zero-before names it (see the top
 * of the file). The empty asm keeps the call from being optimized away. */
BENCH_ENTRY void bench_timed_replays_begin(void);
BENCH_ENTRY void bench_timed_replays_begin(void)
{
#if defined(__GNUC__)
    __asm__ volatile("" ::: "memory");
#endif
}

/* Whether one replay at this capacity has no failure (a fresh instance). */
static int runs_clean(const struct bench_allocator *A, const struct trace *tr,
                      uint64_t *handles, uint64_t capacity, bool growth)
{
    struct bench_config cfg = {capacity, growth, tr->free_clock, tr->nallocs};
    void *ctx = A->create(&cfg);
    if (!ctx)
        return -1;
    size_t failures = replay_once(A, ctx, tr, handles, true);
    free_leftovers(A, ctx, tr, handles);
    A->destroy(ctx);
    return failures == 0;
}

/* The smallest factor on the 0.1% grid (1.000, 1.001, ...) with a clean run; NAN
 * if none up to 64x. Whether a capacity runs clean is not monotonic (a slightly
 * larger pool lays chunks out differently from the first split on and may fail
 * where a smaller one did not), so bisection can return a capacity above the
 * smallest clean one. This scans the grid upwards instead, one fresh instance per
 * point: the definition itself. A failing replay stops at its first failure, so
 * the points below the answer are cheap. Points are k/1000 for integer k, so no
 * rounding error accumulates. */
static double find_min_factor(const struct bench_allocator *A, const struct trace *tr,
                              uint64_t *handles, bool growth)
{
    for (long k = MIN_K; k <= MAX_K; k++) {
        double f = (double)k / 1000.0;
        int r = runs_clean(A, tr, handles, capacity_for(f, tr->peak_live), growth);
        if (r < 0)
            return NAN;
        if (r)
            return f;
    }
    return NAN;
}

/* The robust minimum factor: the smallest k/1000 such that every point k, k + 1,
 * ..., k + ROBUST_SPAN runs clean; NAN if none with k + ROBUST_SPAN up to 64x.
 * `from` is the plain minimum (no point below it runs clean, so none can start the
 * window). Each window is tested from its top down: a failure at j rules out every
 * start up to j (all their windows hold j), so the next window starts at j + 1, and
 * the clean points above j are remembered rather than replayed again. Every point is
 * replayed at most once, and the points below the highest failure of a window are
 * never replayed. */
static double find_robust_factor(const struct bench_allocator *A, const struct trace *tr,
                                 uint64_t *handles, bool growth, double from)
{
    if (isnan(from))
        return NAN;
    unsigned char *clean = calloc(MAX_K + 1, 1); /* 1: point k replayed clean */
    if (!clean)
        return NAN;
    double out = NAN;
    for (long start = lround(from * 1000.0); start + ROBUST_SPAN <= MAX_K;) {
        long j = start + ROBUST_SPAN;
        for (; j >= start; j--) {
            if (clean[j])
                continue;
            double f = (double)j / 1000.0;
            int r = runs_clean(A, tr, handles, capacity_for(f, tr->peak_live), growth);
            if (r < 0)
                goto done;
            if (!r)
                break;
            clean[j] = 1;
        }
        if (j < start) {
            out = (double)start / 1000.0;
            break;
        }
        start = j + 1;
    }
done:
    free(clean);
    return out;
}

/* ----------------------------------------------------------- driver calls -- */

/* The driver calls made in a stretch of replays, and what they cost. */
struct driver_window {
    struct bench_driver_calls total;     /* per entry point, over the stretch */
    double price_of[BENCH_DRIVER_KINDS]; /* per entry point: the list's price */
    uint64_t calls, ns;                  /* all of them, and the time inside them */
    double price;                        /* their price by the list, in ns */
};

static void read_driver_calls(const struct bench_allocator *A, void *ctx,
                              struct bench_driver_calls *out)
{
    out->n = 0;
    if (A->driver_calls)
        A->driver_calls(ctx, out);
}

/* Adds the calls made between readings a and b (the same entry points, in the
 * same order) to w, priced by `prices`. */
static void add_driver_calls(struct driver_window *w, const struct bench_driver_calls *a,
                             const struct bench_driver_calls *b,
                             const struct driver_prices *prices)
{
    w->total.n = b->n;
    for (size_t i = 0; i < b->n; i++) {
        uint64_t calls = b->e[i].calls - (i < a->n ? a->e[i].calls : 0);
        uint64_t spent = b->e[i].ns - (i < a->n ? a->e[i].ns : 0);
        uint64_t bytes = b->e[i].bytes - (i < a->n ? a->e[i].bytes : 0);
        const struct driver_price *p = driver_price_of(prices, b->e[i].name);
        if (!p) {
            fprintf(stderr, "gpumem-replay: the price list has no %s\n", b->e[i].name);
            exit(2);
        }
        memcpy(w->total.e[i].name, b->e[i].name, sizeof w->total.e[i].name);
        w->total.e[i].calls += calls;
        w->total.e[i].ns += spent;
        w->total.e[i].bytes += bytes;
        w->price_of[i] += driver_price_ns(p, calls, bytes);
        w->calls += calls;
        w->ns += spent;
        w->price += driver_price_ns(p, calls, bytes);
    }
}

/* v with `digits` decimals, or null for NAN. */
static void json_number(double v, int digits)
{
    if (isnan(v))
        printf("null");
    else
        printf("%.*f", digits, v);
}

/* ------------------------------------------------------------------- main -- */

static void usage(FILE *f)
{
    fprintf(f, "usage: gpumem-replay [--allocator NAME] [--capacity BYTES | "
               "--capacity-factor X]\n"
               "                     [--growth] [--repeat N] [--find-min-capacity]\n"
               "                     [--robust-min-capacity] [--json] TRACE\n\n"
               "  --allocator NAME     one of:\n");
    for (size_t i = 0; i < NUM_ALLOCATORS; i++)
        fprintf(f, "                         %-11s %s%s\n", allocators[i]->name,
                allocators[i]->about, i == 0 ? " (default)" : "");
    fprintf(
        f,
        "  --capacity BYTES     the pool's size (api: the logical device's limit)\n"
        "  --capacity-factor X  the capacity as X times the trace's peak live bytes "
        "(default %.1f)\n"
        "  --growth             api: grow on demand up to the capacity instead of "
        "reserving it\n"
        "  --repeat N           timed replays after the untimed one (default 5); "
        "the median counts\n"
        "  --find-min-capacity  also scan for the smallest capacity without a failed "
        "allocation\n"
        "  --robust-min-capacity  also the smallest capacity from which every larger "
        "one\n"
        "                       up to +10%% of the peak (0.1%% steps) has none (implies "
        "the scan)\n"
        "  --json               one JSON object instead of the tab-separated line\n"
        "\nGPUMEM_BENCH_PRICES=NAME:NS[:NS_PER_MIB],... overrides the driver's price "
        "list\n(api, api-cuda, api-async, api-cuda-async: driver calls per 1,000 "
        "operations and modelled ns per "
        "operation).\n",
        DEFAULT_FACTOR);
}

static void print_header(FILE *f)
{
    fprintf(f, "# gpumem-replay %s, compiler %s, build type %s%s\n", BENCH_GIT_REVISION,
            BENCH_COMPILER, BENCH_BUILD_TYPE,
#if defined(__OPTIMIZE__)
            ""
#else
            ", NOT OPTIMIZED"
#endif
    );
}

/* The length of the well-formed UTF-8 sequence at s (RFC 3629: no overlong
 * forms, no surrogates, nothing past U+10FFFF), or 0. */
static size_t utf8_length(const unsigned char *s)
{
    unsigned char c = s[0];
    size_t n;
    unsigned char lo = 0x80, hi = 0xBF; /* the second byte's range */
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    } else {
        return 0;
    }
    if (s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (s[i] < 0x80 || s[i] > 0xBF)
            return 0;
    return n;
}

/* s as a JSON string: valid UTF-8 whatever the bytes (a file name may hold any),
 * each byte that does not belong to a well-formed sequence written as U+FFFD. */
static void json_string(const char *text)
{
    const unsigned char *s = (const unsigned char *)text;
    putchar('"');
    while (*s) {
        if (*s == '"' || *s == '\\') {
            printf("\\%c", *s++);
        } else if (*s < 0x20) {
            printf("\\u%04x", *s++);
        } else if (*s < 0x80) {
            putchar(*s++);
        } else {
            size_t n = utf8_length(s);
            if (n) {
                fwrite(s, 1, n, stdout);
                s += n;
            } else {
                fputs("\\ufffd", stdout);
                s++;
            }
        }
    }
    putchar('"');
}

int main(int argc, char **argv)
{
    const char *name = "arena", *path = NULL;
    double factor = DEFAULT_FACTOR;
    uint64_t capacity = 0;
    bool have_capacity = false, have_factor = false, growth = false, find_min = false,
         find_robust = false, json = false;
    long repeat = 5;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool more = i + 1 < argc;
        if (strcmp(a, "--allocator") == 0 && more) {
            name = argv[++i];
        } else if (strcmp(a, "--capacity") == 0 && more) {
            char *end;
            errno = 0;
            capacity = strtoull(argv[++i], &end, 10);
            if (*end || errno || !isdigit((unsigned char)argv[i][0]) || capacity < 256) {
                fprintf(stderr,
                        "gpumem-replay: --capacity wants bytes (>= 256), not '%s'\n",
                        argv[i]);
                return 2;
            }
            have_capacity = true;
        } else if (strcmp(a, "--capacity-factor") == 0 && more) {
            char *end;
            factor = strtod(argv[++i], &end);
            if (*end || !(factor > 0) || factor > 1e6) {
                fprintf(stderr,
                        "gpumem-replay: --capacity-factor wants a positive number, "
                        "not '%s'\n",
                        argv[i]);
                return 2;
            }
            have_factor = true;
        } else if (strcmp(a, "--repeat") == 0 && more) {
            char *end;
            repeat = strtol(argv[++i], &end, 10);
            if (*end || !isdigit((unsigned char)argv[i][0]) || repeat > MAX_REPEAT) {
                fprintf(stderr, "gpumem-replay: --repeat wants 0..%d, not '%s'\n",
                        MAX_REPEAT, argv[i]);
                return 2;
            }
        } else if (strcmp(a, "--growth") == 0) {
            growth = true;
        } else if (strcmp(a, "--find-min-capacity") == 0) {
            find_min = true;
        } else if (strcmp(a, "--robust-min-capacity") == 0) {
            find_min = find_robust = true;
        } else if (strcmp(a, "--json") == 0) {
            json = true;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (a[0] == '-' || path) {
            fprintf(stderr, "gpumem-replay: unexpected argument '%s'\n", a);
            usage(stderr);
            return 2;
        } else {
            path = a;
        }
    }
    if (!path) {
        usage(stderr);
        return 2;
    }
    struct driver_prices prices;
    driver_prices_default(&prices);
    const char *price_spec = getenv("GPUMEM_BENCH_PRICES");
    char price_error[256];
    if (price_spec && *price_spec &&
        driver_prices_parse(&prices, price_spec, price_error, sizeof price_error) != 0) {
        fprintf(stderr, "gpumem-replay: GPUMEM_BENCH_PRICES: %s\n", price_error);
        return 2;
    }
    if (have_capacity && have_factor) {
        fprintf(stderr,
                "gpumem-replay: --capacity and --capacity-factor exclude each other\n");
        return 2;
    }
    const struct bench_allocator *A = NULL;
    for (size_t i = 0; i < NUM_ALLOCATORS; i++)
        if (strcmp(allocators[i]->name, name) == 0)
            A = allocators[i];
    if (!A) {
        fprintf(stderr, "gpumem-replay: unknown allocator '%s'\n", name);
        usage(stderr);
        return 2;
    }
    if (growth && !A->has_growth) {
        fprintf(stderr, "gpumem-replay: allocator '%s' has no growth mode\n", A->name);
        return 2;
    }
#if !defined(__OPTIMIZE__)
    fprintf(stderr,
            "\n*** gpumem-replay was built WITHOUT OPTIMIZATION: its timings mean "
            "nothing. ***\n*** Use a build with -Dbuildtype=release. ***\n\n");
#endif

    struct trace tr;
    if (!load_trace(path, &tr))
        return 2;
    if (A == &bench_clairvoyant_allocator) /* the only one given the future */
        lifetimes(&tr);
    if (!have_capacity)
        capacity = capacity_for(factor, tr.peak_live);
    uint64_t *handles = xmalloc(tr.nids * sizeof *handles);
    for (size_t i = 0; i < tr.nids; i++)
        handles[i] = NO_HANDLE;

    double min_factor = NAN, robust_factor = NAN;
    if (find_min && A->has_capacity)
        min_factor = find_min_factor(A, &tr, handles, growth);
    if (find_robust && A->has_capacity)
        robust_factor = find_robust_factor(A, &tr, handles, growth, min_factor);

    struct bench_config cfg = {capacity, growth, tr.free_clock, tr.nallocs};
    void *ctx = A->create(&cfg);
    if (!ctx)
        return 1;
    /* the driver's window: the timed replays, or the untimed one without them;
     * each reading is taken outside the clock, the frees of leftovers outside
     * the window */
    static struct driver_window window;
    static struct bench_driver_calls before, after;
    read_driver_calls(A, ctx, &before);
    size_t failures = replay_once(A, ctx, &tr, handles, false);
    if (repeat == 0) {
        read_driver_calls(A, ctx, &after);
        add_driver_calls(&window, &before, &after, &prices);
    }
    free_leftovers(A, ctx, &tr, handles);
    uint64_t *times = xmalloc((size_t)(repeat ? repeat : 1) * sizeof *times);
    bench_timed_replays_begin();
    for (long r = 0; r < repeat; r++) {
        read_driver_calls(A, ctx, &before);
        uint64_t t0 = now_ns();
        replay_once(A, ctx, &tr, handles, false);
        times[r] = now_ns() - t0;
        read_driver_calls(A, ctx, &after);
        add_driver_calls(&window, &before, &after, &prices);
        free_leftovers(A, ctx, &tr, handles);
    }
    double ns_per_op = NAN;
    if (repeat) {
        qsort(times, (size_t)repeat, sizeof *times, cmp_u64);
        double med =
            repeat % 2 ? (double)times[repeat / 2]
                       : ((double)times[repeat / 2 - 1] + (double)times[repeat / 2]) / 2;
        ns_per_op = med / (double)tr.nops;
    }
    /* per operation of the window; NAN (null, "-") when the allocator counts none */
    bool counted = A->driver_calls != NULL;
    double window_ops = (double)tr.nops * (double)(repeat ? repeat : 1);
    double calls_per_1000 = counted ? 1000.0 * (double)window.calls / window_ops : NAN;
    double driver_ns = counted ? (double)window.ns / window_ops : NAN;
    double priced_ns = counted ? window.price / window_ops : NAN;
    double modelled_ns = counted ? ns_per_op - driver_ns + priced_ns : NAN;
    struct bench_stats st;
    A->stats(ctx, &st);
    A->destroy(ctx);
    /* 0: not tracked; a fixed pool (the baselines) holds its whole capacity from
     * the start, and malloc's figure stays unknown (null, "-") */
    uint64_t reserved = st.peak_reserved;
    if (!reserved && A->has_capacity && !growth)
        reserved = capacity;

    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    char tname[256];
    snprintf(tname, sizeof tname, "%s", base);
    char *dot = strstr(tname, ".trace");
    if (dot && dot[6] == '\0')
        *dot = '\0';

    if (json) {
        printf("{\"trace\": ");
        json_string(tname);
        printf(", \"allocator\": ");
        json_string(A->name);
        printf(", \"ops\": %zu, \"ns_per_op\": ", tr.nops);
        if (isnan(ns_per_op))
            printf("null");
        else
            printf("%.2f", ns_per_op);
        printf(", \"peak_live_bytes\": %llu, \"peak_reserved_bytes\": ",
               (unsigned long long)tr.peak_live);
        if (reserved)
            printf("%llu", (unsigned long long)reserved);
        else
            printf("null");
        printf(", \"failures\": %zu, \"capacity_bytes\": ", failures);
        if (A->has_capacity)
            printf("%llu", (unsigned long long)capacity);
        else
            printf("null");
        printf(", \"min_capacity_factor\": ");
        if (isnan(min_factor))
            printf("null");
        else
            printf("%.4f", min_factor);
        printf(", \"robust_min_capacity_factor\": ");
        json_number(robust_factor, 4);
        printf(", \"growth\": %s, \"repeat\": %ld, \"metadata_bytes\": %llu",
               growth ? "true" : "false", repeat, (unsigned long long)st.metadata_bytes);
        printf(", \"driver_calls_per_1000_ops\": ");
        json_number(calls_per_1000, 3);
        printf(", \"driver_ns_per_op\": ");
        json_number(driver_ns, 2);
        printf(", \"priced_driver_ns_per_op\": ");
        json_number(priced_ns, 2);
        printf(", \"modelled_ns_per_op\": ");
        json_number(modelled_ns, 2);
        printf(", \"driver_ops\": ");
        if (counted)
            printf("%.0f", window_ops);
        else
            printf("null");
        printf(", \"driver_calls\": ");
        if (counted) {
            /* every entry point, in gpumem's order: the window's calls, the time
             * inside them, their bytes and their price by the list */
            printf("{");
            for (size_t i = 0; i < window.total.n; i++) {
                printf("%s", i ? ", " : "");
                json_string(window.total.e[i].name);
                printf(": {\"calls\": %llu, \"ns\": %llu, \"bytes\": %llu, "
                       "\"price_ns\": %.0f}",
                       (unsigned long long)window.total.e[i].calls,
                       (unsigned long long)window.total.e[i].ns,
                       (unsigned long long)window.total.e[i].bytes, window.price_of[i]);
            }
            printf("}");
        } else {
            printf("null");
        }
        printf(", \"prices\": ");
        json_string(price_spec && *price_spec ? price_spec : "default");
        printf(", \"revision\": ");
        json_string(BENCH_GIT_REVISION);
        printf(", \"build_type\": ");
        json_string(BENCH_BUILD_TYPE);
        printf(", \"compiler\": ");
        json_string(BENCH_COMPILER);
        printf(", \"optimized\": %s}\n",
#if defined(__OPTIMIZE__)
               "true"
#else
               "false"
#endif
        );
    } else {
        print_header(stdout);
        printf("trace\tallocator\tops\tns_per_op\tpeak_live_bytes\tpeak_reserved_bytes\t"
               "failures_at_capacity\tcapacity_bytes\tmin_capacity_factor\t"
               "driver_calls_per_1000_ops\tmodelled_ns_per_op\n");
        /* "-" where the JSON says null: no timed replay, no capacity, no scan */
        printf("%s\t%s\t%zu\t", tname, A->name, tr.nops);
        if (isnan(ns_per_op))
            printf("-\t");
        else
            printf("%.2f\t", ns_per_op);
        printf("%llu\t", (unsigned long long)tr.peak_live);
        if (reserved)
            printf("%llu\t", (unsigned long long)reserved);
        else
            printf("-\t");
        printf("%zu\t", failures);
        if (A->has_capacity)
            printf("%llu\t", (unsigned long long)capacity);
        else
            printf("-\t");
        if (isnan(min_factor))
            printf("-\t");
        else
            printf("%.4f\t", min_factor);
        if (isnan(calls_per_1000))
            printf("-\t");
        else
            printf("%.3f\t", calls_per_1000);
        if (isnan(modelled_ns))
            printf("-\n");
        else
            printf("%.2f\n", modelled_ns);
    }
    free(times);
    free(handles);
    free(tr.ops);
    free(tr.free_clock);
    return 0;
}
