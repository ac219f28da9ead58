/* Address spaces of growing pools. On a backend that offers them (CUDA's virtual
 * memory management), a growing pool allocates one range of addresses for its
 * whole budget and maps physical memory into it region by region as it grows.
 * A second arena over the range (the layout) chooses where each region goes:
 * the smallest hole that fits, lowest address first, so regions land side by
 * side and the pool's own arena, which takes them as contiguous regions,
 * coalesces free memory across growth steps. Unmapping a region gives its memory
 * back to the device and leaves a hole that a later region may fill.
 *
 * What is mapped at once (a region, or the granules a chunk lands on) is mapped
 * in a few extents, one backend mapping each (at most eight for any run, one per
 * granule when it has fewer: space.c), never across the start of a region, so
 * that a growth of any size costs the driver a few calls, and the whole extents
 * that its pool has free can be unmapped, their memory given back, while the
 * region stays placed and its other extents in use (extents side by side in one
 * call: a hole costs one); they are mapped again when the pool hands them out
 * (gpumem__space_unmap_part, gpumem__space_map_part).
 *
 * Every size and address is a multiple of the granularity. Not thread-safe: the
 * owning pool's locks guard it (its mapping lock every change, its lock the
 * bitmaps; gpumem__space_set_hooks). A failure returns a status and writes its reason
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
/* Where the range starts. */
uint64_t gpumem__space_base(const struct space *sp);

/* true when addr lies inside the range. */
bool gpumem__space_contains(const struct space *sp, uint64_t addr);

/* Places a region of `size` bytes (a multiple of the granularity) in the range
 * and maps new device memory there, in extents.
 * Returns GPUMEM_OK and its address; GPUMEM_ERR_UNSUPPORTED when no hole of that
 * size is left (the caller may take a plain region instead); the backend's status
 * (GPUMEM_ERR_OUT_OF_MEMORY when the device is full). Unchanged on failure, but
 * for granules whose mapping the backend could not undo: the region's place is
 * kept, as for a refused unmap. *held: the bytes of device memory that stay taken
 * after a failure (those granules', and the failing one's when the backend could
 * not give it back; backend.h); 0 on success. */
gpumem_status gpumem__space_map(struct space *sp, uint64_t size, uint64_t *addr,
                                uint64_t *held, struct reason *why);

/* Unmaps a region placed by gpumem__space_map, giving the memory of its mapped
 * extents back, and frees its place. When the backend refuses an extent, the
 * others are still unmapped, the region stays placed (its addresses are not
 * reused), and *kept says the bytes still mapped (0 on success); the first
 * refusal is returned. */
gpumem_status gpumem__space_unmap(struct space *sp, uint64_t addr, uint64_t size,
                                  uint64_t *kept, struct reason *why);

/* Unmaps the extents that lie wholly inside [addr, addr+size), which lies in
 * placed regions (pre: granule-aligned, nothing there in use), giving their
 * memory back; an extent that reaches past either end stays mapped, and the
 * regions stay placed. *bytes: the bytes given back, also on failure (the
 * backend's refusal stops it; that extent stays mapped). */
gpumem_status gpumem__space_unmap_part(struct space *sp, uint64_t addr, uint64_t size,
                                       uint64_t *bytes, struct reason *why);

/* Two steps of gpumem__space_unmap_part, so that the owner may let its lock go
 * for the backend's calls with nothing half done in the bitmaps: claiming the
 * extents that lie wholly inside [addr, addr+size) takes them out of the
 * bitmaps (they read as unmapped, and count in gpumem__space_unmapped) and
 * notes them, without a backend call; returns their bytes (fewer when host
 * memory to note one lacks: that one stays mapped). Claims add up until
 * gpumem__space_unmap_claimed unmaps every claimed extent, in order (the
 * hooks around each call); after a refusal, that extent and the rest go back
 * into the bitmaps, still mapped. *bytes: unmapped; *back: put back. */
uint64_t gpumem__space_claim_part(struct space *sp, uint64_t addr, uint64_t size);
gpumem_status gpumem__space_unmap_claimed(struct space *sp, uint64_t *bytes,
                                          uint64_t *back, struct reason *why);

/* The owner's hooks around every backend call that maps or unmaps (NULL:
 * none): leave just before, enter just after. The owning pool lets its lock go
 * there, so that work that maps nothing goes on meanwhile; the space's state is
 * then consistent for readers that hold that lock: a mapping enters the bitmaps
 * after the call, an unmapping leaves them before it. Calls that change the
 * space must come from one thread at a time (the pool's mapping lock). `warn`
 * (NULL: none) is told, after `enter`, of a refusal that the space got past on
 * its own (a run of mappings the backend would not unmap at once, unmapped one
 * by one): the call that failed and why, for the owner's log. */
void gpumem__space_set_hooks(struct space *sp, void (*leave)(void *ctx),
                             void (*enter)(void *ctx),
                             void (*warn)(void *ctx, const char *text), void *ctx);

/* Maps the granules of [addr, addr+size) (in placed regions, granule-aligned)
 * that gpumem__space_unmap_part unmapped, with new device memory: each run of
 * them within a region in extents. *bytes: the bytes mapped, also on failure
 * (those extents stay mapped; a mapping that could not be undone counts, its
 * addresses stay mapped); *held: the bytes of the failing extent's memory that
 * stay taken without a mapping (backend.h), 0 on success.
 * GPUMEM_ERR_OUT_OF_MEMORY when the device is full. */
gpumem_status gpumem__space_map_part(struct space *sp, uint64_t addr, uint64_t size,
                                     uint64_t *bytes, uint64_t *held, struct reason *why);

/* The bytes of [addr, addr+size) (granule-aligned, in the range) whose granules
 * are not mapped; O(1) when every placed granule is mapped, else O(size /
 * granularity). */
uint64_t gpumem__space_unmapped_in(const struct space *sp, uint64_t addr, uint64_t size);

/* Whether a granule of [addr, addr+size) (granule-aligned, in the range) is not
 * mapped: gpumem__space_unmapped_in's answer without the count, stopping at the
 * first word of the map that has one (a growing pool asks on every allocation
 * while it has given granules back). */
bool gpumem__space_any_unmapped(const struct space *sp, uint64_t addr, uint64_t size);

/* The bytes of placed regions whose granules are not mapped. */
uint64_t gpumem__space_unmapped(const struct space *sp);

#endif /* GPUMEM_SPACE_H */
