/* Framework hooks: PyTorch's pluggable-allocator pair and the C allocator struct.
 *
 * Built on the public API only (gpumem_malloc, gpumem_free and the listing
 * calls): the hooks own no state and take no lock of their own, so they are
 * exactly as thread-safe as the calls they make, and a failure leaves the
 * message of the call that failed in gpumem_last_error(). */
#include "internal.h"

#include <stdlib.h>

/* ------------------------------------------------------------- PyTorch -- */

void *gpumem_torch_malloc(gpumem_ssize size, int device, void *stream)
{
    (void)stream; /* gpumem orders nothing by stream (see the header) */
    if (size == 0)
        return NULL;
    if (size < 0) {
        gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                     "gpumem_torch_malloc(GPU:%d): negative size %lld", device,
                     (long long)size);
        return NULL;
    }
    void *ptr = NULL;
    if (gpumem_malloc(NULL, device, (size_t)size, &ptr) != GPUMEM_OK)
        return NULL; /* gpumem_malloc's message stays in gpumem_last_error() */
    return ptr;
}

void gpumem_torch_free(void *ptr, gpumem_ssize size, int device, void *stream)
{
    (void)size; /* the pool is found from the address */
    (void)device;
    (void)stream;
    /* No way to report to PyTorch: a bad pointer changes nothing and leaves
     * gpumem_free's message in gpumem_last_error(). */
    (void)gpumem_free(NULL, ptr);
}

/* ---------------------------------------------------- allocator struct -- */

static gpumem_status allocator_allocate(const gpumem_allocator *self, size_t size,
                                        void **ptr)
{
    if (!self)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "gpumem_allocator.%s: `self` is NULL; pass the allocator",
                            "allocate");
    return gpumem_malloc(self->runtime, self->logical, size, ptr);
}

static gpumem_status allocator_deallocate(const gpumem_allocator *self, void *ptr)
{
    if (!self)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "gpumem_allocator.%s: `self` is NULL; pass the allocator",
                            "deallocate");
    return gpumem_free(self->runtime, ptr);
}

/* The number of logical devices the runtime has (initialized) or would build
 * from its configuration (not yet initialized), without initializing it. */
static gpumem_status count_logical(gpumem_runtime *rt, size_t *count)
{
    bool initialized;
    gpumem_status s = gpumem_is_initialized(rt, &initialized);
    if (s != GPUMEM_OK)
        return s;
    if (initialized)
        return gpumem_list_logical_devices(rt, NULL, 0, count);

    size_t num_physical, num_visible;
    if ((s = gpumem_list_physical_devices(rt, NULL, 0, &num_physical)) != GPUMEM_OK)
        return s;
    int *visible = malloc((num_physical ? num_physical : 1) * sizeof *visible);
    if (!visible)
        return gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY,
                            "gpumem_get_allocator: out of host memory");
    s = gpumem_get_visible_devices(rt, visible, num_physical, &num_visible);
    size_t n = 0;
    for (size_t i = 0; s == GPUMEM_OK && i < num_visible && i < num_physical; i++) {
        size_t configured;
        s = gpumem_get_logical_device_configuration(rt, visible[i], NULL, 0, &configured);
        n += configured ? configured : 1;
    }
    free(visible);
    if (s == GPUMEM_OK)
        *count = n;
    return s;
}

gpumem_status gpumem_get_allocator(gpumem_runtime *rt, int logical, gpumem_allocator *out)
{
    if (!out)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "gpumem_get_allocator(GPU:%d): `out` is NULL", logical);
    size_t n;
    gpumem_status s = count_logical(rt, &n);
    if (s != GPUMEM_OK)
        return s;
    if (logical < 0 || (size_t)logical >= n)
        return gpumem__fail(
            GPUMEM_ERR_NO_SUCH_DEVICE,
            "gpumem_get_allocator(GPU:%d): no such logical device (there %s "
            "%zu)",
            logical, n == 1 ? "is" : "are", n);
    *out = (gpumem_allocator){
        .struct_size = (uint32_t)sizeof *out,
        .logical = (int32_t)logical,
        .runtime = rt,
        .allocate = allocator_allocate,
        .deallocate = allocator_deallocate,
    };
    return GPUMEM_OK;
}
