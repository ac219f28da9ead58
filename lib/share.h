/* The runtime's side of the ledger (lib/ledger.c, docs/ledger.md): one `struct
 * share` per physical GPU that has pools, holding that GPU's ledger open for the
 * runtime's life. It publishes each logical device's name, policy and limit,
 * gives the pools the hooks through which they publish their counters (relaxed
 * stores, no lock), admit their growth and ask other processes for memory, admits
 * the budgets of greedy and limited pools, and answers other processes' requests
 * on the ledger's give-back thread by releasing the unused memory of this GPU's
 * pools.
 *
 * Locks: none of its own. Admission takes the ledger's (a process-local leaf
 * and the file's OFD lock); the give-back callback runs on the ledger's thread
 * holding nothing and takes each pool's lock in turn, as gpumem_release_unused
 * does. Across fork(): a share is the runtime's, reached only through
 * resolve_call; gpumem__share_forget frees the child's copy only. */
#ifndef GPUMEM_SHARE_H
#define GPUMEM_SHARE_H

#include "ledger.h"
#include "pool.h"

struct share;

struct share_params {
    const struct options *opts;
    struct backend *backend;
    int device;           /* the backend's index of the GPU */
    const char *gpu;      /* "GPU:0", for messages */
    const char *uuid;     /* names the ledger; "" = none (no ledger) */
    uint64_t total_bytes; /* the GPU's memory */
};

/* Opens the GPU's ledger when the options want one. *out is NULL when they do
 * not, or when it cannot be used: that is logged once per file at WARNING, naming
 * the file, and the runtime goes on without it. Never fails otherwise. */
void gpumem__share_open(const struct share_params *p, struct share **out);
/* Stops the give-back thread and gives the slot up (NULL: nothing). Before the
 * pools are destroyed: the pools' usage pointers are into its mapping. */
void gpumem__share_close(struct share *sh);
/* In a forked child, of a share inherited from the parent: frees this process's
 * copy (the slot, the file and the thread are the parent's). */
void gpumem__share_forget(struct share *sh);

/* A GPU's plan: the budgets of its n logical devices from `avail`, the free
 * memory a budget "free at initialization" may count, and in want[j] what
 * logical device j admits whole (0 for a pool that admits what it grows by).
 * Called under the ledger's admission lock: it must not call gpumem. */
typedef void (*share_plan_fn)(void *ctx, uint64_t avail, uint64_t *want);

/* Plans the GPU's budgets and admits the whole ones in one step under the
 * ledger's admission lock (gpumem__ledger_admit_planned), so that processes that
 * start together are planned one after the other, each from what the others
 * left: `avail` is what may be admitted now (the smaller of what the other
 * processes leave of the GPU and the driver's free memory less what they
 * admitted and have not taken yet) plus the cache of their growth pools without
 * a limit, which they give back on request. When the whole budgets then pass
 * what may be admitted, this process asks for the difference
 * (GPUMEM_SHARE_WAIT_MS) and plans again from what is left, the cache still
 * held counting for the budgets that are not admitted whole only: the whole
 * budgets are what may be admitted, 0 when nothing may. admitted[j]: what
 * logical device j admitted. A ledger that cannot decide (its lock held too
 * long, a truncated file) is logged, and the plan made from the driver's free
 * memory alone, admitting nothing. Fails only when the driver's free memory
 * cannot be read (its status). pre: sh not NULL, n within
 * 1..GPUMEM_LEDGER_DEVICES. */
gpumem_status gpumem__share_plan(struct share *sh, unsigned n, share_plan_fn plan,
                                 void *ctx, uint64_t *admitted, struct reason *why);
/* Takes back what gpumem__share_plan admitted for `dev` (NULL: nothing). */
void gpumem__share_unadmit(struct share *sh, unsigned dev, uint64_t bytes);

/* Logical device `dev` (0-based on this GPU) will be a pool with this budget:
 * publishes its name, policy and limit (the budget; 0, none, for a growing pool
 * that does not admit whole) and fills *hooks for its pool_params.
 * `admit_whole`: a greedy or limited pool, whose budget gpumem__share_plan
 * admits whole; else a growth pool, which admits what it grows by. */
void gpumem__share_device(struct share *sh, unsigned dev, const char *name, bool growth,
                          uint64_t limit, bool admit_whole, struct pool_share *hooks);

/* Starts answering other processes' requests (unless GPUMEM_SHARE_GIVE=off, or
 * no pool of `pools` admits by growth) by releasing the unused memory of those
 * that do (this GPU's pools, n of them, logical device order; the array must
 * live until gpumem__share_close). A thread that cannot start is logged. */
void gpumem__share_give(struct share *sh, struct pool *const *pools, size_t n);

#endif /* GPUMEM_SHARE_H */
