/* Controls of the CUDA driver test double (tests/fakecuda/fakecuda.c), built as
 * libcuda.so.1. A test links the double and points GPUMEM_CUDA_LIBRARY at the
 * same file: the dlopen in gpumem's CUDA backend then returns the copy already
 * loaded, so the test and the backend share one driver state.
 *
 * A process that is a fork of the one whose cuInit succeeded gets
 * CUDA_ERROR_NOT_INITIALIZED from every entry point (but the error texts) and a
 * misuse, as the real driver fails every call in such a child.
 *
 * Configuration is read from the environment on the first driver call after
 * load or fakecuda_reset(), and may then be changed with the setters below:
 *   FAKECUDA_DEVICES      comma-separated MODEL:SIZE[:CC[:USED]] (USED: memory that
 *                         other processes hold); "" = no device (cuInit fails with
 *                         CUDA_ERROR_NO_DEVICE). Default "Fake GPU:16GiB:8.0".
 *   FAKECUDA_VMM          1 (default) or 0: virtual memory management supported
 *   FAKECUDA_GRANULARITY  mapping granularity in bytes (default 2MiB)
 *   FAKECUDA_CONTEXT_BYTES memory a primary context takes while it exists (0)
 *   FAKECUDA_INIT_ERROR   a CUresult (number or name) that every cuInit returns
 *   FAKECUDA_FAIL         comma-separated FUNCTION:N[:CODE]: the Nth call of
 *                         FUNCTION fails with CODE (default CUDA_ERROR_OUT_OF_MEMORY)
 *   FAKECUDA_MACHINE      NAME: the processes that set the same name (and the same
 *                         FAKECUDA_DEVICES) share each device's free memory, as on
 *                         one machine: what one allocates, the others lack, until
 *                         it frees or ends (ledgers /dev/shm/gpumem-fakecuda-NAME-*)
 *   FAKECUDA_PRICES       NAME:NS[:NS_PER_MIB],...: overrides of the price list
 *                         (driver_prices.h; NAME * is every entry point), what a
 *                         call costs on a GPU: a fixed part and a part per MiB of
 *                         the size it is given
 *   FAKECUDA_SPIN         1: each call really spends its price, busy-waiting once
 *                         the double's own lock is let go (its caller's locks
 *                         stay held as long as a GPU's driver would keep them)
 * Sizes take B, KiB, MiB, GiB or TiB. Every function is thread-safe.
 *
 * The price: every call is charged its entry point's price from the list (the
 * memory calls also per MiB of their size: cuMemAlloc_v2's, cuMemCreate's,
 * cuMemMap's, cuMemSetAccess's, cuMemUnmap's, the address range's of
 * cuMemAddressReserve and cuMemAddressFree, and the memory cuMemFree_v2 and
 * cuMemRelease give back), failed calls included, and the charges add up
 * (fakecuda_charged_ns). Without FAKECUDA_SPIN nothing is spent: the double
 * answers at once, and the charge says what a GPU would have taken. */
#ifndef FAKECUDA_H
#define FAKECUDA_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define FAKECUDA_API __attribute__((visibility("default")))
#else
#define FAKECUDA_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* What the process holds from the driver right now. */
struct fakecuda_live {
    unsigned long allocations; /* cuMemAlloc_v2 blocks not freed */
    unsigned long handles;  /* cuMemCreate memory still held (by a handle or a mapping) */
    unsigned long mappings; /* cuMemMap ranges not unmapped */
    unsigned long reservations; /* cuMemAddressReserve ranges not freed */
    unsigned long context_refs; /* cuDevicePrimaryCtxRetain not yet released */
    unsigned long events;       /* cuEventCreate not yet destroyed */
};

/* Frees everything the driver holds, forgets the configuration (prices and
 * spinning included), the counters and charges, the faults, the misuse record
 * and the calling thread's context stack; the next driver call reads the
 * environment again. */
FAKECUDA_API void fakecuda_reset(void);

/* FAKECUDA_DEVICES syntax. Returns 0, or -1 for a bad spec (nothing changes). */
FAKECUDA_API int fakecuda_set_devices(const char *spec);
FAKECUDA_API void fakecuda_set_vmm(int enabled);
FAKECUDA_API void fakecuda_set_granularity(uint64_t bytes);
FAKECUDA_API void fakecuda_set_context_bytes(uint64_t bytes);
/* Memory of device `dev` that other processes hold (lowers its free memory). */
FAKECUDA_API void fakecuda_set_used_elsewhere(int dev, uint64_t bytes);
/* The 16 bytes cuDeviceGetUuid(_v2) gives for device `dev` (by default
 * fa4ec0da-0000-4000-8000-0000000000NN, NN the index in hex); NULL: the call fails
 * with CUDA_ERROR_NOT_SUPPORTED, as on a driver that cannot tell. */
FAKECUDA_API void fakecuda_set_uuid(int dev, const unsigned char *bytes);
/* Every cuInit returns `code` from now on (0: succeeds again). */
FAKECUDA_API void fakecuda_set_init_error(int code);

/* The n-th call of entry point `fn` from now (n >= 1) fails with `code`, once;
 * n = 0 disarms. Returns 0, or -1 when fn is not an entry point of the double. */
FAKECUDA_API int fakecuda_fail_nth(const char *fn, unsigned long n, int code);
/* Once the armed fault fires, the next call of `fn` fails with `code` too (a
 * second failure, as while cleaning up after the first); once. Returns 0, or -1
 * when fn is not an entry point of the double. */
FAKECUDA_API int fakecuda_fail_then(const char *fn, int code);
/* The next call of `fn` waits inside the driver, with the double's own lock let
 * go, until fakecuda_unblock() (one call at a time). Returns 0, or -1 when fn is
 * not an entry point of the double. */
FAKECUDA_API int fakecuda_block_next(const char *fn);
/* Waits until a call is waiting in fakecuda_block_next's entry point. */
FAKECUDA_API void fakecuda_wait_blocked(void);
FAKECUDA_API void fakecuda_unblock(void);

/* 1 while a fault is armed and has not fired yet. */
FAKECUDA_API int fakecuda_fault_pending(void);

/* Sets the price of entry point `fn` ("*": every one): `ns` per call and
 * `ns_per_mib` per MiB of the size a memory call is given. Returns 0, or -1 when
 * the price list has no such entry point. */
FAKECUDA_API int fakecuda_set_price(const char *fn, uint64_t ns, uint64_t ns_per_mib);
/* 1: each call spends its price from now on (busy-waiting, as FAKECUDA_SPIN=1); 0:
 * none does. */
FAKECUDA_API void fakecuda_set_spin(int enabled);
/* The prices of every call since the last reset, in ns. */
FAKECUDA_API uint64_t fakecuda_charged_ns(void);

/* Calls of `fn` since the last reset / since the library was loaded. */
FAKECUDA_API unsigned long fakecuda_calls(const char *fn);
FAKECUDA_API unsigned long fakecuda_calls_ever(const char *fn);
/* The i-th entry point the double exports, NULL past the last. */
FAKECUDA_API const char *fakecuda_entry_point(size_t i);

/* Streams and events. The double runs no work, so any pointer (NULL too) is a
 * stream, and an event is complete as soon as it is recorded, unless its stream is
 * held: an event recorded on a held stream stays incomplete (cuEventQuery returns
 * CUDA_ERROR_NOT_READY, cuEventSynchronize waits, with the double's lock let go)
 * until fakecuda_release_stream of that stream, as if a kernel queued there ran
 * until then. Holding returns 0, or -1 when 16 streams are held already. */
FAKECUDA_API int fakecuda_hold_stream(const void *stream);
/* Completes every event recorded on `stream`, and stops holding it. */
FAKECUDA_API void fakecuda_release_stream(const void *stream);
/* 1 while `stream` is held. */
FAKECUDA_API int fakecuda_stream_held(const void *stream);
/* 1: a cuEventSynchronize of an incomplete event completes its stream's work
 * first, as fakecuda_release_stream would (the work runs to its end while the
 * caller waits), so that a single thread can hold streams and still reach a
 * wait; 0 (the default): it waits for fakecuda_release_stream. */
FAKECUDA_API void fakecuda_set_wait_completes(int enabled);
/* Live events that are recorded and not complete. */
FAKECUDA_API unsigned long fakecuda_events_incomplete(void);

/* What cuMemGetInfo_v2 would report as free on device `dev` now. */
FAKECUDA_API uint64_t fakecuda_free_bytes(int dev);
/* The memory that cuMemAlloc_v2 blocks and cuMemCreate handles hold on `dev`. */
FAKECUDA_API uint64_t fakecuda_used_bytes(int dev);
FAKECUDA_API void fakecuda_live(struct fakecuda_live *out);

/* The calling thread's context stack: its depth, and its top (NULL if empty). */
FAKECUDA_API int fakecuda_context_depth(void);
FAKECUDA_API const void *fakecuda_current_context(void);
/* Pushes a context of device `dev` that is not its primary one (as a program
 * with its own context would have current) and returns it. */
FAKECUDA_API const void *fakecuda_push_user_context(int dev);
/* Pops whatever is on top; returns 0, or -1 when the stack is empty. */
FAKECUDA_API int fakecuda_pop_context(void);

/* Misuse the double detected (double free, unknown pointer, call without a
 * context or before cuInit, unbalanced pop, release of what was not retained, an
 * event used after cuEventDestroy_v2 or destroyed while a thread waits on it...),
 * since the last reset, and a description of the last one ("" if none). */
FAKECUDA_API unsigned long fakecuda_misuses(void);
FAKECUDA_API const char *fakecuda_last_misuse(void);

#ifdef __cplusplus
}
#endif

#endif /* FAKECUDA_H */
