/* A fuzz target for the arena: bytes in, a sequence of operations out, and after
 * every operation the arena's own invariant checker, what a caller can see from
 * outside (no two live chunks overlap, each lies inside a region that is present,
 * sizes and counts add up, lookups answer, a failed call changes nothing), and
 * the reference model (tests/arena_model.h): the same results, the same chunk
 * chosen, the same layout and owners, and the walk of the free chunks largest
 * first that a growing pool's trim makes (every free chunk of owner 0 of at least
 * a size, once, in order). Over
 * sequences nobody wrote down, host allocation failures included (the model skips the
 * calls they make fail).
 *
 * Built two ways (tests/meson.build): as a libFuzzer target with clang and
 * -Dfuzz=true (`build-fuzz/tests/fuzz-arena -max_total_time=60`), and always
 * with fuzz_main.c, which replays files or seeded random inputs, as a test.
 *
 * Owners (arena.h): owners 1 to NOWNERS are open from the start; the top five
 * bits of an operation's first byte choose the owners an allocation may take
 * from, or the owner a free or a region's memory becomes, and region operations
 * also disown, close and reopen owners and change whom they join.
 *
 * Input: byte 0 lays out 8 regions (sizes from the low six bits of bytes 1-8,
 * contiguous flags from byte 9, a gap or none before each; the top two bits of
 * byte 1 are unused, they chose placement rules the arena no longer has), then
 * three bytes per operation. */
#include "arena.h"
#include "arena_model.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define G           ARENA_GRANULE
#define NREGIONS    8
#define MAX_LIVE    256
#define REGION_BASE (UINT64_C(1) << 32)
#define NOWNERS     3

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct live {
    uint64_t addr, size;
};

struct state {
    struct arena *a;
    struct mregion r[NREGIONS];
    struct model model; /* over r */
    struct live live[MAX_LIVE];
    size_t nlive;
    uint64_t allocated;
    bool open[NOWNERS + 1]; /* which owners are open (0 always) */
    unsigned fail_in;       /* host allocations until one fails; 0: none fails */
    bool host_failed;       /* a host allocation failed since this was cleared */
    unsigned frees;         /* owner 0's: every other one through _free_whole */
};

static void die(const char *what, const struct state *s)
{
    fprintf(stderr, "fuzz-arena: %s (%zu live chunks, %llu bytes allocated)\n", what,
            s->nlive, (unsigned long long)s->allocated);
    abort();
}

static void *host_alloc(void *ctx, size_t bytes)
{
    struct state *s = ctx;
    if (s->fail_in && --s->fail_in == 0) {
        s->host_failed = true;
        return NULL;
    }
    return malloc(bytes);
}

static void host_free(void *ctx, void *p)
{
    (void)ctx;
    free(p);
}

static bool inside_a_present_region(const struct state *s, uint64_t addr, uint64_t size)
{
    /* a chunk may span touching contiguous regions: walk them from its start */
    uint64_t at = addr, end = addr + size;
    while (at < end) {
        const struct mregion *hit = NULL;
        for (int i = 0; i < NREGIONS; i++)
            if (s->r[i].present && s->r[i].base <= at && at < s->r[i].base + s->r[i].size)
                hit = &s->r[i];
        if (!hit || (at != addr && !hit->contiguous))
            return false;
        at = hit->base + hit->size;
        if (at < end && !hit->contiguous)
            return false;
    }
    return true;
}

/* Everything a caller can check from outside, and the arena's own checker. */
static void check(struct state *s)
{
    char msg[256];
    if (!gpumem__arena_check(s->a, msg, sizeof msg))
        die(msg, s);
    struct arena_stats st;
    gpumem__arena_stats(s->a, &st);
    if (st.live_chunks != s->nlive || st.allocated_bytes != s->allocated)
        die("the stats disagree with the live chunks handed out", s);
    uint64_t capacity = 0;
    for (int i = 0; i < NREGIONS; i++)
        capacity += s->r[i].present ? s->r[i].size : 0;
    if (st.capacity_bytes != capacity || st.free_bytes != capacity - s->allocated)
        die("the stats disagree with the regions added and released", s);
    if (gpumem__arena_largest_free(s->a) > st.free_bytes)
        die("the largest free chunk is larger than the free bytes", s);
    if (!model_matches(&s->model, s->a))
        die("the arena's chunks differ from the reference model's", s);
    for (size_t i = 0; i < s->nlive; i++)
        if (gpumem__arena_lookup(s->a, s->live[i].addr) != s->live[i].size)
            die("a live chunk is not found by its address", s);
    for (int i = 0; i < NREGIONS; i++) {
        uint64_t end = s->r[i].base + s->r[i].size; /* present or not */
        unsigned owner = ARENA_OWNERS, mowner = ARENA_OWNERS;
        uint64_t tail = gpumem__arena_free_tail_owned(s->a, end, &owner);
        if (tail != model_free_tail_owned(&s->model, end, &mowner) || owner != mowner ||
            tail != gpumem__arena_free_tail(s->a, end))
            die("the free tail at a region's end differs from the model's", s);
    }
    for (unsigned o = 1; o <= NOWNERS; o++) {
        bool empty = true;
        for (size_t i = 0; i < s->model.n; i++)
            empty = empty && !(s->model.c[i].is_free && s->model.c[i].owner == o);
        if (gpumem__arena_owner_empty(s->a, o) != empty)
            die("whether an owner holds free chunks differs from the model", s);
    }
}

/* The owners an operation names (its first byte's top bits): an allocation's set
 * (0: a plain allocation), a free's or a region's owner (0: owner 0's). */
static uint64_t op_owners(uint8_t op) { return (uint64_t)(op >> 5) << 1; }
static unsigned op_owner(uint8_t op) { return (op >> 3) % (NOWNERS + 1); }

static void op_alloc(struct state *s, uint8_t op, uint8_t b1, uint8_t b2)
{
    /* small sizes mostly, some up to a few MiB, some not granule multiples */
    uint64_t size =
        b1 < 192 ? (uint64_t)b2 * (b1 % 8 + 1) * 32 : ((uint64_t)b2 + 1) << (b1 % 16 + 4);
    uint64_t need = size <= G ? G : (size + G - 1) / G * G;
    if (s->nlive == MAX_LIVE)
        return;
    struct arena_stats before;
    gpumem__arena_stats(s->a, &before);
    uint64_t addr = 0, got = 0, maddr = 0, mgot = 0, owners = op_owners(op);
    int r = owners ? gpumem__arena_alloc_owned(s->a, size, owners, NULL, &addr, &got)
                   : gpumem__arena_alloc(s->a, size, &addr, &got);
    if (r != ARENA_HOST_OOM &&
        (model_alloc_owned(&s->model, size, owners, &maddr, &mgot) != r ||
         maddr != addr || mgot != got))
        die("alloc chose otherwise than the reference model", s);
    if (r != ARENA_OK) {
        struct arena_stats after;
        gpumem__arena_stats(s->a, &after);
        if (r != ARENA_NO_FIT && r != ARENA_HOST_OOM)
            die("alloc returned an unknown result", s);
        /* room reserved before a host failure stays (arena.h, ARENA_HOST_OOM) */
        if (r == ARENA_HOST_OOM && after.metadata_bytes >= before.metadata_bytes)
            after.metadata_bytes = before.metadata_bytes;
        if (memcmp(&before, &after, sizeof before) != 0)
            die("a failed alloc changed the arena", s);
        if (r == ARENA_NO_FIT &&
            need <= gpumem__arena_largest_free_owned(s->a, owners | 1))
            die("alloc found no fit below the largest free chunk it may take", s);
        return;
    }
    if (got != need || addr % G != 0)
        die("alloc did not round the request to the granule", s);
    if (!inside_a_present_region(s, addr, got))
        die("alloc handed out memory outside the regions", s);
    for (size_t i = 0; i < s->nlive; i++)
        if (addr < s->live[i].addr + s->live[i].size && s->live[i].addr < addr + got)
            die("alloc handed out memory that is already live", s);
    s->live[s->nlive++] = (struct live){addr, got};
    s->allocated += got;
}

/* What gpumem__arena_free_preview visits: the chunks a free would join. */
struct preview {
    uint64_t lo, hi; /* the run they and the freed chunk make */
    uint64_t sizes;
    bool bad; /* a chunk not beside the run so far */
};

static void preview_chunk(void *ctx, uint64_t addr, uint64_t size)
{
    struct preview *v = ctx;
    if (addr + size == v->lo) /* before it, nearest first */
        v->lo = addr;
    else if (addr == v->hi) /* then after it */
        v->hi = addr + size;
    else
        v->bad = true;
    v->sizes += size;
}

static void op_free(struct state *s, uint8_t op, uint8_t b1)
{
    if (!s->nlive)
        return;
    size_t i = b1 % s->nlive;
    uint64_t size = 0, msize = 0;
    unsigned owner = op_owner(op);
    bool ask = owner == 0 && s->frees++ % 2; /* whether it ends in a whole segment */
    uint64_t whole = 0;
    /* what the free will join, asked first (the pool's split figures do) */
    struct preview pv = {s->live[i].addr, s->live[i].addr + s->live[i].size, 0, false};
    bool pwhole = false;
    bool previewed = gpumem__arena_free_preview(s->a, s->live[i].addr, owner,
                                                preview_chunk, &pv, &pwhole);
    if (previewed != s->open[owner] || pv.bad)
        die("a free's preview differs from what the free can do", s);
    int r = owner ? gpumem__arena_free_owned(s->a, s->live[i].addr, owner, &size)
            : ask ? gpumem__arena_free_whole(s->a, s->live[i].addr, &size, &whole)
                  : gpumem__arena_free(s->a, s->live[i].addr, &size);
    /* the other way to know: the segment that holds the address, found by address */
    if (ask && r == ARENA_OK &&
        whole != gpumem__arena_whole_free_at(s->a, s->live[i].addr))
        die("a free said its chunk was a whole segment, or not, wrongly", s);
    if (!s->open[owner]) { /* refused, and the chunk stays live */
        if (r != ARENA_BAD_ADDRESS || model_free_owned(&s->model, s->live[i].addr, owner,
                                                       &msize) != ARENA_BAD_ADDRESS)
            die("a free for an owner that is not open was not refused", s);
        return;
    }
    if (r != ARENA_OK || size != s->live[i].size ||
        model_free_owned(&s->model, s->live[i].addr, owner, &msize) != ARENA_OK)
        die("a live chunk did not free with its size", s);
    /* the chunk it ended in is the run the preview saw, whole as it said */
    const struct mchunk *m = NULL;
    for (size_t k = 0; k < s->model.n && !m; k++)
        if (s->model.c[k].addr <= pv.lo &&
            pv.lo < s->model.c[k].addr + s->model.c[k].size)
            m = &s->model.c[k];
    if (!m || !m->is_free || m->addr != pv.lo || m->size != pv.hi - pv.lo ||
        m->size != pv.sizes + size ||
        pwhole != (gpumem__arena_whole_free_at(s->a, pv.lo) != 0))
        die("a free joined other chunks than its preview said", s);
    s->allocated -= size;
    s->live[i] = s->live[--s->nlive];
}

/* An address inside or just past a live chunk, or inside a region: a bad free,
 * unless it happens to start another live chunk. */
static void op_bad_free(struct state *s, uint8_t b1, uint8_t b2)
{
    uint64_t addr = s->nlive
                        ? s->live[b1 % s->nlive].addr + (uint64_t)(b2 % 4 + 1) * G / 2
                        : s->r[b1 % NREGIONS].base + (uint64_t)b2 * G;
    for (size_t i = 0; i < s->nlive; i++)
        if (s->live[i].addr == addr)
            return;
    struct arena_stats before, after;
    gpumem__arena_stats(s->a, &before);
    uint64_t msize;
    if (gpumem__arena_free(s->a, addr, NULL) != ARENA_BAD_ADDRESS ||
        model_free(&s->model, addr, &msize) != ARENA_BAD_ADDRESS)
        die("a bad free was not refused", s);
    gpumem__arena_stats(s->a, &after);
    if (memcmp(&before, &after, sizeof before) != 0)
        die("a refused free changed the arena", s);
}

static void released(void *ctx, uint64_t base, uint64_t size)
{
    struct state *s = ctx;
    for (int i = 0; i < NREGIONS; i++) {
        if (s->r[i].present && s->r[i].base == base && s->r[i].size == size) {
            for (size_t j = 0; j < s->nlive; j++)
                if (s->live[j].addr < base + size &&
                    base < s->live[j].addr + s->live[j].size)
                    die("a released region holds a live chunk", s);
            return;
        }
    }
    die("release_free_regions reported a range that is not a present region", s);
}

static void op_region(struct state *s, uint8_t op, uint8_t b1, uint8_t b2)
{
    size_t ri = b1 % NREGIONS;
    struct mregion *r = &s->r[ri];
    unsigned owner = op_owner(op);
    switch (b2 % 8) {
    case 0:
    case 1: {
        int want = r->present || !s->open[owner] ? ARENA_BAD_RANGE : ARENA_OK;
        int got = owner ? gpumem__arena_add_region_owned(s->a, r->base, r->size,
                                                         r->contiguous, owner)
                        : gpumem__arena_add_region(s->a, r->base, r->size, r->contiguous);
        if (got == ARENA_HOST_OOM)
            break;
        if (got != want)
            die("add_region did not accept a new region or refuse an added one", s);
        if (got == ARENA_OK)
            model_add_region_owned(&s->model, ri, owner);
        break;
    }
    case 4:
        if (gpumem__arena_disown(s->a, owner) != model_disown(&s->model, owner))
            die("disown handed over otherwise than the reference model", s);
        break;
    case 5: /* whom an owner joins besides its own and owner 0's */
        gpumem__arena_set_joins(s->a, owner, (uint64_t)(b1 >> 3) << 1);
        model_set_joins(&s->model, owner, (uint64_t)(b1 >> 3) << 1);
        break;
    case 6: /* closed (its chunks disowned), then open again unless the host fails */
        if (!owner)
            break;
        gpumem__arena_owner_close(s->a, owner);
        model_close_owner(&s->model, owner);
        s->open[owner] = false;
        if (!gpumem__arena_owner_empty(s->a, owner))
            die("a closed owner still holds chunks", s);
        if (gpumem__arena_owner_open(s->a, owner) == ARENA_OK) {
            model_open_owner(&s->model, owner);
            s->open[owner] = true;
        }
        break;
    case 2: {
        s->host_failed = false;
        uint64_t bytes = gpumem__arena_release_free_regions(s->a, released, s);
        /* on a host failure nothing is released; otherwise what the model carves */
        if (s->host_failed ? bytes != 0 : bytes != model_release(&s->model))
            die("release_free_regions released otherwise than the reference model", s);
        break; /* check() then compares the capacity with the regions still present */
    }
    case 7:
        if (owner && gpumem__arena_owner_open(s->a, owner) == ARENA_OK) {
            model_open_owner(&s->model, owner);
            s->open[owner] = true;
        }
        break;
    default:
        /* a host allocation fails soon: the next call that needs one must fail
         * cleanly (the checks after it see the arena unchanged) */
        s->fail_in = b1 % 4 + 1;
        break;
    }
}

/* The walk of the free chunks, largest first, that a growing pool's trim makes:
 * the model's free chunks of at least min_size, each once (count, bytes and
 * addresses), sizes never rising, equal sizes of several-size classes from the
 * highest address down. */
struct largest_walk {
    const struct state *s;
    uint64_t count, bytes, addrs, last_addr, last_size;
};

static bool largest_visit(void *ctx, uint64_t addr, uint64_t size)
{
    struct largest_walk *w = ctx;
    if (w->count && (size > w->last_size ||
                     (size == w->last_size && size >= 64 * G && addr >= w->last_addr)))
        die("walk_free_largest out of order", w->s);
    w->count++;
    w->bytes += size;
    w->addrs ^= addr * UINT64_C(0x9E3779B97F4A7C15);
    w->last_addr = addr;
    w->last_size = size;
    return true;
}

static void check_largest(const struct state *s, uint64_t min_size)
{
    struct largest_walk w = {s, 0, 0, 0, 0, 0};
    gpumem__arena_walk_free_largest(s->a, min_size, largest_visit, &w);
    uint64_t count = 0, bytes = 0, addrs = 0;
    for (size_t i = 0; i < s->model.n; i++) {
        const struct mchunk *c = &s->model.c[i];
        if (c->is_free && c->owner == 0 && c->size >= min_size) {
            count++;
            bytes += c->size;
            addrs ^= c->addr * UINT64_C(0x9E3779B97F4A7C15);
        }
    }
    if (w.count != count || w.bytes != bytes || w.addrs != addrs)
        die("walk_free_largest differs from the model's free chunks", s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 10)
        return 0;
    static struct state s;
    memset(&s, 0, sizeof s);
    struct arena_host_allocator host = {host_alloc, host_free, &s};
    if (gpumem__arena_create(&host, &s.a) != ARENA_OK)
        return 0;
    for (unsigned o = 1; o <= NOWNERS; o++) {
        if (gpumem__arena_owner_open(s.a, o) != ARENA_OK) {
            gpumem__arena_destroy(s.a);
            return 0;
        }
        model_open_owner(&s.model, o);
        s.open[o] = true;
    }
    s.open[0] = true;
    uint64_t at = REGION_BASE;
    for (int i = 0; i < NREGIONS; i++) {
        if (data[0] & (1u << i))
            at += 64 * G; /* a gap: the region touches nothing before it */
        s.r[i] = (struct mregion){at, (uint64_t)(data[1 + i] % 64 + 1) * 16 * G,
                                  (data[9] >> i) & 1, false};
        at += s.r[i].size;
    }
    s.model.r = s.r;
    s.model.nr = NREGIONS;
    for (size_t i = 0; i < NREGIONS; i += 3)
        if (gpumem__arena_add_region(s.a, s.r[i].base, s.r[i].size, s.r[i].contiguous) ==
            ARENA_OK)
            model_add_region(&s.model, i);
    check(&s);
    for (size_t k = 10; k + 3 <= size; k += 3) {
        uint8_t op = data[k], b1 = data[k + 1], b2 = data[k + 2];
        switch (op % 8) {
        case 0:
        case 1:
        case 2:
            op_alloc(&s, op, b1, b2);
            break;
        case 3:
        case 4:
        case 5:
            op_free(&s, op, b1);
            break;
        case 6:
            op_bad_free(&s, b1, b2);
            break;
        default:
            op_region(&s, op, b1, b2);
            break;
        }
        check(&s);
        check_largest(&s, (uint64_t)(b2 % 64) * 4 * G);
    }
    gpumem__arena_destroy(s.a);
    return 0;
}
