/* gpumem as PyTorch's allocator, with out of memory raised: what
 * torch.cuda.memory.CUDAPluggableAllocator loads from libgpumem_torch.so, which
 * gpumem.torch.use() installs, and the hooks it gives the allocator object
 * where PyTorch takes them (CUDA graphs' private pools, the memory fraction),
 * with PyTorch's statistics of the allocations it asked for. A failure of the
 * allocation throws std::runtime_error, which PyTorch turns into a Python
 * RuntimeError with the same message (it catches std::exception where its
 * operators return to Python), instead of the NULL that libgpumem's C pair
 * (gpumem_torch_malloc) must return and PyTorch does not check;
 * libgpumem_torch_c10.so (gpumem_torch_c10.cc, built where PyTorch's headers
 * are) throws c10::OutOfMemoryError for out of memory instead, which PyTorch
 * raises as torch.cuda.OutOfMemoryError. C++ only: the graph hooks take C++
 * types, PyTorch's own (c10::MempoolId_t is a std::pair of two CaptureId_t,
 * unsigned long long; cudaStream_t is CUstream_st *). */
#ifndef GPUMEM_TORCH_H
#define GPUMEM_TORCH_H

#ifndef __cplusplus
#error "gpumem_torch.h is C++: its allocation function throws"
#endif

#include "gpumem.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>

struct CUstream_st;

/* The figures gpumem_torch_stats writes, in this order: for each metric, for
 * each pool, the four fields (PyTorch's StatArray of Stat). */
enum gpumem_torch_stat_layout {
    GPUMEM_TORCH_STAT_ALLOCATION = 0,      /* a count: "allocation" */
    GPUMEM_TORCH_STAT_ALLOCATED_BYTES = 1, /* the size rounded up to 256 B */
    GPUMEM_TORCH_STAT_REQUESTED_BYTES = 2, /* the size PyTorch asked for */
    GPUMEM_TORCH_STAT_METRICS = 3,
    GPUMEM_TORCH_STAT_ALL = 0,        /* "all" */
    GPUMEM_TORCH_STAT_SMALL_POOL = 1, /* a request of at most 1 MiB */
    GPUMEM_TORCH_STAT_LARGE_POOL = 2, /* the others */
    GPUMEM_TORCH_STAT_POOLS = 3,
    GPUMEM_TORCH_STAT_FIELDS = 4 /* current, peak, allocated, freed */
};

extern "C" {

/* `size` bytes on CUDA device `device` (gpumem's physical index: the first logical
 * device on that GPU, as gpumem_torch_malloc), for PyTorch's `stream`; from a
 * CUDA graph's private pool while a capture claims the stream (below).
 * Returns: the pointer, 256-byte aligned; NULL for size 0 (nothing to allocate).
 * Throws:  std::runtime_error, whose what() is
 *          "CUDA out of memory. " + gpumem's message  for GPUMEM_ERR_OUT_OF_MEMORY
 *          (PyTorch's own words, which batch-size finders look for), and
 *          "gpumem: " + gpumem's message               for any other failure (no
 *          such GPU, a negative size, simulated GPUs that auto fell back to).
 * Prints nothing (the exception carries the message). Threads: safe. */
GPUMEM_API void *gpumem_torch_alloc_or_throw(gpumem_ssize size, int device, void *stream);

/* What gpumem_torch_alloc_or_throw does, without throwing: the status, *ptr on
 * success (NULL for size 0), gpumem's message in gpumem_last_error() on
 * failure; counted in the statistics on success. For libgpumem_torch_c10.so,
 * which throws PyTorch's own exception types. Threads: safe. */
GPUMEM_API gpumem_status gpumem_torch_shim_alloc(gpumem_ssize size, int device,
                                                 void *stream, void **ptr) noexcept;

/* Frees `ptr` (NULL: no-op) for PyTorch's `stream`: a private pool's block
 * stays its pool's; any other goes to gpumem_free_async. `size` and `device`
 * (PyTorch's, of the allocation) are counted in the statistics. Never throws
 * (PyTorch calls it from deleters): a pointer gpumem refuses changes nothing and
 * leaves the reason in gpumem_last_error(). Threads: safe. */
GPUMEM_API void gpumem_torch_free_stream(void *ptr, gpumem_ssize size, int device,
                                         void *stream) noexcept;

/* PyTorch's graph-pool hooks (set_begin_allocate_to_pool,
 * set_end_allocate_to_pool_fn, set_release_pool on the object behind
 * CUDAPluggableAllocator(...).allocator(), in the PyTorch versions that have
 * them), with their types: between begin and end, allocations on `device`
 * from a stream that `filter` accepts come from private pool `id`, whose
 * memory no one else gets until release (cpp/graph_pools.h). Threads: safe. */
GPUMEM_API void gpumem_torch_begin_allocate_to_pool(
    int device, std::pair<unsigned long long, unsigned long long> id,
    std::function<bool(CUstream_st *)> filter);
GPUMEM_API void gpumem_torch_end_allocate_to_pool(
    int device, std::pair<unsigned long long, unsigned long long> id);
GPUMEM_API void gpumem_torch_release_pool(
    int device, std::pair<unsigned long long, unsigned long long> id);

/* PyTorch's memory-fraction hook, `void (double, int)`, for
 * torch.cuda.set_per_process_memory_fraction(fraction, device):
 * gpumem_set_memory_fraction of that GPU on the default runtime, which only
 * configuration before gpumem's first allocation may change.
 * Throws: std::runtime_error with gpumem's message when gpumem refuses (a
 *         fraction out of (0, 1], the runtime initialized already with another
 *         fraction in force), which PyTorch raises as RuntimeError. */
GPUMEM_API void gpumem_torch_set_memory_fraction(double fraction, int device);

/* PyTorch's statistics of the allocations it asked for on CUDA device `device`
 * (cpp/torch_stats.h): writes up to `capacity` figures (the layout above) and
 * returns how many there are (36); 0..63 are counted. Threads: safe. */
GPUMEM_API size_t gpumem_torch_stats(int device, int64_t *out, size_t capacity) noexcept;
/* PyTorch's reserved_bytes_by_private_pools on CUDA device `device`: the bytes
 * of the blocks each CUDA graph's private pool holds (cpp/graph_pools.h), six
 * figures a pool (id.first, id.second, current, peak, allocated, freed), pools
 * in id order; a released pool's entry stays, current 0, until the accumulated
 * statistics are reset. Writes up to `capacity` figures and returns how many
 * there are. Threads: safe. */
GPUMEM_API size_t gpumem_torch_private_pool_stats(int device, int64_t *out,
                                                  size_t capacity) noexcept;
/* Peaks start again from the current figures (reset_peak_memory_stats), the
 * private pools' too. */
GPUMEM_API void gpumem_torch_reset_peak_stats(int device) noexcept;
/* The allocated and freed totals start again from 0, the private pools' too,
 * and the entries of pools released since go (reset_accumulated_memory_stats). */
GPUMEM_API void gpumem_torch_reset_accumulated_stats(int device) noexcept;
}

#endif
