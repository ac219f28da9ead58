/* The arena: best fit with coalescing over address ranges it never dereferences.
 *
 * Every chunk, free or used, is a `struct chunk` record in host memory, taken from a
 * slab (blocks of records plus a spare list). A segment's chunks form a doubly linked
 * list in address order between two zero-size sentinel records, so that coalescing
 * never tests for NULL. Free chunks sit in a two-level array of size classes (TLSF's
 * mapping: a power-of-two first level, 32 linear steps in the second, with bitmaps of
 * the non-empty classes); each class of several sizes is a treap keyed by (size,
 * addr), so that the best fit is exact: the smallest chunk that holds the request
 * and, among equals, the lowest address. A class of one size (below 16 KiB) is a
 * list whose head is taken, in the order of the tie rule (list_push). Used chunks
 * are found by address through an open-addressing hash table (linear probing at
 * load at most 1/2, backward-shift deletion).
 *
 * Each class also keeps a pointer to its minimum, so that finding a class's best
 * fit (in a class of one size, its minimum) costs no tree walk, and insertion near
 * the minimum starts there (index_insert_at: a finger search up the left spine).
 *
 * The hot paths avoid tree work where the order allows it: a split leaves the
 * chosen chunk in the index with the rest (the allocation takes a new record), and
 * a chunk that grows by coalescing stays where it is, whenever the key stays in its
 * class and in order (index_grow, gpumem__arena_alloc say why that is exact).
 *
 * Owners (arena.h): each owner's free chunks have an index of their own, the same
 * structure; owner 0's is inside the arena, so that the plain paths reach it at a
 * constant offset, and its chunks are CHUNK_FREE where an owner's are
 * CHUNK_OWNED, so that a plain free's test of a neighbour is the one it always
 * was. An owner's index is made when the owner is opened: a free never allocates.
 *
 * Every host allocation an operation needs is made before its first change, so a
 * host failure leaves the arena as it was. Not thread-safe: the owner locks. */
#include "arena.h"

#include "platform.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#define HUGE_PAGE_BYTES ((size_t)2 << 20)

#define GRANULE_SHIFT 8
#define SL_BITS       5
#define SL_COUNT      (1u << SL_BITS)
/* Sizes are below 2^64, so granule counts below 2^56: first levels 0..51. */
#define FL_COUNT (64 - GRANULE_SHIFT - SL_BITS + 1)

/* Slab blocks: the first holds SLAB_FIRST_RECORDS records; each next one adds a
 * quarter of the records so far, up to SLAB_MAX_RECORDS per block (a block of that
 * many is one 2 MiB huge page). */
#define SLAB_FIRST_RECORDS 64
#define SLAB_MAX_RECORDS   32766
#define LIVE_MIN_SLOTS     16
#define ARRAY_MIN_ENTRIES  8
#define CHECK_MAX_DEPTH    256 /* check() reports deeper treaps as corrupt */
#define CACHE_LINE         64

_Static_assert(ARENA_GRANULE == 1u << GRANULE_SHIFT, "ARENA_GRANULE is 2^GRANULE_SHIFT");
_Static_assert(FL_COUNT <= 64, "the first-level bitmap is one uint64_t");
_Static_assert(SL_COUNT <= 32, "a second-level bitmap is one uint32_t");

enum chunk_state {
    CHUNK_SPARE = 0,    /* on the slab's spare list */
    CHUNK_FREE = 1,     /* in owner 0's free index */
    CHUNK_USED = 2,     /* in the live hash */
    CHUNK_SENTINEL = 3, /* zero-size record at either end of a segment */
    CHUNK_OWNED = 4     /* in the free index of its owner, not 0 (arena.h) */
};

struct chunk {
    uint64_t addr;
    uint64_t size;             /* bytes; 0 for a sentinel */
    struct chunk *prev, *next; /* address order in the segment, NULL past the
                                  sentinels; `next` also links spare records */
    union {
        struct {
            struct chunk *left, *right; /* free index treap, free chunks only */
            struct chunk *parent;       /* in the treap; NULL at a class's root */
        };
        uint64_t user[ARENA_USER_WORDS]; /* used chunks: the owner's words
                                            (gpumem__arena_alloc_user), else 0 */
    };
    uint32_t prio; /* treap priority: a parent's is >= its children's;
                      drawn once per record, when its slab block is made */
    uint16_t cls;  /* free chunks: the size class they are filed in */
    uint8_t state; /* enum chunk_state */
    uint8_t owner; /* free chunks: their owner (arena.h), whose index they are in;
                      not 0 for CHUNK_OWNED, and 0 in every other record, so
                      that owner 0's paths never write it */
};

_Static_assert(sizeof(struct chunk) <= CACHE_LINE, "a record fits a cache line");

/* A block of records, cache-line aligned inside its host allocation (a record is one
 * line on 64-bit hosts, so visiting a record costs one miss, not two). */
struct slab_block {
    struct slab_block *next;
    size_t count; /* records in recs */
    struct chunk *recs;
};

struct live_slot {
    uint64_t addr;
    struct chunk *chunk; /* NULL: empty slot */
};

struct region {
    uint64_t base, size;
    bool contiguous;
    bool release; /* set only inside release_free_regions */
};

struct segment {
    uint64_t base, end;
    struct chunk *head, *tail; /* sentinels at base and at end */
};

/* The free chunks of one owner, by size class. */
struct free_index {
    uint64_t fl_map;           /* bit fl: sl_map[fl] != 0 */
    uint32_t sl_map[FL_COUNT]; /* bit sl: roots[fl * SL_COUNT + sl] != NULL */
    struct chunk *roots[FL_COUNT * SL_COUNT]; /* by class fl * SL_COUNT + sl */
    struct chunk *mins[FL_COUNT * SL_COUNT];  /* each class's smallest chunk, or NULL */
};

struct arena {
    struct arena_host_allocator host;
    uint64_t capacity;       /* sum of the regions' sizes */
    uint64_t allocated;      /* sum of the used chunks' sizes */
    uint64_t metadata_bytes; /* host bytes currently held */
    uint64_t rng;            /* xorshift state for treap priorities */

    /* ixs[o]: owner o's free chunks (ixs[0] is ix0; another NULL until
     * gpumem__arena_owner_open); joins[o]: bit p set when a chunk that becomes
     * free as o's joins a free neighbour of owner p (always o's own and 0's) */
    struct free_index *ixs[ARENA_OWNERS];
    uint64_t joins[ARENA_OWNERS];
    struct free_index ix0;

    struct live_slot *live; /* live_mask + 1 slots, a power of two: live_first
                               until it first grows */
    size_t live_mask, live_count;
    size_t live_limit;   /* (live_mask + 1) / 2: the most entries before it grows */
    unsigned live_shift; /* 64 - log2(live_mask + 1) */

    struct slab_block *blocks;
    struct chunk *spare;
    struct arena_head head; /* spare_count, records_total (arena.h) */

    struct region *regions; /* sorted by base, disjoint */
    size_t nregions, regions_cap;
    struct segment *segs; /* sorted by base, disjoint */
    size_t nsegs, segs_cap;
    size_t segs_peak;     /* highest nsegs since creation or reset_peaks */
    uint64_t segs_formed; /* segments ever formed (a region touching none) */

    /* The live hash's first slots, inside the arena so that there always is a
     * table (a lookup tests no capacity) at no host allocation of its own. */
    struct live_slot live_first[LIVE_MIN_SLOTS];
};

/* ---------------------------------------------------------------- helpers -- */

static unsigned msb64(uint64_t x) /* pre: x != 0 */
{
#if defined(__GNUC__)
    return 63u - (unsigned)__builtin_clzll(x);
#else
    unsigned n = 0;
    while (x >>= 1)
        n++;
    return n;
#endif
}

static unsigned lsb64(uint64_t x) /* pre: x != 0 */
{
#if defined(__GNUC__)
    return (unsigned)__builtin_ctzll(x);
#else
    unsigned n = 0;
    while (!(x & 1)) {
        x >>= 1;
        n++;
    }
    return n;
#endif
}

static void *default_alloc(void *ctx, size_t bytes)
{
    (void)ctx;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (bytes >= HUGE_PAGE_BYTES) {
        void *p = NULL;
        if (posix_memalign(&p, HUGE_PAGE_BYTES, bytes) != 0)
            return NULL;
        madvise(p, bytes & ~(size_t)(HUGE_PAGE_BYTES - 1), MADV_HUGEPAGE);
        return p;
    }
#endif
    return malloc(bytes);
}

static void default_free(void *ctx, void *p)
{
    (void)ctx;
    free(p);
}

static void *host_alloc(struct arena *a, size_t bytes)
{
    void *p = a->host.alloc(a->host.ctx, bytes);
    if (p)
        a->metadata_bytes += bytes;
    return p;
}

static void host_free(struct arena *a, void *p, size_t bytes)
{
    if (p) {
        a->host.free(a->host.ctx, p);
        a->metadata_bytes -= bytes;
    }
}

/* Makes room for one more element in an array of `count` elements by doubling it.
 * Returns the array, moved or not, or NULL (the old one untouched) on host OOM. */
static void *array_room(struct arena *a, void *arr, size_t count, size_t *cap,
                        size_t elem)
{
    if (count < *cap)
        return arr;
    size_t n = *cap ? *cap * 2 : ARRAY_MIN_ENTRIES;
    if (n > SIZE_MAX / elem)
        return NULL;
    void *p = host_alloc(a, n * elem);
    if (!p)
        return NULL;
    if (count)
        memcpy(p, arr, count * elem);
    host_free(a, arr, *cap * elem);
    *cap = n;
    return p;
}

static void link_pair(struct chunk *left, struct chunk *right)
{
    left->next = right;
    right->prev = left;
}

static void make_sentinel(struct chunk *c, uint64_t addr)
{
    c->addr = addr;
    c->size = 0;
    c->state = CHUNK_SENTINEL;
    c->left = c->right = c->parent = NULL;
}

/* ------------------------------------------------------------------- slab -- */

static uint32_t next_prio(struct arena *a)
{
    uint64_t x = a->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    a->rng = x;
    return (uint32_t)((x * UINT64_C(0x2545F4914F6CDD1D)) >> 32);
}

static size_t slab_block_bytes(size_t records)
{
    size_t bytes =
        sizeof(struct slab_block) + CACHE_LINE - 1 + records * sizeof(struct chunk);
    /* the largest block is rounded up to a huge page (a few dozen bytes) */
    return records == SLAB_MAX_RECORDS && bytes <= HUGE_PAGE_BYTES ? HUGE_PAGE_BYTES
                                                                   : bytes;
}

/* Makes sure k records are spare; false on host OOM. Blocks are never given back
 * before destroy, so the records follow the peak number of chunks. */
static bool slab_ensure_spare(struct arena *a, size_t k)
{
    while (a->head.spare_count < k) {
        /* a quarter, not a doubling: the spare records never exceed a fifth of
         * them all (a few dozen host allocations more over a million records) */
        size_t n = a->head.records_total / 4;
        if (n < SLAB_FIRST_RECORDS)
            n = SLAB_FIRST_RECORDS;
        if (n > SLAB_MAX_RECORDS)
            n = SLAB_MAX_RECORDS;
        struct slab_block *b = host_alloc(a, slab_block_bytes(n));
        if (!b)
            return false;
        b->next = a->blocks;
        b->count = n;
        b->recs = (struct chunk *)(((uintptr_t)(b + 1) + CACHE_LINE - 1) &
                                   ~(uintptr_t)(CACHE_LINE - 1));
        a->blocks = b;
        for (size_t i = n; i-- > 0;) {
            b->recs[i].state = CHUNK_SPARE;
            b->recs[i].owner = 0;
            b->recs[i].prio = next_prio(a);
            b->recs[i].next = a->spare;
            a->spare = &b->recs[i];
        }
        a->head.spare_count += n;
        a->head.records_total += n;
    }
    return true;
}

/* pre: a record is spare (slab_ensure_spare). */
static struct chunk *slab_take(struct arena *a)
{
    struct chunk *c = a->spare;
    assert(c != NULL);
    a->spare = c->next;
    a->head.spare_count--;
    return c;
}

static void slab_put(struct arena *a, struct chunk *c)
{
    c->state = CHUNK_SPARE;
    c->prev = NULL;
    c->next = a->spare;
    a->spare = c;
    a->head.spare_count++;
}

/* ------------------------------------------------------------- free index -- */

/* The class of a chunk of `size` bytes, fl * SL_COUNT + sl. Granule counts g below
 * 2 * SL_COUNT each have a class of their own (fl 0 and 1); above, class (fl, sl)
 * holds the counts whose top bit is fl + SL_BITS - 1 and whose next SL_BITS bits
 * are sl. Branch-free: with m the top bit of g | SL_COUNT and sh = m - SL_BITS,
 * g >> sh lies in [SL_COUNT, 2 * SL_COUNT) (or is g itself when g < SL_COUNT), so
 * (sh << SL_BITS) + (g >> sh) is exactly fl * SL_COUNT + sl. */
static inline unsigned size_class(uint64_t size)
{
    uint64_t g = size >> GRANULE_SHIFT;
    unsigned sh = msb64(g | SL_COUNT) - SL_BITS;
    return (sh << SL_BITS) + (unsigned)(g >> sh);
}

static bool key_less(const struct chunk *x, const struct chunk *y)
{
    return x->size < y->size || (x->size == y->size && x->addr < y->addr);
}

/* The smallest chunk of the subtree t (pre: t != NULL). */
static inline struct chunk *index_leftmost(struct chunk *t)
{
    while (t->left)
        t = t->left;
    return t;
}

/* The chunk after x in its class's order, or NULL: the leftmost of its right
 * subtree, else the first ancestor it lies left of (expected O(1) steps on average
 * over a class's chunks; expected O(log k) for its largest, whose walk climbs the
 * right spine to the root). */
static inline struct chunk *index_successor(const struct chunk *x)
{
    if (x->right)
        return index_leftmost(x->right);
    struct chunk *s = x->parent;
    for (; s && s->right == x; s = s->parent)
        x = s;
    return s;
}

/* The same for x, its class's minimum: x is its parent's left child or the root,
 * so with no right subtree its successor is its parent (expected O(1) steps). */
static inline struct chunk *index_min_successor(const struct chunk *x)
{
    return x->right ? index_leftmost(x->right) : x->parent;
}

/* Class ci has just lost its last chunk: the bitmaps forget it. */
static inline void index_class_emptied(struct free_index *ix, unsigned ci)
{
    unsigned fl = ci >> SL_BITS;
    ix->sl_map[fl] &= ~(UINT32_C(1) << (ci & (SL_COUNT - 1)));
    if (!ix->sl_map[fl])
        ix->fl_map &= ~(UINT64_C(1) << fl);
}

/* x, whose state, class and count are set, takes the place of *link, a link below
 * `parent` (NULL for the root): the subtree that was there splits around x's key. */
static inline void index_place(struct chunk *x, struct chunk **link, struct chunk *parent)
{
    struct chunk *t = *link, **l = &x->left, **r = &x->right, *lp = x, *rp = x;
    while (t) {
        if (key_less(t, x)) {
            *l = t;
            t->parent = lp;
            lp = t;
            l = &t->right;
            t = t->right;
        } else {
            *r = t;
            t->parent = rp;
            rp = t;
            r = &t->left;
            t = t->left;
        }
    }
    *l = *r = NULL;
    *link = x;
    x->parent = parent;
}

/* The classes below LIST_CLASSES hold one size each (granule counts below
 * 2 * SL_COUNT, chunks under 16 KiB), so that their chunks tie on every request
 * that reaches them. Such a class is a list from its head, which is both its root
 * and its minimum, kept as a treap of one right spine (left NULL, right the next
 * chunk, parent the previous): index_unlink and index_unlink_min then take a chunk
 * out of it as they are, and an allocation takes the head. The tie rule is in the
 * filing: a chunk below the head's address becomes the head; otherwise it goes
 * after the last of the next LIST_SORTED - 1 chunks that lie below it, so that the
 * first entries keep a rough address order (low addresses first, as in best fit by
 * address) while a chunk freed among many of its size is filed within a few steps
 * of the head, where the next allocation of its size finds it still in cache.
 * Filing is O(1) (at most LIST_SORTED - 1 steps). bench/robustness and
 * gpumem-scaling measured the rule (docs/bench.md, "The tie rule"). */
#define LIST_CLASSES (2 * SL_COUNT)
#define LIST_SORTED  4

/* Files x in class ci < LIST_CLASSES, whose head is p (not NULL). */
static inline void list_push(struct free_index *ix, struct chunk *x, unsigned ci,
                             struct chunk *p)
{
    x->left = NULL;
    if (x->addr < p->addr) {
        x->parent = NULL;
        x->right = p;
        p->parent = x;
        ix->roots[ci] = ix->mins[ci] = x;
        return;
    }
    for (unsigned k = 1; k < LIST_SORTED && p->right && p->right->addr < x->addr; k++)
        p = p->right;
    struct chunk *n = p->right;
    x->parent = p;
    x->right = n;
    if (n)
        n->parent = x;
    p->right = x;
}

/* Adds x, a free chunk that is in no index (its state and owner set: mark_free),
 * to class ci (its size's) of ix, its owner's index. The place is the one a descent from
 * the root finds (the first node of x's search path whose priority is below x's, else the
 * empty link at its end), so the tree is the same; but when x lies below the root's key
 * it is reached from the class minimum, whose ancestors are the left spine (a finger
 * search): climb the spine while the parent's key is below x's; the node reached, v, is
 * where x's search path leaves the spine (to v's right subtree), or the minimum itself
 * when x is smaller. If x's priority is above v's, the place is on the spine: climb on
 * while the parent's priority is below x's. Otherwise it is in v's right subtree
 * (or v's empty left link when x is the new minimum), found by the usual descent. A
 * chunk of rank d in its class then costs expected O(log d) steps, not O(log k).
 * Above the root's key, the path starts at the root (v = root), as before. */
static inline void index_insert_at(struct free_index *ix, struct chunk *x, unsigned ci)
{
    struct chunk *v = ix->mins[ci], *parent, **link;
    x->cls = (uint16_t)ci;
    if (!v) { /* an empty class: x is its tree, and the bitmaps learn of it */
        x->left = x->right = x->parent = NULL;
        ix->roots[ci] = ix->mins[ci] = x;
        ix->sl_map[ci >> SL_BITS] |= UINT32_C(1) << (ci & (SL_COUNT - 1));
        ix->fl_map |= UINT64_C(1) << (ci >> SL_BITS);
        return;
    }
    if (ci < LIST_CLASSES) {
        list_push(ix, x, ci, v);
        return;
    }
    if (key_less(x, v)) {
        ix->mins[ci] = x;
        if (v->prio >= x->prio) { /* x becomes the old minimum's left leaf */
            x->left = x->right = NULL;
            x->parent = v;
            v->left = x;
            return;
        }
    } else {
        struct chunk *root = ix->roots[ci];
        if (key_less(root, x)) {
            v = root;
        } else {
            while ((parent = v->parent) && key_less(parent, x))
                v = parent;
        }
        if (v->prio >= x->prio) {
            parent = v;
            link = &v->right;
            while (*link && (*link)->prio >= x->prio) {
                parent = *link;
                link = key_less(x, parent) ? &parent->left : &parent->right;
            }
            index_place(x, link, parent);
            return;
        }
    }
    /* v is on the spine and below x's priority: so is every spine node under it */
    while ((parent = v->parent) && parent->prio < x->prio)
        v = parent;
    index_place(x, parent ? &parent->left : &ix->roots[ci], parent);
}

/* Adds x, a free chunk that is in no index, to ix (index_insert_at). */
static void index_insert(struct free_index *ix, struct chunk *x)
{
    index_insert_at(ix, x, size_class(x->size));
}

/* Removes x, its class's minimum (no left subtree, a left child or the root), from
 * the index: its right subtree takes its place, and its successor, the leftmost
 * chunk of that subtree or else its parent, becomes the minimum. */
static inline void index_unlink_min(struct free_index *ix, struct chunk *x)
{
    unsigned ci = x->cls;
    struct chunk *p = x->parent, *r = x->right;
    ix->mins[ci] = index_min_successor(x);
    if (r)
        r->parent = p;
    if (p) {
        p->left = r;
    } else {
        ix->roots[ci] = r;
        if (!r)
            index_class_emptied(ix, ci);
    }
}

/* Removes x, a chunk in the index, from its class (the one it was filed in, kept in
 * the record: its key may have changed since): its subtrees merge into its place
 * (an expected constant number of steps in a treap). The class minimum takes the
 * shorter path of index_unlink_min. */
static inline void index_unlink(struct free_index *ix, struct chunk *x)
{
    unsigned ci = x->cls;
    if (x == ix->mins[ci]) {
        index_unlink_min(ix, x);
        return;
    }
    struct chunk *p = x->parent, *l = x->left, *r = x->right;
    struct chunk **link = !p ? &ix->roots[ci] : p->left == x ? &p->left : &p->right;
    if (!l || !r) {
        struct chunk *c = l ? l : r;
        *link = c;
        if (c)
            c->parent = p;
        else if (!p) /* a root without children: the class is now empty */
            index_class_emptied(ix, ci);
        return;
    }
    do {
        if (l->prio >= r->prio) {
            *link = l;
            l->parent = p;
            p = l;
            link = &l->right;
            l = l->right;
        } else {
            *link = r;
            r->parent = p;
            p = r;
            link = &r->left;
            r = r->left;
        }
    } while (l && r);
    *link = l ? l : r;
    if (*link)
        (*link)->parent = p;
}

/* Inlined into its two call sites in gpumem__arena_free: as a call it cost about 14
 * instructions of entry and exit per merge (6 per operation on training).
 * x, a free chunk in the index, grows to [addr, addr + size) with size > x->size:
 * its key only increases, so it keeps its place when it stays in its class and
 * does not pass its successor (index_successor says what finding it costs);
 * otherwise it is filed again. A minimum that keeps its place stays the minimum. */
static inline void index_grow(struct free_index *ix, struct chunk *x, uint64_t addr,
                              uint64_t size)
{
    unsigned ci = size_class(size);
    if (ci == x->cls) {
        const struct chunk *succ = index_successor(x);
        if (!succ || size < succ->size || (size == succ->size && addr < succ->addr)) {
            x->addr = addr;
            x->size = size;
            return;
        }
    }
    index_unlink(ix, x);
    x->addr = addr;
    x->size = size;
    index_insert_at(ix, x, ci);
}

/* The best fit for `size`: the smallest free chunk of at least `size` bytes, among
 * equals the lowest-addressed or a list's head; NULL if none. Every chunk of a higher
 * class is larger than every chunk of the request's class, so only that class needs a
 * search, and only when its minimum is too small (never in a class of one size);
 * the next non-empty one comes from the bitmaps and gives its minimum. */
static inline struct chunk *index_find(const struct free_index *ix, uint64_t size)
{
    unsigned ci = size_class(size);
    struct chunk *best = ix->mins[ci];
    if (best && best->size < size) {
        best = NULL;
        for (struct chunk *t = ix->roots[ci]; t;) {
            if (t->size >= size) {
                best = t;
                t = t->left;
            } else {
                t = t->right;
            }
        }
    }
    if (!best) {
        /* the next non-empty class above ci: in ci's word (the bits above sl: the
         * mask is shifted in 64 bits, so sl = SL_COUNT - 1 leaves none of the
         * word's), else in a higher one (fl < FL_COUNT <= 63: no bit is lost) */
        unsigned fl = ci >> SL_BITS, sl = ci & (SL_COUNT - 1);
        uint32_t sm = (uint32_t)(ix->sl_map[fl] & (~UINT64_C(1) << sl));
        if (!sm) {
            uint64_t fm = ix->fl_map & (~UINT64_C(1) << fl);
            if (!fm)
                return NULL;
            fl = lsb64(fm);
            sm = ix->sl_map[fl];
        }
        best = ix->mins[(fl << SL_BITS) + lsb64(sm)];
    }
    return best;
}

/* --------------------------------------------------------------- live hash -- */

/* Fibonacci hashing of the address itself: its low 8 bits are zero, which only
 * shifts the product's well-mixed high bits by 8, and saves a shift on every
 * lookup, insertion and backward shift. */
static inline size_t live_home(const struct arena *a, uint64_t addr)
{
    return (size_t)((addr * UINT64_C(0x9E3779B97F4A7C15)) >> a->live_shift);
}

/* The used chunk that starts at addr and its slot, or NULL. */
static inline struct chunk *live_find(const struct arena *a, uint64_t addr, size_t *slot)
{
    size_t mask = a->live_mask;
    for (size_t i = live_home(a, addr);; i = (i + 1) & mask) {
        const struct live_slot *s = &a->live[i];
        if (s->addr == addr && s->chunk) {
            *slot = i;
            return s->chunk;
        }
        if (!s->chunk)
            return NULL;
    }
}

/* Makes t, `cap` empty slots (a power of two), the live hash. */
static void live_reset(struct arena *a, struct live_slot *t, size_t cap)
{
    a->live = t;
    a->live_mask = cap - 1;
    a->live_limit = cap / 2;
    a->live_shift = 64 - msb64(cap);
    a->live_count = 0;
}

/* pre: live_make_room succeeded since the last insert. */
static inline void live_insert(struct arena *a, struct chunk *c)
{
    size_t mask = a->live_mask, i = live_home(a, c->addr);
    while (a->live[i].chunk)
        i = (i + 1) & mask;
    a->live[i].addr = c->addr;
    a->live[i].chunk = c;
    a->live_count++;
}

/* Empties slot i and shifts back the entries of its probe run that may move. */
static inline void live_delete(struct arena *a, size_t i)
{
    size_t mask = a->live_mask;
    for (size_t j = (i + 1) & mask; a->live[j].chunk; j = (j + 1) & mask) {
        size_t home = live_home(a, a->live[j].addr);
        /* the entry at j may fill the hole at i unless its home lies in (i, j] */
        if (((j - home) & mask) >= ((j - i) & mask)) {
            a->live[i] = a->live[j];
            i = j;
        }
    }
    a->live[i].chunk = NULL; /* an empty slot's addr means nothing: lookups test chunk */
    a->live_count--;
}

/* Makes room for one more entry, keeping the load at most 1/2 (short probe runs:
 * lookups, inserts and deletions touch about two slots); false on host OOM. */
static bool live_grow(struct arena *a)
{
    size_t old_cap = a->live_mask + 1, cap = old_cap * 2;
    if (cap > SIZE_MAX / sizeof(struct live_slot))
        return false;
    struct live_slot *t = host_alloc(a, cap * sizeof *t);
    if (!t)
        return false;
    memset(t, 0, cap * sizeof *t);
    struct live_slot *old = a->live;
    live_reset(a, t, cap);
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].chunk)
            live_insert(a, old[i].chunk);
    if (old != a->live_first)
        host_free(a, old, old_cap * sizeof *old);
    return true;
}

static inline bool live_make_room(struct arena *a)
{
    return a->live_count < a->live_limit || live_grow(a);
}

/* ----------------------------------------------------------------- lookups -- */

/* Number of regions whose base is below addr. */
static size_t regions_below(const struct arena *a, uint64_t addr)
{
    size_t lo = 0, hi = a->nregions;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (a->regions[mid].base < addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Number of segments whose base is below addr. */
static size_t segs_below(const struct arena *a, uint64_t addr)
{
    size_t lo = 0, hi = a->nsegs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (a->segs[mid].base < addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The free chunks, counted from what is kept anyway (the hot paths keep no count
 * of their own): the records in use are the chunks, free and used, and two
 * sentinels per segment. */
static size_t free_chunks(const struct arena *a)
{
    return a->head.records_total - a->head.spare_count - 2 * a->nsegs - a->live_count;
}

/* ---------------------------------------------------------------- the API -- */

int gpumem__arena_create(const struct arena_host_allocator *host, struct arena **out)
{
    struct arena_host_allocator h = {default_alloc, default_free, NULL};
    if (host)
        h = *host;
    struct arena *a = h.alloc(h.ctx, sizeof *a);
    if (!a)
        return ARENA_HOST_OOM;
    memset(a, 0, sizeof *a);
    a->host = h;
    a->metadata_bytes = sizeof *a;
    a->rng = UINT64_C(0x853C49E6748FEA9B);
    a->ixs[0] = &a->ix0;
    a->joins[0] = 1;
    live_reset(a, a->live_first, LIVE_MIN_SLOTS);
    *out = a;
    return ARENA_OK;
}

void gpumem__arena_destroy(struct arena *a)
{
    if (!a)
        return;
    while (a->blocks) {
        struct slab_block *b = a->blocks;
        a->blocks = b->next;
        host_free(a, b, slab_block_bytes(b->count));
    }
    if (a->live != a->live_first)
        host_free(a, a->live, (a->live_mask + 1) * sizeof *a->live);
    host_free(a, a->regions, a->regions_cap * sizeof *a->regions);
    host_free(a, a->segs, a->segs_cap * sizeof *a->segs);
    for (unsigned o = 1; o < ARENA_OWNERS; o++)
        host_free(a, a->ixs[o], sizeof *a->ixs[o]);
    a->host.free(a->host.ctx, a);
}

/* x becomes a free chunk of `owner` (then filed in its index). */
static inline void mark_free(struct chunk *x, unsigned owner)
{
    x->state = owner ? CHUNK_OWNED : CHUNK_FREE;
    x->owner = (uint8_t)owner;
}

/* slab_put for a record that may have been an owner's (its owner byte cleared:
 * struct chunk). */
static inline void slab_put_any(struct arena *a, struct chunk *c)
{
    c->owner = 0;
    slab_put(a, c);
}

/* Owner o's free index (a constant offset for owner 0, the plain path's). */
static inline struct free_index *ix_of(struct arena *a, unsigned owner)
{
    return owner ? a->ixs[owner] : &a->ix0;
}

static inline bool chunk_is_free(const struct chunk *c)
{
    return c->state == CHUNK_FREE || c->state == CHUNK_OWNED;
}

/* Whether a chunk that becomes free as `owner`'s joins its neighbour x: x is
 * free, and owner 0's (every owner joins those) or of an owner `owner` joins.
 * For owner 0, a constant on the plain path, it is the test of x's state alone. */
static inline bool joins(const struct arena *a, unsigned owner, const struct chunk *x)
{
    if (x->state == CHUNK_FREE)
        return true;
    return owner != 0 && x->state == CHUNK_OWNED && (a->joins[owner] >> x->owner & 1);
}

/* c, linked into its segment and in no index, becomes a free chunk of `owner`:
 * it joins the free neighbours that `owner` joins, then theirs, as long as they
 * join (the merged chunk is `owner`'s), and is filed. Returns the chunk it ended
 * in. A neighbour of owner 0 may lie between two of `owner`'s, which it kept
 * apart: joining it makes them neighbours, so the walk goes on past it (each step
 * removes a chunk for good: amortized O(1) per free). For owner 0 the walk stops
 * after a step: no two chunks of owner 0 are neighbours. gpumem__arena_free does
 * owner 0's with fewer steps for a chunk that keeps its neighbour's place. */
static struct chunk *settle(struct arena *a, struct chunk *c, unsigned owner)
{
    struct chunk *p, *n;
    while (joins(a, owner, p = c->prev)) {
        index_unlink(ix_of(a, p->owner), p);
        p->size += c->size;
        link_pair(p, c->next);
        slab_put_any(a, c);
        c = p;
    }
    while (joins(a, owner, n = c->next)) {
        index_unlink(ix_of(a, n->owner), n);
        c->size += n->size;
        link_pair(c, n->next);
        slab_put_any(a, n);
    }
    mark_free(c, owner);
    index_insert(ix_of(a, owner), c);
    return c;
}

/* gpumem__arena_add_region, its memory free as `owner`'s. */
static int add_region(struct arena *a, uint64_t base, uint64_t size, bool contiguous,
                      unsigned owner)
{
    uint64_t end;
    if (size == 0 || ((base | size) & (ARENA_GRANULE - 1)) ||
        !gpumem__add_u64(base, size, &end) || owner >= ARENA_OWNERS || !a->ixs[owner])
        return ARENA_BAD_RANGE;
    size_t ri = regions_below(a, base);
    const struct region *lr = ri > 0 ? &a->regions[ri - 1] : NULL;
    const struct region *rr = ri < a->nregions ? &a->regions[ri] : NULL;
    if ((lr && lr->base + lr->size > base) || (rr && rr->base < end))
        return ARENA_BAD_RANGE;
    /* lr ends its segment and rr begins its own: nothing else lies in between */
    bool join_l = contiguous && lr && lr->contiguous && lr->base + lr->size == base;
    bool join_r = contiguous && rr && rr->contiguous && rr->base == end;
    size_t si = segs_below(a, base);

    struct region *regions =
        array_room(a, a->regions, a->nregions, &a->regions_cap, sizeof *regions);
    if (!regions)
        return ARENA_HOST_OOM;
    a->regions = regions;
    if (!join_l && !join_r) {
        struct segment *segs =
            array_room(a, a->segs, a->nsegs, &a->segs_cap, sizeof *segs);
        if (!segs)
            return ARENA_HOST_OOM;
        a->segs = segs;
    }
    if (!slab_ensure_spare(a, join_l || join_r ? 1 : 3))
        return ARENA_HOST_OOM;

    /* The region's chunk goes between the chunks it touches (or the segment's
     * sentinels), then joins the free ones its owner joins. */
    struct chunk *c = slab_take(a);
    c->addr = base;
    c->size = size;
    if (join_l && join_r) {
        struct segment *ls = &a->segs[si - 1], *rs = &a->segs[si];
        link_pair(ls->tail->prev, c);
        link_pair(c, rs->head->next);
        slab_put(a, ls->tail);
        slab_put(a, rs->head);
        ls->end = rs->end;
        ls->tail = rs->tail;
        memmove(rs, rs + 1, (a->nsegs - si - 1) * sizeof *rs);
        a->nsegs--;
    } else if (join_l) {
        struct segment *ls = &a->segs[si - 1];
        struct chunk *t = ls->tail;
        link_pair(t->prev, c);
        link_pair(c, t);
        t->addr = end;
        ls->end = end;
    } else if (join_r) {
        struct segment *rs = &a->segs[si];
        struct chunk *h = rs->head;
        link_pair(c, h->next);
        link_pair(h, c);
        h->addr = base;
        rs->base = base;
    } else {
        struct chunk *h = slab_take(a), *t = slab_take(a);
        make_sentinel(h, base);
        make_sentinel(t, end);
        h->prev = NULL;
        t->next = NULL;
        link_pair(h, c);
        link_pair(c, t);
        memmove(&a->segs[si + 1], &a->segs[si], (a->nsegs - si) * sizeof *a->segs);
        a->segs[si] = (struct segment){base, end, h, t};
        a->segs_formed++;
        if (++a->nsegs > a->segs_peak)
            a->segs_peak = a->nsegs;
    }
    settle(a, c, owner);
    memmove(&a->regions[ri + 1], &a->regions[ri],
            (a->nregions - ri) * sizeof *a->regions);
    a->regions[ri] = (struct region){base, size, contiguous, false};
    a->nregions++;
    a->capacity += size;
    return ARENA_OK;
}

int gpumem__arena_add_region(struct arena *a, uint64_t base, uint64_t size,
                             bool contiguous)
{
    return add_region(a, base, size, contiguous, 0);
}

int gpumem__arena_add_region_owned(struct arena *a, uint64_t base, uint64_t size,
                                   bool contiguous, unsigned owner)
{
    return add_region(a, base, size, contiguous, owner);
}

/* The best fit for `need` bytes among the free chunks of the owners in
 * `owners` (bit 0, owner 0's, always): each index's best fit, the smallest of
 * them (among equals, the lowest address). */
static struct chunk *find_among(const struct arena *a, uint64_t need, uint64_t owners)
{
    struct chunk *c = index_find(&a->ix0, need);
    for (uint64_t m = owners & ~UINT64_C(1); m; m &= m - 1) {
        const struct free_index *ix = a->ixs[lsb64(m)];
        struct chunk *d = ix ? index_find(ix, need) : NULL;
        if (d && (!c || key_less(d, c)))
            c = d;
    }
    return c;
}

/* gpumem__arena_alloc, gpumem__arena_alloc_user (user NULL: zeros) and
 * gpumem__arena_alloc_owned, inlined into each, so that the owner's words and
 * the owners cost the plain path nothing but the zeros and a test. */
static inline __attribute__((always_inline)) int arena_alloc(
    struct arena *a, uint64_t size, uint64_t owners, const uint64_t *user, uint64_t *addr,
    uint64_t *chunk_size, uint64_t *rest_out)
{
    uint64_t need = ARENA_GRANULE;
    if (size > ARENA_GRANULE && !gpumem__align_up(size, ARENA_GRANULE, &need))
        return ARENA_NO_FIT;
    struct chunk *c =
        owners > 1 ? find_among(a, need, owners) : index_find(&a->ix0, need);
    if (!c)
        return ARENA_NO_FIT;
    struct free_index *ix = owners > 1 ? ix_of(a, c->owner) : &a->ix0;
    uint64_t rest = c->size - need;
    if (!live_make_room(a) || (rest && !a->spare && !slab_ensure_spare(a, 1)))
        return ARENA_HOST_OOM;
    if (rest) {
        /* The allocation takes the low end in a new record; c stays free with the
         * rest (its owner's), and keeps its place in the index (no tree work at
         * all) when c is its class's minimum and the rest stays in that class: a
         * minimum whose key decreases stays the minimum. That is the common case: a
         * best fit whose rest stays in its class came from a class above the
         * request's (a rest is smaller than a class's width, hence below the class,
         * when the request and c share one), so it is that class's minimum. */
        struct chunk *u = slab_take(a);
        uint64_t base = c->addr + need;
        u->addr = c->addr;
        u->size = need;
        link_pair(c->prev, u);
        link_pair(u, c);
        unsigned ci = size_class(rest);
        if (ci == c->cls && c == ix->mins[ci]) {
            c->addr = base;
            c->size = rest;
        } else {
            index_unlink(ix, c);
            c->addr = base;
            c->size = rest;
            index_insert_at(ix, c, ci);
        }
        c = u;
    } else {
        index_unlink(ix, c);
        if (owners > 1) /* it may have been an owner's */
            c->owner = 0;
    }
    c->state = CHUNK_USED;
    for (unsigned i = 0; i < ARENA_USER_WORDS; i++)
        c->user[i] = user ? user[i] : 0;
    live_insert(a, c);
    a->allocated += need;
    *addr = c->addr;
    *chunk_size = need;
    if (rest_out) /* NULL, a constant, in the plain calls */
        *rest_out = rest;
    return ARENA_OK;
}

int gpumem__arena_alloc(struct arena *a, uint64_t size, uint64_t *addr,
                        uint64_t *chunk_size)
{
    return arena_alloc(a, size, 1, NULL, addr, chunk_size, NULL);
}

int gpumem__arena_alloc_user(struct arena *a, uint64_t size,
                             const uint64_t user[ARENA_USER_WORDS], uint64_t *addr,
                             uint64_t *chunk_size)
{
    return arena_alloc(a, size, 1, user, addr, chunk_size, NULL);
}

int gpumem__arena_alloc_owned(struct arena *a, uint64_t size, uint64_t owners,
                              const uint64_t user[ARENA_USER_WORDS], uint64_t *addr,
                              uint64_t *chunk_size)
{
    return arena_alloc(a, size, owners | 1, user, addr, chunk_size, NULL);
}

int gpumem__arena_alloc_user_rest(struct arena *a, uint64_t size,
                                  const uint64_t user[ARENA_USER_WORDS], uint64_t *addr,
                                  uint64_t sizes[2])
{
    return arena_alloc(a, size, 1, user, addr, &sizes[0], &sizes[1]);
}

int gpumem__arena_alloc_owned_rest(struct arena *a, uint64_t size, uint64_t owners,
                                   const uint64_t user[ARENA_USER_WORDS], uint64_t *addr,
                                   uint64_t sizes[2])
{
    return arena_alloc(a, size, owners | 1, user, addr, &sizes[0], &sizes[1]);
}

/* gpumem__arena_free and gpumem__arena_free_owned: the chunk becomes `owner`'s
 * free memory. Owner 0's (the plain path, `owner` a constant 0 there): a free
 * neighbour absorbs it and keeps its place (the left one keeps its address, so
 * its key only grows). Another owner's: settle. `into` (owner 0's only; NULL,
 * a constant, on the plain path): the free chunk it ended in. */
static inline __attribute__((always_inline)) int arena_free(struct arena *a,
                                                            uint64_t addr, unsigned owner,
                                                            uint64_t *chunk_size,
                                                            struct chunk **into)
{
    size_t slot;
    struct chunk *c = live_find(a, addr, &slot);
    if (!c)
        return ARENA_BAD_ADDRESS;
    live_delete(a, slot);
    uint64_t size = c->size;
    a->allocated -= size;
    if (owner != 0) {
        settle(a, c, owner);
        if (chunk_size)
            *chunk_size = size;
        return ARENA_OK;
    }
    /* sentinels are never free, so both neighbours exist */
    struct chunk *p = c->prev, *n = c->next;
    struct free_index *ix = &a->ix0;
    if (p->state == CHUNK_FREE) {
        uint64_t merged = p->size + size;
        if (n->state == CHUNK_FREE) {
            index_unlink(ix, n);
            merged += n->size;
            link_pair(p, n->next);
            slab_put(a, n);
        } else {
            link_pair(p, n);
        }
        slab_put(a, c);
        index_grow(ix, p, p->addr, merged);
        if (into)
            *into = p;
    } else if (n->state == CHUNK_FREE) {
        link_pair(p, n);
        slab_put(a, c);
        index_grow(ix, n, addr, n->size + size);
        if (into)
            *into = n;
    } else {
        c->state = CHUNK_FREE; /* its owner byte is 0 already */
        index_insert(ix, c);
        if (into)
            *into = c;
    }
    if (chunk_size)
        *chunk_size = size;
    return ARENA_OK;
}

int gpumem__arena_free(struct arena *a, uint64_t addr, uint64_t *chunk_size)
{
    return arena_free(a, addr, 0, chunk_size, NULL);
}

static inline bool is_sentinel(const struct chunk *c)
{
    return c->state == CHUNK_SENTINEL;
}

int gpumem__arena_free_whole(struct arena *a, uint64_t addr, uint64_t *chunk_size,
                             uint64_t *whole)
{
    struct chunk *into = NULL;
    int r = arena_free(a, addr, 0, chunk_size, &into);
    *whole = r == ARENA_OK && is_sentinel(into->prev) && is_sentinel(into->next)
                 ? into->size
                 : 0;
    return r;
}

int gpumem__arena_free_owned(struct arena *a, uint64_t addr, unsigned owner,
                             uint64_t *chunk_size)
{
    if (owner >= ARENA_OWNERS || !a->ixs[owner])
        return ARENA_BAD_ADDRESS;
    return arena_free(a, addr, owner, chunk_size, NULL);
}

/* ---------------------------------------------------------------- owners -- */

int gpumem__arena_owner_open(struct arena *a, unsigned owner)
{
    if (owner == 0 || owner >= ARENA_OWNERS)
        return ARENA_BAD_RANGE;
    if (a->ixs[owner])
        return ARENA_OK;
    struct free_index *ix = host_alloc(a, sizeof *ix);
    if (!ix)
        return ARENA_HOST_OOM;
    memset(ix, 0, sizeof *ix);
    a->ixs[owner] = ix;
    a->joins[owner] = UINT64_C(1) | UINT64_C(1) << owner;
    return ARENA_OK;
}

void gpumem__arena_owner_close(struct arena *a, unsigned owner)
{
    if (owner == 0 || owner >= ARENA_OWNERS || !a->ixs[owner])
        return;
    gpumem__arena_disown(a, owner);
    host_free(a, a->ixs[owner], sizeof *a->ixs[owner]);
    a->ixs[owner] = NULL;
    a->joins[owner] = 0;
    for (unsigned o = 1; o < ARENA_OWNERS; o++) /* nobody joins it any more */
        a->joins[o] &= ~(UINT64_C(1) << owner);
}

void gpumem__arena_set_joins(struct arena *a, unsigned owner, uint64_t owners)
{
    if (owner == 0 || owner >= ARENA_OWNERS || !a->ixs[owner])
        return;
    for (uint64_t m = owners; m; m &= m - 1) /* only open owners */
        if (!a->ixs[lsb64(m)])
            owners &= ~(UINT64_C(1) << lsb64(m));
    a->joins[owner] = owners | UINT64_C(1) | UINT64_C(1) << owner;
}

uint64_t gpumem__arena_disown(struct arena *a, unsigned owner)
{
    if (owner == 0 || owner >= ARENA_OWNERS || !a->ixs[owner])
        return 0;
    struct free_index *ix = a->ixs[owner];
    uint64_t bytes = 0;
    while (ix->fl_map) {
        unsigned fl = lsb64(ix->fl_map);
        struct chunk *c = ix->mins[(fl << SL_BITS) + lsb64(ix->sl_map[fl])];
        index_unlink(ix, c);
        bytes += c->size;
        settle(a, c, 0);
    }
    return bytes;
}

bool gpumem__arena_owner_empty(const struct arena *a, unsigned owner)
{
    return owner >= ARENA_OWNERS || !a->ixs[owner] || !a->ixs[owner]->fl_map;
}

/* ----------------------------------------------- the pool's split counts -- */

const struct arena_head *gpumem__arena_head(const struct arena *a) { return &a->head; }

void gpumem__arena_free_counts(const struct arena *a, uint64_t *chunks, uint64_t *bytes,
                               uint64_t *segments)
{
    *chunks = free_chunks(a);
    *bytes = a->capacity - a->allocated;
    *segments = a->nsegs;
}

bool gpumem__arena_took_whole(const struct arena *a, uint64_t addr, uint64_t rest)
{
    size_t slot;
    const struct chunk *c = live_find(a, addr, &slot);
    if (!c)
        return false;
    const struct chunk *n = rest ? c->next->next : c->next; /* past the rest */
    return is_sentinel(c->prev) && is_sentinel(n);
}

uint64_t gpumem__arena_whole_free_at(const struct arena *a, uint64_t addr)
{
    size_t si = segs_below(a, addr + 1); /* the segments that begin at or below addr */
    if (si == 0 || a->segs[si - 1].end <= addr)
        return 0;
    const struct segment *seg = &a->segs[si - 1];
    const struct chunk *c = seg->head->next;
    return c->next == seg->tail && chunk_is_free(c) ? c->size : 0;
}

bool gpumem__arena_free_preview(const struct arena *a, uint64_t addr, unsigned owner,
                                void (*visit)(void *ctx, uint64_t addr, uint64_t size),
                                void *ctx, bool *whole)
{
    size_t slot;
    const struct chunk *c = live_find(a, addr, &slot);
    if (!c || owner >= ARENA_OWNERS || (owner && !a->ixs[owner]))
        return false;
    /* settle's walk (owner 0's free is its first step each way): joining
     * changes no other chunk, so the chunks it joins are the runs of joining
     * neighbours on either side */
    const struct chunk *p = c->prev, *n = c->next;
    for (; joins(a, owner, p); p = p->prev)
        visit(ctx, p->addr, p->size);
    for (; joins(a, owner, n); n = n->next)
        visit(ctx, n->addr, n->size);
    *whole = is_sentinel(p) && is_sentinel(n);
    return true;
}

void gpumem__arena_walk_whole_free(const struct arena *a,
                                   void (*visit)(void *ctx, uint64_t base, uint64_t size),
                                   void *ctx)
{
    for (size_t s = 0; s < a->nsegs; s++) {
        const struct chunk *c = a->segs[s].head->next;
        if (c->next == a->segs[s].tail && chunk_is_free(c))
            visit(ctx, c->addr, c->size);
    }
}

uint64_t gpumem__arena_lookup(const struct arena *a, uint64_t addr)
{
    size_t slot;
    const struct chunk *c = live_find(a, addr, &slot);
    return c ? c->size : 0;
}

uint64_t gpumem__arena_user(const struct arena *a, uint64_t addr,
                            uint64_t user[ARENA_USER_WORDS])
{
    size_t slot;
    const struct chunk *c = live_find(a, addr, &slot);
    if (!c)
        return 0;
    for (unsigned i = 0; i < ARENA_USER_WORDS; i++)
        user[i] = c->user[i];
    return c->size;
}

bool gpumem__arena_set_user(struct arena *a, uint64_t addr,
                            const uint64_t user[ARENA_USER_WORDS])
{
    size_t slot;
    struct chunk *c = live_find(a, addr, &slot);
    if (!c)
        return false;
    for (unsigned i = 0; i < ARENA_USER_WORDS; i++)
        c->user[i] = user[i];
    return true;
}

uint64_t gpumem__arena_release_free_regions(
    struct arena *a, void (*release)(void *ctx, uint64_t base, uint64_t size), void *ctx)
{
    /* Plan without changing anything: mark the regions that lie wholly inside one
     * free chunk, and count the runs of marked regions (each run is carved out of one
     * chunk: two touching marked regions cannot lie in different free chunks, which
     * would be adjacent) and the stretches of kept regions (the segments after). */
    size_t nrel = 0, runs = 0, nsegs = 0, ri = 0, split = 0;
    for (size_t s = 0; s < a->nsegs; s++) {
        const struct segment *seg = &a->segs[s];
        const struct chunk *c = seg->head->next;
        bool first = true, prev_rel = false;
        size_t before = nsegs;
        for (; ri < a->nregions && a->regions[ri].base < seg->end; ri++) {
            struct region *r = &a->regions[ri];
            while (c->addr + c->size <= r->base)
                c = c->next;
            r->release = c->state == CHUNK_FREE && r->base + r->size <= c->addr + c->size;
            if (r->release) {
                nrel++;
                runs += !prev_rel;
            } else {
                nsegs += first || prev_rel;
            }
            first = false;
            prev_rel = r->release;
        }
        /* a segment cut in k pieces: k - 1 new ones (segs_formed) */
        split += nsegs - before > 1 ? nsegs - before - 1 : 0;
    }
    if (!nrel)
        return 0;

    /* Reserve: the new segment array, the list of released regions, and per run at
     * most three records (a tail sentinel, a head sentinel, a right-hand piece). */
    struct segment *segs = NULL;
    struct region *gone = NULL;
    if ((nsegs && !(segs = host_alloc(a, nsegs * sizeof *segs))) ||
        !(gone = host_alloc(a, nrel * sizeof *gone)) || !slab_ensure_spare(a, 3 * runs)) {
        for (size_t i = 0; i < a->nregions; i++)
            a->regions[i].release = false;
        host_free(a, segs, nsegs * sizeof *segs);
        host_free(a, gone, nrel * sizeof *gone);
        return 0;
    }

    /* Carve, compacting the regions in place and writing the segments afresh. */
    size_t nout = 0, w = 0, g = 0;
    ri = 0;
    for (size_t s = 0; s < a->nsegs; s++) {
        const struct segment seg = a->segs[s];
        struct chunk *h = seg.head, *c = h->next;
        uint64_t cur = seg.base; /* the part of seg still to emit starts here, at h */
        bool open = true;
        while (ri < a->nregions && a->regions[ri].base < seg.end) {
            struct region r = a->regions[ri++];
            if (!r.release) {
                a->regions[w++] = r;
                continue;
            }
            uint64_t rb = r.base, re = r.base + r.size;
            r.release = false;
            gone[g++] = r;
            while (ri < a->nregions && a->regions[ri].release &&
                   a->regions[ri].base < seg.end) {
                r = a->regions[ri++];
                r.release = false;
                gone[g++] = r;
                re = r.base + r.size;
            }
            while (c->addr + c->size <= rb)
                c = c->next;
            struct chunk *before = c->prev, *after = c->next;
            uint64_t cend = c->addr + c->size;
            bool lpiece = c->addr < rb, rpiece = re < cend;
            bool lcontent = rb > cur, rcontent = re < seg.end;
            struct chunk *last = before, *first = after;
            index_unlink(&a->ix0, c);
            if (lpiece) {
                c->size = rb - c->addr;
                index_insert(&a->ix0, c);
                last = c;
            }
            if (rpiece) {
                struct chunk *rp = lpiece ? slab_take(a) : c;
                rp->addr = re;
                rp->size = cend - re;
                rp->state = CHUNK_FREE;
                link_pair(rp, after);
                index_insert(&a->ix0, rp);
                first = rp;
            } else if (!lpiece) {
                slab_put(a, c);
            }
            if (lcontent) {
                struct chunk *t = rcontent ? slab_take(a) : seg.tail;
                make_sentinel(t, rb);
                link_pair(last, t);
                t->next = NULL;
                segs[nout++] = (struct segment){cur, rb, h, t};
            }
            if (rcontent) {
                struct chunk *nh = lcontent ? slab_take(a) : h;
                make_sentinel(nh, re);
                nh->prev = NULL;
                link_pair(nh, first);
                h = nh;
                cur = re;
                c = first;
            } else {
                if (!lcontent) {
                    slab_put(a, h);
                    slab_put(a, seg.tail);
                }
                open = false;
            }
            a->capacity -= re - rb;
        }
        if (open)
            segs[nout++] = (struct segment){cur, seg.end, h, seg.tail};
    }
    assert(nout == nsegs && g == nrel);
    a->nregions = w;
    host_free(a, a->segs, a->segs_cap * sizeof *a->segs);
    a->segs = segs;
    a->nsegs = a->segs_cap = nsegs;
    a->segs_formed += split;
    if (a->nsegs > a->segs_peak)
        a->segs_peak = a->nsegs;

    uint64_t bytes = 0;
    for (size_t i = 0; i < nrel; i++) {
        bytes += gone[i].size;
        if (release)
            release(ctx, gone[i].base, gone[i].size);
    }
    host_free(a, gone, nrel * sizeof *gone);
    return bytes;
}

uint64_t gpumem__arena_free_tail_owned(const struct arena *a, uint64_t end,
                                       unsigned *owner)
{
    /* the segment that ends at `end` starts below it */
    size_t si = segs_below(a, end);
    if (si == 0 || a->segs[si - 1].end != end)
        return 0;
    const struct chunk *last = a->segs[si - 1].tail->prev;
    if (!chunk_is_free(last))
        return 0;
    if (owner)
        *owner = last->owner;
    return last->size;
}

uint64_t gpumem__arena_free_tail(const struct arena *a, uint64_t end)
{
    return gpumem__arena_free_tail_owned(a, end, NULL);
}

/* The largest free chunk of one owner's index; NULL if none. */
static const struct chunk *index_largest(const struct free_index *ix)
{
    if (!ix || !ix->fl_map)
        return NULL;
    unsigned fl = msb64(ix->fl_map), sl = msb64(ix->sl_map[fl]);
    unsigned ci = (fl << SL_BITS) + sl;
    if (ci < LIST_CLASSES)
        return ix->mins[ci];
    const struct chunk *c = ix->roots[ci];
    while (c->right)
        c = c->right;
    return c;
}

uint64_t gpumem__arena_largest_free_owned(const struct arena *a, uint64_t owners)
{
    uint64_t largest = 0;
    for (uint64_t m = owners; m; m &= m - 1) {
        const struct chunk *c = index_largest(a->ixs[lsb64(m)]);
        if (c && c->size > largest)
            largest = c->size;
    }
    return largest;
}

uint64_t gpumem__arena_largest_free(const struct arena *a)
{
    return gpumem__arena_largest_free_owned(a, ~UINT64_C(0));
}

void gpumem__arena_stats(const struct arena *a, struct arena_stats *out)
{
    out->capacity_bytes = a->capacity;
    out->allocated_bytes = a->allocated;
    out->free_bytes = a->capacity - a->allocated;
    out->largest_free = gpumem__arena_largest_free(a);
    out->live_chunks = a->live_count;
    out->free_chunks = free_chunks(a);
    out->regions = a->nregions;
    out->segments = a->nsegs;
    out->metadata_bytes = a->metadata_bytes;
    out->segments_peak = a->segs_peak;
    out->segments_formed = a->segs_formed;
}

void gpumem__arena_reset_peaks(struct arena *a) { a->segs_peak = a->nsegs; }

void gpumem__arena_walk(const struct arena *a,
                        void (*visit)(void *ctx, uint64_t addr, uint64_t size,
                                      bool is_free),
                        void *ctx)
{
    for (size_t s = 0; s < a->nsegs; s++)
        for (const struct chunk *c = a->segs[s].head->next; c != a->segs[s].tail;
             c = c->next)
            visit(ctx, c->addr, c->size, chunk_is_free(c));
}

void gpumem__arena_walk_user(const struct arena *a,
                             void (*segment)(void *ctx, uint64_t base, uint64_t size),
                             void (*chunk)(void *ctx, const struct arena_chunk_info *c),
                             void *ctx)
{
    struct arena_chunk_info info;
    for (size_t s = 0; s < a->nsegs; s++) {
        segment(ctx, a->segs[s].base, a->segs[s].end - a->segs[s].base);
        for (const struct chunk *c = a->segs[s].head->next; c != a->segs[s].tail;
             c = c->next) {
            info.addr = c->addr;
            info.size = c->size;
            info.is_free = chunk_is_free(c);
            info.owner = info.is_free ? c->owner : 0;
            for (unsigned i = 0; i < ARENA_USER_WORDS; i++)
                info.user[i] = info.is_free ? 0 : c->user[i];
            chunk(ctx, &info);
        }
    }
}

/* The chunk before c in its class's order, or NULL: the rightmost of its left
 * subtree, else the first ancestor it lies to the right of (a list is a right
 * spine: its previous chunk). */
static const struct chunk *index_prev(const struct chunk *c)
{
    if (c->left) {
        for (c = c->left; c->right;)
            c = c->right;
        return c;
    }
    while (c->parent && c->parent->left == c)
        c = c->parent;
    return c->parent;
}

void gpumem__arena_walk_free_largest(const struct arena *a, uint64_t min_size,
                                     bool (*visit)(void *ctx, uint64_t addr,
                                                   uint64_t size),
                                     void *ctx)
{
    gpumem__arena_walk_free_largest_of(a, 0, min_size, visit, ctx);
}

void gpumem__arena_walk_free_largest_of(
    const struct arena *a, unsigned owner, uint64_t min_size,
    bool (*visit)(void *ctx, uint64_t addr, uint64_t size), void *ctx)
{
    if (owner >= ARENA_OWNERS || !a->ixs[owner])
        return;
    const struct free_index *ix = a->ixs[owner];
    unsigned low = size_class(min_size);
    for (uint64_t fm = ix->fl_map; fm;) {
        unsigned fl = msb64(fm);
        fm &= ~(UINT64_C(1) << fl);
        for (uint32_t sm = ix->sl_map[fl]; sm;) {
            unsigned sl = msb64(sm), ci = (fl << SL_BITS) + sl;
            sm &= ~(UINT32_C(1) << sl);
            if (ci < low)
                return;
            const struct chunk *c = ix->roots[ci];
            while (c->right)
                c = c->right;
            for (; c && c->size >= min_size; c = index_prev(c))
                if (!visit(ctx, c->addr, c->size))
                    return;
            if (c) /* a chunk below min_size: so is every one after it */
                return;
        }
    }
}

/* ------------------------------------------------------------------ check -- */

GPUMEM_PRINTF(3, 4)
static bool check_fail(char *msg, size_t msg_size, const char *fmt, ...)
{
    if (msg && msg_size) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, msg_size, fmt, ap);
        va_end(ap);
    }
    return false;
}

#define FAIL(...) return check_fail(msg, msg_size, __VA_ARGS__)
#define X(v)      ((unsigned long long)(v))

/* Regions and segments: sorted, disjoint, each segment a maximal run of touching
 * contiguous regions (or one non-contiguous region), capacity adds up. */
static bool check_layout(const struct arena *a, char *msg, size_t msg_size)
{
    uint64_t cap = 0;
    for (size_t i = 0; i < a->nregions; i++) {
        const struct region *r = &a->regions[i];
        uint64_t end;
        if (!r->size || ((r->base | r->size) & (ARENA_GRANULE - 1)) ||
            !gpumem__add_u64(r->base, r->size, &end) || r->release)
            FAIL("region %zu [0x%llx +0x%llx] is malformed", i, X(r->base), X(r->size));
        if (i && a->regions[i - 1].base + a->regions[i - 1].size > r->base)
            FAIL("regions %zu and %zu overlap or are unsorted", i - 1, i);
        cap += r->size;
    }
    if (cap != a->capacity)
        FAIL("regions add up to %llu bytes, capacity says %llu", X(cap), X(a->capacity));
    size_t ri = 0;
    for (size_t s = 0; s < a->nsegs; s++) {
        const struct segment *seg = &a->segs[s];
        if (seg->base >= seg->end)
            FAIL("segment %zu [0x%llx, 0x%llx) is empty", s, X(seg->base), X(seg->end));
        if (s && a->segs[s - 1].end > seg->base)
            FAIL("segments %zu and %zu overlap or are unsorted", s - 1, s);
        if (ri >= a->nregions || a->regions[ri].base != seg->base)
            FAIL("segment %zu does not begin with a region", s);
        if (s && a->segs[s - 1].end == seg->base && a->regions[ri].contiguous &&
            a->regions[ri - 1].contiguous)
            FAIL("segments %zu and %zu touch through contiguous regions", s - 1, s);
        uint64_t at = seg->base;
        bool first = true;
        for (; ri < a->nregions && a->regions[ri].base < seg->end; ri++) {
            const struct region *r = &a->regions[ri];
            if (r->base != at)
                FAIL("segment %zu has a gap at 0x%llx", s, X(at));
            if (!first && (!r->contiguous || !a->regions[ri - 1].contiguous))
                FAIL("segment %zu joins region %zu without both being contiguous", s, ri);
            at = r->base + r->size;
            first = false;
        }
        if (at != seg->end)
            FAIL("segment %zu ends at 0x%llx, its regions at 0x%llx", s, X(seg->end),
                 X(at));
    }
    if (ri != a->nregions)
        FAIL("region %zu lies in no segment", ri);
    return true;
}

/* Each segment tiled by its chunks between its sentinels; no two free neighbours;
 * each used chunk in the live hash; totals add up. */
static bool check_chunks(const struct arena *a, char *msg, size_t msg_size)
{
    uint64_t used_bytes = 0, free_bytes = 0;
    size_t used = 0, nfree = 0, records = 0;
    for (size_t s = 0; s < a->nsegs; s++) {
        const struct segment *seg = &a->segs[s];
        const struct chunk *h = seg->head, *t = seg->tail;
        if (h->state != CHUNK_SENTINEL || h->owner || h->addr != seg->base || h->size ||
            h->prev)
            FAIL("segment %zu: bad head sentinel", s);
        if (t->state != CHUNK_SENTINEL || t->owner || t->addr != seg->end || t->size ||
            t->next)
            FAIL("segment %zu: bad tail sentinel", s);
        records += 2;
        uint64_t at = seg->base;
        const struct chunk *prev = h;
        for (const struct chunk *c = h->next; c != t; prev = c, c = c->next) {
            if (!c || ++records > a->head.records_total)
                FAIL("segment %zu: chunk list broken after 0x%llx", s, X(at));
            if (c->prev != prev)
                FAIL("chunk 0x%llx: prev link broken", X(c->addr));
            if (c->addr != at)
                FAIL("segment %zu: chunk at 0x%llx, expected 0x%llx", s, X(c->addr),
                     X(at));
            if (!c->size || (c->size & (ARENA_GRANULE - 1)) || c->size > seg->end - at)
                FAIL("chunk 0x%llx: bad size 0x%llx", X(c->addr), X(c->size));
            if (chunk_is_free(c)) {
                if ((c->owner != 0) != (c->state == CHUNK_OWNED))
                    FAIL("free chunk 0x%llx of owner %u has state %u", X(c->addr),
                         (unsigned)c->owner, (unsigned)c->state);
                if (chunk_is_free(prev) && prev->owner == c->owner)
                    FAIL("free chunks 0x%llx and 0x%llx of owner %u are adjacent",
                         X(prev->addr), X(c->addr), (unsigned)c->owner);
                if (c->owner >= ARENA_OWNERS || !a->ixs[c->owner])
                    FAIL("free chunk 0x%llx has owner %u, which is not open", X(c->addr),
                         (unsigned)c->owner);
                nfree++;
                free_bytes += c->size;
            } else if (c->state == CHUNK_USED) {
                size_t slot;
                if (c->owner)
                    FAIL("used chunk 0x%llx has owner %u", X(c->addr),
                         (unsigned)c->owner);
                if (live_find(a, c->addr, &slot) != c)
                    FAIL("used chunk 0x%llx is not in the live hash", X(c->addr));
                used++;
                used_bytes += c->size;
            } else {
                FAIL("chunk 0x%llx: bad state %u", X(c->addr), c->state);
            }
            at += c->size;
        }
        if (t->prev != prev || at != seg->end)
            FAIL("segment %zu: chunks end at 0x%llx, not 0x%llx", s, X(at), X(seg->end));
    }
    if (used != a->live_count || used_bytes != a->allocated)
        FAIL("%zu used chunks of %llu bytes; live hash %zu, allocated %llu", used,
             X(used_bytes), a->live_count, X(a->allocated));
    if (nfree != free_chunks(a) || used_bytes + free_bytes != a->capacity)
        FAIL("%zu free chunks of %llu bytes; records say %zu, capacity %llu", nfree,
             X(free_bytes), free_chunks(a), X(a->capacity));
    if (records + a->head.spare_count != a->head.records_total)
        FAIL("%zu records in use and %zu spare, but %zu allocated", records,
             a->head.spare_count, a->head.records_total);
    return true;
}

/* Each class of an owner's index a treap ordered by (size, addr) with
 * heap-ordered priorities, holding free chunks of its class and owner that are
 * linked into a segment; bitmaps match. Adds the chunks and bytes seen to *count
 * and *bytes. */
static bool check_one_index(const struct arena *a, const struct free_index *ix,
                            unsigned owner, size_t *count_out, uint64_t *bytes_out,
                            char *msg, size_t msg_size)
{
    const struct chunk *stack[CHECK_MAX_DEPTH];
    const struct chunk *last = NULL;
    size_t count = *count_out;
    uint64_t bytes = *bytes_out;
    for (unsigned fl = 0; fl < FL_COUNT; fl++) {
        for (unsigned sl = 0; sl < SL_COUNT; sl++) {
            unsigned ci = (fl << SL_BITS) + sl;
            if (ci < LIST_CLASSES) {
                const struct chunk *prev = NULL;
                if (ix->roots[ci] != ix->mins[ci])
                    FAIL("class %u: its head is not its minimum", ci);
                if (!!ix->mins[ci] != !!(ix->sl_map[fl] & (UINT32_C(1) << sl)))
                    FAIL("class %u: bitmap disagrees with the list", ci);
                for (const struct chunk *c = ix->mins[ci]; c; prev = c, c = c->right) {
                    if (c->parent != prev || c->left)
                        FAIL("class %u: list link broken at chunk 0x%llx", ci,
                             X(c->addr));
                    if (!chunk_is_free(c) || !c->size)
                        FAIL("index holds chunk 0x%llx that is not free", X(c->addr));
                    if (c->owner != owner)
                        FAIL("owner %u's index holds chunk 0x%llx of owner %u", owner,
                             X(c->addr), (unsigned)c->owner);
                    if (size_class(c->size) != ci || c->cls != ci)
                        FAIL("chunk 0x%llx of size 0x%llx (filed as %u) is in class %u",
                             X(c->addr), X(c->size), (unsigned)c->cls, ci);
                    if (!c->prev || c->prev->next != c || !c->next || c->next->prev != c)
                        FAIL("free chunk 0x%llx is not linked into a segment",
                             X(c->addr));
                    if (++count > free_chunks(a))
                        FAIL("index holds more than %zu chunks", free_chunks(a));
                    bytes += c->size;
                    last = c;
                }
                continue;
            }
            const struct chunk *root = ix->roots[ci];
            if (!!root != !!(ix->sl_map[fl] & (UINT32_C(1) << sl)))
                FAIL("class (%u, %u): bitmap disagrees with the tree", fl, sl);
            if (root && root->parent)
                FAIL("class (%u, %u): the root has a parent", fl, sl);
            const struct chunk *min = ix->mins[ci];
            if (!root && min)
                FAIL("class (%u, %u): empty, but its minimum is 0x%llx", fl, sl,
                     X(min->addr));
            size_t depth = 0;
            const struct chunk *c = root;
            bool first = true;
            while (c || depth) {
                while (c) {
                    if (depth == CHECK_MAX_DEPTH)
                        FAIL("class (%u, %u): tree deeper than %d", fl, sl,
                             CHECK_MAX_DEPTH);
                    stack[depth++] = c;
                    if (c->left && (c->left->prio > c->prio || c->left->parent != c))
                        FAIL("chunk 0x%llx: treap order or parent link broken",
                             X(c->addr));
                    c = c->left;
                }
                c = stack[--depth];
                if (!chunk_is_free(c) || !c->size)
                    FAIL("index holds chunk 0x%llx that is not free", X(c->addr));
                if (c->owner != owner)
                    FAIL("owner %u's index holds chunk 0x%llx of owner %u", owner,
                         X(c->addr), (unsigned)c->owner);
                unsigned cc = size_class(c->size);
                if (cc != ci || c->cls != ci)
                    FAIL(
                        "chunk 0x%llx of size 0x%llx (class %u, filed as %u) is in class "
                        "(%u, %u)",
                        X(c->addr), X(c->size), cc, (unsigned)c->cls, fl, sl);
                if (first && c != min)
                    FAIL("class (%u, %u): its minimum is 0x%llx, not 0x%llx", fl, sl,
                         X(c->addr), min ? X(min->addr) : X(0));
                first = false;
                if (last && !key_less(last, c))
                    FAIL("index out of order at chunk 0x%llx", X(c->addr));
                if (!c->prev || c->prev->next != c || !c->next || c->next->prev != c)
                    FAIL("free chunk 0x%llx is not linked into a segment", X(c->addr));
                if (++count > free_chunks(a))
                    FAIL("index holds more than %zu chunks", free_chunks(a));
                bytes += c->size;
                last = c;
                if (c->right && (c->right->prio > c->prio || c->right->parent != c))
                    FAIL("chunk 0x%llx: treap order or parent link broken", X(c->addr));
                c = c->right;
            }
        }
        if (!!ix->sl_map[fl] != !!(ix->fl_map & (UINT64_C(1) << fl)))
            FAIL("first-level bitmap disagrees at %u", fl);
    }
    if (ix->fl_map >> FL_COUNT)
        FAIL("first-level bitmap has bits past %d", FL_COUNT);
    *count_out = count;
    *bytes_out = bytes;
    return true;
}

/* Every owner's index (check_one_index), together holding every free chunk;
 * the joins of each owner. */
static bool check_index(const struct arena *a, char *msg, size_t msg_size)
{
    size_t count = 0;
    uint64_t bytes = 0;
    if (a->ixs[0] != &a->ix0 || a->joins[0] != 1)
        FAIL("owner 0's index or joins are wrong");
    for (unsigned o = 0; o < ARENA_OWNERS; o++) {
        if (!a->ixs[o]) {
            if (a->joins[o])
                FAIL("owner %u is not open but has joins 0x%llx", o, X(a->joins[o]));
            continue;
        }
        if (o && (a->joins[o] & (UINT64_C(1) | UINT64_C(1) << o)) !=
                     (UINT64_C(1) | UINT64_C(1) << o))
            FAIL("owner %u does not join its own chunks and owner 0's", o);
        for (uint64_t m = a->joins[o]; m; m &= m - 1)
            if (!a->ixs[lsb64(m)])
                FAIL("owner %u joins owner %u, which is not open", o, lsb64(m));
        if (!check_one_index(a, a->ixs[o], o, &count, &bytes, msg, msg_size))
            return false;
    }
    if (count != free_chunks(a) || bytes != a->capacity - a->allocated)
        FAIL("index holds %zu chunks of %llu bytes, expected %zu of %llu", count,
             X(bytes), free_chunks(a), X(a->capacity - a->allocated));
    return true;
}

/* The live hash: load at most 1/2, every entry a used chunk; the spare list. */
static bool check_live(const struct arena *a, char *msg, size_t msg_size)
{
    size_t cap = a->live_mask + 1;
    if (cap & (cap - 1) || a->live_limit != cap / 2)
        FAIL("live hash capacity %zu is not a power of two", cap);
    if (a->live_count * 2 > cap)
        FAIL("live hash overloaded: %zu of %zu", a->live_count, cap);
    size_t n = 0;
    for (size_t i = 0; i < cap; i++) {
        const struct live_slot *s = &a->live[i];
        if (!s->chunk)
            continue;
        /* reachability from the home slot follows from check_chunks: every used
         * chunk was found by live_find, and there are as many entries as chunks */
        if (s->chunk->state != CHUNK_USED || s->chunk->addr != s->addr)
            FAIL("live slot %zu holds 0x%llx, not a used chunk", i, X(s->addr));
        n++;
    }
    if (n != a->live_count)
        FAIL("live hash holds %zu entries, count says %zu", n, a->live_count);
    size_t spare = 0;
    for (const struct chunk *c = a->spare; c; c = c->next)
        if (++spare > a->head.spare_count || c->state != CHUNK_SPARE || c->owner)
            FAIL("spare list broken after %zu records", spare);
    if (spare != a->head.spare_count)
        FAIL("spare list holds %zu records, count says %zu", spare, a->head.spare_count);
    return true;
}

bool gpumem__arena_check(const struct arena *a, char *msg, size_t msg_size)
{
    if (!a)
        FAIL("arena is NULL");
    if (a->allocated > a->capacity)
        FAIL("allocated %llu exceeds capacity %llu", X(a->allocated), X(a->capacity));
    return check_layout(a, msg, msg_size) && check_chunks(a, msg, msg_size) &&
           check_index(a, msg, msg_size) && check_live(a, msg, msg_size);
}
