/* The event history's ring (history.h): one host allocation of cap events, written
 * round and round; copied out oldest first. No lock: its pool's lock guards it. */
#include "history.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const action_names[HIST_ACTIONS] = {
    [HIST_ALLOC] = "alloc",
    [HIST_FREE_REQUESTED] = "free_requested",
    [HIST_FREE_COMPLETED] = "free_completed",
    [HIST_SEGMENT_ALLOC] = "segment_alloc",
    [HIST_SEGMENT_FREE] = "segment_free",
    [HIST_SEGMENT_MAP] = "segment_map",
    [HIST_SEGMENT_UNMAP] = "segment_unmap",
    [HIST_OOM] = "oom",
};

const char *gpumem__history_action_name(uint32_t action)
{
    return action < HIST_ACTIONS ? action_names[action] : "unknown";
}

uint64_t gpumem__history_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

struct history *gpumem__history_create(uint64_t cap)
{
    if (cap == 0 || cap > GPUMEM_HISTORY_MAX)
        return NULL;
    struct history *h = malloc(sizeof *h + (size_t)cap * sizeof h->ev[0]);
    if (h) {
        h->cap = cap;
        h->total = 0;
    }
    return h;
}

uint64_t gpumem__history_count(const struct history *h)
{
    return h->total < h->cap ? h->total : h->cap;
}

uint64_t gpumem__history_dropped(const struct history *h)
{
    return h->total - gpumem__history_count(h);
}

void gpumem__history_copy(const struct history *h, struct history_event *out)
{
    uint64_t n = gpumem__history_count(h);
    uint64_t first = (h->total - n) % h->cap; /* the oldest held */
    uint64_t head = h->cap - first < n ? h->cap - first : n;
    memcpy(out, &h->ev[first], (size_t)head * sizeof *out);
    memcpy(out + head, &h->ev[0], (size_t)(n - head) * sizeof *out);
}

void gpumem__history_take(struct history *h, const struct history *old)
{
    uint64_t n = gpumem__history_count(old);
    uint64_t keep = n < h->cap ? n : h->cap; /* the newest */
    for (uint64_t i = old->total - keep; i < old->total; i++)
        h->ev[i - (old->total - keep)] = old->ev[i % old->cap];
    h->total = keep;
}

void gpumem__history_destroy(struct history *h) { free(h); }
