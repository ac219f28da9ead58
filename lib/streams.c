/* Stream-ordered frees (streams.h): per pool, the pending blocks, queued per
 * stream in free order and found by address through a hash, and the pool of
 * events they were recorded with. Every call runs under the owning pool's lock;
 * nothing here locks. Pending nodes and events are recycled, so that after
 * warm-up a stream-ordered free or reuse allocates nothing and creates no event. */
#include "streams.h"

#include <stdlib.h>
#include <string.h>

/* How many of a stream's newest pending blocks a reuse looks at: a loop frees and
 * asks for the same sizes, so a fit is among the newest, and the scan stays short
 * when a held stream has many pending. */
#define REUSE_SCAN 32

struct pending {
    uint64_t addr, size;
    void *stream;
    void *event;
    struct pending *older, *newer;     /* all pending blocks, oldest first */
    struct pending *s_older, *s_newer; /* its stream's queue */
    struct pending *hash_next;
};

struct stream_queue {
    void *stream;
    struct pending *oldest, *newest;
};

struct streams {
    struct streams_params p;
    struct pending *oldest, *newest; /* all pending blocks, in free order */
    size_t count;
    uint64_t bytes;
    struct pending **buckets; /* address hash: nbuckets, a power of two */
    size_t nbuckets;
    struct stream_queue *queues; /* streams with a pending block, nqueues of cap */
    size_t nqueues, queues_cap;
    size_t cursor; /* the queue a reclaim pass starts at */
    void **events; /* the event pool: idle events, nevents of events_cap */
    size_t nevents, events_cap;
    struct pending *spare; /* recycled nodes, linked by hash_next */
};

/* ---------------------------------------------------------- bookkeeping -- */

static size_t bucket_of(const struct streams *st, uint64_t addr)
{
    /* addresses are 256-byte granules: drop the zero bits, then mix */
    return (size_t)(((addr >> 8) * UINT64_C(0x9E3779B97F4A7C15)) >> 20) &
           (st->nbuckets - 1);
}

/* Doubles the hash when it holds more blocks than buckets; a failed allocation
 * keeps the old table (longer chains, nothing lost). */
static void hash_grow(struct streams *st)
{
    size_t n = st->nbuckets * 2;
    struct pending **b = calloc(n, sizeof *b);
    if (!b)
        return;
    struct pending **old = st->buckets;
    size_t old_n = st->nbuckets;
    st->buckets = b;
    st->nbuckets = n;
    for (size_t i = 0; i < old_n; i++) {
        while (old[i]) {
            struct pending *e = old[i];
            old[i] = e->hash_next;
            size_t k = bucket_of(st, e->addr);
            e->hash_next = b[k];
            b[k] = e;
        }
    }
    free(old);
}

static struct stream_queue *queue_of(struct streams *st, void *stream)
{
    for (size_t i = 0; i < st->nqueues; i++)
        if (st->queues[i].stream == stream)
            return &st->queues[i];
    return NULL;
}

/* Takes e out of every list and recycles its node; its event goes back to the
 * pool (there is room: the pool holds every event made). */
static void unlink_pending(struct streams *st, struct pending *e)
{
    struct pending **h = &st->buckets[bucket_of(st, e->addr)];
    while (*h != e)
        h = &(*h)->hash_next;
    *h = e->hash_next;

    *(e->older ? &e->older->newer : &st->oldest) = e->newer;
    *(e->newer ? &e->newer->older : &st->newest) = e->older;

    struct stream_queue *q = queue_of(st, e->stream);
    *(e->s_older ? &e->s_older->s_newer : &q->oldest) = e->s_newer;
    *(e->s_newer ? &e->s_newer->s_older : &q->newest) = e->s_older;
    if (!q->oldest) /* no block left on this stream: its queue goes */
        *q = st->queues[--st->nqueues];

    st->count--;
    st->bytes -= e->size;
    st->events[st->nevents++] = e->event;
    e->hash_next = st->spare;
    st->spare = e;
}

/* ------------------------------------------------------------ lifecycle -- */

gpumem_status gpumem__streams_create(const struct streams_params *p, struct streams **out,
                                     struct reason *why)
{
    struct streams *st = calloc(1, sizeof *st);
    struct pending **buckets = calloc(64, sizeof *buckets);
    if (!st || !buckets) {
        free(st);
        free(buckets);
        return gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                              "%s: out of host memory for its stream-ordered frees",
                              p->label);
    }
    st->p = *p;
    st->buckets = buckets;
    st->nbuckets = 64;
    *out = st;
    return GPUMEM_OK;
}

static void free_host(struct streams *st)
{
    while (st->oldest) {
        struct pending *e = st->oldest;
        st->oldest = e->newer;
        free(e);
    }
    while (st->spare) {
        struct pending *e = st->spare;
        st->spare = e->hash_next;
        free(e);
    }
    free(st->buckets);
    free(st->queues);
    free(st->events);
    free(st);
}

void gpumem__streams_destroy(struct streams *st)
{
    if (!st)
        return;
    struct backend *b = st->p.backend;
    struct reason why;
    /* The pool gives its memory back next: the work still queued on it must be
     * done first. The nodes keep their events until the end. */
    for (struct pending *e = st->oldest; e; e = e->newer) {
        if (b->ops->event_synchronize(b, st->p.device, e->event, &why) != GPUMEM_OK)
            gpumem__log(st->p.opts, GPUMEM_LOG_ERROR,
                        "%s: waiting for the work on a block freed on stream %p before "
                        "giving its memory back: %s",
                        st->p.label, e->stream, why.text);
    }
    for (struct pending *e = st->oldest; e; e = e->newer)
        st->events[st->nevents++] = e->event;
    for (size_t i = 0; i < st->nevents; i++)
        if (b->ops->event_destroy(b, st->p.device, st->events[i], &why) != GPUMEM_OK)
            gpumem__log(st->p.opts, GPUMEM_LOG_ERROR, "%s: %s", st->p.label, why.text);
    free_host(st);
}

void gpumem__streams_forget(struct streams *st)
{
    if (st)
        free_host(st);
}

/* --------------------------------------------------------------- queries -- */

size_t gpumem__streams_pending(const struct streams *st) { return st->count; }

uint64_t gpumem__streams_pending_bytes(const struct streams *st) { return st->bytes; }

bool gpumem__streams_is_pending(const struct streams *st, uint64_t addr)
{
    if (st->count == 0)
        return false;
    for (const struct pending *e = st->buckets[bucket_of(st, addr)]; e; e = e->hash_next)
        if (e->addr == addr)
            return true;
    return false;
}

/* ------------------------------------------------------------ operations -- */

/* Room for one more of everything a new pending block needs: its node, a queue for
 * its stream, and a slot in the event pool for its event's return. false: out of
 * host memory (nothing changed but capacity). */
static bool make_room(struct streams *st, void *stream, struct pending **node)
{
    if (st->nqueues == st->queues_cap && !queue_of(st, stream)) {
        size_t cap = st->queues_cap ? st->queues_cap * 2 : 4;
        struct stream_queue *q = realloc(st->queues, cap * sizeof *q);
        if (!q)
            return false;
        st->queues = q;
        st->queues_cap = cap;
    }
    /* every event made is either idle here or on a pending block: a pool as large
     * as their number always has room for the returns */
    if (st->nevents + st->count + 1 > st->events_cap) {
        size_t cap = st->events_cap ? st->events_cap * 2 : 8;
        void **ev = realloc(st->events, cap * sizeof *ev);
        if (!ev)
            return false;
        st->events = ev;
        st->events_cap = cap;
    }
    if (st->spare) {
        *node = st->spare;
        st->spare = st->spare->hash_next;
        return true;
    }
    *node = malloc(sizeof **node);
    return *node != NULL;
}

gpumem_status gpumem__streams_defer(struct streams *st, uint64_t addr, uint64_t size,
                                    void *stream, struct reason *why)
{
    struct backend *b = st->p.backend;
    struct pending *e = NULL;
    if (!make_room(st, stream, &e))
        return gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                              "out of host memory for a stream-ordered free on %s",
                              st->p.label);
    void *event;
    gpumem_status s = GPUMEM_OK;
    if (st->nevents > 0)
        event = st->events[--st->nevents];
    else
        s = b->ops->event_create(b, st->p.device, &event, why);
    if (s == GPUMEM_OK) {
        s = b->ops->event_record(b, st->p.device, event, stream, why);
        if (s != GPUMEM_OK) /* idle again: it may be recorded later */
            st->events[st->nevents++] = event;
    }
    if (s != GPUMEM_OK) {
        e->hash_next = st->spare;
        st->spare = e;
        return s;
    }
    *e = (struct pending){.addr = addr, .size = size, .stream = stream, .event = event};

    struct stream_queue *q = queue_of(st, stream);
    if (!q) {
        q = &st->queues[st->nqueues++];
        *q = (struct stream_queue){stream, NULL, NULL};
    }
    e->s_older = q->newest;
    *(q->newest ? &q->newest->s_newer : &q->oldest) = e;
    q->newest = e;
    e->older = st->newest;
    *(st->newest ? &st->newest->newer : &st->oldest) = e;
    st->newest = e;
    if (st->count >= st->nbuckets)
        hash_grow(st);
    size_t k = bucket_of(st, addr);
    e->hash_next = st->buckets[k];
    st->buckets[k] = e;
    st->count++;
    st->bytes += size;
    return GPUMEM_OK;
}

bool gpumem__streams_reuse(struct streams *st, uint64_t need, void *stream,
                           uint64_t *addr, uint64_t *size)
{
    if (st->count == 0)
        return false;
    struct stream_queue *q = queue_of(st, stream);
    if (!q)
        return false;
    uint64_t most = need + need / 4;
    struct pending *best = NULL;
    int looked = 0;
    for (struct pending *e = q->newest; e && looked < REUSE_SCAN; e = e->s_older) {
        looked++;
        if (e->size < need || e->size > most || (best && e->size >= best->size))
            continue;
        best = e;
        if (e->size == need)
            break;
    }
    if (!best)
        return false;
    *addr = best->addr;
    *size = best->size;
    unlink_pending(st, best);
    return true;
}

/* A pending block whose work is done: free memory again. */
static void complete(struct streams *st, struct arena *arena, struct pending *e)
{
    uint64_t addr = e->addr, size = e->size;
    void *stream = e->stream;
    unlink_pending(st, e);
    (void)gpumem__arena_free(arena, addr, NULL); /* a live chunk: cannot fail */
    if (st->p.completed)
        st->p.completed(st->p.ctx, addr, size, stream);
}

size_t gpumem__streams_reclaim(struct streams *st, struct arena *arena, size_t max_busy)
{
    struct backend *b = st->p.backend;
    size_t freed = 0, busy = 0, visited = 0;
    /* each stream at most once a pass: unlink_pending may move the last queue into
     * the slot of one that empties, so the index stays where it is then */
    while (st->nqueues > 0 && busy < max_busy && visited < st->nqueues) {
        if (st->cursor >= st->nqueues)
            st->cursor = 0;
        struct stream_queue *q = &st->queues[st->cursor];
        struct pending *e = q->oldest;
        bool done = false;
        struct reason why;
        if (b->ops->event_query(b, st->p.device, e->event, &done, &why) != GPUMEM_OK) {
            gpumem__log(st->p.opts, GPUMEM_LOG_WARNING,
                        "%s: a block freed on stream %p stays pending: %s", st->p.label,
                        e->stream, why.text);
            done = false;
        }
        if (!done) {
            busy++;
            visited++;
            st->cursor++;
            continue;
        }
        bool last = e->s_newer == NULL; /* its queue goes with it */
        complete(st, arena, e);
        freed++;
        if (last)
            visited++;
    }
    return freed;
}

gpumem_status gpumem__streams_wait_oldest(struct streams *st, struct arena *arena,
                                          struct reason *why)
{
    struct backend *b = st->p.backend;
    struct pending *e = st->oldest;
    gpumem_status s = b->ops->event_synchronize(b, st->p.device, e->event, why);
    if (s != GPUMEM_OK)
        return s;
    complete(st, arena, e);
    return GPUMEM_OK;
}
