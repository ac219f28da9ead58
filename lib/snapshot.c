/* Snapshots: every segment and chunk of a runtime's pools as JSON in the structure
 * of PyTorch's torch.cuda.memory._snapshot(), which its memory viewer opens
 * (docs/snapshot.md). Each pool is copied under its own lock into plain arrays
 * (gpumem__pool_copy) and formatted here with no lock held, so a million chunks
 * hold a pool's lock only for the copy; pools are copied one after another, so a
 * snapshot of several logical devices is consistent per device, not across them.
 * device_traces holds one list per logical device: its event history (history.h),
 * copied with its chunks, so that the two agree. Also the history's own entry
 * points: gpumem_record_history, and the trace in bench/'s format. */
#include "snapshot.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* What to add to a CLOCK_MONOTONIC time for the wall clock's (PyTorch's time_us
 * is the wall clock's): the two read now, one after the other. */
static int64_t wall_offset_ns(void)
{
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    uint64_t mono = gpumem__history_now();
    return (int64_t)wall.tv_sec * 1000000000 + wall.tv_nsec - (int64_t)mono;
}

/* A tag as PyTorch's frames: one frame whose file name is the tag. */
static void format_frames(struct out *o, const char *tag)
{
    if (tag) {
        out_printf(o, ",\"frames\":[{\"filename\":");
        out_string(o, tag);
        out_printf(o, ",\"line\":0,\"name\":\"gpumem_set_tag\"}]");
    } else {
        out_printf(o, ",\"frames\":[]");
    }
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
        format_frames(o, k->tag);
        out_printf(o, "}");
    }
    out_printf(o, "]}");
}

/* A pool's event history as PyTorch's trace entries (the fields the viewer and
 * torch/cuda/_memory_viz.py read: action, addr, size, stream, time_us, frames;
 * device_free for an out of memory), oldest first. */
static void format_trace(struct out *o, const struct pool_copy *c, int64_t to_wall)
{
    for (size_t i = 0; i < c->nevents; i++) {
        const struct history_event *e = &c->events[i];
        const char *tag = gpumem__tag_text(e->tag);
        int64_t us = ((int64_t)e->time_ns + to_wall) / 1000;
        out_printf(o,
                   "%s{\"action\":\"%s\",\"addr\":%" PRIu64 ",\"size\":%" PRIu64
                   ",\"stream\":%" PRIu64 ",\"time_us\":%" PRId64,
                   i ? "," : "", gpumem__history_action_name(e->action), e->addr, e->size,
                   e->stream, us);
        if (e->action == HIST_ALLOC)
            out_printf(o, ",\"requested_size\":%" PRIu64, e->requested);
        if (e->action == HIST_OOM)
            out_printf(o, ",\"device_free\":%" PRIu64, e->requested);
        if (e->action <= HIST_FREE_COMPLETED && e->seq)
            out_printf(o, ",\"seq\":%" PRIu64, e->seq);
        out_printf(o, ",\"tag\":");
        out_string(o, tag);
        format_frames(o, tag);
        out_printf(o, "}");
    }
}

/* Copies of the pools of logical devices [first, last] (no GPU: last is first -
 * 1, and there is none), one after the other; free_copies frees them. */
static gpumem_status copy_pools(gpumem_runtime *rt, int first, int last,
                                struct pool_copy **out, struct reason *why)
{
    struct pool_copy *copies = calloc((size_t)(last - first + 1) + 1, sizeof *copies);
    gpumem_status s = GPUMEM_OK;
    *out = copies;
    if (!copies)
        return gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                              "out of host memory for a snapshot");
    for (int l = first; l <= last && s == GPUMEM_OK; l++)
        s = gpumem__pool_copy(rt->logical[l].pool, &copies[l - first], why);
    return s;
}

static void free_copies(struct pool_copy *copies, int first, int last)
{
    for (int l = first; copies && l <= last; l++)
        gpumem__pool_copy_free(&copies[l - first]);
    free(copies);
}

/* The JSON of logical devices [first, last] of a serving runtime into *o. */
static gpumem_status format_snapshot(gpumem_runtime *rt, int first, int last,
                                     struct out *o, struct reason *why)
{
    struct pool_copy *copies;
    gpumem_status s = copy_pools(rt, first, last, &copies, why);
    if (s != GPUMEM_OK) {
        free_copies(copies, first, last);
        return s;
    }
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
    int64_t to_wall = wall_offset_ns();
    for (int l = 0; l <= last; l++) {
        out_printf(o, "%s[", l ? "," : "");
        if (l >= first)
            format_trace(o, &copies[l - first], to_wall);
        out_printf(o, "]");
    }
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
                   ",\"num_ooms\":%" PRIu64 ",\"history_recording\":%s"
                   ",\"history_events\":%zu,\"history_dropped\":%" PRIu64 "}",
                   c->growth ? "true" : "false", m->current_bytes, m->peak_bytes,
                   m->reserved_bytes, m->peak_reserved_bytes,
                   m->reserved_bytes - m->current_bytes, m->largest_free_block,
                   m->num_allocs, m->num_frees, m->num_ooms,
                   c->recording ? "true" : "false", c->nevents, c->dropped);
    }
    out_printf(o,
               "],\"allocator_settings\":{\"allocator\":\"gpumem\",\"version\":%u,"
               "\"granule\":256}}",
               gpumem_version());
    if (o->failed)
        s = gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                           "out of host memory for a snapshot's text");
    free_copies(copies, first, last);
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

typedef gpumem_status (*format_fn)(gpumem_runtime *rt, int first, int last, struct out *o,
                                   struct reason *why);

/* The two-call idiom of gpumem_snapshot_json and gpumem_history_trace: the text
 * that `format` makes, into buf; `what` names it in messages. */
static gpumem_status give_text(gpumem_runtime *rt, const char *api, const char *what,
                               format_fn format, int logical, char *buf, size_t capacity,
                               size_t *length)
{
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
    if ((s = format(rt, first, last, &o, &why)) != GPUMEM_OK) {
        s = gpumem__fail(s, "%s(/device:GPU:%d): %s", api, logical, why.text);
        goto out;
    }
    *length = o.len + 1;
    if (buf && o.len + 1 > capacity) {
        s = gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                         "%s(/device:GPU:%d): the %s is %zu bytes now and the "
                         "buffer holds %zu; *length is the size it needs now (it may "
                         "grow again: leave room, or call again)",
                         api, logical, what, o.len + 1, capacity);
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

gpumem_status gpumem_snapshot_json(gpumem_runtime *rt, int logical, char *buf,
                                   size_t capacity, size_t *length)
{
    return give_text(rt, "gpumem_snapshot_json", "snapshot", format_snapshot, logical,
                     buf, capacity, length);
}

/* Writes the text that `format` makes of [first, last] to path. */
static gpumem_status write_text(gpumem_runtime *rt, format_fn format, int first, int last,
                                const char *path, struct reason *why)
{
    struct out o = {0};
    gpumem_status s = format(rt, first, last, &o, why);
    if (s == GPUMEM_OK) {
        FILE *f = fopen(path, "w");
        bool ok = f && fwrite(o.p, 1, o.len, f) == o.len;
        int err = errno;
        if (f && fclose(f) != 0 && ok) {
            ok = false;
            err = errno;
        }
        if (!ok)
            s = gpumem__reason(why, GPUMEM_ERR_INVALID_ARGUMENT, "cannot write %s: %s",
                               path, strerror(err));
    }
    free(o.p);
    return s;
}

static gpumem_status file_text(gpumem_runtime *rt, const char *api, format_fn format,
                               int logical, const char *path)
{
    int first, last;
    struct reason why;
    gpumem_status s = snapshot_begin(&rt, api, logical, &first, &last);
    if (s != GPUMEM_OK)
        return s;
    if (!path || !path[0])
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "%s(/device:GPU:%d): `path` is NULL or empty", api, logical);
    if ((s = write_text(rt, format, first, last, path, &why)) != GPUMEM_OK)
        return gpumem__fail(s, "%s(/device:GPU:%d): %s", api, logical, why.text);
    return GPUMEM_OK;
}

gpumem_status gpumem_snapshot_file(gpumem_runtime *rt, int logical, const char *path)
{
    return file_text(rt, "gpumem_snapshot_file", format_snapshot, logical, path);
}

void gpumem__snapshot_on_oom(gpumem_runtime *rt)
{
    static atomic_bool written;
    if (!rt->opts.oom_snapshot[0] || atomic_exchange(&written, true))
        return;
    struct reason why;
    if (write_text(rt, format_snapshot, 0, (int)rt->num_logical - 1,
                   rt->opts.oom_snapshot, &why) != GPUMEM_OK)
        gpumem__log(&rt->opts, GPUMEM_LOG_ERROR,
                    "GPUMEM_OOM_SNAPSHOT: no snapshot after the out of memory: %s",
                    why.text);
    else
        gpumem__log(&rt->opts, GPUMEM_LOG_WARNING,
                    "out of memory: a snapshot of every logical device is in %s",
                    rt->opts.oom_snapshot);
}

/* ------------------------------------------------------------- history -- */

gpumem_status gpumem_record_history(gpumem_runtime *rt, size_t max_entries)
{
    static const char api[] = "gpumem_record_history";
    gpumem_status s = resolve(&rt, api);
    if (s != GPUMEM_OK)
        return s;
    if ((uint64_t)max_entries > GPUMEM_RECORD_HISTORY_MAX)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "%s(%zu): at most %llu events per logical device", api,
                            max_entries, (unsigned long long)GPUMEM_RECORD_HISTORY_MAX);
    if (!serving(rt)) {
        /* initialization makes the rings, under rt->lock: set the size it reads,
         * unless it has run meanwhile */
        gpumem__mutex_lock(&rt->lock);
        bool before = !serving(rt);
        if (before)
            rt->opts.record_history = (uint64_t)max_entries;
        gpumem__mutex_unlock(&rt->lock);
        if (before)
            return GPUMEM_OK;
    }
    for (size_t l = 0; l < rt->num_logical; l++) {
        struct reason why;
        s = gpumem__pool_set_history(rt->logical[l].pool, (uint64_t)max_entries, &why);
        if (s != GPUMEM_OK)
            return gpumem__fail(s, "%s(%zu): %s", api, max_entries, why.text);
    }
    return GPUMEM_OK;
}

/* The next event of the merge by time: the device whose next event is oldest
 * (ties: the lower device, so that one device's events keep their order); -1
 * when none is left. */
static int next_event(const struct pool_copy *copies, const size_t *at, int n)
{
    int best = -1;
    for (int d = 0; d < n; d++)
        if (at[d] < copies[d].nevents &&
            (best < 0 ||
             copies[d].events[at[d]].time_ns < copies[best].events[at[best]].time_ns))
            best = d;
    return best;
}

/* The history of [first, last] in bench/'s trace format (gpumem.h,
 * gpumem_history_trace): allocations and the frees asked for, merged by time;
 * frees of allocations made before the oldest event held are left out. */
static gpumem_status format_trace_text(gpumem_runtime *rt, int first, int last,
                                       struct out *o, struct reason *why)
{
    struct pool_copy *copies;
    gpumem_status s = copy_pools(rt, first, last, &copies, why);
    int n = last - first + 1;
    size_t *at = s == GPUMEM_OK ? calloc((size_t)n + 1, sizeof *at) : NULL;
    uint64_t *oldest = s == GPUMEM_OK ? calloc((size_t)n + 1, sizeof *oldest) : NULL;
    if (s == GPUMEM_OK && (!at || !oldest))
        s = gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                           "out of host memory for a trace");
    if (s != GPUMEM_OK)
        goto out;
    /* per device, the sequence number of the first allocation held: a free of an
     * earlier one has no `a` line before it (UINT64_MAX: none held) */
    uint64_t held = 0, dropped = 0;
    for (int d = 0; d < n; d++) {
        oldest[d] = UINT64_MAX;
        for (size_t i = 0; i < copies[d].nevents && oldest[d] == UINT64_MAX; i++)
            if (copies[d].events[i].action == HIST_ALLOC)
                oldest[d] = copies[d].events[i].seq;
        held += copies[d].nevents;
        dropped += copies[d].dropped;
    }
    out_printf(o,
               "# gpumem event history as an allocation trace (gpumem-replay TRACE): "
               "/device:GPU:%d to /device:GPU:%d, %" PRIu64 " events held, %" PRIu64
               " dropped before them\n",
               first, last, held, dropped);
    for (int d = 0; d < n; d++)
        if (!copies[d].recording)
            out_printf(o,
                       "# /device:GPU:%d: the history is off (gpumem_record_history, "
                       "GPUMEM_RECORD_HISTORY)\n",
                       first + d);
    uint64_t left_out = 0;
    for (int d; (d = next_event(copies, at, n)) >= 0; at[d]++) {
        const struct history_event *e = &copies[d].events[at[d]];
        int l = first + d;
        switch (e->action) {
        case HIST_ALLOC:
            out_printf(o, "a d%d.%" PRIu64 " %" PRIu64 "\n", l, e->seq, e->requested);
            break;
        case HIST_FREE_REQUESTED:
            if (e->seq >= oldest[d])
                out_printf(o, "f d%d.%" PRIu64 "\n", l, e->seq);
            else
                left_out++;
            break;
        case HIST_FREE_COMPLETED:
            break;
        case HIST_OOM:
            out_printf(o, "# d%d out of memory: %" PRIu64 " bytes asked for\n", l,
                       e->size);
            break;
        default:
            out_printf(o, "# d%d %s 0x%" PRIx64 " %" PRIu64 "\n", l,
                       gpumem__history_action_name(e->action), e->addr, e->size);
            break;
        }
    }
    if (left_out)
        out_printf(o,
                   "# %" PRIu64 " frees of allocations made before the oldest event "
                   "held are left out\n",
                   left_out);
    if (o->failed)
        s = gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                           "out of host memory for a trace's text");
out:
    free(at);
    free(oldest);
    free_copies(copies, first, last);
    return s;
}

gpumem_status gpumem_history_trace(gpumem_runtime *rt, int logical, char *buf,
                                   size_t capacity, size_t *length)
{
    return give_text(rt, "gpumem_history_trace", "trace", format_trace_text, logical, buf,
                     capacity, length);
}

gpumem_status gpumem_history_trace_file(gpumem_runtime *rt, int logical, const char *path)
{
    return file_text(rt, "gpumem_history_trace_file", format_trace_text, logical, path);
}
