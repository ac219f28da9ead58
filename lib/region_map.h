/* The region map: a runtime's address -> pool index, which gpumem_free looks
 * pointers up in. It changes only when a pool takes a region from its GPU or
 * gives one back, and is read on every free, so readers take no lock (a
 * sequence lock, below). Writers take the map's lock, a leaf: nothing else is
 * taken while it is held, above all no backend call (docs/internals.md, "Locks").
 * Invariant: the entries are sorted by base and disjoint. */
#ifndef GPUMEM_REGION_MAP_H
#define GPUMEM_REGION_MAP_H

#include "internal.h"

struct pool;

/* A writer (holding `lock`) makes `seq` odd, changes the entries, and makes it
 * even again; a reader searches the entries and retries when `seq` was odd or
 * changed meanwhile. Every shared field is an atomic (acquire loads and release
 * stores are plain moves on x86), so a reader that overlaps a writer reads stale
 * values, never undefined ones, and throws them away. An entry array that is
 * outgrown is kept until the map is destroyed (a reader may still be searching
 * it): the arrays double, so the retired ones add up to less than the current
 * one. */
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
    size_t promised;   /* entries gpumem__region_map_make_room made room for, not
                          yet inserted (pools add regions under their own locks,
                          concurrently) */
    gpumem_mutex lock; /* writers; also guards `promised`. A leaf. */
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

/* Makes room for one more entry and promises it to the caller, so that the
 * insertion after a region was taken from the device cannot fail: the room stays
 * the caller's until gpumem__region_map_insert or gpumem__region_map_cancel_room,
 * however many other pools make room and insert in between. false: out of host
 * memory (nothing promised). */
bool gpumem__region_map_make_room(struct region_map *m);
/* Gives back the room gpumem__region_map_make_room promised, when no region came
 * of it. */
void gpumem__region_map_cancel_room(struct region_map *m);
/* Adds [base, base+size) -> pool, in the room a successful make_room promised.
 * pre: the range overlaps no entry. */
void gpumem__region_map_insert(struct region_map *m, uint64_t base, uint64_t size,
                               struct pool *pool);
/* Removes the entry that starts at base (none: nothing). */
void gpumem__region_map_remove(struct region_map *m, uint64_t base);
/* Removes one entry of `pool` and tells its range: false when it has none left.
 * Taking them out one by one lets the caller give each region back to the device
 * after the map's lock is let go. */
bool gpumem__region_map_remove_any(struct region_map *m, const struct pool *pool,
                                   uint64_t *base, uint64_t *size);

#endif /* GPUMEM_REGION_MAP_H */
