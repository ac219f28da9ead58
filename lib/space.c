/* Address spaces of growing pools: a range of addresses allocated from the
 * backend for a pool's whole budget, a layout arena over it whose live chunks are
 * the regions placed in it, and three bitmaps over its granules: mapped with
 * physical memory, the first of a mapping (an extent: one backend mapping, one
 * handle), the first of a placed region. The layout's best fit (smallest hole,
 * lowest address) keeps regions adjacent. What is mapped at once is mapped in a
 * few extents, never across a region's start, so that a whole extent of a region
 * can be given back while the rest of the region stays in use, and mapped again
 * later (gpumem__space_unmap_part, gpumem__space_map_part). See space.h for
 * the locks that guard it: the owning pool's mapping lock every change, its lock
 * the bitmaps. */
#include "space.h"

#include "arena.h"

#include <stdio.h>
#include <stdlib.h>

/* A run of granules mapped at once is cut into MAX_EXTENTS mappings (extents)
 * of about equal size, or one per granule when it has fewer: 16 MiB of 2 MiB
 * granules granule by granule, 100 MiB eight of 14 MiB (the last 2 MiB), 64 GiB
 * eight of 8 GiB. Each mapping costs the driver a fixed number of calls (create,
 * map, access, release; an unmap to give it back), so a growth of any size costs
 * at most eight of those, where it cost one per granule; an extent goes back only
 * whole, so a large region gives its memory back in eighths, a small one granule
 * by granule, as before; but extents side by side go back in one call
 * (unmap_run), so that a hole costs one unmap however many it spans. */
#define MAX_EXTENTS 8

struct space {
    struct backend *backend;
    int device;
    uint64_t base, size;  /* the range */
    uint64_t granularity; /* every region's size and address is a multiple */
    unsigned shift;       /* log2(granularity): the backends give powers of two */
    struct arena *layout; /* live chunks: placed regions; free chunks: holes */
    uint64_t *mapped;     /* bit i: granule i of the range is mapped */
    uint64_t *starts;     /* bit i: a mapping (an extent) begins at granule i */
    uint64_t *regions;    /* bit i: a placed region begins at granule i */
    uint64_t unmapped;    /* bytes of placed regions whose granules are not mapped */
    /* Extents claimed to be unmapped (gpumem__space_claim_part): no longer
     * mapped in the bitmaps, still mapped on the device until
     * gpumem__space_unmap_claimed. A first granule and a count each. */
    size_t (*claimed)[2];
    size_t num_claimed, cap_claimed;
    /* Called around each backend call that maps or unmaps (space.h): the owner
     * lets its lock go there. NULL: nothing. */
    void (*leave)(void *ctx);
    void (*enter)(void *ctx);
    void (*warn)(void *ctx, const char *text);
    void *hooks_ctx;
};

/* A backend call that maps or unmaps, between the owner's hooks. */
static void leave(const struct space *sp)
{
    if (sp->leave)
        sp->leave(sp->hooks_ctx);
}
static void enter(const struct space *sp)
{
    if (sp->enter)
        sp->enter(sp->hooks_ctx);
}

/* The granule at addr (in the range). */
static size_t granule_of(const struct space *sp, uint64_t addr)
{
    return (size_t)((addr - sp->base) >> sp->shift);
}

static bool bit(const uint64_t *map, size_t i) { return map[i / 64] >> (i % 64) & 1; }

static void set_bit(uint64_t *map, size_t i, bool on)
{
    uint64_t b = UINT64_C(1) << (i % 64);
    map[i / 64] = on ? map[i / 64] | b : map[i / 64] & ~b;
}

static uint64_t addr_of(const struct space *sp, size_t i)
{
    return sp->base + ((uint64_t)i << sp->shift);
}

/* Granules [i, i + n) are one mapping now (on), or no longer mapped (off). */
static void mark_extent(struct space *sp, size_t i, size_t n, bool on)
{
    for (size_t k = i; k < i + n; k++) {
        set_bit(sp->mapped, k, on);
        set_bit(sp->starts, k, on && k == i);
    }
}

/* The end of the mapping that granule i (mapped) belongs to: the next granule
 * that is not mapped, begins a mapping or lies past `limit`. */
static size_t extent_end(const struct space *sp, size_t i, size_t limit)
{
    size_t e = i + 1;
    while (e < limit && bit(sp->mapped, e) && !bit(sp->starts, e))
        e++;
    return e;
}

/* Maps granules [i, i + n) (none mapped, one region's) in extents (above), in
 * address order; *bytes: the bytes newly mapped (an extent whose failed mapping
 * could not be undone counts: its addresses stay mapped, *stuck). On failure the
 * extents mapped before it stay mapped; *held says the failing extent's memory
 * stays taken, *held_bytes how much. */
static gpumem_status map_run(struct space *sp, size_t i, size_t n, uint64_t *bytes,
                             bool *stuck, uint64_t *held_bytes, struct reason *why)
{
    struct backend *b = sp->backend;
    size_t parts = n < MAX_EXTENTS ? n : MAX_EXTENTS;
    size_t each = (n + parts - 1) / parts;
    for (size_t at = i; at < i + n; at += each) {
        size_t len = at + each <= i + n ? each : i + n - at;
        bool held = false;
        uint64_t size = (uint64_t)len << sp->shift;
        leave(sp);
        gpumem_status s =
            b->ops->space_map(b, sp->device, addr_of(sp, at), size, stuck, &held, why);
        enter(sp);
        if (s == GPUMEM_OK || *stuck) {
            mark_extent(sp, at, len, true);
            *bytes += size;
        }
        if (s != GPUMEM_OK) {
            *held_bytes = held && !*stuck ? size : 0;
            return s;
        }
    }
    return GPUMEM_OK;
}

/* Maps every granule of [addr, addr+size) that is not mapped: each run of them
 * within one region as map_run's extents. *bytes, *stuck and *held_bytes as
 * map_run's; on failure the runs mapped before stay mapped. */
static gpumem_status map_granules(struct space *sp, uint64_t addr, uint64_t size,
                                  uint64_t *bytes, bool *stuck, uint64_t *held_bytes,
                                  struct reason *why)
{
    size_t i = granule_of(sp, addr), end = i + (size_t)(size >> sp->shift);
    *bytes = *held_bytes = 0;
    *stuck = false;
    while (i < end) {
        if (bit(sp->mapped, i)) {
            i++;
            continue;
        }
        size_t e = i + 1;
        while (e < end && !bit(sp->mapped, e) && !bit(sp->regions, e))
            e++;
        gpumem_status s = map_run(sp, i, e - i, bytes, stuck, held_bytes, why);
        if (s != GPUMEM_OK)
            return s;
        i = e;
    }
    return GPUMEM_OK;
}

/* The mappings that lie wholly inside [addr, addr+size), in address order:
 * first_whole gives the granule to start from (past a mapping that began below
 * the range, which reaches into it: not whole) and the range's end *hi;
 * next_whole moves *i to the next mapped granule and gives its mapping's end
 * *e, false when there is none left or it reaches past hi. */
static size_t first_whole(const struct space *sp, uint64_t addr, uint64_t size,
                          size_t *hi)
{
    size_t i = granule_of(sp, addr);
    *hi = i + (size_t)(size >> sp->shift);
    while (i < *hi && bit(sp->mapped, i) && !bit(sp->starts, i))
        i++;
    return i;
}

static bool next_whole(const struct space *sp, size_t *i, size_t hi, size_t *e)
{
    while (*i < hi && !bit(sp->mapped, *i))
        (*i)++;
    if (*i >= hi)
        return false;
    *e = extent_end(sp, *i, sp->size >> sp->shift);
    return *e <= hi;
}

/* Whether the run [i, e) in transit holds more than one extent. */
static bool more_than_one(const struct space *sp, size_t i, size_t e)
{
    for (size_t k = i + 1; k < e; k++)
        if (bit(sp->starts, k))
            return true;
    return false;
}

/* The whole extents [i, e) go in transit, to be unmapped (unmap_run): out of
 * the mapped bitmap, counted in sp->unmapped, their start bits kept (read only
 * where a granule is mapped) so that a refusal puts each back as it was. */
static void unmap_begin(struct space *sp, size_t i, size_t e)
{
    for (size_t k = i; k < e; k++)
        set_bit(sp->mapped, k, false);
    sp->unmapped += (uint64_t)(e - i) << sp->shift;
}

/* The run [i, e) in transit stays mapped after all: back in the bitmap, as it
 * was. */
static void unmap_none(struct space *sp, size_t i, size_t e)
{
    for (size_t k = i; k < e; k++)
        set_bit(sp->mapped, k, true);
    sp->unmapped -= (uint64_t)(e - i) << sp->shift;
}

/* Gives back the run [i, e) of whole extents side by side, in transit
 * (unmap_begin): in one backend call, since cuMemUnmap takes a range of whole mappings
 * (CUDA's vectorAddMMAP sample unmaps its stripes so), so that a hole costs one call
 * however many extents it spans. When the backend refuses a run of several, extent by
 * extent, up to the first refusal: that extent and the rest of the run go back
 * into the bitmap, still mapped. *done: the bytes unmapped. */
static gpumem_status unmap_run(struct space *sp, size_t i, size_t e, uint64_t *done,
                               struct reason *why)
{
    struct backend *b = sp->backend;
    size_t at = i;
    *done = 0;
    leave(sp);
    gpumem_status s = b->ops->space_unmap(b, sp->device, addr_of(sp, i),
                                          (uint64_t)(e - i) << sp->shift, why);
    struct reason refused;
    bool split = s != GPUMEM_OK && more_than_one(sp, i, e);
    if (s == GPUMEM_OK)
        at = e;
    else if (split)
        for (refused = *why, s = GPUMEM_OK; s == GPUMEM_OK && at < e;) {
            /* the extent's end: the next start in the run (none is mapped) */
            size_t end = at + 1;
            while (end < e && !bit(sp->starts, end))
                end++;
            s = b->ops->space_unmap(b, sp->device, addr_of(sp, at),
                                    (uint64_t)(end - at) << sp->shift, why);
            if (s == GPUMEM_OK)
                at = end;
        }
    enter(sp);
    if (split && s == GPUMEM_OK && sp->warn) /* got past it: the log tells */
        sp->warn(sp->hooks_ctx, refused.text);
    for (size_t k = i; k < at; k++)
        set_bit(sp->starts, k, false);
    unmap_none(sp, at, e); /* refused: mapped still */
    *done = (uint64_t)(at - i) << sp->shift;
    return s;
}

/* Unmaps every mapping that lies wholly inside [addr, addr+size), giving its
 * memory back; a mapping that reaches past either end stays (only whole ones
 * can go). Mappings side by side go as one run (unmap_run). *bytes: the bytes
 * unmapped, which count in sp->unmapped. Stops at the first refusal (that
 * extent stays mapped). Each run leaves the bitmap before the backend unmaps
 * it (space.h: a reader under the owner's lock never sees mapped what is being
 * unmapped). */
static gpumem_status unmap_granules(struct space *sp, uint64_t addr, uint64_t size,
                                    uint64_t *bytes, struct reason *why)
{
    size_t total = (size_t)(sp->size >> sp->shift);
    size_t hi, i = first_whole(sp, addr, size, &hi), e;
    *bytes = 0;
    for (; next_whole(sp, &i, hi, &e); i = e) {
        /* the whole mappings that follow without a gap join the run (a mapped
         * granule right after one mapping's end begins the next) */
        while (e < hi && bit(sp->mapped, e) && extent_end(sp, e, total) <= hi)
            e = extent_end(sp, e, total);
        unmap_begin(sp, i, e);
        uint64_t done;
        gpumem_status s = unmap_run(sp, i, e, &done, why);
        *bytes += done;
        if (s != GPUMEM_OK)
            return s;
    }
    return GPUMEM_OK;
}

/* Unmaps every mapping wholly inside granules [i, end), each run in one call
 * (unmap_granules), going on past a refused extent, which stays mapped.
 * *bytes: the bytes unmapped; *kept: the refused extents' bytes. Returns the
 * first refusal, its reason in *why (the later ones' are dropped). */
static gpumem_status unmap_all(struct space *sp, size_t i, size_t end, uint64_t *bytes,
                               uint64_t *kept, struct reason *why)
{
    gpumem_status result = GPUMEM_OK;
    struct reason later;
    *bytes = *kept = 0;
    while (i < end) {
        uint64_t done = 0;
        gpumem_status s =
            unmap_granules(sp, addr_of(sp, i), (uint64_t)(end - i) << sp->shift, &done,
                           result == GPUMEM_OK ? why : &later);
        *bytes += done;
        if (s == GPUMEM_OK)
            break;
        if (result == GPUMEM_OK)
            result = s;
        while (i < end && !bit(sp->mapped, i)) /* the refused extent */
            i++;
        size_t e = i < end ? extent_end(sp, i, end) : end;
        *kept += (uint64_t)(e - i) << sp->shift;
        i = e;
    }
    return result;
}

static void free_maps(struct space *sp)
{
    free(sp->mapped);
    free(sp->starts);
    free(sp->regions);
    free(sp->claimed);
}

gpumem_status gpumem__space_create(struct backend *b, int dev, uint64_t budget,
                                   struct space **out, struct reason *why)
{
    char buf[GPUMEM_BYTES_BUF];
    const struct backend_ops *ops = b->ops;
    if (!ops->space_granularity || !ops->space_alloc_range || !ops->space_free_range ||
        !ops->space_map || !ops->space_unmap)
        return gpumem__reason(why, GPUMEM_ERR_UNSUPPORTED,
                              "the %s backend has no virtual address spaces", ops->name);
    uint64_t granularity, size;
    gpumem_status s = ops->space_granularity(b, dev, &granularity, why);
    if (s != GPUMEM_OK)
        return s;
    if (granularity == 0 || (granularity & (granularity - 1)) != 0) /* shifts below */
        return gpumem__reason(why, GPUMEM_ERR_UNSUPPORTED,
                              "GPU:%d: a mapping granularity of %llu bytes is not a "
                              "power of two",
                              dev, (unsigned long long)granularity);
    if (budget == 0 || !gpumem__align_up(budget, granularity, &size))
        return gpumem__reason(why, GPUMEM_ERR_UNSUPPORTED,
                              "GPU:%d: a budget of %s cannot be an address range", dev,
                              gpumem__format_bytes(budget, buf, sizeof buf));
    struct space *sp = calloc(1, sizeof *sp);
    size_t words = (size_t)((size / granularity + 63) / 64);
    if (sp) {
        sp->mapped = calloc(words, sizeof *sp->mapped);
        sp->starts = calloc(words, sizeof *sp->starts);
        sp->regions = calloc(words, sizeof *sp->regions);
    }
    if (!sp || !sp->mapped || !sp->starts || !sp->regions ||
        gpumem__arena_create(NULL, &sp->layout) != ARENA_OK) {
        if (sp)
            free_maps(sp);
        free(sp);
        return gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                              "GPU:%d: out of host memory for an address range", dev);
    }
    sp->backend = b;
    sp->device = dev;
    sp->granularity = granularity;
    sp->shift = (unsigned)__builtin_ctzll(granularity);
    sp->size = size;
    s = ops->space_alloc_range(b, dev, size, &sp->base, why);
    if (s == GPUMEM_OK &&
        gpumem__arena_add_region(sp->layout, sp->base, size, true) != ARENA_OK) {
        struct reason ignored; /* the host-memory reason is the one to give */
        ops->space_free_range(b, dev, sp->base, size, &ignored);
        s = gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                           "GPU:%d: out of host memory for an address range", dev);
    }
    if (s != GPUMEM_OK) {
        gpumem__arena_destroy(sp->layout);
        free_maps(sp);
        free(sp);
        return s;
    }
    *out = sp;
    return GPUMEM_OK;
}

gpumem_status gpumem__space_destroy(struct space *sp, struct reason *why)
{
    if (!sp)
        return GPUMEM_OK;
    struct arena_stats st;
    gpumem__arena_stats(sp->layout, &st);
    gpumem_status s = GPUMEM_OK;
    if (st.live_chunks > 0)
        s = gpumem__reason(
            why, GPUMEM_ERR_BACKEND,
            "GPU:%d: %llu region(s) of the address range at 0x%llx could not "
            "be unmapped; the range stays reserved",
            sp->device, (unsigned long long)st.live_chunks, (unsigned long long)sp->base);
    else
        s = sp->backend->ops->space_free_range(sp->backend, sp->device, sp->base,
                                               sp->size, why);
    gpumem__arena_destroy(sp->layout);
    free_maps(sp);
    free(sp);
    return s;
}

void gpumem__space_forget(struct space *sp)
{
    if (!sp)
        return;
    gpumem__arena_destroy(sp->layout);
    free_maps(sp);
    free(sp);
}

uint64_t gpumem__space_granularity(const struct space *sp) { return sp->granularity; }

uint64_t gpumem__space_base(const struct space *sp) { return sp->base; }

uint64_t gpumem__space_size(const struct space *sp) { return sp->size; }

bool gpumem__space_contains(const struct space *sp, uint64_t addr)
{
    return addr >= sp->base && addr - sp->base < sp->size;
}

gpumem_status gpumem__space_map(struct space *sp, uint64_t size, uint64_t *addr,
                                uint64_t *held, struct reason *why)
{
    char buf[GPUMEM_BYTES_BUF];
    uint64_t at, got, bytes, held_bytes;
    bool stuck = false;
    *held = 0;
    int r = gpumem__arena_alloc(sp->layout, size, &at, &got);
    if (r == ARENA_HOST_OOM)
        return gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                              "GPU:%d: out of host memory for the address range's layout",
                              sp->device);
    if (r != ARENA_OK)
        return gpumem__reason(why, GPUMEM_ERR_UNSUPPORTED,
                              "GPU:%d: no hole of %s is left in the address range",
                              sp->device, gpumem__format_bytes(size, buf, sizeof buf));
    size_t first = granule_of(sp, at);
    set_bit(sp->regions, first, true);
    gpumem_status s = map_granules(sp, at, size, &bytes, &stuck, &held_bytes, why);
    if (s == GPUMEM_OK) {
        *addr = at;
        return GPUMEM_OK;
    }
    /* The extents mapped before the failure (from the region's start on) are
     * unmapped again, as one run, and each tried; a mapping that cannot be
     * undone (the failing one when stuck, or a refused unmap) keeps the
     * region's place, as a region the backend refuses to unmap does: never
     * reused, and the range is left reserved. */
    uint64_t kept = 0, undone = 0; /* undone: unmapped again, in sp->unmapped */
    size_t end = first + (size_t)(size >> sp->shift), stop = first;
    while (stop < end && bit(sp->mapped, stop))
        stop++;
    if (stuck && stop > first) { /* the last mapped: its undo failed in the backend */
        size_t last = stop - 1;
        while (last > first && !bit(sp->starts, last))
            last--;
        kept += (uint64_t)(stop - last) << sp->shift;
        stop = last;
    }
    uint64_t refused = 0;
    struct reason ignored; /* the failure to report is the mapping's */
    (void)unmap_all(sp, first, stop, &undone, &refused, &ignored);
    kept += refused;
    *held = kept + held_bytes;
    if (kept) {
        sp->unmapped += size - kept - undone; /* placed, and not mapped */
    } else {
        sp->unmapped -= undone;
        set_bit(sp->regions, first, false);
        gpumem__arena_free(sp->layout, at, NULL);
    }
    return s;
}

gpumem_status gpumem__space_unmap(struct space *sp, uint64_t addr, uint64_t size,
                                  uint64_t *kept, struct reason *why)
{
    size_t first = granule_of(sp, addr), end = first + (size_t)(size >> sp->shift);
    uint64_t bytes;
    gpumem_status result = unmap_all(sp, first, end, &bytes, kept, why);
    /* what unmap_granules unmapped counts in sp->unmapped already */
    if (result != GPUMEM_OK) /* placed for good, with fewer granules mapped */
        return result;
    sp->unmapped -= size; /* the region is gone: none of it counts */
    set_bit(sp->regions, first, false);
    gpumem__arena_free(sp->layout, addr, NULL);
    return GPUMEM_OK;
}

/* The granules [i, end) of the bitmap (i < end) lie in words first..last: the
 * first word's from bit i % 64 up (*lo), the last's up to bit (end - 1) % 64
 * (*hi), the words between whole. */
static void word_span(size_t i, size_t end, size_t *first, size_t *last, uint64_t *lo,
                      uint64_t *hi)
{
    *first = i / 64;
    *last = (end - 1) / 64;
    *lo = ~UINT64_C(0) << (i % 64);
    *hi = ~UINT64_C(0) >> (63 - (end - 1) % 64);
}

/* A word of the bitmap at a time, the words between the ends with no mask. */
uint64_t gpumem__space_unmapped_in(const struct space *sp, uint64_t addr, uint64_t size)
{
    size_t i = granule_of(sp, addr), end = i + (size_t)(size >> sp->shift), w, last;
    uint64_t lo, hi;
    if (!sp->unmapped || i >= end)
        return 0;
    word_span(i, end, &w, &last, &lo, &hi);
    if (w == last)
        return (uint64_t)__builtin_popcountll(~sp->mapped[w] & lo & hi) * sp->granularity;
    uint64_t missing = (uint64_t)__builtin_popcountll(~sp->mapped[w] & lo);
    while (++w < last)
        missing += (uint64_t)__builtin_popcountll(~sp->mapped[w]);
    missing += (uint64_t)__builtin_popcountll(~sp->mapped[last] & hi);
    return missing * sp->granularity;
}

/* Every allocation on a range with granules given back asks this of its chunk
 * (pool_unbacked): the end words masked, a whole word compared at once between. */
bool gpumem__space_any_unmapped(const struct space *sp, uint64_t addr, uint64_t size)
{
    size_t i = granule_of(sp, addr), end = i + (size_t)(size >> sp->shift), w, last;
    uint64_t lo, hi;
    if (!sp->unmapped || i >= end)
        return false;
    word_span(i, end, &w, &last, &lo, &hi);
    if (w == last)
        return (~sp->mapped[w] & lo & hi) != 0;
    if (~sp->mapped[w] & lo)
        return true;
    while (++w < last)
        if (~sp->mapped[w])
            return true;
    return (~sp->mapped[last] & hi) != 0;
}

uint64_t gpumem__space_unmapped(const struct space *sp) { return sp->unmapped; }

gpumem_status gpumem__space_unmap_part(struct space *sp, uint64_t addr, uint64_t size,
                                       uint64_t *bytes, struct reason *why)
{
    return unmap_granules(sp, addr, size, bytes, why);
}

void gpumem__space_set_hooks(struct space *sp, void (*leave_fn)(void *ctx),
                             void (*enter_fn)(void *ctx),
                             void (*warn_fn)(void *ctx, const char *text), void *ctx)
{
    sp->leave = leave_fn;
    sp->enter = enter_fn;
    sp->warn = warn_fn;
    sp->hooks_ctx = ctx;
}

uint64_t gpumem__space_claim_part(struct space *sp, uint64_t addr, uint64_t size)
{
    size_t hi, i = first_whole(sp, addr, size, &hi), e;
    uint64_t bytes = 0;
    for (; next_whole(sp, &i, hi, &e); i = e) {
        if (sp->num_claimed == sp->cap_claimed) {
            size_t cap = sp->cap_claimed ? 2 * sp->cap_claimed : 16;
            size_t(*more)[2] = realloc(sp->claimed, cap * sizeof *more);
            if (!more)
                break; /* no host memory to note it: it stays mapped */
            sp->claimed = more;
            sp->cap_claimed = cap;
        }
        sp->claimed[sp->num_claimed][0] = i;
        sp->claimed[sp->num_claimed][1] = e - i;
        sp->num_claimed++;
        unmap_begin(sp, i, e);
        bytes += (uint64_t)(e - i) << sp->shift;
    }
    return bytes;
}

gpumem_status gpumem__space_unmap_claimed(struct space *sp, uint64_t *bytes,
                                          uint64_t *back, struct reason *why)
{
    gpumem_status result = GPUMEM_OK;
    *bytes = *back = 0;
    for (size_t k = 0, run; k < sp->num_claimed; k = run) {
        /* claims side by side (in address order, as claimed) go as one run */
        size_t i = sp->claimed[k][0], n = sp->claimed[k][1];
        for (run = k + 1; run < sp->num_claimed && sp->claimed[run][0] == i + n; run++)
            n += sp->claimed[run][1];
        uint64_t done = 0;
        if (result == GPUMEM_OK) /* after a refusal, the rest stay mapped */
            result = unmap_run(sp, i, i + n, &done, why);
        else
            unmap_none(sp, i, i + n);
        *bytes += done;
        *back += ((uint64_t)n << sp->shift) - done;
    }
    sp->num_claimed = 0;
    return result;
}

gpumem_status gpumem__space_map_part(struct space *sp, uint64_t addr, uint64_t size,
                                     uint64_t *bytes, uint64_t *held, struct reason *why)
{
    bool stuck;
    gpumem_status s = map_granules(sp, addr, size, bytes, &stuck, held, why);
    sp->unmapped -= *bytes; /* a stuck extent counts in *bytes: it stays mapped */
    return s;
}
