/* Address spaces of growing pools. On a backend that offers them (CUDA's virtual
 * memory management), a growing pool allocates one range of addresses for its
 * whole budget and maps physical memory into it region by region as it grows.
 * A second arena over the range (the layout) chooses where each region goes:
 * the smallest hole that fits, lowest address first, so regions land side by
 * side and the pool's own arena, which takes them as contiguous regions,
 * coalesces free memory across growth steps. Unmapping a region gives its memory
 * back to the device and leaves a hole that a later region may fill.
 *
 * Every size and address is a multiple of the granularity. Not thread-safe: the
 * owning pool's lock guards it. A failure returns a status and writes its reason
 * into *why (never NULL), as the backend does (backend.h). */
#ifndef GPUMEM_SPACE_H
#define GPUMEM_SPACE_H

#include "backend/backend.h"

struct space;

/* Allocates an address range of `budget` bytes rounded up to device `dev`'s granularity.
 * Returns GPUMEM_OK; GPUMEM_ERR_UNSUPPORTED when the backend or the device has no
 * spaces; the backend's status when it refuses; GPUMEM_ERR_OUT_OF_MEMORY for
 * host memory; the reason in *why. */
gpumem_status gpumem__space_create(struct backend *b, int dev, uint64_t budget,
                                   struct space **out, struct reason *why);

/* Frees the range. Regions still mapped (an unmap the backend refused) keep it
 * allocated: it is then left to the process's end, and the status says so. */
gpumem_status gpumem__space_destroy(struct space *sp, struct reason *why);

/* In a forked child: frees this process's copy of the bookkeeping (NULL:
 * nothing), without a backend call (the range is the parent's). */
void gpumem__space_forget(struct space *sp);

uint64_t gpumem__space_granularity(const struct space *sp);
uint64_t gpumem__space_size(const struct space *sp);

/* true when addr lies inside the range. */
bool gpumem__space_contains(const struct space *sp, uint64_t addr);

/* Places a region of `size` bytes (a multiple of the granularity) in the range
 * and maps new device memory there.
 * Returns GPUMEM_OK and its address; GPUMEM_ERR_UNSUPPORTED when no hole of that
 * size is left (the caller may take a plain region instead); the backend's status
 * (GPUMEM_ERR_OUT_OF_MEMORY when the device is full). Unchanged on failure, but
 * for a partial mapping that the backend could not undo: its place is kept, as
 * for a refused unmap. *held says whether the device's memory stays taken after a
 * failure (the backend could not give it back; backend.h). */
gpumem_status gpumem__space_map(struct space *sp, uint64_t size, uint64_t *addr,
                                bool *held, struct reason *why);

/* Unmaps a region placed by gpumem__space_map, giving its memory back. When the
 * backend refuses, the region stays placed (its addresses are not reused). */
gpumem_status gpumem__space_unmap(struct space *sp, uint64_t addr, uint64_t size,
                                  struct reason *why);

#endif /* GPUMEM_SPACE_H */
