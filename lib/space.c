/* Address spaces of growing pools: a range of addresses allocated from the
 * backend for a
 * pool's whole budget, and a layout arena over it whose live chunks are the
 * regions mapped with physical memory. The arena's best fit (smallest hole,
 * lowest address) keeps regions adjacent. See space.h; the owning pool's lock
 * guards everything here. */
#include "space.h"

#include "arena.h"

#include <stdio.h>
#include <stdlib.h>

struct space {
    struct backend *backend;
    int device;
    uint64_t base, size;  /* the range */
    uint64_t granularity; /* every region's size and address is a multiple */
    struct arena *layout; /* live chunks: mapped regions; free chunks: holes */
};

gpumem_status gpumem__space_create(struct backend *b, int dev, uint64_t budget,
                                   struct space **out, struct reason *why)
{
    char buf[GPUMEM_BYTES_BUF];
    const struct backend_ops *ops = b->ops;
    if (!ops->space_granularity || !ops->space_alloc_range || !ops->space_free_range ||
        !ops->space_map || !ops->space_unmap)
        return gpumem__reason(why, GPUMEM_ERR_UNSUPPORTED,
                              "the %s backend has no virtual address spaces", ops->name);
    uint64_t granularity, size;
    gpumem_status s = ops->space_granularity(b, dev, &granularity, why);
    if (s != GPUMEM_OK)
        return s;
    if (budget == 0 || !gpumem__align_up(budget, granularity, &size))
        return gpumem__reason(why, GPUMEM_ERR_UNSUPPORTED,
                              "GPU:%d: a budget of %s cannot be an address range", dev,
                              gpumem__format_bytes(budget, buf, sizeof buf));
    struct space *sp = calloc(1, sizeof *sp);
    if (!sp || gpumem__arena_create(NULL, &sp->layout) != ARENA_OK) {
        free(sp);
        return gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                              "GPU:%d: out of host memory for an address range", dev);
    }
    sp->backend = b;
    sp->device = dev;
    sp->granularity = granularity;
    sp->size = size;
    s = ops->space_alloc_range(b, dev, size, &sp->base, why);
    if (s == GPUMEM_OK &&
        gpumem__arena_add_region(sp->layout, sp->base, size, true) != ARENA_OK) {
        struct reason ignored; /* the host-memory reason is the one to give */
        ops->space_free_range(b, dev, sp->base, size, &ignored);
        s = gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                           "GPU:%d: out of host memory for an address range", dev);
    }
    if (s != GPUMEM_OK) {
        gpumem__arena_destroy(sp->layout);
        free(sp);
        return s;
    }
    *out = sp;
    return GPUMEM_OK;
}

gpumem_status gpumem__space_destroy(struct space *sp, struct reason *why)
{
    if (!sp)
        return GPUMEM_OK;
    struct arena_stats st;
    gpumem__arena_stats(sp->layout, &st);
    gpumem_status s = GPUMEM_OK;
    if (st.live_chunks > 0)
        s = gpumem__reason(
            why, GPUMEM_ERR_BACKEND,
            "GPU:%d: %llu region(s) of the address range at 0x%llx could not "
            "be unmapped; the range stays reserved",
            sp->device, (unsigned long long)st.live_chunks, (unsigned long long)sp->base);
    else
        s = sp->backend->ops->space_free_range(sp->backend, sp->device, sp->base,
                                               sp->size, why);
    gpumem__arena_destroy(sp->layout);
    free(sp);
    return s;
}

void gpumem__space_forget(struct space *sp)
{
    if (!sp)
        return;
    gpumem__arena_destroy(sp->layout);
    free(sp);
}

uint64_t gpumem__space_granularity(const struct space *sp) { return sp->granularity; }

uint64_t gpumem__space_size(const struct space *sp) { return sp->size; }

bool gpumem__space_contains(const struct space *sp, uint64_t addr)
{
    return addr >= sp->base && addr - sp->base < sp->size;
}

gpumem_status gpumem__space_map(struct space *sp, uint64_t size, uint64_t *addr,
                                bool *held, struct reason *why)
{
    char buf[GPUMEM_BYTES_BUF];
    uint64_t at, got;
    *held = false;
    int r = gpumem__arena_alloc(sp->layout, size, &at, &got);
    if (r == ARENA_HOST_OOM)
        return gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                              "GPU:%d: out of host memory for the address range's layout",
                              sp->device);
    if (r != ARENA_OK)
        return gpumem__reason(why, GPUMEM_ERR_UNSUPPORTED,
                              "GPU:%d: no hole of %s is left in the address range",
                              sp->device, gpumem__format_bytes(size, buf, sizeof buf));
    bool stuck = false;
    gpumem_status s =
        sp->backend->ops->space_map(sp->backend, sp->device, at, size, &stuck, held, why);
    if (s != GPUMEM_OK) {
        /* a mapping the backend could not undo keeps its place, as a region it
         * refuses to unmap does: never reused, and the range is left reserved */
        if (!stuck)
            gpumem__arena_free(sp->layout, at, NULL);
        return s;
    }
    *addr = at;
    return GPUMEM_OK;
}

gpumem_status gpumem__space_unmap(struct space *sp, uint64_t addr, uint64_t size,
                                  struct reason *why)
{
    gpumem_status s =
        sp->backend->ops->space_unmap(sp->backend, sp->device, addr, size, why);
    if (s == GPUMEM_OK)
        gpumem__arena_free(sp->layout, addr, NULL);
    return s;
}
