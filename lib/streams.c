/* Stream-ordered frees (streams.h): per pool, a slot per stream that holds
 * memory, with its two arena owners and its fence. Every call runs under the
 * owning pool's lock; nothing here locks, and nothing here touches the arena:
 * the pool's callbacks do. The steady path (a stream freeing and allocating
 * again) is a lookup of its slot, the last one used first: no driver call, no
 * allocation. */
#include "streams.h"

#include "fork.h"

#include <stdlib.h>
#include <string.h>

struct slot {
    void *stream;
    bool used;      /* the slot belongs to `stream` */
    bool live;      /* `fence` is recorded and not found complete yet: the
                       memory of `sealed` waits for it */
    uint8_t open;   /* the owner this stream's frees go to */
    uint8_t sealed; /* the owner of what it freed before `fence` was recorded;
                       empty unless `live` */
    void *fence;    /* an event of the device; NULL until first recorded */
    uint64_t tick;  /* when the stream last freed or allocated here */
};

struct streams {
    struct streams_params p;
    struct stream_uses *uses; /* blocks used on several streams */
    struct slot slots[STREAMS_SLOTS];
    size_t last; /* the slot found last (a loop uses one stream) */
    uint64_t ticks;
    bool opened[STREAMS_SLOTS]; /* the slot's owners were opened in the arena */
};

/* ------------------------------------------------------------ lifecycle -- */

gpumem_status gpumem__streams_create(const struct streams_params *p, struct streams **out,
                                     struct reason *why)
{
    struct streams *st = calloc(1, sizeof *st);
    if (!st)
        return gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                              "%s: out of host memory for its stream-ordered frees",
                              p->label);
    st->p = *p;
    struct stream_uses_params up = {p->backend, p->device,  p->label,
                                    p->opts,    p->release, p->ctx};
    gpumem_status s = gpumem__stream_uses_create(&up, &st->uses, why);
    if (s != GPUMEM_OK) {
        free(st);
        return s;
    }
    *out = st;
    return GPUMEM_OK;
}

static bool slot_holds(const struct streams *st, const struct slot *s)
{
    return st->p.holds(st->p.ctx, s->open) || st->p.holds(st->p.ctx, s->sealed);
}

/* Records the slot's fence on its stream, making the event the first time. */
static gpumem_status record_fence(struct streams *st, struct slot *s, struct reason *why)
{
    struct backend *b = st->p.backend;
    if (!s->fence) {
        gpumem_status made = b->ops->event_create(b, st->p.device, &s->fence, why);
        if (made != GPUMEM_OK) {
            s->fence = NULL;
            return made;
        }
    }
    return b->ops->event_record(b, st->p.device, s->fence, s->stream, why);
}

void gpumem__streams_destroy(struct streams *st)
{
    if (!st)
        return;
    struct backend *b = st->p.backend;
    struct reason why;
    gpumem__stream_uses_destroy(st->uses);
    /* The pool gives its memory back next: the work still queued on it must be
     * done first. */
    for (size_t i = 0; i < STREAMS_SLOTS; i++) {
        struct slot *s = &st->slots[i];
        if (!s->used || !slot_holds(st, s))
            continue;
        gpumem_status r = record_fence(st, s, &why);
        if (r == GPUMEM_OK)
            r = b->ops->event_synchronize(b, st->p.device, s->fence, &why);
        if (r != GPUMEM_OK)
            gpumem__log(st->p.opts, GPUMEM_LOG_ERROR,
                        "%s: waiting for the work of stream %p before giving its "
                        "memory back: %s",
                        st->p.label, s->stream, why.text);
    }
    for (size_t i = 0; i < STREAMS_SLOTS; i++)
        if (st->slots[i].fence &&
            b->ops->event_destroy(b, st->p.device, st->slots[i].fence, &why) != GPUMEM_OK)
            gpumem__log(st->p.opts, GPUMEM_LOG_ERROR, "%s: %s", st->p.label, why.text);
    free(st);
}

void gpumem__streams_forget(struct streams *st)
{
    if (!st)
        return;
    gpumem__stream_uses_forget(st->uses);
    free(st);
}

/* --------------------------------------------------------------- lookups -- */

static struct slot *slot_of(struct streams *st, void *stream)
{
    struct slot *s = &st->slots[st->last];
    if (s->used && s->stream == stream)
        return s;
    for (size_t i = 0; i < STREAMS_SLOTS; i++) {
        s = &st->slots[i];
        if (s->used && s->stream == stream) {
            st->last = i;
            return s;
        }
    }
    return NULL;
}

uint64_t gpumem__streams_owners(struct streams *st, void *stream)
{
    struct slot *s = slot_of(st, stream);
    if (!s)
        return 0;
    s->tick = ++st->ticks;
    return UINT64_C(1) << s->open | UINT64_C(1) << s->sealed;
}

unsigned gpumem__streams_open_owner(struct streams *st, void *stream)
{
    struct slot *s = slot_of(st, stream);
    return s ? s->open : 0;
}

void *gpumem__streams_stream_of(const struct streams *st, unsigned owner)
{
    if (owner == 0 || owner > 2 * STREAMS_SLOTS)
        return NULL;
    const struct slot *s = &st->slots[(owner - 1) / 2];
    return s->used ? s->stream : NULL;
}

bool gpumem__streams_hold(struct streams *st)
{
    if (gpumem__stream_uses_hold(st->uses))
        return true;
    for (size_t i = 0; i < STREAMS_SLOTS; i++)
        if (st->slots[i].used && slot_holds(st, &st->slots[i]))
            return true;
    return false;
}

bool gpumem__streams_recorded(const struct streams *st)
{
    return gpumem__stream_uses_any(st->uses);
}

/* ------------------------------------------------------------ captures -- */

/* (fork generation << 32) | captures under way */
static _Atomic uint64_t captures;

bool gpumem__streams_capture(bool begin)
{
    uint64_t gen = gpumem__fork_generation();
    uint64_t old = atomic_load_explicit(&captures, memory_order_relaxed), next;
    do {
        uint64_t count = old >> 32 == gen ? old & UINT32_MAX : 0;
        if (!begin && count == 0)
            return false;
        next = gen << 32 | (begin ? count + 1 : count - 1);
    } while (!atomic_compare_exchange_weak_explicit(&captures, &old, next,
                                                    memory_order_acq_rel,
                                                    memory_order_relaxed));
    return true;
}

bool gpumem__streams_capturing(void)
{
    uint64_t now = atomic_load_explicit(&captures, memory_order_acquire);
    return (now & UINT32_MAX) != 0 && now >> 32 == gpumem__fork_generation();
}

/* ---------------------------------------------------------- hand-overs -- */

/* The slot's memory is anyone's now (its work is done): both owners disowned. */
static void hand_over(struct streams *st, struct slot *s)
{
    st->p.disown(st->p.ctx, s->sealed);
    st->p.disown(st->p.ctx, s->open);
    s->live = false;
}

/* Records the slot's fence and waits for it, then hands its memory over. */
static gpumem_status drain_slot(struct streams *st, struct slot *s, struct reason *why)
{
    struct backend *b = st->p.backend;
    gpumem_status r = record_fence(st, s, why);
    if (r == GPUMEM_OK)
        r = b->ops->event_synchronize(b, st->p.device, s->fence, why);
    if (r == GPUMEM_OK)
        hand_over(st, s);
    return r;
}

gpumem_status gpumem__streams_drain(struct streams *st, struct reason *why)
{
    if (gpumem__streams_capturing())
        return GPUMEM_OK; /* no wait may be made now: nothing handed over */
    gpumem_status first = gpumem__stream_uses_drain(st->uses, why);
    for (size_t i = 0; i < STREAMS_SLOTS; i++) {
        struct slot *s = &st->slots[i];
        if (!s->used || !slot_holds(st, s))
            continue;
        struct reason failed;
        gpumem_status r = drain_slot(st, s, first == GPUMEM_OK ? why : &failed);
        if (r != GPUMEM_OK && first == GPUMEM_OK)
            first = r;
        else if (r != GPUMEM_OK)
            gpumem__log(st->p.opts, GPUMEM_LOG_ERROR, "%s: %s", st->p.label, failed.text);
    }
    return first;
}

static void log_kept(struct streams *st, const struct slot *s, const struct reason *why)
{
    gpumem__log(st->p.opts, GPUMEM_LOG_WARNING,
                "%s: memory freed on stream %p stays that stream's: %s", st->p.label,
                s->stream, why->text);
}

/* Whether the slot's live fence is complete: 1, 0 (not yet), -1 (the driver
 * failed: logged, and the memory stays the stream's). */
static int query_fence(struct streams *st, struct slot *s)
{
    struct backend *b = st->p.backend;
    struct reason why;
    bool done = false;
    if (b->ops->event_query(b, st->p.device, s->fence, &done, &why) != GPUMEM_OK) {
        log_kept(st, s, &why);
        return -1;
    }
    return done;
}

size_t gpumem__streams_collect(struct streams *st, void *except)
{
    if (gpumem__streams_capturing())
        return 0; /* no query may be made now */
    size_t handed = gpumem__stream_uses_collect(st->uses);
    for (size_t i = 0; i < STREAMS_SLOTS; i++) {
        struct slot *s = &st->slots[i];
        if (!s->used || (except != STREAMS_NONE && s->stream == except))
            continue;
        struct reason why;
        if (s->live) {
            int done = query_fence(st, s);
            if (done <= 0)
                continue; /* not yet, or the driver failed (logged) */
            st->p.disown(st->p.ctx, s->sealed);
            s->live = false;
            handed++;
        }
        if (!st->p.holds(st->p.ctx, s->open))
            continue;
        /* seal: the fence stands for everything the stream freed so far; its
         * next frees go to the other owner (the two join each other: take_slot) */
        if (record_fence(st, s, &why) != GPUMEM_OK) {
            log_kept(st, s, &why);
            continue;
        }
        uint8_t sealed = s->open;
        s->open = s->sealed;
        s->sealed = sealed;
        s->live = true;
        /* a stream with nothing queued (its work done, or idle) hands it over
         * now, rather than at the next look */
        if (query_fence(st, s) > 0) {
            st->p.disown(st->p.ctx, s->sealed);
            s->live = false;
            handed++;
        }
    }
    return handed;
}

/* ---------------------------------------------------------------- frees -- */

/* A slot for `stream`: a free one, else the least recently used one, drained. */
static gpumem_status take_slot(struct streams *st, void *stream, struct slot **out,
                               struct reason *why)
{
    size_t pick = STREAMS_SLOTS;
    for (size_t i = 0; i < STREAMS_SLOTS && pick == STREAMS_SLOTS; i++)
        if (!st->slots[i].used)
            pick = i;
    if (pick == STREAMS_SLOTS) {
        pick = 0;
        for (size_t i = 1; i < STREAMS_SLOTS; i++)
            if (st->slots[i].tick < st->slots[pick].tick)
                pick = i;
        struct slot *old = &st->slots[pick];
        if (slot_holds(st, old) && gpumem__streams_capturing())
            return gpumem__reason(why, GPUMEM_ERR_UNSUPPORTED,
                                  "%s: every one of its %d stream slots holds memory, "
                                  "and none may be waited for during a CUDA graph "
                                  "capture",
                                  st->p.label, STREAMS_SLOTS);
        if (slot_holds(st, old)) {
            gpumem_status r = drain_slot(st, old, why);
            if (r != GPUMEM_OK)
                return r;
        }
    }
    struct slot *s = &st->slots[pick];
    if (!st->opened[pick]) {
        unsigned a = (unsigned)(2 * pick + 1), b = a + 1;
        gpumem_status r = st->p.open(st->p.ctx, a, why);
        if (r == GPUMEM_OK)
            r = st->p.open(st->p.ctx, b, why);
        if (r != GPUMEM_OK)
            return r; /* an owner opened stays open, unused, for the next try */
        st->p.joins(st->p.ctx, a, b);
        st->p.joins(st->p.ctx, b, a);
        st->opened[pick] = true;
    }
    void *fence = s->fence; /* kept: recorded again for the next stream */
    *s = (struct slot){.stream = stream,
                       .used = true,
                       .open = (uint8_t)(2 * pick + 1),
                       .sealed = (uint8_t)(2 * pick + 2),
                       .fence = fence};
    st->last = pick;
    *out = s;
    return GPUMEM_OK;
}

unsigned gpumem__streams_slot_owner(struct streams *st, void *stream)
{
    struct slot *s = slot_of(st, stream);
    if (!s)
        return 0;
    s->tick = ++st->ticks;
    return s->open;
}

gpumem_status gpumem__streams_new_slot(struct streams *st, void *stream, unsigned *owner,
                                       struct reason *why)
{
    struct slot *s = NULL;
    gpumem_status r = take_slot(st, stream, &s, why);
    if (r != GPUMEM_OK)
        return r;
    s->tick = ++st->ticks;
    *owner = s->open;
    return GPUMEM_OK;
}

/* ------------------------------------------- blocks on several streams -- */

gpumem_status gpumem__streams_record(struct streams *st, uint64_t addr, void *stream,
                                     struct reason *why)
{
    return gpumem__stream_uses_record(st->uses, addr, stream, why);
}

gpumem_status gpumem__streams_free_recorded(struct streams *st, uint64_t addr,
                                            void *stream, bool *kept, struct reason *why)
{
    return gpumem__stream_uses_free(st->uses, addr, stream, kept, why);
}
