/* PyTorch's "inactive split" figures of a pool: the exact paths an allocation
 * or a free takes while split.gate says so, and the recount after any other
 * change (split.h says what is counted and how). Every function here runs with
 * pool->lock held. */
#include "split.h"

/* Which paths leave the steady one from now on (struct split_counts, gate):
 * for the split figures, or for an allocation to record in the history (one
 * test for both; a free tests the history as before: it records before the
 * arena's free, and a rare path for it cost the history more than it saved). */
void gpumem__split_gate(struct pool *pool)
{
    struct split_counts *s = &pool->split;
    bool unmapped = pool->g.unmapped != 0, history = pool->history != NULL;
    s->gate = (uint8_t)((s->whole || unmapped || history ? SPLIT_GATE_ALLOC : 0) |
                        (s->multi || unmapped ? SPLIT_GATE_FREE : 0));
}

uint64_t gpumem__split_peak_bytes(const struct pool *pool)
{
    const struct split_counts *s = &pool->split;
    return gpumem__max_u64(s->peak_bytes, s->xb - s->min_current);
}

/* One more segment that is one free chunk, of `size` bytes: counted in *whole,
 * and the least of their sizes in *least (split.whole_least). */
static void split_whole_add(uint64_t *whole, uint64_t *least, uint64_t size)
{
    *least = (*whole)++ ? gpumem__min_u64(*least, size) : size;
}

/* Adds the net change of an event other than a steady allocation or free,
 * done and counted in the pool (pool->live, pool->current): the blocks went
 * from `before` by `blocks`, and the bytes by `bytes`, the event having moved
 * pool->current by `dcur` and counted `freed` bytes into pool->freed_total. */
static void split_note(struct pool *pool, uint64_t before, int64_t blocks, int64_t bytes,
                       int64_t dcur, uint64_t freed)
{
    struct split_counts *s = &pool->split;
    uint64_t after = before + (uint64_t)blocks, peak = s->peak_kb - s->kb;
    if (blocks > 0) {
        s->blocks_total += (uint64_t)blocks;
        peak = gpumem__max_u64(peak, after);
    }
    s->kb = gpumem__split_free_records(pool) - after;
    s->peak_kb = peak + s->kb;
    s->peak_bytes = gpumem__split_peak_bytes(pool); /* the past, before xb moves */
    s->xb += (uint64_t)bytes + (uint64_t)dcur;
    s->min_current = pool->current;
    s->peak_bytes = gpumem__max_u64(s->peak_bytes, s->xb - s->min_current);
    s->bytes_extra += (bytes > 0 ? (uint64_t)bytes : 0) - freed;
}

/* The bytes of the free chunk [addr, addr+size) that are mapped. */
static uint64_t split_mapped(const struct pool *pool, uint64_t addr, uint64_t size)
{
    return size - gpumem__growth_chunk_unmapped(pool, addr, size);
}

/* An allocation at addr of `got` bytes that left `rest` free after it, counted
 * in the pool, while granules are unmapped or a segment is one free chunk: the
 * chunk it took, as it was (counted unless it was a whole segment or had
 * nothing mapped), and its rest. Before the granules under the chunk are
 * mapped (gpumem__growth_back maps only those, which lie in no free chunk). */
void gpumem__split_alloc_slow(struct pool *pool, uint64_t addr, uint64_t got,
                              uint64_t rest)
{
    struct split_counts *s = &pool->split;
    bool whole = s->whole && got + rest >= s->whole_least &&
                 gpumem__arena_took_whole(pool->arena, addr, rest);
    if (!whole && !pool->g.unmapped)
        return; /* a chunk of a segment that holds others, all mapped: the
                   steady path's case (the figures moved with the counts) */
    uint64_t was = whole ? 0 : split_mapped(pool, addr, got + rest);
    uint64_t left = rest ? split_mapped(pool, addr + got, rest) : 0;
    s->whole -= whole;
    /* the blocks before: a chunk taken whole was a free chunk more */
    uint64_t before = gpumem__split_blocks(pool) + (rest == 0);
    split_note(pool, before, (int64_t)(left > 0) - (int64_t)(was > 0),
               (int64_t)left - (int64_t)was, (int64_t)got, 0);
    gpumem__split_gate(pool);
}

struct split_preview {
    const struct pool *pool;
    struct split_join *out;
};

static void split_preview_chunk(void *ctx, uint64_t addr, uint64_t size)
{
    struct split_preview *v = ctx;
    uint64_t mapped = split_mapped(v->pool, addr, size);
    v->out->joined++;
    v->out->counted += mapped > 0;
    v->out->mapped += mapped;
    v->out->sizes += size;
}

bool gpumem__split_free_preview(struct pool *pool, uint64_t addr, unsigned owner,
                                struct split_join *out)
{
    struct split_preview v = {pool, out};
    *out = (struct split_join){0};
    return gpumem__arena_free_preview(pool->arena, addr, owner, split_preview_chunk, &v,
                                      &out->whole);
}

void gpumem__split_free_slow(struct pool *pool, uint64_t size,
                             const struct split_join *pre)
{
    struct split_counts *s = &pool->split;
    int64_t blocks = -(int64_t)pre->counted, bytes = -(int64_t)pre->mapped;
    if (pre->whole) {
        split_whole_add(&s->whole, &s->whole_least, pre->sizes + size);
    } else { /* the chunk's own granules are all mapped */
        blocks += 1;
        bytes += (int64_t)(pre->mapped + size);
    }
    /* the blocks before: the free chunks were joined - 1 more */
    split_note(pool, gpumem__split_blocks(pool) + pre->joined - 1, blocks, bytes,
               -(int64_t)size, size);
    gpumem__split_gate(pool);
}

/* A free of `size` bytes at addr that joined `joined` free chunks, done and
 * counted, nothing unmapped: the chunks joined were counted (their segment held
 * the freed one), and the chunk it ended in is, unless it is its segment's
 * only one. */
void gpumem__split_free_exact(struct pool *pool, uint64_t addr, uint64_t size,
                              unsigned joined)
{
    gpumem__split_free_known(pool, size, joined,
                             gpumem__arena_whole_free_at(pool->arena, addr));
}

void gpumem__split_free_known(struct pool *pool, uint64_t size, unsigned joined,
                              uint64_t whole)
{
    struct split_counts *s = &pool->split;
    uint64_t before = gpumem__split_blocks(pool) + joined - 1;
    if (whole) {
        split_whole_add(&s->whole, &s->whole_least, whole);
        split_note(pool, before, -(int64_t)joined, -(int64_t)(whole - size),
                   -(int64_t)size, size);
    } else {
        split_note(pool, before, 1 - (int64_t)joined, (int64_t)size, -(int64_t)size,
                   size);
    }
    gpumem__split_gate(pool);
}

struct split_walk {
    struct pool *pool;
    uint64_t blocks, bytes, whole, whole_least;
    uint64_t seg_chunks, seg_blocks, seg_bytes; /* of the segment walked */
    uint64_t seg_first;                         /* its first chunk's size */
    bool seg_free;                              /* its first chunk is free */
};

static void split_segment_end(struct split_walk *w)
{
    if (w->seg_chunks == 1 && w->seg_free) {
        split_whole_add(&w->whole, &w->whole_least, w->seg_first);
    } else {
        w->blocks += w->seg_blocks;
        w->bytes += w->seg_bytes;
    }
    w->seg_chunks = w->seg_blocks = w->seg_bytes = 0;
}

static void split_segment(void *ctx, uint64_t base, uint64_t size)
{
    (void)base, (void)size;
    split_segment_end(ctx);
}

static void split_chunk(void *ctx, const struct arena_chunk_info *c)
{
    struct split_walk *w = ctx;
    if (w->seg_chunks++ == 0) {
        w->seg_free = c->is_free;
        w->seg_first = c->size;
    }
    uint64_t mapped = c->is_free ? split_mapped(w->pool, c->addr, c->size) : 0;
    if (mapped) {
        w->seg_blocks++;
        w->seg_bytes += mapped;
    }
}

static void split_whole(void *ctx, uint64_t base, uint64_t size)
{
    struct split_walk *w = ctx;
    (void)base;
    split_whole_add(&w->whole, &w->whole_least, size);
    w->bytes += size;
}

void gpumem__split_recount(struct pool *pool)
{
    struct split_walk w = {.pool = pool};
    uint64_t blocks, bytes, free_chunks, free_bytes, segments;
    gpumem__arena_free_counts(pool->arena, &free_chunks, &free_bytes, &segments);
    if (pool->g.unmapped) { /* the chunks, with the space's bitmaps */
        gpumem__arena_walk_user(pool->arena, split_segment, split_chunk, &w);
        split_segment_end(&w);
        blocks = w.blocks;
        bytes = w.bytes;
    } else { /* every free chunk, but the segments that are one */
        gpumem__arena_walk_whole_free(pool->arena, split_whole, &w);
        blocks = free_chunks - w.whole;
        bytes = free_bytes - w.bytes;
    }
    struct split_counts *s = &pool->split;
    uint64_t before = s->marked ? s->blocks_mark : gpumem__split_blocks(pool);
    s->marked = false;
    s->whole = w.whole;
    s->whole_least = w.whole_least;
    s->multi = segments > 1;
    split_note(pool, before, (int64_t)(blocks - before),
               (int64_t)(bytes - gpumem__split_bytes(pool)), 0, 0);
    gpumem__split_gate(pool);
}

void gpumem__split_mark(struct pool *pool)
{
    if (!pool->split.marked) {
        pool->split.blocks_mark = gpumem__split_blocks(pool);
        pool->split.marked = true;
    }
}
