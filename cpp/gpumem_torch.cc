/* libgpumem_torch.so: gpumem_torch.h's pair over libgpumem's public API. It owns
 * no state and takes no lock (each call is gpumem's, on the default runtime), so
 * it is exactly as thread-safe as gpumem_torch_alloc and gpumem_free_async, the
 * one C call each function makes (allocate() and release() below). */
#include "gpumem_torch.h"

#include <stdexcept>
#include <string>

namespace
{

/* The stream PyTorch passes goes to the stream-ordered calls: a block freed on a
 * stream is handed out again at once on that stream, on another only once the
 * work queued there before the free has run (gpumem.h, gpumem_malloc_async). */
gpumem_status allocate(gpumem_ssize size, int device, void *stream, void **ptr)
{
    return gpumem_torch_alloc(size, device, stream, ptr);
}

gpumem_status release(void *ptr, void *stream)
{
    return gpumem_free_async(nullptr, ptr, stream);
}

[[noreturn]] void throw_failure(gpumem_status s)
{
    /* Only out of memory carries PyTorch's words: a batch-size finder that halves
     * on them must not halve forever on a missing GPU. */
    std::string what =
        s == GPUMEM_ERR_OUT_OF_MEMORY ? "CUDA out of memory. " : "gpumem: ";
    what += gpumem_last_error();
    throw std::runtime_error(what);
}

} // namespace

void *gpumem_torch_alloc_or_throw(gpumem_ssize size, int device, void *stream)
{
    if (size == 0)
        return nullptr;
    if (size < 0) {
        throw std::runtime_error(
            "gpumem: gpumem_torch_alloc_or_throw(GPU:" + std::to_string(device) +
            "): negative size " + std::to_string(static_cast<long long>(size)));
    }
    void *ptr = nullptr;
    gpumem_status s = allocate(size, device, stream, &ptr);
    if (s != GPUMEM_OK)
        throw_failure(s);
    return ptr;
}

void gpumem_torch_free_stream(void *ptr, gpumem_ssize size, int device,
                              void *stream) noexcept
{
    (void)size; /* the pool is found from the address */
    (void)device;
    (void)release(ptr, stream);
}
