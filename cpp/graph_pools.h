/* Private pools for CUDA graphs (PyTorch's beginAllocateToPool,
 * endAllocateToPool, releasePool), inside libgpumem_torch.so.
 *
 * Between begin(device, id, filter) and end(device, id), an allocation on
 * `device` from a stream the filter accepts (PyTorch's: a stream capturing
 * into that graph) belongs to pool `id`. A pool's blocks are gpumem's
 * allocations that never go back to gpumem while the pool lives: freed (during
 * the capture or after it), a block stays the pool's, free for the pool's later
 * allocations on the same stream (the graph replays into it; a capture into the
 * same pool reuses it, as PyTorch's private pools are shared), so no one else
 * can get memory a graph may still write. release(device, id) (the graph, or
 * the MemPool, is gone) gives the pool's free blocks back to gpumem
 * (gpumem_free_async on the stream each was freed on) and each live one when it
 * is freed.
 *
 * Thread-safe: one mutex guards every pool; it is held across gpumem calls
 * (gpumem never calls back into the shim). An allocation or a free when no
 * capture is under way and no pool holds a block takes no lock (two relaxed
 * atomic loads). */
#ifndef GPUMEM_TORCH_GRAPH_POOLS_H
#define GPUMEM_TORCH_GRAPH_POOLS_H

#include "gpumem.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>

struct CUstream_st; /* cudaStream_t is CUstream_st *, in CUDA's headers as here */

namespace gpumem_torch
{

/* PyTorch's c10::MempoolId_t (c10/core/Allocator.h): a pair of CaptureId_t,
 * which is unsigned long long. */
using MempoolId = std::pair<unsigned long long, unsigned long long>;
using StreamFilter = std::function<bool(CUstream_st *)>;

/* Whether a capture into a private pool claims an allocation of `size` bytes
 * on `device` and `stream`: true with gpumem's status in *s (and *ptr on
 * GPUMEM_OK: a free block of the pool, or a new gpumem allocation that now
 * belongs to it); false when no capture claims it (the caller allocates as
 * usual). */
bool graph_pool_alloc(size_t size, int device, void *stream, void **ptr,
                      gpumem_status *s);

/* Whether `ptr` is a private pool's block: true when it is (kept free in its
 * pool, or given back to gpumem if the pool was released), false when the
 * caller frees it as usual. */
bool graph_pool_free(void *ptr, void *stream);

/* The bytes each private pool holds on `device` (its blocks, live or free in
 * it; PyTorch's reserved_bytes_by_private_pools): for each pool, in id order,
 * six figures: id.first, id.second, current, peak, allocated (bytes that
 * entered it), freed (bytes it gave back to gpumem). A released pool keeps its
 * entry, current 0, until reset_accumulated. Writes up to `capacity` figures;
 * returns how many there are (6 per pool). */
size_t graph_pool_stats(int device, int64_t *out, size_t capacity);
/* Each pool's peak := current (reset_peak_memory_stats). */
void graph_pool_reset_peak(int device);
/* allocated, freed := 0, and the entries of pools released since go
 * (reset_accumulated_memory_stats). */
void graph_pool_reset_accumulated(int device);

void graph_pool_begin(int device, MempoolId id, StreamFilter filter);
void graph_pool_end(int device, MempoolId id);
void graph_pool_release(int device, MempoolId id);

} // namespace gpumem_torch

#endif
