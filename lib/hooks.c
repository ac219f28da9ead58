/* Framework hooks: PyTorch's pluggable-allocator pair and the C allocator struct.
 *
 * Built on the public API (gpumem_malloc, gpumem_free, their stream-ordered twins)
 * and what serve.c offers the hooks (runtime.h: a logical index checked, a CUDA
 * device's logical device): the hooks own no state and take no lock of their own, so they
 * are exactly as thread-safe as the calls they make, and a failure leaves the message of
 * the call that failed in gpumem_last_error(). */
#include "internal.h"
#include "runtime.h"

#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------- PyTorch -- */

/* gpumem_torch_alloc, named `api` in its own messages. */
static gpumem_status torch_alloc(const char *api, gpumem_ssize size, int device,
                                 void *stream, void **ptr)
{
    if (!ptr)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "%s(GPU:%d): `ptr` is NULL", api,
                            device);
    if (size == 0) {
        *ptr = NULL; /* nothing to allocate, no error */
        return GPUMEM_OK;
    }
    if (size < 0)
        return gpumem__fail(
            GPUMEM_ERR_INVALID_ARGUMENT,
            "%s(GPU:%d): negative size %lld (or a size_t above SSIZE_MAX)", api, device,
            (long long)size);
    int logical = 0;
    gpumem_runtime *rt = NULL; /* the default runtime, looked up once for both calls */
    gpumem_status s = gpumem__cuda_device_logical(&rt, api, device, &logical);
    if (s != GPUMEM_OK)
        return s;
    return gpumem_malloc_async(rt, logical, (size_t)size, stream, ptr);
}

gpumem_status gpumem_torch_alloc(gpumem_ssize size, int device, void *stream, void **ptr)
{
    return torch_alloc("gpumem_torch_alloc", size, device, stream, ptr);
}

void *gpumem_torch_malloc(gpumem_ssize size, int device, void *stream)
{
    void *ptr = NULL;
    if (torch_alloc("gpumem_torch_malloc", size, device, stream, &ptr) == GPUMEM_OK)
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
    /* No way to report to PyTorch: a bad pointer changes nothing and leaves
     * gpumem_free_async's message in gpumem_last_error(). A driver failure leaves
     * the block allocated, which no one can see unless it is said. */
    gpumem_status s = gpumem_free_async(NULL, ptr, stream);
    if (s != GPUMEM_OK && s != GPUMEM_ERR_INVALID_POINTER)
        gpumem__print_line(NULL, gpumem_last_error());
}

void gpumem_torch_record_stream(void *ptr, void *stream)
{
    /* PyTorch cannot hear a failure here either: a pointer that is not
     * gpumem's changes nothing (it was never ours to free), anything else is
     * said, since the block would then go back sooner than its user meant. */
    gpumem_status s = gpumem_record_stream(NULL, ptr, stream);
    if (s != GPUMEM_OK && s != GPUMEM_ERR_INVALID_POINTER)
        gpumem__print_line(NULL, gpumem_last_error());
}

void gpumem_torch_empty_cache(void)
{
    bool initialized = false;
    uint64_t released = 0;
    /* nothing to give back before the first allocation: no initialization here */
    if (gpumem_is_initialized(NULL, &initialized) != GPUMEM_OK || !initialized)
        return;
    if (gpumem_release_unused(NULL, -1, &released) != GPUMEM_OK)
        gpumem__print_line(NULL, gpumem_last_error());
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

static gpumem_status allocator_allocate_async(const gpumem_allocator *self, size_t size,
                                              void *stream, void **ptr)
{
    if (!self)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "gpumem_allocator.%s: `self` is NULL; pass the allocator",
                            "allocate_async");
    return gpumem_malloc_async(self->runtime, self->logical, size, stream, ptr);
}

static gpumem_status allocator_deallocate_async(const gpumem_allocator *self, void *ptr,
                                                void *stream)
{
    if (!self)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "gpumem_allocator.%s: `self` is NULL; pass the allocator",
                            "deallocate_async");
    return gpumem_free_async(self->runtime, ptr, stream);
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
    /* Only a size this library knows to be a whole gpumem_allocator gets more
     * than the first version's fields: a program written before struct_size was
     * read here leaves it unset, and whatever it holds must not make the library
     * write past that program's 32 bytes. */
    size_t size =
        out->struct_size == sizeof *out ? sizeof *out : GPUMEM_ALLOCATOR_SIZE_0_2;
    gpumem_allocator a = {
        .struct_size = (uint32_t)size,
        .logical = (int32_t)logical,
        .runtime = rt,
        .allocate = allocator_allocate,
        .deallocate = allocator_deallocate,
        .allocate_async = allocator_allocate_async,
        .deallocate_async = allocator_deallocate_async,
    };
    memcpy(out, &a, size);
    return GPUMEM_OK;
}
