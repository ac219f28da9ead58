/* Framework hooks: PyTorch's pluggable-allocator pair and the C allocator struct.
 *
 * Built on the public API (gpumem_malloc, gpumem_free) and what serve.c offers
 * the hooks (runtime.h: a logical index checked, a CUDA device's logical device,
 * malloc on a runtime already looked up): the hooks own no state and take no
 * lock of their own, so they are exactly as thread-safe as the calls they make,
 * and a failure leaves the message of the call that failed in gpumem_last_error(). */
#include "internal.h"
#include "runtime.h"

#include <stdio.h>

/* ------------------------------------------------------------- PyTorch -- */

void *gpumem_torch_malloc(gpumem_ssize size, int device, void *stream)
{
    static const char api[] = "gpumem_torch_malloc";
    (void)stream; /* gpumem orders nothing by stream (see the header) */
    if (size == 0)
        return NULL;
    void *ptr = NULL;
    int logical = 0;
    gpumem_runtime *rt = NULL; /* the default runtime, looked up once for both calls */
    if (size < 0)
        gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                     "%s(GPU:%d): negative size %lld (or a size_t above SSIZE_MAX)", api,
                     device, (long long)size);
    else if (gpumem__cuda_device_logical(&rt, api, device, &logical) == GPUMEM_OK &&
             gpumem__malloc_resolved(rt, logical, (size_t)size, &ptr) == GPUMEM_OK)
        return ptr;
    /* PyTorch does not check for NULL, and the default runtime has no callback: say
     * why on standard error, on one line, and keep it in gpumem_last_error(). */
    gpumem__print_line(NULL, gpumem_last_error());
    return NULL;
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

gpumem_status gpumem_get_allocator(gpumem_runtime *rt, int logical, gpumem_allocator *out)
{
    if (!out)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "gpumem_get_allocator(/device:GPU:%d): `out` is NULL",
                            logical);
    gpumem_status s = gpumem__check_logical_index(rt, "gpumem_get_allocator", logical);
    if (s != GPUMEM_OK)
        return s;
    *out = (gpumem_allocator){
        .struct_size = (uint32_t)sizeof *out,
        .logical = (int32_t)logical,
        .runtime = rt,
        .allocate = allocator_allocate,
        .deallocate = allocator_deallocate,
    };
    return GPUMEM_OK;
}
