/* Pools: one per logical device, over an arena of regions taken from its GPU.
 *
 * Stream-ordered frees (gpumem_free_async) on stream S give the block to S's
 * arena owner (streams.h): free at once for S, coalescing with S's other free
 * memory, and nobody else's until S's fence says the work S queued before has
 * completed. No driver call is made on that path. Allocations that find no fit
 * in what they may take look at the other streams' fences (without waiting)
 * before the pool grows, and wait for them when it cannot grow, before
 * reporting out of memory; a release waits for them all first.
 *
 * A greedy pool reserves its whole budget at initialization (TensorFlow's default).
 * A growing pool takes a region when the arena has no chunk that fits. On a device
 * whose regions join into one block when they touch (mapped into the pool's address
 * range, or the simulated GPU's own address space), it extends the free tail of
 * the region it took last by what the request lacks, rounded up to the mapping
 * granularity (2 MiB), so that peak reserved follows peak live (issue 22); on a
 * device whose regions do not join (plain cuMemAlloc blocks), small requests get a
 * 2 MiB region and medium ones 20 MiB (so that many small tensors share regions),
 * large ones a region of their own size rounded to 2 MiB. Never past the budget.
 * Before an out-of-memory is reported, the pool gives its wholly free regions back
 * and tries once more; the same release serves gpumem_release_unused. A greedy pool
 * whose memory was released takes its remaining budget again on demand, and when
 * the GPU no longer has that much free, grows as a growing pool does rather than
 * fail the request. Every pool, growing or not, places by its arena's plain best
 * fit (arena.h), so holes are refilled before the pool grows or its untouched end
 * is cut.
 *
 * On a backend with address spaces (CUDA's virtual memory management, which the
 * simulated GPU models) a growing pool allocates, on its first growth, one address range
 * for its whole budget (space.c) and maps its regions into it, rounded to the mapping
 * granularity: they land side by side, so free memory coalesces across growth steps, and
 * a released region is unmapped, its memory given back to the device. A release also
 * unmaps the whole granules of the free chunks inside the regions that stay
 * (pool_release_granules); their addresses stay the arena's, and an allocation
 * that lands on them maps them again first (pool_back). Before it maps past its
 * peak of reserved bytes, a growing pool gives back as many of its holes'
 * granules as that mapping lacks, largest holes and idle granules first
 * (pool_trim; GPUMEM_GROWTH_TRIM, on by default). They stay free in the arena,
 * as after a release: placement is the arena's alone, the same whether memory
 * is mapped or not, so a pool that trims lays out every allocation where one
 * that does not would, and never maps more than that one's range holds: its
 * peak is never above the peak without the trim. Where the range cannot
 * serve (no spaces, the budget's last partial granule, no hole left)
 * the pool takes plain regions as before.
 *
 * Locks: pool->lock guards everything in struct pool; the region map's lock is
 * taken inside it, never the other way round (docs/internals.md, "Locks"). */
#include "pool.h"

#include "arena.h"
#include "history.h"
#include "space.h"
#include "streams.h"
#include "tag.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SMALL_REQUEST   (1 * GPUMEM_MIB)
#define SMALL_REGION    (2 * GPUMEM_MIB)
#define MEDIUM_REQUEST  (10 * GPUMEM_MIB)
#define MEDIUM_REGION   (20 * GPUMEM_MIB)
#define REGION_ROUNDING (2 * GPUMEM_MIB)
/* Hot granules are tracked by blocks of 2^HOT_BLOCK_SHIFT granules (128 MiB of
 * 2 MiB granules): a bit per block costs a free a store, where a bit per granule
 * cost it a loop (some 30 instructions on training); over the four traces'
 * seeds 1-8 the blocks reserved no more and mapped as little. */
#define HOT_BLOCK_SHIFT 6
/* A trim gives back granules freed since the peak last rose (hot ones) only while
 * they add up to at most this share of the peak, until the peak rises again
 * (pool_trim). */
#define HOT_TRIM_SHARE 8

struct pool {
    gpumem_mutex lock;
    struct arena *arena;
    struct pool_params p;
    char budget_reason[256];
    uint64_t current, peak;           /* bytes in live chunks */
    uint64_t reserved, peak_reserved; /* bytes of regions taken from the device */
    uint64_t num_allocs, num_frees, num_ooms;
    uint64_t released;            /* bytes a release pass gave back */
    gpumem_status release_status; /* first backend failure of a release pass */
    struct reason release_why;    /* and its reason */
    struct space *space;          /* growing pools: the range regions are mapped
                                     into; NULL before the first growth or when
                                     the backend has none */
    bool space_tried;             /* the range was asked for (only once) */
    uint64_t unmapped;            /* bytes of the space's regions whose granules
                                     were given back while free: still the
                                     arena's, mapped again when handed out */
    uint64_t seq;                 /* allocations made so far (never reset): the
                                     last one's sequence number */
    uint64_t last_base;           /* where the region taken last lies */
    uint64_t tail_end;            /* the end of the contiguous region taken last:
                                     a growth extends the free tail there
                                     (0: none yet) */
    uint64_t keep_end;            /* during a trim (pool_trim): the free chunk
                                     that ends here keeps its granules */
    uint64_t trim_want;           /* during a trim: the bytes still to give back */
    uint64_t trimmed_frees;       /* num_frees at a trim that found too little:
                                     none since, nothing more to trim */
    uint64_t *hot;                /* a bit per block of 2^HOT_BLOCK_SHIFT granules
                                     of the space: a chunk in it was freed since
                                     the peak last rose; NULL: no space, or no
                                     host memory */
    size_t bit_words;             /* the words of `hot` */
    unsigned hot_shift;           /* log2 of the bytes of a bit of `hot` */
    bool trim_hot;                /* during a trim: recently freed granules too */
    uint64_t hot_trimmed;         /* bytes of those given back since the peak
                                     last rose */
    uint64_t sp_base, sp_size;    /* the space's range, */
    unsigned sp_shift;            /* and log2 of its granularity */
    struct streams *streams;      /* stream-ordered frees; NULL when the backend's
                                     streams are synchronous (no events) */
    uint64_t req_owners;          /* during an allocation's growth: the arena
                                     owners it may take from (0: owner 0's only) */
    unsigned req_owner;           /* and the owner its new memory is added as */
    struct history *history;      /* the event history; NULL: off (history.h) */
};

/* ---------------------------------------------------------------- bits -- */

static inline bool bit_test(const uint64_t *w, size_t i)
{
    return w[i / 64] >> (i % 64) & 1;
}

/* Sets bits i..e (both included). */
static inline void bits_set(uint64_t *w, size_t i, size_t e)
{
    size_t wi = i / 64, we = e / 64;
    uint64_t lo = ~UINT64_C(0) << (i % 64), hi = ~UINT64_C(0) >> (63 - e % 64);
    if (wi == we) {
        w[wi] |= lo & hi;
        return;
    }
    w[wi] |= lo;
    for (size_t k = wi + 1; k < we; k++)
        w[k] = ~UINT64_C(0);
    w[we] |= hi;
}

/* ------------------------------------------------------------- history -- */

/* Whether the pool records its events: the branches are laid out for off, the
 * common case, so that the paths pay one load and a branch not taken. */
#if defined(__GNUC__)
#define HISTORY_ON(pool) __builtin_expect((pool)->history != NULL, 0)
#define HISTORY_NOINLINE __attribute__((noinline))
#else
#define HISTORY_ON(pool) ((pool)->history != NULL)
#define HISTORY_NOINLINE
#endif

/* Out of line: with the history off, each path that records pays one load and
 * a branch on pool->history, nothing else. Not marked cold: GCC then moved the
 * whole of an allocation's last block, counters included, into the function's
 * cold part, a jump there and back on every allocation. pre: pool->lock held. */
static HISTORY_NOINLINE void pool_record(struct pool *pool, enum history_action action,
                                         uint64_t addr, uint64_t size, uint64_t requested,
                                         const uint64_t user[ARENA_USER_WORDS])
{
    gpumem__history_record(pool->history, gpumem__history_now(), action, addr, size,
                           requested, user ? user[0] : 0, user ? user[2] : 0,
                           user ? (uint32_t)(user[1] & POOL_TAG_MASK) : 0);
}

/* A free of the live chunk at addr, asked for and completed (recorded before
 * the arena frees it): its owner's words name the allocation. A stream-ordered
 * free completes at once too: the block is its stream's free memory from then
 * on (streams.h). A free that will fail records nothing.
 * pre: pool->lock held, pool->history. */
static HISTORY_NOINLINE void pool_record_free(struct pool *pool, uint64_t addr)
{
    uint64_t user[ARENA_USER_WORDS] = {0};
    uint64_t size = gpumem__arena_user(pool->arena, addr, user);
    if (size == 0)
        return; /* not a live chunk, or freed already: the free fails */
    uint64_t now = gpumem__history_now(); /* one reading for both */
    uint32_t tag = (uint32_t)(user[1] & POOL_TAG_MASK);
    gpumem__history_record(pool->history, now, HIST_FREE_REQUESTED, addr, size, 0,
                           user[0], user[2], tag);
    gpumem__history_record(pool->history, now, HIST_FREE_COMPLETED, addr, size, 0,
                           user[0], user[2], tag);
}

/* ---------------------------------------------------- streams' owners -- */

/* What streams.c has the pool do to its arena (streams.h, streams_params). */
static gpumem_status pool_owner_open(void *ctx, unsigned owner, struct reason *why)
{
    struct pool *pool = ctx;
    if (gpumem__arena_owner_open(pool->arena, owner) == ARENA_OK)
        return GPUMEM_OK;
    return gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                          "%s: out of host memory for a stream's free memory",
                          pool->p.label);
}

static bool pool_owner_holds(void *ctx, unsigned owner)
{
    struct pool *pool = ctx;
    return !gpumem__arena_owner_empty(pool->arena, owner);
}

static void pool_owner_joins(void *ctx, unsigned owner, unsigned other)
{
    struct pool *pool = ctx;
    gpumem__arena_set_joins(pool->arena, owner, UINT64_C(1) << other);
}

static void pool_owner_disown(void *ctx, unsigned owner)
{
    struct pool *pool = ctx;
    (void)gpumem__arena_disown(pool->arena, owner);
}

static inline void pool_count_free(struct pool *pool, uint64_t addr, uint64_t size);

/* A block kept for the streams it was used on (stream_uses.h), their work
 * done: free, anyone's. */
static void pool_release_kept(void *ctx, uint64_t addr)
{
    struct pool *pool = ctx;
    uint64_t size;
    if (HISTORY_ON(pool))
        pool_record_free(pool, addr);
    if (gpumem__arena_free_owned(pool->arena, addr, 0, &size) == ARENA_OK)
        pool_count_free(pool, addr, size);
}

/* Whether a region at base joins its neighbours (mapped into the pool's range,
 * or on a device whose regions join): the viewer's segment_map, not _alloc. */
static bool pool_region_joins(const struct pool *pool, uint64_t base)
{
    return pool->p.backend->regions_contiguous ||
           (pool->space && gpumem__space_contains(pool->space, base));
}

/* ------------------------------------------------------------- regions -- */

/* Gives a region back to the device: unmaps it from the pool's space, or
 * releases a plain one. *kept: the bytes the device still holds after a refusal
 * (the region's, or its refused granules'; 0 on success). pre: pool->lock held. */
static gpumem_status pool_give_back(struct pool *pool, uint64_t base, uint64_t size,
                                    uint64_t *kept, struct reason *why)
{
    struct backend *b = pool->p.backend;
    if (pool->space && gpumem__space_contains(pool->space, base))
        return gpumem__space_unmap(pool->space, base, size, kept, why);
    gpumem_status s = b->ops->free_region(b, pool->p.device, base, size, why);
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

/* Publishes in use and its peak, where the pool counts them: two relaxed stores
 * into the ledger's mapping, no lock (pool.h, pool_share). */
static inline void pool_publish_use(struct pool *pool)
{
    struct ledger_usage *u = pool->p.share.usage;
    if (u) {
        atomic_store_explicit(&u->in_use, pool->current, memory_order_relaxed);
        atomic_store_explicit(&u->peak, pool->peak, memory_order_relaxed);
    }
}

/* Counts `size` more bytes as taken from the device. pre: pool->lock held. */
static void pool_count_reserved(struct pool *pool, uint64_t size)
{
    pool->reserved += size;
    if (pool->reserved > pool->peak_reserved) {
        pool->peak_reserved = pool->reserved;
        if (pool->hot) /* what was freed so far is idle from now on, */
            memset(pool->hot, 0, pool->bit_words * sizeof *pool->hot);
        pool->hot_trimmed = 0;
        pool->trimmed_frees = UINT64_MAX; /* and may be trimmed */
    }
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
        s = mapped ? gpumem__space_map(pool->space, size, &base, &held, why)
                   : b->ops->alloc_region(b, pool->p.device, size, &base, why);
    else
        sh = NULL; /* not admitted: nothing to take back */
    if (s != GPUMEM_OK) {
        gpumem__region_map_cancel_room(pool->p.map);
        if (held) /* the device keeps that memory: it counts against the budget */
            pool_add_held(pool, held, why);
        if (sh && sh->unadmit && size > held)
            sh->unadmit(sh->ctx, size - held);
        return s;
    }
    /* Mapped regions touch their neighbours in one range: the arena may join them.
     * The memory is the requester's (a stream's owner, so that it joins that
     * stream's free tail), or anyone's. */
    int added =
        gpumem__arena_add_region_owned(pool->arena, base, size,
                                       mapped || b->regions_contiguous, pool->req_owner);
    if (added != ARENA_OK) {
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
        return s;
    }
    gpumem__region_map_insert(pool->p.map, base, size, pool);
    pool_count_reserved(pool, size);
    if (HISTORY_ON(pool))
        pool_record(pool,
                    mapped || b->regions_contiguous ? HIST_SEGMENT_MAP
                                                    : HIST_SEGMENT_ALLOC,
                    base, size, 0, NULL);
    pool->last_base = base;
    if (mapped || b->regions_contiguous)
        pool->tail_end = base + size;
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
    uint64_t gone = pool->unmapped && gpumem__space_contains(pool->space, base)
                        ? gpumem__space_unmapped_in(pool->space, base, size)
                        : 0;
    uint64_t kept;
    bool joins = pool->history && pool_region_joins(pool, base);
    gpumem__region_map_remove(pool->p.map, base);
    /* before the device has them */
    pool_publish_reserved(pool, pool->reserved - (size - gone));
    gpumem_status s = pool_give_back(pool, base, size, &kept, &why);
    /* the device may have taken part of it back (a refused granule stays) */
    pool->unmapped -= gone;
    pool->reserved -= size - gone - kept;
    pool->released += size - gone - kept;
    if (pool->p.share.unadmit && size - gone > kept)
        pool->p.share.unadmit(pool->p.share.ctx, size - gone - kept);
    if (s == GPUMEM_OK && pool->history)
        pool_record(pool, joins ? HIST_SEGMENT_UNMAP : HIST_SEGMENT_FREE, base, size, 0,
                    NULL);
    if (s == GPUMEM_OK) {
        gpumem__log(pool->p.opts, GPUMEM_LOG_DEBUG,
                    "%s: gave a free region of %s at 0x%llx back", pool->p.label,
                    gpumem__format_bytes(size, buf, sizeof buf),
                    (unsigned long long)base);
        return;
    }
    pool_publish_reserved(pool, pool->reserved);
    if (pool->release_status == GPUMEM_OK) {
        pool->release_status = s;
        pool->release_why = why;
    }
    char kept_buf[GPUMEM_BYTES_BUF];
    gpumem__log(pool->p.opts, GPUMEM_LOG_ERROR,
                "%s: a free region of %s at 0x%llx could not be given back and stays "
                "reserved (%s of it): %s",
                pool->p.label, gpumem__format_bytes(size, buf, sizeof buf),
                (unsigned long long)base,
                gpumem__format_bytes(kept, kept_buf, sizeof kept_buf), why.text);
}

/* Gives back the mapped granules of [lo, lo+size), free memory of the pool's
 * space, and counts them out of its reserved bytes (and the ledger's); *bytes
 * receives how many went back. A granule the backend refuses stops it: the
 * failure is kept in pool->release_status, as in a release pass, and logged.
 * pre: pool->lock held, pool->space. */
static gpumem_status pool_unmap_free(struct pool *pool, uint64_t lo, uint64_t size,
                                     uint64_t *bytes)
{
    char buf[GPUMEM_BYTES_BUF];
    struct reason why;
    *bytes = 0;
    gpumem_status s = gpumem__space_unmap_part(pool->space, lo, size, bytes, &why);
    pool->reserved -= *bytes;
    pool->released += *bytes;
    pool_publish_reserved(pool, pool->reserved); /* after: counted twice meanwhile */
    if (*bytes && pool->p.share.unadmit)
        pool->p.share.unadmit(pool->p.share.ctx, *bytes);
    if (s == GPUMEM_OK)
        return s;
    if (pool->release_status == GPUMEM_OK) {
        pool->release_status = s;
        pool->release_why = why;
    }
    gpumem__log(pool->p.opts, GPUMEM_LOG_ERROR,
                "%s: free memory at 0x%llx could not be given back and stays "
                "reserved (%s of it was): %s",
                pool->p.label, (unsigned long long)lo,
                gpumem__format_bytes(*bytes, buf, sizeof buf), why.text);
    return s;
}

/* Called by the arena's walk for each chunk: a free chunk of owner 0 (anyone's:
 * no stream's work may still use it) in the pool's space gives back its whole
 * granules that are still mapped (not the partial ones at its ends, which live
 * neighbours may share); its addresses stay the arena's, and pool_back maps them
 * again when they are handed out. */
static void pool_release_granules(void *ctx, const struct arena_chunk_info *c)
{
    struct pool *pool = ctx;
    uint64_t addr = c->addr, size = c->size;
    if (!c->is_free || c->owner != 0 || !gpumem__space_contains(pool->space, addr) ||
        addr + size == pool->keep_end)
        return;
    uint64_t g = gpumem__space_granularity(pool->space), lo, hi, bytes;
    hi = gpumem__align_down(addr + size, g);
    if (!gpumem__align_up(addr, g, &lo) || lo >= hi)
        return;
    (void)pool_unmap_free(pool, lo, hi - lo, &bytes);
    pool->unmapped += bytes;
}

static void pool_no_segment(void *ctx, uint64_t base, uint64_t size)
{
    (void)ctx, (void)base, (void)size;
}

/* Gives every wholly free region back, then, in the pool's space, the whole
 * granules of its free chunks; returns the bytes given back. The first failure's
 * status and reason are left in pool->release_status and pool->release_why.
 * pre: pool->lock held. */
static uint64_t pool_release_free(struct pool *pool)
{
    pool->released = 0;
    pool->release_status = GPUMEM_OK;
    pool->release_why.text[0] = '\0';
    gpumem__arena_release_free_regions(pool->arena, pool_release_region, pool);
    if (pool->space)
        gpumem__arena_walk_user(pool->arena, pool_no_segment, pool_release_granules,
                                pool);
    return pool->released;
}

/* Called by the arena for each free chunk of at least a granule, largest
 * first, during a trim: gives back the top of its whole granules that are
 * still mapped (within the top run of idle ones, unless the trim takes hot ones
 * too), at most what the trim still wants. Best fit takes a free chunk's low
 * end, and the largest holes are the last it takes, so these are the granules
 * an allocation lands on last. Not the free tail a growth extends (keep_end),
 * nor the partial granules at a chunk's ends, which live neighbours may share.
 * The chunk stays free: an allocation may land there as if it were mapped, and
 * pool_back maps what it lands on. A granule the backend refuses stops the
 * trim (it stays in pool->release_status). Returns whether to go on. */
static bool pool_trim_pick(void *ctx, uint64_t addr, uint64_t size)
{
    struct pool *pool = ctx;
    struct space *sp = pool->space;
    uint64_t end = addr + size, g = gpumem__space_granularity(sp), lo, hi;
    if (!gpumem__space_contains(sp, addr) || end == pool->keep_end)
        return true;
    hi = gpumem__align_down(end, g);
    if (!gpumem__align_up(addr, g, &lo) || lo >= hi)
        return true;
    if (pool->hot && !pool->trim_hot) { /* the top run of idle granules */
        size_t i = (size_t)((hi - pool->sp_base) >> pool->sp_shift), j;
        size_t first = (size_t)((lo - pool->sp_base) >> pool->sp_shift);
        while (i > first && bit_test(pool->hot, (i - 1) >> HOT_BLOCK_SHIFT))
            i--;
        for (j = i; j > first && !bit_test(pool->hot, (j - 1) >> HOT_BLOCK_SHIFT); j--)
            ;
        lo = pool->sp_base + ((uint64_t)j << pool->sp_shift);
        hi = pool->sp_base + ((uint64_t)i << pool->sp_shift);
    }
    if (lo >= hi || gpumem__space_unmapped_in(sp, lo, hi - lo) == hi - lo)
        return true; /* nothing idle, or given back already */
    /* from the top down: an earlier trim gave back the top, the rest lies below */
    while (pool->trim_want && lo < hi) {
        uint64_t take, bytes;
        if (!gpumem__align_up(pool->trim_want, g, &take) || take > hi - lo)
            take = hi - lo;
        gpumem_status s = pool_unmap_free(pool, hi - take, take, &bytes);
        pool->trim_want -= gpumem__min_u64(pool->trim_want, bytes);
        pool->unmapped += bytes;
        if (s != GPUMEM_OK)
            return false;
        hi -= take;
    }
    return pool->trim_want != 0;
}

/* Before a growing pool maps memory past its peak of reserved bytes (a growth
 * step, or a chunk landing on granules given back), it gives back `want` bytes
 * (what the mapping lacks below the peak) of its holes' whole granules (issue
 * 22: tighter than expandable segments). Its peak rises only when its holes hold
 * less than that.
 *
 * The trim never changes the arena: the granules stay free, and best fit places
 * as it would with them mapped. Placement is thus the same as without the trim,
 * the range the same, and what is mapped a part of it: the peak is never above
 * the one without the trim, on any workload and however long it runs.
 * (Placeholders, granules carved out of the arena so that best fit placed only
 * in mapped memory, mapped less, but changed where later allocations went, and
 * over many replays some workloads ended above no trim: docs/bench.md, "The
 * trim leaves placement to the arena".)
 *
 * The cost is driver calls: an allocation that lands on given-back granules
 * maps them (pool_back). So the trim takes the granules best fit reaches last:
 * the largest holes first (best fit takes the smallest that holds a request),
 * the top of each (it cuts a hole's low end). Idle granules first, those not
 * freed since the peak last rose; then hot ones, freed since, but only while
 * those add up to at most 1/HOT_TRIM_SHARE of the peak since it last rose: as
 * many as that budget has left, and the peak rises by the rest. A hot granule
 * given back is one the workload comes back to, a mapping again later: ski
 * rental, the pool rents (swaps) until it has paid an eighth of the peak, then
 * buys (lets the peak rise). Not every idle granule either, only what the
 * mapping lacks: trimming them all emptied the pool's mapped free memory at each
 * crossing, and it came back a granule at a time. Below the peak nothing is
 * given back. Skipped when a trim found too little and nothing was freed since.
 * A failure stays in pool->release_status, as in a release pass; the mapping
 * goes on. pre: pool->lock held, pool->space. */
static void pool_trim(struct pool *pool, uint64_t want)
{
    if (pool->trimmed_frees == pool->num_frees)
        return;
    if (pool->streams) /* streams' memory whose work is done: anyone's, trimmed too */
        (void)gpumem__streams_collect(pool->streams, STREAMS_NONE);
    uint64_t g = gpumem__space_granularity(pool->space);
    pool->released = 0;
    pool->release_status = GPUMEM_OK;
    pool->release_why.text[0] = '\0';
    pool->trim_want = want;
    pool->trim_hot = false;
    gpumem__arena_walk_free_largest(pool->arena, g, pool_trim_pick, pool);
    uint64_t rest = pool->trim_want, share = pool->peak_reserved / HOT_TRIM_SHARE;
    uint64_t rent = share > pool->hot_trimmed ? share - pool->hot_trimmed : 0;
    if (rest && rent && pool->release_status == GPUMEM_OK) {
        /* hot ones, within what is left of the budget */
        pool->trim_want = gpumem__min_u64(rest, rent);
        pool->trim_hot = true;
        gpumem__arena_walk_free_largest(pool->arena, g, pool_trim_pick, pool);
        pool->trim_hot = false;
        uint64_t took = gpumem__min_u64(rest, rent) - pool->trim_want;
        pool->hot_trimmed += took;
        pool->trim_want = rest - took;
    }
    pool->trimmed_frees = pool->trim_want ? pool->num_frees : UINT64_MAX;
    pool->trim_want = 0;
}

/* Whether the chunk [addr, addr+size) lies on granules of the space that a
 * release gave back: checked before the log is held for pool_back.
 * pre: pool->space. */
static bool pool_unbacked(const struct pool *pool, uint64_t addr, uint64_t size)
{
    uint64_t g = UINT64_C(1) << pool->sp_shift, lo = gpumem__align_down(addr, g), hi;
    if (addr - pool->sp_base >= pool->sp_size || !gpumem__align_up(addr + size, g, &hi))
        return false;
    return gpumem__space_any_unmapped(pool->space, lo, hi - lo);
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
static gpumem_status pool_back(struct pool *pool, uint64_t addr, uint64_t size,
                               struct reason *why)
{
    struct space *sp = pool->space;
    if (!gpumem__space_contains(sp, addr))
        return GPUMEM_OK;
    uint64_t g = gpumem__space_granularity(sp), lo = gpumem__align_down(addr, g), hi;
    if (!gpumem__align_up(addr + size, g, &hi))
        hi = addr + size; /* cannot happen: the range ends on a granule */
    uint64_t lack = gpumem__space_unmapped_in(sp, lo, hi - lo);
    if (!lack)
        return GPUMEM_OK;
    /* mapping past the peak: the holes' idle granules go first (the chunk is
     * live, so none of its own) */
    if (pool->p.opts->growth_trim && pool->reserved + lack > pool->peak_reserved)
        pool_trim(pool, pool->reserved + lack - pool->peak_reserved);
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
            s = gpumem__space_map_part(sp, lo, hi - lo, &bytes, &held, why);
            pool->unmapped -= bytes;
            pool_count_reserved(pool, bytes);
            if (held)
                pool_add_held(pool, held, why);
            if (sh->unadmit && lack > bytes + held) /* admitted, not taken */
                sh->unadmit(sh->ctx, lack - bytes - held);
            if (s != GPUMEM_ERR_OUT_OF_MEMORY)
                return s;
        } else {
            s = pool_no_room(room, why);
        }
        /* the chunk is live: a release gives back only other granules */
        if (attempt == 0 && pool_release_free(pool) == 0)
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
    if (pool->space_tried || !pool->p.growth)
        return pool->space;
    pool->space_tried = true;
    struct reason why;
    gpumem_status s = gpumem__space_create(pool->p.backend, pool->p.device,
                                           pool->p.budget, &pool->space, &why);
    if (s == GPUMEM_OK) { /* for the checks on every allocation (pool_unbacked) */
        pool->sp_base = gpumem__space_base(pool->space);
        pool->sp_size = gpumem__space_size(pool->space);
        pool->sp_shift =
            (unsigned)__builtin_ctzll(gpumem__space_granularity(pool->space));
    }
    if (s == GPUMEM_OK && pool->p.opts->growth_trim) {
        pool->hot_shift = pool->sp_shift + HOT_BLOCK_SHIFT;
        /* without it, every free granule may be trimmed */
        pool->bit_words = (size_t)((((pool->sp_size - 1) >> pool->hot_shift) + 64) / 64);
        pool->hot = calloc(pool->bit_words, sizeof *pool->hot);
    }
    if (s == GPUMEM_OK)
        gpumem__log(pool->p.opts, GPUMEM_LOG_DEBUG,
                    "%s: reserved an address range of %s for its growth (granularity %s)",
                    pool->p.label,
                    gpumem__format_bytes(gpumem__space_size(pool->space), range,
                                         sizeof range),
                    gpumem__format_bytes(gpumem__space_granularity(pool->space), granule,
                                         sizeof granule));
    else
        gpumem__log(pool->p.opts,
                    s == GPUMEM_ERR_UNSUPPORTED ? GPUMEM_LOG_DEBUG : GPUMEM_LOG_WARNING,
                    "%s: growing by plain allocations: %s", pool->p.label, why.text);
    return pool->space;
}

/* The free bytes at the end of the contiguous region taken last, which a growth
 * for a chunk of `need` bytes extends instead of taking a region for all of it (0
 * when they would serve it alone: then the arena did not lack room there).
 * pre: pool->lock held. */
static uint64_t pool_tail_free(const struct pool *pool, uint64_t need)
{
    unsigned owner = 0;
    uint64_t tail = pool->tail_end ? gpumem__arena_free_tail_owned(pool->arena,
                                                                   pool->tail_end, &owner)
                                   : 0;
    if (!((pool->req_owners | 1) >> owner & 1))
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
    uint64_t end = pool->tail_end, lack = need - tail, size;
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
    if (s != GPUMEM_OK || tail == 0 || pool->last_base == end ||
        gpumem__arena_largest_free(pool->arena) >= need)
        return s;
    return pool_extend(pool, need, 0, room - (pool->tail_end - pool->last_base), g,
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
static gpumem_status pool_grow(struct pool *pool, uint64_t need, struct reason *why)
{
    gpumem_status s = GPUMEM_ERR_OUT_OF_MEMORY;
    uint64_t ext;
    if (pool->space && pool->p.opts->growth_trim &&
        gpumem__align_up(need - pool_tail_free(pool, need),
                         gpumem__space_granularity(pool->space), &ext) &&
        pool->reserved + ext > pool->peak_reserved) {
        /* past the peak: the holes' granules go back first, but for the free
         * tail this step extends */
        pool->keep_end = pool->tail_end;
        pool_trim(pool, pool->reserved + ext - pool->peak_reserved);
        pool->keep_end = 0;
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
        if (attempt == 0 && pool_release_free(pool) == 0)
            break; /* nothing given back: a retry cannot do better */
    }
    /* other processes' cache, asked back once (lib/share.c) */
    if (s == GPUMEM_ERR_OUT_OF_MEMORY && pool->p.share.ask &&
        pool->p.share.ask(pool->p.share.ctx, need - pool_tail_free(pool, need)) &&
        need - pool_tail_free(pool, need) <= pool->p.budget - pool->reserved)
        s = pool_take_region(pool, need, pool->p.budget - pool->reserved, why);
    if (s == GPUMEM_ERR_OUT_OF_MEMORY && pool->release_status != GPUMEM_OK) {
        struct reason grow = *why; /* gpumem__reason must not read what it writes */
        s = gpumem__reason(why, s, "%s; giving free regions back failed: %s", grow.text,
                           pool->release_why.text);
    }
    return s;
}

/* --------------------------------------------------------------- pools -- */

gpumem_status gpumem__pool_create(const struct pool_params *p, struct pool **out,
                                  struct reason *why)
{
    struct pool *pool = calloc(1, sizeof *pool);
    if (!pool || gpumem__arena_create(NULL, &pool->arena) != ARENA_OK) {
        free(pool);
        return gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                              "%s: out of host memory for its pool", p->label);
    }
    gpumem__mutex_init(&pool->lock, GPUMEM_RANK_POOL);
    pool->p = *p;
    if (p->backend->ops->event_create) {
        struct streams_params sp = {p->backend,        p->device,
                                    pool->p.label,     p->opts,
                                    pool_owner_open,   pool_owner_holds,
                                    pool_owner_joins,  pool_owner_disown,
                                    pool_release_kept, pool};
        gpumem_status s = gpumem__streams_create(&sp, &pool->streams, why);
        if (s != GPUMEM_OK) {
            gpumem__arena_destroy(pool->arena);
            gpumem__mutex_destroy(&pool->lock);
            free(pool);
            return s;
        }
    }
    if (p->opts && p->opts->record_history &&
        !(pool->history = gpumem__history_create(p->opts->record_history))) {
        gpumem__streams_destroy(pool->streams);
        gpumem__arena_destroy(pool->arena);
        gpumem__mutex_destroy(&pool->lock);
        free(pool);
        return gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                              "%s: out of host memory for an event history of %llu "
                              "events (GPUMEM_RECORD_HISTORY)",
                              p->label, (unsigned long long)p->opts->record_history);
    }
    snprintf(pool->budget_reason, sizeof pool->budget_reason, "%s",
             p->budget_reason ? p->budget_reason : "");
    pool->p.budget_reason = pool->budget_reason;
    *out = pool;
    return GPUMEM_OK;
}

void gpumem__pool_destroy(struct pool *pool)
{
    if (!pool)
        return;
    /* Each region leaves the map before it goes back to the device, one at a
     * time: the map's lock is a leaf, never held across a backend call. No
     * other call on this pool is in flight (gpumem_runtime_destroy's rule), so
     * its lock is not needed. The log is held for a caller that holds the
     * runtime's lock (a failed initialization). */
    uint64_t base, size, kept;
    struct reason why;
    gpumem__log_hold();
    gpumem__streams_destroy(pool->streams); /* the work still queued, first */
    while (gpumem__region_map_remove_any(pool->p.map, pool, &base, &size)) {
        if (pool_give_back(pool, base, size, &kept, &why) != GPUMEM_OK) {
            char buf[GPUMEM_BYTES_BUF];
            gpumem__log(pool->p.opts, GPUMEM_LOG_ERROR,
                        "%s: %s; the device keeps these %s until the process ends",
                        pool->p.label, why.text,
                        gpumem__format_bytes(kept, buf, sizeof buf));
        }
    }
    if (gpumem__space_destroy(pool->space, &why) != GPUMEM_OK)
        gpumem__log(pool->p.opts, GPUMEM_LOG_ERROR, "%s: %s", pool->p.label, why.text);
    gpumem__log_release();
    gpumem__history_destroy(pool->history);
    gpumem__arena_destroy(pool->arena);
    gpumem__mutex_destroy(&pool->lock);
    free(pool->hot);
    free(pool);
}

void gpumem__pool_forget(struct pool *pool)
{
    if (!pool || !gpumem__mutex_trylock(&pool->lock))
        return;
    gpumem__space_forget(pool->space);
    gpumem__streams_forget(pool->streams);
    gpumem__history_destroy(pool->history);
    gpumem__arena_destroy(pool->arena);
    gpumem__mutex_unlock(&pool->lock); /* no other thread here: it only lets go */
    free(pool->hot);
    free(pool);
}

gpumem_status gpumem__pool_take_budget(struct pool *pool, struct reason *why)
{
    gpumem_status s = GPUMEM_OK;
    gpumem__mutex_lock(&pool->lock);
    if (!pool->p.growth && pool->p.budget > pool->reserved)
        s = pool_add_region(pool, pool->p.budget - pool->reserved, false, why);
    gpumem__mutex_unlock(&pool->lock);
    return s;
}

/* The five largest live chunks, for the out-of-memory report. */
struct oom_walk {
    struct arena_chunk_info top[5];
    unsigned n;
};

static void oom_no_segment(void *ctx, uint64_t base, uint64_t size)
{
    (void)ctx, (void)base, (void)size;
}

static void oom_chunk(void *ctx, const struct arena_chunk_info *c)
{
    struct oom_walk *w = ctx;
    if (c->is_free || (w->n == 5 && c->size <= w->top[4].size))
        return;
    unsigned i = w->n < 5 ? w->n++ : 4;
    for (; i > 0 && w->top[i - 1].size < c->size; i--)
        w->top[i] = w->top[i - 1];
    w->top[i] = *c;
}

/* Fails an allocation of `need` bytes (rounded) with the pool's numbers, after
 * `cause` (may be "", may be why->text): "out of memory: <cause>; budget ...;
 * reserved, in use, cached, largest free block, the free bytes no request of this
 * size can use, and the five largest live allocations with their tags". The walk
 * for the five is O(n), paid only when memory ran out. pre: pool->lock held. */
static gpumem_status pool_oom(struct pool *pool, uint64_t need, const char *cause,
                              struct reason *why)
{
    char budget[GPUMEM_BYTES_BUF], reserved[GPUMEM_BYTES_BUF];
    char used[GPUMEM_BYTES_BUF], largest[GPUMEM_BYTES_BUF], cached[GPUMEM_BYTES_BUF];
    char unusable[GPUMEM_BYTES_BUF], buf[GPUMEM_BYTES_BUF];
    char top[200] = "";
    struct reason first;
    snprintf(first.text, sizeof first.text, "%s", cause); /* it may be why's */
    pool->num_ooms++;
    if (pool->history) {
        uint64_t device_free = 0, total;
        struct reason ignored; /* the device's free bytes are for the record only */
        struct backend *b = pool->p.backend;
        if (b->ops->mem_info(b, pool->p.device, &device_free, &total, &ignored) !=
            GPUMEM_OK)
            device_free = 0;
        uint64_t user[ARENA_USER_WORDS] = {0, gpumem__tag_current(), 0};
        pool_record(pool, HIST_OOM, 0, need, device_free, user);
    }
    uint64_t largest_free = gpumem__arena_largest_free(pool->arena);
    uint64_t free_bytes = pool->reserved - pool->current;
    /* a free chunk of `need` bytes or more would have served: none does now,
     * unless the request failed before looking (larger than the budget) */
    uint64_t frag = largest_free >= need ? 0 : free_bytes;
    struct oom_walk w = {.n = 0};
    gpumem__arena_walk_user(pool->arena, oom_no_segment, oom_chunk, &w);
    size_t len = 0;
    for (unsigned i = 0; i < w.n && len < sizeof top; i++) {
        const char *tag = gpumem__tag_text(w.top[i].user[1] & POOL_TAG_MASK);
        int k = snprintf(top + len, sizeof top - len, "%s%s%s%s%s", i ? ", " : "",
                         gpumem__format_bytes(w.top[i].size, buf, sizeof buf),
                         tag ? " '" : "", tag ? tag : "", tag ? "'" : "");
        if (k < 0)
            break;
        len += (size_t)k;
    }
    char others[GPUMEM_REASON_LEN / 2] = "";
    if (pool->p.share.describe)
        pool->p.share.describe(pool->p.share.ctx, others, sizeof others);
    return gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                          "out of memory: %s%sbudget %s (%s, %s); "
                          "reserved %s, in use %s, cached %s, largest free block %s, "
                          "unusable for this request %s; largest live: %s%s",
                          first.text, first.text[0] ? "; " : "",
                          gpumem__format_bytes(pool->p.budget, budget, sizeof budget),
                          pool->budget_reason,
                          pool->p.growth ? "memory growth on" : "memory growth off",
                          gpumem__format_bytes(pool->reserved, reserved, sizeof reserved),
                          gpumem__format_bytes(pool->current, used, sizeof used),
                          gpumem__format_bytes(free_bytes, cached, sizeof cached),
                          gpumem__format_bytes(largest_free, largest, sizeof largest),
                          gpumem__format_bytes(frag, unusable, sizeof unusable),
                          w.n ? top : "none", others);
}

/* The arena's best fit for `need` bytes among the owners' free memory (0:
 * owner 0's only, the plain path's). */
static inline int pool_arena_alloc(struct pool *pool, uint64_t need, uint64_t owners,
                                   const uint64_t *user, uint64_t *addr, uint64_t *got)
{
    return owners ? gpumem__arena_alloc_owned(pool->arena, need, owners, user, addr, got)
                  : gpumem__arena_alloc_user(pool->arena, need, user, addr, got);
}

/* No free chunk the request may take holds `need` bytes: other streams' memory
 * whose work is known done first (no wait), then growth; when the pool cannot
 * grow, every stream's memory is waited for (with the pool's lock held) and the
 * pool tries again, so that a stream-ordered free never causes an out of memory
 * that waiting would avoid (gpumem.h, gpumem_malloc_async). Returns the arena's
 * answer in *r with GPUMEM_OK, or the growth's or a failed wait's status.
 * pre: pool->lock held, the log held. */
static gpumem_status pool_alloc_miss(struct pool *pool, uint64_t need, void *stream,
                                     uint64_t owners, const uint64_t *user,
                                     uint64_t *addr, uint64_t *got, int *r,
                                     struct reason *why)
{
    if (pool->streams && gpumem__streams_collect(pool->streams, stream) > 0) {
        *r = pool_arena_alloc(pool, need, owners, user, addr, got);
        if (*r != ARENA_NO_FIT)
            return GPUMEM_OK;
    }
    pool->req_owners = owners;
    pool->req_owner = owners ? gpumem__streams_open_owner(pool->streams, stream) : 0;
    gpumem_status s = pool_grow(pool, need, why);
    if (s == GPUMEM_ERR_OUT_OF_MEMORY && pool->streams &&
        gpumem__streams_hold(pool->streams)) {
        s = gpumem__streams_drain(pool->streams, why);
        if (s == GPUMEM_OK) {
            *r = pool_arena_alloc(pool, need, owners, user, addr, got);
            if (*r == ARENA_NO_FIT) /* what was handed over may join free regions */
                s = pool_grow(pool, need, why);
        }
    }
    pool->req_owners = 0;
    pool->req_owner = 0;
    if (s == GPUMEM_OK && *r == ARENA_NO_FIT)
        *r = pool_arena_alloc(pool, need, owners, user, addr, got);
    return s;
}

/* `ordered`: a stream-ordered allocation on `stream`, which may also take the
 * memory that stream freed whose work may still run (streams.h). Inlined into
 * each caller (`ordered` a constant there): the plain path makes no call of its
 * own before the arena's. */
static GPUMEM_ALWAYS_INLINE gpumem_status pool_alloc(struct pool *pool, uint64_t size,
                                                     bool ordered, void *stream,
                                                     uint64_t *addr, struct reason *why)
{
    gpumem_status s = GPUMEM_OK;
    uint64_t need, got;
    int r;
    bool held = false; /* the growth and the waits log: held until the lock is let go */
    gpumem__mutex_lock(&pool->lock);
    if (!gpumem__align_up(size, ARENA_GRANULE, &need) || need > pool->p.budget) {
        s = pool_oom(pool, size, "the request is larger than the whole budget", why);
        goto out;
    }
    /* The chunk's owner words (pool.h, struct pool_chunk): written into the
     * record the arena touches anyway, so a snapshot costs the hot path a few
     * stores and no lookup. */
    uint64_t user[ARENA_USER_WORDS] = {pool->seq + 1,
                                       gpumem__tag_current() | (need - size)
                                                                   << POOL_SLACK_SHIFT,
                                       (uint64_t)(uintptr_t)stream};
    uint64_t owners =
        ordered && pool->streams ? gpumem__streams_owners(pool->streams, stream) : 0;
    r = pool_arena_alloc(pool, need, owners, user, addr, &got);
    if (r == ARENA_NO_FIT) {
        held = true;
        gpumem__log_hold();
        s = pool_alloc_miss(pool, need, ordered ? stream : STREAMS_NONE, owners, user,
                            addr, &got, &r, why);
        if (s != GPUMEM_OK) {
            if (s == GPUMEM_ERR_OUT_OF_MEMORY)
                s = pool_oom(pool, need, why->text, why);
            goto out; /* else a backend failure, in the backend's words */
        }
    }
    if (r == ARENA_HOST_OOM) {
        s = gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                           "out of host memory for the arena's bookkeeping");
        pool->num_ooms++;
        goto out;
    }
    if (r != ARENA_OK) { /* a region of `need` bytes was just added: cannot happen */
        s = pool_oom(pool, need, "no chunk fits after growing", why);
        goto out;
    }
    /* the chunk may lie on granules a release gave back */
    if (pool->unmapped && pool_unbacked(pool, *addr, got)) {
        if (!held) {
            held = true;
            gpumem__log_hold();
        }
        s = pool_back(pool, *addr, got, why);
        if (s != GPUMEM_OK) {
            /* back where it may have come from: the stream's, or anyone's */
            unsigned back =
                owners ? gpumem__streams_open_owner(pool->streams, stream) : 0;
            (void)gpumem__arena_free_owned(pool->arena, *addr, back, NULL);
            /* the granules mapped before the device refused are free again:
             * back to the device, so that a failed request holds nothing more */
            (void)pool_release_free(pool);
            if (s == GPUMEM_ERR_OUT_OF_MEMORY)
                s = pool_oom(pool, need, why->text, why);
            goto out;
        }
    }
    pool->current += got;
    if (pool->current > pool->peak)
        pool->peak = pool->current;
    pool_publish_use(pool);
    pool->num_allocs++;
    pool->seq++;
    if (HISTORY_ON(pool))
        pool_record(pool, HIST_ALLOC, *addr, got, size, user);
out:
    gpumem__mutex_unlock(&pool->lock);
    if (held)
        gpumem__log_release();
    return s;
}

gpumem_status gpumem__pool_alloc(struct pool *pool, uint64_t size, uint64_t *addr,
                                 struct reason *why)
{
    return pool_alloc(pool, size, false, NULL, addr, why);
}

gpumem_status gpumem__pool_alloc_async(struct pool *pool, uint64_t size, void *stream,
                                       uint64_t *addr, struct reason *why)
{
    return pool_alloc(pool, size, true, stream, addr, why);
}

static gpumem_status pool_bad_pointer(const struct pool *pool, struct reason *why)
{
    return gpumem__reason(why, GPUMEM_ERR_INVALID_POINTER,
                          "not the start of a live allocation on %s (an interior "
                          "pointer, or already freed)",
                          pool->p.label);
}

/* A chunk [addr, addr+size) freed in the pool's space: its blocks are hot until
 * the peak rises again (pool_trim_pick). Most chunks lie in one block: a load,
 * an or and a store. */
static inline void pool_mark_hot(struct pool *pool, uint64_t addr, uint64_t size)
{
    uint64_t off = addr - pool->sp_base;
    if (off >= pool->sp_size)
        return;
    size_t i = (size_t)(off >> pool->hot_shift),
           e = (size_t)((off + size - 1) >> pool->hot_shift);
    pool->hot[i / 64] |= UINT64_C(1) << (i % 64);
    if (e != i) /* a chunk over a block's end */
        bits_set(pool->hot, i + 1, e);
}

/* The counters of a free of `size` bytes at addr, done. pre: pool->lock held. */
static inline void pool_count_free(struct pool *pool, uint64_t addr, uint64_t size)
{
    pool->current -= size;
    pool->num_frees++;
    if (pool->hot)
        pool_mark_hot(pool, addr, size);
    pool_publish_use(pool);
}

gpumem_status gpumem__pool_free(struct pool *pool, uint64_t addr, struct reason *why)
{
    gpumem_status s = GPUMEM_OK;
    uint64_t size;
    bool kept = false;
    gpumem__mutex_lock(&pool->lock);
    /* a block used on other streams waits for their work (stream_uses.h; only
     * live blocks have records) */
    if (pool->streams &&
        ((s = gpumem__streams_free_recorded(pool->streams, addr, STREAMS_NONE, &kept,
                                            why)) != GPUMEM_OK ||
         kept))
        goto out;
    if (HISTORY_ON(pool))
        pool_record_free(pool, addr);
    if (gpumem__arena_free(pool->arena, addr, &size) != ARENA_OK)
        s = pool_bad_pointer(pool, why);
    else
        pool_count_free(pool, addr, size);
out:
    gpumem__mutex_unlock(&pool->lock);
    return s;
}

gpumem_status gpumem__pool_free_async(struct pool *pool, uint64_t addr, void *stream,
                                      struct reason *why)
{
    if (!pool->streams) /* synchronous streams: the work is done already */
        return gpumem__pool_free(pool, addr, why);
    gpumem_status s = GPUMEM_OK;
    unsigned owner = 0;
    uint64_t size;
    gpumem__log_hold(); /* a stream's first free may wait for another's (below) */
    gpumem__mutex_lock(&pool->lock);
    if (gpumem__arena_lookup(pool->arena, addr) == 0) {
        s = pool_bad_pointer(pool, why);
        goto out;
    }
    /* a block used on other streams waits for their work too (stream_uses.h) */
    bool kept = false;
    s = gpumem__streams_free_recorded(pool->streams, addr, stream, &kept, why);
    if (s != GPUMEM_OK || kept)
        goto out;
    /* The block becomes the stream's free memory (streams.h): a slot's lookup,
     * no driver call, but on a stream's first free here when every slot is
     * taken, a wait for the least recently used stream's work. */
    s = gpumem__streams_free_owner(pool->streams, stream, &owner, why);
    if (s != GPUMEM_OK)
        goto out;
    if (HISTORY_ON(pool))
        pool_record_free(pool, addr);
    (void)gpumem__arena_free_owned(pool->arena, addr, owner, &size); /* live: frees */
    pool_count_free(pool, addr, size);
out:
    gpumem__mutex_unlock(&pool->lock);
    gpumem__log_release();
    return s;
}

gpumem_status gpumem__pool_record_stream(struct pool *pool, uint64_t addr, void *stream,
                                         struct reason *why)
{
    gpumem_status s = GPUMEM_OK;
    gpumem__mutex_lock(&pool->lock);
    if (gpumem__arena_lookup(pool->arena, addr) == 0)
        s = pool_bad_pointer(pool, why);
    else if (pool->streams) /* else synchronous streams: nothing to wait for */
        s = gpumem__streams_record(pool->streams, addr, stream, why);
    gpumem__mutex_unlock(&pool->lock);
    return s;
}

void gpumem__pool_info(struct pool *pool, gpumem_memory_info *out)
{
    gpumem__mutex_lock(&pool->lock);
    /* The whole struct; gpumem_get_memory_info copies what the caller's holds. */
    out->struct_size = (uint32_t)sizeof *out;
    out->current_bytes = pool->current;
    out->peak_bytes = pool->peak;
    out->reserved_bytes = pool->reserved;
    out->peak_reserved_bytes = pool->peak_reserved;
    out->limit_bytes = pool->p.budget;
    out->largest_free_block = gpumem__arena_largest_free(pool->arena);
    out->num_allocs = pool->num_allocs;
    out->num_frees = pool->num_frees;
    out->num_ooms = pool->num_ooms;
    gpumem__mutex_unlock(&pool->lock);
}

void gpumem__pool_reset_stats(struct pool *pool)
{
    gpumem__mutex_lock(&pool->lock);
    pool->peak = pool->current;
    pool->peak_reserved = pool->reserved;
    pool_publish_use(pool);
    pool->num_allocs = pool->num_frees = pool->num_ooms = 0;
    pool->trimmed_frees = UINT64_MAX; /* the count restarts: trim at the next growth */
    gpumem__mutex_unlock(&pool->lock);
}

gpumem_status gpumem__pool_set_history(struct pool *pool, uint64_t entries,
                                       struct reason *why)
{
    struct history *h = NULL, *old;
    if (entries && !(h = gpumem__history_create(entries)))
        return gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                              "%s: out of host memory for an event history of %llu "
                              "events",
                              pool->p.label, (unsigned long long)entries);
    /* made outside the lock; only the copy of the newest events is made under it */
    gpumem__mutex_lock(&pool->lock);
    old = pool->history;
    if (h && old)
        gpumem__history_take(h, old);
    pool->history = h;
    gpumem__mutex_unlock(&pool->lock);
    gpumem__history_destroy(old);
    return GPUMEM_OK;
}

gpumem_status gpumem__pool_release_unused(struct pool *pool, uint64_t *released,
                                          struct reason *why)
{
    char buf[GPUMEM_BYTES_BUF];
    gpumem_status s = GPUMEM_OK;
    gpumem__log_hold();
    gpumem__mutex_lock(&pool->lock);
    /* what streams freed is waited for, and then anyone's: free for the device */
    if (pool->streams)
        s = gpumem__streams_drain(pool->streams, why);
    uint64_t bytes = pool_release_free(pool);
    if (s == GPUMEM_OK && pool->release_status != GPUMEM_OK) {
        s = pool->release_status;
        *why = pool->release_why;
    }
    gpumem__mutex_unlock(&pool->lock);
    gpumem__log_release();
    if (bytes)
        gpumem__log(pool->p.opts, GPUMEM_LOG_INFO, "%s: released %s of unused memory",
                    pool->p.label, gpumem__format_bytes(bytes, buf, sizeof buf));
    *released = bytes;
    return s;
}

/* ----------------------------------------------------------- snapshots -- */

struct copy_walk {
    struct pool *pool;
    struct pool_copy *c;
    size_t segs_cap, chunks_cap;
    bool overflow;
};

static void copy_segment(void *ctx, uint64_t base, uint64_t size)
{
    struct copy_walk *w = ctx;
    if (w->c->nsegs == w->segs_cap) {
        w->overflow = true;
        return;
    }
    struct pool_segment *g = &w->c->segs[w->c->nsegs++];
    g->base = base;
    g->size = size;
    g->kind = !w->pool->p.growth ? POOL_REGION_GREEDY
              : w->pool->space && gpumem__space_contains(w->pool->space, base)
                  ? POOL_REGION_VMM
                  : POOL_REGION_GROWTH;
    g->first = w->c->nchunks;
    g->count = 0;
}

static void copy_chunk(void *ctx, const struct arena_chunk_info *ci)
{
    struct copy_walk *w = ctx;
    if (w->overflow || w->c->nchunks == w->chunks_cap) {
        w->overflow = true;
        return;
    }
    struct pool_chunk *k = &w->c->chunks[w->c->nchunks++];
    uint64_t slack = ci->user[1] >> POOL_SLACK_SHIFT;
    k->addr = ci->addr;
    k->size = ci->size;
    k->is_free = ci->is_free;
    k->seq = ci->user[0];
    k->requested = k->is_free ? 0 : ci->size > slack ? ci->size - slack : ci->size;
    k->tag = gpumem__tag_text(ci->user[1] & POOL_TAG_MASK);
    /* a free chunk a stream holds (its work may still use it) is that stream's */
    k->stream =
        ci->is_free
            ? (uint64_t)(uintptr_t)(w->pool->streams
                                        ? gpumem__streams_stream_of(w->pool->streams,
                                                                    ci->owner)
                                        : NULL)
            : ci->user[2];
    k->held = ci->is_free && ci->owner != 0;
    w->c->segs[w->c->nsegs - 1].count++;
}

/* Room for a copy of the history's events, with some for those that come
 * before the copy is made (never more than the ring holds). */
static uint64_t pool_events_room(const struct history *h)
{
    if (!h)
        return 0;
    uint64_t n = gpumem__history_count(h);
    return gpumem__min_u64(h->cap, n + n / 2 + 1024);
}

gpumem_status gpumem__pool_copy(struct pool *pool, struct pool_copy *out,
                                struct reason *why)
{
    struct arena_stats st;
    memset(out, 0, sizeof *out);
    /* Sized outside the lock with room for what may come meanwhile; a pool that
     * grew past the room is sized again (rare: each try adds half). */
    gpumem__mutex_lock(&pool->lock);
    gpumem__arena_stats(pool->arena, &st);
    uint64_t events_cap = pool_events_room(pool->history);
    gpumem__mutex_unlock(&pool->lock);
    for (;;) {
        size_t nchunks = (size_t)(st.live_chunks + st.free_chunks);
        size_t chunks_cap = nchunks + nchunks / 2 + 64;
        size_t segs_cap = (size_t)st.segments + st.segments / 2 + 16;
        out->chunks = malloc(chunks_cap * sizeof *out->chunks);
        out->segs = malloc(segs_cap * sizeof *out->segs);
        out->events =
            events_cap ? malloc((size_t)events_cap * sizeof *out->events) : NULL;
        if (!out->chunks || !out->segs || (events_cap && !out->events)) {
            gpumem__pool_copy_free(out);
            return gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                                  "%s: out of host memory for a snapshot of %zu chunks",
                                  pool->p.label, nchunks);
        }
        struct copy_walk w = {pool, out, segs_cap, chunks_cap, false};
        gpumem__mutex_lock(&pool->lock);
        gpumem__arena_stats(pool->arena, &st);
        uint64_t nevents = pool->history ? gpumem__history_count(pool->history) : 0;
        if (st.live_chunks + st.free_chunks <= chunks_cap && st.segments <= segs_cap &&
            nevents <= events_cap) {
            gpumem__arena_walk_user(pool->arena, copy_segment, copy_chunk, &w);
            if (nevents) {
                gpumem__history_copy(pool->history, out->events);
                out->dropped = gpumem__history_dropped(pool->history);
            }
            out->nevents = (size_t)nevents;
            out->recording = pool->history != NULL;
            out->info.struct_size = (uint32_t)sizeof out->info;
            out->info.current_bytes = pool->current;
            out->info.peak_bytes = pool->peak;
            out->info.reserved_bytes = pool->reserved;
            out->info.peak_reserved_bytes = pool->peak_reserved;
            out->info.limit_bytes = pool->p.budget;
            out->info.largest_free_block = st.largest_free;
            out->info.num_allocs = pool->num_allocs;
            out->info.num_frees = pool->num_frees;
            out->info.num_ooms = pool->num_ooms;
            out->budget = pool->p.budget;
            out->growth = pool->p.growth;
        } else {
            w.overflow = true;
            events_cap = pool_events_room(pool->history);
        }
        gpumem__mutex_unlock(&pool->lock);
        if (!w.overflow)
            return GPUMEM_OK;
        gpumem__pool_copy_free(out);
    }
}

void gpumem__pool_copy_free(struct pool_copy *c)
{
    free(c->chunks);
    free(c->segs);
    free(c->events);
    memset(c, 0, sizeof *c);
}

const char *gpumem__pool_budget_reason(const struct pool *pool)
{
    return pool->budget_reason;
}
