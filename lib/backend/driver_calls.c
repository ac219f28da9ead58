/* The driver's price, counted (driver_calls.h): the names of the entry points,
 * and the counters' making and reading. The counting itself is inline in the
 * header, on the backends' paths. No lock, no state of its own. */
#include "backend/driver_calls.h"

#include <stdlib.h>

static const char *const names[DRIVER_CALL_COUNT] = {
#define GPUMEM_DRIVER_CALL_NAME(name) #name,
    GPUMEM_DRIVER_CALLS(GPUMEM_DRIVER_CALL_NAME)
#undef GPUMEM_DRIVER_CALL_NAME
};

const char *gpumem__driver_call_name(enum driver_call k)
{
    return (unsigned)k < DRIVER_CALL_COUNT ? names[k] : NULL;
}

struct driver_counts *gpumem__driver_counts_new(size_t devices)
{
    return calloc(devices ? devices : 1, sizeof(struct driver_counts));
}

void gpumem__driver_counts_add(struct driver_counts *counts, size_t first, size_t last,
                               struct driver_call_totals *totals)
{
    for (size_t d = first; d <= last; d++) {
        for (size_t k = 0; k < DRIVER_CALL_COUNT; k++) {
            struct driver_counter *n = &counts[d].kind[k];
            totals[k].calls += atomic_load_explicit(&n->calls, memory_order_relaxed);
            totals[k].ns += atomic_load_explicit(&n->ns, memory_order_relaxed);
            totals[k].bytes += atomic_load_explicit(&n->bytes, memory_order_relaxed);
        }
    }
}
