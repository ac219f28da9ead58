/* PyTorch's allocation statistics, counted by libgpumem_torch.so at each
 * allocation and free PyTorch asks for: for each CUDA device, the allocations
 * (a count), their bytes (gpumem's: the size rounded up to 256 bytes) and the
 * bytes requested, each for all allocations and split as PyTorch splits them
 * (small_pool: a request of at most 1 MiB; large_pool: the rest), each with
 * PyTorch's four figures (current, peak, allocated: the total added, freed:
 * the total taken away). Relaxed atomics: no lock; a figure read while other
 * threads allocate is a figure for people, each one exact once they stop. */
#ifndef GPUMEM_TORCH_STATS_H
#define GPUMEM_TORCH_STATS_H

#include <cstddef>

namespace gpumem_torch
{

void stats_alloc(int device, size_t size);
void stats_free(int device, size_t size);

} // namespace gpumem_torch

#endif
