/* gpumem as PyTorch's allocator, with out of memory raised: the pair that
 * torch.cuda.memory.CUDAPluggableAllocator loads from libgpumem_torch.so, which
 * gpumem.torch.use() installs. A failure throws std::runtime_error, which PyTorch
 * turns into a Python RuntimeError with the same message (it catches std::exception
 * where its operators return to Python), instead of the NULL that libgpumem's C
 * pair (gpumem_torch_malloc) must return and PyTorch does not check. C++ only. */
#ifndef GPUMEM_TORCH_H
#define GPUMEM_TORCH_H

#ifndef __cplusplus
#error "gpumem_torch.h is C++: its allocation function throws"
#endif

#include "gpumem.h"

extern "C" {

/* `size` bytes on CUDA device `device` (gpumem's physical index: the first logical
 * device on that GPU, as gpumem_torch_malloc), for PyTorch's `stream`.
 * Returns: the pointer, 256-byte aligned; NULL for size 0 (nothing to allocate).
 * Throws:  std::runtime_error, whose what() is
 *          "CUDA out of memory. " + gpumem's message  for GPUMEM_ERR_OUT_OF_MEMORY
 *          (PyTorch's own words, which batch-size finders look for), and
 *          "gpumem: " + gpumem's message               for any other failure (no
 *          such GPU, a negative size, simulated GPUs that auto fell back to).
 * Prints nothing (the exception carries the message). Threads: safe. */
GPUMEM_API void *gpumem_torch_alloc_or_throw(gpumem_ssize size, int device, void *stream);

/* Frees `ptr` (NULL: no-op) for PyTorch's `stream`; `size` and `device` are not
 * needed. Never throws (PyTorch calls it from deleters): a pointer gpumem refuses
 * changes nothing and leaves the reason in gpumem_last_error(). Threads: safe. */
GPUMEM_API void gpumem_torch_free_stream(void *ptr, gpumem_ssize size, int device,
                                         void *stream) noexcept;
}

#endif
