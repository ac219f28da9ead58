/* The event history (issue 24): per pool, a ring of its last N events (an
 * allocation, a free asked for and completed, a region taken and given back, an
 * out of memory), each with its time, address, size, stream and tag; off (no
 * ring) unless gpumem_record_history or GPUMEM_RECORD_HISTORY turned it on.
 * Snapshots show it as PyTorch's device_traces (snapshot.c), and it writes the
 * bench's trace format (trace.c).
 *
 * Not thread-safe, and needs no lock of its own: a ring is its pool's, written
 * and copied under the pool's lock, which the path that records already holds,
 * so threads on different logical devices never share one (no global lock, no
 * shared counter); their events are ordered across devices by time. */
#ifndef GPUMEM_HISTORY_H
#define GPUMEM_HISTORY_H

#include "internal.h"

/* At most this many events per logical device (gpumem.h). */
#define GPUMEM_HISTORY_MAX GPUMEM_RECORD_HISTORY_MAX

/* PyTorch's trace actions, in its words (gpumem__history_action_name). */
enum history_action {
    HIST_ALLOC,          /* addr, size: the chunk; requested; seq, tag, stream */
    HIST_FREE_REQUESTED, /* the caller freed it: a plain free, or on a stream */
    HIST_FREE_COMPLETED, /* it is free memory again (a stream's work done) */
    HIST_SEGMENT_ALLOC,  /* a region taken that stays a segment of its own */
    HIST_SEGMENT_FREE,   /* and given back */
    HIST_SEGMENT_MAP,    /* a region taken that joins its neighbours (mapped into
                            the pool's range, or a device whose regions join) */
    HIST_SEGMENT_UNMAP,  /* and given back */
    HIST_OOM,            /* size: the request; requested: the bytes the device
                            had free */
    HIST_ACTIONS
};

struct history_event {
    uint64_t time_ns; /* CLOCK_MONOTONIC */
    uint64_t addr, size;
    uint64_t requested; /* HIST_ALLOC: bytes asked for; HIST_OOM: device free */
    uint64_t seq;       /* the allocation's sequence number (alloc, free), else 0 */
    uint64_t stream;
    uint32_t tag; /* tag.h's number; 0: none */
    uint32_t action;
};

struct history {
    uint64_t cap;   /* events held at most */
    uint64_t total; /* events recorded since the ring was made; the newest is at
                       (total - 1) % cap */
    struct history_event ev[];
};

/* NULL when host memory ran out. pre: 0 < cap <= GPUMEM_HISTORY_MAX. */
struct history *gpumem__history_create(uint64_t cap);
/* Fills the new, empty ring h with the newest of old's events (as many as it
 * holds): a re-sized history keeps what it can. No allocation. */
void gpumem__history_take(struct history *h, const struct history *old);
void gpumem__history_destroy(struct history *h);

/* Events held now (at most cap), and those recorded but no longer held. */
uint64_t gpumem__history_count(const struct history *h);
uint64_t gpumem__history_dropped(const struct history *h);
/* The events held, oldest first, into out[0 .. count). pre: room for count. */
void gpumem__history_copy(const struct history *h, struct history_event *out);

const char *gpumem__history_action_name(uint32_t action);
uint64_t gpumem__history_now(void);

/* Records one event, which happened at time_ns (gpumem__history_now()). */
static inline void gpumem__history_record(struct history *h, uint64_t time_ns,
                                          enum history_action action, uint64_t addr,
                                          uint64_t size, uint64_t requested, uint64_t seq,
                                          uint64_t stream, uint32_t tag)
{
    struct history_event *e = &h->ev[h->total % h->cap];
    *e = (struct history_event){time_ns, addr,   size, requested,
                                seq,     stream, tag,  (uint32_t)action};
    h->total++;
}

#endif /* GPUMEM_HISTORY_H */
