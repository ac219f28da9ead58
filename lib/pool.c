/* Pools: one per logical device, handing out chunks of an arena over the regions
 * taken from its GPU (growth.c takes and gives back device memory, split.c counts
 * PyTorch's inactive split figures; pool_state.h holds what the three files
 * share).
 *
 * Stream-ordered frees (gpumem_free_async) on stream S give the block to S's
 * arena owner (streams.h): free at once for S, coalescing with S's other free
 * memory, and nobody else's until S's fence says the work S queued before has
 * completed. No driver call is made on that path. Allocations that find no fit
 * in what they may take look at the other streams' fences (without waiting)
 * before the pool grows, and wait for them when it cannot grow, before
 * reporting out of memory; a release waits for them all first.
 *
 * The pool is the only writer of its arena: streams.c decides what to hand over
 * and the callbacks here do it; growth.c adds and removes regions.
 *
 * Locks: pool->lock guards everything in struct pool; the region map's lock is
 * taken inside it, never the other way round (docs/internals.md, "Locks"). */
#include "pool_state.h"

#include "split.h"
#include "tag.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- history -- */

/* Whether the pool records its events: the branches are laid out for off, the
 * common case, so that the paths pay one load and a branch not taken. */
#if defined(__GNUC__)
#define HISTORY_ON(pool) __builtin_expect((pool)->history != NULL, 0)
#define HISTORY_NOINLINE __attribute__((noinline))
#else
#define HISTORY_ON(pool) ((pool)->history != NULL)
#define HISTORY_NOINLINE
#endif

/* Out of line: with the history off, each path that records pays one load and
 * a branch on pool->history, nothing else. Not marked cold: GCC then moved the
 * whole of an allocation's last block, counters included, into the function's
 * cold part, a jump there and back on every allocation. pre: pool->lock held. */
HISTORY_NOINLINE void gpumem__pool_record(struct pool *pool, enum history_action action,
                                          uint64_t addr, uint64_t size,
                                          uint64_t requested,
                                          const uint64_t user[ARENA_USER_WORDS])
{
    gpumem__history_record(pool->history, gpumem__history_now(), action, addr, size,
                           requested, user ? user[0] : 0, user ? user[2] : 0,
                           user ? (uint32_t)(user[1] & POOL_TAG_MASK) : 0);
}

/* A free of the live chunk at addr, asked for and completed (recorded before
 * the arena frees it): its owner's words name the allocation. A stream-ordered
 * free completes at once too: the block is its stream's free memory from then
 * on (streams.h). A free that will fail records nothing.
 * pre: pool->lock held, pool->history. */
static HISTORY_NOINLINE void pool_record_free(struct pool *pool, uint64_t addr)
{
    uint64_t user[ARENA_USER_WORDS] = {0};
    uint64_t size = gpumem__arena_user(pool->arena, addr, user);
    if (size == 0)
        return; /* not a live chunk, or freed already: the free fails */
    uint64_t now = gpumem__history_now(); /* one reading for both */
    uint32_t tag = (uint32_t)(user[1] & POOL_TAG_MASK);
    gpumem__history_record(pool->history, now, HIST_FREE_REQUESTED, addr, size, 0,
                           user[0], user[2], tag);
    gpumem__history_record(pool->history, now, HIST_FREE_COMPLETED, addr, size, 0,
                           user[0], user[2], tag);
}

/* Publishes in use and its peak, where the pool counts them: two relaxed stores
 * into the ledger's mapping, no lock (pool.h, pool_share). */
static inline void pool_publish_use(struct pool *pool)
{
    struct ledger_usage *u = pool->p.share.usage;
    if (u) {
        atomic_store_explicit(&u->in_use, pool->current, memory_order_relaxed);
        atomic_store_explicit(&u->peak, pool->peak, memory_order_relaxed);
    }
}

/* ---------------------------------------------------- streams' owners -- */

/* What streams.c has the pool do to its arena (streams.h, streams_params). */
static gpumem_status pool_owner_open(void *ctx, unsigned owner, struct reason *why)
{
    struct pool *pool = ctx;
    if (gpumem__arena_owner_open(pool->arena, owner) == ARENA_OK)
        return GPUMEM_OK;
    return gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                          "%s: out of host memory for a stream's free memory",
                          pool->p.label);
}

static bool pool_owner_holds(void *ctx, unsigned owner)
{
    struct pool *pool = ctx;
    return !gpumem__arena_owner_empty(pool->arena, owner);
}

static void pool_owner_joins(void *ctx, unsigned owner, unsigned other)
{
    struct pool *pool = ctx;
    gpumem__arena_set_joins(pool->arena, owner, UINT64_C(1) << other);
}

static void pool_owner_disown(void *ctx, unsigned owner)
{
    struct pool *pool = ctx;
    gpumem__split_mark(pool);
    (void)gpumem__arena_disown(pool->arena, owner);
    gpumem__split_recount(pool); /* its chunks joined owner 0's */
}

static GPUMEM_ALWAYS_INLINE gpumem_status pool_free_live(struct pool *pool, uint64_t addr,
                                                         unsigned owner,
                                                         struct reason *why);

/* A block kept for the streams it was used on (stream_uses.h), their work
 * done: free, anyone's. */
static void pool_release_kept(void *ctx, uint64_t addr)
{
    struct reason why; /* a kept block is live: the free succeeds */
    (void)pool_free_live(ctx, addr, 0, &why);
}

/* --------------------------------------------------------------- pools -- */

gpumem_status gpumem__pool_create(const struct pool_params *p, struct pool **out,
                                  struct reason *why)
{
    struct pool *pool = calloc(1, sizeof *pool);
    if (!pool || gpumem__arena_create(NULL, &pool->arena) != ARENA_OK) {
        free(pool);
        return gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                              "%s: out of host memory for its pool", p->label);
    }
    pool->split.records = gpumem__arena_head(pool->arena);
    gpumem__mutex_init(&pool->lock, GPUMEM_RANK_POOL);
    gpumem__mutex_init(&pool->map_lock, GPUMEM_RANK_POOL_MAP);
    pool->p = *p;
    if (p->backend->ops->event_create) {
        struct streams_params sp = {p->backend,        p->device,
                                    pool->p.label,     p->opts,
                                    pool_owner_open,   pool_owner_holds,
                                    pool_owner_joins,  pool_owner_disown,
                                    pool_release_kept, pool};
        gpumem_status s = gpumem__streams_create(&sp, &pool->streams, why);
        if (s != GPUMEM_OK) {
            gpumem__arena_destroy(pool->arena);
            gpumem__mutex_destroy(&pool->lock);
            gpumem__mutex_destroy(&pool->map_lock);
            free(pool);
            return s;
        }
    }
    if (p->opts && p->opts->record_history &&
        !(pool->history = gpumem__history_create(p->opts->record_history))) {
        gpumem__streams_destroy(pool->streams);
        gpumem__arena_destroy(pool->arena);
        gpumem__mutex_destroy(&pool->lock);
        gpumem__mutex_destroy(&pool->map_lock);
        free(pool);
        return gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                              "%s: out of host memory for an event history of %llu "
                              "events (GPUMEM_RECORD_HISTORY)",
                              p->label, (unsigned long long)p->opts->record_history);
    }
    gpumem__split_gate(pool); /* the history, when the options turned it on */
    snprintf(pool->budget_reason, sizeof pool->budget_reason, "%s",
             p->budget_reason ? p->budget_reason : "");
    pool->p.budget_reason = pool->budget_reason;
    *out = pool;
    return GPUMEM_OK;
}

void gpumem__pool_destroy(struct pool *pool)
{
    if (!pool)
        return;
    /* No other call on this pool is in flight (gpumem_runtime_destroy's rule),
     * so its lock is not needed. The log is held for a caller that holds the
     * runtime's lock (a failed initialization). */
    gpumem__log_hold();
    gpumem__backend_scope_open(pool->p.backend, pool->p.device);
    gpumem__streams_destroy(pool->streams); /* the work still queued, first */
    gpumem__growth_give_all_back(pool);
    gpumem__backend_scope_close(pool->p.backend, pool->p.device);
    gpumem__log_release();
    gpumem__growth_free(pool);
    gpumem__history_destroy(pool->history);
    gpumem__arena_destroy(pool->arena);
    gpumem__mutex_destroy(&pool->lock);
    gpumem__mutex_destroy(&pool->map_lock);
    free(pool);
}

void gpumem__pool_forget(struct pool *pool)
{
    if (!pool || !gpumem__mutex_trylock(&pool->lock))
        return;
    gpumem__space_forget(pool->g.space);
    gpumem__streams_forget(pool->streams);
    gpumem__history_destroy(pool->history);
    gpumem__arena_destroy(pool->arena);
    gpumem__mutex_unlock(&pool->lock); /* no other thread here: it only lets go */
    gpumem__growth_free(pool);
    free(pool);
}

/* The five largest live chunks, for the out-of-memory report. */
struct oom_walk {
    struct arena_chunk_info top[5];
    unsigned n;
};

static void oom_no_segment(void *ctx, uint64_t base, uint64_t size)
{
    (void)ctx, (void)base, (void)size;
}

static void oom_chunk(void *ctx, const struct arena_chunk_info *c)
{
    struct oom_walk *w = ctx;
    if (c->is_free || (w->n == 5 && c->size <= w->top[4].size))
        return;
    unsigned i = w->n < 5 ? w->n++ : 4;
    for (; i > 0 && w->top[i - 1].size < c->size; i--)
        w->top[i] = w->top[i - 1];
    w->top[i] = *c;
}

/* Fails an allocation of `need` bytes (rounded) with the pool's numbers, after
 * `cause` (may be "", may be why->text): "out of memory: <cause>; budget ...;
 * reserved, in use, cached, largest free block, the free bytes no request of this
 * size can use, and the five largest live allocations with their tags". The walk
 * for the five is O(n), paid only when memory ran out. pre: pool->lock held. */
static gpumem_status pool_oom(struct pool *pool, uint64_t need, const char *cause,
                              struct reason *why)
{
    char budget[GPUMEM_BYTES_BUF], reserved[GPUMEM_BYTES_BUF];
    char used[GPUMEM_BYTES_BUF], largest[GPUMEM_BYTES_BUF], cached[GPUMEM_BYTES_BUF];
    char unusable[GPUMEM_BYTES_BUF], buf[GPUMEM_BYTES_BUF];
    char top[200] = "";
    struct reason first;
    snprintf(first.text, sizeof first.text, "%s", cause); /* it may be why's */
    pool->num_ooms++;
    if (pool->history) {
        uint64_t device_free = 0, total;
        struct reason ignored; /* the device's free bytes are for the record only */
        struct backend *b = pool->p.backend;
        if (b->ops->mem_info(b, pool->p.device, &device_free, &total, &ignored) !=
            GPUMEM_OK)
            device_free = 0;
        uint64_t user[ARENA_USER_WORDS] = {0, gpumem__tag_current(), 0};
        gpumem__pool_record(pool, HIST_OOM, 0, need, device_free, user);
    }
    uint64_t largest_free = gpumem__growth_largest_free(pool);
    uint64_t free_bytes = pool->reserved - pool->current;
    /* a free chunk of `need` bytes or more would have served: none does now,
     * unless the request failed before looking (larger than the budget) */
    uint64_t frag = largest_free >= need ? 0 : free_bytes;
    struct oom_walk w = {.n = 0};
    gpumem__arena_walk_user(pool->arena, oom_no_segment, oom_chunk, &w);
    size_t len = 0;
    for (unsigned i = 0; i < w.n && len < sizeof top; i++) {
        const char *tag = gpumem__tag_text(w.top[i].user[1] & POOL_TAG_MASK);
        int k = snprintf(top + len, sizeof top - len, "%s%s%s%s%s", i ? ", " : "",
                         gpumem__format_bytes(w.top[i].size, buf, sizeof buf),
                         tag ? " '" : "", tag ? tag : "", tag ? "'" : "");
        if (k < 0)
            break;
        len += (size_t)k;
    }
    char others[GPUMEM_REASON_LEN / 2] = "";
    if (pool->p.share.describe)
        pool->p.share.describe(pool->p.share.ctx, others, sizeof others);
    return gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                          "out of memory: %s%sbudget %s (%s, %s); "
                          "reserved %s, in use %s, cached %s, largest free block %s, "
                          "unusable for this request %s; largest live: %s%s",
                          first.text, first.text[0] ? "; " : "",
                          gpumem__format_bytes(pool->p.budget, budget, sizeof budget),
                          pool->budget_reason,
                          pool->p.growth ? "memory growth on" : "memory growth off",
                          gpumem__format_bytes(pool->reserved, reserved, sizeof reserved),
                          gpumem__format_bytes(pool->current, used, sizeof used),
                          gpumem__format_bytes(free_bytes, cached, sizeof cached),
                          gpumem__format_bytes(largest_free, largest, sizeof largest),
                          gpumem__format_bytes(frag, unusable, sizeof unusable),
                          w.n ? top : "none", others);
}

/* The arena's best fit for `need` bytes among the owners' free memory (0:
 * owner 0's only, the plain path's). */
static inline int pool_arena_alloc(struct pool *pool, uint64_t need, uint64_t owners,
                                   const uint64_t *user, uint64_t *addr,
                                   uint64_t sizes[2])
{
    return owners ? gpumem__arena_alloc_owned_rest(pool->arena, need, owners, user, addr,
                                                   sizes)
                  : gpumem__arena_alloc_user_rest(pool->arena, need, user, addr, sizes);
}

/* Grows the pool for `need` bytes and takes the chunk (*r: the arena's answer).
 * A growth lets the pool's lock go around its driver calls (growth.c), so other
 * threads may take what it added before this one does (the tail it extended,
 * say): then it grows again, as they would have, a few times at most. */
static gpumem_status pool_grow_and_take(struct pool *pool, uint64_t need, uint64_t owners,
                                        const uint64_t *user, uint64_t *addr,
                                        uint64_t sizes[2], int *r, struct reason *why)
{
    gpumem_status s = GPUMEM_OK;
    for (int attempt = 0; attempt < 8 && *r == ARENA_NO_FIT; attempt++) {
        s = gpumem__growth_grow(pool, need, why);
        if (s != GPUMEM_OK)
            break;
        *r = pool_arena_alloc(pool, need, owners, user, addr, sizes);
    }
    return s;
}

/* No free chunk the request may take holds `need` bytes: other streams' memory
 * whose work is known done first (no wait), then growth; when the pool cannot
 * grow, every stream's memory is waited for (with the pool's lock held) and the
 * pool tries again, so that a stream-ordered free never causes an out of memory
 * that waiting would avoid (gpumem.h, gpumem_malloc_async). Returns the arena's
 * answer in *r with GPUMEM_OK, or the growth's or a failed wait's status.
 * pre: pool->lock held, the log held. */
static gpumem_status pool_alloc_miss(struct pool *pool, uint64_t need, void *stream,
                                     uint64_t owners, const uint64_t *user,
                                     uint64_t *addr, uint64_t sizes[2], int *r,
                                     struct reason *why)
{
    if (pool->streams && gpumem__streams_collect(pool->streams, stream) > 0) {
        *r = pool_arena_alloc(pool, need, owners, user, addr, sizes);
        if (*r != ARENA_NO_FIT)
            return GPUMEM_OK;
    }
    pool->g.req_owners = owners;
    pool->g.req_owner = owners ? gpumem__streams_open_owner(pool->streams, stream) : 0;
    gpumem_status s = pool_grow_and_take(pool, need, owners, user, addr, sizes, r, why);
    if (s == GPUMEM_ERR_OUT_OF_MEMORY && pool->streams &&
        gpumem__streams_hold(pool->streams)) {
        pool->num_drains++;
        s = gpumem__streams_drain(pool->streams, why);
        if (s == GPUMEM_OK) {
            *r = pool_arena_alloc(pool, need, owners, user, addr, sizes);
            /* what was handed over may join free regions */
            s = pool_grow_and_take(pool, need, owners, user, addr, sizes, r, why);
        }
    }
    pool->g.req_owners = 0;
    pool->g.req_owner = 0;
    return s;
}

/* A request larger than the whole budget: out of memory, the log held (the
 * history's record asks the device, pool_oom). pre: pool->lock held; it is let
 * go here. */
static GPUMEM_COLD gpumem_status pool_too_large(struct pool *pool, uint64_t size,
                                                struct reason *why)
{
    gpumem__log_hold();
    gpumem_status s =
        pool_oom(pool, size, "the request is larger than the whole budget", why);
    gpumem__mutex_unlock(&pool->lock);
    gpumem__log_release();
    return s;
}

/* An allocation's slow path begins (a growth, a mapping, a wait): its log is held
 * until the pool's lock is let go, its driver calls share one context push (a
 * scope, backend.h), and it takes the pool's mapping lock. pre: pool->lock held.
 * That lock comes first: when another pass holds it, the pool's lock is let go
 * while this thread waits for it, and false says so (what the arena holds may
 * have changed meanwhile). Out of line, away from the fast path. */
static GPUMEM_COLD bool pool_slow_begin(struct pool *pool)
{
    gpumem__log_hold();
    gpumem__backend_scope_open(pool->p.backend, pool->p.device);
    if (gpumem__mutex_trylock(&pool->map_lock)) {
        pool->g.mapper = true;
        return true;
    }
    gpumem__mutex_unlock(&pool->lock);
    gpumem__growth_map_begin(pool); /* both, in order */
    return false;
}

/* The slow path's end: what pool_slow_begin took, given back. */
static GPUMEM_COLD void pool_slow_end(struct pool *pool)
{
    gpumem__backend_scope_close(pool->p.backend, pool->p.device);
    gpumem__growth_map_end(pool);
    gpumem__log_release();
}

/* `ordered`: a stream-ordered allocation on `stream`, which may also take the
 * memory that stream freed whose work may still run (streams.h). Inlined into
 * each caller (`ordered` a constant there): the plain path makes no call of its
 * own before the arena's. */
static GPUMEM_ALWAYS_INLINE gpumem_status pool_alloc(struct pool *pool, uint64_t size,
                                                     bool ordered, void *stream,
                                                     uint64_t *addr, struct reason *why)
{
    gpumem_status s = GPUMEM_OK;
    uint64_t need, sizes[2]; /* the chunk's, and the rest left free after it */
    int r;
    bool held = false; /* the growth and the waits log: held until the lock is let go */
    gpumem__mutex_lock(&pool->lock);
    if (!gpumem__align_up(size, ARENA_GRANULE, &need) || need > pool->p.budget)
        return pool_too_large(pool, size, why);
    /* The chunk's owner words (pool.h, struct pool_chunk): written into the
     * record the arena touches anyway, so a snapshot costs the hot path a few
     * stores and no lookup. */
    uint64_t user[ARENA_USER_WORDS] = {pool->seq + 1,
                                       gpumem__tag_current() | (need - size)
                                                                   << POOL_SLACK_SHIFT,
                                       (uint64_t)(uintptr_t)stream};
    uint64_t owners =
        ordered && pool->streams ? gpumem__streams_owners(pool->streams, stream) : 0;
    r = pool_arena_alloc(pool, need, owners, user, addr, sizes);
    if (r == ARENA_NO_FIT) {
        held = true;
        if (!pool_slow_begin(pool)) { /* the lock was let go: look again */
            user[0] = pool->seq + 1;
            owners = ordered && pool->streams
                         ? gpumem__streams_owners(pool->streams, stream)
                         : 0;
            r = pool_arena_alloc(pool, need, owners, user, addr, sizes);
        }
        if (r == ARENA_NO_FIT)
            s = pool_alloc_miss(pool, need, ordered ? stream : STREAMS_NONE, owners, user,
                                addr, sizes, &r, why);
        if (s != GPUMEM_OK) {
            if (s == GPUMEM_ERR_OUT_OF_MEMORY)
                s = pool_oom(pool, need, why->text, why);
            goto out; /* else a backend failure, in the backend's words */
        }
    }
    if (r == ARENA_HOST_OOM) {
        s = gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                           "out of host memory for the arena's bookkeeping");
        pool->num_ooms++;
        goto out;
    }
    if (r != ARENA_OK) { /* a region of `need` bytes was just added: cannot happen */
        s = pool_oom(pool, need, "no chunk fits after growing", why);
        goto out;
    }
    /* Counted from here: the chunk is live in the arena, and a mapping below
     * lets the lock go (the split figures, below, read these counts). */
    pool->current += sizes[0];
    pool->seq++; /* num_allocs counts from it */
    pool->live++;
    /* The split figures move with the chunks and pool->current (pool.c,
     * "Inactive split"), but for an exact path that also covers granules given
     * back and the history (SPLIT_GATE_ALLOC is set whenever pool->g.unmapped
     * is not 0, or the history is on): the one test on the steady path. */
    if (SPLIT_RARE(pool->split.gate & SPLIT_GATE_ALLOC)) {
        if (pool->split.whole || pool->g.unmapped) /* before mapping */
            gpumem__split_alloc_slow(pool, *addr, sizes[0], sizes[1]);
        else if (!pool->history)      /* else the gate stays for it */
            gpumem__split_gate(pool); /* nothing rare any more */
        /* the chunk may lie on granules a release gave back */
        if (pool->g.unmapped && gpumem__growth_unbacked(pool, *addr, sizes[0])) {
            if (!held) {
                held = true;
                /* the chunk is this call's, live: nothing to look at again
                 * when the lock was let go (a pass unmaps only free memory) */
                (void)pool_slow_begin(pool);
            }
            s = gpumem__growth_back(pool, *addr, sizes[0], why);
            if (s != GPUMEM_OK) {
                pool->current -= sizes[0];
                pool->seq--;
                pool->live--;
                /* back where it may have come from: the stream's, or anyone's */
                unsigned back =
                    owners ? gpumem__streams_open_owner(pool->streams, stream) : 0;
                gpumem__split_mark(pool); /* the release recounts */
                (void)gpumem__arena_free_owned(pool->arena, *addr, back, NULL);
                /* the granules mapped before the device refused are free again:
                 * back to the device, so that a failed request holds nothing
                 * more (the release counts the split figures again, this free
                 * too) */
                (void)gpumem__growth_release_free(pool);
                if (s == GPUMEM_ERR_OUT_OF_MEMORY)
                    s = pool_oom(pool, need, why->text, why);
                goto out;
            }
        }
        if (HISTORY_ON(pool)) /* the gate's test covers the history's */
            gpumem__pool_record(pool, HIST_ALLOC, *addr, sizes[0], size, user);
    }
    if (pool->current > pool->peak)
        pool->peak = pool->current;
    pool_publish_use(pool);
    if (pool->live > pool->peak_live)
        pool->peak_live = pool->live;
out:
    if (held) {
        pool_slow_end(pool);
        return s;
    }
    gpumem__mutex_unlock(&pool->lock);
    return s;
}

gpumem_status gpumem__pool_alloc(struct pool *pool, uint64_t size, uint64_t *addr,
                                 struct reason *why)
{
    return pool_alloc(pool, size, false, NULL, addr, why);
}

gpumem_status gpumem__pool_alloc_async(struct pool *pool, uint64_t size, void *stream,
                                       uint64_t *addr, struct reason *why)
{
    return pool_alloc(pool, size, true, stream, addr, why);
}

static gpumem_status pool_bad_pointer(const struct pool *pool, struct reason *why)
{
    return gpumem__reason(why, GPUMEM_ERR_INVALID_POINTER,
                          "not the start of a live allocation on %s (an interior "
                          "pointer, or already freed)",
                          pool->p.label);
}

/* The counters of a free of `size` bytes at addr, done. pre: pool->lock held. */
static inline void pool_count_free(struct pool *pool, uint64_t addr, uint64_t size)
{
    if (pool->g.freed_at) /* the trim's record, before the live bytes go down */
        gpumem__growth_freed(pool, addr, size);
    pool->current -= size;
    pool->freed_total += size;
    pool->live--; /* and a free more: pool_frees_ever */
    pool_publish_use(pool);
}

/* The arena's free of the live chunk at addr, as `owner`'s: the number of free
 * chunks it joined (the records it put back) in *joined; `whole` (owner 0's
 * only; NULL, a constant, on the steady paths): the size of the free chunk it
 * ended in when that is its segment's only one, else 0
 * (gpumem__arena_free_whole). The arena's status. */
static inline int pool_arena_free(struct pool *pool, uint64_t addr, unsigned owner,
                                  uint64_t *size, unsigned *joined, uint64_t *whole)
{
    /* the pointer read again after the call rather than kept in a register
     * saved across it: a load instead of a push and a pop */
    const struct arena_head *const volatile *records = &pool->split.records;
    size_t before = (*records)->spare_count;
    int r = owner   ? gpumem__arena_free_owned(pool->arena, addr, owner, size)
            : whole ? gpumem__arena_free_whole(pool->arena, addr, size, whole)
                    : gpumem__arena_free(pool->arena, addr, size);
    *joined = (unsigned)((*records)->spare_count - before);
    return r;
}

/* A free of the live chunk at addr as `owner`'s (0: pool_free_chunk's; else a
 * stream-ordered one's), off the steady path (split.gate): the split figures
 * counted exactly. While granules are unmapped, what it joins (a stream's free
 * may join several owners' chunks) is looked at before it is joined; else the
 * question is whether the free chunk it ends in is its segment's only one,
 * which the arena answers for owner 0's free and a lookup for a stream's.
 * false when addr starts no live chunk. */
static GPUMEM_COLD bool pool_free_chunk_rare(struct pool *pool, uint64_t addr,
                                             unsigned owner)
{
    uint64_t size, whole = 0;
    unsigned joined;
    if (pool->g.unmapped) {
        struct split_join pre;
        if (!gpumem__split_free_preview(pool, addr, owner, &pre))
            return false;
        (void)pool_arena_free(pool, addr, owner, &size, &joined, NULL);
        pool_count_free(pool, addr, size);
        gpumem__split_free_slow(pool, size, &pre);
        return true;
    }
    if (pool_arena_free(pool, addr, owner, &size, &joined, owner ? NULL : &whole) !=
        ARENA_OK)
        return false;
    pool_count_free(pool, addr, size);
    if (owner)
        gpumem__split_free_exact(pool, addr, size, joined);
    else if (whole)
        gpumem__split_free_known(pool, size, joined, whole);
    else /* a free inside a segment that holds others: as on the steady path */
        gpumem__split_free(pool, addr, size, joined);
    return true;
}

/* The free of the live chunk at addr as `owner`'s (0: anyone's; a constant
 * there, where it is inlined), recorded in the history first (a bad pointer
 * records nothing: pool_record_free), its figures counted: GPUMEM_OK, or
 * GPUMEM_ERR_INVALID_POINTER when addr starts no live chunk. pre: pool->lock
 * held. */
static GPUMEM_ALWAYS_INLINE gpumem_status pool_free_live(struct pool *pool, uint64_t addr,
                                                         unsigned owner,
                                                         struct reason *why)
{
    uint64_t size;
    unsigned joined;
    if (HISTORY_ON(pool))
        pool_record_free(pool, addr);
    if (SPLIT_RARE(pool->split.gate & SPLIT_GATE_FREE))
        return pool_free_chunk_rare(pool, addr, owner) ? GPUMEM_OK
                                                       : pool_bad_pointer(pool, why);
    if (pool_arena_free(pool, addr, owner, &size, &joined, NULL) != ARENA_OK)
        return pool_bad_pointer(pool, why);
    pool_count_free(pool, addr, size);
    gpumem__split_free(pool, addr, size, joined);
    return GPUMEM_OK;
}

/* The plain free while some live block has streams recorded (stream_uses.h):
 * this one may be such a block, kept for their work, whose events' driver calls
 * may log; so the log is held until the pool's lock is let go. pre: pool->lock
 * held; it is let go here. */
static GPUMEM_COLD gpumem_status pool_free_recorded(struct pool *pool, uint64_t addr,
                                                    struct reason *why)
{
    bool kept = false;
    gpumem__log_hold();
    gpumem_status s =
        gpumem__streams_free_recorded(pool->streams, addr, STREAMS_NONE, &kept, why);
    if (s == GPUMEM_OK && !kept)
        s = pool_free_live(pool, addr, 0, why);
    gpumem__mutex_unlock(&pool->lock);
    gpumem__log_release();
    return s;
}

gpumem_status gpumem__pool_free(struct pool *pool, uint64_t addr, struct reason *why)
{
    gpumem__mutex_lock(&pool->lock);
    /* a block used on other streams waits for their work */
    if (pool->streams && gpumem__streams_recorded(pool->streams))
        return pool_free_recorded(pool, addr, why);
    gpumem_status s = pool_free_live(pool, addr, 0, why);
    gpumem__mutex_unlock(&pool->lock);
    return s;
}

gpumem_status gpumem__pool_free_async(struct pool *pool, uint64_t addr, void *stream,
                                      struct reason *why)
{
    if (!pool->streams) /* synchronous streams: the work is done already */
        return gpumem__pool_free(pool, addr, why);
    gpumem_status s = GPUMEM_OK;
    gpumem__mutex_lock(&pool->lock);
    /* The block becomes the stream's free memory (streams.h). On the steady
     * path the stream has a slot, and the arena's free below is the pointer's
     * only check. Else the pointer is checked first: making a slot may wait
     * for another stream's work (when every slot is taken), and a bad pointer
     * must change nothing. That wait may log, and so may the events of a block
     * used on several streams (below): then the log is held (until the pool's
     * lock is let go). Nothing else here logs. */
    unsigned owner = gpumem__streams_slot_owner(pool->streams, stream);
    bool held = owner == 0 || gpumem__streams_recorded(pool->streams);
    if (held)
        gpumem__log_hold();
    if (owner == 0 && gpumem__arena_lookup(pool->arena, addr) == 0) {
        s = pool_bad_pointer(pool, why);
        goto out;
    }
    /* a block used on other streams waits for their work too (stream_uses.h) */
    bool kept = false;
    s = gpumem__streams_free_recorded(pool->streams, addr, stream, &kept, why);
    if (s != GPUMEM_OK || kept)
        goto out;
    /* a stream's first free here: its slot (no driver call but that wait) */
    if (owner == 0 &&
        (s = gpumem__streams_new_slot(pool->streams, stream, &owner, why)) != GPUMEM_OK)
        goto out;
    s = pool_free_live(pool, addr, owner, why);
out:
    gpumem__mutex_unlock(&pool->lock);
    if (held)
        gpumem__log_release();
    return s;
}

gpumem_status gpumem__pool_record_stream(struct pool *pool, uint64_t addr, void *stream,
                                         struct reason *why)
{
    gpumem_status s = GPUMEM_OK;
    gpumem__mutex_lock(&pool->lock);
    if (gpumem__arena_lookup(pool->arena, addr) == 0)
        s = pool_bad_pointer(pool, why);
    else if (pool->streams) /* else synchronous streams: nothing to wait for */
        s = gpumem__streams_record(pool->streams, addr, stream, why);
    gpumem__mutex_unlock(&pool->lock);
    return s;
}

/* The whole gpumem_memory_info (gpumem_get_memory_info copies what the
 * caller's holds). pre: pool->lock held. */
static void pool_fill_info(struct pool *pool, gpumem_memory_info *out)
{
    struct arena_stats st;
    gpumem__arena_stats(pool->arena, &st);
    out->struct_size = (uint32_t)sizeof *out;
    out->current_bytes = pool->current;
    out->peak_bytes = pool->peak;
    out->reserved_bytes = pool->reserved;
    out->peak_reserved_bytes = pool->peak_reserved;
    out->limit_bytes = pool->p.budget;
    out->largest_free_block = gpumem__growth_largest_free(pool);
    out->num_allocs = pool->seq - pool->seq_at_reset;
    out->num_frees = pool_frees_ever(pool) - pool->frees_at_reset;
    out->num_ooms = pool->num_ooms;
    /* the fields after gpumem 0.2: the totals and the arena's counts */
    out->reserved_total_bytes = pool->reserved_total;
    out->freed_total_bytes = pool->freed_total;
    out->live_blocks = pool->live;
    out->peak_live_blocks = pool->peak_live;
    out->num_allocs_total = pool->seq;
    out->segments = st.segments;
    out->peak_segments = st.segments_peak;
    out->segments_total = st.segments_formed;
    out->num_alloc_retries = pool->num_retries;
    out->num_sync_all_streams = pool->num_drains;
    out->inactive_split_blocks = gpumem__split_blocks(pool);
    out->peak_inactive_split_blocks = pool->split.peak_kb - pool->split.kb;
    out->inactive_split_blocks_total = pool->split.blocks_total;
    out->inactive_split_bytes = gpumem__split_bytes(pool);
    out->peak_inactive_split_bytes = gpumem__split_peak_bytes(pool);
    out->inactive_split_bytes_total = pool->freed_total + pool->split.bytes_extra;
}

void gpumem__pool_info(struct pool *pool, gpumem_memory_info *out)
{
    gpumem__mutex_lock(&pool->lock);
    pool_fill_info(pool, out);
    gpumem__mutex_unlock(&pool->lock);
}

bool gpumem__pool_grows(const struct pool *pool) { return pool->p.growth; }

uint64_t gpumem__pool_activity(struct pool *pool)
{
    gpumem__mutex_lock(&pool->lock);
    uint64_t n = pool->seq + pool_frees_ever(pool);
    gpumem__mutex_unlock(&pool->lock);
    return n;
}

void gpumem__pool_reset_stats(struct pool *pool)
{
    gpumem__mutex_lock(&pool->lock);
    pool->peak = pool->current;
    pool->peak_reserved = pool->reserved;
    pool_publish_use(pool);
    pool->seq_at_reset = pool->seq;
    pool->frees_at_reset = pool_frees_ever(pool);
    pool->num_ooms = 0;
    pool->peak_live = pool->live;
    pool->split.peak_kb = gpumem__split_free_records(pool); /* peak := blocks, + kb */
    pool->split.peak_bytes = gpumem__split_bytes(pool);
    pool->split.min_current = pool->current;
    gpumem__arena_reset_peaks(pool->arena);
    pool->g.trimmed_frees = UINT64_MAX; /* the count restarts: trim at the next growth */
    gpumem__mutex_unlock(&pool->lock);
}

gpumem_status gpumem__pool_set_history(struct pool *pool, uint64_t entries,
                                       struct reason *why)
{
    struct history *h = NULL, *old;
    if (entries && !(h = gpumem__history_create(entries)))
        return gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                              "%s: out of host memory for an event history of %llu "
                              "events",
                              pool->p.label, (unsigned long long)entries);
    /* made outside the lock; only the copy of the newest events is made under it */
    gpumem__mutex_lock(&pool->lock);
    old = pool->history;
    if (h && old)
        gpumem__history_take(h, old);
    pool->history = h;
    gpumem__split_gate(pool); /* the history's records are off the steady paths */
    gpumem__mutex_unlock(&pool->lock);
    gpumem__history_destroy(old);
    return GPUMEM_OK;
}

/* ----------------------------------------------------------- snapshots -- */

struct copy_walk {
    struct pool *pool;
    struct pool_copy *c;
    size_t segs_cap, chunks_cap;
    bool overflow;
};

static void copy_segment(void *ctx, uint64_t base, uint64_t size)
{
    struct copy_walk *w = ctx;
    if (w->c->nsegs == w->segs_cap) {
        w->overflow = true;
        return;
    }
    struct pool_segment *g = &w->c->segs[w->c->nsegs++];
    g->base = base;
    g->size = size;
    g->kind = !w->pool->p.growth ? POOL_REGION_GREEDY
              : w->pool->g.space && gpumem__space_contains(w->pool->g.space, base)
                  ? POOL_REGION_VMM
                  : POOL_REGION_GROWTH;
    g->first = w->c->nchunks;
    g->count = 0;
}

static void copy_chunk(void *ctx, const struct arena_chunk_info *ci)
{
    struct copy_walk *w = ctx;
    if (w->overflow || w->c->nchunks == w->chunks_cap) {
        w->overflow = true;
        return;
    }
    struct pool_chunk *k = &w->c->chunks[w->c->nchunks++];
    uint64_t slack = ci->user[1] >> POOL_SLACK_SHIFT;
    k->addr = ci->addr;
    k->size = ci->size;
    k->is_free = ci->is_free;
    k->seq = ci->user[0];
    k->requested = k->is_free ? 0 : ci->size > slack ? ci->size - slack : ci->size;
    k->tag = gpumem__tag_text(ci->user[1] & POOL_TAG_MASK);
    /* a free chunk a stream holds (its work may still use it) is that stream's */
    k->stream =
        ci->is_free
            ? (uint64_t)(uintptr_t)(w->pool->streams
                                        ? gpumem__streams_stream_of(w->pool->streams,
                                                                    ci->owner)
                                        : NULL)
            : ci->user[2];
    k->held = ci->is_free && ci->owner != 0;
    k->unmapped =
        ci->is_free ? gpumem__growth_chunk_unmapped(w->pool, ci->addr, ci->size) : 0;
    w->c->segs[w->c->nsegs - 1].count++;
}

/* Room for a copy of the history's events, with some for those that come
 * before the copy is made (never more than the ring holds). */
static uint64_t pool_events_room(const struct history *h)
{
    if (!h)
        return 0;
    uint64_t n = gpumem__history_count(h);
    return gpumem__min_u64(h->cap, n + n / 2 + 1024);
}

gpumem_status gpumem__pool_copy(struct pool *pool, struct pool_copy *out,
                                struct reason *why)
{
    struct arena_stats st;
    memset(out, 0, sizeof *out);
    /* Sized outside the lock with room for what may come meanwhile; a pool that
     * grew past the room is sized again (rare: each try adds half). */
    gpumem__mutex_lock(&pool->lock);
    gpumem__arena_stats(pool->arena, &st);
    uint64_t events_cap = pool_events_room(pool->history);
    gpumem__mutex_unlock(&pool->lock);
    for (;;) {
        size_t nchunks = (size_t)(st.live_chunks + st.free_chunks);
        size_t chunks_cap = nchunks + nchunks / 2 + 64;
        size_t segs_cap = (size_t)st.segments + st.segments / 2 + 16;
        out->chunks = malloc(chunks_cap * sizeof *out->chunks);
        out->segs = malloc(segs_cap * sizeof *out->segs);
        out->events =
            events_cap ? malloc((size_t)events_cap * sizeof *out->events) : NULL;
        if (!out->chunks || !out->segs || (events_cap && !out->events)) {
            gpumem__pool_copy_free(out);
            return gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                                  "%s: out of host memory for a snapshot of %zu chunks",
                                  pool->p.label, nchunks);
        }
        struct copy_walk w = {pool, out, segs_cap, chunks_cap, false};
        gpumem__mutex_lock(&pool->lock);
        gpumem__arena_stats(pool->arena, &st);
        uint64_t nevents = pool->history ? gpumem__history_count(pool->history) : 0;
        if (st.live_chunks + st.free_chunks <= chunks_cap && st.segments <= segs_cap &&
            nevents <= events_cap) {
            gpumem__arena_walk_user(pool->arena, copy_segment, copy_chunk, &w);
            if (nevents) {
                gpumem__history_copy(pool->history, out->events);
                out->dropped = gpumem__history_dropped(pool->history);
            }
            out->nevents = (size_t)nevents;
            out->recording = pool->history != NULL;
            pool_fill_info(pool, &out->info);
            out->budget = pool->p.budget;
            out->growth = pool->p.growth;
        } else {
            w.overflow = true;
            events_cap = pool_events_room(pool->history);
        }
        gpumem__mutex_unlock(&pool->lock);
        if (!w.overflow)
            return GPUMEM_OK;
        gpumem__pool_copy_free(out);
    }
}

void gpumem__pool_copy_free(struct pool_copy *c)
{
    free(c->chunks);
    free(c->segs);
    free(c->events);
    memset(c, 0, sizeof *c);
}

const char *gpumem__pool_budget_reason(const struct pool *pool)
{
    return pool->budget_reason;
}
