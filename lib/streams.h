/* Stream-ordered frees of one pool (cudaFreeAsync's meaning), with no driver
 * call on the steady path. A block freed on stream S becomes free memory of S
 * at once: free chunks of an arena owner (arena.h) that only allocations on S
 * (and nobody else) may take, coalescing with S's other free memory, as a
 * block freed on S serves S again at once in PyTorch's allocator. It becomes
 * anyone's (owner 0's) once the work S had queued before the free is known to
 * have completed, which takes one event, a fence recorded on S only when
 * memory must pass to another stream: it stands for everything S freed before
 * it.
 *
 * Each stream that freed into the pool has a slot with two owners, `open`,
 * which receives its frees, and `sealed`, which holds what it freed before its
 * fence was recorded. A look (gpumem__streams_collect, when memory is short or
 * before the pool gives memory back) records a fence where a stream's open
 * owner holds memory and no fence is live, turning open into sealed (and the
 * empty sealed into open), and queries a live fence: complete, its sealed
 * memory is handed to owner 0. A drain (gpumem__streams_drain) records and waits
 * for every stream's fence, with the pool's lock held, and hands all their
 * memory over. Allocations on S take from both its owners and owner 0's.
 *
 * The pool is the only writer of its arena: this module decides, the pool does
 * (the callbacks in streams_params), and nothing here reads a chunk.
 *
 * Slots: at most STREAMS_SLOTS streams hold memory at once; the least recently
 * used one is drained to make room for another (a wait, only in programs that
 * free on that many streams into one pool). A stream must stay alive until its
 * memory was handed over (a drain, gpumem_release_unused, or an allocation
 * elsewhere that found its fence complete): its fence is recorded on it then,
 * not at the free. A record that fails (a stream destroyed too early) leaves the
 * memory its stream's, and a drain then fails with the driver's reason.
 *
 * Made only for a backend with events (CUDA); on one whose streams are
 * synchronous (the simulated GPUs) a stream-ordered free is a plain free and the
 * pool has no `struct streams`. Not thread-safe: every call is made under the
 * owning pool's lock (docs/internals.md, "Locks"); the waits happen under it.
 * Failures of the driver come back as a status and a reason, in these words. */
#ifndef GPUMEM_STREAMS_H
#define GPUMEM_STREAMS_H

#include "backend/backend.h"
#include "internal.h"
#include "stream_uses.h"

/* Streams with memory of their own at once; each has two arena owners, 2i + 1
 * and 2i + 2 for slot i, so every owner of an arena (arena.h's 64) but 0 is
 * one of a slot's. */
#define STREAMS_SLOTS 31

struct streams;

struct streams_params {
    struct backend *backend; /* with event calls */
    int device;              /* the backend's device index */
    const char *label;       /* "/device:GPU:0", for messages; outlives the streams */
    const struct options *opts;
    /* What the pool does to its arena for this module (pool.c):
     * open: makes `owner` usable (OUT_OF_MEMORY for host memory, the reason
     *   written); holds: whether `owner` holds free memory; joins: `owner`'s
     *   frees join `other`'s free neighbours from now; disown: hands all of
     *   `owner`'s free memory to owner 0 (anyone's). */
    gpumem_status (*open)(void *ctx, unsigned owner, struct reason *why);
    bool (*holds)(void *ctx, unsigned owner);
    void (*joins)(void *ctx, unsigned owner, unsigned other);
    void (*disown)(void *ctx, unsigned owner);
    /* release: frees the live block at `addr` into owner 0, its streams' work
     * done (stream_uses.h) */
    void (*release)(void *ctx, uint64_t addr);
    void *ctx;
};

/* OUT_OF_MEMORY (host) only. Makes no event yet. */
gpumem_status gpumem__streams_create(const struct streams_params *p, struct streams **out,
                                     struct reason *why);
/* Waits for the work of every stream that holds memory (records its fence and
 * synchronizes it; failures go to the log), then destroys every event and frees
 * the host bookkeeping. Hands nothing over: the pool is going away. NULL:
 * nothing. pre: the log is held. */
void gpumem__streams_destroy(struct streams *st);
/* In a forked child, of the copy inherited from the parent: frees the host
 * bookkeeping only; the events are the parent's driver objects (no
 * cuEventDestroy). NULL: nothing. */
void gpumem__streams_forget(struct streams *st);

/* The owners an allocation on `stream` may take from besides owner 0 (bit o
 * for owner o): its slot's two; 0 when it has none. No driver call. */
uint64_t gpumem__streams_owners(struct streams *st, void *stream);

/* The owner `stream` frees into (its slot's open owner), into which the pool
 * adds memory it grows by for an allocation on `stream` (so that it joins the
 * stream's free tail); 0 when the stream has no slot. No driver call. */
unsigned gpumem__streams_open_owner(struct streams *st, void *stream);

/* The owner a stream-ordered free on `stream` gives its block to when the
 * stream has a slot (its open owner; the slot counts as used now), else 0:
 * the steady path's lookup, with no other effect. */
unsigned gpumem__streams_slot_owner(struct streams *st, void *stream);

/* A stream-ordered free's owner on its stream's first free, for `stream`, which
 * has no slot (gpumem__streams_slot_owner gave 0): the open owner of a slot made
 * for it (the pool opens its owners); when every slot is taken, the least
 * recently used stream is drained first. OUT_OF_MEMORY (host), UNSUPPORTED (that
 * drain during a capture), or the drain's failure; nothing changed then. No
 * driver call but that drain. */
gpumem_status gpumem__streams_new_slot(struct streams *st, void *stream, unsigned *owner,
                                       struct reason *why);

/* The stream whose memory `owner` holds (NULL for owner 0 or an owner of no
 * slot), for snapshots. */
void *gpumem__streams_stream_of(const struct streams *st, unsigned owner);

/* Without waiting: releases the kept blocks whose streams' work has completed
 * (stream_uses.h), and for every stream but `except` (NULL may be a stream: pass
 * STREAMS_NONE to skip none), queries its live fence, handing its sealed memory
 * to owner 0 when the fence is complete, and, where its open owner holds memory
 * and no fence is live, records one and queries it at once (a stream with no
 * work queued hands its memory over then). A driver failure goes to the log at
 * WARNING and leaves that stream's memory its own. Returns how many streams'
 * memory was handed over. At most three driver calls per stream that holds
 * memory. */
size_t gpumem__streams_collect(struct streams *st, void *except);

/* Waits for every stream's frees (records a fence on each stream that holds
 * memory and synchronizes it) and hands all their memory to owner 0; waits
 * for the kept blocks' streams and releases them. The first
 * failure is returned (that stream's memory stays its own); the others go on. */
gpumem_status gpumem__streams_drain(struct streams *st, struct reason *why);

/* Whether some stream holds memory, or a block used on several streams waits
 * (a drain would hand some over). */
bool gpumem__streams_hold(struct streams *st);

/* Whether a free may make driver calls, for a block used on several streams
 * (gpumem__stream_uses_any): the caller then holds the log. */
bool gpumem__streams_recorded(const struct streams *st);

/* CUDA stream captures under way in this process (gpumem_stream_capture):
 * while one is, the driver refuses a query or a wait of an event in CUDA's
 * global capture mode (and the capture fails), so a look
 * (gpumem__streams_collect) hands nothing over and calls nothing, a drain
 * waits for nothing, and a free of a block used on other streams records its
 * events at the first look after the captures end. Process-wide, as the
 * driver's rule: a count, with the fork generation it was made in (a forked
 * child starts from none). `begin` false more often than true: false. */
bool gpumem__streams_capture(bool begin);
bool gpumem__streams_capturing(void);

/* Blocks used on several streams (gpumem_record_stream; stream_uses.h): the
 * live block at `addr` is used on `stream` too. pre: addr starts a live chunk.
 * OUT_OF_MEMORY (host) only. No driver call. */
gpumem_status gpumem__streams_record(struct streams *st, uint64_t addr, void *stream,
                                     struct reason *why);
/* At a free of the live block at `addr` on `stream` (STREAMS_NONE: a plain
 * free): *kept true when the block was recorded on another stream, and is kept
 * live until each of those streams' work queued before this free has
 * completed (then the pool's `release` frees it to anyone); false when the
 * pool frees it as usual. A failure (an event's record, host memory) leaves
 * the block live and its records as they were. No driver call for a block
 * never recorded. */
gpumem_status gpumem__streams_free_recorded(struct streams *st, uint64_t addr,
                                            void *stream, bool *kept, struct reason *why);

#endif /* GPUMEM_STREAMS_H */
