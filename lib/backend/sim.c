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
 * They model CUDA's virtual memory management too (the space_* ops): a range is
 * host address space reserved without access (PROT_NONE), apart from the
 * device's mapping; mapping a granule (2 MiB, as CUDA's on current GPUs) makes
 * it readable and writable, zeroed, and counts it as used memory; unmapping
 * replaces it by inaccessible pages again, so its contents and host pages go and
 * its memory counts as free. Mapped granules and regions draw on one count.
 *
 * The simulated GPUs are the process's hardware: every runtime that names the same
 * device list shares one `struct sim_hardware` (found in a process-wide registry
 * and reference counted), so a greedy runtime leaves little for the next one, as
 * on a real shared card. Locks: registry_lock, then a device's lock (a leaf);
 * docs/internals.md, "Locks".
 *
 * With GPUMEM_SIM_MACHINE=NAME the GPUs are shared by processes too: each card's
 * memory is counted in a ledger (ledger.c) named "sim-NAME-<index>", one slot per
 * process, so one free-memory count spans the processes and a dead process's
 * bytes stop counting when the kernel drops its slot's lock. Each process still
 * has its own address space (its own mapping); only the count is shared. The
 * device list is written once to /dev/shm/gpumem-sim-NAME.machine and every
 * process checks its own against it. A shared card's UUID is derived from NAME
 * and its index (the same in every process); an unshared one's is drawn at random
 * per hardware, since two processes' own cards are different cards.
 *
 * Driver calls: each operation counts, for its runtime's backend, the CUDA driver
 * calls the CUDA backend (cuda.c) makes for the same operation, so that a program
 * run on simulated GPUs shows the calls a real GPU would be asked for
 * (driver_calls.h): a context push and pop around each, the context's retain on a
 * device's first, the granularity's query on its first space_granularity. The
 * simulation's own time is booked under the call that does the work (cuMemMap
 * for a mapping, cuMemGetInfo_v2 for memory info); the others take 0 ns. Keep
 * the two backends saying the same: tests/backend/test_cuda_calls.c replays one
 * workload on both and compares the counts. */
#include "backend/backend.h"

#include "arena.h"
#include "fork.h"
#include "ledger.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct sim_device {
    struct sim_device_spec spec;
    void *map;          /* the mapping (the address space); NULL until made */
    uint64_t map_bytes; /* its length: twice mem_bytes, or mem_bytes */
    uint64_t mem_bytes; /* the memory: the size, rounded down to the granule */
    struct arena
        *space;        /* the device's address space: reserved regions are live chunks */
    uint64_t mapped;   /* bytes of granules mapped into ranges (space_map) */
    gpumem_mutex lock; /* guards `space` and `mapped` */
    char uuid[48];     /* "GPU-..." */
    /* GPUMEM_SIM_MACHINE: the count shared with the machine's other processes
     * (this process's figures: admitted = the bytes its regions hold); NULL when
     * not shared. Calls on it take no sim lock. */
    struct ledger *shared;
};

struct sim_hardware {
    struct sim_hardware *next; /* registry list */
    size_t refs;               /* runtimes using it */
    size_t num_devices;
    char machine[GPUMEM_SIM_MACHINE_MAX + 1]; /* "" = this process's own GPUs */
    /* The fork generation it was made in: a shared one is this process's slot in
     * the machine's ledgers, which a forked child cannot use (it makes its own). */
    unsigned generation;
    struct sim_device devices[GPUMEM_MAX_SIM_DEVICES];
};

struct sim_backend {
    struct backend base; /* first: a struct backend * is a struct sim_backend * */
    struct sim_hardware *hw;
    /* Per device, as the CUDA backend keeps them per backend: whether its primary
     * context would be retained (its first operation), and its mapping
     * granularity known (its first space_granularity). */
    _Atomic bool retained[GPUMEM_MAX_SIM_DEVICES];
    _Atomic bool granularity_known[GPUMEM_MAX_SIM_DEVICES];
};

static gpumem_mutex registry_lock = GPUMEM_MUTEX_INITIALIZER(GPUMEM_RANK_SIM_REGISTRY);
static struct sim_hardware *registry;

/* fork(): the simulated GPUs are host memory, copied into a child with the rest
 * of the process (the regions the parent's runtimes reserved stay booked in the
 * child's copy, as the parent still holds them). Their locks are leaves, held
 * only around bookkeeping, so they are taken around every fork (the device locks
 * in list order): the child's copies are then whole and free. Registered once, by
 * the first open.
 * These handlers take the mutexes without the rank check: the C library runs
 * every module's prepare handler in turn on one thread, in the reverse order of
 * registration, and the ledger's (which a shared machine opens) holds its own
 * leaf meanwhile, so no rank order can suit both. That nesting happens only
 * here: no thread holds a sim lock while it waits on a ledger lock, or the
 * reverse, so it cannot deadlock. */
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void fork_prepare(void)
{
    gpumem__mutex_acquire(&registry_lock);
    for (struct sim_hardware *hw = registry; hw; hw = hw->next)
        for (size_t i = 0; i < hw->num_devices; i++)
            gpumem__mutex_acquire(&hw->devices[i].lock);
}

static void fork_done(void)
{
    for (struct sim_hardware *hw = registry; hw; hw = hw->next)
        for (size_t i = 0; i < hw->num_devices; i++)
            gpumem__mutex_release(&hw->devices[i].lock);
    gpumem__mutex_release(&registry_lock);
}

static void fork_watch(void) { gpumem__atfork(fork_prepare, fork_done, fork_done); }

static struct sim_device *sim_device(struct backend *b, int dev)
{
    return &((struct sim_backend *)b)->hw->devices[dev];
}

/* Counts the driver calls the CUDA backend makes for one operation on device
 * `dev` that began at t0 (gpumem__driver_clock()): the primary context's retain
 * on the device's first, a push, kinds[0..n) given `bytes` each (the simulation's
 * time since t0 under kinds[0]), and a pop; inside a context scope (backend.h)
 * only its first push, and its pop when it closes (sim_scope_pop), as cuda.c. */
static void sim_calls(struct backend *b, int dev, uint64_t t0, uint64_t bytes,
                      const enum driver_call *kinds, size_t n)
{
    struct sim_backend *sb = (struct sim_backend *)b;
    struct driver_counts *c = &b->driver_calls[dev];
    uint64_t ns = gpumem__driver_clock() - t0;
    if (!atomic_exchange_explicit(&sb->retained[dev], true, memory_order_relaxed))
        gpumem__driver_count(c, DRIVER_cuDevicePrimaryCtxRetain, 0, 0);
    if (gpumem__backend_scope_push(b, dev))
        gpumem__driver_count(c, DRIVER_cuCtxPushCurrent_v2, 0, 0);
    for (size_t i = 0; i < n; i++)
        gpumem__driver_count(c, kinds[i], i == 0 ? ns : 0, bytes);
    if (!gpumem__backend_scoped(b, dev))
        gpumem__driver_count(c, DRIVER_cuCtxPopCurrent_v2, 0, 0);
}

/* The pop that ends a context scope in which a call was counted. */
static void sim_scope_pop(struct backend *b, int dev)
{
    gpumem__driver_count(&b->driver_calls[dev], DRIVER_cuCtxPopCurrent_v2, 0, 0);
}

/* sim_calls of one call. */
static void sim_call(struct backend *b, int dev, uint64_t t0, uint64_t bytes,
                     enum driver_call k)
{
    sim_calls(b, dev, t0, bytes, &k, 1);
}

static bool same_devices(const struct sim_hardware *hw, const struct options *opts)
{
    if (hw->num_devices != opts->num_sim_devices ||
        strcmp(hw->machine, opts->sim_machine) != 0 ||
        (hw->machine[0] && hw->generation != gpumem__fork_generation()))
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
        gpumem__ledger_close(d->shared);
        if (d->map)
            munmap(d->map, d->map_bytes);
        gpumem__mutex_destroy(&d->lock);
    }
    free(hw);
}

/* 64-bit FNV-1a of s from `h`: the stable half of a shared card's UUID. */
static uint64_t fnv1a(uint64_t h, const char *s)
{
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

/* A card's UUID: from the machine's name and the index when shared (every
 * process of the machine must name the card alike, as the driver does), else
 * random, so that no other process's own card is taken for this one. */
static void make_uuid(const struct sim_hardware *hw, size_t i, char *out, size_t n)
{
    unsigned char b[16];
    uint64_t h[2];
    if (hw->machine[0]) {
        char key[GPUMEM_SIM_MACHINE_MAX + 64];
        snprintf(key, sizeof key, "gpumem simulated GPU %zu of %s", i, hw->machine);
        h[0] = fnv1a(0xcbf29ce484222325ull, key);
        h[1] = fnv1a(h[0] ^ 0x9e3779b97f4a7c15ull, key);
    } else {
        int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
        bool got = fd >= 0 && read(fd, h, sizeof h) == (ssize_t)sizeof h;
        if (fd >= 0)
            close(fd);
        if (!got) { /* no /dev/urandom (a chroot): the clock, the pid and an address */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            h[0] = ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^
                   ((uint64_t)getpid() << 32);
            h[1] = fnv1a(h[0] ^ (uint64_t)(uintptr_t)hw, "gpumem") + i;
        }
    }
    memcpy(b, h, sizeof b);
    b[6] = (unsigned char)((b[6] & 0x0f) | (hw->machine[0] ? 0x50 : 0x40)); /* version */
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);                           /* variant */
    gpumem__format_uuid(b, out, n);
}

/* The machine's device list as its file holds it, one line per GPU. */
static void describe_machine(const struct options *opts, char *out, size_t n)
{
    size_t len = 0;
    out[0] = '\0';
    for (size_t i = 0; i < opts->num_sim_devices && len < n; i++) {
        const struct sim_device_spec *d = &opts->sim_devices[i];
        int k = snprintf(out + len, n - len, "%s\t%llu\t%d.%d\n", d->model,
                         (unsigned long long)d->total_bytes, d->cc_major, d->cc_minor);
        len += k > 0 ? (size_t)k : 0;
    }
}

#define MACHINE_TEXT_MAX (GPUMEM_MAX_SIM_DEVICES * 200)

/* The first process of a machine writes its device list to the machine's file
 * (under a temporary name, then link(): no process reads a half-written list, and
 * a list already there is never replaced); every process compares its own with
 * the file's and refuses another. */
static gpumem_status machine_check(const struct options *opts, struct reason *why)
{
    /* static, too large for a stack: guarded by registry_lock, which the only
     * caller, hardware_create, runs under */
    static char mine[MACHINE_TEXT_MAX], theirs[MACHINE_TEXT_MAX + 1];
    char path[128], tmp[160];
    snprintf(path, sizeof path, "/dev/shm/gpumem-sim-%s.machine", opts->sim_machine);
    gpumem_status s = GPUMEM_OK;
    describe_machine(opts, mine, sizeof mine);
    size_t len = strlen(mine);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
        static unsigned counter;
        snprintf(tmp, sizeof tmp, "/dev/shm/.gpumem-sim-%s.machine.%ld.%u",
                 opts->sim_machine, (long)getpid(), counter++);
        int w = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (w >= 0) {
            bool whole = write(w, mine, len) == (ssize_t)len && fchmod(w, 0644) == 0;
            close(w);
            if (whole && link(tmp, path) != 0 && errno != EEXIST)
                whole = false;
            unlink(tmp);
            (void)whole; /* whatever happened, the file is read below */
        }
        fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    }
    struct stat st;
    ssize_t got = -1;
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
        got = read(fd, theirs, MACHINE_TEXT_MAX);
    int err = errno;
    if (fd >= 0)
        close(fd);
    if (got < 0) {
        s = gpumem__reason(why, GPUMEM_ERR_BACKEND,
                           "GPUMEM_SIM_MACHINE=%s: cannot read or create '%s': %s",
                           opts->sim_machine, path,
                           fd >= 0 ? "not a regular file" : strerror(err));
    } else if ((size_t)got != len || memcmp(theirs, mine, len) != 0) {
        theirs[got] = '\0';
        for (char *c = theirs; *c; c++) /* one line: "MODEL BYTES CC, ..." */
            *c = *c == '\t' ? ' ' : *c == '\n' && c[1] ? ',' : *c == '\n' ? '\0' : *c;
        s = gpumem__reason(why, GPUMEM_ERR_INVALID_ARGUMENT,
                           "GPUMEM_SIM_MACHINE=%s has other simulated GPUs than "
                           "GPUMEM_SIM_DEVICES gives this process (its GPUs, in '%s': "
                           "%.200s): set the same GPUMEM_SIM_DEVICES, another machine "
                           "name, or remove the file once no process uses the machine",
                           opts->sim_machine, path, theirs);
    }
    return s;
}

/* Attaches this process to the ledger of shared card i. */
static gpumem_status machine_attach(struct sim_hardware *hw, size_t i, struct reason *why)
{
    char uuid[GPUMEM_LEDGER_UUID_MAX + 1];
    snprintf(uuid, sizeof uuid, "sim-%s-%u", hw->machine, (unsigned)i);
    struct ledger_params p = {.uuid = uuid, .total_bytes = hw->devices[i].mem_bytes};
    struct reason inner;
    gpumem_status s = gpumem__ledger_open(&p, &hw->devices[i].shared, &inner);
    if (s != GPUMEM_OK)
        return gpumem__reason(why, s, "GPUMEM_SIM_MACHINE=%s, simulated GPU:%zu: %s",
                              hw->machine, i, inner.text);
    gpumem__ledger_set_device(hw->devices[i].shared, 0, LEDGER_POLICY_GROWTH, 0);
    return GPUMEM_OK;
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
    snprintf(hw->machine, sizeof hw->machine, "%s", opts->sim_machine);
    hw->generation = gpumem__fork_generation();
    for (size_t i = 0; i < hw->num_devices; i++)
        gpumem__mutex_init(&hw->devices[i].lock, GPUMEM_RANK_SIM_DEVICE);
    gpumem_status s = hw->machine[0] ? machine_check(opts, why) : GPUMEM_OK;
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
        make_uuid(hw, i, d->uuid, sizeof d->uuid);
        if (s == GPUMEM_OK && hw->machine[0])
            s = machine_attach(hw, i, why);
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
    struct sim_backend *sb = (struct sim_backend *)b;
    struct sim_hardware *hw = sb->hw;
    /* as cuda_destroy releases the primary contexts it retained */
    for (size_t i = 0; i < hw->num_devices; i++)
        if (atomic_load_explicit(&sb->retained[i], memory_order_relaxed))
            gpumem__driver_count(&b->driver_calls[i], DRIVER_cuDevicePrimaryCtxRelease_v2,
                                 0, 0);
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
    free(b->driver_calls);
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
    free(b->driver_calls);
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
    snprintf(out->uuid, sizeof out->uuid, "%s", d->uuid);
    return GPUMEM_OK;
}

/* What the live processes of a shared card hold, this one included. */
static gpumem_status shared_used(struct sim_device *d, uint64_t *used, struct reason *why)
{
    struct ledger_entry *e = NULL;
    size_t cap = 0, n = 0;
    gpumem_status s;
    for (;;) { /* the two-call idiom, again if processes came in between */
        s = gpumem__ledger_read(d->shared, e, cap, &n, why);
        if (s != GPUMEM_OK || (e && n <= cap))
            break;
        free(e);
        cap = n + 4;
        if (!(e = malloc(cap * sizeof *e))) {
            s = gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                               "simulated GPU: out of host memory");
            break;
        }
    }
    *used = 0;
    for (size_t i = 0; s == GPUMEM_OK && i < n; i++)
        *used += e[i].held;
    free(e);
    return s;
}

static gpumem_status sim_mem_info(struct backend *b, int dev, uint64_t *free_bytes,
                                  uint64_t *total_bytes, struct reason *why)
{
    struct sim_device *d = sim_device(b, dev);
    struct arena_stats st;
    uint64_t used, t0 = gpumem__driver_clock();
    gpumem__mutex_lock(&d->lock);
    gpumem__arena_stats(d->space, &st);
    used = st.allocated_bytes + d->mapped;
    gpumem__mutex_unlock(&d->lock);
    gpumem_status s = d->shared ? shared_used(d, &used, why) : GPUMEM_OK;
    sim_call(b, dev, t0, 0, DRIVER_cuMemGetInfo_v2);
    if (s != GPUMEM_OK)
        return s;
    *free_bytes = used < d->mem_bytes ? d->mem_bytes - used : 0;
    *total_bytes = d->spec.total_bytes;
    return GPUMEM_OK;
}

static gpumem_status sim_alloc_region(struct backend *b, int dev, uint64_t size,
                                      uint64_t *addr, struct reason *why)
{
    struct sim_device *d = sim_device(b, dev);
    char want[GPUMEM_BYTES_BUF], have[GPUMEM_BYTES_BUF], largest[GPUMEM_BYTES_BUF];
    uint64_t got, granules = 0, t0 = gpumem__driver_clock();
    struct arena_stats st;
    /* A shared card: the machine's count first, under its cross-process lock,
     * which says which processes hold the memory when it refuses. */
    if (d->shared) {
        if (!gpumem__align_up(size, ARENA_GRANULE, &granules))
            granules = UINT64_MAX;
        struct reason inner;
        gpumem_status s = gpumem__ledger_admit(d->shared, 0, granules, NULL, &inner);
        if (s != GPUMEM_OK) {
            sim_call(b, dev, t0, size, DRIVER_cuMemAlloc_v2);
            return gpumem__reason(why, s, "simulated GPU:%d (GPUMEM_SIM_MACHINE=%s): %s",
                                  dev, ((struct sim_backend *)b)->hw->machine,
                                  inner.text);
        }
    }
    gpumem__mutex_lock(&d->lock);
    gpumem__arena_stats(d->space, &st);
    uint64_t used = st.allocated_bytes + d->mapped, need;
    uint64_t free_bytes = used < d->mem_bytes ? d->mem_bytes - used : 0;
    /* the arena rounds to its granule: so does the memory it counts */
    bool fits = gpumem__align_up(size, ARENA_GRANULE, &need) && need <= free_bytes;
    int r = fits ? gpumem__arena_alloc(d->space, size, addr, &got) : ARENA_NO_FIT;
    gpumem__mutex_unlock(&d->lock);
    sim_call(b, dev, t0, size, DRIVER_cuMemAlloc_v2);
    if (r == ARENA_OK)
        return GPUMEM_OK;
    if (d->shared)
        gpumem__ledger_unadmit(d->shared, 0, granules);
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
    uint64_t t0 = gpumem__driver_clock();
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
    sim_call(b, dev, t0, size, DRIVER_cuMemFree_v2);
    if (r == ARENA_OK && d->shared) { /* what the arena booked: granules */
        uint64_t granules;
        if (gpumem__align_up(freed, ARENA_GRANULE, &granules))
            gpumem__ledger_unadmit(d->shared, 0, granules);
    }
    if (r != ARENA_OK || freed != size)
        return gpumem__reason(
            why, GPUMEM_ERR_BACKEND,
            "simulated GPU:%d: release of 0x%llx (%llu bytes) that was not "
            "reserved",
            dev, (unsigned long long)addr, (unsigned long long)size);
    return GPUMEM_OK;
}

/* ------------------------------------------------- virtual address spaces -- */

/* The mapping granularity, CUDA's on current GPUs: so that what a growing pool
 * reserves here is what it would reserve on one. */
#define SIM_GRANULARITY (2 * GPUMEM_MIB)

static gpumem_status sim_space_granularity(struct backend *b, int dev,
                                           uint64_t *granularity, struct reason *why)
{
    (void)why; /* every simulated GPU has spaces */
    struct sim_backend *sb = (struct sim_backend *)b;
    uint64_t t0 = gpumem__driver_clock();
    *granularity = SIM_GRANULARITY;
    /* the CUDA backend asks the driver once per device, then keeps the answer */
    if (!atomic_exchange_explicit(&sb->granularity_known[dev], true,
                                  memory_order_relaxed))
        sim_call(b, dev, t0, 0, DRIVER_cuMemGetAllocationGranularity);
    return GPUMEM_OK;
}

/* Host address space without access or memory behind it, aligned to the
 * granularity: more is reserved, and the ends beyond the aligned range go back. */
static gpumem_status sim_space_alloc_range(struct backend *b, int dev, uint64_t size,
                                           uint64_t *base, struct reason *why)
{
    char buf[GPUMEM_BYTES_BUF];
    uint64_t g = SIM_GRANULARITY, lo, t0 = gpumem__driver_clock();
    void *p = MAP_FAILED;
    if (size <= SIZE_MAX - g)
        p = mmap(NULL, (size_t)(size + g), PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    sim_call(b, dev, t0, size, DRIVER_cuMemAddressReserve);
    if (p == MAP_FAILED)
        return gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                              "simulated GPU:%d: no host address space for a range of %s",
                              dev, gpumem__format_bytes(size, buf, sizeof buf));
    uint64_t at = (uint64_t)(uintptr_t)p;
    if (!gpumem__align_up(at, g, &lo))
        lo = at; /* cannot happen: the mapping lies below the top of memory */
    if (lo > at)
        munmap(p, (size_t)(lo - at));
    if (at + g > lo)
        munmap((void *)(uintptr_t)(lo + size), (size_t)(at + g - lo));
    *base = lo;
    return GPUMEM_OK;
}

static gpumem_status sim_space_free_range(struct backend *b, int dev, uint64_t base,
                                          uint64_t size, struct reason *why)
{
    uint64_t t0 = gpumem__driver_clock();
    int r = munmap((void *)(uintptr_t)base, (size_t)size), err = errno;
    sim_call(b, dev, t0, size, DRIVER_cuMemAddressFree);
    if (r != 0)
        return gpumem__reason(
            why, GPUMEM_ERR_BACKEND,
            "simulated GPU:%d: munmap of the range at 0x%llx failed: %s", dev,
            (unsigned long long)base, strerror(err));
    return GPUMEM_OK;
}

/* Replaces [addr, addr+size) by new anonymous pages: readable, writable and
 * zeroed when `access`, else inaccessible (and their old contents dropped). */
static bool sim_remap(uint64_t addr, uint64_t size, bool access)
{
    void *p = mmap((void *)(uintptr_t)addr, (size_t)size,
                   access ? PROT_READ | PROT_WRITE : PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    return p != MAP_FAILED;
}

static gpumem_status sim_space_map(struct backend *b, int dev, uint64_t addr,
                                   uint64_t size, bool *stuck, bool *held,
                                   struct reason *why)
{
    struct sim_device *d = sim_device(b, dev);
    char want[GPUMEM_BYTES_BUF], have[GPUMEM_BYTES_BUF];
    uint64_t t0 = gpumem__driver_clock();
    *stuck = *held = false;
    if (d->shared) { /* the machine's count first, as for a region */
        struct reason inner;
        gpumem_status s = gpumem__ledger_admit(d->shared, 0, size, NULL, &inner);
        if (s != GPUMEM_OK) {
            sim_call(b, dev, t0, size, DRIVER_cuMemCreate); /* which fails there */
            return gpumem__reason(why, s, "simulated GPU:%d (GPUMEM_SIM_MACHINE=%s): %s",
                                  dev, ((struct sim_backend *)b)->hw->machine,
                                  inner.text);
        }
    }
    struct arena_stats st;
    gpumem__mutex_lock(&d->lock);
    gpumem__arena_stats(d->space, &st);
    uint64_t used = st.allocated_bytes + d->mapped;
    uint64_t free_bytes = used < d->mem_bytes ? d->mem_bytes - used : 0;
    bool fits = size <= free_bytes, done = fits && sim_remap(addr, size, true);
    if (done)
        d->mapped += size;
    int err = errno;
    gpumem__mutex_unlock(&d->lock);
    /* The CUDA backend's map_memory: create, map, open to the device, drop the
     * handle; refused memory fails at the first (cuMemCreate). */
    static const enum driver_call mapping[] = {DRIVER_cuMemMap, DRIVER_cuMemCreate,
                                               DRIVER_cuMemSetAccess,
                                               DRIVER_cuMemRelease};
    if (fits)
        sim_calls(b, dev, t0, size, mapping, sizeof mapping / sizeof mapping[0]);
    else
        sim_call(b, dev, t0, size, DRIVER_cuMemCreate);
    if (done)
        return GPUMEM_OK;
    if (d->shared)
        gpumem__ledger_unadmit(d->shared, 0, size);
    if (!fits)
        return gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                              "simulated GPU:%d cannot give %s: %s free", dev,
                              gpumem__format_bytes(size, want, sizeof want),
                              gpumem__format_bytes(free_bytes, have, sizeof have));
    return gpumem__reason(why, GPUMEM_ERR_BACKEND,
                          "simulated GPU:%d: mmap of %s at 0x%llx failed: %s", dev,
                          gpumem__format_bytes(size, want, sizeof want),
                          (unsigned long long)addr, strerror(err));
}

static gpumem_status sim_space_unmap(struct backend *b, int dev, uint64_t addr,
                                     uint64_t size, struct reason *why)
{
    struct sim_device *d = sim_device(b, dev);
    uint64_t t0 = gpumem__driver_clock();
    gpumem__mutex_lock(&d->lock);
    bool done = sim_remap(addr, size, false);
    int err = errno;
    if (done)
        d->mapped -= size;
    gpumem__mutex_unlock(&d->lock);
    sim_call(b, dev, t0, size, DRIVER_cuMemUnmap);
    if (!done)
        return gpumem__reason(
            why, GPUMEM_ERR_BACKEND,
            "simulated GPU:%d: unmapping 0x%llx (%llu bytes) failed: %s", dev,
            (unsigned long long)addr, (unsigned long long)size, strerror(err));
    if (d->shared)
        gpumem__ledger_unadmit(d->shared, 0, size);
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
    .space_granularity = sim_space_granularity,
    .space_alloc_range = sim_space_alloc_range,
    .space_free_range = sim_space_free_range,
    .space_map = sim_space_map,
    .space_unmap = sim_space_unmap,
    .scope_pop = sim_scope_pop,
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
    sb->base.driver_calls = gpumem__driver_counts_new(opts->num_sim_devices);
    if (!sb->base.driver_calls) {
        free(sb);
        return gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                              "simulated GPUs: out of host memory");
    }
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
        free(sb->base.driver_calls);
        free(sb);
        return s;
    }
    *out = &sb->base;
    return GPUMEM_OK;
}
