/* The driver's price through the public API: gpumem_list_driver_calls reads the
 * counters the backend keeps per GPU (backend/driver_calls.h) since the runtime
 * was created. They exist from creation on, so reading them initializes
 * nothing and takes no lock: the counters are atomics, the device count is
 * fixed at creation. */
#include "runtime.h"
#include "structs.h"

#include "backend/backend.h"

#include <stdio.h>
#include <string.h>

void gpumem__runtime_driver_calls(gpumem_runtime *rt, int physical,
                                  struct driver_call_totals *totals)
{
    memset(totals, 0, DRIVER_CALL_COUNT * sizeof *totals);
    if (rt->num_physical == 0)
        return;
    size_t first = physical < 0 ? 0 : (size_t)physical;
    size_t last = physical < 0 ? rt->num_physical - 1 : (size_t)physical;
    gpumem__driver_counts_add(rt->backend->driver_calls, first, last, totals);
}

gpumem_status gpumem_list_driver_calls(gpumem_runtime *rt, int physical,
                                       gpumem_driver_call *out, size_t capacity,
                                       size_t *count)
{
    static const char api[] = "gpumem_list_driver_calls";
    size_t stride;
    gpumem_status s = resolve_call(&rt, api, OBJ_PHYSICAL, physical, 0, NULL);
    if (s == GPUMEM_OK)
        s = gpumem__check_list_args(api, &gpumem__driver_call_struct, out, capacity,
                                    count, &stride);
    if (s != GPUMEM_OK)
        return s;
    if (physical < -1 || (physical >= 0 && (size_t)physical >= rt->num_physical))
        return gpumem__fail(GPUMEM_ERR_NO_SUCH_DEVICE,
                            "%s(GPU:%d): no such physical device (this runtime has %zu "
                            "GPU%s; -1 sums them all)",
                            api, physical, rt->num_physical,
                            rt->num_physical == 1 ? "" : "s");
    struct driver_call_totals totals[DRIVER_CALL_COUNT];
    gpumem__runtime_driver_calls(rt, physical, totals);
    for (size_t k = 0; k < DRIVER_CALL_COUNT && k < capacity; k++) {
        gpumem_driver_call e;
        memset(&e, 0, sizeof e);
        e.struct_size = sizeof e;
        snprintf(e.name, sizeof e.name, "%s", gpumem__driver_call_name(k));
        e.calls = totals[k].calls;
        e.ns = totals[k].ns;
        e.bytes = totals[k].bytes;
        gpumem__struct_put(&gpumem__driver_call_struct, out, stride, k, &e);
    }
    *count = DRIVER_CALL_COUNT;
    return GPUMEM_OK;
}
