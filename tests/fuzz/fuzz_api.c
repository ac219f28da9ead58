/* A fuzz target for the public API, as a program (or a Python user through
 * ctypes) drives it: configuration calls with any index, fraction, limit or list,
 * initialization, allocations of any size on any logical device, good and bad
 * frees, memory info, release and reset, in any order, on one to three simulated
 * GPUs. Every call must return one of the documented statuses, and what the
 * caller can see must hold: live allocations never overlap and can be written
 * end to end, each logical device's current_bytes is the sum of its live
 * allocations (rounded to 256 bytes), current <= reserved <= limit (the peak
 * too), peaks at or above, a pointer frees once, and destroy gives everything
 * back (ASan and LeakSanitizer would say otherwise).
 *
 * Input: byte 0 the number of GPUs, bytes 1-3 their sizes, then four bytes per
 * call. Built and run like fuzz_arena.c (tests/meson.build). */
#define FUZZ_TARGET "fuzz-api"
#include "fuzz_calls.h"
#include "gpumem.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LIVE    64
#define MAX_LOGICAL 16

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct live {
    unsigned char *p;
    size_t size, rounded;
    int logical;
};

struct state {
    gpumem_runtime *rt;
    struct live live[MAX_LIVE];
    size_t nlive;
};

/* The statuses the configuration calls document, and those of an
 * initialization (gpumem_initialize's, which the calls that initialize return):
 * on simulated GPUs no driver fails, so BACKEND is not among them. */
#define CONFIG                                                                           \
    (ST(OK) | ST(ERR_INVALID_ARGUMENT) | ST(ERR_NO_SUCH_DEVICE) |                        \
     ST(ERR_ALREADY_INITIALIZED))
#define INIT ST(ERR_OUT_OF_MEMORY)

/* An index around the valid ones: -2 .. 5. */
static int index_of(uint8_t b) { return (int)(b % 8) - 2; }

static void check_info(struct state *s, int logical)
{
    gpumem_memory_info info = GPUMEM_STRUCT_INIT(gpumem_memory_info);
    if (only(gpumem_get_memory_info(s->rt, logical, &info),
             ST(OK) | ST(ERR_NO_SUCH_DEVICE) | INIT,
             "gpumem_get_memory_info") != GPUMEM_OK)
        return;
    uint64_t sum = 0;
    for (size_t i = 0; i < s->nlive; i++)
        if (s->live[i].logical == logical)
            sum += s->live[i].rounded;
    if (info.current_bytes != sum)
        die("current_bytes is not the sum of the live allocations",
            "gpumem_get_memory_info");
    if (info.current_bytes > info.reserved_bytes ||
        info.reserved_bytes > info.limit_bytes || info.peak_bytes < info.current_bytes ||
        info.peak_reserved_bytes < info.reserved_bytes ||
        info.peak_reserved_bytes > info.limit_bytes) { /* never over, even for a while */
        fprintf(stderr,
                "logical %d: current %llu, reserved %llu, limit %llu, peak %llu, peak "
                "reserved %llu\n",
                logical, (unsigned long long)info.current_bytes,
                (unsigned long long)info.reserved_bytes,
                (unsigned long long)info.limit_bytes, (unsigned long long)info.peak_bytes,
                (unsigned long long)info.peak_reserved_bytes);
        die("current <= reserved <= peak reserved <= limit, or a peak below its value",
            "gpumem_get_memory_info");
    }
}

static void call_malloc(struct state *s, uint8_t b1, uint8_t b2, uint8_t b3)
{
    int logical = index_of(b1);
    size_t size = b2 == 255 ? SIZE_MAX - b3 : (size_t)b3 << (b2 % 22); /* 0 .. 512 MiB */
    void *p = NULL;
    gpumem_status st = only(gpumem_malloc(s->rt, logical, size, &p),
                            ST(OK) | ST(ERR_NO_SUCH_DEVICE) | INIT, "gpumem_malloc");
    if (st != GPUMEM_OK)
        return;
    if (size == 0) { /* as cudaMalloc: GPUMEM_OK and NULL, nothing counted */
        if (p)
            die("size 0 gave a pointer", "gpumem_malloc");
        return;
    }
    if (!p || (uintptr_t)p % 256)
        die("a NULL or misaligned allocation", "gpumem_malloc");
    unsigned char *c = p;
    for (size_t i = 0; i < s->nlive; i++)
        if (c < s->live[i].p + s->live[i].size && s->live[i].p < c + size)
            die("an allocation overlaps a live one", "gpumem_malloc");
    c[size - 1] = 0x5A; /* simulated memory is host memory: both ends are writable */
    c[0] = 0xA5;        /* (one byte when size is 1) */
    if (s->nlive == MAX_LIVE) {
        if (known(gpumem_free(s->rt, p), "gpumem_free") != GPUMEM_OK)
            die("a fresh allocation did not free", "gpumem_free");
        return;
    }
    s->live[s->nlive++] = (struct live){c, size, (size + 255) / 256 * 256, logical};
}

static void call_free(struct state *s, uint8_t b1, uint8_t b2)
{
    if (s->nlive && b2 % 4 != 0) {
        size_t i = b1 % s->nlive;
        const struct live *l = &s->live[i];
        if (l->p[0] != 0xA5 || (l->size > 1 && l->p[l->size - 1] != 0x5A))
            die("a live allocation was overwritten", "gpumem_free");
        if (known(gpumem_free(s->rt, s->live[i].p), "gpumem_free") != GPUMEM_OK)
            die("a live allocation did not free", "gpumem_free");
        s->live[i] = s->live[--s->nlive];
        return;
    }
    /* not a live allocation's start: refused, or NULL, a no-op */
    int local = 0;
    void *bad = b1 % 3 == 0   ? NULL
                : b1 % 3 == 1 ? (void *)&local
                : s->nlive    ? (void *)(s->live[b1 % s->nlive].p + 256)
                              : (void *)&local;
    for (size_t i = 0; i < s->nlive; i++)
        if (s->live[i].p == bad)
            return;
    gpumem_status st = known(gpumem_free(s->rt, bad), "gpumem_free");
    if (bad ? st != GPUMEM_ERR_INVALID_POINTER : st != GPUMEM_OK)
        die(bad ? "a bad pointer was not refused" : "free(NULL) is not a no-op",
            "gpumem_free");
}

static void call_configure(struct state *s, uint8_t op, uint8_t b1, uint8_t b2,
                           uint8_t b3)
{
    int physical = index_of(b1);
    switch (op) {
    case 0: {
        int list[4] = {b2 & 3, (b2 >> 2) & 3, (b2 >> 4) & 3, index_of(b3)};
        only(gpumem_set_visible_devices(s->rt, b3 == 255 ? NULL : list, b1 % 5), CONFIG,
             "gpumem_set_visible_devices");
        break;
    }
    case 1:
        only(gpumem_set_memory_growth(s->rt, physical, b2 & 1),
             CONFIG & ~ST(ERR_INVALID_ARGUMENT), "gpumem_set_memory_growth");
        break;
    case 2: {
        double f = b2 == 255 ? NAN : b2 == 254 ? -INFINITY : b2 / 200.0;
        only(gpumem_set_memory_fraction(s->rt, physical, f), CONFIG,
             "gpumem_set_memory_fraction");
        break;
    }
    default: {
        gpumem_logical_device_config cfg[4];
        for (int i = 0; i < 4; i++)
            cfg[i] =
                (gpumem_logical_device_config){.struct_size = sizeof cfg[i],
                                               .memory_limit_bytes =
                                                   (uint64_t)((b3 + i * 37) % 64) << 20,
                                               .priority = i};
        only(gpumem_set_logical_device_configuration(s->rt, physical,
                                                     b2 == 255 ? NULL : cfg, b2 % 5),
             CONFIG, "gpumem_set_logical_device_configuration");
        break;
    }
    }
}

static void call_query(struct state *s, uint8_t b1, uint8_t b2)
{
    int i = index_of(b1);
    size_t cap = b2 % 4, count = 0;
    gpumem_physical_device phys[3] = {GPUMEM_STRUCT_INIT(gpumem_physical_device)};
    int visible[3];
    gpumem_logical_device_config cfg[3] = {
        GPUMEM_STRUCT_INIT(gpumem_logical_device_config)};
    gpumem_logical_device logical[MAX_LOGICAL] = {
        GPUMEM_STRUCT_INIT(gpumem_logical_device)};
    bool flag;
    double fraction;
    gpumem_backend_kind kind;
    known(gpumem_list_physical_devices(s->rt, cap ? phys : NULL, cap > 3 ? 3 : cap,
                                       &count),
          "gpumem_list_physical_devices");
    known(gpumem_get_visible_devices(s->rt, cap ? visible : NULL, cap > 3 ? 3 : cap,
                                     &count),
          "gpumem_get_visible_devices");
    known(gpumem_get_logical_device_configuration(s->rt, i, cap ? cfg : NULL,
                                                  cap > 3 ? 3 : cap, &count),
          "gpumem_get_logical_device_configuration");
    known(gpumem_get_memory_growth(s->rt, i, &flag), "gpumem_get_memory_growth");
    known(gpumem_get_memory_fraction(s->rt, i, &fraction), "gpumem_get_memory_fraction");
    known(gpumem_is_initialized(s->rt, &flag), "gpumem_is_initialized");
    if (known(gpumem_get_backend(s->rt, &kind), "gpumem_get_backend") != GPUMEM_OK ||
        kind != GPUMEM_BACKEND_SIM)
        die("not the simulated backend", "gpumem_get_backend");
    if (flag && known(gpumem_list_logical_devices(s->rt, logical, MAX_LOGICAL, &count),
                      "gpumem_list_logical_devices") == GPUMEM_OK)
        for (size_t k = 0; k < count && k < MAX_LOGICAL; k++)
            check_info(s, logical[k].index);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    char devices[64];
    int n = data[0] % 3 + 1, at = 0;
    for (int i = 0; i < n; i++)
        at += snprintf(devices + at, sizeof devices - (size_t)at, "%s%dMiB", i ? "," : "",
                       data[1 + i] % 64 + 1);
    gpumem_options o;
    gpumem_options_init(&o);
    o.flags = GPUMEM_OPTIONS_IGNORE_ENVIRONMENT;
    o.backend = GPUMEM_BACKEND_SIM;
    o.sim_devices = devices;
    static struct state s;
    memset(&s, 0, sizeof s);
    if (known(gpumem_runtime_create(&o, &s.rt), "gpumem_runtime_create") != GPUMEM_OK)
        die("a simulated runtime could not be created", "gpumem_runtime_create");
    for (size_t k = 4; k + 4 <= size; k += 4) {
        uint8_t op = data[k], b1 = data[k + 1], b2 = data[k + 2], b3 = data[k + 3];
        switch (op % 16) {
        case 0:
        case 1:
        case 2:
        case 3:
            call_configure(&s, op % 4, b1, b2, b3);
            break;
        case 4:
            only(gpumem_initialize(s.rt), ST(OK) | INIT, "gpumem_initialize");
            break;
        case 5:
        case 6:
        case 7:
        case 8:
            call_malloc(&s, b1, b2, b3);
            break;
        case 9:
        case 10:
        case 11:
            call_free(&s, b1, b2);
            break;
        case 12: {
            uint64_t released = 0;
            only(gpumem_release_unused(s.rt, index_of(b1), &released),
                 ST(OK) | ST(ERR_NO_SUCH_DEVICE), "gpumem_release_unused");
            break;
        }
        case 13:
            only(gpumem_reset_memory_stats(s.rt, index_of(b1)),
                 ST(OK) | ST(ERR_NO_SUCH_DEVICE), "gpumem_reset_memory_stats");
            break;
        case 14:
            check_info(&s, index_of(b1));
            break;
        default:
            call_query(&s, b1, b2);
            break;
        }
    }
    while (s.nlive)
        call_free(&s, 0, 1);
    bool initialized = false;
    gpumem_is_initialized(s.rt, &initialized);
    for (int logical = 0; initialized && logical < MAX_LOGICAL; logical++)
        check_info(&s, logical);
    gpumem_runtime_destroy(s.rt);
    return 0;
}
