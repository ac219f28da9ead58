/* Snapshots: every segment and chunk of a runtime's pools as JSON in the structure
 * of PyTorch's torch.cuda.memory._snapshot(), which its memory viewer opens
 * (docs/snapshot.md). Each pool is copied under its own lock into plain arrays
 * (gpumem__pool_copy) and formatted here with no lock held, so a million chunks
 * hold a pool's lock only for the copy; pools are copied one after another, so a
 * snapshot of several logical devices is consistent per device, not across them.
 * device_traces holds one empty list per logical device, for an event history to
 * fill. */
#include "snapshot.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A growing host buffer; `failed` once an allocation failed (then it stays). */
struct out {
    char *p;
    size_t len, cap;
    bool failed;
};

static void out_reserve(struct out *o, size_t more)
{
    if (o->failed || o->len + more < o->cap)
        return;
    size_t cap = o->cap ? o->cap : 4096;
    while (cap <= o->len + more)
        cap *= 2;
    char *p = realloc(o->p, cap);
    if (!p) {
        o->failed = true;
        return;
    }
    o->p = p;
    o->cap = cap;
}

GPUMEM_PRINTF(2, 3)
static void out_printf(struct out *o, const char *fmt, ...)
{
    va_list ap;
    out_reserve(o, 256);
    if (o->failed)
        return;
    va_start(ap, fmt);
    int n = vsnprintf(o->p + o->len, o->cap - o->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
        o->failed = true;
        return;
    }
    if ((size_t)n >= o->cap - o->len) { /* longer than the room made: once more */
        out_reserve(o, (size_t)n + 1);
        if (o->failed)
            return;
        va_start(ap, fmt);
        vsnprintf(o->p + o->len, o->cap - o->len, fmt, ap);
        va_end(ap);
    }
    o->len += (size_t)n;
}

/* A JSON string (quotes included); NULL is null. */
static void out_string(struct out *o, const char *s)
{
    if (!s) {
        out_printf(o, "null");
        return;
    }
    out_reserve(o, strlen(s) * 6 + 3);
    if (o->failed)
        return;
    o->p[o->len++] = '"';
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') {
            o->p[o->len++] = '\\';
            o->p[o->len++] = (char)*c;
        } else if (*c < 0x20) {
            o->len += (size_t)snprintf(o->p + o->len, 7, "\\u%04x", *c);
        } else {
            o->p[o->len++] = (char)*c;
        }
    }
    o->p[o->len++] = '"';
}

static const char *const kind_names[] = {"greedy", "growth", "vmm"};

static void format_segment(struct out *o, int logical, int physical,
                           const struct pool_copy *c, const struct pool_segment *g)
{
    uint64_t allocated = 0, requested = 0;
    for (size_t i = g->first; i < g->first + g->count; i++)
        if (!c->chunks[i].is_free) {
            allocated += c->chunks[i].size;
            requested += c->chunks[i].requested;
        }
    /* PyTorch's small pool holds segments of 2 MiB */
    out_printf(o,
               "{\"device\":%d,\"physical_device\":%d,\"address\":%" PRIu64
               ",\"total_size\":%" PRIu64 ",\"allocated_size\":%" PRIu64
               ",\"active_size\":%" PRIu64 ",\"requested_size\":%" PRIu64
               ",\"stream\":0,\"segment_type\":\"%s\",\"segment_pool_id\":[0,0],"
               "\"is_expandable\":%s,\"kind\":\"%s\",\"frames\":[],\"blocks\":[",
               logical, physical, g->base, g->size, allocated, allocated, requested,
               g->size <= 2 * GPUMEM_MIB ? "small" : "large",
               g->kind == POOL_REGION_VMM ? "true" : "false", kind_names[g->kind]);
    for (size_t i = g->first; i < g->first + g->count; i++) {
        const struct pool_chunk *k = &c->chunks[i];
        out_printf(o,
                   "%s{\"address\":%" PRIu64 ",\"size\":%" PRIu64
                   ",\"requested_size\":%" PRIu64 ",\"state\":\"%s\",\"seq\":%" PRIu64
                   ",\"stream\":%" PRIu64 ",\"tag\":",
                   i > g->first ? "," : "", k->addr, k->size, k->requested,
                   k->is_free ? "inactive" : "active_allocated", k->seq, k->stream);
        out_string(o, k->tag);
        if (k->tag) {
            out_printf(o, ",\"frames\":[{\"filename\":");
            out_string(o, k->tag);
            out_printf(o, ",\"line\":0,\"name\":\"gpumem_set_tag\"}]}");
        } else {
            out_printf(o, ",\"frames\":[]}");
        }
    }
    out_printf(o, "]}");
}

/* The JSON of logical devices [first, last] of a serving runtime into *o. */
static gpumem_status format_snapshot(gpumem_runtime *rt, int first, int last,
                                     struct out *o, struct reason *why)
{
    /* no GPU: last is first - 1, and the snapshot has no segment */
    struct pool_copy *copies = calloc((size_t)(last - first + 1) + 1, sizeof *copies);
    gpumem_status s = GPUMEM_OK;
    if (!copies)
        return gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                              "out of host memory for a snapshot");
    for (int l = first; l <= last && s == GPUMEM_OK; l++)
        s = gpumem__pool_copy(rt->logical[l].pool, &copies[l - first], why);
    if (s != GPUMEM_OK)
        goto out;
    out_printf(o, "{\"format\":\"gpumem-snapshot\",\"version\":1,\"segments\":[");
    bool comma = false;
    for (int l = first; l <= last; l++) {
        const struct pool_copy *c = &copies[l - first];
        for (size_t g = 0; g < c->nsegs; g++) {
            if (comma)
                out_printf(o, ",");
            comma = true;
            format_segment(o, l, rt->logical[l].desc.physical_index, c, &c->segs[g]);
        }
    }
    /* one trace per logical device, indexed by "device" as the viewer reads them */
    out_printf(o, "],\"device_traces\":[");
    for (int l = 0; l <= last; l++)
        out_printf(o, "%s[]", l ? "," : "");
    out_printf(o, "],\"devices\":[");
    for (int l = first; l <= last; l++) {
        const struct pool_copy *c = &copies[l - first];
        const gpumem_memory_info *m = &c->info;
        out_printf(o,
                   "%s{\"device\":%d,\"name\":\"%s\",\"physical_device\":%d,"
                   "\"budget\":%" PRIu64 ",\"budget_reason\":",
                   l > first ? "," : "", l, rt->logical[l].desc.name,
                   rt->logical[l].desc.physical_index, c->budget);
        out_string(o, gpumem__pool_budget_reason(rt->logical[l].pool));
        out_printf(o,
                   ",\"memory_growth\":%s,\"in_use\":%" PRIu64 ",\"peak_in_use\":%" PRIu64
                   ",\"reserved\":%" PRIu64 ",\"peak_reserved\":%" PRIu64
                   ",\"cached\":%" PRIu64 ",\"largest_free_block\":%" PRIu64
                   ",\"num_allocs\":%" PRIu64 ",\"num_frees\":%" PRIu64
                   ",\"num_ooms\":%" PRIu64 "}",
                   c->growth ? "true" : "false", m->current_bytes, m->peak_bytes,
                   m->reserved_bytes, m->peak_reserved_bytes,
                   m->reserved_bytes - m->current_bytes, m->largest_free_block,
                   m->num_allocs, m->num_frees, m->num_ooms);
    }
    out_printf(o,
               "],\"allocator_settings\":{\"allocator\":\"gpumem\",\"version\":%u,"
               "\"granule\":256}}",
               gpumem_version());
    if (o->failed)
        s = gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                           "out of host memory for a snapshot's text");
out:
    for (int l = first; l <= last; l++)
        gpumem__pool_copy_free(&copies[l - first]);
    free(copies);
    return s;
}

/* Resolves, initializes and checks `logical` (-1: all) for entry point `api`,
 * and gives the range of logical devices. */
static gpumem_status snapshot_begin(gpumem_runtime **rt, const char *api, int logical,
                                    int *first, int *last)
{
    gpumem_status s = resolve_call(rt, api, OBJ_LOGICAL, logical, 0, NULL);
    if (s != GPUMEM_OK)
        return s;
    if ((s = gpumem__ensure_initialized(*rt, "the first gpumem snapshot")) != GPUMEM_OK)
        return s;
    if (logical != -1 &&
        (s = gpumem__check_logical_index(*rt, api, logical)) != GPUMEM_OK)
        return s;
    *first = logical == -1 ? 0 : logical;
    *last = logical == -1 ? (int)(*rt)->num_logical - 1 : logical;
    return GPUMEM_OK;
}

gpumem_status gpumem_snapshot_json(gpumem_runtime *rt, int logical, char *buf,
                                   size_t capacity, size_t *length)
{
    static const char api[] = "gpumem_snapshot_json";
    int first, last;
    struct reason why;
    struct out o = {0};
    gpumem_status s = snapshot_begin(&rt, api, logical, &first, &last);
    if (s != GPUMEM_OK)
        return s;
    if (!length || (!buf && capacity))
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "%s(/device:GPU:%d): %s", api,
                            logical,
                            !length ? "`length` is NULL"
                                    : "`buf` is NULL with a non-zero capacity");
    if ((s = format_snapshot(rt, first, last, &o, &why)) != GPUMEM_OK) {
        s = gpumem__fail(s, "%s(/device:GPU:%d): %s", api, logical, why.text);
        goto out;
    }
    *length = o.len + 1;
    if (buf && o.len + 1 > capacity) {
        s = gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                         "%s(/device:GPU:%d): the snapshot is %zu bytes now and the "
                         "buffer holds %zu; *length is the size it needs now (it may "
                         "grow again: leave room, or call again)",
                         api, logical, o.len + 1, capacity);
        goto out;
    }
    if (buf) {
        memcpy(buf, o.p, o.len);
        buf[o.len] = '\0';
    }
out:
    free(o.p);
    return s;
}

/* Writes the snapshot of [first, last] to path. */
static gpumem_status write_snapshot(gpumem_runtime *rt, int first, int last,
                                    const char *path, struct reason *why)
{
    struct out o = {0};
    gpumem_status s = format_snapshot(rt, first, last, &o, why);
    if (s == GPUMEM_OK) {
        FILE *f = fopen(path, "w");
        bool ok = f && fwrite(o.p, 1, o.len, f) == o.len;
        int err = errno;
        if (f && fclose(f) != 0 && ok) {
            ok = false;
            err = errno;
        }
        if (!ok)
            s = gpumem__reason(why, GPUMEM_ERR_INVALID_ARGUMENT,
                               "cannot write the snapshot to %s: %s", path,
                               strerror(err));
    }
    free(o.p);
    return s;
}

gpumem_status gpumem_snapshot_file(gpumem_runtime *rt, int logical, const char *path)
{
    static const char api[] = "gpumem_snapshot_file";
    int first, last;
    struct reason why;
    gpumem_status s = snapshot_begin(&rt, api, logical, &first, &last);
    if (s != GPUMEM_OK)
        return s;
    if (!path || !path[0])
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "%s(/device:GPU:%d): `path` is NULL or empty", api, logical);
    if ((s = write_snapshot(rt, first, last, path, &why)) != GPUMEM_OK)
        return gpumem__fail(s, "%s(/device:GPU:%d): %s", api, logical, why.text);
    return GPUMEM_OK;
}

void gpumem__snapshot_on_oom(gpumem_runtime *rt)
{
    static atomic_bool written;
    if (!rt->opts.oom_snapshot[0] || atomic_exchange(&written, true))
        return;
    struct reason why;
    if (write_snapshot(rt, 0, (int)rt->num_logical - 1, rt->opts.oom_snapshot, &why) !=
        GPUMEM_OK)
        gpumem__log(&rt->opts, GPUMEM_LOG_ERROR,
                    "GPUMEM_OOM_SNAPSHOT: no snapshot after the out of memory: %s",
                    why.text);
    else
        gpumem__log(&rt->opts, GPUMEM_LOG_WARNING,
                    "out of memory: a snapshot of every logical device is in %s",
                    rt->opts.oom_snapshot);
}
