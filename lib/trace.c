/* The event history's entry points (issue 24; docs/snapshot.md): turning it on
 * or off for every pool of a runtime (gpumem_record_history), and the history as
 * an allocation trace in bench/'s format (gpumem_history_trace, _file), merged by
 * time from each pool's copy. In the runtime module, not in history.c: the ring
 * sits on the base only, so that pools hold it, while these resolve a runtime and
 * walk its pools. */
#include "text.h"

#include <inttypes.h>
#include <stdlib.h>

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
                                       struct text *o, struct reason *why)
{
    struct pool_copy *copies;
    gpumem_status s = gpumem__text_copy_pools(rt, first, last, &copies, why);
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
    gpumem__text_printf(
        o,
        "# gpumem event history as an allocation trace (gpumem-replay TRACE): "
        "/device:GPU:%d to /device:GPU:%d, %" PRIu64 " events held, %" PRIu64
        " dropped before them\n",
        first, last, held, dropped);
    for (int d = 0; d < n; d++)
        if (!copies[d].recording)
            gpumem__text_printf(
                o,
                "# /device:GPU:%d: the history is off (gpumem_record_history, "
                "GPUMEM_RECORD_HISTORY)\n",
                first + d);
    uint64_t left_out = 0;
    for (int d; (d = next_event(copies, at, n)) >= 0; at[d]++) {
        const struct history_event *e = &copies[d].events[at[d]];
        int l = first + d;
        switch (e->action) {
        case HIST_ALLOC:
            gpumem__text_printf(o, "a d%d.%" PRIu64 " %" PRIu64 "\n", l, e->seq,
                                e->requested);
            break;
        case HIST_FREE_REQUESTED:
            if (e->seq >= oldest[d])
                gpumem__text_printf(o, "f d%d.%" PRIu64 "\n", l, e->seq);
            else
                left_out++;
            break;
        case HIST_FREE_COMPLETED:
            break;
        case HIST_OOM:
            gpumem__text_printf(o, "# d%d out of memory: %" PRIu64 " bytes asked for\n",
                                l, e->size);
            break;
        default:
            gpumem__text_printf(o, "# d%d %s 0x%" PRIx64 " %" PRIu64 "\n", l,
                                gpumem__history_action_name(e->action), e->addr, e->size);
            break;
        }
    }
    if (left_out)
        gpumem__text_printf(o,
                            "# %" PRIu64
                            " frees of allocations made before the oldest event "
                            "held are left out\n",
                            left_out);
    if (o->failed)
        s = gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY,
                           "out of host memory for a trace's text");
out:
    free(at);
    free(oldest);
    gpumem__text_free_copies(copies, first, last);
    return s;
}

gpumem_status gpumem_history_trace(gpumem_runtime *rt, int logical, char *buf,
                                   size_t capacity, size_t *length)
{
    return gpumem__text_give(rt, "gpumem_history_trace", "trace", format_trace_text,
                             logical, buf, capacity, length);
}

gpumem_status gpumem_history_trace_file(gpumem_runtime *rt, int logical, const char *path)
{
    return gpumem__text_file(rt, "gpumem_history_trace_file", format_trace_text, logical,
                             path);
}
