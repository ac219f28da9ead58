/* Snapshots: every segment and chunk of a runtime's pools as JSON in the structure
 * of PyTorch's torch.cuda.memory._snapshot(), which its memory viewer opens
 * (docs/snapshot.md). Each pool is copied under its own lock into plain arrays
 * (gpumem__pool_copy) and formatted here with no lock held, so a million chunks
 * hold a pool's lock only for the copy; pools are copied one after another, so a
 * snapshot of several logical devices is consistent per device, not across them.
 * device_traces holds one list per logical device: its event history (history.h),
 * copied with its chunks, so that the two agree. Each device also carries the
 * driver calls of its physical GPU (backend/driver_calls.h), read when it is
 * formatted. The text's buffer and the ways it is given are text.c's; the
 * history's own entry points are trace.c's. */
#include "snapshot.h"
#include "text.h"

#include "backend/driver_calls.h"
#include <inttypes.h>
#include <stdatomic.h>
#include <time.h>

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
static void format_frames(struct text *o, const char *tag)
{
    if (tag) {
        gpumem__text_printf(o, ",\"frames\":[{\"filename\":");
        gpumem__text_string(o, tag);
        gpumem__text_printf(o, ",\"line\":0,\"name\":\"gpumem_set_tag\"}]");
    } else {
        gpumem__text_printf(o, ",\"frames\":[]");
    }
}

static const char *const kind_names[] = {"greedy", "growth", "vmm"};

static void format_segment(struct text *o, int logical, int physical,
                           const struct pool_copy *c, const struct pool_segment *g)
{
    uint64_t allocated = 0, requested = 0;
    for (size_t i = g->first; i < g->first + g->count; i++)
        if (!c->chunks[i].is_free) {
            allocated += c->chunks[i].size;
            requested += c->chunks[i].requested;
        }
    /* PyTorch's small pool holds segments of 2 MiB */
    gpumem__text_printf(o,
                        "{\"device\":%d,\"physical_device\":%d,\"address\":%" PRIu64
                        ",\"total_size\":%" PRIu64 ",\"allocated_size\":%" PRIu64
                        ",\"active_size\":%" PRIu64 ",\"requested_size\":%" PRIu64
                        ",\"stream\":0,\"segment_type\":\"%s\",\"segment_pool_id\":[0,0],"
                        "\"is_expandable\":%s,\"kind\":\"%s\",\"frames\":[],\"blocks\":[",
                        logical, physical, g->base, g->size, allocated, allocated,
                        requested, g->size <= 2 * GPUMEM_MIB ? "small" : "large",
                        g->kind == POOL_REGION_VMM ? "true" : "false",
                        kind_names[g->kind]);
    for (size_t i = g->first; i < g->first + g->count; i++) {
        const struct pool_chunk *k = &c->chunks[i];
        gpumem__text_printf(o,
                            "%s{\"address\":%" PRIu64 ",\"size\":%" PRIu64
                            ",\"requested_size\":%" PRIu64
                            ",\"state\":\"%s\",\"seq\":%" PRIu64 ",\"stream\":%" PRIu64
                            ",\"tag\":",
                            i > g->first ? "," : "", k->addr, k->size, k->requested,
                            k->is_free ? "inactive" : "active_allocated", k->seq,
                            k->stream);
        gpumem__text_string(o, k->tag);
        if (k->unmapped) /* gpumem's own: given back, so not in reserved */
            gpumem__text_printf(o, ",\"unmapped_size\":%" PRIu64, k->unmapped);
        format_frames(o, k->tag);
        gpumem__text_printf(o, "}");
    }
    gpumem__text_printf(o, "]}");
}

/* A pool's event history as PyTorch's trace entries (the fields the viewer and
 * torch/cuda/_memory_viz.py read: action, addr, size, stream, time_us, frames;
 * device_free for an out of memory), oldest first. */
static void format_trace(struct text *o, const struct pool_copy *c, int64_t to_wall)
{
    for (size_t i = 0; i < c->nevents; i++) {
        const struct history_event *e = &c->events[i];
        const char *tag = gpumem__tag_text(e->tag);
        int64_t us = ((int64_t)e->time_ns + to_wall) / 1000;
        gpumem__text_printf(o,
                            "%s{\"action\":\"%s\",\"addr\":%" PRIu64 ",\"size\":%" PRIu64
                            ",\"stream\":%" PRIu64 ",\"time_us\":%" PRId64,
                            i ? "," : "", gpumem__history_action_name(e->action), e->addr,
                            e->size, e->stream, us);
        if (e->action == HIST_ALLOC)
            gpumem__text_printf(o, ",\"requested_size\":%" PRIu64, e->requested);
        if (e->action == HIST_OOM)
            gpumem__text_printf(o, ",\"device_free\":%" PRIu64, e->requested);
        if (e->action <= HIST_FREE_COMPLETED && e->seq)
            gpumem__text_printf(o, ",\"seq\":%" PRIu64, e->seq);
        gpumem__text_printf(o, ",\"tag\":");
        gpumem__text_string(o, tag);
        format_frames(o, tag);
        gpumem__text_printf(o, "}");
    }
}

/* The driver calls of GPU `physical` as an object keyed by entry point, those
 * made only: {"cuMemMap":{"calls":3,"ns":41000,"bytes":6291456},...}. */
static void format_driver_calls(struct text *o, gpumem_runtime *rt, int physical)
{
    struct driver_call_totals totals[DRIVER_CALL_COUNT];
    gpumem__runtime_driver_calls(rt, physical, totals);
    gpumem__text_printf(o, "{");
    bool comma = false;
    for (size_t k = 0; k < DRIVER_CALL_COUNT; k++) {
        if (!totals[k].calls)
            continue;
        gpumem__text_printf(o,
                            "%s\"%s\":{\"calls\":%" PRIu64 ",\"ns\":%" PRIu64
                            ",\"bytes\":%" PRIu64 "}",
                            comma ? "," : "", gpumem__driver_call_name(k),
                            totals[k].calls, totals[k].ns, totals[k].bytes);
        comma = true;
    }
    gpumem__text_printf(o, "}");
}

/* The JSON of logical devices [first, last] of a serving runtime into *o. */
static gpumem_status format_snapshot(gpumem_runtime *rt, int first, int last,
                                     struct text *o, struct reason *why)
{
    struct pool_copy *copies;
    gpumem_status s = gpumem__text_copy_pools(rt, first, last, &copies, why);
    if (s != GPUMEM_OK) {
        gpumem__text_free_copies(copies, first, last);
        return s;
    }
    gpumem__text_printf(o,
                        "{\"format\":\"gpumem-snapshot\",\"version\":1,\"segments\":[");
    bool comma = false;
    for (int l = first; l <= last; l++) {
        const struct pool_copy *c = &copies[l - first];
        for (size_t g = 0; g < c->nsegs; g++) {
            if (comma)
                gpumem__text_printf(o, ",");
            comma = true;
            format_segment(o, l, rt->logical[l].desc.physical_index, c, &c->segs[g]);
        }
    }
    /* one trace per logical device, indexed by "device" as the viewer reads them */
    gpumem__text_printf(o, "],\"device_traces\":[");
    int64_t to_wall = wall_offset_ns();
    for (int l = 0; l <= last; l++) {
        gpumem__text_printf(o, "%s[", l ? "," : "");
        if (l >= first)
            format_trace(o, &copies[l - first], to_wall);
        gpumem__text_printf(o, "]");
    }
    gpumem__text_printf(o, "],\"devices\":[");
    for (int l = first; l <= last; l++) {
        const struct pool_copy *c = &copies[l - first];
        const gpumem_memory_info *m = &c->info;
        gpumem__text_printf(o,
                            "%s{\"device\":%d,\"name\":\"%s\",\"physical_device\":%d,"
                            "\"budget\":%" PRIu64 ",\"budget_reason\":",
                            l > first ? "," : "", l, rt->logical[l].desc.name,
                            rt->logical[l].desc.physical_index, c->budget);
        gpumem__text_string(o, gpumem__pool_budget_reason(rt->logical[l].pool));
        gpumem__text_printf(o,
                            ",\"memory_growth\":%s,\"in_use\":%" PRIu64
                            ",\"peak_in_use\":%" PRIu64 ",\"reserved\":%" PRIu64
                            ",\"peak_reserved\":%" PRIu64 ",\"cached\":%" PRIu64
                            ",\"largest_free_block\":%" PRIu64 ",\"num_allocs\":%" PRIu64
                            ",\"num_frees\":%" PRIu64 ",\"num_ooms\":%" PRIu64
                            ",\"history_recording\":%s"
                            ",\"history_events\":%zu,\"history_dropped\":%" PRIu64
                            ",\"driver_calls\":",
                            c->growth ? "true" : "false", m->current_bytes, m->peak_bytes,
                            m->reserved_bytes, m->peak_reserved_bytes,
                            m->reserved_bytes - m->current_bytes, m->largest_free_block,
                            m->num_allocs, m->num_frees, m->num_ooms,
                            c->recording ? "true" : "false", c->nevents, c->dropped);
        format_driver_calls(o, rt, rt->logical[l].desc.physical_index);
        gpumem__text_printf(o, "}");
    }
    gpumem__text_printf(
        o,
        "],\"allocator_settings\":{\"allocator\":\"gpumem\",\"version\":%u,"
        "\"granule\":256}}",
        gpumem_version());
    if (o->failed)
        s = gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                           "out of host memory for a snapshot's text");
    gpumem__text_free_copies(copies, first, last);
    return s;
}

gpumem_status gpumem_snapshot_json(gpumem_runtime *rt, int logical, char *buf,
                                   size_t capacity, size_t *length)
{
    return gpumem__text_give(rt, "gpumem_snapshot_json", "snapshot", format_snapshot,
                             logical, buf, capacity, length);
}

gpumem_status gpumem_snapshot_file(gpumem_runtime *rt, int logical, const char *path)
{
    return gpumem__text_file(rt, "gpumem_snapshot_file", format_snapshot, logical, path);
}

void gpumem__snapshot_on_oom(gpumem_runtime *rt)
{
    static atomic_bool written;
    if (!rt->opts.oom_snapshot[0] || atomic_exchange(&written, true))
        return;
    struct reason why;
    if (gpumem__text_write(rt, format_snapshot, 0, (int)rt->num_logical - 1,
                           rt->opts.oom_snapshot, &why) != GPUMEM_OK)
        gpumem__log(&rt->opts, GPUMEM_LOG_ERROR,
                    "GPUMEM_OOM_SNAPSHOT: no snapshot after the out of memory: %s",
                    why.text);
    else
        gpumem__log(&rt->opts, GPUMEM_LOG_WARNING,
                    "out of memory: a snapshot of every logical device is in %s",
                    rt->opts.oom_snapshot);
}
