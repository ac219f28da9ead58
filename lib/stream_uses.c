/* Blocks used on several streams (stream_uses.h): a hash of the recorded live
 * blocks by address (open addressing, linear probing, deletion by backward
 * shift), the list of kept blocks with their events, and a pool of idle
 * events. Every call runs under the owning pool's lock; nothing here locks, and
 * nothing here touches the arena: the pool's `release` does. */
#include "stream_uses.h"

#include "streams.h"

#include <stdlib.h>
#include <string.h>

struct record {
    uint64_t addr;
    uint32_t n, cap; /* n streams in `streams`; n == 0: the entry is empty */
    bool freed;      /* kept: freed, waiting for its streams (a second free, or a
                        record, is refused) */
    void **streams;
};

struct kept {
    uint64_t addr;
    size_t n, done; /* events[0..done) are known complete */
    bool recorded;  /* events[i] recorded on streams[i]; false: freed during a
                       CUDA graph capture, recorded at the next look after it */
    void **streams; /* the n streams whose work the block waits for */
    void **events;  /* n, NULL until recorded */
};

struct stream_uses {
    struct stream_uses_params p;
    struct record *table; /* cap entries, a power of two; NULL until the first record */
    size_t cap, count;
    struct kept *kept;
    size_t nkept, kept_cap;
    void **idle; /* events made and not in use */
    size_t nidle, idle_cap;
};

gpumem_status gpumem__stream_uses_create(const struct stream_uses_params *p,
                                         struct stream_uses **out, struct reason *why)
{
    struct stream_uses *u = calloc(1, sizeof *u);
    if (!u)
        return gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                              "%s: out of host memory for its blocks' streams", p->label);
    u->p = *p;
    *out = u;
    return GPUMEM_OK;
}

static gpumem_status host_oom(const struct stream_uses *u, struct reason *why)
{
    return gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                          "%s: out of host memory for a block's streams", u->p.label);
}

static gpumem_status freed_already(const struct stream_uses *u, uint64_t addr,
                                   struct reason *why)
{
    return gpumem__reason(why, GPUMEM_ERR_INVALID_POINTER,
                          "the block at 0x%llx on %s was freed already (it waits for "
                          "the work of the streams it was used on)",
                          (unsigned long long)addr, u->p.label);
}

/* Grows *arr (of *cap elements of `size` bytes) to hold `need`; false: host OOM. */
static bool reserve(void **arr, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return true;
    size_t n = *cap ? *cap * 2 : 4;
    while (n < need)
        n *= 2;
    void *grown = realloc(*arr, n * size);
    if (!grown)
        return false;
    *arr = grown;
    *cap = n;
    return true;
}

/* ---------------------------------------------------------------- table -- */

static size_t slot_of(const struct stream_uses *u, uint64_t addr)
{
    uint64_t h = addr >> 8; /* blocks are 256-byte aligned */
    h ^= h >> 17;
    h *= UINT64_C(0x9e3779b97f4a7c15);
    return (size_t)(h >> 32) & (u->cap - 1);
}

static struct record *find(const struct stream_uses *u, uint64_t addr)
{
    if (u->count == 0)
        return NULL;
    for (size_t i = slot_of(u, addr);; i = (i + 1) & (u->cap - 1)) {
        struct record *r = &u->table[i];
        if (r->n == 0)
            return NULL;
        if (r->addr == addr)
            return r;
    }
}

/* Takes the record out, shifting the entries after it back (no tombstones). */
static void remove_record(struct stream_uses *u, struct record *r)
{
    free(r->streams);
    size_t hole = (size_t)(r - u->table), mask = u->cap - 1;
    u->table[hole] = (struct record){0};
    for (size_t i = (hole + 1) & mask; u->table[i].n; i = (i + 1) & mask) {
        size_t home = slot_of(u, u->table[i].addr);
        /* an entry moves into the hole when the hole lies on its probe path */
        if (((i - home) & mask) >= ((i - hole) & mask)) {
            u->table[hole] = u->table[i];
            u->table[i] = (struct record){0};
            hole = i;
        }
    }
    u->count--;
}

/* Room for one more record, keeping the table at most half full. */
static bool make_room(struct stream_uses *u)
{
    if (2 * (u->count + 1) <= u->cap)
        return true;
    size_t cap = u->cap ? 2 * u->cap : 16;
    struct record *old = u->table, *table = calloc(cap, sizeof *table);
    if (!table)
        return false;
    size_t old_cap = u->cap;
    u->table = table;
    u->cap = cap;
    for (size_t i = 0; i < old_cap; i++) {
        if (!old[i].n)
            continue;
        size_t j = slot_of(u, old[i].addr);
        while (table[j].n)
            j = (j + 1) & (cap - 1);
        table[j] = old[i];
    }
    free(old);
    return true;
}

gpumem_status gpumem__stream_uses_record(struct stream_uses *u, uint64_t addr,
                                         void *stream, struct reason *why)
{
    struct record *r = find(u, addr);
    if (r && r->freed)
        return freed_already(u, addr, why);
    if (r) {
        for (uint32_t i = 0; i < r->n; i++)
            if (r->streams[i] == stream)
                return GPUMEM_OK;
        size_t cap = r->cap;
        if (!reserve((void **)&r->streams, &cap, (size_t)r->n + 1, sizeof(void *)))
            return host_oom(u, why);
        r->cap = (uint32_t)cap;
        r->streams[r->n++] = stream;
        return GPUMEM_OK;
    }
    void **streams = malloc(2 * sizeof *streams);
    if (!streams || !make_room(u)) {
        free(streams);
        return host_oom(u, why);
    }
    size_t i = slot_of(u, addr);
    while (u->table[i].n)
        i = (i + 1) & (u->cap - 1);
    streams[0] = stream;
    u->table[i] = (struct record){.addr = addr, .n = 1, .cap = 2, .streams = streams};
    u->count++;
    return GPUMEM_OK;
}

/* ---------------------------------------------------------------- frees -- */

static gpumem_status take_event(struct stream_uses *u, void **event, struct reason *why)
{
    if (u->nidle) {
        *event = u->idle[--u->nidle];
        return GPUMEM_OK;
    }
    struct backend *b = u->p.backend;
    return b->ops->event_create(b, u->p.device, event, why);
}

/* Back to the idle pool. pre: room for them was reserved. */
static void give_events(struct stream_uses *u, void **events, size_t n)
{
    for (size_t i = 0; i < n; i++)
        u->idle[u->nidle++] = events[i];
}

/* Records an event on each of the kept block's streams (events from the idle
 * pool, or made). A failure gives back the events taken and leaves it
 * unrecorded. */
static gpumem_status record_kept(struct stream_uses *u, struct kept *k,
                                 struct reason *why)
{
    void **events = calloc(k->n, sizeof *events);
    size_t idle_cap = u->idle_cap;
    if (!events ||
        !reserve((void **)&u->idle, &idle_cap, u->nidle + k->n, sizeof(void *))) {
        u->idle_cap = idle_cap;
        free(events);
        return host_oom(u, why);
    }
    u->idle_cap = idle_cap;
    struct backend *b = u->p.backend;
    size_t made = 0;
    gpumem_status s = GPUMEM_OK;
    while (made < k->n && s == GPUMEM_OK) {
        s = take_event(u, &events[made], why);
        if (s != GPUMEM_OK)
            break;
        made++;
        s = b->ops->event_record(b, u->p.device, events[made - 1], k->streams[made - 1],
                                 why);
    }
    if (s != GPUMEM_OK) {
        /* recorded or not, no one waits for them: idle again */
        give_events(u, events, made);
        free(events);
        return s;
    }
    k->events = events;
    k->recorded = true;
    return GPUMEM_OK;
}

gpumem_status gpumem__stream_uses_free(struct stream_uses *u, uint64_t addr, void *stream,
                                       bool *kept, struct reason *why)
{
    *kept = false;
    struct record *r = find(u, addr);
    if (!r)
        return GPUMEM_OK;
    if (r->freed)
        return freed_already(u, addr, why);
    /* the streams to wait for: the recorded ones but the free's own, then it */
    size_t n = 0;
    for (uint32_t i = 0; i < r->n; i++)
        n += r->streams[i] != stream;
    if (n == 0) {
        remove_record(u, r);
        return GPUMEM_OK;
    }
    struct kept k = {.addr = addr, .streams = calloc(n + 1, sizeof(void *))};
    if (!k.streams ||
        !reserve((void **)&u->kept, &u->kept_cap, u->nkept + 1, sizeof *u->kept)) {
        free(k.streams);
        return host_oom(u, why);
    }
    for (uint32_t i = 0; i < r->n; i++)
        if (r->streams[i] != stream)
            k.streams[k.n++] = r->streams[i];
    if (stream != STREAMS_NONE)
        k.streams[k.n++] = stream;
    /* during a capture no event may be recorded on a capturing stream: later */
    if (!gpumem__streams_capturing()) {
        gpumem_status s = record_kept(u, &k, why);
        if (s != GPUMEM_OK) {
            free(k.streams);
            return s;
        }
    }
    u->kept[u->nkept++] = k;
    r->freed = true; /* until its release: a second free is caught */
    *kept = true;
    return GPUMEM_OK;
}

/* The kept block i's streams are done: its events idle (destroyed when there
 * is no host memory to keep them), the block released. */
static void release_kept(struct stream_uses *u, size_t i)
{
    struct kept k = u->kept[i];
    u->kept[i] = u->kept[--u->nkept];
    if (reserve((void **)&u->idle, &u->idle_cap, u->nidle + k.n, sizeof(void *))) {
        give_events(u, k.events, k.n);
    } else {
        struct backend *b = u->p.backend;
        struct reason why;
        for (size_t e = 0; e < k.n; e++)
            if (b->ops->event_destroy(b, u->p.device, k.events[e], &why) != GPUMEM_OK)
                gpumem__log(u->p.opts, GPUMEM_LOG_ERROR, "%s: %s", u->p.label, why.text);
    }
    free(k.events);
    free(k.streams);
    remove_record(u, find(u, k.addr));
    u->p.release(u->p.ctx, k.addr);
}

size_t gpumem__stream_uses_collect(struct stream_uses *u)
{
    struct backend *b = u->p.backend;
    size_t released = 0;
    if (gpumem__streams_capturing())
        return 0; /* no query may be made now */
    for (size_t i = 0; i < u->nkept;) {
        struct kept *k = &u->kept[i];
        bool failed = false;
        struct reason rwhy;
        if (!k->recorded && record_kept(u, k, &rwhy) != GPUMEM_OK) {
            gpumem__log(u->p.opts, GPUMEM_LOG_WARNING,
                        "%s: the block at 0x%llx, used on several streams, stays "
                        "allocated: %s",
                        u->p.label, (unsigned long long)k->addr, rwhy.text);
            i++;
            continue;
        }
        while (k->done < k->n) {
            struct reason why;
            bool complete = false;
            if (b->ops->event_query(b, u->p.device, k->events[k->done], &complete,
                                    &why) != GPUMEM_OK) {
                gpumem__log(u->p.opts, GPUMEM_LOG_WARNING,
                            "%s: the block at 0x%llx, used on several streams, stays "
                            "allocated: %s",
                            u->p.label, (unsigned long long)k->addr, why.text);
                failed = true;
            }
            if (failed || !complete)
                break;
            k->done++;
        }
        if (k->done < k->n) {
            i++;
            continue;
        }
        release_kept(u, i); /* the last one moved into i: looked at next */
        released++;
    }
    return released;
}

gpumem_status gpumem__stream_uses_drain(struct stream_uses *u, struct reason *why)
{
    struct backend *b = u->p.backend;
    gpumem_status first = GPUMEM_OK;
    if (gpumem__streams_capturing())
        return GPUMEM_OK; /* no wait may be made now */
    for (size_t i = 0; i < u->nkept;) {
        struct kept *k = &u->kept[i];
        struct reason failed;
        gpumem_status s = k->recorded
                              ? GPUMEM_OK
                              : record_kept(u, k, first == GPUMEM_OK ? why : &failed);
        while (k->done < k->n && s == GPUMEM_OK) {
            s = b->ops->event_synchronize(b, u->p.device, k->events[k->done],
                                          first == GPUMEM_OK ? why : &failed);
            if (s == GPUMEM_OK)
                k->done++;
        }
        if (s == GPUMEM_OK) {
            release_kept(u, i);
            continue;
        }
        if (first == GPUMEM_OK)
            first = s;
        else
            gpumem__log(u->p.opts, GPUMEM_LOG_ERROR, "%s: %s", u->p.label, failed.text);
        i++;
    }
    return first;
}

bool gpumem__stream_uses_hold(const struct stream_uses *u) { return u->nkept > 0; }

bool gpumem__stream_uses_any(const struct stream_uses *u) { return u->count > 0; }

/* ------------------------------------------------------------ lifecycle -- */

static void free_host(struct stream_uses *u)
{
    for (size_t i = 0; i < u->cap; i++)
        free(u->table[i].streams);
    free(u->table);
    for (size_t i = 0; i < u->nkept; i++) {
        free(u->kept[i].events);
        free(u->kept[i].streams);
    }
    free(u->kept);
    free(u->idle);
    free(u);
}

void gpumem__stream_uses_destroy(struct stream_uses *u)
{
    if (!u)
        return;
    struct backend *b = u->p.backend;
    struct reason why;
    for (size_t i = 0; i < u->nkept; i++) {
        struct kept *k = &u->kept[i];
        if (!k->recorded && record_kept(u, k, &why) != GPUMEM_OK) {
            gpumem__log(u->p.opts, GPUMEM_LOG_ERROR,
                        "%s: the block at 0x%llx goes back without waiting for its "
                        "streams: %s",
                        u->p.label, (unsigned long long)k->addr, why.text);
            continue;
        }
        for (size_t e = k->done; e < k->n; e++)
            if (b->ops->event_synchronize(b, u->p.device, k->events[e], &why) !=
                GPUMEM_OK)
                gpumem__log(u->p.opts, GPUMEM_LOG_ERROR,
                            "%s: waiting for the streams of the block at 0x%llx before "
                            "giving its memory back: %s",
                            u->p.label, (unsigned long long)k->addr, why.text);
        for (size_t e = 0; e < k->n; e++)
            if (b->ops->event_destroy(b, u->p.device, k->events[e], &why) != GPUMEM_OK)
                gpumem__log(u->p.opts, GPUMEM_LOG_ERROR, "%s: %s", u->p.label, why.text);
    }
    for (size_t i = 0; i < u->nidle; i++)
        if (b->ops->event_destroy(b, u->p.device, u->idle[i], &why) != GPUMEM_OK)
            gpumem__log(u->p.opts, GPUMEM_LOG_ERROR, "%s: %s", u->p.label, why.text);
    free_host(u);
}

void gpumem__stream_uses_forget(struct stream_uses *u)
{
    if (u)
        free_host(u);
}
