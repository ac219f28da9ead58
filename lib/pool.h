/* Pools: one per logical device. A pool owns an arena over the regions it took
 * from its GPU, a budget it never reserves past, a growth policy, and the counters
 * of gpumem_memory_info. Greedy pools reserve their whole budget up front; growing
 * pools take regions on demand; either gives wholly free regions back on request
 * and before reporting that memory ran out.
 *
 * The region map is the runtime's address -> pool index used by gpumem_free: a
 * sorted array of regions searched by bisection. A runtime with one pool frees
 * through that pool directly (its arena's lookup is the whole check) and reads the
 * map only to say why a pointer was refused.
 *
 * Locks: pool->lock guards the arena and the counters, and is held while calling
 * the backend. The region map's lock is a leaf: taken inside pool->lock (growth,
 * release) or alone (lookup in free), never the other way round. */
#ifndef GPUMEM_POOL_H
#define GPUMEM_POOL_H

#include "backend/backend.h"
#include "internal.h"

struct arena;
struct pool;

/* The map from addresses to pools that gpumem_free looks pointers up in. It
 * changes only when a pool takes or gives back a region, and is read on every
 * free, so readers take no lock: it is a sequence lock. A writer (holding
 * `lock`) makes `seq` odd, changes the entries, and makes it even again; a
 * reader searches the entries and retries when `seq` was odd or changed
 * meanwhile. Every shared field is an atomic (acquire loads and release stores
 * are plain moves on x86), so a reader that overlaps a writer reads stale
 * values, never undefined ones, and throws them away. An entry array that is outgrown is
 * kept until the map is destroyed (a reader may still be searching it): the
 * arrays double, so the retired ones add up to less than the current one. */
struct region_entry {
    _Atomic uint64_t base, size;
    struct pool *_Atomic pool;
};

struct region_block {
    size_t capacity;
    struct region_block *retired; /* the outgrown block before this one */
    struct region_entry entries[];
};

struct region_map {
    _Atomic uint64_t seq;               /* odd while a writer changes the map */
    struct region_block *_Atomic block; /* sorted by base, disjoint */
    _Atomic size_t count;
    size_t promised;   /* entries map_reserve_one made room for, not yet inserted
                          (pools add regions under their own locks, concurrently) */
    gpumem_mutex lock; /* writers; also guards `promised` */
};

void gpumem__region_map_init(struct region_map *m);
void gpumem__region_map_destroy(struct region_map *m);
/* In a forked child, of a runtime inherited from the parent: frees this process's
 * copy of the map without waiting on its lock; when a thread of the parent held
 * the lock at the fork, the copy may be half-changed and is left as it is. */
void gpumem__region_map_forget(struct region_map *m);
/* The pool whose region holds addr, or NULL. Lock-free; safe against
 * concurrent insertions and removals. */
struct pool *gpumem__region_map_find(struct region_map *m, uint64_t addr);

struct pool_params {
    struct backend *backend;
    int device;      /* the backend's device index */
    char label[32];  /* "/device:GPU:0": the logical device, for messages */
    uint64_t budget; /* never reserve more; multiple of 256 */
    bool growth;     /* false: reserve the budget at gpumem__pool_reserve_budget */
    const char *budget_reason; /* where the budget came from, for messages */
    struct region_map *map;
    const struct options *opts;
};

gpumem_status gpumem__pool_create(const struct pool_params *p, struct pool **out);
/* Gives every region back to the backend (live allocations are abandoned) and
 * frees the pool. */
void gpumem__pool_destroy(struct pool *pool);
/* In a forked child, of a pool inherited from the parent: frees this process's
 * copy of its bookkeeping (NULL: nothing) without a backend call (the regions
 * are the parent's) and without waiting on its lock (a pool whose lock a thread
 * of the parent held at the fork may be half-changed: it is left as it is). */
void gpumem__pool_forget(struct pool *pool);
/* Greedy pools: reserve the whole budget now (initialization). */
gpumem_status gpumem__pool_reserve_budget(struct pool *pool);

gpumem_status gpumem__pool_alloc(struct pool *pool, uint64_t size, uint64_t *addr);
/* INVALID_POINTER when addr does not start a live allocation of this pool. */
gpumem_status gpumem__pool_free(struct pool *pool, uint64_t addr);
void gpumem__pool_info(struct pool *pool, gpumem_memory_info *out);
void gpumem__pool_reset_stats(struct pool *pool);
gpumem_status gpumem__pool_release_unused(struct pool *pool, uint64_t *released);

#endif /* GPUMEM_POOL_H */
