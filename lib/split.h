/* PyTorch's "inactive split" figures of a pool, counted as the pool's chunks
 * change (split.c has the exact, rare paths and the recount; the steady path's
 * few instructions are inline here, for pool.c's allocation and free).
 *
 * PyTorch's inactive_split and inactive_split_bytes (its DeviceStats): the free
 * blocks of segments that hold other blocks, and their bytes. Here: the free
 * chunks of each segment (address range the pool's memory forms) that holds
 * more than one chunk, each with the bytes of it that are mapped (the granules
 * wholly inside it that a release or the trim gave back are not; a chunk with
 * none mapped is not counted at all), streams' free memory included. A segment
 * that is one free chunk is not split; split.whole counts those instead. A
 * walk of gpumem's snapshot computes the same figures (tests/python/
 * test_torch.py, inactive_split).
 *
 * As in PyTorch, every change adds its net change: an increase to the figure,
 * its total and maybe its peak, a decrease to the figure (what PyTorch calls
 * freed is the total less the figure). The steady path pays a few
 * instructions (docs/internals.md, "Inactive split"): neither figure is
 * stored. The blocks are the arena's records in use less the live blocks
 * (free chunks and two sentinels a segment) less split.kb, the bytes split.xb
 * less pool->current; while no segment is one free chunk and nothing is
 * unmapped (split.gate), an allocation and a free move both exactly as the
 * figures move, so an allocation does nothing, and a free only adds to the
 * total of the blocks where it joined no free chunk (a block more; the peak is
 * looked at there) and keeps the lowest pool->current since xb last moved (the
 * bytes' peak is xb less that; their total is pool->freed_total plus
 * split.bytes_extra). Everything else goes to a cold path, which moves kb and
 * xb: exact answers from the chunks around and the space's bitmaps
 * (gpumem__split_alloc_slow, gpumem__split_free_exact, gpumem__split_free_slow), and
 * for changes that are not one allocation or free, a recount
 * (gpumem__split_recount).
 *
 * Locks: every function here runs with pool->lock held. */
#ifndef GPUMEM_SPLIT_H
#define GPUMEM_SPLIT_H

#include "pool_state.h"

#if defined(__GNUC__)
#define SPLIT_RARE(x) __builtin_expect(!!(x), 0)
#else
#define SPLIT_RARE(x) (x)
#endif

/* The free chunks plus two per segment, and the blocks now. pre: pool->lock
 * held. */
static inline uint64_t gpumem__split_free_records(const struct pool *pool)
{
    const struct arena_head *h = pool->split.records;
    return h->records_total - h->spare_count - pool->live;
}

static inline uint64_t gpumem__split_blocks(const struct pool *pool)
{
    return gpumem__split_free_records(pool) - pool->split.kb;
}

/* The bytes now, and their peak. pre: pool->lock held. */
static inline uint64_t gpumem__split_bytes(const struct pool *pool)
{
    return pool->split.xb - pool->current;
}
uint64_t gpumem__split_peak_bytes(const struct pool *pool);

/* Which paths leave the steady one from now on (struct split_counts, gate):
 * for the split figures, or for an allocation to record in the history (one
 * test for both; a free tests the history as before: it records before the
 * arena's free, and a rare path for it cost the history more than it saved). */
void gpumem__split_gate(struct pool *pool);

/* An allocation at addr of `got` bytes that left `rest` free after it, counted
 * in the pool, while granules are unmapped or a segment is one free chunk: the
 * chunk it took, as it was (counted unless it was a whole segment or had
 * nothing mapped), and its rest. Before the granules under the chunk are
 * mapped (gpumem__growth_back maps only those, which lie in no free chunk). */
void gpumem__split_alloc_slow(struct pool *pool, uint64_t addr, uint64_t got,
                              uint64_t rest);

/* What a free joins, for the split figures while granules are unmapped: the
 * free chunks it joins (`joined`), those of them with bytes mapped (`counted`)
 * and those bytes (`mapped`), their sizes (`sizes`), and whether the chunk it
 * ends in is its segment's only one (`whole`). */
struct split_join {
    unsigned joined, counted;
    uint64_t mapped, sizes;
    bool whole;
};

/* Before the free of the live chunk at addr as `owner`'s (owner 0: anyone's),
 * while granules are unmapped: what it will join (gpumem__arena_free_preview;
 * O(the chunks it joins)). false when addr starts no live chunk. */
bool gpumem__split_free_preview(struct pool *pool, uint64_t addr, unsigned owner,
                                struct split_join *out);

/* That free of `size` bytes, done and counted in pool->current: the figures
 * moved by what it joined (`pre`, from gpumem__split_free_preview). No unmapped
 * granule lies across two chunks (only whole granules of free chunks are given
 * back, and an allocation maps every granule it touches), so the chunk it ends
 * in has the joined chunks' mapped bytes and all of the freed one's. */
void gpumem__split_free_slow(struct pool *pool, uint64_t size,
                             const struct split_join *pre);

/* A free of `size` bytes at addr that joined `joined` free chunks, done and
 * counted, nothing unmapped: the chunks joined were counted (their segment held
 * the freed one), and the chunk it ended in is, unless it is its segment's
 * only one. */
void gpumem__split_free_exact(struct pool *pool, uint64_t addr, uint64_t size,
                              unsigned joined);

/* The same, told by the arena's free (gpumem__arena_free_whole) the size of
 * the chunk it ended in when that chunk is its segment's only one (`whole`),
 * else 0. */
void gpumem__split_free_known(struct pool *pool, uint64_t size, unsigned joined,
                              uint64_t whole);

/* The same, on the steady path (not split.gate's SPLIT_GATE_FREE: one
 * segment, nothing unmapped): only a free that leaves no block live (no
 * current bytes: the test rides on the bytes' peak's) has to ask whether the
 * chunk is a whole segment. */
static inline void gpumem__split_free(struct pool *pool, uint64_t addr, uint64_t size,
                                      unsigned joined)
{
    struct split_counts *s = &pool->split;
    if (pool->current <= s->min_current) { /* the bytes' peak (xb - current) */
        /* no block left live (pool->current 0): the chunk may be the segment */
        if (SPLIT_RARE(pool->current == 0)) {
            gpumem__split_free_exact(pool, addr, size, joined);
            return;
        }
        s->min_current = pool->current;
    }
    if (joined == 0) { /* a block more: the peak, with kb (the blocks + kb) */
        s->blocks_total++;
        uint64_t records = gpumem__split_free_records(pool);
        if (records > s->peak_kb)
            s->peak_kb = records;
    }
}

/* Counts the figures again from the arena (and the space's bitmaps), and adds
 * the change to them, after a change that is not one allocation or free: a
 * region added or released, granules claimed or put back, streams' memory
 * handed to anyone. O(segments) while nothing is unmapped (pool->g.unmapped),
 * else a walk of the chunks. */
void gpumem__split_recount(struct pool *pool);

/* Notes the blocks before a change of the arena's free chunks that
 * gpumem__split_recount follows (a region added or released): the recount's
 * change is counted from there. The first mark before a recount holds. */
void gpumem__split_mark(struct pool *pool);

#endif
