/* The backend contract: what gpumem needs from a GPU driver. A backend counts
 * devices, describes them, reports their free memory, allocates and frees
 * regions of device memory, and may offer address spaces into which memory is
 * mapped piece by piece (CUDA's virtual memory management). Everything above it
 * (pools, arena) works on device addresses as uint64_t and never touches the
 * memory.
 *
 * Preconditions for every call: `dev` < device_count; sizes are > 0 and multiples
 * of 256; out-pointers, `why` among them, are not NULL. A failure returns a status
 * and writes its reason, in the backend's own words ("cuMemAlloc_v2(...) on GPU:0
 * failed: ..."), into *why; the last-error message is the entry point's to write
 * (docs/internals.md, "Errors: how they travel").
 * Thread safety: every call may be made concurrently (a backend locks its own
 * state); alloc_region/free_region, the space calls and the event calls may be
 * called with a pool lock held, so a backend never calls back into a pool.
 * Counting: every operation counts, in b->driver_calls, the CUDA driver calls
 * it makes (CUDA) or that the CUDA backend would make for it (simulated GPUs):
 * driver_calls.h. */
#ifndef GPUMEM_BACKEND_H
#define GPUMEM_BACKEND_H

#include "backend/driver_calls.h"
#include "internal.h"

struct backend;

struct backend_ops {
    const char *name; /* "sim", "cuda": for messages */
    void (*destroy)(struct backend *b);
    /* Frees the backend's host bookkeeping in a forked child of the process that
     * opened it, without a driver call and without waiting on a lock that a
     * thread of the parent may have held at the fork: the device state stays the
     * parent's. */
    void (*forget)(struct backend *b);
    size_t (*device_count)(const struct backend *b);
    /* Fills model, total_bytes, compute_major/minor and uuid (index and name are the
     * runtime's). */
    gpumem_status (*device_props)(struct backend *b, int dev, gpumem_physical_device *out,
                                  struct reason *why);
    gpumem_status (*mem_info)(struct backend *b, int dev, uint64_t *free_bytes,
                              uint64_t *total_bytes, struct reason *why);
    /* Plain device memory, one allocation per region (cuMemAlloc/cuMemFree).
     * GPUMEM_ERR_OUT_OF_MEMORY when the device has not `size` bytes to give. */
    gpumem_status (*alloc_region)(struct backend *b, int dev, uint64_t size,
                                  uint64_t *addr, struct reason *why);
    gpumem_status (*free_region)(struct backend *b, int dev, uint64_t addr, uint64_t size,
                                 struct reason *why);

    /* Optional virtual address spaces (all five NULL when the backend has none):
     * a range of addresses allocated without memory behind it, into which
     * physical memory is mapped and unmapped piece by piece, so that memory taken
     * at different times lies side by side and can be given back piece by piece.
     * Addresses and sizes passed to them are multiples of the granularity. */
    /* The mapping granularity of device `dev` (a power of two, >= 256);
     * GPUMEM_ERR_UNSUPPORTED when this device has no spaces. */
    gpumem_status (*space_granularity)(struct backend *b, int dev, uint64_t *granularity,
                                       struct reason *why);
    /* Allocates a range of `size` bytes of addresses, without memory behind them
     * (cuMemAddressReserve), aligned to the granularity. */
    gpumem_status (*space_alloc_range)(struct backend *b, int dev, uint64_t size,
                                       uint64_t *base, struct reason *why);
    /* Frees a whole range. pre: nothing mapped in it. */
    gpumem_status (*space_free_range)(struct backend *b, int dev, uint64_t base,
                                      uint64_t size, struct reason *why);
    /* Backs [addr, addr+size) of a range with new device memory that the
     * device may read and write. pre: nothing mapped there. GPUMEM_ERR_OUT_OF_MEMORY
     * when the device has not `size` bytes to give. On failure nothing is mapped and
     * no memory is taken, unless undoing a partial mapping failed too: then *stuck
     * is true when those addresses are still mapped (they must not be used again),
     * and *held when the `size` bytes of device memory are still taken (until the
     * process ends; a stuck mapping holds them). */
    gpumem_status (*space_map)(struct backend *b, int dev, uint64_t addr, uint64_t size,
                               bool *stuck, bool *held, struct reason *why);
    /* Unmaps a range mapped by one space_map and gives its memory back. */
    gpumem_status (*space_unmap)(struct backend *b, int dev, uint64_t addr, uint64_t size,
                                 struct reason *why);

    /* Events, which order stream-ordered frees (lib/streams.c). All five NULL on a
     * backend whose streams are synchronous (the simulated GPUs): there, work is
     * done when the call that queued it returns, so every event would be
     * complete at once, and a block freed on a stream may go to any stream at
     * once. An event is an opaque handle made on device `dev`; a stream is the
     * program's handle (CUstream, cudaStream_t, CuPy's stream.ptr), NULL being the
     * legacy default stream. */
    /* A new event, without timing. GPUMEM_ERR_OUT_OF_MEMORY when the device has
     * no memory for it. */
    gpumem_status (*event_create)(struct backend *b, int dev, void **event,
                                  struct reason *why);
    gpumem_status (*event_destroy)(struct backend *b, int dev, void *event,
                                   struct reason *why);
    /* Captures the work queued on `stream` so far: the event completes when it has. */
    gpumem_status (*event_record)(struct backend *b, int dev, void *event, void *stream,
                                  struct reason *why);
    /* Never waits: *done is whether the work the event captured has completed (true
     * for an event never recorded). */
    gpumem_status (*event_query)(struct backend *b, int dev, void *event, bool *done,
                                 struct reason *why);
    /* Waits until the work the event captured has completed. */
    gpumem_status (*event_synchronize)(struct backend *b, int dev, void *event,
                                       struct reason *why);

    /* Optional (NULL: the backend pushes nothing): ends a context scope
     * (gpumem__backend_scope_close) in which a call pushed the context. */
    void (*scope_pop)(struct backend *b, int dev);
};

struct backend {
    const struct backend_ops *ops;
    /* Regions that touch in address space may be used as one block of memory
     * (true for the simulated backend and for CUDA virtual-memory mappings, false
     * for separate cuMemAlloc blocks). */
    bool regions_contiguous;
    /* Memory the host may read and write (simulated GPUs). The runtime tells the
     * backends apart by it, never by ops->name: it is what gpumem_get_backend
     * reports as GPUMEM_BACKEND_SIM, what makes a CUDA-only call refuse `auto`'s
     * fallback, and, without GPUMEM_SIM_MACHINE, GPUs that no other process
     * shares (no ledger). */
    bool host_accessible;
    /* Opening it set up driver state of this process (CUDA's cuInit and device
     * handles), which a forked child cannot use: a runtime over it belongs to the
     * process that created it, initialized or not. */
    bool process_bound;
    /* The driver calls made for this backend, one counter set per device
     * (driver_calls.h), made at open and freed by destroy and forget: each
     * runtime counts its own, also where simulated GPUs are shared. */
    struct driver_counts *driver_calls;
};

/* Context scopes (backend.c). A pass that makes many driver calls for one device
 * (a growth, a release, a trim) opens a scope on its thread: inside it the first
 * call that needs the device's context pushes it and the rest find it pushed,
 * and gpumem__backend_scope_close pops it (ops->scope_pop) if a call pushed it;
 * a scope in which no call was made pushes and pops nothing. Scopes nest (only
 * the outermost closes); one device at a time per thread, so a scope of another
 * device or backend inside one is not a scope (its calls push and pop as they
 * would outside). Opened and closed by the same thread, around gpumem's own
 * work only: the thread's context is the caller's again when the scope closes.
 * The backends ask with gpumem__backend_scope_push and _scoped. */
void gpumem__backend_scope_open(struct backend *b, int dev);
void gpumem__backend_scope_close(struct backend *b, int dev);
/* Whether the thread is in a scope of (b, dev): then a pop is left to the scope. */
bool gpumem__backend_scoped(const struct backend *b, int dev);
/* A call of (b, dev) needs the context: true when it must push it (outside a
 * scope, or the scope's first push, which the scope then owns). */
bool gpumem__backend_scope_push(const struct backend *b, int dev);
/* The push that gpumem__backend_scope_push asked for failed: the scope does not
 * own one. */
void gpumem__backend_scope_push_failed(const struct backend *b, int dev);

/* backend.c: writes 16 bytes of UUID as nvidia-smi prints a GPU's,
 * "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (lower-case hex; 40 characters and
 * the NUL), truncated to n. */
void gpumem__format_uuid(const unsigned char bytes[16], char *out, size_t n);

/* backend.c: opens the backend opts->backend chooses (auto: CUDA when a device is
 * found, else simulated). The reason of a failure is worded for
 * gpumem_runtime_create to put after its name. */
gpumem_status gpumem__backend_open(const struct options *opts, struct backend **out,
                                   struct reason *why);

/* cuda.c: the CUDA driver loaded with dlopen (opts->cuda_library, else
 * libcuda.so.1). GPUMEM_ERR_UNSUPPORTED, with the reason in *why, when
 * there is no usable CUDA here (library not found, cuInit failed, no device):
 * `auto` then falls back to the simulated GPUs. *broken tells whether that is
 * a driver that loaded and failed cuInit with another error than "no device" (or
 * the stub library of a container): a GPU whose driver does not work, which
 * `auto` warns of. Other failures are GPUMEM_ERR_BACKEND (or OUT_OF_MEMORY for
 * host memory), and so is cuInit's CUDA_ERROR_NOT_INITIALIZED, what a process forked
 * from one that had initialized CUDA gets (no fallback there). pre: broken != NULL. */
gpumem_status gpumem__cuda_open(const struct options *opts, struct backend **out,
                                bool *broken, struct reason *why);

/* cuda.c: GPUMEM_ERR_UNSUPPORTED, with the reason in *why, when
 * gpumem initialized the CUDA driver in a process this one is a fork of (the
 * driver cannot be used in such a child); GPUMEM_OK otherwise. No driver call.
 * The openers below check it first; `auto` must not fall back to simulated GPUs
 * on it. */
gpumem_status gpumem__cuda_check_fork(struct reason *why);

/* cuda.c: the same over a table of entry points the caller fills (tests): no
 * library is loaded. The table is copied. */
struct cuda_api;
gpumem_status gpumem__cuda_open_api(const struct options *opts,
                                    const struct cuda_api *api, struct backend **out,
                                    struct reason *why);

/* sim.c: the simulated GPUs of opts->sim_devices, shared process-wide by every
 * runtime that names the same device list. */
gpumem_status gpumem__sim_open(const struct options *opts, struct backend **out,
                               struct reason *why);

#endif /* GPUMEM_BACKEND_H */
