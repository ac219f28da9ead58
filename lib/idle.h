/* The idle release: a growing pool that has made no allocation and no free for
 * GPUMEM_GROWTH_IDLE_RELEASE_MS gives its free memory back to the GPU, as
 * gpumem_release_unused would but without waiting for streams' work, so that a
 * process that sits idle (a notebook between cells, a server between bursts)
 * holds only what it uses. One thread per runtime that has a growing pool, made
 * at initialization (lib/runtime.c) and stopped before the pools are destroyed.
 * It looks every quarter of the period: a pool whose activity count
 * (gpumem__pool_activity) has not changed for a whole period is released once,
 * then not again until it has been used (but at the next looks, up to four
 * periods, while its streams still hold memory whose work ran on); so it goes
 * back between one and one and a quarter periods after the last call that
 * touched it. No look is made
 * while a CUDA graph is being captured (gpumem_stream_capture): a release's
 * driver calls from this thread could break the capture.
 *
 * Locks: its own `lock` (a leaf: docs/internals.md) guards only `stop`; the
 * thread waits on it, and holds nothing while it reads a pool's count (the
 * pool's lock) or releases one (the pool's map lock, then its lock, as
 * gpumem_release_unused takes them). Across fork(): the thread is the parent's;
 * gpumem__idle_forget frees the child's copy without joining it. */
#ifndef GPUMEM_IDLE_H
#define GPUMEM_IDLE_H

#include "options.h"
#include "pool.h"

struct idle;

/* Starts the thread over the growing pools among `pools` (a copy of the list is
 * kept); *out is NULL when there is none, when the period is 0, or when the
 * thread cannot start (logged at WARNING: the runtime goes on without it). */
void gpumem__idle_start(const struct options *opts, struct pool *const *pools, size_t n,
                        struct idle **out);
/* Stops the thread and waits for it (a release under way finishes first), then
 * frees it. NULL: nothing. */
void gpumem__idle_stop(struct idle *idle);
/* In a forked child, of the copy inherited from the parent: frees it if its lock
 * is free, never joining (the thread is the parent's). NULL: nothing. */
void gpumem__idle_forget(struct idle *idle);

#endif /* GPUMEM_IDLE_H */
