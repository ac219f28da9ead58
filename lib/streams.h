/* Stream-ordered frees of one pool (cudaFreeAsync's meaning): a block freed on
 * stream S stays a live chunk of the pool's arena, so nobody else can get it, and
 * waits here, with an event recorded on S at the free, until the work S had
 * queued before the free has completed; only then is it freed into the arena.
 * Meanwhile it may be handed out again on S itself (S runs its work in order).
 * Events come from a pool of them, made only when it is empty.
 *
 * Made only for a backend with events (CUDA); on one whose streams are
 * synchronous (the simulated GPUs) a stream-ordered free is a plain free and the
 * pool has no `struct streams`.
 *
 * Invariants: a pending block is a live arena chunk, in exactly one stream queue
 * and in the address hash; blocks of one stream are queued in free order, so when
 * the oldest of a stream has not completed, none of the others has (a stream runs
 * in order). Not thread-safe: every call is made under the owning pool's lock
 * (docs/internals.md, "Locks"); the waits (event synchronize) happen under it too.
 * Failures of the driver come back as a status and a reason, in these words. */
#ifndef GPUMEM_STREAMS_H
#define GPUMEM_STREAMS_H

#include "arena.h"
#include "backend/backend.h"
#include "internal.h"

struct streams;

struct streams_params {
    struct backend *backend; /* with event calls */
    int device;              /* the backend's device index */
    const char *label;       /* "/device:GPU:0", for messages; outlives the streams */
    const struct options *opts;
    /* Told of each pending block freed into the arena (its work done), for the
     * owner's event history; may be NULL. */
    void (*completed)(void *ctx, uint64_t addr, uint64_t size, void *stream);
    void *ctx;
};

/* OUT_OF_MEMORY (host) only. Makes no event yet. */
gpumem_status gpumem__streams_create(const struct streams_params *p, struct streams **out,
                                     struct reason *why);
/* Waits for every pending block's work, then destroys every event (failures go to
 * the log) and frees the host bookkeeping. The blocks are not freed into the arena:
 * the pool is going away. NULL: nothing. pre: the log is held. */
void gpumem__streams_destroy(struct streams *st);
/* In a forked child, of the copy inherited from the parent: frees the host
 * bookkeeping only; the events are the parent's driver objects (no
 * cuEventDestroy). NULL: nothing. */
void gpumem__streams_forget(struct streams *st);

/* Pending blocks now, and their bytes. */
size_t gpumem__streams_pending(const struct streams *st);
uint64_t gpumem__streams_pending_bytes(const struct streams *st);
/* Whether the live chunk at addr is a pending block. */
bool gpumem__streams_is_pending(const struct streams *st, uint64_t addr);

/* Makes the live chunk [addr, addr+size) pending on `stream`: takes an event from
 * the pool (or makes one), records it on the stream. On failure (the event could
 * not be made or recorded, host memory) nothing changes: the block stays live
 * and the caller's. */
gpumem_status gpumem__streams_defer(struct streams *st, uint64_t addr, uint64_t size,
                                    void *stream, struct reason *why);

/* A pending block of `stream` for a request of `need` bytes (granule-rounded),
 * among the newest ones of that stream: the smallest of size need to need + need/4
 * (a block is handed out whole, since its work may still use every byte of it).
 * true and *addr, *size: it is live again, no longer pending. */
bool gpumem__streams_reuse(struct streams *st, uint64_t need, void *stream,
                           uint64_t *addr, uint64_t *size);

/* Frees into `arena` the pending blocks whose work has completed, never waiting:
 * goes round the streams from where the last pass stopped, and in each frees the
 * oldest blocks while their events say they are done; stops after `max_busy`
 * events found not done (or failing: logged, and the block stays pending). Each
 * block is freed once, so over many calls the work is O(1) per block plus
 * max_busy. Returns the number freed. */
size_t gpumem__streams_reclaim(struct streams *st, struct arena *arena, size_t max_busy);

/* Waits for the oldest pending block's work, then frees it into `arena`. On a
 * failure the block stays pending (its memory is never handed out) and the
 * driver's reason is returned. pre: a block is pending. */
gpumem_status gpumem__streams_wait_oldest(struct streams *st, struct arena *arena,
                                          struct reason *why);

#endif /* GPUMEM_STREAMS_H */
