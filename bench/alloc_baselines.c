/* Baselines written for the bench.
 *
 * first-fit: address-ordered first fit over a list, in the manner of CNMeM and
 *            of textbook allocators: every block (free or used) in one list in
 *            address order, the free blocks in a second list also in address
 *            order; an allocation scans the free list from the lowest address and
 *            takes the low end of the first block that holds the request; a free
 *            finds its block through a hash table, coalesces with both neighbours
 *            and, when neither was free, walks left to its place in the free list.
 *            Sizes round up to 256 bytes, as in the arena. Metadata out of band.
 * clairvoyant: the same lists, with a placement that knows the future (below): a
 *            reference for how much capacity any placement could save on a trace,
 *            not an allocator anyone could build.
 * tlsf:      two-level segregated fit (below), the structure of AMD VMA's virtual
 *            blocks, as a peer on the same traces.
 * malloc:    the host's malloc/free, as a speed reference only: the capacity is
 *            not enforced and the memory is host memory. */
#include "allocators.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FF_GRANULE           256u
#define FF_BASE              (UINT64_C(1) << 40)
#define FF_RECORDS_PER_BLOCK 4096

struct ff_block {
    uint64_t addr, size;
    struct ff_block *prev, *next;   /* all blocks, address order; NULL at the ends */
    struct ff_block *fprev, *fnext; /* free blocks, address order */
    int is_free;
    uint64_t dies; /* clairvoyant, used blocks: the allocation clock at its free */
};

struct ff_slot {
    uint64_t addr;
    struct ff_block *b; /* NULL: empty */
};

struct ff_chunk_of_records {
    struct ff_chunk_of_records *next;
    struct ff_block recs[FF_RECORDS_PER_BLOCK];
};

struct first_fit {
    struct ff_block *free_head; /* lowest free block */
    struct ff_block *spare;     /* unused records, linked by next */
    struct ff_chunk_of_records *chunks;
    struct ff_slot *live; /* open addressing, linear probing */
    size_t live_cap, live_count;
    unsigned live_shift;
    uint64_t metadata_bytes;
    /* clairvoyant only: the replay's lifetimes (bench_config) and its clock */
    const uint64_t *free_clock;
    size_t nallocs;
    uint64_t clock;
};

static struct ff_block *ff_take(struct first_fit *f)
{
    if (!f->spare) {
        struct ff_chunk_of_records *c = malloc(sizeof *c);
        if (!c)
            return NULL;
        f->metadata_bytes += sizeof *c;
        c->next = f->chunks;
        f->chunks = c;
        for (size_t i = 0; i < FF_RECORDS_PER_BLOCK; i++) {
            c->recs[i].next = f->spare;
            f->spare = &c->recs[i];
        }
    }
    struct ff_block *b = f->spare;
    f->spare = b->next;
    return b;
}

static void ff_put(struct first_fit *f, struct ff_block *b)
{
    b->next = f->spare;
    f->spare = b;
}

static size_t ff_home(const struct first_fit *f, uint64_t addr)
{
    return (size_t)(((addr >> 8) * UINT64_C(0x9E3779B97F4A7C15)) >> f->live_shift);
}

static void ff_insert_live(struct first_fit *f, struct ff_block *b)
{
    size_t mask = f->live_cap - 1, i = ff_home(f, b->addr);
    while (f->live[i].b)
        i = (i + 1) & mask;
    f->live[i].addr = b->addr;
    f->live[i].b = b;
    f->live_count++;
}

static int ff_grow_live(struct first_fit *f)
{
    if ((f->live_count + 1) * 2 <= f->live_cap)
        return 0;
    size_t cap = f->live_cap ? f->live_cap * 2 : 64;
    struct ff_slot *t = calloc(cap, sizeof *t), *old = f->live;
    if (!t)
        return -1;
    size_t old_cap = f->live_cap;
    f->metadata_bytes += (cap - old_cap) * sizeof *t;
    f->live = t;
    f->live_cap = cap;
    f->live_shift = 64 - (unsigned)__builtin_ctzll(cap);
    f->live_count = 0;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].b)
            ff_insert_live(f, old[i].b);
    free(old);
    return 0;
}

static struct ff_block *ff_remove_live(struct first_fit *f, uint64_t addr)
{
    if (!f->live_cap)
        return NULL;
    size_t mask = f->live_cap - 1, i = ff_home(f, addr);
    while (f->live[i].b && f->live[i].addr != addr)
        i = (i + 1) & mask;
    struct ff_block *b = f->live[i].b;
    if (!b)
        return NULL;
    for (size_t j = (i + 1) & mask; f->live[j].b; j = (j + 1) & mask) {
        size_t home = ff_home(f, f->live[j].addr);
        if (((j - home) & mask) >= ((j - i) & mask)) {
            f->live[i] = f->live[j];
            i = j;
        }
    }
    f->live[i].b = NULL;
    f->live_count--;
    return b;
}

static void *ff_create(const struct bench_config *cfg)
{
    struct first_fit *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->metadata_bytes = sizeof *f;
    uint64_t cap = cfg->capacity & ~(uint64_t)(FF_GRANULE - 1);
    if (cap) {
        struct ff_block *b = ff_take(f);
        if (!b) {
            free(f);
            return NULL;
        }
        *b = (struct ff_block){FF_BASE, cap, NULL, NULL, NULL, NULL, 1, 0};
        f->free_head = b;
    }
    f->free_clock = cfg->free_clock;
    f->nallocs = cfg->nallocs;
    return f;
}

static void ff_destroy(void *ctx)
{
    struct first_fit *f = ctx;
    while (f->chunks) {
        struct ff_chunk_of_records *c = f->chunks;
        f->chunks = c->next;
        free(c);
    }
    free(f->live);
    free(f);
}

/* Puts b (free) in the free list in place of `old` (free, leaving it). */
static void ff_replace_free(struct first_fit *f, struct ff_block *old, struct ff_block *b)
{
    b->fprev = old->fprev;
    b->fnext = old->fnext;
    if (b->fprev)
        b->fprev->fnext = b;
    else
        f->free_head = b;
    if (b->fnext)
        b->fnext->fprev = b;
}

static void ff_unlink_free(struct first_fit *f, struct ff_block *b)
{
    if (b->fprev)
        b->fprev->fnext = b->fnext;
    else
        f->free_head = b->fnext;
    if (b->fnext)
        b->fnext->fprev = b->fprev;
}

/* Puts r right after b in the list of all blocks. */
static void ff_link_after(struct ff_block *b, struct ff_block *r)
{
    r->prev = b;
    r->next = b->next;
    if (b->next)
        b->next->prev = r;
    b->next = r;
}

/* size rounded up to the granule; 0 if that overflows */
static uint64_t ff_round(uint64_t size)
{
    if (size > UINT64_MAX - (FF_GRANULE - 1))
        return 0;
    return size <= FF_GRANULE ? FF_GRANULE
                              : (size + FF_GRANULE - 1) & ~(uint64_t)(FF_GRANULE - 1);
}

BENCH_ENTRY static int bench_op_first_fit_alloc(void *ctx, uint64_t size,
                                                uint64_t *handle)
{
    struct first_fit *f = ctx;
    uint64_t need = ff_round(size);
    if (!need)
        return 1;
    struct ff_block *b = f->free_head;
    while (b && b->size < need)
        b = b->fnext;
    if (!b || ff_grow_live(f) != 0)
        return 1;
    if (b->size > need) {
        struct ff_block *r = ff_take(f);
        if (!r)
            return 1;
        r->addr = b->addr + need;
        r->size = b->size - need;
        r->is_free = 1;
        ff_link_after(b, r);
        ff_replace_free(f, b, r);
        b->size = need;
    } else {
        ff_unlink_free(f, b);
    }
    b->is_free = 0;
    ff_insert_live(f, b);
    *handle = b->addr;
    return 0;
}

static void ff_free(void *ctx, uint64_t handle)
{
    struct first_fit *f = ctx;
    struct ff_block *b = ff_remove_live(f, handle);
    if (!b)
        return;
    struct ff_block *p = b->prev, *n = b->next;
    b->is_free = 1;
    if (p && p->is_free) {
        /* p is in the free list already: b joins it */
        p->size += b->size;
        p->next = n;
        if (n)
            n->prev = p;
        ff_put(f, b);
        b = p;
        if (n && n->is_free) {
            b->size += n->size;
            b->next = n->next;
            if (n->next)
                n->next->prev = b;
            ff_unlink_free(f, n);
            ff_put(f, n);
        }
        return;
    }
    if (n && n->is_free) {
        /* b takes n's place in the free list */
        b->size += n->size;
        b->next = n->next;
        if (n->next)
            n->next->prev = b;
        ff_replace_free(f, n, b);
        ff_put(f, n);
        return;
    }
    /* neither neighbour is free: the nearest free block to the left is found by
     * walking the used blocks (CNMeM-like cost) */
    struct ff_block *l = p;
    while (l && !l->is_free)
        l = l->prev;
    b->fprev = l;
    b->fnext = l ? l->fnext : f->free_head;
    if (l)
        l->fnext = b;
    else
        f->free_head = b;
    if (b->fnext)
        b->fnext->fprev = b;
}

BENCH_ENTRY static void bench_op_first_fit_free(void *ctx, uint64_t handle)
{
    ff_free(ctx, handle);
}

static void ff_stats(void *ctx, struct bench_stats *out)
{
    struct first_fit *f = ctx;
    *out = (struct bench_stats){.metadata_bytes = f->metadata_bytes};
}

const struct bench_allocator bench_first_fit_allocator = {
    .name = "first-fit",
    .about = "address-ordered first fit over a list (a baseline written here)",
    .has_capacity = true,
    .has_growth = false,
    .create = ff_create,
    .destroy = ff_destroy,
    .alloc = bench_op_first_fit_alloc,
    .free = bench_op_first_fit_free,
    .free_untimed = ff_free,
    .stats = ff_stats,
};

/* ------------------------------------------------------------- clairvoyant -- */

/* Placement with knowledge of the future, over first-fit's lists: each allocation
 * knows when it will be freed (the replay's lifetimes, counted in allocations), and
 * so does every used block. An exact fit wins; otherwise the free block whose
 * nearer used neighbour dies closest in time to the new block wins (the edges of
 * the pool count as never dying), ties to the smaller block, then the lower
 * address; the block is placed against that neighbour, so that the two holes they
 * leave are likely to open together and coalesce. A heuristic from the offline
 * storage-allocation literature, not an optimum (which is NP-hard): it shows what
 * knowing every lifetime buys a placement on a trace, a yardstick for the arena's
 * minimum capacity. Every allocation scans the free list; for capacities only. */

static uint64_t ff_gap(uint64_t x, uint64_t y) { return x > y ? x - y : y - x; }

BENCH_ENTRY static int bench_op_clairvoyant_alloc(void *ctx, uint64_t size,
                                                  uint64_t *handle)
{
    struct first_fit *f = ctx;
    uint64_t need = ff_round(size);
    if (!need)
        return 1;
    /* the replays repeat the trace on one instance, and each frees what it left
     * live before the next starts: times within the current replay suffice */
    uint64_t dies = f->free_clock[f->clock++ % f->nallocs];
    struct ff_block *best = NULL;
    uint64_t best_gap = 0;
    bool best_high = false;
    for (struct ff_block *b = f->free_head; b; b = b->fnext) {
        if (b->size < need)
            continue;
        uint64_t lo = b->prev ? ff_gap(b->prev->dies, dies) : ff_gap(UINT64_MAX, dies);
        uint64_t hi = b->next ? ff_gap(b->next->dies, dies) : ff_gap(UINT64_MAX, dies);
        uint64_t gap = b->size == need ? 0 : 1 + (lo < hi ? lo : hi);
        if (!best || gap < best_gap || (gap == best_gap && b->size < best->size)) {
            best = b;
            best_gap = gap;
            best_high = hi < lo;
        }
    }
    if (!best || ff_grow_live(f) != 0)
        return 1;
    struct ff_block *b = best;
    if (b->size > need) {
        struct ff_block *r = ff_take(f);
        if (!r)
            return 1;
        r->is_free = 1;
        ff_link_after(b, r);
        if (best_high) {
            /* the new block is r, at the high end; b stays free in its place */
            r->addr = b->addr + b->size - need;
            r->size = need;
            b->size -= need;
            b = r;
        } else {
            r->addr = b->addr + need;
            r->size = b->size - need;
            ff_replace_free(f, b, r);
            b->size = need;
        }
    } else {
        ff_unlink_free(f, b);
    }
    b->is_free = 0;
    b->dies = dies;
    ff_insert_live(f, b);
    *handle = b->addr;
    return 0;
}

BENCH_ENTRY static void bench_op_clairvoyant_free(void *ctx, uint64_t handle)
{
    ff_free(ctx, handle);
}

static void *clairvoyant_create(const struct bench_config *cfg)
{
    if (!cfg->free_clock || !cfg->nallocs) {
        fprintf(stderr, "clairvoyant: needs the trace's lifetimes\n");
        return NULL;
    }
    return ff_create(cfg);
}

const struct bench_allocator bench_clairvoyant_allocator = {
    .name = "clairvoyant",
    .about = "placement knowing every free time: a yardstick for capacity only",
    .has_capacity = true,
    .has_growth = false,
    .create = clairvoyant_create,
    .destroy = ff_destroy,
    .alloc = bench_op_clairvoyant_alloc,
    .free = bench_op_clairvoyant_free,
    .free_untimed = ff_free,
    .stats = ff_stats,
};

/* -------------------------------------------------------------------- tlsf -- */

/* TLSF as in Masmano et al. and VMA's virtual blocks: size classes with a power of
 * two first level split into 32 linear steps (granule counts below 64 have a class
 * each, as in the arena), bitmaps of the non-empty classes, each class a LIFO
 * list; "good fit": a request is rounded up to the next class boundary, so that
 * the head of the first non-empty class at or above it fits without a search;
 * when there is none, the request's own class is walked for a block that fits, so
 * that, as in VMA, an allocation fails only when no free block holds it. Split at
 * the low end, coalescing with both neighbours on free; block records out
 * of band, as VMA keeps them, found by address through the hash shared with
 * first-fit. Granule 256 bytes. */

#define TLSF_SL_BITS  5
#define TLSF_SL_COUNT (1u << TLSF_SL_BITS)
#define TLSF_FL_COUNT 52

struct tlsf {
    struct first_fit ff; /* records, hash, statistics (free_head unused) */
    uint64_t fl_map;
    uint32_t sl_map[TLSF_FL_COUNT];
    struct ff_block *heads[TLSF_FL_COUNT * TLSF_SL_COUNT];
};

static unsigned tlsf_class(uint64_t g) /* g: granules, > 0 */
{
    unsigned sh = 63u - (unsigned)__builtin_clzll(g | TLSF_SL_COUNT) - TLSF_SL_BITS;
    return (sh << TLSF_SL_BITS) + (unsigned)(g >> sh);
}

/* fprev/fnext link the class lists; is_free doubles as "in a list" */
static void tlsf_insert(struct tlsf *t, struct ff_block *b)
{
    unsigned ci = tlsf_class(b->size / FF_GRANULE);
    b->fprev = NULL;
    b->fnext = t->heads[ci];
    if (b->fnext)
        b->fnext->fprev = b;
    t->heads[ci] = b;
    t->sl_map[ci >> TLSF_SL_BITS] |= UINT32_C(1) << (ci & (TLSF_SL_COUNT - 1));
    t->fl_map |= UINT64_C(1) << (ci >> TLSF_SL_BITS);
    b->is_free = 1;
}

static void tlsf_remove(struct tlsf *t, struct ff_block *b)
{
    unsigned ci = tlsf_class(b->size / FF_GRANULE);
    if (b->fprev)
        b->fprev->fnext = b->fnext;
    else
        t->heads[ci] = b->fnext;
    if (b->fnext)
        b->fnext->fprev = b->fprev;
    if (!t->heads[ci]) {
        unsigned fl = ci >> TLSF_SL_BITS;
        t->sl_map[fl] &= ~(UINT32_C(1) << (ci & (TLSF_SL_COUNT - 1)));
        if (!t->sl_map[fl])
            t->fl_map &= ~(UINT64_C(1) << fl);
    }
}

static void *tlsf_create(const struct bench_config *cfg)
{
    struct tlsf *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->ff.metadata_bytes = sizeof *t;
    uint64_t cap = cfg->capacity & ~(uint64_t)(FF_GRANULE - 1);
    if (cap) {
        struct ff_block *b = ff_take(&t->ff);
        if (!b) {
            free(t);
            return NULL;
        }
        *b = (struct ff_block){FF_BASE, cap, NULL, NULL, NULL, NULL, 0, 0};
        tlsf_insert(t, b);
    }
    return t;
}

static void tlsf_destroy(void *ctx) { ff_destroy(ctx); }

BENCH_ENTRY static int bench_op_tlsf_alloc(void *ctx, uint64_t size, uint64_t *handle)
{
    struct tlsf *t = ctx;
    if (size > UINT64_MAX - (FF_GRANULE - 1))
        return 1;
    uint64_t g = size <= FF_GRANULE ? 1 : (size + FF_GRANULE - 1) / FF_GRANULE;
    uint64_t need = g * FF_GRANULE;
    /* round up to the next class boundary: any block of that class fits */
    uint64_t gr = g;
    if (g >= 2 * TLSF_SL_COUNT)
        gr = g + (UINT64_C(1) << (63u - (unsigned)__builtin_clzll(g) - TLSF_SL_BITS)) - 1;
    unsigned ci = tlsf_class(gr), fl = ci >> TLSF_SL_BITS, sl = ci & (TLSF_SL_COUNT - 1);
    struct ff_block *b = NULL;
    uint32_t sm = fl < TLSF_FL_COUNT ? t->sl_map[fl] & (UINT32_MAX << sl) : 0;
    if (!sm && fl + 1 < TLSF_FL_COUNT) {
        uint64_t fm = t->fl_map & (~UINT64_C(0) << (fl + 1));
        if (fm) {
            fl = (unsigned)__builtin_ctzll(fm);
            sm = t->sl_map[fl];
        }
    }
    if (sm) {
        b = t->heads[(fl << TLSF_SL_BITS) + (unsigned)__builtin_ctz(sm)];
    } else {
        /* no class above holds a block: one of the request's own class may still
         * fit, as VMA's TLSF finds by walking that class's list before it fails */
        for (b = t->heads[tlsf_class(g)]; b && b->size < need; b = b->fnext) {
        }
        if (!b)
            return 1;
    }
    if (ff_grow_live(&t->ff) != 0)
        return 1;
    struct ff_block *r = NULL;
    if (b->size > need && !(r = ff_take(&t->ff)))
        return 1;
    tlsf_remove(t, b);
    if (r) {
        r->addr = b->addr + need;
        r->size = b->size - need;
        ff_link_after(b, r);
        b->size = need;
        tlsf_insert(t, r);
    }
    b->is_free = 0;
    ff_insert_live(&t->ff, b);
    *handle = b->addr;
    return 0;
}

static void tlsf_free(void *ctx, uint64_t handle)
{
    struct tlsf *t = ctx;
    struct ff_block *b = ff_remove_live(&t->ff, handle);
    if (!b)
        return;
    struct ff_block *p = b->prev, *n = b->next;
    if (p && p->is_free) {
        tlsf_remove(t, p);
        p->size += b->size;
        p->next = n;
        if (n)
            n->prev = p;
        ff_put(&t->ff, b);
        b = p;
    }
    if (n && n->is_free) {
        tlsf_remove(t, n);
        b->size += n->size;
        b->next = n->next;
        if (n->next)
            n->next->prev = b;
        ff_put(&t->ff, n);
    }
    tlsf_insert(t, b);
}

BENCH_ENTRY static void bench_op_tlsf_free(void *ctx, uint64_t handle)
{
    tlsf_free(ctx, handle);
}

static void tlsf_stats(void *ctx, struct bench_stats *out)
{
    struct tlsf *t = ctx;
    *out = (struct bench_stats){.metadata_bytes = t->ff.metadata_bytes};
}

const struct bench_allocator bench_tlsf_allocator = {
    .name = "tlsf",
    .about = "TLSF good fit, records out of band as in VMA (a baseline written here)",
    .has_capacity = true,
    .has_growth = false,
    .create = tlsf_create,
    .destroy = tlsf_destroy,
    .alloc = bench_op_tlsf_alloc,
    .free = bench_op_tlsf_free,
    .free_untimed = tlsf_free,
    .stats = tlsf_stats,
};

/* ------------------------------------------------------------------ malloc -- */

static void *malloc_create(const struct bench_config *cfg)
{
    (void)cfg;
    static int token;
    return &token;
}

static void malloc_destroy(void *ctx) { (void)ctx; }

BENCH_ENTRY static int bench_op_malloc_alloc(void *ctx, uint64_t size, uint64_t *handle)
{
    (void)ctx;
    void *p = malloc(size ? (size_t)size : 1);
    if (!p)
        return 1;
    *handle = (uint64_t)(uintptr_t)p;
    return 0;
}

static void malloc_free(void *ctx, uint64_t handle)
{
    (void)ctx;
    free((void *)(uintptr_t)handle);
}

BENCH_ENTRY static void bench_op_malloc_free(void *ctx, uint64_t handle)
{
    malloc_free(ctx, handle);
}

static void malloc_stats(void *ctx, struct bench_stats *out)
{
    (void)ctx;
    *out = (struct bench_stats){0};
}

const struct bench_allocator bench_malloc_allocator = {
    .name = "malloc",
    .about = "the host's malloc/free, a speed reference (capacity not enforced)",
    .has_capacity = false,
    .has_growth = false,
    .create = malloc_create,
    .destroy = malloc_destroy,
    .alloc = bench_op_malloc_alloc,
    .free = bench_op_malloc_free,
    .free_untimed = malloc_free,
    .stats = malloc_stats,
};
