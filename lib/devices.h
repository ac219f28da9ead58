/* Devices: the arithmetic of budgets (headroom, fractions, limits, shares) and
 * the validation of logical-device configurations against a GPU's memory, over
 * one GPU's configuration (struct phys_config). Pure functions of their
 * arguments, below the runtime, which owns the tables and the locks. */
#ifndef GPUMEM_DEVICES_H
#define GPUMEM_DEVICES_H

#include "internal.h"

/* One physical GPU's configuration. */
struct phys_config {
    bool growth;
    double fraction;    /* of total memory; 0 = none */
    size_t num_logical; /* 0 = the default single logical device */
    gpumem_logical_device_config logical[GPUMEM_MAX_LOGICAL_PER_GPU];
};

/* ------------------------------------------------------------ devices.c -- */

/* The headroom TensorFlow leaves to the driver when no limit or fraction is set:
 * the override if set, else 225 MiB when less than 2 GiB is free, else 500, 1050,
 * 1536 or 1800 MiB for compute capability up to 6, 7, 8 and newer. None is kept
 * when it is not smaller than the free memory (gpumem__plan_budgets). */
uint64_t gpumem__wanted_headroom(const struct options *opts, uint64_t free_bytes,
                                 int cc_major);

/* The budgets of one GPU's logical devices (count = max(1, cfg->num_logical)),
 * each rounded down to 256 bytes, with a sentence on where each came from.
 * GPU budget: fraction x total capped by free memory when a fraction is set; else
 * free memory when every logical device has a limit; else free minus the
 * headroom (`headroom_bytes`, the wanted one: none is kept when it is not smaller
 * than the free memory, and the sentence then says so, or that it was 0).
 * Logical devices with a limit take min(limit, what is left) in order; those
 * without share the rest equally. */
#define BUDGET_REASON_LEN 256
void gpumem__plan_budgets(const struct phys_config *cfg, uint64_t total_bytes,
                          uint64_t free_bytes, uint64_t headroom_bytes, uint64_t *budgets,
                          char (*reasons)[BUDGET_REASON_LEN]);

/* Checks a logical configuration against the GPU's total memory: each limit and
 * their sum must not exceed it (the message gives both numbers). */
gpumem_status gpumem__check_logical_config(const char *api, int physical,
                                           uint64_t total_bytes,
                                           const gpumem_logical_device_config *configs,
                                           size_t n);

#endif /* GPUMEM_DEVICES_H */
