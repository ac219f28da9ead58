/* The driver's price list: what one call of each CUDA driver entry point costs on
 * a GPU, as a fixed part and a part per MiB of the size it is given (the memory
 * calls: the sizes gpumem_list_driver_calls counts as `bytes`). One table for the
 * driver double, which charges each call its price (fakecuda.h: FAKECUDA_PRICES,
 * fakecuda_set_price, FAKECUDA_SPIN), and for the bench, which adds the calls'
 * price to the time it measures to model a GPU's (bench/replay.c,
 * GPUMEM_BENCH_PRICES). Header only: each includer gets its own copy of these
 * static functions and of the table.
 *
 * The defaults, in ns (a model to see the price by, not a GPU's measure:
 * bench/run_cuda.sh measures a real GPU's, per entry point):
 *   - an ordinary call, about 1 us: pocl's profile of a GPU (github.com/pocl/pocl
 *     issue 908, nvprof) has cuEventCreate at 1.48 us and cuEventRecord at
 *     1.42 us on average;
 *   - a context push or pop, 300 ns: the same profile's cuCtxSetCurrent at 217 ns
 *     at the least, and slangpy's estimate of 0.5 to 1 us per push and pop pair
 *     (github.com/shader-slang/slangpy issue 689);
 *   - retaining a primary context that does not exist yet creates it: 100 ms
 *     (pocl's profile: cuCtxCreate 448 ms); once per GPU and runtime;
 *   - mapping: an H200 grew by 100 GiB in 1 GiB requests in 2.25 s, about 44 us
 *     per 2 MiB granule (issue 31). Split here so that one granule's cuMemCreate,
 *     cuMemMap, cuMemSetAccess, cuMemRelease and cuMemUnmap cost 44 us in all
 *     (9 + 2 + 14 + 5 + 14), mostly per MiB: the cost of mapping is proportional
 *     to the physical memory mapped and involves synchronous work with the GPU
 *     (PyTorch's expandable segments, pytorch/pytorch pull 96995), and profiles
 *     find the time in cuMemUnmap, cuMemSetAccess, cuMemCreate and cuMemRelease,
 *     cuMemMap itself cheap (pytorch/pytorch pull 172056). The H200's 44 us was
 *     measured growing only (no unmap), so these prices may well be low;
 *   - a plain allocation, 10 us and 20 us a MiB: cudaMalloc took about 1 us for a
 *     few bytes and 50 us from 4 KiB to 512 KiB on an older GPU
 *     (www.cs.virginia.edu/~mwb7w/cuda_support/memory_management_overhead.html),
 *     and a GiB is mapped as the H200's VMM growth (22 ms a GiB); its free as an
 *     unmap and a release (8 us a MiB);
 *   - an address range reserved or freed: 5 us, whatever its size.
 * The calls that open the driver (cuInit, the device queries) and the error
 * texts are priced as ordinary calls; gpumem does not count them.
 *
 * Overrides: "NAME:NS[:NS_PER_MIB],..." (NS and NS_PER_MIB whole nanoseconds);
 * NAME "*" sets every entry point, and later items override it
 * ("*:0,cuMemMap:1000:500"). */
#ifndef GPUMEM_DRIVER_PRICES_H
#define GPUMEM_DRIVER_PRICES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct driver_price {
    char name[48];       /* the entry point's symbol */
    uint64_t ns;         /* per call */
    uint64_t ns_per_mib; /* per MiB of the size the call is given */
};

#define DRIVER_PRICES_MAX 48

struct driver_prices {
    size_t n;
    struct driver_price entry[DRIVER_PRICES_MAX];
};

#define DRIVER_PRICE_US ((uint64_t)1000)
#define DRIVER_PRICE_MS ((uint64_t)1000000)

/* The table above, into *p. */
static inline void driver_prices_default(struct driver_prices *p)
{
    static const struct {
        const char *name;
        uint64_t ns, ns_per_mib;
    } table[] = {
        /* what gpumem calls once the driver is open (backend/driver_calls.h) */
        {"cuCtxPushCurrent_v2", 300, 0},
        {"cuCtxPopCurrent_v2", 300, 0},
        {"cuDevicePrimaryCtxRetain", 100 * DRIVER_PRICE_MS, 0},
        {"cuDevicePrimaryCtxRelease_v2", 1 * DRIVER_PRICE_US, 0},
        {"cuMemGetInfo_v2", 1 * DRIVER_PRICE_US, 0},
        {"cuMemAlloc_v2", 10 * DRIVER_PRICE_US, 20 * DRIVER_PRICE_US},
        {"cuMemFree_v2", 10 * DRIVER_PRICE_US, 8 * DRIVER_PRICE_US},
        {"cuMemAddressReserve", 5 * DRIVER_PRICE_US, 0},
        {"cuMemAddressFree", 5 * DRIVER_PRICE_US, 0},
        {"cuMemCreate", 1 * DRIVER_PRICE_US, 4 * DRIVER_PRICE_US},
        {"cuMemMap", 1 * DRIVER_PRICE_US, DRIVER_PRICE_US / 2},
        {"cuMemSetAccess", 2 * DRIVER_PRICE_US, 6 * DRIVER_PRICE_US},
        {"cuMemUnmap", 2 * DRIVER_PRICE_US, 6 * DRIVER_PRICE_US},
        {"cuMemRelease", 1 * DRIVER_PRICE_US, 2 * DRIVER_PRICE_US},
        {"cuMemGetAllocationGranularity", 1 * DRIVER_PRICE_US, 0},
        {"cuEventCreate", 1500, 0},
        {"cuEventDestroy_v2", 1 * DRIVER_PRICE_US, 0},
        {"cuEventRecord", 1500, 0},
        {"cuEventQuery", 1 * DRIVER_PRICE_US, 0},
        {"cuEventSynchronize", 1 * DRIVER_PRICE_US, 0},
        {"cuStreamWaitEvent", 1 * DRIVER_PRICE_US, 0},
        /* the driver's opening and error texts: ordinary calls */
        {"cuInit", 1 * DRIVER_PRICE_US, 0},
        {"cuDeviceGetCount", 1 * DRIVER_PRICE_US, 0},
        {"cuDeviceGet", 1 * DRIVER_PRICE_US, 0},
        {"cuDeviceGetName", 1 * DRIVER_PRICE_US, 0},
        {"cuDeviceTotalMem_v2", 1 * DRIVER_PRICE_US, 0},
        {"cuDeviceGetAttribute", 1 * DRIVER_PRICE_US, 0},
        {"cuDeviceGetUuid_v2", 1 * DRIVER_PRICE_US, 0},
        {"cuGetErrorName", 1 * DRIVER_PRICE_US, 0},
        {"cuGetErrorString", 1 * DRIVER_PRICE_US, 0},
    };
    memset(p, 0, sizeof *p);
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        struct driver_price *e = &p->entry[p->n++];
        snprintf(e->name, sizeof e->name, "%s", table[i].name);
        e->ns = table[i].ns;
        e->ns_per_mib = table[i].ns_per_mib;
    }
}

/* The price of entry point `name`, or NULL when the table has none. */
static inline const struct driver_price *driver_price_of(const struct driver_prices *p,
                                                         const char *name)
{
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->entry[i].name, name) == 0)
            return &p->entry[i];
    return NULL;
}

/* Sets the price of `name` ("*": every entry point). Returns 0, or -1 when the
 * table has no such entry point. */
static inline int driver_price_set(struct driver_prices *p, const char *name, uint64_t ns,
                                   uint64_t ns_per_mib)
{
    int found = -1;
    for (size_t i = 0; i < p->n; i++) {
        if (strcmp(name, "*") == 0 || strcmp(p->entry[i].name, name) == 0) {
            p->entry[i].ns = ns;
            p->entry[i].ns_per_mib = ns_per_mib;
            found = 0;
        }
    }
    return found;
}

/* A whole number of nanoseconds at s[0..n); false if it is not one. */
static inline bool driver_price_number(const char *s, size_t n, uint64_t *out)
{
    char buf[32];
    if (n == 0 || n >= sizeof buf)
        return false;
    memcpy(buf, s, n);
    buf[n] = '\0';
    for (size_t i = 0; i < n; i++)
        if (buf[i] < '0' || buf[i] > '9')
            return false;
    char *end;
    unsigned long long v = strtoull(buf, &end, 10);
    *out = (uint64_t)v;
    return *end == '\0' && v <= UINT64_MAX / 2;
}

/* Applies the overrides in `spec` ("NAME:NS[:NS_PER_MIB],...") to *p, in order.
 * Returns 0, or -1 with what is wrong in err (nothing after the bad item is
 * applied). */
static inline int driver_prices_parse(struct driver_prices *p, const char *spec,
                                      char *err, size_t err_size)
{
    for (const char *at = spec; at && *at;) {
        const char *end = strchr(at, ',');
        if (!end)
            end = at + strlen(at);
        const char *c1 = memchr(at, ':', (size_t)(end - at));
        const char *c2 = c1 ? memchr(c1 + 1, ':', (size_t)(end - c1 - 1)) : NULL;
        char name[48];
        uint64_t ns = 0, per_mib = 0;
        size_t len = c1 ? (size_t)(c1 - at) : 0;
        bool ok = c1 && len > 0 && len < sizeof name &&
                  driver_price_number(c1 + 1, (size_t)((c2 ? c2 : end) - c1 - 1), &ns) &&
                  (!c2 || driver_price_number(c2 + 1, (size_t)(end - c2 - 1), &per_mib));
        if (ok) {
            memcpy(name, at, len);
            name[len] = '\0';
        }
        if (!ok || driver_price_set(p, name, ns, per_mib) != 0) {
            snprintf(err, err_size,
                     "'%.*s' is not NAME:NS[:NS_PER_MIB] with NAME an entry point of the "
                     "price list (or *) and NS whole nanoseconds",
                     (int)(end - at), at);
            return -1;
        }
        at = *end ? end + 1 : end;
    }
    return 0;
}

/* What `calls` calls of entry point e given `bytes` in all cost, in ns. */
static inline double driver_price_ns(const struct driver_price *e, uint64_t calls,
                                     uint64_t bytes)
{
    return (double)calls * (double)e->ns +
           (double)bytes * (double)e->ns_per_mib / (1024.0 * 1024.0);
}

#endif /* GPUMEM_DRIVER_PRICES_H */
