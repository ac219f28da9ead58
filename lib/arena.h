/* The arena: best fit with coalescing over address ranges it never dereferences.
 *
 * The arena hands out chunks of the regions it is given. All metadata lives in host
 * memory, out of band (device memory is not host-addressable): chunk records come
 * from a pooled slab, live chunks are found by address through a hash table, and
 * free chunks are kept by size so that allocation takes the smallest chunk that
 * fits (among equals, see the tie rule below). It knows nothing
 * of devices, backends or gpumem's public types, so it can be unit-tested, fuzzed
 * and benchmarked alone.
 *
 * Granularity: every size and address is a multiple of ARENA_GRANULE (256 bytes);
 * requests are rounded up to it.
 *
 * Choice, split and placement rule: plain best fit. An allocation takes the smallest
 * free chunk that holds the rounded request (ties: below), splits it
 * whenever anything is left (a remainder is at least one granule), takes its low
 * end, and leaves the rest free in place. A large free chunk is therefore only cut
 * when no smaller one fits, and never by more than the request: nothing is handed
 * out beyond the rounding (TensorFlow's BFC gives a whole chunk when the rest would
 * be small, which costs capacity). The same rule holds in every arena, in pools
 * that grow and pools that do not.
 *
 * Ties: from 16 KiB (64 granules), the lowest address. Below, where each size has a
 * class of its own, the head of the size's list: a freed chunk below the head's
 * address becomes the head, any other goes after the last of the next three that
 * lie below it, so the first four entries are in address order and a chunk freed
 * among many of its size waits near the head (issue 22: with a million chunks the
 * lowest-addressed one of a size lies anywhere, in memory no longer in cache, and
 * the rule keeps the next allocation in cache; over the workload family it leaves
 * the smallest fixed pools as they were on average, docs/bench.md "The tie rule").
 *
 * Why no heuristic on top (issue 22): every rule tried on top of best fit - the
 * top-first rule (a request without an exact fit carved from the untouched top,
 * which strands holes that no later size matches exactly), its variants with
 * tolerances for near and multiple fits or protection of recently freed sizes,
 * the spread rule (the highest-addressed among the best fits of the next size
 * classes) and the neighbour-end rule - made the smallest clean fixed pool larger
 * than plain best fit on average over the workload family (bench/gen_family.py,
 * bench/robustness), and by far more than 0.5% on some of its traces. The figures
 * belong to the runs that measured them, in docs/bench.md, not to this header.
 *
 * Regions: add_region() gives the arena [base, base+size). Regions added as
 * `contiguous` that touch another contiguous region form one segment, and chunks
 * coalesce and are served across their boundary; a region that is not contiguous
 * is a segment of its own (its memory cannot be used together with its
 * neighbour's, as with separate cudaMalloc blocks).
 *
 * Invariants (checked by gpumem__arena_check): segments sorted and disjoint; each
 * segment tiled by its chunks without gap or overlap; no two adjacent free chunks in
 * a segment; every free chunk in the free index, every used chunk in the live index;
 * byte and chunk totals add up.
 *
 * Free index: TLSF-style size classes (a power-of-two first level split into 32
 * linear steps; classes below 64 granules hold one size each), computed without a
 * branch and found through two levels of bitmaps, each class of several sizes a
 * treap keyed by (size, address), each class of one size a list in the order of the
 * tie rule, with a pointer to each class's minimum (a list's head). The treap's bounds
 * are expected (random priorities drawn once per record), independent of the order of
 * operations. A free chunk whose key changes without leaving its class keeps its place
 * when the order allows: the rest of a split taken from a higher class (it was that
 * class's minimum and stays so), and a chunk that grows by coalescing without passing its
 * successor. Then the operation does no tree work at all.
 *
 * Complexity (n = chunks, k = free chunks in the size class concerned, r = regions):
 * alloc O(1) class lookup and O(1) best fit (a class minimum; expected O(log k) in
 * the rare case of a class of several sizes whose minimum is too small), plus the
 * expected O(1) removal of the chunk or expected O(log k) refiling of the rest (O(1)
 * when the rest keeps its place or goes to a list: at most three steps);
 * free expected O(1) hash lookup (load at most 1/2), O(1) expected removal of a
 * coalesced neighbour, and O(1) insertion into a list or expected O(log k) insertion
 * (O(log d) for a chunk of rank d below the class's root, found from the class minimum)
 * or a check that the grown chunk keeps its place (a walk to its successor in the class:
 * expected O(1) on average over the class's chunks, expected O(log k) for the class's
 * largest); add_region O(r) (sorted array insert, rare) plus expected O(log n);
 * release_free_regions O(n + r) plus expected O(log n) per carved run;
 * largest_free expected O(log n); walk O(n + r); check O(n + r + p), p the peak
 * number of chunks (it visits every live-hash slot and spare record). No operation scans
 * the free chunks, and no allocation or free calls the host allocator except to grow the
 * slab or the live hash.
 *
 * Host metadata grows with the peak number of chunks, never with the bytes of the
 * regions: one 64-byte record per chunk (from slab blocks kept until destroy, each
 * block a quarter of the records so far, so at most a fifth are spare), 16 bytes per
 * live-hash slot (load between 1/4 and 1/2: 32 to 64 bytes per live chunk), a few
 * words per region and segment, and about 27 KiB of class heads (a root and a minimum
 * per class). A region of any size costs three records; an 80 GiB or a 1 TiB region
 * costs what a 1 MiB one does. With the default host allocator on Linux, host blocks
 * of 2 MiB and more (the live hash from 32,769 live chunks, slab blocks from
 * about 130,000 records, each then one 2 MiB block) are 2 MiB-aligned and advised as
 * huge pages (MADV_HUGEPAGE): with a million chunks, every operation's random
 * accesses to records and hash slots would otherwise also miss the TLB.
 *
 * Owners of free memory. Every free chunk belongs to an owner, a number below
 * ARENA_OWNERS that the arena never interprets (a pool gives one to each stream
 * whose stream-ordered frees may still be in use by its work, lib/streams.h);
 * owner 0's memory is anyone's. Each owner's free chunks have an index of their
 * own. An allocation for a set of owners takes the best fit among their free
 * chunks and owner 0's (by size, then address, across the indexes). A chunk that
 * becomes free as owner o's (a free, or a region added as o's) joins the free
 * neighbours of the owners o joins, always o's own and, for o != 0, owner 0's,
 * plus any the owner of the arena adds (gpumem__arena_set_joins); the merged
 * chunk is o's. So a stream's memory coalesces as it frees, as the segments of a
 * stream do in PyTorch's allocator; owner 0's own frees join only owner 0's
 * neighbours. gpumem__arena_disown hands all of an owner's free chunks to owner
 * 0. Releases of free regions and the walk of the largest free chunks consider
 * owner 0's chunks only: what an owner holds is the owner's until it is
 * disowned. Plain allocations and frees (gpumem__arena_alloc, _free) are owner
 * 0's and cost what they did before owners.
 *
 * Not thread-safe: the owner (a pool) serializes every call with its lock. */
#ifndef GPUMEM_ARENA_H
#define GPUMEM_ARENA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ARENA_GRANULE 256u
/* Owners 0 .. ARENA_OWNERS - 1 (a chunk record keeps its owner in a byte; the
 * sets of owners are 64-bit masks, bit o for owner o). */
#define ARENA_OWNERS 64u

struct arena;

enum arena_result {
    ARENA_OK = 0,
    ARENA_NO_FIT = 1,   /* no free chunk is large enough (the caller may add a region) */
    ARENA_HOST_OOM = 2, /* a host metadata allocation failed; the arena is unchanged,
                           but for room it had reserved before the failing one (a
                           larger live hash, records, arrays: metadata_bytes may
                           grow, for later use) */
    ARENA_BAD_ADDRESS = 3, /* free of an address that is not the start of a live chunk */
    ARENA_BAD_RANGE = 4 /* a region that is misaligned, empty, wrapping or overlapping */
};

/* Where the arena takes its host metadata from; tests inject failures here.
 * NULL in gpumem__arena_create means malloc/free. */
struct arena_host_allocator {
    void *(*alloc)(void *ctx, size_t bytes);
    void (*free)(void *ctx, void *p);
    void *ctx;
};

struct arena_stats {
    uint64_t capacity_bytes;  /* sum of the regions' sizes */
    uint64_t allocated_bytes; /* sum of the live chunks' sizes */
    uint64_t free_bytes;      /* capacity_bytes - allocated_bytes */
    uint64_t largest_free;    /* size of the largest free chunk; 0 if none */
    uint64_t live_chunks;     /* chunks handed out and not yet freed */
    uint64_t free_chunks;
    uint64_t regions;
    uint64_t segments;
    uint64_t metadata_bytes;  /* host bytes held by the arena's own structures */
    uint64_t segments_peak;   /* highest segments since creation or reset */
    uint64_t segments_formed; /* segments ever formed: by a region that touched
                                 none, or a release that cut one in pieces */
};

/* pre: out != NULL. Returns ARENA_OK or ARENA_HOST_OOM. */
int gpumem__arena_create(const struct arena_host_allocator *host, struct arena **out);
/* Frees all metadata; live chunks are forgotten. NULL is ignored. */
void gpumem__arena_destroy(struct arena *a);

/* Adds [base, base+size) as free memory.
 * Returns ARENA_OK; ARENA_BAD_RANGE (not granule-aligned, size 0, wraps: base + size
 * > UINT64_MAX, overlaps a region); ARENA_HOST_OOM. On failure the arena is
 * unchanged. */
int gpumem__arena_add_region(struct arena *a, uint64_t base, uint64_t size,
                             bool contiguous);

/* Takes the best fit for `size` bytes rounded up to the granule (the smallest free
 * chunk that holds it; among equals, the one the tie rule above names), splits off
 * the rest above it, and returns its address and rounded size.
 * pre: addr and chunk_size not NULL.
 * Returns ARENA_OK; ARENA_NO_FIT (size 0 is rounded to one granule; a size that
 * overflows when rounded never fits); ARENA_HOST_OOM. Unchanged on failure. */
int gpumem__arena_alloc(struct arena *a, uint64_t size, uint64_t *addr,
                        uint64_t *chunk_size);

/* Frees the live chunk that starts at addr and coalesces it with free neighbours.
 * chunk_size (may be NULL) receives its size.
 * Returns ARENA_OK; ARENA_BAD_ADDRESS (never allocated, interior, already freed);
 * the arena is unchanged on failure. */
int gpumem__arena_free(struct arena *a, uint64_t addr, uint64_t *chunk_size);

/* Size of the live chunk at addr, or 0 if addr does not start a live chunk. */
uint64_t gpumem__arena_lookup(const struct arena *a, uint64_t addr);

/* Removes every region that lies wholly inside one free chunk of owner 0, in ascending
 * address order, calling release(ctx, base, size) (may be NULL) for each after all
 * of them left the arena. Returns the number of bytes removed. Remaining free pieces
 * stay free; a segment splits where regions left its middle. On host OOM (a new
 * segment array, a few records) it removes nothing and returns 0. */
uint64_t gpumem__arena_release_free_regions(
    struct arena *a, void (*release)(void *ctx, uint64_t base, uint64_t size), void *ctx);

/* Size of the free chunk that ends a segment at `end`: the free tail that a
 * contiguous region added at `end` joins (a growing pool extends it by what a
 * request lacks). 0 when no segment ends at `end`, or when its last chunk is live.
 * O(log segments); changes nothing. */
uint64_t gpumem__arena_free_tail(const struct arena *a, uint64_t end);

/* Fills *out (pre: not NULL). largest_free is expected O(log n); the rest O(1). */
void gpumem__arena_stats(const struct arena *a, struct arena_stats *out);
uint64_t gpumem__arena_largest_free(const struct arena *a);
/* segments_peak := segments. */
void gpumem__arena_reset_peaks(struct arena *a);

/* Checks every invariant above, in O(n + r + p). Returns true if they hold; otherwise
 * false with a description in msg (may be NULL). For tests and debugging. */
bool gpumem__arena_check(const struct arena *a, char *msg, size_t msg_size);

/* Calls visit(ctx, addr, size, is_free) for every chunk in address order. */
void gpumem__arena_walk(const struct arena *a,
                        void (*visit)(void *ctx, uint64_t addr, uint64_t size,
                                      bool is_free),
                        void *ctx);

/* The owner's words on a live chunk: ARENA_USER_WORDS 64-bit words that the owner
 * gives at allocation and gets back in a walk, kept in the chunk's record (where a
 * free chunk keeps its free-index links), so that they cost no lookup and no host
 * memory. The arena never reads them. */
#define ARENA_USER_WORDS 3

/* gpumem__arena_alloc, and the chunk carries user[] until it is freed (a chunk
 * allocated by gpumem__arena_alloc carries zeros). Same results. */
int gpumem__arena_alloc_user(struct arena *a, uint64_t size,
                             const uint64_t user[ARENA_USER_WORDS], uint64_t *addr,
                             uint64_t *chunk_size);

/* The live chunk at addr: its size, and its words into user[]; 0 (user[]
 * untouched) when addr does not start a live chunk. */
uint64_t gpumem__arena_user(const struct arena *a, uint64_t addr,
                            uint64_t user[ARENA_USER_WORDS]);
/* Replaces the words of the live chunk at addr (a block handed to a new owner
 * without being freed); false when addr does not start a live chunk. */
bool gpumem__arena_set_user(struct arena *a, uint64_t addr,
                            const uint64_t user[ARENA_USER_WORDS]);

struct arena_chunk_info {
    uint64_t addr, size;
    bool is_free;
    unsigned owner;                  /* a free chunk's owner; 0 for a live one */
    uint64_t user[ARENA_USER_WORDS]; /* the owner's words; zeros for a free chunk */
};

/* For each segment in address order, segment(ctx, base, size), then chunk(ctx, c)
 * for each of its chunks in address order (they tile the segment). O(n + r). */
void gpumem__arena_walk_user(const struct arena *a,
                             void (*segment)(void *ctx, uint64_t base, uint64_t size),
                             void (*chunk)(void *ctx, const struct arena_chunk_info *c),
                             void *ctx);

/* ------------------------------------------------------------- owners -- */

/* Opens owner o (1 <= o < ARENA_OWNERS): its index (some 27 KiB of host
 * memory), joining its own chunks and owner 0's. ARENA_OK (also when open
 * already); ARENA_HOST_OOM; ARENA_BAD_RANGE for o out of range. An owner must be
 * open before anything is freed or added as its. */
int gpumem__arena_owner_open(struct arena *a, unsigned owner);
/* Disowns o's free chunks and closes it (nobody joins it any more). Nothing
 * for an owner that is not open. */
void gpumem__arena_owner_close(struct arena *a, unsigned owner);
/* Whether o holds no free chunk (true for an owner that is not open). */
bool gpumem__arena_owner_empty(const struct arena *a, unsigned owner);
/* The owners whose free neighbours a chunk becoming o's joins, besides o's and
 * owner 0's (which it always joins); owners not open are left out. Changes no
 * chunk: only later frees join by it. Nothing for o = 0 or not open. */
void gpumem__arena_set_joins(struct arena *a, unsigned owner, uint64_t owners);
/* Hands o's free chunks to owner 0, each joining owner 0's free neighbours;
 * returns their bytes (0 for o = 0 or not open). O(k log k), k of o's chunks. */
uint64_t gpumem__arena_disown(struct arena *a, unsigned owner);

/* gpumem__arena_alloc_user among the free chunks of the owners in `owners` and
 * owner 0's (bit 0 is implied); owners not open are skipped. The best fit across
 * them: the smallest chunk that holds the request, among equals the lowest
 * address. The rest of a split stays its owner's. */
int gpumem__arena_alloc_owned(struct arena *a, uint64_t size, uint64_t owners,
                              const uint64_t user[ARENA_USER_WORDS], uint64_t *addr,
                              uint64_t *chunk_size);
/* gpumem__arena_free, the chunk becoming o's free memory (joins as above).
 * ARENA_BAD_ADDRESS also when o is not open. */
int gpumem__arena_free_owned(struct arena *a, uint64_t addr, unsigned owner,
                             uint64_t *chunk_size);
/* gpumem__arena_add_region, the region's memory o's (joining as a free does).
 * ARENA_BAD_RANGE also when o is not open. */
int gpumem__arena_add_region_owned(struct arena *a, uint64_t base, uint64_t size,
                                   bool contiguous, unsigned owner);
/* gpumem__arena_free_tail, and the tail's owner into *owner (may be NULL; left
 * alone when the answer is 0). */
uint64_t gpumem__arena_free_tail_owned(const struct arena *a, uint64_t end,
                                       unsigned *owner);
/* The size of the largest free chunk of the owners in `owners` (bit o for o);
 * 0 if none. gpumem__arena_largest_free is this over every owner. */
uint64_t gpumem__arena_largest_free_owned(const struct arena *a, uint64_t owners);

/* Calls visit(ctx, addr, size) for owner 0's free chunks of at least min_size
 * bytes, largest first (by size, then by address, both descending; in a class of one
 * size, the list from its tail), until visit returns false or none is left. The
 * visitor must not change the arena. O(log n) to start, expected O(1) per chunk
 * visited plus O(1) per size class passed (a growing pool's trim looks at its
 * largest holes first, lib/pool.c). */
void gpumem__arena_walk_free_largest(const struct arena *a, uint64_t min_size,
                                     bool (*visit)(void *ctx, uint64_t addr,
                                                   uint64_t size),
                                     void *ctx);

/* gpumem__arena_walk_free_largest over owner o's free chunks (nothing for an
 * owner that is not open). */
void gpumem__arena_walk_free_largest_of(
    const struct arena *a, unsigned owner, uint64_t min_size,
    bool (*visit)(void *ctx, uint64_t addr, uint64_t size), void *ctx);

/* ----------------------------------------------- what a change did -- */

/* A pool counts PyTorch's "inactive split" blocks as its chunks change (free
 * chunks in a segment that holds others: lib/pool.c, "Inactive split"). These
 * say what an allocation did, as instantiations of their own of the path above,
 * so that the plain calls (gpumem__arena_alloc, _free: the arena's own numbers)
 * do no more than they did; the arena's record counts say what a free did; and
 * these answer the few questions about the chunks around one, each O(1) or
 * O(log segments). */

/* gpumem__arena_alloc_user and gpumem__arena_alloc_owned, the chunk's size in
 * sizes[0] and in sizes[1] the bytes left free after it (0: a free chunk was
 * taken whole). */
int gpumem__arena_alloc_user_rest(struct arena *a, uint64_t size,
                                  const uint64_t user[ARENA_USER_WORDS], uint64_t *addr,
                                  uint64_t sizes[2]);
int gpumem__arena_alloc_owned_rest(struct arena *a, uint64_t size, uint64_t owners,
                                   const uint64_t user[ARENA_USER_WORDS], uint64_t *addr,
                                   uint64_t sizes[2]);

/* Counts the arena keeps anyway, for its owner to read inline through the
 * pointer gpumem__arena_head gives (the same for the arena's life): the slab's
 * records, spare and all. Those in use are the chunks, free and live, and two
 * sentinels per segment, so the free chunks are records_total - spare_count -
 * the live chunks - 2 * the segments. A free puts back one record per free
 * chunk it joins (spare_count grows by that many) and takes none. */
struct arena_head {
    size_t spare_count, records_total;
};
const struct arena_head *gpumem__arena_head(const struct arena *a);

/* The free chunks, their bytes and the segments (arena_stats' free_chunks,
 * free_bytes and segments without its largest free chunk), O(1). */
void gpumem__arena_free_counts(const struct arena *a, uint64_t *chunks, uint64_t *bytes,
                               uint64_t *segments);

/* Just after an allocation that left `rest` bytes free (gpumem__arena_alloc_user_rest)
 * at addr: whether the free chunk it took was its segment's only chunk. */
bool gpumem__arena_took_whole(const struct arena *a, uint64_t addr, uint64_t rest);

/* gpumem__arena_free, which also says in *whole the size of the free chunk the
 * freed one ended in when that chunk is its segment's only one (else 0): two
 * loads more than gpumem__arena_free. */
int gpumem__arena_free_whole(struct arena *a, uint64_t addr, uint64_t *chunk_size,
                             uint64_t *whole);

/* The size of the free chunk that is the whole segment holding addr; 0 when
 * that segment holds more than one chunk, or a live one, or addr lies in none.
 * O(log segments). */
uint64_t gpumem__arena_whole_free_at(const struct arena *a, uint64_t addr);

/* What `owner`'s free of the live chunk at addr would do (gpumem__arena_free
 * for owner 0, gpumem__arena_free_owned): calls visit(ctx, addr, size) for each
 * free chunk it would join (those before it, nearest first, then those after
 * it), and sets *whole to whether the chunk it ends in would be its segment's
 * only one. false, visiting nothing, when addr does not start a live chunk or
 * the owner is not open. Changes nothing; O(chunks it would join). */
bool gpumem__arena_free_preview(const struct arena *a, uint64_t addr, unsigned owner,
                                void (*visit)(void *ctx, uint64_t addr, uint64_t size),
                                void *ctx, bool *whole);

/* Calls visit(ctx, base, size) for each segment that is one free chunk, in
 * address order. O(segments). */
void gpumem__arena_walk_whole_free(const struct arena *a,
                                   void (*visit)(void *ctx, uint64_t base, uint64_t size),
                                   void *ctx);

#endif /* GPUMEM_ARENA_H */
