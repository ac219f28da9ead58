/* A brute-force model of the arena's contract, for tests/unit/test_arena.c and the
 * fuzz target tests/fuzz/fuzz_arena.c: chunks in address order in an array, best
 * fit by scanning every chunk, coalescing by the region rules and the owners'
 * joins, release by carving whole regions out of free chunks of owner 0. Slow
 * and obviously right, so that the arena's choices can be compared with it
 * operation by operation. */
#ifndef GPUMEM_TESTS_ARENA_MODEL_H
#define GPUMEM_TESTS_ARENA_MODEL_H

#include "arena.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct mchunk {
    uint64_t addr, size;
    bool is_free;
    unsigned owner; /* a free chunk's owner (arena.h); 0 for a live one */
};

struct mregion {
    uint64_t base, size;
    bool contiguous, present;
};

#define MODEL_MAX 4096

/* Free chunks below this size are filed in lists, one per size, and ties among
 * them go to the list's head; at and above it, to the lowest address. */
#define MODEL_LIST_BELOW (64 * ARENA_GRANULE)
/* How many of a list's first entries its filing keeps in address order. */
#define MODEL_LIST_SORTED 4

struct model {
    struct mchunk c[MODEL_MAX];
    size_t n;
    struct mregion *r;
    size_t nr;
    /* the free chunks below MODEL_LIST_BELOW, every size's list in one array:
     * the chunks of a size, in the order of this array, are that size's list */
    struct mchunk order[MODEL_MAX];
    size_t norder;
    /* joins[o], o > 0: the owners whose free neighbours a chunk freed as o's
     * joins, o's own and 0's included (model_open_owner, model_set_joins); 0 for
     * an owner that is not open. Owner 0 joins only its own (joins[0] unused). */
    uint64_t joins[ARENA_OWNERS];
};

/* gpumem__arena_owner_open, _close, _set_joins and _disown, as the contract says. */
void model_open_owner(struct model *m, unsigned owner);
void model_close_owner(struct model *m, unsigned owner);
void model_set_joins(struct model *m, unsigned owner, uint64_t owners);
uint64_t model_disown(struct model *m, unsigned owner);
/* gpumem__arena_alloc_owned, _free_owned, _add_region_owned. */
int model_alloc_owned(struct model *m, uint64_t size, uint64_t owners, uint64_t *addr,
                      uint64_t *got);
int model_free_owned(struct model *m, uint64_t addr, unsigned owner, uint64_t *size);
void model_add_region_owned(struct model *m, size_t ri, unsigned owner);

/* Adds region ri (not present) as one free chunk, coalescing as the arena does. */
void model_add_region(struct model *m, size_t ri);

/* The best fit among the chunks of v[0..n) (address order) for `need` bytes (a
 * granule multiple), the lowest-addressed among equals: index into v, or SIZE_MAX
 * when nothing fits. The arena's choice when its size is at least
 * MODEL_LIST_BELOW; below, the arena takes the head of that size's list, which
 * model_alloc keeps (a walk does not tell it). */
size_t model_choose(const struct mchunk *v, size_t n, uint64_t need);

/* gpumem__arena_alloc, gpumem__arena_free and gpumem__arena_release_free_regions
 * as the contract says (no host failures): same results, same out values. */
int model_alloc(struct model *m, uint64_t size, uint64_t *addr, uint64_t *got);
int model_free(struct model *m, uint64_t addr, uint64_t *size);
uint64_t model_release(struct model *m);

/* gpumem__arena_free_tail: the free chunk ending at `end` where a segment ends
 * (memory at end-1 and at end cannot be one chunk), else 0; its owner into
 * *owner (may be NULL) when not 0. */
uint64_t model_free_tail(const struct model *m, uint64_t end);
uint64_t model_free_tail_owned(const struct model *m, uint64_t end, unsigned *owner);

/* Whether the arena's chunks (gpumem__arena_walk_user) are exactly the model's,
 * owners included. */
bool model_matches(const struct model *m, const struct arena *a);

#endif /* GPUMEM_TESTS_ARENA_MODEL_H */
