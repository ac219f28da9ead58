/* The lock-order check of debug builds (platform.h): per thread, how many locks
 * of each rank it holds. No lock of its own: the record is _Thread_local. A
 * forked child's only thread inherits the forking thread's record, which is what
 * it holds there. */
#include "platform.h"

#include <assert.h>

static _Thread_local unsigned held[GPUMEM_RANK_COUNT];

bool gpumem__lock_order_ok(const gpumem_mutex *m, bool sibling)
{
    for (int r = 0; r < GPUMEM_RANK_COUNT; r++) {
        if (held[r] == 0)
            continue;
        if (sibling && r == m->rank)
            continue; /* one kind, one fixed order */
        if (r >= m->rank || r >= GPUMEM_RANK_LEAF)
            return false; /* not above what it holds, or under a leaf */
    }
    return true;
}

void gpumem__lock_check(const gpumem_mutex *m, bool sibling)
{
    assert(m->rank > 0 && m->rank < GPUMEM_RANK_COUNT && "a lock without a rank");
    assert(gpumem__lock_order_ok(m, sibling) &&
           "gpumem lock taken out of order (docs/internals.md, Locks)");
    (void)m, (void)sibling;
}

void gpumem__lock_taken(const gpumem_mutex *m) { held[m->rank]++; }

void gpumem__lock_released(const gpumem_mutex *m)
{
    assert(held[m->rank] > 0 && "a gpumem lock released that was not held");
    held[m->rank]--;
}
