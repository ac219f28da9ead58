/* libgpumem_torch.so: gpumem_torch.h's functions over libgpumem's public API,
 * the CUDA graphs' private pools (graph_pools.cc) and PyTorch's statistics
 * (torch_stats.cc). Each allocation and free is gpumem's, on the default
 * runtime, so it is as thread-safe as gpumem_torch_alloc and
 * gpumem_free_async; the pools have a mutex of their own (taken only while a
 * capture is under way or a pool holds blocks) and the statistics atomics. */
#include "gpumem_torch.h"

#include "graph_pools.h"
#include "torch_stats.h"

#include <stdexcept>
#include <string>

namespace
{

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

gpumem_status gpumem_torch_shim_alloc(gpumem_ssize size, int device, void *stream,
                                      void **ptr) noexcept
{
    *ptr = nullptr;
    if (size == 0)
        return GPUMEM_OK;
    gpumem_status s = GPUMEM_OK;
    try {
        /* a capture's stream: its graph's private pool (the filter is PyTorch's
         * std::function, which may throw) */
        if (size < 0 || !gpumem_torch::graph_pool_alloc(static_cast<size_t>(size), device,
                                                        stream, ptr, &s))
            s = gpumem_torch_alloc(size, device, stream, ptr);
    } catch (const std::exception &e) {
        (void)e; /* the filter's failure: gpumem allocates as outside a capture */
        s = gpumem_torch_alloc(size, device, stream, ptr);
    }
    if (s == GPUMEM_OK && *ptr)
        gpumem_torch::stats_alloc(device, static_cast<size_t>(size));
    return s;
}

void *gpumem_torch_alloc_or_throw(gpumem_ssize size, int device, void *stream)
{
    void *ptr = nullptr;
    gpumem_status s = gpumem_torch_shim_alloc(size, device, stream, &ptr);
    if (s != GPUMEM_OK)
        throw_failure(s);
    return ptr;
}

void gpumem_torch_free_stream(void *ptr, gpumem_ssize size, int device,
                              void *stream) noexcept
{
    if (!ptr)
        return;
    /* the pool is found from the address; a private pool's block stays its */
    if (gpumem_torch::graph_pool_free(ptr, stream) ||
        gpumem_free_async(nullptr, ptr, stream) == GPUMEM_OK)
        gpumem_torch::stats_free(device, size > 0 ? static_cast<size_t>(size) : 0);
}

void gpumem_torch_begin_allocate_to_pool(
    int device, std::pair<unsigned long long, unsigned long long> id,
    std::function<bool(CUstream_st *)> filter)
{
    gpumem_torch::graph_pool_begin(device, id, std::move(filter));
}

void gpumem_torch_end_allocate_to_pool(
    int device, std::pair<unsigned long long, unsigned long long> id)
{
    gpumem_torch::graph_pool_end(device, id);
}

void gpumem_torch_release_pool(int device,
                               std::pair<unsigned long long, unsigned long long> id)
{
    gpumem_torch::graph_pool_release(device, id);
}

void gpumem_torch_set_memory_fraction(double fraction, int device)
{
    gpumem_status s = gpumem_set_memory_fraction(nullptr, device, fraction);
    if (s != GPUMEM_OK)
        throw std::runtime_error(std::string("gpumem: ") + gpumem_last_error());
}
