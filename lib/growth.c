/* Where a pool's chunks meet device memory (pool_state.h): the regions a pool
 * takes from its GPU and gives back, its address space, growth, the trim and the
 * release passes. pool.c calls in here when the arena lacks room
 * (gpumem__growth_grow), when a chunk lands on granules given back
 * (gpumem__growth_back) and at the release points.
 *
 * A greedy pool reserves its whole budget at initialization (TensorFlow's
 * default). A growing pool takes a region when the arena has no chunk that fits.
 * On a device whose regions join into one block when they touch (mapped into the
 * pool's address range, or the simulated GPU's own address space), it extends the
 * free tail of the region it took last by what the request lacks, rounded up to
 * the mapping granularity (2 MiB), so that peak reserved follows peak live (issue
 * 22); on a device whose regions do not join (plain cuMemAlloc blocks), small
 * requests get a 2 MiB region and medium ones 20 MiB (so that many small tensors
 * share regions), large ones a region of their own size rounded to 2 MiB. Never
 * past the budget. Before an out-of-memory is reported, the pool gives its wholly
 * free regions back and tries once more; the same release serves
 * gpumem_release_unused. A greedy pool whose memory was released takes its
 * remaining budget again on demand, and when the GPU no longer has that much free,
 * grows as a growing pool does rather than fail the request. Every pool, growing
 * or not, places by its arena's plain best fit (arena.h), so holes are refilled
 * before the pool grows or its untouched end is cut.
 *
 * On a backend with address spaces (CUDA's virtual memory management, which the
 * simulated GPU models) a growing pool allocates, on its first growth, one address
 * range for its whole budget (space.c) and maps its regions into it, rounded to the
 * mapping granularity, in a few extents each (a growth of any size costs the
 * driver a few calls): they land side by side, so free memory coalesces across
 * growth steps, and a released region is unmapped, its memory given back to the
 * device. A release also unmaps the whole extents of the free chunks inside the
 * regions that stay (release_granules); their addresses stay the arena's, and an
 * allocation that lands on them maps them again first (gpumem__growth_back).
 * Before it maps past its peak of reserved bytes, a growing pool gives back as
 * many of its holes' extents that stayed free across a window as that mapping
 * lacks (pool_trim; GPUMEM_GROWTH_TRIM, on by default), until allocations have
 * mapped back as much of what it gave back as its peak (it then stops for good).
 * Where the range cannot serve (no spaces, the budget's last partial granule, no
 * hole left) the pool takes plain regions as before.
 *
 * Every function here runs with pool->lock held; the region map's lock is taken
 * inside it, never the other way round (docs/internals.md, "Locks"). The passes
 * that map or unmap also hold the pool's map_lock, taken before pool->lock, and
 * let pool->lock go around each of their driver calls (pool_leave): what they
 * give back leaves the arena and the space's bitmaps first, what they map enters
 * them after, so that allocations and frees that map nothing go on meanwhile,
 * and an allocation that lands on memory being mapped or unmapped waits for the
 * map lock. */
#include "pool_state.h"

#include "split.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SMALL_REQUEST   (1 * GPUMEM_MIB)
#define SMALL_REGION    (2 * GPUMEM_MIB)
#define MEDIUM_REQUEST  (10 * GPUMEM_MIB)
#define MEDIUM_REGION   (20 * GPUMEM_MIB)
#define REGION_ROUNDING (2 * GPUMEM_MIB)

/* Whether a region at base joins its neighbours (mapped into the pool's range,
 * or on a device whose regions join): the viewer's segment_map, not _alloc. */
static bool pool_region_joins(const struct pool *pool, uint64_t base)
{
    return pool->p.backend->regions_contiguous ||
           (pool->g.space && gpumem__space_contains(pool->g.space, base));
}

/* ------------------------------------------------------- the map lock -- */

/* Around each driver call that maps or unmaps (the space's hooks, and the
 * plain regions' calls here): a pass that holds the pool's map_lock
 * (pool->g.mapper) lets the pool's lock go for the call, so that allocations
 * and frees that map nothing go on; whatever it changed is consistent for them
 * by then (a mapping is booked after its call, an unmapping before: space.h).
 * Without the map lock (a pool being made or destroyed) the lock stays. */
static void pool_leave(void *ctx)
{
    struct pool *pool = ctx;
    if (pool->g.mapper)
        gpumem__mutex_unlock(&pool->lock);
}

static void pool_enter(void *ctx)
{
    struct pool *pool = ctx;
    if (pool->g.mapper)
        gpumem__mutex_lock(&pool->lock);
}

static void pool_warn(void *ctx, const char *text)
{
    struct pool *pool = ctx;
    gpumem__log(pool->p.opts, GPUMEM_LOG_WARNING,
                "%s: %s; the mappings were unmapped one by one instead", pool->p.label,
                text);
}

void gpumem__growth_map_begin(struct pool *pool)
{
    gpumem__mutex_lock(&pool->map_lock);
    gpumem__mutex_lock(&pool->lock);
    pool->g.mapper = true;
}

void gpumem__growth_map_end(struct pool *pool)
{
    pool->g.mapper = false;
    gpumem__mutex_unlock(&pool->lock);
    gpumem__mutex_unlock(&pool->map_lock);
}

/* ------------------------------------------------------------- regions -- */

/* Gives a region back to the device: unmaps it from the pool's space, or
 * releases a plain one. *kept: the bytes the device still holds after a refusal
 * (the region's, or its refused granules'; 0 on success). The region is out of
 * the arena: nothing else reaches it while the pool's lock is let go.
 * pre: pool->lock held. */
static gpumem_status pool_give_back(struct pool *pool, uint64_t base, uint64_t size,
                                    uint64_t *kept, struct reason *why)
{
    struct backend *b = pool->p.backend;
    if (pool->g.space && gpumem__space_contains(pool->g.space, base))
        return gpumem__space_unmap(pool->g.space, base, size, kept, why);
    pool_leave(pool);
    gpumem_status s = b->ops->free_region(b, pool->p.device, base, size, why);
    pool_enter(pool);
    *kept = s == GPUMEM_OK ? 0 : size;
    return s;
}

/* Publishes `reserved` in the ledger, when there is one (pool.h, pool_share). */
static inline void pool_publish_reserved(struct pool *pool, uint64_t reserved)
{
    if (pool->p.share.usage)
        atomic_store_explicit(&pool->p.share.usage->reserved, reserved,
                              memory_order_relaxed);
}

/* Around a driver call that takes admitted bytes for the pool: the ledger's
 * figure of the bytes being taken (pool_share.taking), so that another process
 * plans its admission once they are published as reserved, and not while they
 * may count twice, gone from the driver's free memory and still admitted and
 * not taken (ledger.c, settle_takes). The end comes after the publication. */
static void pool_take_begin(struct pool *pool, uint64_t bytes)
{
    if (pool->p.share.taking)
        atomic_fetch_add(pool->p.share.taking, bytes);
}

static void pool_take_end(struct pool *pool, uint64_t bytes)
{
    if (pool->p.share.taking)
        atomic_fetch_sub(pool->p.share.taking, bytes);
}

/* Counts `size` more bytes as taken from the device. pre: pool->lock held. */
static void pool_count_reserved(struct pool *pool, uint64_t size)
{
    pool->reserved += size;
    pool->reserved_total += size;
    if (pool->reserved > pool->peak_reserved)
        pool->peak_reserved = pool->reserved;
    pool_publish_reserved(pool, pool->reserved); /* after the device gave them */
}

/* A growth step failed, and the device keeps the `size` bytes it had taken for it
 * (the backend could not give them back): as for a region the backend refuses to
 * take back, they stay in `reserved`, counting against the budget, and go to the
 * log with `cause`, the reason the memory stayed. pre: pool->lock held. */
static void pool_add_held(struct pool *pool, uint64_t size, const struct reason *cause)
{
    char buf[GPUMEM_BYTES_BUF];
    pool_count_reserved(pool, size);
    gpumem__log(pool->p.opts, GPUMEM_LOG_ERROR,
                "%s: a growth step of %s failed, and the device keeps its memory, "
                "which stays reserved: %s",
                pool->p.label, gpumem__format_bytes(size, buf, sizeof buf), cause->text);
}

/* Takes `size` bytes from the device, mapped into the pool's space (`mapped`;
 * size a multiple of its granularity) or as a plain region, and hands them to
 * the arena. pre: pool->lock held; size a multiple of 256 and within the budget. */
static gpumem_status pool_add_region(struct pool *pool, uint64_t size, bool mapped,
                                     struct reason *why)
{
    char buf[GPUMEM_BYTES_BUF];
    struct backend *b = pool->p.backend;
    if (!gpumem__region_map_make_room(pool->p.map))
        return gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                              "%s: out of host memory for the region map", pool->p.label);
    uint64_t base, held = 0;
    const struct pool_share *sh = &pool->p.share;
    gpumem_status s = sh->admit ? sh->admit(sh->ctx, size, why) : GPUMEM_OK;
    if (s == GPUMEM_OK)
        pool_take_begin(pool, size);
    if (s == GPUMEM_OK && mapped) {
        s = gpumem__space_map(pool->g.space, size, &base, &held, why);
    } else if (s == GPUMEM_OK) {
        pool_leave(pool);
        s = b->ops->alloc_region(b, pool->p.device, size, &base, why);
        pool_enter(pool);
    } else
        sh = NULL; /* not admitted: nothing to take back */
    if (s != GPUMEM_OK) {
        gpumem__region_map_cancel_room(pool->p.map);
        if (held) /* the device keeps that memory: it counts against the budget */
            pool_add_held(pool, held, why);
        if (sh && sh->unadmit && size > held)
            sh->unadmit(sh->ctx, size - held);
        if (sh) /* admitted: its take ends here */
            pool_take_end(pool, size);
        return s;
    }
    /* Mapped regions touch their neighbours in one range: the arena may join them.
     * The memory is the requester's (a stream's owner, so that it joins that
     * stream's free tail), or anyone's. */
    gpumem__split_mark(pool); /* recounted once added */
    int added = gpumem__arena_add_region_owned(pool->arena, base, size,
                                               mapped || b->regions_contiguous,
                                               pool->g.req_owner);
    if (added != ARENA_OK) {
        pool->split.marked = false; /* nothing changed */
        gpumem__region_map_cancel_room(pool->p.map);
        s = added == ARENA_HOST_OOM
                ? gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                                 "%s: out of host memory for the arena's bookkeeping",
                                 pool->p.label)
                : gpumem__reason(why, GPUMEM_ERR_BACKEND,
                                 "%s: the backend returned a region of %s at 0x%llx that "
                                 "overlaps one the pool holds",
                                 pool->p.label,
                                 gpumem__format_bytes(size, buf, sizeof buf),
                                 (unsigned long long)base);
        struct reason back;
        uint64_t kept;
        if (pool_give_back(pool, base, size, &kept, &back) != GPUMEM_OK)
            pool_add_held(pool, kept, &back);
        if (sh->unadmit && size > kept)
            sh->unadmit(sh->ctx, size - kept);
        pool_take_end(pool, size);
        return s;
    }
    gpumem__region_map_insert(pool->p.map, base, size, pool);
    gpumem__split_recount(pool); /* a free chunk more, or a larger one */
    pool_count_reserved(pool, size);
    pool_take_end(pool, size);
    if (pool->history)
        gpumem__pool_record(pool,
                            mapped || b->regions_contiguous ? HIST_SEGMENT_MAP
                                                            : HIST_SEGMENT_ALLOC,
                            base, size, 0, NULL);
    pool->g.last_base = base;
    if (mapped || b->regions_contiguous)
        pool->g.tail_end = base + size;
    gpumem__log(pool->p.opts, GPUMEM_LOG_DEBUG, "%s: %s a region of %s at 0x%llx",
                pool->p.label, mapped ? "mapped" : "reserved",
                gpumem__format_bytes(size, buf, sizeof buf), (unsigned long long)base);
    return GPUMEM_OK;
}

/* Called by the arena for each wholly free region it gave up. A region the backend
 * refuses to take back is still held from the device: it stays in `reserved`, so
 * that it keeps counting against the budget, is not counted as released, and goes
 * to the log (the arena has dropped it, and the backend does not hand its
 * addresses out again while it holds them). */
static void pool_release_region(void *ctx, uint64_t base, uint64_t size)
{
    char buf[GPUMEM_BYTES_BUF];
    struct pool *pool = ctx;
    struct reason why;
    /* granules given back before (pool_release_granules) no longer count */
    uint64_t gone = pool->g.unmapped && gpumem__space_contains(pool->g.space, base)
                        ? gpumem__space_unmapped_in(pool->g.space, base, size)
                        : 0;
    uint64_t kept;
    bool joins = pool->history && pool_region_joins(pool, base);
    gpumem__region_map_remove(pool->p.map, base);
    /* before the device has them */
    pool_publish_reserved(pool, pool->reserved - (size - gone));
    gpumem_status s = pool_give_back(pool, base, size, &kept, &why);
    /* the device may have taken part of it back (a refused granule stays) */
    pool->g.unmapped -= gone;
    pool->reserved -= size - gone - kept;
    pool->g.released += size - gone - kept;
    if (pool->p.share.unadmit && size - gone > kept)
        pool->p.share.unadmit(pool->p.share.ctx, size - gone - kept);
    if (s == GPUMEM_OK && pool->history)
        gpumem__pool_record(pool, joins ? HIST_SEGMENT_UNMAP : HIST_SEGMENT_FREE, base,
                            size, 0, NULL);
    if (s == GPUMEM_OK) {
        gpumem__log(pool->p.opts, GPUMEM_LOG_DEBUG,
                    "%s: gave a free region of %s at 0x%llx back", pool->p.label,
                    gpumem__format_bytes(size, buf, sizeof buf),
                    (unsigned long long)base);
        return;
    }
    pool_publish_reserved(pool, pool->reserved);
    if (pool->g.release_status == GPUMEM_OK) {
        pool->g.release_status = s;
        pool->g.release_why = why;
    }
    char kept_buf[GPUMEM_BYTES_BUF];
    gpumem__log(pool->p.opts, GPUMEM_LOG_ERROR,
                "%s: a free region of %s at 0x%llx could not be given back and stays "
                "reserved (%s of it): %s",
                pool->p.label, gpumem__format_bytes(size, buf, sizeof buf),
                (unsigned long long)base,
                gpumem__format_bytes(kept, kept_buf, sizeof kept_buf), why.text);
}

/* Gives back what the pass claimed (gpumem__space_claim_part: free memory of
 * the pool's space, out of the bitmaps and counted in pool->g.unmapped), the
 * pool's lock let go around each unmap, and counts it out of its reserved
 * bytes (and the ledger's); returns the bytes that went back. A refusal stops
 * it: that extent and the rest stay mapped (back in the bitmaps), and the
 * failure is kept in pool->g.release_status, as in a release pass, and logged.
 * pre: pool->lock held, pool->g.space. */
static uint64_t pool_unmap_claimed(struct pool *pool)
{
    char buf[GPUMEM_BYTES_BUF];
    struct reason why;
    uint64_t bytes = 0, back = 0;
    gpumem_status s = gpumem__space_unmap_claimed(pool->g.space, &bytes, &back, &why);
    pool->g.unmapped -= back;
    if (back) /* mapped again in the bitmaps: the split figures' bytes */
        gpumem__split_recount(pool);
    pool->reserved -= bytes;
    pool->g.released += bytes;
    pool_publish_reserved(pool, pool->reserved); /* after: counted twice meanwhile */
    if (bytes && pool->p.share.unadmit)
        pool->p.share.unadmit(pool->p.share.ctx, bytes);
    if (s == GPUMEM_OK)
        return bytes;
    if (pool->g.release_status == GPUMEM_OK) {
        pool->g.release_status = s;
        pool->g.release_why = why;
    }
    gpumem__log(pool->p.opts, GPUMEM_LOG_ERROR,
                "%s: free memory could not be given back and stays reserved (%s "
                "of it): %s",
                pool->p.label, gpumem__format_bytes(back, buf, sizeof buf), why.text);
    return bytes;
}

/* Claims the whole extents of [lo, lo+size), free memory of the pool's space:
 * out of the bitmaps at once (an allocation that lands there maps them again,
 * after this pass), unmapped by pool_unmap_claimed. Returns their bytes. */
static uint64_t pool_claim(struct pool *pool, uint64_t lo, uint64_t size)
{
    uint64_t bytes = gpumem__space_claim_part(pool->g.space, lo, size);
    pool->g.unmapped += bytes;
    return bytes;
}

/* Called by the arena's walk for each chunk: a free chunk of owner 0 (anyone's:
 * no stream's work may still use it) in the pool's space has its whole extents
 * that are still mapped claimed (not the partial granules at its ends, which live
 * neighbours may share); its addresses stay the arena's, and growth_back maps
 * them again when they are handed out. The walk changes nothing, so that the
 * unmaps, with the pool's lock let go, come after it. */
static void pool_release_granules(void *ctx, const struct arena_chunk_info *c)
{
    struct pool *pool = ctx;
    uint64_t addr = c->addr, size = c->size;
    if (!c->is_free || c->owner != 0 || !gpumem__space_contains(pool->g.space, addr) ||
        addr + size == pool->g.keep_end)
        return;
    uint64_t g = gpumem__space_granularity(pool->g.space), lo, hi;
    hi = gpumem__align_down(addr + size, g);
    if (!gpumem__align_up(addr, g, &lo) || lo >= hi)
        return;
    (void)pool_claim(pool, lo, hi - lo);
}

static void pool_no_segment(void *ctx, uint64_t base, uint64_t size)
{
    (void)ctx, (void)base, (void)size;
}

/* Called by the arena for each wholly free region it gave up: noted, and given
 * back once the arena is done (the pool's lock is let go then). Where no host
 * memory is left to note it, given back at once, the lock held. */
static void pool_note_region(void *ctx, uint64_t base, uint64_t size)
{
    struct pool *pool = ctx;
    struct growth *g = &pool->g;
    if (g->num_gone == g->cap_gone) {
        size_t cap = g->cap_gone ? 2 * g->cap_gone : 16;
        uint64_t(*more)[2] = realloc(g->gone, cap * sizeof *more);
        if (!more) {
            bool mapper = g->mapper;
            g->mapper = false;
            pool_release_region(pool, base, size);
            g->mapper = mapper;
            return;
        }
        g->gone = more;
        g->cap_gone = cap;
    }
    g->gone[g->num_gone][0] = base;
    g->gone[g->num_gone][1] = size;
    g->num_gone++;
}

/* The words of the trim's bitmap (trim_gone): a bit per granule of the space. */
static size_t trim_gone_words(const struct growth *g)
{
    return (size_t)(((g->sp_size >> g->sp_shift) + 63) / 64);
}

/* The trim's record (freed_at and trim_gone) freed: no trim from now on. */
static void trim_record_free(struct growth *g)
{
    free(g->freed_at);
    g->freed_at = NULL;
    free(g->trim_gone);
    g->trim_gone = NULL;
}

/* Gives every wholly free region back, then, in the pool's space, the whole
 * extents of its free chunks; returns the bytes given back. Everything is taken
 * out of the arena and the bitmaps first, under the pool's lock, and given back
 * after, the lock let go around each driver call (pool_leave). The first
 * failure's status and reason are left in pool->g.release_status and
 * pool->g.release_why. pre: pool->lock held. */
uint64_t gpumem__growth_release_free(struct pool *pool)
{
    struct growth *g = &pool->g;
    if (g->trim_gone) /* what the trim gave back is the release's now */
        memset(g->trim_gone, 0, trim_gone_words(g) * sizeof *g->trim_gone);
    g->released = 0;
    g->release_status = GPUMEM_OK;
    g->release_why.text[0] = '\0';
    g->num_gone = 0;
    gpumem__split_mark(pool); /* recounted below */
    gpumem__arena_release_free_regions(pool->arena, pool_note_region, pool);
    if (g->space)
        gpumem__arena_walk_user(pool->arena, pool_no_segment, pool_release_granules,
                                pool);
    /* out of the arena and the bitmaps, before the lock is let go */
    gpumem__split_recount(pool);
    for (size_t i = 0; i < g->num_gone; i++)
        pool_release_region(pool, g->gone[i][0], g->gone[i][1]);
    g->num_gone = 0;
    if (g->space)
        (void)pool_unmap_claimed(pool);
    return g->released;
}

/* ---------------------------------------------------------------- trim -- */

/* Marks the granules of [first, end) that are mapped, before the trim claims
 * them (those a release gave back before are the release's). A granule whose
 * extent reaches out of the run stays mapped, and its mark means nothing. */
static void trim_gone_mark(struct growth *g, size_t first, size_t end)
{
    uint64_t gran = UINT64_C(1) << g->sp_shift;
    for (size_t i = first; i < end; i++)
        if (!gpumem__space_unmapped_in(g->space,
                                       g->sp_base + ((uint64_t)i << g->sp_shift), gran))
            g->trim_gone[i / 64] |= UINT64_C(1) << (i % 64);
}

/* The bytes of [lo, hi) (granule-aligned, in the space) that the trim gave back
 * and that are still unmapped: what mapping the range maps back of the trim's.
 * Their marks are cleared (the range is being mapped). */
static uint64_t trim_gone_take(struct growth *g, uint64_t lo, uint64_t hi)
{
    uint64_t gran = UINT64_C(1) << g->sp_shift, bytes = 0;
    for (uint64_t at = lo; at < hi; at += gran) {
        size_t i = (size_t)((at - g->sp_base) >> g->sp_shift);
        uint64_t bit = UINT64_C(1) << (i % 64);
        if (!(g->trim_gone[i / 64] & bit))
            continue;
        g->trim_gone[i / 64] &= ~bit;
        if (gpumem__space_unmapped_in(g->space, at, gran))
            bytes += gran;
    }
    return bytes;
}

/* The trim stops for good (pool_trim): its record is freed, and the pool grows
 * from now on as with GPUMEM_GROWTH_TRIM=off (what it gave back is mapped again
 * when allocations land on it, as after a release). */
static void trim_retire(struct pool *pool)
{
    char back[GPUMEM_BYTES_BUF], peak[GPUMEM_BYTES_BUF];
    struct growth *g = &pool->g;
    gpumem__log(pool->p.opts, GPUMEM_LOG_INFO,
                "%s: the trim stops: allocations mapped %s of the memory it gave back "
                "again, its limit (the peak of %s reserved over the window, %g); the "
                "pool now grows as with GPUMEM_GROWTH_TRIM=off",
                pool->p.label, gpumem__format_bytes(g->trim_regret, back, sizeof back),
                gpumem__format_bytes(pool->peak_reserved, peak, sizeof peak),
                pool->p.opts->growth_trim_window);
    trim_record_free(g);
}

/* Whether granule i of the space has stayed free across the window: last freed
 * (or never, since it was mapped) before the trim's cut. The clock is in MiB and
 * wraps at 2^32 (4 PiB freed): differences are taken modulo 2^32. */
static inline bool granule_idle(const struct growth *g, size_t i)
{
    uint32_t now = (uint32_t)g->trim_now, cut = (uint32_t)g->trim_idle_before;
    return (uint32_t)(now - g->freed_at[i]) >= (uint32_t)(now - cut);
}

/* Called by the arena for each of owner 0's free chunks of at least a granule,
 * largest first, during a trim: gives back the whole extents of the top run of
 * its whole granules that stayed free across the window (granule_idle), at most
 * what the trim still wants. Best fit takes a free chunk's low end, and the
 * largest holes are the last it takes, so these are the granules an allocation
 * lands on last. Not the free tail a growth extends (keep_end), nor the partial
 * granules at a chunk's ends, which live neighbours may share. The chunk stays
 * free: an allocation may land there as if it were mapped, and growth_back maps
 * what it lands on. A refusal stops the trim (it stays in release_status).
 * Returns whether to go on. */
static bool trim_pick(void *ctx, uint64_t addr, uint64_t size)
{
    struct pool *pool = ctx;
    struct growth *g = &pool->g;
    uint64_t end = addr + size, gran = UINT64_C(1) << g->sp_shift, lo, hi;
    if (!gpumem__space_contains(g->space, addr) || end == g->keep_end)
        return true;
    hi = gpumem__align_down(end, gran);
    if (!gpumem__align_up(addr, gran, &lo) || lo >= hi)
        return true;
    size_t first = (size_t)((lo - g->sp_base) >> g->sp_shift);
    size_t i = (size_t)((hi - g->sp_base) >> g->sp_shift);
    /* from the top down: the top run of idle granules */
    while (i > first && !granule_idle(g, i - 1))
        i--;
    size_t j = i;
    while (j > first && granule_idle(g, j - 1))
        j--;
    lo = g->sp_base + ((uint64_t)j << g->sp_shift);
    hi = g->sp_base + ((uint64_t)i << g->sp_shift);
    if (lo >= hi || gpumem__space_unmapped_in(g->space, lo, hi - lo) == hi - lo)
        return true; /* nothing idle, or given back already */
    trim_gone_mark(g, j, i);
    uint64_t bytes = pool_claim(pool, lo, hi - lo);
    g->trim_want -= gpumem__min_u64(g->trim_want, bytes);
    return g->trim_want != 0;
}

/* Before a growing pool maps memory past its peak of reserved bytes (a growth
 * step, or a chunk landing on granules given back), it gives back `want` bytes
 * (what the mapping lacks below the peak) of its holes' whole extents that have
 * stayed free across the window: the granules last freed before the pool went on
 * to hand out GPUMEM_GROWTH_TRIM_WINDOW times its peak of reserved bytes (default
 * 1: a step of a training loop hands out about its peak, and the window spans
 * about a step; the clock is counted on frees, so that allocations pay nothing
 * for it: gpumem__growth_clock).
 * Memory one step frees and the next takes again is never given back, so a
 * workload that repeats maps and unmaps nothing once it has run through; memory
 * that stays idle goes, and the peak rises only by what the idle holes cannot
 * give.
 *
 * A workload that does not repeat within the window (random churn, a period
 * longer than the peak) lands again on what the trim gave back, and each such
 * mapping past the peak gives back other idle granules: a swap of driver calls
 * for a peak that stays where it was. So the trim keeps count of the bytes
 * allocations map back of what it gave back (trim_regret; a release point's
 * give-back is the release's), and stops for good once they reach its peak of
 * reserved bytes divided by the window (never with a window of 0, which asks for
 * memory at any price): by then its mistakes have cost as much mapping as
 * growing the whole pool did, while the memory it still saves is a part of the
 * peak. So its mappings over the pool's life are bounded by the pool's peak,
 * and every workload's steady state maps nothing (docs/bench.md, "The trim's
 * mistakes"). The count is never reset; a reset of the peak statistics lowers
 * the limit to what is reserved then, so the trim may stop sooner, never later.
 *
 * The trim never changes the arena: the granules stay free, and best fit places
 * as it would with them mapped. Placement is thus the same as without the trim,
 * the range the same, and what is mapped a part of it: the peak is never above
 * the one without the trim, on any workload and however long it runs
 * (docs/bench.md, "The trim leaves placement to the arena"). The largest holes
 * first (best fit takes the smallest that holds a request), the top of each (it
 * cuts a hole's low end). Streams' memory whose work is known done is anyone's
 * first (gpumem__streams_collect), so that it may be trimmed too; what a stream
 * still holds is not. Skipped when a trim found too little and nothing was
 * freed, and no granule aged into the window, since. A failure stays in
 * pool->g.release_status, as in a release pass; the mapping goes on. `taking`:
 * the bytes of a chunk the allocation in flight has counted live already
 * (gpumem__growth_back): the clock stands where it stood before that allocation,
 * as for a growth. pre: pool->g.space, pool->g.freed_at. */
static void pool_trim(struct pool *pool, uint64_t want, uint64_t taking)
{
    struct growth *g = &pool->g;
    if ((double)g->trim_regret * pool->p.opts->growth_trim_window >=
        (double)pool->peak_reserved) {
        trim_retire(pool);
        return;
    }
    uint64_t now = (gpumem__growth_clock(pool) - taking) >> 20,
             peak = pool->peak_reserved >> 20;
    uint64_t window = (uint64_t)(pool->p.opts->growth_trim_window * (double)peak);
    uint64_t cut = now - gpumem__min_u64(window, now);
    /* nothing freed and nothing aged into the window since a trim found too
     * little: this one would find the same */
    if (g->trimmed_frees == pool_frees_ever(pool) && g->trimmed_cut == cut)
        return;
    if (pool->streams)
        (void)gpumem__streams_collect(pool->streams, STREAMS_NONE);
    g->trim_now = now;
    g->trim_idle_before = cut;
    g->released = 0;
    g->release_status = GPUMEM_OK;
    g->release_why.text[0] = '\0';
    g->trim_want = want;
    uint64_t unmapped = g->unmapped;
    gpumem__arena_walk_free_largest(pool->arena, UINT64_C(1) << g->sp_shift, trim_pick,
                                    pool);
    if (g->unmapped != unmapped) /* claimed: out of the bitmaps */
        gpumem__split_recount(pool);
    (void)pool_unmap_claimed(pool); /* after the walk: the lock is let go there */
    g->trimmed_frees = g->trim_want ? pool_frees_ever(pool) : UINT64_MAX;
    g->trimmed_cut = cut;
    g->trim_want = 0;
}

/* The refusal when a growth or a mapping needs more than the `room` bytes of
 * budget not yet reserved. */
static gpumem_status pool_no_room(uint64_t room, struct reason *why)
{
    char buf[GPUMEM_BYTES_BUF];
    return gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                          "only %s of the budget is not reserved",
                          gpumem__format_bytes(room, buf, sizeof buf));
}

/* A chunk [addr, addr+size) just taken from the arena may lie on granules of the
 * space that a release gave back: maps them again, within the budget (giving
 * other free granules back first if it must). GPUMEM_ERR_OUT_OF_MEMORY when the
 * budget or the device cannot have them; the caller then frees the chunk.
 * pre: pool->lock held, the log held. */
gpumem_status gpumem__growth_back(struct pool *pool, uint64_t addr, uint64_t size,
                                  struct reason *why)
{
    struct space *sp = pool->g.space;
    if (!gpumem__space_contains(sp, addr))
        return GPUMEM_OK;
    uint64_t g = gpumem__space_granularity(sp), lo = gpumem__align_down(addr, g), hi;
    if (!gpumem__align_up(addr + size, g, &hi))
        hi = addr + size; /* cannot happen: the range ends on a granule */
    uint64_t lack = gpumem__space_unmapped_in(sp, lo, hi - lo);
    if (!lack)
        return GPUMEM_OK;
    /* what the trim gave back and this mapping takes again: its mistakes */
    uint64_t regret = pool->g.trim_gone ? trim_gone_take(&pool->g, lo, hi) : 0;
    /* mapping past the peak: the holes' idle granules go first (the chunk is
     * live, so none of its own) */
    if (pool->g.freed_at && pool->reserved + lack > pool->peak_reserved)
        pool_trim(pool, pool->reserved + lack - pool->peak_reserved, size);
    gpumem_status s = GPUMEM_ERR_OUT_OF_MEMORY;
    for (int attempt = 0; attempt < 2; attempt++) {
        uint64_t room = pool->p.budget - pool->reserved, bytes = 0;
        const struct pool_share *sh = &pool->p.share;
        if (lack <= room && sh->admit &&
            (s = sh->admit(sh->ctx, lack, why)) != GPUMEM_OK) {
            if (s != GPUMEM_ERR_OUT_OF_MEMORY) /* the ledger refused: as a full device */
                return s;
        } else if (lack <= room) {
            uint64_t held = 0;
            pool_take_begin(pool, lack);
            s = gpumem__space_map_part(sp, lo, hi - lo, &bytes, &held, why);
            pool->g.unmapped -= bytes;
            pool_count_reserved(pool, bytes);
            if (held)
                pool_add_held(pool, held, why);
            pool_take_end(pool, lack);
            if (sh->unadmit && lack > bytes + held) /* admitted, not taken */
                sh->unadmit(sh->ctx, lack - bytes - held);
            if (s == GPUMEM_OK)
                pool->g.trim_regret += regret;
            if (s != GPUMEM_ERR_OUT_OF_MEMORY)
                return s;
        } else {
            s = pool_no_room(room, why);
        }
        /* the chunk is live: a release gives back only other granules */
        if (attempt == 0 && gpumem__growth_release_free(pool) == 0)
            break;
        lack = gpumem__space_unmapped_in(sp, lo, hi - lo);
    }
    return s;
}

/* How much to take from a device whose regions do not join (plain cuMemAlloc
 * blocks) for a request of `need` bytes that the arena cannot serve, when `room`
 * bytes of budget are left (need <= room): PyTorch's segment sizes (docs/bench.md,
 * "The growth policy"): 2 MiB for requests up to 1 MiB, 20 MiB below 10 MiB, the
 * request rounded up to 2 MiB from there. */
static uint64_t growth_region_size(uint64_t need, uint64_t room)
{
    uint64_t size;
    if (need <= SMALL_REQUEST)
        size = SMALL_REGION;
    else if (need < MEDIUM_REQUEST)
        size = MEDIUM_REGION;
    else if (!gpumem__align_up(need, REGION_ROUNDING, &size))
        size = need;
    return gpumem__min_u64(size, room);
}

/* The pool's address space: asked for once, on the first growth of a growing
 * pool; NULL when the backend or the device has none or refused one (the pool
 * then grows by plain regions, and the log says why). pre: pool->lock held. */
static struct space *pool_space(struct pool *pool)
{
    char range[GPUMEM_BYTES_BUF], granule[GPUMEM_BYTES_BUF];
    if (pool->g.space_tried || !pool->p.growth)
        return pool->g.space;
    pool->g.space_tried = true;
    struct reason why;
    gpumem_status s = gpumem__space_create(pool->p.backend, pool->p.device,
                                           pool->p.budget, &pool->g.space, &why);
    if (s == GPUMEM_OK) { /* for the checks on every allocation (growth_unbacked) */
        gpumem__space_set_hooks(pool->g.space, pool_leave, pool_enter, pool_warn, pool);
        pool->g.sp_base = gpumem__space_base(pool->g.space);
        pool->g.sp_size = gpumem__space_size(pool->g.space);
        pool->g.sp_shift =
            (unsigned)__builtin_ctzll(gpumem__space_granularity(pool->g.space));
    }
    if (s == GPUMEM_OK && pool->p.opts->growth_trim) { /* NULL: no trim, and it says so */
        struct growth *g = &pool->g;
        g->freed_at = calloc((size_t)(g->sp_size >> g->sp_shift), sizeof *g->freed_at);
        g->trim_gone = calloc(trim_gone_words(g), sizeof *g->trim_gone);
        if (!g->freed_at || !g->trim_gone) {
            trim_record_free(g);
            gpumem__log(pool->p.opts, GPUMEM_LOG_WARNING,
                        "%s: out of host memory for the trim's record: no trim",
                        pool->p.label);
        }
    }
    if (s == GPUMEM_OK)
        gpumem__log(pool->p.opts, GPUMEM_LOG_DEBUG,
                    "%s: reserved an address range of %s for its growth (granularity %s)",
                    pool->p.label,
                    gpumem__format_bytes(gpumem__space_size(pool->g.space), range,
                                         sizeof range),
                    gpumem__format_bytes(gpumem__space_granularity(pool->g.space),
                                         granule, sizeof granule));
    else
        gpumem__log(pool->p.opts,
                    s == GPUMEM_ERR_UNSUPPORTED ? GPUMEM_LOG_DEBUG : GPUMEM_LOG_WARNING,
                    "%s: growing by plain allocations: %s", pool->p.label, why.text);
    return pool->g.space;
}

/* The free bytes at the end of the contiguous region taken last, which a growth
 * for a chunk of `need` bytes extends instead of taking a region for all of it (0
 * when they would serve it alone: then the arena did not lack room there).
 * pre: pool->lock held. */
static uint64_t pool_tail_free(const struct pool *pool, uint64_t need)
{
    unsigned owner = 0;
    uint64_t tail =
        pool->g.tail_end
            ? gpumem__arena_free_tail_owned(pool->arena, pool->g.tail_end, &owner)
            : 0;
    if (!((pool->g.req_owners | 1) >> owner & 1))
        return 0; /* another stream's: not the requester's to extend */
    return tail < need ? tail : 0;
}

/* On a device whose regions join (mapped into the pool's space, or the simulated
 * GPU's), takes what a chunk of `need` bytes lacks beyond the free tail of `tail`
 * bytes: need - tail rounded up to `g`, at most `room`. Placed at the tail, as it
 * nearly always is (the space's layout and the simulated device place by best fit,
 * lowest address first), it joins the tail; placed elsewhere, the tail cannot serve,
 * and unless the arena then holds the request (the new region alone, or joined
 * with a free chunk beside it: a released region's hole next to granules a
 * release gave back), one more region for the whole request is taken (the first
 * stays free for later requests, or goes back in a release pass). Mapped:
 * GPUMEM_ERR_UNSUPPORTED when the range has no hole, or the rounding passes the
 * budget (the caller takes a plain region). pre: pool->lock held; tail < need,
 * multiples of 256. */
static gpumem_status pool_extend(struct pool *pool, uint64_t need, uint64_t tail,
                                 uint64_t room, uint64_t g, bool mapped,
                                 struct reason *why)
{
    uint64_t end = pool->g.tail_end, lack = need - tail, size;
    uint64_t cap = mapped ? gpumem__align_down(room, g) : room;
    if (!gpumem__align_up(lack, g, &size) || size > cap)
        size = cap;
    if (size < lack)
        return mapped ? gpumem__reason(why, GPUMEM_ERR_UNSUPPORTED,
                                       "the budget's last partial granule")
                      : pool_no_room(room, why);
    gpumem_status s = pool_add_region(pool, size, mapped, why);
    if (s == GPUMEM_ERR_OUT_OF_MEMORY && !mapped && size > lack)
        s = pool_add_region(pool, lack, false, why); /* the device's last bytes */
    if (s != GPUMEM_OK || tail == 0 || pool->g.last_base == end ||
        gpumem__arena_largest_free(pool->arena) >= need)
        return s;
    return pool_extend(pool, need, 0, room - (pool->g.tail_end - pool->g.last_base), g,
                       mapped, why);
}

/* Takes one region for a chunk of `need` bytes when `room` bytes of budget are
 * left (need - the free tail <= room). A greedy pool whose memory was released
 * takes its whole remaining budget back; when the device no longer has that
 * much free (another runtime or process took part of it), it grows as a growing
 * pool does, so that the request is served rather than failed, and tries the
 * whole budget again at its next growth. A growing pool, on a device whose
 * regions join (its space, else the simulated GPU's), extends its free tail by
 * what the request lacks (pool_extend); on one whose regions do not (plain
 * cuMemAlloc blocks), takes a region of the policy's size (growth_region_size),
 * else just `need`. pre: pool->lock held; need a multiple of 256. */
static gpumem_status pool_take_region(struct pool *pool, uint64_t need, uint64_t room,
                                      struct reason *why)
{
    struct backend *b = pool->p.backend;
    gpumem_status s;
    if (!pool->p.growth && need <= room) {
        s = pool_add_region(pool, room, false, why);
        if (s != GPUMEM_ERR_OUT_OF_MEMORY)
            return s;
    }
    uint64_t tail = pool_tail_free(pool, need);
    struct space *sp = pool_space(pool);
    if (sp) {
        s = pool_extend(pool, need, tail, room, gpumem__space_granularity(sp), true, why);
        if (s != GPUMEM_ERR_UNSUPPORTED)
            return s;
        /* no hole left in the range, or the budget's last partial granule: a
         * plain region instead, within what a first step mapped left */
        room = gpumem__sat_sub_u64(pool->p.budget, pool->reserved);
        tail = pool_tail_free(pool, need);
    }
    if (b->regions_contiguous)
        return pool_extend(pool, need, tail, room, REGION_ROUNDING, false, why);
    if (need > room)
        return pool_no_room(room, why);
    uint64_t size = growth_region_size(need, room);
    s = pool_add_region(pool, size, false, why);
    if (s == GPUMEM_ERR_OUT_OF_MEMORY && size > need)
        s = pool_add_region(pool, need, false, why);
    return s;
}

/* Grows the pool so that a chunk of `need` bytes may fit (pool_take_region); when
 * the budget or the device refuses, first gives the pool's wholly free regions
 * back and tries once more.
 * pre: pool->lock held; need a multiple of 256. */
gpumem_status gpumem__growth_grow(struct pool *pool, uint64_t need, struct reason *why)
{
    gpumem_status s = GPUMEM_ERR_OUT_OF_MEMORY;
    uint64_t ext;
    if (pool->g.freed_at &&
        gpumem__align_up(need - pool_tail_free(pool, need),
                         gpumem__space_granularity(pool->g.space), &ext) &&
        pool->reserved + ext > pool->peak_reserved) {
        /* past the peak: the holes' granules go back first, but for the free
         * tail this step extends */
        pool->g.keep_end = pool->g.tail_end;
        pool_trim(pool, pool->reserved + ext - pool->peak_reserved, 0);
        pool->g.keep_end = 0;
    }
    for (int attempt = 0; attempt < 2; attempt++) {
        uint64_t room = pool->p.budget - pool->reserved;
        if (need - pool_tail_free(pool, need) <= room) {
            s = pool_take_region(pool, need, room, why);
            if (s != GPUMEM_ERR_OUT_OF_MEMORY)
                return s;
        } else {
            s = pool_no_room(room, why);
        }
        if (attempt == 0 && gpumem__growth_release_free(pool) == 0)
            break; /* nothing given back: a retry cannot do better */
        pool->num_retries += attempt == 0;
    }
    /* other processes' cache, asked back once (lib/share.c) */
    if (s == GPUMEM_ERR_OUT_OF_MEMORY && pool->p.share.ask &&
        pool->p.share.ask(pool->p.share.ctx, need - pool_tail_free(pool, need)) &&
        need - pool_tail_free(pool, need) <= pool->p.budget - pool->reserved)
        s = pool_take_region(pool, need, pool->p.budget - pool->reserved, why);
    if (s == GPUMEM_ERR_OUT_OF_MEMORY && pool->g.release_status != GPUMEM_OK) {
        struct reason grow = *why; /* gpumem__reason must not read what it writes */
        s = gpumem__reason(why, s, "%s; giving free regions back failed: %s", grow.text,
                           pool->g.release_why.text);
    }
    return s;
}

gpumem_status gpumem__pool_take_budget(struct pool *pool, struct reason *why)
{
    gpumem_status s = GPUMEM_OK;
    gpumem__growth_map_begin(pool);
    if (!pool->p.growth && pool->p.budget > pool->reserved)
        s = pool_add_region(pool, pool->p.budget - pool->reserved, false, why);
    gpumem__growth_map_end(pool);
    return s;
}

/* gpumem_release_unused's pass (`wait`: what streams freed is waited for) and the
 * idle release's (what their completed work freed only); `cause` ends the log's
 * line. */
static gpumem_status pool_release(struct pool *pool, bool wait, const char *cause,
                                  uint64_t *released, bool *streams_hold,
                                  struct reason *why)
{
    char buf[GPUMEM_BYTES_BUF];
    gpumem_status s = GPUMEM_OK;
    gpumem__log_hold();
    gpumem__growth_map_begin(pool);
    /* one context push for the pass's driver calls (backend.h) */
    gpumem__backend_scope_open(pool->p.backend, pool->p.device);
    /* what streams freed is waited for, and then anyone's: free for the device */
    if (pool->streams && wait) {
        pool->num_drains++;
        s = gpumem__streams_drain(pool->streams, why);
        if (s == GPUMEM_ERR_OUT_OF_MEMORY) /* no event to wait with: a failed wait */
            s = GPUMEM_ERR_BACKEND;        /* (gpumem.h), the reason as it was */
    } else if (pool->streams) {
        (void)gpumem__streams_collect(pool->streams, STREAMS_NONE);
    }
    uint64_t bytes = gpumem__growth_release_free(pool);
    if (s == GPUMEM_OK && pool->g.release_status != GPUMEM_OK) {
        s = pool->g.release_status;
        *why = pool->g.release_why;
    }
    *streams_hold = pool->streams && gpumem__streams_hold(pool->streams);
    gpumem__backend_scope_close(pool->p.backend, pool->p.device);
    gpumem__growth_map_end(pool);
    gpumem__log_release();
    if (bytes)
        gpumem__log(pool->p.opts, GPUMEM_LOG_INFO, "%s: released %s of unused memory%s",
                    pool->p.label, gpumem__format_bytes(bytes, buf, sizeof buf), cause);
    *released = bytes;
    return s;
}

gpumem_status gpumem__pool_release_unused(struct pool *pool, uint64_t *released,
                                          struct reason *why)
{
    bool streams_hold;
    return pool_release(pool, true, "", released, &streams_hold, why);
}

gpumem_status gpumem__pool_release_idle(struct pool *pool, uint64_t *released,
                                        bool *streams_hold, struct reason *why)
{
    char cause[64];
    snprintf(cause, sizeof cause, " (idle for %lu ms)",
             (unsigned long)pool->p.opts->growth_idle_release_ms);
    return pool_release(pool, false, cause, released, streams_hold, why);
}

uint64_t gpumem__growth_chunk_unmapped(const struct pool *pool, uint64_t addr,
                                       uint64_t size)
{
    const struct space *sp = pool->g.space;
    if (!sp || !gpumem__space_unmapped(sp) || !gpumem__space_contains(sp, addr))
        return 0;
    uint64_t gran = gpumem__space_granularity(sp), lo,
             hi = gpumem__align_down(addr + size, gran);
    if (!gpumem__align_up(addr, gran, &lo) || lo >= hi)
        return 0;
    return gpumem__space_unmapped_in(sp, lo, hi - lo);
}

/* --------------------------------------------------- largest free block -- */

struct mapped_walk {
    const struct growth *g;
    uint64_t best;
};

/* The longest run of [addr, addr+size) whose granules are mapped, into w->best
 * when longer; stops the walk at chunks no larger than the best so far. */
static bool mapped_visit(void *ctx, uint64_t addr, uint64_t size)
{
    struct mapped_walk *w = ctx;
    const struct growth *g = w->g;
    if (size <= w->best)
        return false; /* largest first: no later chunk can do better */
    uint64_t gran = UINT64_C(1) << g->sp_shift, end = addr + size;
    uint64_t lo = gpumem__align_down(addr, gran),
             hi = gpumem__align_down(end - 1, gran) + gran;
    if (!gpumem__space_contains(g->space, addr) ||
        !gpumem__space_any_unmapped(g->space, lo, hi - lo)) {
        w->best = size;
        return true;
    }
    uint64_t run = addr; /* where the current run of mapped granules starts */
    for (uint64_t at = lo; at < end; at += gran) {
        uint64_t top = at + gran < end ? at + gran : end;
        if (gpumem__space_unmapped_in(g->space, at, gran))
            run = top;
        else if (top - run > w->best)
            w->best = top - run;
    }
    return true;
}

uint64_t gpumem__growth_largest_free(struct pool *pool)
{
    if (!pool->g.space || !pool->g.unmapped)
        return gpumem__arena_largest_free(pool->arena);
    struct mapped_walk w = {&pool->g, 0};
    for (unsigned o = 0; o < ARENA_OWNERS; o++)
        gpumem__arena_walk_free_largest_of(pool->arena, o, 1, mapped_visit, &w);
    return w.best;
}

void gpumem__growth_give_all_back(struct pool *pool)
{
    /* Each region leaves the map before it goes back to the device, one at a
     * time: the map's lock is a leaf, never held across a backend call. */
    uint64_t base, size, kept;
    struct reason why;
    while (gpumem__region_map_remove_any(pool->p.map, pool, &base, &size)) {
        if (pool_give_back(pool, base, size, &kept, &why) != GPUMEM_OK) {
            char buf[GPUMEM_BYTES_BUF];
            gpumem__log(pool->p.opts, GPUMEM_LOG_ERROR,
                        "%s: %s; the device keeps these %s until the process ends",
                        pool->p.label, why.text,
                        gpumem__format_bytes(kept, buf, sizeof buf));
        }
    }
    if (gpumem__space_destroy(pool->g.space, &why) != GPUMEM_OK)
        gpumem__log(pool->p.opts, GPUMEM_LOG_ERROR, "%s: %s", pool->p.label, why.text);
    pool->g.space = NULL;
}

void gpumem__growth_free(struct pool *pool)
{
    trim_record_free(&pool->g);
    free(pool->g.gone);
    pool->g.gone = NULL;
}
