/* Address spaces of growing pools: a range of addresses allocated from the
 * backend for a pool's whole budget, a layout arena over it whose live chunks are
 * the regions placed in it, and a bitmap of the granules mapped with physical
 * memory. The layout's best fit (smallest hole, lowest address) keeps regions
 * adjacent. Each granule is mapped on its own (one backend mapping, one handle),
 * so that any whole granule of a region can be given back while the rest of the
 * region stays in use, and mapped again later (gpumem__space_unmap_part,
 * gpumem__space_map_part). See space.h; the owning pool's lock guards everything
 * here. */
#include "space.h"

#include "arena.h"

#include <stdio.h>
#include <stdlib.h>

struct space {
    struct backend *backend;
    int device;
    uint64_t base, size;  /* the range */
    uint64_t granularity; /* every region's size and address is a multiple */
    unsigned shift;       /* log2(granularity): the backends give powers of two */
    struct arena *layout; /* live chunks: placed regions; free chunks: holes */
    uint64_t *mapped;     /* bit i: granule i of the range is mapped */
    uint64_t unmapped;    /* bytes of placed regions whose granules are not mapped */
};

/* The granule at addr (in the range) and its bit. */
static size_t granule_of(const struct space *sp, uint64_t addr)
{
    return (size_t)((addr - sp->base) >> sp->shift);
}

static bool is_mapped(const struct space *sp, uint64_t addr)
{
    size_t i = granule_of(sp, addr);
    return sp->mapped[i / 64] >> (i % 64) & 1;
}

static void set_mapped(struct space *sp, uint64_t addr, bool on)
{
    size_t i = granule_of(sp, addr);
    uint64_t bit = UINT64_C(1) << (i % 64);
    sp->mapped[i / 64] = on ? sp->mapped[i / 64] | bit : sp->mapped[i / 64] & ~bit;
}

/* Maps every granule of [addr, addr+size) that is not mapped, one backend mapping
 * each, in address order; *bytes: the bytes newly mapped (a granule whose failed
 * mapping could not be undone counts: its addresses stay mapped, *stuck). On
 * failure the granules mapped before it stay mapped; *held says the failing
 * granule's memory stays taken. */
static gpumem_status map_granules(struct space *sp, uint64_t addr, uint64_t size,
                                  uint64_t *bytes, bool *stuck, bool *held,
                                  struct reason *why)
{
    struct backend *b = sp->backend;
    *bytes = 0;
    *stuck = *held = false;
    for (uint64_t at = addr; at < addr + size; at += sp->granularity) {
        if (is_mapped(sp, at))
            continue;
        gpumem_status s =
            b->ops->space_map(b, sp->device, at, sp->granularity, stuck, held, why);
        if (s == GPUMEM_OK || *stuck) {
            set_mapped(sp, at, true);
            *bytes += sp->granularity;
        }
        if (s != GPUMEM_OK)
            return s;
    }
    return GPUMEM_OK;
}

/* Unmaps every mapped granule of [addr, addr+size), giving its memory back;
 * *bytes: the bytes unmapped. Stops at the first refusal (that granule stays
 * mapped). */
static gpumem_status unmap_granules(struct space *sp, uint64_t addr, uint64_t size,
                                    uint64_t *bytes, struct reason *why)
{
    struct backend *b = sp->backend;
    *bytes = 0;
    for (uint64_t at = addr; at < addr + size; at += sp->granularity) {
        if (!is_mapped(sp, at))
            continue;
        gpumem_status s = b->ops->space_unmap(b, sp->device, at, sp->granularity, why);
        if (s != GPUMEM_OK)
            return s;
        set_mapped(sp, at, false);
        *bytes += sp->granularity;
    }
    return GPUMEM_OK;
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
    if (sp)
        sp->mapped = calloc(words, sizeof *sp->mapped);
    if (!sp || !sp->mapped || gpumem__arena_create(NULL, &sp->layout) != ARENA_OK) {
        if (sp)
            free(sp->mapped);
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
        free(sp->mapped);
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
    free(sp->mapped);
    free(sp);
    return s;
}

void gpumem__space_forget(struct space *sp)
{
    if (!sp)
        return;
    gpumem__arena_destroy(sp->layout);
    free(sp->mapped);
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
    uint64_t at, got, bytes;
    bool stuck = false, taken = false;
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
    gpumem_status s = map_granules(sp, at, size, &bytes, &stuck, &taken, why);
    if (s == GPUMEM_OK) {
        *addr = at;
        return GPUMEM_OK;
    }
    /* The granules mapped before the failure are unmapped again, each tried;
     * a mapping that cannot be undone (the failing one when stuck, or a refused
     * unmap) keeps the region's place, as a region the backend refuses to unmap
     * does: never reused, and the range is left reserved. */
    struct reason ignored; /* the failure to report is the first */
    struct backend *b = sp->backend;
    uint64_t kept = 0;
    /* a fresh region's granules are mapped in order: the stuck one came last */
    uint64_t stuck_at = stuck ? at + bytes - sp->granularity : UINT64_MAX;
    for (uint64_t g = at; g < at + bytes; g += sp->granularity) {
        if (g == stuck_at ||
            b->ops->space_unmap(b, sp->device, g, sp->granularity, &ignored) != GPUMEM_OK)
            kept += sp->granularity;
        else
            set_mapped(sp, g, false);
    }
    *held = kept + (taken && !stuck ? sp->granularity : 0);
    if (kept)
        sp->unmapped += size - kept; /* placed, and not mapped */
    else
        gpumem__arena_free(sp->layout, at, NULL);
    return s;
}

gpumem_status gpumem__space_unmap(struct space *sp, uint64_t addr, uint64_t size,
                                  uint64_t *kept, struct reason *why)
{
    struct backend *b = sp->backend;
    uint64_t missing = gpumem__space_unmapped_in(sp, addr, size);
    gpumem_status first = GPUMEM_OK;
    struct reason later; /* the first refusal is the one to report */
    *kept = 0;
    for (uint64_t at = addr; at < addr + size; at += sp->granularity) {
        if (!is_mapped(sp, at))
            continue;
        gpumem_status s = b->ops->space_unmap(b, sp->device, at, sp->granularity,
                                              first == GPUMEM_OK ? why : &later);
        if (s == GPUMEM_OK) {
            set_mapped(sp, at, false);
        } else {
            *kept += sp->granularity;
            if (first == GPUMEM_OK)
                first = s;
        }
    }
    if (first != GPUMEM_OK) { /* placed for good, with fewer granules mapped */
        sp->unmapped += size - *kept - missing;
        return first;
    }
    sp->unmapped -= missing;
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
    gpumem_status s = unmap_granules(sp, addr, size, bytes, why);
    sp->unmapped += *bytes;
    return s;
}

gpumem_status gpumem__space_map_part(struct space *sp, uint64_t addr, uint64_t size,
                                     uint64_t *bytes, uint64_t *held, struct reason *why)
{
    bool stuck, taken;
    gpumem_status s = map_granules(sp, addr, size, bytes, &stuck, &taken, why);
    sp->unmapped -= *bytes;
    /* a stuck granule counts in *bytes: it stays mapped */
    *held = taken && !stuck ? sp->granularity : 0;
    return s;
}
