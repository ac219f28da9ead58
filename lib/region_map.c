/* The region map: a sorted array of regions searched by bisection, read without
 * a lock under a sequence count, written under the map's lock (a leaf: see
 * region_map.h). Outgrown arrays are retired, not freed, until the map is
 * destroyed, since a reader may still be searching one. */
#include "region_map.h"

#include <stdlib.h>

void gpumem__region_map_init(struct region_map *m)
{
    atomic_init(&m->seq, 0);
    atomic_init(&m->block, NULL);
    atomic_init(&m->count, 0);
    m->promised = 0;
    gpumem__mutex_init(&m->lock, GPUMEM_RANK_REGION_MAP);
}

static void free_blocks(struct region_map *m)
{
    struct region_block *b = atomic_load_explicit(&m->block, memory_order_relaxed);
    while (b) {
        struct region_block *older = b->retired;
        free(b);
        b = older;
    }
    atomic_store_explicit(&m->block, NULL, memory_order_relaxed);
    atomic_store_explicit(&m->count, 0, memory_order_relaxed);
}

void gpumem__region_map_destroy(struct region_map *m)
{
    free_blocks(m);
    gpumem__mutex_destroy(&m->lock);
}

void gpumem__region_map_forget(struct region_map *m)
{
    if (!gpumem__mutex_trylock(&m->lock))
        return;
    free_blocks(m);
    gpumem__mutex_unlock(&m->lock);
}

/* Entries are stored with release and loaded with acquire (plain moves on x86
 * and cheap elsewhere), which is what makes the sequence check sound without
 * fences (ThreadSanitizer does not model fences): a reader that loads a value a
 * writer stored synchronizes with it, so its second load of `seq` sees at least
 * that writer's odd value and it retries. */
#define LOAD(x)     atomic_load_explicit(&(x), memory_order_acquire)
#define STORE(x, v) atomic_store_explicit(&(x), (v), memory_order_release)

/* Index of the first of the first `count` entries whose base is > addr. */
static size_t upper_bound(const struct region_entry *e, size_t count, uint64_t addr)
{
    size_t lo = 0, hi = count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (LOAD(e[mid].base) <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

struct pool *gpumem__region_map_find(struct region_map *m, uint64_t addr)
{
    for (;;) {
        uint64_t seq = atomic_load_explicit(&m->seq, memory_order_acquire);
        struct region_block *b = LOAD(m->block);
        size_t count = LOAD(m->count);
        struct pool *found = NULL;
        if (b && !(seq & 1)) {
            if (count > b->capacity) /* torn: a count read with an older block */
                count = b->capacity;
            size_t i = upper_bound(b->entries, count, addr);
            if (i > 0 &&
                addr - LOAD(b->entries[i - 1].base) < LOAD(b->entries[i - 1].size))
                found = LOAD(b->entries[i - 1].pool);
        }
        if (!(seq & 1) && atomic_load_explicit(&m->seq, memory_order_relaxed) == seq)
            return found;
    }
}

/* A writer's change between write_begin and write_end; pre: m->lock. */
static void write_begin(struct region_map *m)
{
    /* Relaxed: the release stores of the entries that follow keep it before them. */
    atomic_store_explicit(&m->seq, LOAD(m->seq) + 1, memory_order_relaxed);
}

static void write_end(struct region_map *m)
{
    atomic_store_explicit(&m->seq, LOAD(m->seq) + 1, memory_order_release);
}

/* A larger block is filled before it is published, so readers see either block
 * whole; the old one is retired, not freed. */
bool gpumem__region_map_make_room(struct region_map *m)
{
    bool ok = true;
    gpumem__mutex_lock(&m->lock);
    struct region_block *old = LOAD(m->block);
    size_t count = LOAD(m->count);
    if (!old || count + m->promised >= old->capacity) {
        size_t cap = old ? 2 * old->capacity : 16;
        struct region_block *b = malloc(sizeof *b + cap * sizeof b->entries[0]);
        if (b) {
            b->capacity = cap;
            b->retired = old;
            for (size_t i = 0; i < count; i++) {
                atomic_init(&b->entries[i].base, LOAD(old->entries[i].base));
                atomic_init(&b->entries[i].size, LOAD(old->entries[i].size));
                atomic_init(&b->entries[i].pool, LOAD(old->entries[i].pool));
            }
            atomic_store_explicit(&m->block, b, memory_order_release);
        } else {
            ok = false;
        }
    }
    if (ok)
        m->promised++;
    gpumem__mutex_unlock(&m->lock);
    return ok;
}

void gpumem__region_map_cancel_room(struct region_map *m)
{
    gpumem__mutex_lock(&m->lock);
    m->promised--;
    gpumem__mutex_unlock(&m->lock);
}

static void set_entry(struct region_entry *e, uint64_t base, uint64_t size,
                      struct pool *pool)
{
    STORE(e->base, base);
    STORE(e->size, size);
    STORE(e->pool, pool);
}

static void copy_entry(struct region_entry *to, const struct region_entry *from)
{
    set_entry(to, LOAD(from->base), LOAD(from->size), LOAD(from->pool));
}

void gpumem__region_map_insert(struct region_map *m, uint64_t base, uint64_t size,
                               struct pool *pool)
{
    gpumem__mutex_lock(&m->lock);
    m->promised--;
    struct region_entry *e = LOAD(m->block)->entries;
    size_t count = LOAD(m->count);
    size_t i = upper_bound(e, count, base);
    write_begin(m);
    for (size_t j = count; j > i; j--)
        copy_entry(&e[j], &e[j - 1]);
    set_entry(&e[i], base, size, pool);
    STORE(m->count, count + 1);
    write_end(m);
    gpumem__mutex_unlock(&m->lock);
}

/* Removes entry i, keeping the rest in order. pre: m->lock held; i < count. */
static void remove_at(struct region_map *m, size_t i)
{
    struct region_entry *e = LOAD(m->block)->entries;
    size_t count = LOAD(m->count);
    write_begin(m);
    for (size_t j = i; j + 1 < count; j++)
        copy_entry(&e[j], &e[j + 1]);
    STORE(m->count, count - 1);
    write_end(m);
}

void gpumem__region_map_remove(struct region_map *m, uint64_t base)
{
    gpumem__mutex_lock(&m->lock);
    struct region_block *b = LOAD(m->block);
    size_t i = b ? upper_bound(b->entries, LOAD(m->count), base) : 0;
    if (i > 0 && LOAD(b->entries[i - 1].base) == base)
        remove_at(m, i - 1);
    gpumem__mutex_unlock(&m->lock);
}

bool gpumem__region_map_remove_any(struct region_map *m, const struct pool *pool,
                                   uint64_t *base, uint64_t *size)
{
    bool found = false;
    gpumem__mutex_lock(&m->lock);
    struct region_block *b = LOAD(m->block);
    size_t count = LOAD(m->count);
    for (size_t i = 0; b && i < count; i++) {
        struct region_entry *e = &b->entries[i];
        if (LOAD(e->pool) == pool) {
            *base = LOAD(e->base);
            *size = LOAD(e->size);
            remove_at(m, i);
            found = true;
            break;
        }
    }
    gpumem__mutex_unlock(&m->lock);
    return found;
}
