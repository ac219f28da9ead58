/* Pools: one per logical device. A pool owns an arena over the regions it took
 * from its GPU, a budget it never reserves past, a growth policy, and the counters
 * of gpumem_memory_info. Greedy pools reserve their whole budget up front; growing
 * pools take regions on demand; either gives wholly free regions back on request
 * and before reporting that memory ran out (a growing pool with an address range
 * also the whole free granules inside the regions that stay).
 *
 * A pool enters each region it takes in the runtime's region map (region_map.h),
 * which gpumem_free reads to route a pointer to its pool, and takes it out before
 * giving the region back.
 *
 * Errors: a failure returns a status and writes the pool's reason into *why
 * (never NULL), in the pool's words ("out of memory: ...; budget ..."), never
 * naming the API call: the entry point puts "gpumem_malloc(/device:GPU:0, 1.00
 * MiB): " before it (docs/internals.md, "Errors: how they travel").
 *
 * Locks (the table is docs/internals.md, "Locks"): pool->lock guards the arena,
 * the counters and the address space, and is held while calling the backend and
 * while writing the region map (whose lock, a leaf, is taken under it). Free
 * reads the map without a lock, then takes pool->lock. */
#ifndef GPUMEM_POOL_H
#define GPUMEM_POOL_H

#include "backend/backend.h"
#include "history.h"
#include "internal.h"
#include "ledger.h"
#include "region_map.h"
#include "tag.h"

struct arena;
struct pool;

/* The pool's part in the ledger its GPU's processes share, which the runtime
 * (lib/share.c) gives it; zeroed: none. Called with pool->lock held. */
struct pool_share {
    /* Growth admission (NULL: the pool's budget was admitted whole): before
     * `bytes` are taken from the device; unadmit when the device refused them,
     * or after they went back. */
    gpumem_status (*admit)(void *ctx, uint64_t bytes, struct reason *why);
    void (*unadmit)(void *ctx, uint64_t bytes);
    /* Memory is short by `bytes` after the pool gave its own free regions back:
     * asks the GPU's other processes for their cache (waits a bounded time);
     * true when trying again may do better. */
    bool (*ask)(void *ctx, uint64_t bytes);
    /* Writes the GPU's other processes, for an out-of-memory message. */
    void (*describe)(void *ctx, char *buf, size_t size);
    void *ctx;
    /* Where the counters are published (relaxed stores): NULL, nowhere. */
    struct ledger_usage *usage;
    /* The process's bytes being taken from the driver (gpumem__ledger_taking):
     * a driver call that takes admitted bytes adds them before it and takes
     * them off once they are published in usage; NULL, nowhere. */
    _Atomic uint64_t *taking;
};

struct pool_params {
    struct backend *backend;
    int device;                /* the backend's device index */
    char label[32];            /* "/device:GPU:0": the logical device, for messages */
    uint64_t budget;           /* never reserve more; multiple of 256 */
    bool growth;               /* false: take the budget at gpumem__pool_take_budget */
    const char *budget_reason; /* where the budget came from, for messages */
    struct region_map *map;
    const struct options *opts;
    struct pool_share share;
};

gpumem_status gpumem__pool_create(const struct pool_params *p, struct pool **out,
                                  struct reason *why);
/* Gives every region back to the backend (live allocations are abandoned) and
 * frees the pool. */
void gpumem__pool_destroy(struct pool *pool);
/* In a forked child, of a pool inherited from the parent: frees this process's
 * copy of its bookkeeping (NULL: nothing) without a backend call (the regions
 * are the parent's) and without waiting on its lock (a pool whose lock a thread
 * of the parent held at the fork may be half-changed: it is left as it is). */
void gpumem__pool_forget(struct pool *pool);
/* Greedy pools: take the whole budget from the device now (initialization). */
gpumem_status gpumem__pool_take_budget(struct pool *pool, struct reason *why);

/* OUT_OF_MEMORY with the pool's numbers in the reason ("out of memory: ...;
 * budget ..."), or the backend's failure in its own words. */
gpumem_status gpumem__pool_alloc(struct pool *pool, uint64_t size, uint64_t *addr,
                                 struct reason *why);
/* INVALID_POINTER when addr does not start a live allocation of this pool. The
 * memory is anyone's at once. */
gpumem_status gpumem__pool_free(struct pool *pool, uint64_t addr, struct reason *why);

/* Stream-ordered allocation and free (gpumem_malloc_async, gpumem_free_async;
 * lib/streams.h): free gives the block to `stream`'s free memory, which alloc on
 * that stream takes from at once and nobody else before the work `stream`
 * queued before the free has completed. When a request finds no fit, the other
 * streams' fences are looked at (no wait) before the pool grows; when it cannot
 * grow, they are waited for, under the pool's lock, before out of memory is
 * reported (gpumem__pool_alloc does the same). On a backend whose streams are
 * synchronous they are gpumem__pool_alloc and gpumem__pool_free. A failed free
 * (host memory for a stream's first free, or a failed wait when every stream
 * slot is taken) changes nothing. */
gpumem_status gpumem__pool_alloc_async(struct pool *pool, uint64_t size, void *stream,
                                       uint64_t *addr, struct reason *why);
gpumem_status gpumem__pool_free_async(struct pool *pool, uint64_t addr, void *stream,
                                      struct reason *why);
/* The live block at addr is used on `stream` too (gpumem_record_stream): its
 * free, on any stream or plain, waits for the work queued on `stream` before
 * the free (lib/stream_uses.h). Nothing to do on a backend whose streams are
 * synchronous. INVALID_POINTER when addr does not start a live allocation of
 * this pool; OUT_OF_MEMORY (host). No driver call. */
gpumem_status gpumem__pool_record_stream(struct pool *pool, uint64_t addr, void *stream,
                                         struct reason *why);
void gpumem__pool_info(struct pool *pool, gpumem_memory_info *out);
/* Turns the event history on with room for `entries` events, keeping the newest
 * events already recorded (as many as fit), or off (0), dropping them. The ring
 * is made before the pool's lock is taken. OUT_OF_MEMORY (host) changes nothing. */
gpumem_status gpumem__pool_set_history(struct pool *pool, uint64_t entries,
                                       struct reason *why);
void gpumem__pool_reset_stats(struct pool *pool);
/* Waits for the work of what streams freed, then gives every
 * wholly free region back, and in the pool's address range the whole granules of
 * its free chunks (*released: the bytes); a failed wait, else the first
 * region the backend refused, sets the status and the reason. */
gpumem_status gpumem__pool_release_unused(struct pool *pool, uint64_t *released,
                                          struct reason *why);
/* The same without waiting, for a pool left idle (lib/idle.c): what streams
 * freed goes back only where their work is known to have completed
 * (gpumem__streams_collect: a query per stream, no wait); *streams_hold says
 * whether some stream still holds memory after it (its work still runs). */
gpumem_status gpumem__pool_release_idle(struct pool *pool, uint64_t *released,
                                        bool *streams_hold, struct reason *why);
/* Whether the pool grows on demand (a greedy pool keeps its budget). */
bool gpumem__pool_grows(const struct pool *pool);
/* A count that changes with every allocation and free the pool makes, under
 * the pool's lock: the idle release compares two readings (a reset of the
 * statistics changes it too, which only delays a release). */
uint64_t gpumem__pool_activity(struct pool *pool);

/* ------------------------------------------------------------ snapshots -- */

/* A live chunk's owner words (arena.h): [0] the allocation's sequence number;
 * [1] its tag's number (tag.h) in the low GPUMEM_TAG_BITS bits (0: none) and,
 * above them, the bytes the chunk has past the request (the rounding, and what a
 * block taken back on its stream has more); [2] its stream (0: the default
 * stream, or none). Written at every allocation, a block taken back on its
 * stream included, so that they always name the current owner. */
#define POOL_SLACK_SHIFT GPUMEM_TAG_BITS
#define POOL_TAG_MASK    ((UINT64_C(1) << GPUMEM_TAG_BITS) - 1)

enum pool_region_kind {
    POOL_REGION_GREEDY, /* a greedy pool's budget, taken at initialization */
    POOL_REGION_GROWTH, /* a growing pool's plain region */
    POOL_REGION_VMM     /* mapped into a growing pool's address range */
};

struct pool_chunk {
    uint64_t addr, size;
    uint64_t requested; /* bytes asked for; 0 for a free chunk */
    uint64_t seq;       /* the allocation's sequence number (1 = the pool's first);
                           0 for a free chunk */
    uint64_t stream;    /* a live chunk's; a free one's that a stream holds
                           (`held`); 0: the default stream, or none */
    const char *tag;    /* interned, never freed; NULL: none */
    uint64_t unmapped;  /* a free chunk's bytes given back to the device (the
                           whole granules inside it that a release or the trim
                           unmapped): not reserved memory */
    bool is_free;
    bool held; /* free, and a stream's whose work may still use it (streams.h):
                  that stream's at once, anyone's once its work is done */
};

struct pool_segment {
    uint64_t base, size;
    enum pool_region_kind kind; /* of its first region */
    size_t first, count;        /* its chunks: chunks[first .. first + count) */
};

/* A pool's state at one moment: its counters and every chunk of every segment in
 * address order, copied under its lock (the copy is sized before the lock is
 * taken, so the lock is held only to walk the chunks), to be read without it. */
struct pool_copy {
    gpumem_memory_info info;
    uint64_t budget;
    bool growth;
    struct pool_segment *segs;
    size_t nsegs;
    struct pool_chunk *chunks;
    size_t nchunks;
    struct history_event *events; /* the event history, oldest first */
    size_t nevents;
    uint64_t dropped; /* events recorded before the oldest held */
    bool recording;   /* the history is on */
};

/* OUT_OF_MEMORY (host) when the arrays cannot be had; *out is then empty. */
gpumem_status gpumem__pool_copy(struct pool *pool, struct pool_copy *out,
                                struct reason *why);
void gpumem__pool_copy_free(struct pool_copy *c);
/* Where the budget came from, for reports (constant after creation). */
const char *gpumem__pool_budget_reason(const struct pool *pool);

#endif /* GPUMEM_POOL_H */
