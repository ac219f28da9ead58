/* Devices: the arithmetic of budgets (headroom, fractions, limits, shares) and
 * the validation of logical-device configurations against a GPU's memory. Pure
 * functions of their arguments; the runtime owns the tables and the locks. */
#include "devices.h"

#include <stdio.h>
#include <string.h>

uint64_t gpumem__wanted_headroom(const struct options *opts, uint64_t free_bytes,
                                 int cc_major)
{
    uint64_t headroom;
    if (opts->min_system_memory_set)
        headroom = opts->min_system_memory_bytes;
    else if (free_bytes < 2 * GPUMEM_GIB)
        headroom = 225 * GPUMEM_MIB;
    else if (cc_major <= 6)
        headroom = 500 * GPUMEM_MIB;
    else if (cc_major <= 7)
        headroom = 1050 * GPUMEM_MIB;
    else if (cc_major <= 8)
        headroom = 1536 * GPUMEM_MIB;
    else
        headroom = 1800 * GPUMEM_MIB;
    return headroom;
}

void gpumem__plan_budgets(const struct phys_config *cfg, uint64_t total_bytes,
                          uint64_t free_bytes, uint64_t headroom_bytes, uint64_t *budgets,
                          char (*reasons)[BUDGET_REASON_LEN])
{
    char a[GPUMEM_BYTES_BUF], b[GPUMEM_BYTES_BUF];
    size_t n = cfg->num_logical ? cfg->num_logical : 1;
    size_t uncapped = 0;
    for (size_t i = 0; i < cfg->num_logical; i++)
        uncapped += cfg->logical[i].memory_limit_bytes == 0;
    if (cfg->num_logical == 0)
        uncapped = 1;

    /* What the limits are carved from, in order and exactly: a fraction of the
     * total memory (capped by what is free), else what is free. The headroom for
     * the driver is kept back only from what the logical devices without a limit
     * share: a limit is the user's own account of what the process may take. */
    uint64_t gpu;
    char gpu_reason[128];
    if (cfg->fraction > 0) {
        uint64_t by_fraction = (uint64_t)(cfg->fraction * (double)total_bytes);
        gpu = gpumem__min_u64(by_fraction, free_bytes);
        snprintf(gpu_reason, sizeof gpu_reason, "fraction %g of %s%s", cfg->fraction,
                 gpumem__format_bytes(total_bytes, a, sizeof a),
                 by_fraction > free_bytes ? ", capped by the free memory" : "");
    } else {
        gpu = free_bytes;
        snprintf(gpu_reason, sizeof gpu_reason, "%s free at initialization",
                 gpumem__format_bytes(free_bytes, a, sizeof a));
    }

    uint64_t left = gpu;
    for (size_t i = 0; i < cfg->num_logical; i++) {
        uint64_t limit = cfg->logical[i].memory_limit_bytes;
        if (limit == 0)
            continue;
        budgets[i] = gpumem__align_down(gpumem__min_u64(limit, left), 256);
        left -= budgets[i];
        if (limit > budgets[i] + 255) /* less than the limit rounded to granules */
            snprintf(reasons[i], BUDGET_REASON_LEN, "memory limit %s, capped by %s",
                     gpumem__format_bytes(limit, a, sizeof a), gpu_reason);
        else if (limit > budgets[i])
            snprintf(reasons[i], BUDGET_REASON_LEN,
                     "memory limit %s, rounded down to whole 256-byte granules",
                     gpumem__format_bytes(limit, a, sizeof a));
        else
            snprintf(reasons[i], BUDGET_REASON_LEN, "memory limit %s",
                     gpumem__format_bytes(limit, a, sizeof a));
    }
    if (uncapped == 0)
        return;
    if (cfg->fraction == 0) { /* a fraction is applied exactly, without a headroom */
        size_t end = strlen(gpu_reason);
        gpumem__format_bytes(headroom_bytes, b, sizeof b);
        if (headroom_bytes == 0)
            snprintf(gpu_reason + end, sizeof gpu_reason - end,
                     ", no headroom for the driver (the minimum system memory is 0)");
        else if (headroom_bytes >= free_bytes) /* TensorFlow keeps none then */
            snprintf(gpu_reason + end, sizeof gpu_reason - end,
                     ", no headroom for the driver (the %s wanted is not less than "
                     "the free memory)",
                     b);
        else {
            snprintf(gpu_reason + end, sizeof gpu_reason - end,
                     " minus %s headroom for the driver", b);
            left = left > headroom_bytes ? left - headroom_bytes : 0;
        }
    }
    uint64_t share = gpumem__align_down(left / uncapped, 256);
    for (size_t i = 0; i < n; i++) {
        if (cfg->num_logical && cfg->logical[i].memory_limit_bytes != 0)
            continue;
        budgets[i] = share;
        if (uncapped == 1 && cfg->num_logical <= 1)
            snprintf(reasons[i], BUDGET_REASON_LEN, "%s", gpu_reason);
        else
            snprintf(reasons[i], BUDGET_REASON_LEN,
                     "an equal share of what the limited logical devices leave of %s",
                     gpu_reason);
    }
}

gpumem_status gpumem__check_logical_config(const char *api, int physical,
                                           uint64_t total_bytes,
                                           const gpumem_logical_device_config *configs,
                                           size_t n)
{
    char a[GPUMEM_BYTES_BUF], b[GPUMEM_BYTES_BUF];
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t limit = configs[i].memory_limit_bytes;
        if (limit > 0 && limit < 256)
            return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                                "%s(GPU:%d): memory limit %llu bytes of logical device "
                                "%zu is less than one 256-byte granule, which no "
                                "allocation could fit (0 means no limit)",
                                api, physical, (unsigned long long)limit, i);
        if (limit > total_bytes)
            return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                                "%s(GPU:%d): memory limit %llu bytes (%s) of logical "
                                "device %zu exceeds the "
                                "GPU's total memory of %llu bytes (%s)",
                                api, physical, (unsigned long long)limit,
                                gpumem__format_bytes(limit, a, sizeof a), i,
                                (unsigned long long)total_bytes,
                                gpumem__format_bytes(total_bytes, b, sizeof b));
        if (!gpumem__add_u64(sum, limit, &sum))
            sum = UINT64_MAX;
    }
    if (sum > total_bytes)
        return gpumem__fail(
            GPUMEM_ERR_INVALID_ARGUMENT,
            "%s(GPU:%d): the memory limits add up to %llu bytes (%s), more than "
            "the GPU's total memory of %llu bytes (%s)",
            api, physical, (unsigned long long)sum,
            gpumem__format_bytes(sum, a, sizeof a), (unsigned long long)total_bytes,
            gpumem__format_bytes(total_bytes, b, sizeof b));
    return GPUMEM_OK;
}
