/* The backend contract: what gpumem needs from a GPU driver. A backend counts
 * devices, describes them, reports their free memory and reserves and releases
 * regions of device memory. Everything above it (pools, arena) works on device
 * addresses as uint64_t and never touches the memory.
 *
 * Preconditions for every call: `dev` < device_count; sizes are > 0 and multiples
 * of 256; out-pointers are not NULL. Failures return a status and set the
 * thread's last error (the caller may prefix its own context).
 * Thread safety: every call may be made concurrently (a backend locks its own
 * state); reserve/release may be called with a pool lock held, so a backend never
 * calls back into a pool. */
#ifndef GPUMEM_BACKEND_H
#define GPUMEM_BACKEND_H

#include "internal.h"

struct backend;

struct backend_ops {
    const char *name; /* "sim", "cuda" */
    void (*destroy)(struct backend *b);
    size_t (*device_count)(const struct backend *b);
    /* Fills model, total_bytes, compute_major/minor (index and name are the
     * runtime's). */
    gpumem_status (*device_props)(struct backend *b, int dev, gpumem_physical_device *out);
    gpumem_status (*mem_info)(struct backend *b, int dev, uint64_t *free_bytes,
                              uint64_t *total_bytes);
    /* GPUMEM_ERR_OUT_OF_MEMORY when the device has not `size` bytes to give. */
    gpumem_status (*reserve)(struct backend *b, int dev, uint64_t size, uint64_t *addr);
    gpumem_status (*release)(struct backend *b, int dev, uint64_t addr, uint64_t size);
};

struct backend {
    const struct backend_ops *ops;
    /* Regions that touch in address space may be used as one block of memory
     * (true for the simulated backend and for CUDA virtual-memory mappings, false
     * for separate cuMemAlloc blocks). */
    bool regions_contiguous;
    /* Memory the host may read and write (simulated GPUs). */
    bool host_accessible;
};

/* backend.c: opens the backend opts->backend chooses (auto: CUDA when a device is
 * found, else simulated). */
gpumem_status gpumem__backend_open(const struct options *opts, struct backend **out);

/* sim.c: the simulated GPUs of opts->sim_devices, shared process-wide by every
 * runtime that names the same device list. */
gpumem_status gpumem__sim_open(const struct options *opts, struct backend **out);

#endif /* GPUMEM_BACKEND_H */
