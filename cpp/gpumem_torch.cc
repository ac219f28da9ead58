/* libgpumem_torch.so: gpumem_torch.h's pair over libgpumem's public API. It owns
 * no state and takes no lock (each call is gpumem's, on the default runtime), so
 * it is exactly as thread-safe as gpumem_malloc and gpumem_free. The one C call
 * each function makes is in allocate() and release() below: where the library
 * gains a stream-ordered API, only those two change. */
#include "gpumem_torch.h"

#include <stdexcept>
#include <string>

namespace
{

/* The stream is not passed on yet: gpumem_malloc orders nothing by stream, so
 * memory freed here is handed out again at once, which is safe within one stream
 * (as documented for gpumem_torch_malloc). */
gpumem_status allocate(gpumem_ssize size, int device, void *stream, void **ptr)
{
    (void)stream;
    int logical = 0;
    gpumem_status s = gpumem_cuda_device_logical(nullptr, device, &logical);
    if (s == GPUMEM_OK)
        s = gpumem_malloc(nullptr, logical, static_cast<size_t>(size), ptr);
    return s;
}

gpumem_status release(void *ptr, void *stream)
{
    (void)stream;
    return gpumem_free(nullptr, ptr);
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
