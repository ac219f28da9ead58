/* What the pool's files share (pool.h is what the runtime sees): the pool
 * itself, and what each file does for the others. pool.c hands out and takes back
 * chunks (the arena, the counters, streams' memory, the history, snapshots);
 * growth.c is where chunks meet device memory (regions taken and given back, the
 * address space, growth, the trim and releases); split.h and split.c count
 * PyTorch's inactive split figures as the chunks change. Only these include it.
 *
 * Locks: pool->lock guards everything in struct pool, and pool->map_lock, taken
 * before it, the passes that map or unmap (docs/internals.md, "Locks"); every
 * function declared here runs with pool->lock held (a pass lets it go around its
 * driver calls: growth.c). */
#ifndef GPUMEM_POOL_STATE_H
#define GPUMEM_POOL_STATE_H

#include "arena.h"
#include "history.h"
#include "pool.h"
#include "space.h"
#include "streams.h"

/* A growing pool's device memory (growth.c): its address space, where it grows,
 * what it gave back, and the trim's record of when each granule was last freed.
 * Zero: none yet. */
struct growth {
    struct space *space;       /* the range regions are mapped into; NULL before
                                  the first growth or when the backend has none */
    bool space_tried;          /* the range was asked for (only once) */
    uint64_t sp_base, sp_size; /* the space's range, */
    unsigned sp_shift;         /* and log2 of its granularity */
    uint64_t unmapped;         /* bytes of the space's regions whose granules were
                                  given back while free: still the arena's, mapped
                                  again when handed out */
    uint64_t last_base;        /* where the region taken last lies */
    uint64_t tail_end;         /* the end of the contiguous region taken last: a
                                  growth extends the free tail there (0: none) */
    uint64_t keep_end;         /* during a trim: the free chunk that ends here
                                  keeps its granules (the tail a growth extends) */
    uint64_t trim_want;        /* during a trim: the bytes still to give back */
    uint64_t trim_now;         /* during a trim: the clock (MiB), */
    uint64_t trim_idle_before; /* and a granule freed before this one has
                                  stayed free across the window */
    uint64_t trimmed_frees;    /* pool_frees_ever at a trim that found too little, */
    uint64_t trimmed_cut;      /* and its trim_idle_before: none freed and none
                                  aged since, nothing more to trim */
    uint64_t freed;            /* bytes this pool has freed so far (never
                                  reset): with its live bytes, the trim's
                                  clock (gpumem__growth_clock) */
    uint32_t *freed_at;        /* per granule of the space: the clock, in MiB
                                  (wrapping), when a chunk over it was last freed;
                                  NULL: no trim (off, retired, or no host memory) */
    uint64_t *trim_gone;       /* per granule of the space, a bit: given back by
                                  the trim, and neither mapped again nor released
                                  since; allocated and freed with freed_at */
    uint64_t trim_regret;      /* bytes the trim gave back that allocations then
                                  mapped again (no release between): its mistakes,
                                  which retire it (pool_trim) */
    uint64_t req_owners;       /* during an allocation's growth: the arena owners
                                  it may take from (0: owner 0's only) */
    unsigned req_owner;        /* and the owner its new memory is added as */
    bool mapper;               /* a pass holds the pool's map_lock: `lock` is
                                  let go around its driver calls (growth.c,
                                  pool_leave) */
    uint64_t (*gone)[2];       /* during a release pass: the wholly free
                                  regions it took out of the arena (base,
                                  size), given back after */
    size_t num_gone, cap_gone;
    uint64_t released;            /* bytes a release pass gave back */
    gpumem_status release_status; /* first backend failure of a release pass */
    struct reason release_why;    /* and its reason */
};

/* PyTorch's "inactive split" figures (split.h): free chunks in
 * a segment that holds other chunks, with the bytes of theirs that are mapped
 * (a release or the trim unmaps whole granules of free chunks; a chunk with none
 * mapped is none). Counted as the chunks change: each allocation and free adds
 * its net change, and every other change (growth, releases, the trim, streams'
 * memory handed back) recounts them (gpumem__split_recount). */
struct split_counts {
    const struct arena_head *records; /* the arena's (gpumem__arena_head) */
    uint64_t kb;           /* the blocks now are the records in use less the live
                              blocks (pool->live) less kb: free chunks, plus two
                              sentinels per segment, less the uncounted ones */
    uint64_t xb;           /* the bytes now are xb - pool->current */
    uint64_t min_current;  /* lowest pool->current since xb last moved: the
                              bytes' peak is at least xb - min_current */
    uint64_t peak_kb;      /* the blocks' highest since creation or reset, +
                              kb (a free compares the records with it) */
    uint64_t peak_bytes;   /* the bytes' highest, but for xb - min_current */
    uint64_t blocks_total; /* sum of the increases, never reset */
    uint64_t bytes_extra;  /* the bytes' sum of increases is pool->freed_total
                              plus this (modulo 2^64) */
    uint64_t whole;        /* segments that are one free chunk (their chunk is
                              not split: not counted) */
    uint64_t whole_least;  /* at most the size of the least of them (0: not
                              known): an allocation from a smaller chunk took
                              none of them, and asks nothing */
    bool multi;            /* more than one segment: a free may leave
                              any of them whole */
    bool marked;           /* blocks_mark holds the blocks before a change of the
                              arena that a recount follows */
    uint64_t blocks_mark;
    uint8_t gate; /* SPLIT_GATE_ALLOC: allocations leave the steady path (a
                     segment is one free chunk, granules are unmapped, or
                     the history records); SPLIT_GATE_FREE: frees do
                     (several segments, or granules unmapped). Set again by
                     each rare path (split.c, gpumem__split_gate) */
};

#define SPLIT_GATE_ALLOC 1u
#define SPLIT_GATE_FREE  2u

struct pool {
    gpumem_mutex lock;
    /* Taken before `lock` by every pass that maps or unmaps (growth, a mapping
     * of given-back granules, the trim, releases): one at a time per pool, and
     * `lock` is let go around each of its driver calls (g.mapper), so that
     * allocations and frees that map nothing go on meanwhile. A thread that
     * holds `lock` only tries it (pool.c, pool_slow_begin). */
    gpumem_mutex map_lock;
    struct arena *arena;
    struct pool_params p;
    char budget_reason[256];
    uint64_t current, peak;           /* bytes in live chunks */
    uint64_t reserved, peak_reserved; /* bytes of regions taken from the device */
    /* gpumem_memory_info's num_allocs and num_frees count from these, taken at
     * the last reset: seq and pool_frees_ever (no count of its own: a free
     * makes one decrement, of `live`) */
    uint64_t seq_at_reset, frees_at_reset;
    uint64_t num_ooms;
    uint64_t live, peak_live; /* allocations live (kept ones included), and the
                                 highest count since creation or reset */
    /* Never reset (gpumem_memory_info's totals): bytes ever taken from the
     * device, bytes of allocations ever freed, growths retried after giving free
     * regions back, waits for every stream (drains). */
    uint64_t reserved_total, freed_total, num_retries, num_drains;
    uint64_t seq;            /* allocations made so far (never reset): the last
                                one's sequence number */
    struct streams *streams; /* stream-ordered frees; NULL when the backend's
                                streams are synchronous (no events) */
    struct history *history; /* the event history; NULL: off (history.h) */
    struct growth g;         /* device memory (growth.c) */
    struct split_counts split;
};

/* --------------------------------------------------------------- pool.c -- */

/* Records an event in the history (pre: pool->history). */
void gpumem__pool_record(struct pool *pool, enum history_action action, uint64_t addr,
                         uint64_t size, uint64_t requested,
                         const uint64_t user[ARENA_USER_WORDS]);

/* ------------------------------------------------------------- growth.c -- */

/* Takes the pool's map_lock, then its lock, for a pass that maps or unmaps
 * (pool->g.mapper: the lock is let go around its driver calls); _end gives
 * both back. pool.c's allocations take them their own way (pool_slow_begin). */
void gpumem__growth_map_begin(struct pool *pool);
void gpumem__growth_map_end(struct pool *pool);

/* Grows the pool so that a chunk of `need` bytes (a multiple of 256) may fit,
 * for the owners in pool->g.req_owners (pool.h's growth policy); gives the
 * pool's free regions back and tries again when the budget or the device
 * refuses, then asks the GPU's other processes. pre: the log held. */
gpumem_status gpumem__growth_grow(struct pool *pool, uint64_t need, struct reason *why);

/* Maps the granules under the chunk [addr, addr+size) just handed out that a
 * release or the trim gave back (pool_unbacked said some are), within the budget.
 * OUT_OF_MEMORY when the budget or the device cannot have them (the caller frees
 * the chunk, then gives back what was mapped with gpumem__growth_release_free).
 * pre: the log held. */
gpumem_status gpumem__growth_back(struct pool *pool, uint64_t addr, uint64_t size,
                                  struct reason *why);

/* Gives every wholly free region of owner 0 back, then, in the space, the whole
 * extents of owner 0's free chunks; returns the bytes given back. The first
 * failure is left in pool->g.release_status and release_why. */
uint64_t gpumem__growth_release_free(struct pool *pool);

/* The largest free chunk, or part of one, that the pool can hand out without
 * mapping anything (gpumem_memory_info.largest_free_block): the largest run of
 * mapped granules of a free chunk (a stream's free memory included: it serves
 * that stream without growing). O(1) while nothing was given back, else a walk of
 * the free chunks largest first that stops at the first no larger than the best
 * run found. */
uint64_t gpumem__growth_largest_free(struct pool *pool);

/* The bytes of the free chunk [addr, addr+size) whose memory was given back:
 * the unmapped granules wholly inside it (one it shares with a live neighbour
 * stays mapped). 0 on a pool without an address space. */
uint64_t gpumem__growth_chunk_unmapped(const struct pool *pool, uint64_t addr,
                                       uint64_t size);

/* Gives every region back to the device, one at a time out of the region map
 * (destroy: no other call is in flight), then frees the space; failures go to the
 * log. pre: the log held. */
void gpumem__growth_give_all_back(struct pool *pool);

/* Frees the growth's host memory (destroy and forget). */
void gpumem__growth_free(struct pool *pool);

/* Frees made so far (never reset): every allocation is live or freed. */
static inline uint64_t pool_frees_ever(const struct pool *pool)
{
    return pool->seq - pool->live;
}

/* Whether the chunk [addr, addr+size) lies on granules of the space that were
 * given back: asked on every allocation of a growing pool that has given some
 * back (pool->g.unmapped). */
static inline bool gpumem__growth_unbacked(const struct pool *pool, uint64_t addr,
                                           uint64_t size)
{
    const struct growth *g = &pool->g;
    uint64_t gran = UINT64_C(1) << g->sp_shift, lo = gpumem__align_down(addr, gran), hi;
    if (addr - g->sp_base >= g->sp_size || !gpumem__align_up(addr + size, gran, &hi))
        return false;
    return gpumem__space_any_unmapped(g->space, lo, hi - lo);
}

/* The trim's clock: the bytes this pool has handed out so far, those freed and
 * those live (counted on frees only, so that allocations pay nothing for it). */
static inline uint64_t gpumem__growth_clock(const struct pool *pool)
{
    return pool->g.freed + pool->current;
}

/* A chunk [addr, addr+size) is being freed (pool->current not yet counted
 * down): its granules are stamped with the clock, which a free does not move.
 * Most chunks lie in one granule: a store. */
static inline void gpumem__growth_freed(struct pool *pool, uint64_t addr, uint64_t size)
{
    struct growth *g = &pool->g;
    uint64_t off = addr - g->sp_base;
    uint32_t now = (uint32_t)(gpumem__growth_clock(pool) >> 20);
    g->freed += size;
    if (off >= g->sp_size)
        return;
    uint32_t *f = g->freed_at + (off >> g->sp_shift);
    uint32_t *last = g->freed_at + ((off + size - 1) >> g->sp_shift);
    *f = now;
    while (f != last) /* a chunk over a granule's end */
        *++f = now;
}

#endif /* GPUMEM_POOL_STATE_H */
