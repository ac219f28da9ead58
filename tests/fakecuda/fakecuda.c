/* A test double of the CUDA driver API built as libcuda.so.1: exactly the entry
 * points of lib/backend/cuda_api.h, with the driver's ABI, over host memory
 * (anonymous mmap; freed memory is unmapped, address ranges are PROT_NONE until
 * cuMemSetAccess). It counts calls, injects faults, keeps each thread's context
 * stack and records misuse. Streams run no work: any pointer is a stream, and
 * an event completes when recorded, unless a test holds its stream (then at the
 * stream's release). Each call is charged a GPU's price for it (driver_prices.h),
 * added up, and with FAKECUDA_SPIN really spent, busy-waiting after the double's
 * lock is let go, so that a caller's own locks are held as long as on a GPU. One
 * mutex guards all state; stacks are thread-local.
 * With FAKECUDA_MACHINE=NAME, the processes that set it share each device's
 * free-memory count through a ledger per device (gpumem's lib/ledger.c, linked
 * in with its symbols kept inside this library), as a real driver's processes
 * share a card. */
#include "fakecuda.h"

#include "backend/cuda_api.h"
#include "driver_prices.h"
#include "ledger.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define EXPORT      __attribute__((visibility("default")))
#define MAX_DEVICES 16
#define MAX_STACK   64
#define KiB         (UINT64_C(1) << 10)
#define MiB         (UINT64_C(1) << 20)
#define GiB         (UINT64_C(1) << 30)
#define TiB         (UINT64_C(1) << 40)

/* Prototypes from the same list the backend uses: a definition below that does
 * not match its entry's signature fails to compile. */
#define DECLARE(name, params) EXPORT CUresult name params;
CUDA_API_ALL(DECLARE)
#undef DECLARE

enum fn {
#define ENUM(name, params) F_##name,
    CUDA_API_ALL(ENUM)
#undef ENUM
        F_COUNT
};

static const char *const fn_names[F_COUNT] = {
#define NAME(name, params) #name,
    CUDA_API_ALL(NAME)
#undef NAME
};

/* ------------------------------------------------------------------ state -- */

struct CUctx_st {
    int dev;
    bool primary;
    unsigned long refs; /* primary: retains not released */
};

struct device {
    char model[128];
    uint64_t total, elsewhere; /* elsewhere: held by other processes */
    uint64_t used;             /* held by this process: allocations and handles */
    int cc_major, cc_minor;
    unsigned char uuid[16]; /* cuDeviceGetUuid's; fakecuda_set_uuid */
    bool no_uuid;           /* cuDeviceGetUuid fails with CUDA_ERROR_NOT_SUPPORTED */
    struct CUctx_st primary, user;
};

struct block { /* a cuMemAlloc_v2 allocation */
    struct block *next;
    uint64_t addr, size;
    int dev;
};

struct handle { /* cuMemCreate memory */
    struct handle *next;
    unsigned long long id;
    uint64_t size;
    int dev;
    bool released;          /* cuMemRelease was called */
    unsigned long mappings; /* live cuMemMap of it */
};

struct reservation {
    struct reservation *next;
    uint64_t addr, size;
    void *map;
    size_t map_size;
};

struct mapping {
    struct mapping *next;
    uint64_t addr, size;
    struct handle *handle;
};

/* A cuEventCreate event. Kept until fakecuda_reset, even once destroyed, so that
 * a use after cuEventDestroy_v2 is told apart from any other pointer. */
struct CUevent_st {
    struct CUevent_st *next;
    int dev;
    bool destroyed;
    bool complete;   /* the work it captured has completed (true when never recorded) */
    CUstream stream; /* the stream it was last recorded on */
};

#define MAX_HELD 16

struct fault {
    unsigned long at; /* fails when calls reaches it; 0 = none */
    CUresult code;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static bool configured, initialized;
static int num_devices;
static struct device devices[MAX_DEVICES];
static bool vmm = true;
static uint64_t granularity = 2 * MiB;
static uint64_t context_bytes;
static CUresult init_error;
static struct block *blocks;
static struct handle *handles;
static struct reservation *reservations;
static struct mapping *mappings;
static unsigned long long next_handle = 1;
static unsigned long calls[F_COUNT], calls_ever[F_COUNT];
static struct fault faults[F_COUNT];
static int then_fn = -1; /* fails on its next call once a fault has fired */
static CUresult then_code;
static unsigned long misuses;
static char last_misuse[512];
static pid_t init_pid; /* the process whose cuInit succeeded */
/* fakecuda_block: the entry point whose next call waits, and whether one waits */
static int block_fn = -1;
static bool blocked;
static pthread_cond_t block_cond = PTHREAD_COND_INITIALIZER;
/* Events, and the streams whose work a test holds unfinished: an event recorded
 * on one of those completes only at fakecuda_release_stream. */
static struct CUevent_st *events;
static CUstream held_streams[MAX_HELD];
static int num_held;
static bool wait_completes; /* fakecuda_set_wait_completes */
static pthread_cond_t event_cond = PTHREAD_COND_INITIALIZER;

static _Thread_local CUcontext stack[MAX_STACK];
static _Thread_local int depth;

/* The price list (driver_prices.h; FAKECUDA_PRICES, fakecuda_set_price), each
 * entry point's price (NULL: none listed, charged nothing) and the total charged
 * since the last reset; whether FAKECUDA_SPIN spends it. The call in progress on
 * this thread: what it is charged so far (enter, then charge_bytes), spent and
 * added up by leave(). */
static struct driver_prices prices;
static const struct driver_price *price_of[F_COUNT];
static uint64_t charged;
static bool spin;
static _Thread_local uint64_t charging;

/* ----------------------------------------------------------- small parts -- */

static void misuse(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void misuse(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_misuse, sizeof last_misuse, fmt, ap);
    va_end(ap);
    misuses++;
}

static const struct {
    CUresult code;
    const char *name, *text;
} results[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "driver not initialized"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_STUB_LIBRARY, "CUDA_ERROR_STUB_LIBRARY", "stub library loaded"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid context"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "not found"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
     "system has unsupported display driver / cuda driver combination"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

/* A CUresult from "2" or "CUDA_ERROR_OUT_OF_MEMORY"; false if neither. */
static bool parse_result(const char *text, size_t n, CUresult *out)
{
    char buf[64];
    if (n == 0 || n >= sizeof buf)
        return false;
    memcpy(buf, text, n);
    buf[n] = '\0';
    char *end;
    long v = strtol(buf, &end, 10);
    if (*end == '\0' && v >= 0) {
        *out = (CUresult)v;
        return true;
    }
    for (size_t i = 0; i < sizeof results / sizeof results[0]; i++) {
        if (strcmp(buf, results[i].name) == 0) {
            *out = results[i].code;
            return true;
        }
    }
    return false;
}

/* "16GiB", "1.5 GiB", "4096": false if not a size. */
static bool parse_size(const char *text, size_t n, uint64_t *out)
{
    char buf[64];
    if (n == 0 || n >= sizeof buf)
        return false;
    memcpy(buf, text, n);
    buf[n] = '\0';
    char *end;
    double v = strtod(buf, &end);
    while (*end == ' ')
        end++;
    static const struct {
        const char *unit;
        uint64_t bytes;
    } units[] = {{"", 1},      {"B", 1},     {"KiB", KiB},
                 {"MiB", MiB}, {"GiB", GiB}, {"TiB", TiB}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(end, units[i].unit) == 0 && v >= 0 && end != buf) {
            *out = (uint64_t)(v * (double)units[i].bytes);
            return true;
        }
    }
    return false;
}

static int find_fn(const char *name)
{
    for (int i = 0; i < F_COUNT; i++)
        if (name && strcmp(name, fn_names[i]) == 0)
            return i;
    return -1;
}

/* MODEL:SIZE[:CC[:USED]],... into devices[] (pre: lock held). */
static int load_devices(const char *spec)
{
    struct device parsed[MAX_DEVICES];
    int n = 0;
    memset(parsed, 0, sizeof parsed);
    const char *p = spec;
    while (*p) {
        const char *end = strchr(p, ',');
        if (!end)
            end = p + strlen(p);
        if (n == MAX_DEVICES)
            return -1;
        struct device *d = &parsed[n];
        const char *field[4];
        size_t len[4];
        int nf = 0;
        const char *f = p;
        while (nf < 4) {
            const char *colon = memchr(f, ':', (size_t)(end - f));
            field[nf] = f;
            len[nf] = (size_t)((colon ? colon : end) - f);
            nf++;
            if (!colon)
                break;
            f = colon + 1;
        }
        if (nf < 2 || len[0] == 0 || len[0] >= sizeof d->model)
            return -1;
        memcpy(d->model, field[0], len[0]);
        if (!parse_size(field[1], len[1], &d->total) || d->total == 0)
            return -1;
        d->cc_major = 8;
        if (nf >= 3 && sscanf(field[2], "%d.%d", &d->cc_major, &d->cc_minor) != 2)
            return -1;
        if (nf == 4 && !parse_size(field[3], len[3], &d->elsewhere))
            return -1;
        n++;
        p = *end ? end + 1 : end;
    }
    memcpy(devices, parsed, sizeof parsed);
    num_devices = n;
    for (int i = 0; i < n; i++) {
        devices[i].primary = (struct CUctx_st){i, true, 0};
        devices[i].user = (struct CUctx_st){i, false, 0};
        /* fa4ec0da-0000-4000-8000-0000000000<i>: distinct per device, the same in
         * every process (as one machine's GPUs are) */
        static const unsigned char base[16] = {0xfa, 0x4e, 0xc0, 0xda, 0, 0, 0x40, 0,
                                               0x80, 0,    0,    0,    0, 0, 0,    0};
        memcpy(devices[i].uuid, base, sizeof base);
        devices[i].uuid[15] = (unsigned char)i;
    }
    return 0;
}

static void machine_open(void);

/* pre: lock held. */
static void configure(void)
{
    if (configured)
        return;
    configured = true;
    const char *v = getenv("FAKECUDA_DEVICES");
    if (load_devices(v ? v : "Fake GPU:16GiB:8.0") != 0) {
        misuse("FAKECUDA_DEVICES='%s' does not parse", v ? v : "");
        load_devices("");
    }
    machine_open();
    v = getenv("FAKECUDA_VMM");
    vmm = !(v && strcmp(v, "0") == 0);
    v = getenv("FAKECUDA_GRANULARITY");
    if (v && !parse_size(v, strlen(v), &granularity))
        misuse("FAKECUDA_GRANULARITY='%s' does not parse", v);
    v = getenv("FAKECUDA_CONTEXT_BYTES");
    if (v && !parse_size(v, strlen(v), &context_bytes))
        misuse("FAKECUDA_CONTEXT_BYTES='%s' does not parse", v);
    v = getenv("FAKECUDA_INIT_ERROR");
    if (v && !parse_result(v, strlen(v), &init_error))
        misuse("FAKECUDA_INIT_ERROR='%s' does not parse", v);
    driver_prices_default(&prices);
    v = getenv("FAKECUDA_PRICES");
    char why[256];
    if (v && driver_prices_parse(&prices, v, why, sizeof why) != 0)
        misuse("FAKECUDA_PRICES: %s", why);
    for (int f = 0; f < F_COUNT; f++)
        price_of[f] = driver_price_of(&prices, fn_names[f]);
    v = getenv("FAKECUDA_SPIN");
    spin = v && strcmp(v, "1") == 0;
    v = getenv("FAKECUDA_FAIL");
    for (const char *p = v; p && *p;) {
        const char *end = strchr(p, ',');
        if (!end)
            end = p + strlen(p);
        char item[128];
        size_t n =
            (size_t)(end - p) < sizeof item - 1 ? (size_t)(end - p) : sizeof item - 1;
        memcpy(item, p, n);
        item[n] = '\0';
        char *c1 = strchr(item, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        CUresult code = CUDA_ERROR_OUT_OF_MEMORY;
        if (c1)
            *c1 = '\0';
        if (c2)
            *c2 = '\0';
        int f = find_fn(item);
        unsigned long nth = c1 ? strtoul(c1 + 1, NULL, 10) : 0;
        if (f < 0 || nth == 0 || (c2 && !parse_result(c2 + 1, strlen(c2 + 1), &code)))
            misuse("FAKECUDA_FAIL: '%s' is not FUNCTION:N[:CODE]", item);
        else
            faults[f] = (struct fault){nth, code};
        p = *end ? end + 1 : end;
    }
}

/* Every entry point starts here: takes the lock, reads the configuration once,
 * counts the call and fires an armed fault. A non-zero result is returned as it
 * is through leave(). */
static CUresult enter(enum fn f)
{
    pthread_mutex_lock(&lock);
    configure();
    calls[f]++;
    calls_ever[f]++;
    charging = price_of[f] ? price_of[f]->ns : 0;
    if (faults[f].at && calls[f] == faults[f].at) {
        faults[f].at = 0;
        if (then_fn >= 0) {
            faults[then_fn] = (struct fault){calls[then_fn] + 1, then_code};
            then_fn = -1;
        }
        return faults[f].code;
    }
    if (!initialized && f != F_cuInit && f != F_cuGetErrorName &&
        f != F_cuGetErrorString) {
        misuse("%s before cuInit", fn_names[f]);
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    /* As the real driver: unusable in a forked child of a process that
     * initialized it. */
    if (initialized && getpid() != init_pid && f != F_cuGetErrorName &&
        f != F_cuGetErrorString) {
        misuse("%s in a forked child (pid %ld) of the process that initialized the "
               "driver (pid %ld)",
               fn_names[f], (long)getpid(), (long)init_pid);
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    if (block_fn == (int)f) {
        block_fn = -1;
        blocked = true;
        pthread_cond_broadcast(&block_cond);
        while (blocked)
            pthread_cond_wait(&block_cond, &lock); /* lets go of `lock` meanwhile */
    }
    return CUDA_SUCCESS;
}

/* Adds the price of `bytes` given to the call in progress, entry point f. pre:
 * lock held (between enter and leave). */
static void charge_bytes(enum fn f, uint64_t bytes)
{
    if (price_of[f])
        charging +=
            (uint64_t)((double)bytes * (double)price_of[f]->ns_per_mib / (double)MiB);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Ends a call: books its price and, with FAKECUDA_SPIN, spends it after letting
 * the lock go (a GPU's driver serializes far less than this one lock would). */
static CUresult leave(CUresult r)
{
    uint64_t price = charging;
    bool spend = spin;
    charged += price;
    charging = 0;
    pthread_mutex_unlock(&lock);
    if (spend && price)
        for (uint64_t until = now_ns() + price; now_ns() < until;)
            ;
    return r;
}

static bool valid_device(CUdevice d) { return d >= 0 && d < num_devices; }

/* FAKECUDA_MACHINE: each device's ledger, where this process's allocations are
 * admitted (this process's slot: admitted = its `used`); NULL when not shared. */
static struct ledger *shared[MAX_DEVICES];

/* pre: lock held (the static buffer). */
static uint64_t others_hold(int dev)
{
    static struct ledger_entry entries[GPUMEM_LEDGER_SLOTS];
    struct reason why;
    size_t n = 0;
    uint64_t held = 0;
    if (!shared[dev] || gpumem__ledger_read(shared[dev], entries, GPUMEM_LEDGER_SLOTS, &n,
                                            &why) != GPUMEM_OK)
        return 0;
    for (size_t i = 0; i < n && i < GPUMEM_LEDGER_SLOTS; i++)
        if (!entries[i].self)
            held += entries[i].held;
    return held;
}

static uint64_t free_of(int dev)
{
    const struct device *d = &devices[dev];
    uint64_t held =
        d->elsewhere + d->used + (d->primary.refs ? context_bytes : 0) + others_hold(dev);
    return held < d->total ? d->total - held : 0;
}

/* Takes `bytes` of device memory for this process, if they are free here and,
 * on a shared machine, the other processes' holdings leave room (admitted under
 * the ledger's cross-process lock, so two processes never both take the last
 * bytes). pre: lock held. */
static bool take(int dev, uint64_t bytes)
{
    struct reason why;
    if (bytes > free_of(dev))
        return false;
    if (shared[dev] &&
        gpumem__ledger_admit(shared[dev], 0, bytes, NULL, &why) != GPUMEM_OK)
        return false;
    devices[dev].used += bytes;
    return true;
}

static void give(int dev, uint64_t bytes)
{
    devices[dev].used -= bytes;
    if (shared[dev])
        gpumem__ledger_unadmit(shared[dev], 0, bytes);
}

/* pre: lock held, devices loaded. */
static void machine_open(void)
{
    const char *name = getenv("FAKECUDA_MACHINE");
    for (int i = 0; name && *name && i < num_devices; i++) {
        char uuid[GPUMEM_LEDGER_UUID_MAX + 1];
        snprintf(uuid, sizeof uuid, "fakecuda-%s-%d", name, i);
        struct ledger_params p = {.uuid = uuid, .total_bytes = devices[i].total};
        struct reason why;
        if (gpumem__ledger_open(&p, &shared[i], &why) != GPUMEM_OK)
            misuse("FAKECUDA_MACHINE=%s: %s", name, why.text);
    }
}

static void machine_close(void)
{
    for (int i = 0; i < MAX_DEVICES; i++) {
        gpumem__ledger_close(shared[i]);
        shared[i] = NULL;
    }
}

/* What the double keeps beyond its calls: the machine's ledgers, and the
 * events kept after cuEventDestroy_v2 (struct CUevent_st). fakecuda_reset drops
 * them, and so does unloading: gpumem dlcloses the double when its runtime is
 * destroyed (GPUMEM_CUDA_LIBRARY), and LeakSanitizer would find them
 * unreachable at exit in a program that never calls fakecuda_reset (as
 * gpumem-replay --allocator api-cuda-async, which records events). Nothing else
 * can be running in the double when it is unloaded. */
static void drop_kept(void)
{
    machine_close();
    while (events) {
        struct CUevent_st *e = events;
        events = e->next;
        free(e);
    }
}

__attribute__((destructor)) static void unload(void) { drop_kept(); }

/* The device of the calling thread's current context, or -1 (a misuse). */
static int current_device(const char *fn)
{
    if (depth == 0) {
        misuse("%s without a current context", fn);
        return -1;
    }
    const struct CUctx_st *c = stack[depth - 1];
    if (c->primary && c->refs == 0) {
        misuse("%s in a released primary context", fn);
        return -1;
    }
    return c->dev;
}

static bool known_context(CUcontext c)
{
    for (int i = 0; i < num_devices; i++)
        if (c == &devices[i].primary || c == &devices[i].user)
            return true;
    return false;
}

static void handle_drop_if_gone(struct handle *h)
{
    if (!h->released || h->mappings)
        return;
    give(h->dev, h->size);
    for (struct handle **p = &handles; *p; p = &(*p)->next) {
        if (*p == h) {
            *p = h->next;
            break;
        }
    }
    free(h);
}

static bool valid_prop(const CUmemAllocationProp *prop)
{
    return prop && prop->type == CU_MEM_ALLOCATION_TYPE_PINNED &&
           prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
           valid_device(prop->location.id) &&
           prop->requestedHandleTypes == CU_MEM_HANDLE_TYPE_NONE;
}

/* ---------------------------------------------------- init and devices -- */

CUresult cuInit(unsigned int flags)
{
    CUresult r = enter(F_cuInit);
    if (r)
        return leave(r);
    if (flags != 0)
        return leave(CUDA_ERROR_INVALID_VALUE);
    if (init_error)
        return leave(init_error);
    if (num_devices == 0)
        return leave(CUDA_ERROR_NO_DEVICE);
    initialized = true;
    init_pid = getpid();
    return leave(CUDA_SUCCESS);
}

CUresult cuDeviceGetCount(int *count)
{
    CUresult r = enter(F_cuDeviceGetCount);
    if (r)
        return leave(r);
    if (!count)
        return leave(CUDA_ERROR_INVALID_VALUE);
    *count = num_devices;
    return leave(CUDA_SUCCESS);
}

CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    CUresult r = enter(F_cuDeviceGet);
    if (r)
        return leave(r);
    if (!device)
        return leave(CUDA_ERROR_INVALID_VALUE);
    if (!valid_device(ordinal))
        return leave(CUDA_ERROR_INVALID_DEVICE);
    *device = ordinal;
    return leave(CUDA_SUCCESS);
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    CUresult r = enter(F_cuDeviceGetName);
    if (r)
        return leave(r);
    if (!name || len <= 0)
        return leave(CUDA_ERROR_INVALID_VALUE);
    if (!valid_device(dev))
        return leave(CUDA_ERROR_INVALID_DEVICE);
    snprintf(name, (size_t)len, "%s", devices[dev].model);
    return leave(CUDA_SUCCESS);
}

/* The driver's old name differs only for MIG instances, which the double has not. */
static CUresult get_uuid(int fn, CUuuid *uuid, CUdevice dev)
{
    CUresult r = enter(fn);
    if (r)
        return leave(r);
    if (!uuid)
        return leave(CUDA_ERROR_INVALID_VALUE);
    if (!valid_device(dev))
        return leave(CUDA_ERROR_INVALID_DEVICE);
    if (devices[dev].no_uuid)
        return leave(CUDA_ERROR_NOT_SUPPORTED);
    memcpy(uuid->bytes, devices[dev].uuid, sizeof uuid->bytes);
    return leave(CUDA_SUCCESS);
}

CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    return get_uuid(F_cuDeviceGetUuid_v2, uuid, dev);
}

/* Not in gpumem's table: the name a driver before CUDA 11.4 has alone. */
EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev);
CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    return get_uuid(F_cuDeviceGetUuid_v2, uuid, dev);
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    CUresult r = enter(F_cuDeviceTotalMem_v2);
    if (r)
        return leave(r);
    if (!bytes)
        return leave(CUDA_ERROR_INVALID_VALUE);
    if (!valid_device(dev))
        return leave(CUDA_ERROR_INVALID_DEVICE);
    *bytes = (size_t)devices[dev].total;
    return leave(CUDA_SUCCESS);
}

CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attrib, CUdevice dev)
{
    CUresult r = enter(F_cuDeviceGetAttribute);
    if (r)
        return leave(r);
    if (!value)
        return leave(CUDA_ERROR_INVALID_VALUE);
    if (!valid_device(dev))
        return leave(CUDA_ERROR_INVALID_DEVICE);
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
        *value = devices[dev].cc_major;
        break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
        *value = devices[dev].cc_minor;
        break;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
        *value = vmm ? 1 : 0;
        break;
    default:
        return leave(CUDA_ERROR_INVALID_VALUE);
    }
    return leave(CUDA_SUCCESS);
}

/* -------------------------------------------------------------- contexts -- */

CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev)
{
    CUresult r = enter(F_cuDevicePrimaryCtxRetain);
    if (r)
        return leave(r);
    if (!ctx)
        return leave(CUDA_ERROR_INVALID_VALUE);
    if (!valid_device(dev))
        return leave(CUDA_ERROR_INVALID_DEVICE);
    if (devices[dev].primary.refs == 0 && free_of(dev) < context_bytes)
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    devices[dev].primary.refs++;
    *ctx = &devices[dev].primary;
    return leave(CUDA_SUCCESS);
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    CUresult r = enter(F_cuDevicePrimaryCtxRelease_v2);
    if (r)
        return leave(r);
    if (!valid_device(dev))
        return leave(CUDA_ERROR_INVALID_DEVICE);
    if (devices[dev].primary.refs == 0) {
        misuse("cuDevicePrimaryCtxRelease_v2(%d) of a primary context not retained", dev);
        return leave(CUDA_ERROR_INVALID_CONTEXT);
    }
    if (devices[dev].primary.refs == 1)
        for (int i = 0; i < depth; i++)
            if (stack[i] == &devices[dev].primary)
                misuse("the last release of GPU %d's primary context while it is on this "
                       "thread's context stack",
                       dev);
    devices[dev].primary.refs--;
    return leave(CUDA_SUCCESS);
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    CUresult r = enter(F_cuCtxPushCurrent_v2);
    if (r)
        return leave(r);
    if (!ctx || !known_context(ctx) || (ctx->primary && ctx->refs == 0)) {
        misuse("cuCtxPushCurrent_v2 of a context that is not alive");
        return leave(CUDA_ERROR_INVALID_CONTEXT);
    }
    if (depth == MAX_STACK) {
        misuse("cuCtxPushCurrent_v2: more than %d contexts pushed", MAX_STACK);
        return leave(CUDA_ERROR_INVALID_VALUE);
    }
    stack[depth++] = ctx;
    return leave(CUDA_SUCCESS);
}

CUresult cuCtxPopCurrent_v2(CUcontext *ctx)
{
    CUresult r = enter(F_cuCtxPopCurrent_v2);
    if (r)
        return leave(r);
    if (depth == 0) {
        misuse("cuCtxPopCurrent_v2 with no context on the stack");
        return leave(CUDA_ERROR_INVALID_CONTEXT);
    }
    CUcontext c = stack[--depth];
    if (ctx)
        *ctx = c;
    return leave(CUDA_SUCCESS);
}

/* ---------------------------------------------------------- plain memory -- */

CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes)
{
    CUresult r = enter(F_cuMemGetInfo_v2);
    if (r)
        return leave(r);
    int dev = current_device("cuMemGetInfo_v2");
    if (dev < 0)
        return leave(CUDA_ERROR_INVALID_CONTEXT);
    if (!free_bytes || !total_bytes)
        return leave(CUDA_ERROR_INVALID_VALUE);
    *free_bytes = (size_t)free_of(dev);
    *total_bytes = (size_t)devices[dev].total;
    return leave(CUDA_SUCCESS);
}

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes)
{
    CUresult r = enter(F_cuMemAlloc_v2);
    charge_bytes(F_cuMemAlloc_v2, bytes);
    if (r)
        return leave(r);
    int dev = current_device("cuMemAlloc_v2");
    if (dev < 0)
        return leave(CUDA_ERROR_INVALID_CONTEXT);
    if (!dptr || bytes == 0)
        return leave(CUDA_ERROR_INVALID_VALUE);
    if (!take(dev, bytes))
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    struct block *b = malloc(sizeof *b);
    void *p = b ? mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
                : MAP_FAILED;
    if (p == MAP_FAILED) {
        free(b);
        give(dev, bytes);
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    }
    *b = (struct block){blocks, (uint64_t)(uintptr_t)p, bytes, dev};
    blocks = b;
    *dptr = (CUdeviceptr)(uintptr_t)p;
    return leave(CUDA_SUCCESS);
}

CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    CUresult r = enter(F_cuMemFree_v2);
    if (r)
        return leave(r);
    if (current_device("cuMemFree_v2") < 0)
        return leave(CUDA_ERROR_INVALID_CONTEXT);
    for (struct block **p = &blocks; *p; p = &(*p)->next) {
        struct block *b = *p;
        if (b->addr == dptr) {
            charge_bytes(F_cuMemFree_v2, b->size);
            munmap((void *)(uintptr_t)b->addr, (size_t)b->size);
            give(b->dev, b->size);
            *p = b->next;
            free(b);
            return leave(CUDA_SUCCESS);
        }
        if (dptr > b->addr && dptr < b->addr + b->size) {
            misuse("cuMemFree_v2(0x%llx): an interior pointer", dptr);
            return leave(CUDA_ERROR_INVALID_VALUE);
        }
    }
    misuse("cuMemFree_v2(0x%llx): not an allocation (unknown pointer or double free)",
           dptr);
    return leave(CUDA_ERROR_INVALID_VALUE);
}

/* ---------------------------------------------------------------- events -- */

static bool stream_held(CUstream stream)
{
    for (int i = 0; i < num_held; i++)
        if (held_streams[i] == stream)
            return true;
    return false;
}

/* Completes every event recorded on `stream`, which is no longer held.
 * pre: lock held. */
static void release_held(CUstream stream)
{
    for (int i = 0; i < num_held; i++) {
        if (held_streams[i] == stream) {
            held_streams[i] = held_streams[--num_held];
            break;
        }
    }
    for (struct CUevent_st *e = events; e; e = e->next)
        if (e->stream == stream)
            e->complete = true;
    pthread_cond_broadcast(&event_cond);
}

/* The live event `ev`, or NULL (a misuse, named after `fn`). */
static struct CUevent_st *live_event(const char *fn, CUevent ev)
{
    for (struct CUevent_st *e = events; e; e = e->next) {
        if (e != ev)
            continue;
        if (!e->destroyed)
            return e;
        misuse("%s of an event already destroyed", fn);
        return NULL;
    }
    misuse("%s of %p, which is not an event", fn, (void *)ev);
    return NULL;
}

CUresult cuEventCreate(CUevent *event, unsigned int flags)
{
    CUresult r = enter(F_cuEventCreate);
    if (r)
        return leave(r);
    int dev = current_device("cuEventCreate");
    if (dev < 0)
        return leave(CUDA_ERROR_INVALID_CONTEXT);
    if (!event || (flags & ~(unsigned)0x7) != 0)
        return leave(CUDA_ERROR_INVALID_VALUE);
    struct CUevent_st *e = calloc(1, sizeof *e);
    if (!e)
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    *e = (struct CUevent_st){events, dev, false, true, NULL};
    events = e;
    *event = e;
    return leave(CUDA_SUCCESS);
}

CUresult cuEventDestroy_v2(CUevent event)
{
    CUresult r = enter(F_cuEventDestroy_v2);
    if (r)
        return leave(r);
    struct CUevent_st *e = live_event("cuEventDestroy_v2", event);
    if (!e)
        return leave(CUDA_ERROR_INVALID_HANDLE);
    e->destroyed = true; /* a waiter in cuEventSynchronize sees it as a misuse */
    pthread_cond_broadcast(&event_cond);
    return leave(CUDA_SUCCESS);
}

CUresult cuEventRecord(CUevent event, CUstream stream)
{
    CUresult r = enter(F_cuEventRecord);
    if (r)
        return leave(r);
    struct CUevent_st *e = live_event("cuEventRecord", event);
    if (!e)
        return leave(CUDA_ERROR_INVALID_HANDLE);
    int dev = current_device("cuEventRecord");
    if (dev < 0)
        return leave(CUDA_ERROR_INVALID_CONTEXT);
    if (dev != e->dev) {
        misuse("cuEventRecord of an event of GPU %d with GPU %d's context current",
               e->dev, dev);
        return leave(CUDA_ERROR_INVALID_HANDLE);
    }
    e->stream = stream;
    e->complete = !stream_held(stream);
    return leave(CUDA_SUCCESS);
}

CUresult cuEventQuery(CUevent event)
{
    CUresult r = enter(F_cuEventQuery);
    if (r)
        return leave(r);
    struct CUevent_st *e = live_event("cuEventQuery", event);
    if (!e)
        return leave(CUDA_ERROR_INVALID_HANDLE);
    return leave(e->complete ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY);
}

CUresult cuEventSynchronize(CUevent event)
{
    CUresult r = enter(F_cuEventSynchronize);
    if (r)
        return leave(r);
    struct CUevent_st *e = live_event("cuEventSynchronize", event);
    if (!e)
        return leave(CUDA_ERROR_INVALID_HANDLE);
    if (!e->complete && wait_completes)
        release_held(e->stream);
    while (!e->complete && !e->destroyed)
        pthread_cond_wait(&event_cond, &lock); /* lets go of `lock` meanwhile */
    if (e->destroyed) {
        misuse("cuEventSynchronize: the event was destroyed while a thread waited on it");
        return leave(CUDA_ERROR_INVALID_HANDLE);
    }
    return leave(CUDA_SUCCESS);
}

/* ---------------------------------------------------------------- errors -- */

static CUresult describe(CUresult error, const char **out, bool name)
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof results / sizeof results[0]; i++) {
        if (results[i].code == error) {
            *out = name ? results[i].name : results[i].text;
            return CUDA_SUCCESS;
        }
    }
    *out = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorName(CUresult error, const char **name)
{
    CUresult r = enter(F_cuGetErrorName);
    if (r)
        return leave(r);
    return leave(describe(error, name, true));
}

CUresult cuGetErrorString(CUresult error, const char **text)
{
    CUresult r = enter(F_cuGetErrorString);
    if (r)
        return leave(r);
    return leave(describe(error, text, false));
}

/* -------------------------------------------------------- virtual memory -- */

static struct reservation *reservation_of(uint64_t addr, uint64_t size)
{
    for (struct reservation *v = reservations; v; v = v->next)
        if (addr >= v->addr && size <= v->size && addr - v->addr <= v->size - size)
            return v;
    return NULL;
}

CUresult cuMemGetAllocationGranularity(size_t *out, const CUmemAllocationProp *prop,
                                       CUmemAllocationGranularity_flags option)
{
    CUresult r = enter(F_cuMemGetAllocationGranularity);
    if (r)
        return leave(r);
    if (!vmm)
        return leave(CUDA_ERROR_NOT_SUPPORTED);
    if (!out || !valid_prop(prop) ||
        (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
         option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
        return leave(CUDA_ERROR_INVALID_VALUE);
    *out = (size_t)granularity;
    return leave(CUDA_SUCCESS);
}

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                             CUdeviceptr addr, unsigned long long flags)
{
    CUresult r = enter(F_cuMemAddressReserve);
    charge_bytes(F_cuMemAddressReserve, size);
    if (r)
        return leave(r);
    if (!vmm)
        return leave(CUDA_ERROR_NOT_SUPPORTED);
    if (current_device("cuMemAddressReserve") < 0)
        return leave(CUDA_ERROR_INVALID_CONTEXT);
    if (alignment == 0)
        alignment = (size_t)granularity;
    if (!ptr || size == 0 || size % granularity || flags != 0 || addr != 0 ||
        (alignment & (alignment - 1)) != 0 || alignment % granularity)
        return leave(CUDA_ERROR_INVALID_VALUE);
    struct reservation *v = malloc(sizeof *v);
    size_t map_size = size + alignment;
    void *map = v ? mmap(NULL, map_size, PROT_NONE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
                  : MAP_FAILED;
    if (map == MAP_FAILED) {
        free(v);
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    }
    uint64_t start =
        ((uint64_t)(uintptr_t)map + alignment - 1) & ~(uint64_t)(alignment - 1);
    *v = (struct reservation){reservations, start, size, map, map_size};
    reservations = v;
    *ptr = start;
    return leave(CUDA_SUCCESS);
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    CUresult r = enter(F_cuMemAddressFree);
    charge_bytes(F_cuMemAddressFree, size);
    if (r)
        return leave(r);
    if (!vmm)
        return leave(CUDA_ERROR_NOT_SUPPORTED);
    for (struct reservation **p = &reservations; *p; p = &(*p)->next) {
        struct reservation *v = *p;
        if (v->addr != ptr)
            continue;
        if (v->size != size) {
            misuse("cuMemAddressFree(0x%llx, %zu): the range has %llu bytes", ptr, size,
                   (unsigned long long)v->size);
            return leave(CUDA_ERROR_INVALID_VALUE);
        }
        for (struct mapping *m = mappings; m; m = m->next) {
            if (m->addr >= v->addr && m->addr < v->addr + v->size) {
                misuse("cuMemAddressFree(0x%llx): memory is still mapped at 0x%llx", ptr,
                       (unsigned long long)m->addr);
                return leave(CUDA_ERROR_INVALID_VALUE);
            }
        }
        munmap(v->map, v->map_size);
        *p = v->next;
        free(v);
        return leave(CUDA_SUCCESS);
    }
    misuse("cuMemAddressFree(0x%llx): not a reserved range", ptr);
    return leave(CUDA_ERROR_INVALID_VALUE);
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                     const CUmemAllocationProp *prop, unsigned long long flags)
{
    CUresult r = enter(F_cuMemCreate);
    charge_bytes(F_cuMemCreate, size);
    if (r)
        return leave(r);
    if (!vmm)
        return leave(CUDA_ERROR_NOT_SUPPORTED);
    if (!handle || size == 0 || size % granularity || !valid_prop(prop) || flags != 0)
        return leave(CUDA_ERROR_INVALID_VALUE);
    int dev = prop->location.id;
    if (!take(dev, size))
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    struct handle *h = malloc(sizeof *h);
    if (!h) {
        give(dev, size);
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    }
    *h = (struct handle){handles, next_handle++, size, dev, false, 0};
    handles = h;
    *handle = h->id;
    return leave(CUDA_SUCCESS);
}

static struct handle *handle_of(CUmemGenericAllocationHandle id)
{
    for (struct handle *h = handles; h; h = h->next)
        if (h->id == id)
            return h;
    return NULL;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle id)
{
    CUresult r = enter(F_cuMemRelease);
    if (r)
        return leave(r);
    if (!vmm)
        return leave(CUDA_ERROR_NOT_SUPPORTED);
    struct handle *h = handle_of(id);
    if (!h || h->released) {
        misuse("cuMemRelease(%llu): not a live handle (unknown or released twice)", id);
        return leave(CUDA_ERROR_INVALID_VALUE);
    }
    charge_bytes(F_cuMemRelease, h->size);
    h->released = true;
    handle_drop_if_gone(h);
    return leave(CUDA_SUCCESS);
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                  CUmemGenericAllocationHandle id, unsigned long long flags)
{
    CUresult r = enter(F_cuMemMap);
    charge_bytes(F_cuMemMap, size);
    if (r)
        return leave(r);
    if (!vmm)
        return leave(CUDA_ERROR_NOT_SUPPORTED);
    struct handle *h = handle_of(id);
    if (!h || h->released) {
        misuse("cuMemMap of handle %llu, which is not live", id);
        return leave(CUDA_ERROR_INVALID_VALUE);
    }
    /* The double maps whole handles only, which is all gpumem does. */
    if (offset != 0 || size != h->size || flags != 0 || ptr % granularity)
        return leave(CUDA_ERROR_INVALID_VALUE);
    if (!reservation_of(ptr, size)) {
        misuse("cuMemMap(0x%llx, %zu) outside any reserved range", ptr, size);
        return leave(CUDA_ERROR_INVALID_VALUE);
    }
    for (struct mapping *m = mappings; m; m = m->next) {
        if (ptr < m->addr + m->size && m->addr < ptr + size) {
            misuse("cuMemMap(0x%llx, %zu) over memory already mapped", ptr, size);
            return leave(CUDA_ERROR_INVALID_VALUE);
        }
    }
    struct mapping *m = malloc(sizeof *m);
    if (!m)
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    *m = (struct mapping){mappings, ptr, size, h};
    mappings = m;
    h->mappings++;
    return leave(CUDA_SUCCESS);
}

/* true when [ptr, ptr+size) is exactly a run of whole mappings side by side. */
static bool covered_by_mappings(uint64_t ptr, uint64_t size)
{
    uint64_t at = ptr;
    while (at < ptr + size) {
        struct mapping *m = mappings;
        while (m && m->addr != at)
            m = m->next;
        if (!m || m->addr + m->size > ptr + size)
            return false;
        at += m->size;
    }
    return size > 0;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                        size_t count)
{
    CUresult r = enter(F_cuMemSetAccess);
    charge_bytes(F_cuMemSetAccess, size);
    if (r)
        return leave(r);
    if (!vmm)
        return leave(CUDA_ERROR_NOT_SUPPORTED);
    if (!desc || count == 0)
        return leave(CUDA_ERROR_INVALID_VALUE);
    for (size_t i = 0; i < count; i++)
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
            !valid_device(desc[i].location.id) ||
            desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            return leave(CUDA_ERROR_INVALID_VALUE);
    if (!covered_by_mappings(ptr, size)) {
        misuse("cuMemSetAccess(0x%llx, %zu) over memory that is not mapped", ptr, size);
        return leave(CUDA_ERROR_INVALID_VALUE);
    }
    /* fresh pages: read as zero, as new device memory need not but may */
    mprotect((void *)(uintptr_t)ptr, size, PROT_READ | PROT_WRITE);
    return leave(CUDA_SUCCESS);
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    CUresult r = enter(F_cuMemUnmap);
    charge_bytes(F_cuMemUnmap, size);
    if (r)
        return leave(r);
    if (!vmm)
        return leave(CUDA_ERROR_NOT_SUPPORTED);
    if (!covered_by_mappings(ptr, size)) {
        misuse("cuMemUnmap(0x%llx, %zu) of memory that is not exactly mapped", ptr, size);
        return leave(CUDA_ERROR_INVALID_VALUE);
    }
    madvise((void *)(uintptr_t)ptr, size, MADV_DONTNEED);
    mprotect((void *)(uintptr_t)ptr, size, PROT_NONE);
    for (struct mapping **p = &mappings; *p;) {
        struct mapping *m = *p;
        if (m->addr >= ptr && m->addr < ptr + size) {
            *p = m->next;
            m->handle->mappings--;
            handle_drop_if_gone(m->handle);
            free(m);
        } else {
            p = &m->next;
        }
    }
    return leave(CUDA_SUCCESS);
}

/* --------------------------------------------------------------- controls -- */

FAKECUDA_API void fakecuda_reset(void)
{
    pthread_mutex_lock(&lock);
    while (mappings) {
        struct mapping *m = mappings;
        mappings = m->next;
        free(m);
    }
    while (handles) {
        struct handle *h = handles;
        handles = h->next;
        free(h);
    }
    while (blocks) {
        struct block *b = blocks;
        blocks = b->next;
        munmap((void *)(uintptr_t)b->addr, (size_t)b->size);
        free(b);
    }
    while (reservations) {
        struct reservation *v = reservations;
        reservations = v->next;
        munmap(v->map, v->map_size);
        free(v);
    }
    drop_kept();
    num_held = 0;
    wait_completes = false;
    pthread_cond_broadcast(&event_cond);
    configured = initialized = false;
    init_pid = 0;
    block_fn = -1;
    num_devices = 0;
    memset(devices, 0, sizeof devices);
    vmm = true;
    granularity = 2 * MiB;
    context_bytes = 0;
    init_error = CUDA_SUCCESS;
    memset(calls, 0, sizeof calls);
    memset(faults, 0, sizeof faults);
    charged = 0;
    spin = false;
    then_fn = -1;
    misuses = 0;
    last_misuse[0] = '\0';
    depth = 0;
    pthread_mutex_unlock(&lock);
}

FAKECUDA_API int fakecuda_set_devices(const char *spec)
{
    pthread_mutex_lock(&lock);
    configure();
    int r = spec ? load_devices(spec) : -1;
    if (r == 0) { /* the machine's ledgers follow the new devices */
        machine_close();
        machine_open();
    }
    pthread_mutex_unlock(&lock);
    return r;
}

FAKECUDA_API void fakecuda_set_vmm(int enabled)
{
    pthread_mutex_lock(&lock);
    configure();
    vmm = enabled != 0;
    pthread_mutex_unlock(&lock);
}

FAKECUDA_API void fakecuda_set_granularity(uint64_t bytes)
{
    pthread_mutex_lock(&lock);
    configure();
    granularity = bytes;
    pthread_mutex_unlock(&lock);
}

FAKECUDA_API void fakecuda_set_context_bytes(uint64_t bytes)
{
    pthread_mutex_lock(&lock);
    configure();
    context_bytes = bytes;
    pthread_mutex_unlock(&lock);
}

FAKECUDA_API void fakecuda_set_used_elsewhere(int dev, uint64_t bytes)
{
    pthread_mutex_lock(&lock);
    configure();
    if (valid_device(dev))
        devices[dev].elsewhere = bytes;
    pthread_mutex_unlock(&lock);
}

FAKECUDA_API void fakecuda_set_uuid(int dev, const unsigned char *bytes)
{
    pthread_mutex_lock(&lock);
    configure();
    if (valid_device(dev)) {
        devices[dev].no_uuid = bytes == NULL;
        if (bytes)
            memcpy(devices[dev].uuid, bytes, sizeof devices[dev].uuid);
    }
    pthread_mutex_unlock(&lock);
}

FAKECUDA_API void fakecuda_set_init_error(int code)
{
    pthread_mutex_lock(&lock);
    configure();
    init_error = (CUresult)code;
    pthread_mutex_unlock(&lock);
}

FAKECUDA_API int fakecuda_set_price(const char *fn, uint64_t ns, uint64_t ns_per_mib)
{
    pthread_mutex_lock(&lock);
    configure();
    int r = fn ? driver_price_set(&prices, fn, ns, ns_per_mib) : -1;
    pthread_mutex_unlock(&lock);
    return r;
}

FAKECUDA_API void fakecuda_set_spin(int enabled)
{
    pthread_mutex_lock(&lock);
    configure();
    spin = enabled != 0;
    pthread_mutex_unlock(&lock);
}

FAKECUDA_API uint64_t fakecuda_charged_ns(void)
{
    pthread_mutex_lock(&lock);
    uint64_t n = charged;
    pthread_mutex_unlock(&lock);
    return n;
}

FAKECUDA_API int fakecuda_fail_nth(const char *fn, unsigned long n, int code)
{
    int f = find_fn(fn);
    if (f < 0)
        return -1;
    pthread_mutex_lock(&lock);
    configure();
    faults[f] = (struct fault){n ? calls[f] + n : 0, (CUresult)code};
    pthread_mutex_unlock(&lock);
    return 0;
}

FAKECUDA_API int fakecuda_fail_then(const char *fn, int code)
{
    int f = find_fn(fn);
    if (f < 0)
        return -1;
    pthread_mutex_lock(&lock);
    configure();
    then_fn = f;
    then_code = (CUresult)code;
    pthread_mutex_unlock(&lock);
    return 0;
}

FAKECUDA_API int fakecuda_block_next(const char *fn)
{
    int f = find_fn(fn);
    if (f < 0)
        return -1;
    pthread_mutex_lock(&lock);
    block_fn = f;
    pthread_mutex_unlock(&lock);
    return 0;
}

FAKECUDA_API void fakecuda_wait_blocked(void)
{
    pthread_mutex_lock(&lock);
    while (!blocked)
        pthread_cond_wait(&block_cond, &lock);
    pthread_mutex_unlock(&lock);
}

FAKECUDA_API void fakecuda_unblock(void)
{
    pthread_mutex_lock(&lock);
    blocked = false;
    pthread_cond_broadcast(&block_cond);
    pthread_mutex_unlock(&lock);
}

FAKECUDA_API int fakecuda_fault_pending(void)
{
    int pending = 0;
    pthread_mutex_lock(&lock);
    pending = then_fn >= 0;
    for (int f = 0; f < F_COUNT; f++)
        pending = pending || faults[f].at != 0;
    pthread_mutex_unlock(&lock);
    return pending;
}

FAKECUDA_API unsigned long fakecuda_calls(const char *fn)
{
    int f = find_fn(fn);
    pthread_mutex_lock(&lock);
    unsigned long n = f < 0 ? 0 : calls[f];
    pthread_mutex_unlock(&lock);
    return n;
}

FAKECUDA_API unsigned long fakecuda_calls_ever(const char *fn)
{
    int f = find_fn(fn);
    pthread_mutex_lock(&lock);
    unsigned long n = f < 0 ? 0 : calls_ever[f];
    pthread_mutex_unlock(&lock);
    return n;
}

FAKECUDA_API const char *fakecuda_entry_point(size_t i)
{
    return i < F_COUNT ? fn_names[i] : NULL;
}

FAKECUDA_API uint64_t fakecuda_free_bytes(int dev)
{
    pthread_mutex_lock(&lock);
    configure();
    uint64_t f = valid_device(dev) ? free_of(dev) : 0;
    pthread_mutex_unlock(&lock);
    return f;
}

FAKECUDA_API uint64_t fakecuda_used_bytes(int dev)
{
    pthread_mutex_lock(&lock);
    configure();
    uint64_t used = valid_device(dev) ? devices[dev].used : 0;
    pthread_mutex_unlock(&lock);
    return used;
}

FAKECUDA_API void fakecuda_live(struct fakecuda_live *out)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&lock);
    for (struct block *b = blocks; b; b = b->next)
        out->allocations++;
    for (struct handle *h = handles; h; h = h->next)
        out->handles++;
    for (struct mapping *m = mappings; m; m = m->next)
        out->mappings++;
    for (struct reservation *v = reservations; v; v = v->next)
        out->reservations++;
    for (int i = 0; i < num_devices; i++)
        out->context_refs += devices[i].primary.refs;
    for (struct CUevent_st *e = events; e; e = e->next)
        out->events += !e->destroyed;
    pthread_mutex_unlock(&lock);
}

FAKECUDA_API int fakecuda_hold_stream(const void *stream)
{
    int r = -1;
    pthread_mutex_lock(&lock);
    if (stream_held((CUstream)stream))
        r = 0;
    else if (num_held < MAX_HELD) {
        held_streams[num_held++] = (CUstream)stream;
        r = 0;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

FAKECUDA_API void fakecuda_release_stream(const void *stream)
{
    pthread_mutex_lock(&lock);
    release_held((CUstream)stream);
    pthread_mutex_unlock(&lock);
}

FAKECUDA_API int fakecuda_stream_held(const void *stream)
{
    pthread_mutex_lock(&lock);
    bool held = stream_held((CUstream)stream);
    pthread_mutex_unlock(&lock);
    return held;
}

FAKECUDA_API void fakecuda_set_wait_completes(int enabled)
{
    pthread_mutex_lock(&lock);
    wait_completes = enabled != 0;
    pthread_mutex_unlock(&lock);
}

FAKECUDA_API unsigned long fakecuda_events_incomplete(void)
{
    unsigned long n = 0;
    pthread_mutex_lock(&lock);
    for (struct CUevent_st *e = events; e; e = e->next)
        n += !e->destroyed && !e->complete;
    pthread_mutex_unlock(&lock);
    return n;
}

FAKECUDA_API int fakecuda_context_depth(void) { return depth; }

FAKECUDA_API const void *fakecuda_current_context(void)
{
    return depth ? (const void *)stack[depth - 1] : NULL;
}

FAKECUDA_API const void *fakecuda_push_user_context(int dev)
{
    pthread_mutex_lock(&lock);
    configure();
    const void *c = NULL;
    if (valid_device(dev) && depth < MAX_STACK) {
        stack[depth++] = &devices[dev].user;
        c = &devices[dev].user;
    }
    pthread_mutex_unlock(&lock);
    return c;
}

FAKECUDA_API int fakecuda_pop_context(void)
{
    if (depth == 0)
        return -1;
    depth--;
    return 0;
}

FAKECUDA_API unsigned long fakecuda_misuses(void)
{
    pthread_mutex_lock(&lock);
    unsigned long n = misuses;
    pthread_mutex_unlock(&lock);
    return n;
}

FAKECUDA_API const char *fakecuda_last_misuse(void)
{
    static char copy[sizeof last_misuse];
    pthread_mutex_lock(&lock);
    memcpy(copy, last_misuse, sizeof copy);
    pthread_mutex_unlock(&lock);
    return copy;
}
