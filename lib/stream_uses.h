/* A pool's blocks used on more streams than the one they are freed on
 * (gpumem_record_stream, PyTorch's Tensor.record_stream): which streams each
 * live block was recorded on, and the blocks whose free waits for them.
 *
 * A free of a recorded block on stream S (or a plain free: S none) does not
 * free it: one event is recorded on each stream it was recorded on and on S,
 * standing for the work queued there before the free, and the block stays a
 * live chunk of the arena, kept here, until every one of those events has
 * completed; then the pool frees it to owner 0 (anyone's), through the
 * `release` callback. A record of the block's own free stream costs nothing
 * more (the stream's order covers it). A block never recorded costs a free
 * one test of a count: no lookup, no driver call.
 *
 * Part of the streams module (streams.h): made and driven by `struct streams`,
 * only for a backend with events. Not thread-safe: every call is made under the
 * owning pool's lock, and the waits happen under it (docs/internals.md,
 * "Locks"). Failures of the driver come back as a status and a reason. */
#ifndef GPUMEM_STREAM_USES_H
#define GPUMEM_STREAM_USES_H

#include "backend/backend.h"
#include "internal.h"

struct stream_uses;

/* No stream: the stream of a plain free, and of a look that skips no stream. */
#define STREAMS_NONE ((void *)~(uintptr_t)0)

struct stream_uses_params {
    struct backend *backend; /* with event calls */
    int device;              /* the backend's device index */
    const char *label;       /* "/device:GPU:0", for messages; outlives this */
    const struct options *opts;
    /* frees the live block at `addr` into owner 0: its streams' work is done */
    void (*release)(void *ctx, uint64_t addr);
    void *ctx;
};

/* OUT_OF_MEMORY (host) only. Makes no event yet. */
gpumem_status gpumem__stream_uses_create(const struct stream_uses_params *p,
                                         struct stream_uses **out, struct reason *why);
/* Waits for the events of every kept block (failures go to the log), then
 * destroys every event and frees the host bookkeeping. Releases nothing: the
 * pool is going away. NULL: nothing. pre: the log is held. */
void gpumem__stream_uses_destroy(struct stream_uses *u);
/* In a forked child: frees the host bookkeeping only (the events are the
 * parent's driver objects). NULL: nothing. */
void gpumem__stream_uses_forget(struct stream_uses *u);

/* The live block at `addr` is used on `stream` too (once per stream: a second
 * record of the same stream changes nothing). pre: addr starts a live chunk.
 * INVALID_POINTER when the block is kept (freed already); OUT_OF_MEMORY (host);
 * nothing changed then. No driver call. */
gpumem_status gpumem__stream_uses_record(struct stream_uses *u, uint64_t addr,
                                         void *stream, struct reason *why);

/* At a free of the live block at `addr` on `stream` (STREAMS_NONE: a plain
 * free, of no stream): *kept false when the block was recorded on no
 * stream but `stream` (its record is forgotten; the pool frees it as usual);
 * true when this module keeps it, with an event recorded on each of its other
 * streams and on `stream`. A failed record of an event (or host memory) returns
 * the failure with *kept false and the block's records as they were: the pool
 * must then leave the block live. INVALID_POINTER when the block is kept
 * already (a second free). */
gpumem_status gpumem__stream_uses_free(struct stream_uses *u, uint64_t addr, void *stream,
                                       bool *kept, struct reason *why);

/* Without waiting: releases every kept block whose events have all completed.
 * A failed query goes to the log at WARNING and keeps the block. Returns how
 * many were released. */
size_t gpumem__stream_uses_collect(struct stream_uses *u);

/* Waits for the events of every kept block and releases it. The first failure
 * is returned (that block stays kept); the others are logged. */
gpumem_status gpumem__stream_uses_drain(struct stream_uses *u, struct reason *why);

/* Whether a block is kept (a drain would release something). */
bool gpumem__stream_uses_hold(const struct stream_uses *u);

/* Whether a live block has streams recorded: a free may then make driver
 * calls (gpumem__stream_uses_free), whose failures may go to the log. */
bool gpumem__stream_uses_any(const struct stream_uses *u);

#endif /* GPUMEM_STREAM_USES_H */
