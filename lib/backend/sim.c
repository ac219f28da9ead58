/* Simulated GPUs in host virtual memory, for machines without a GPU.
 *
 * Each simulated GPU is one anonymous mapping, made without reserving swap
 * (MAP_NORESERVE), so an 80 GiB GPU costs nothing until its pages are touched; its
 * pointers are real host addresses that programs may write to. The mapping is its
 * address space, twice its memory where the host has the room (else its memory's
 * size): a driver maps pages anywhere, so a region that fits the free memory must
 * not fail for want of one contiguous hole, and twice the room makes that rare.
 * The address space is managed by an arena, like a driver's: regions are carved
 * from it and given back, and released regions return their pages to the host
 * (MADV_DONTNEED). The memory is counted apart from the addresses.
 *
 * The simulated GPUs are the process's hardware: every runtime that names the same
 * device list shares one `struct sim_hardware` (found in a process-wide registry
 * and reference counted), so a greedy runtime leaves little for the next one, as
 * on a real shared card. Locks: registry_lock, then a device's lock (a leaf);
 * docs/internals.md, "Locks". */
#include "backend/backend.h"

#include "arena.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct sim_device {
    struct sim_device_spec spec;
    void *map;          /* the mapping (the address space); NULL until made */
    uint64_t map_bytes; /* its length: twice mem_bytes, or mem_bytes */
    uint64_t mem_bytes; /* the memory: the size, rounded down to the granule */
    struct arena
        *space;        /* the device's address space: reserved regions are live chunks */
    gpumem_mutex lock; /* guards `space` */
};

struct sim_hardware {
    struct sim_hardware *next; /* registry list */
    size_t refs;               /* runtimes using it */
    size_t num_devices;
    struct sim_device devices[GPUMEM_MAX_SIM_DEVICES];
};

struct sim_backend {
    struct backend base; /* first: a struct backend * is a struct sim_backend * */
    struct sim_hardware *hw;
};

static gpumem_mutex registry_lock = GPUMEM_MUTEX_INITIALIZER(GPUMEM_RANK_SIM_REGISTRY);
static struct sim_hardware *registry;

/* fork(): the simulated GPUs are host memory, copied into a child with the rest
 * of the process (the regions the parent's runtimes reserved stay booked in the
 * child's copy, as the parent still holds them). Their locks are leaves, held
 * only around bookkeeping, so they are taken around every fork (the device locks
 * as siblings, in list order): the child's copies are then whole and free. Registered
 * once, by the first open. */
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void fork_prepare(void)
{
    gpumem__mutex_lock(&registry_lock);
    for (struct sim_hardware *hw = registry; hw; hw = hw->next)
        for (size_t i = 0; i < hw->num_devices; i++)
            gpumem__mutex_lock_sibling(&hw->devices[i].lock);
}

static void fork_done(void)
{
    for (struct sim_hardware *hw = registry; hw; hw = hw->next)
        for (size_t i = 0; i < hw->num_devices; i++)
            gpumem__mutex_unlock(&hw->devices[i].lock);
    gpumem__mutex_unlock(&registry_lock);
}

static void fork_watch(void) { gpumem__atfork(fork_prepare, fork_done, fork_done); }

static struct sim_device *sim_device(struct backend *b, int dev)
{
    return &((struct sim_backend *)b)->hw->devices[dev];
}

static bool same_devices(const struct sim_hardware *hw, const struct options *opts)
{
    if (hw->num_devices != opts->num_sim_devices)
        return false;
    for (size_t i = 0; i < hw->num_devices; i++) {
        const struct sim_device_spec *a = &hw->devices[i].spec,
                                     *b = &opts->sim_devices[i];
        if (strcmp(a->model, b->model) != 0 || a->total_bytes != b->total_bytes ||
            a->cc_major != b->cc_major || a->cc_minor != b->cc_minor)
            return false;
    }
    return true;
}

static void hardware_free(struct sim_hardware *hw)
{
    for (size_t i = 0; i < hw->num_devices; i++) {
        struct sim_device *d = &hw->devices[i];
        gpumem__arena_destroy(d->space);
        if (d->map)
            munmap(d->map, d->map_bytes);
        gpumem__mutex_destroy(&d->lock);
    }
    free(hw);
}

static gpumem_status hardware_create(const struct options *opts,
                                     struct sim_hardware **out, struct reason *why)
{
    char buf[GPUMEM_BYTES_BUF];
    struct sim_hardware *hw = calloc(1, sizeof *hw);
    if (!hw)
        return gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                              "simulated GPUs: out of host memory for the device table");
    hw->num_devices = opts->num_sim_devices;
    for (size_t i = 0; i < hw->num_devices; i++)
        gpumem__mutex_init(&hw->devices[i].lock, GPUMEM_RANK_SIM_DEVICE);
    gpumem_status s = GPUMEM_OK;
    for (size_t i = 0; i < hw->num_devices && s == GPUMEM_OK; i++) {
        struct sim_device *d = &hw->devices[i];
        d->spec = opts->sim_devices[i];
        d->mem_bytes = gpumem__align_down(d->spec.total_bytes, ARENA_GRANULE);
        if (d->mem_bytes == 0 || d->mem_bytes > SIZE_MAX / 2) {
            s = gpumem__reason(why, GPUMEM_ERR_INVALID_ARGUMENT,
                               "simulated GPU:%zu: size %s is too small or too large", i,
                               gpumem__format_bytes(d->spec.total_bytes, buf,
                                                    sizeof buf));
            break;
        }
        void *map = MAP_FAILED;
        for (int twice = 1; twice >= 0 && map == MAP_FAILED; twice--) {
            d->map_bytes = d->mem_bytes << twice;
            map = mmap(NULL, (size_t)d->map_bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        }
        if (map == MAP_FAILED) {
            s = gpumem__reason(
                why, GPUMEM_ERR_BACKEND,
                "simulated GPU:%zu: mmap of %s of host address space failed: %s", i,
                gpumem__format_bytes(d->map_bytes, buf, sizeof buf), strerror(errno));
            break;
        }
        d->map = map;
        if (gpumem__arena_create(NULL, &d->space) != ARENA_OK ||
            gpumem__arena_add_region(d->space, (uint64_t)(uintptr_t)map, d->map_bytes,
                                     true) != ARENA_OK)
            s = gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                               "simulated GPU:%zu: out of host memory", i);
    }
    if (s != GPUMEM_OK) {
        hardware_free(hw); /* after the reason: it describes a device of hw */
        return s;
    }
    *out = hw;
    return GPUMEM_OK;
}

static void sim_destroy(struct backend *b)
{
    struct sim_hardware *hw = ((struct sim_backend *)b)->hw;
    gpumem__mutex_lock(&registry_lock);
    if (--hw->refs == 0) {
        for (struct sim_hardware **p = &registry; *p; p = &(*p)->next) {
            if (*p == hw) {
                *p = hw->next;
                break;
            }
        }
        hardware_free(hw);
    }
    gpumem__mutex_unlock(&registry_lock);
    free(b);
}

/* In a forked child, of a backend the parent opened: the regions its runtime
 * reserved stay booked in the child's copy of the simulated GPUs, as on real
 * ones the parent still holds them, so that copy stays in the registry even
 * when this was its last user. Its locks are whole after the fork (fork_done). */
static void sim_forget(struct backend *b)
{
    struct sim_hardware *hw = ((struct sim_backend *)b)->hw;
    gpumem__mutex_lock(&registry_lock);
    hw->refs--;
    gpumem__mutex_unlock(&registry_lock);
    free(b);
}

static size_t sim_device_count(const struct backend *b)
{
    return ((const struct sim_backend *)b)->hw->num_devices;
}

static gpumem_status sim_device_props(struct backend *b, int dev,
                                      gpumem_physical_device *out, struct reason *why)
{
    (void)why; /* cannot fail */
    const struct sim_device *d = sim_device(b, dev);
    snprintf(out->model, sizeof out->model, "%s", d->spec.model);
    out->total_bytes = d->spec.total_bytes;
    out->compute_major = d->spec.cc_major;
    out->compute_minor = d->spec.cc_minor;
    return GPUMEM_OK;
}

static gpumem_status sim_mem_info(struct backend *b, int dev, uint64_t *free_bytes,
                                  uint64_t *total_bytes, struct reason *why)
{
    (void)why; /* cannot fail */
    struct sim_device *d = sim_device(b, dev);
    struct arena_stats st;
    gpumem__mutex_lock(&d->lock);
    gpumem__arena_stats(d->space, &st);
    gpumem__mutex_unlock(&d->lock);
    *free_bytes = d->mem_bytes - st.allocated_bytes;
    *total_bytes = d->spec.total_bytes;
    return GPUMEM_OK;
}

static gpumem_status sim_alloc_region(struct backend *b, int dev, uint64_t size,
                                      uint64_t *addr, struct reason *why)
{
    struct sim_device *d = sim_device(b, dev);
    char want[GPUMEM_BYTES_BUF], have[GPUMEM_BYTES_BUF], largest[GPUMEM_BYTES_BUF];
    uint64_t got;
    struct arena_stats st;
    gpumem__mutex_lock(&d->lock);
    gpumem__arena_stats(d->space, &st);
    uint64_t free_bytes = d->mem_bytes - st.allocated_bytes, need;
    /* the arena rounds to its granule: so does the memory it counts */
    bool fits = gpumem__align_up(size, ARENA_GRANULE, &need) && need <= free_bytes;
    int r = fits ? gpumem__arena_alloc(d->space, size, addr, &got) : ARENA_NO_FIT;
    gpumem__mutex_unlock(&d->lock);
    if (r == ARENA_OK)
        return GPUMEM_OK;
    if (r == ARENA_HOST_OOM)
        return gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                              "simulated GPU:%d: out of host memory for its bookkeeping",
                              dev);
    gpumem__format_bytes(size, want, sizeof want);
    gpumem__format_bytes(free_bytes, have, sizeof have);
    if (!fits)
        return gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                              "simulated GPU:%d cannot give %s: %s free", dev, want,
                              have);
    return gpumem__reason(
        why, GPUMEM_ERR_OUT_OF_MEMORY,
        "simulated GPU:%d cannot give %s: %s free, but its address space has no hole "
        "that large (largest %s)",
        dev, want, have, gpumem__format_bytes(st.largest_free, largest, sizeof largest));
}

static gpumem_status sim_free_region(struct backend *b, int dev, uint64_t addr,
                                     uint64_t size, struct reason *why)
{
    struct sim_device *d = sim_device(b, dev);
    /* Give the whole pages inside the region back to the host, so that released
     * memory is released for real; the partial pages at its ends may be shared
     * with a neighbouring region. */
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t lo, hi = gpumem__align_down(addr + size, page);
    if (gpumem__align_up(addr, page, &lo) && lo < hi)
        madvise((void *)(uintptr_t)lo, (size_t)(hi - lo), MADV_DONTNEED);

    gpumem__mutex_lock(&d->lock);
    uint64_t freed = 0;
    int r = gpumem__arena_free(d->space, addr, &freed);
    gpumem__mutex_unlock(&d->lock);
    if (r != ARENA_OK || freed != size)
        return gpumem__reason(
            why, GPUMEM_ERR_BACKEND,
            "simulated GPU:%d: release of 0x%llx (%llu bytes) that was not "
            "reserved",
            dev, (unsigned long long)addr, (unsigned long long)size);
    return GPUMEM_OK;
}

static const struct backend_ops sim_ops = {
    .name = "sim",
    .destroy = sim_destroy,
    .forget = sim_forget,
    .device_count = sim_device_count,
    .device_props = sim_device_props,
    .mem_info = sim_mem_info,
    .alloc_region = sim_alloc_region,
    .free_region = sim_free_region,
};

gpumem_status gpumem__sim_open(const struct options *opts, struct backend **out,
                               struct reason *why)
{
    struct sim_backend *sb = calloc(1, sizeof *sb);
    if (!sb)
        return gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                              "simulated GPUs: out of host memory");
    sb->base.ops = &sim_ops;
    sb->base.regions_contiguous = true;
    sb->base.host_accessible = true;
    pthread_once(&fork_once, fork_watch);

    gpumem_status s = GPUMEM_OK;
    gpumem__mutex_lock(&registry_lock);
    struct sim_hardware *hw = registry;
    while (hw && !same_devices(hw, opts))
        hw = hw->next;
    if (!hw) {
        s = hardware_create(opts, &hw, why);
        if (s == GPUMEM_OK) {
            hw->next = registry;
            registry = hw;
        }
    }
    if (s == GPUMEM_OK) {
        hw->refs++;
        sb->hw = hw;
    }
    gpumem__mutex_unlock(&registry_lock);
    if (s != GPUMEM_OK) {
        free(sb);
        return s;
    }
    *out = &sb->base;
    return GPUMEM_OK;
}
