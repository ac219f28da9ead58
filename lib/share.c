/* The runtime's side of the ledger: a GPU's ledger opened for the runtime's
 * life, the hooks its pools publish, admit and ask through, budgets admitted
 * whole, and the give-back callback (share.h says what and which locks). A
 * ledger that cannot be used never stops the process: it is named once in the
 * log and the runtime goes on as with GPUMEM_LEDGER=off. */
#include "share.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Who is after a pool's lock on the share's behalf (share_dev.state). */
enum {
    POOL_IDLE,   /* neither */
    POOL_ASKING, /* a thread that holds it asks the other processes (hook_ask) */
    POOL_GIVING, /* the give-back thread releases the pool, or waits for its lock */
};

struct share_dev {
    struct share *sh;
    unsigned dev;
    bool whole; /* its budget admitted whole: its memory is not given back */
    /* POOL_*: set by compare-and-swap from POOL_IDLE, so that an asker and the
     * give-back thread each know whether the other is after the same lock */
    _Atomic unsigned state;
};

struct share {
    struct ledger *ledger;
    struct share_params p;
    char gpu[32];
    struct pool *const *pools; /* this GPU's, for the give-back callback */
    size_t num_pools;
    struct share_dev devs[GPUMEM_LEDGER_DEVICES]; /* the hooks' contexts */
};

/* ------------------------------------------------------------ warnings -- */

/* The files already warned about in this process (a hash of the path and the
 * failure), so that each runtime's initialization does not warn again. Lock-free:
 * a lost race only warns twice. */
static _Atomic uint64_t warned[32];

static bool first_warning(const char *path, const char *text)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *s = path; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    for (const char *s = text; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    h |= 1; /* 0 marks a free entry */
    for (size_t i = 0; i < sizeof warned / sizeof warned[0]; i++) {
        uint64_t seen = atomic_load_explicit(&warned[i], memory_order_relaxed);
        if (seen == h)
            return false;
        if (seen == 0 && atomic_compare_exchange_strong(&warned[i], &seen, h))
            return true;
        if (seen == h)
            return false;
    }
    return true; /* the table is full: warn */
}

/* ----------------------------------------------------------- open/close -- */

void gpumem__share_open(const struct share_params *p, struct share **out)
{
    *out = NULL;
    if (p->opts->ledger_off || !p->uuid || !p->uuid[0])
        return;
    struct ledger_params lp = {
        .dir = p->opts->ledger_dir[0] ? p->opts->ledger_dir : NULL,
        .uuid = p->uuid,
        .total_bytes = p->total_bytes,
    };
    struct reason why;
    struct ledger *l = NULL;
    gpumem_status s = gpumem__ledger_open(&lp, &l, &why);
    struct share *sh = s == GPUMEM_OK ? calloc(1, sizeof *sh) : NULL;
    if (s == GPUMEM_OK && !sh) {
        gpumem__ledger_close(l);
        snprintf(why.text, sizeof why.text, "out of host memory");
    }
    if (!sh) {
        char path[1200];
        gpumem__ledger_file_name(lp.dir, p->uuid, (unsigned long)geteuid(), path,
                                 sizeof path);
        if (first_warning(path, why.text))
            gpumem__log(p->opts, GPUMEM_LOG_WARNING,
                        "gpumem: %s: going on without the ledger %s shared with the "
                        "machine's other gpumem processes: %s",
                        p->gpu, path, why.text);
        return;
    }
    sh->ledger = l;
    sh->p = *p;
    snprintf(sh->gpu, sizeof sh->gpu, "%s", p->gpu);
    sh->p.gpu = sh->gpu;
    sh->p.uuid = NULL; /* the caller's; the ledger has its own copy */
    for (unsigned d = 0; d < GPUMEM_LEDGER_DEVICES; d++)
        sh->devs[d] = (struct share_dev){sh, d, true, POOL_IDLE};
    gpumem__log(p->opts, GPUMEM_LOG_INFO, "gpumem: %s: ledger %s, slot %d", sh->gpu,
                gpumem__ledger_path(l), gpumem__ledger_slot(l));
    *out = sh;
}

void gpumem__share_close(struct share *sh)
{
    if (!sh)
        return;
    gpumem__ledger_close(sh->ledger); /* stops the give-back thread first */
    free(sh);
}

void gpumem__share_forget(struct share *sh)
{
    if (!sh)
        return;
    gpumem__ledger_close(sh->ledger); /* in a child: this process's copy only */
    free(sh);
}

/* ------------------------------------------------------------- reading -- */

/* The ledger's live processes (self included) into a new array; NULL when it
 * cannot be read or host memory is short (the caller then goes without). */
static struct ledger_entry *read_entries(struct share *sh, size_t *n)
{
    size_t cap = gpumem__ledger_slot_count(sh->ledger);
    struct ledger_entry *e = malloc(cap * sizeof *e);
    if (e && gpumem__ledger_read(sh->ledger, e, cap, n, NULL) != GPUMEM_OK) {
        free(e);
        e = NULL;
    }
    if (e && *n > cap)
        *n = cap;
    return e;
}

/* What process e could give back on request so that it no longer holds it:
 * the cache (reserved - in use) of its growing pools without a limit, which
 * admit what they grow by and unadmit what they give back (limit 0 in the
 * ledger, gpumem__share_device). A budget admitted whole stays held after its
 * memory goes back to the driver: nothing of it counts. */
static uint64_t reclaimable(const struct ledger_entry *e)
{
    uint64_t sum = 0;
    if (!e->gives)
        return 0;
    for (unsigned d = 0; d < e->num_devices; d++) {
        const struct ledger_device_figures *f = &e->dev[d];
        if (f->policy != LEDGER_POLICY_GROWTH || f->limit != 0)
            continue;
        sum = gpumem__sat_add_u64(sum, gpumem__sat_sub_u64(f->reserved, f->in_use));
    }
    return sum;
}

/* What the other processes cache and would give back on request (reclaimable),
 * as the ledger shows it now; 0 when it cannot be read. */
static uint64_t others_cache(struct share *sh)
{
    size_t n = 0;
    struct ledger_entry *e = read_entries(sh, &n);
    uint64_t give = 0;
    for (size_t i = 0; e && i < n; i++)
        if (!e[i].self)
            give = gpumem__sat_add_u64(give, reclaimable(&e[i]));
    free(e);
    return give;
}

/* pool_share.describe: the other processes on this GPU, for an out-of-memory
 * message ("; other gpumem processes on GPU:0: pid 12 (python) holds 4.00 GiB,
 * 1.00 GiB of it cached, ..."). */
static void share_describe(void *ctx, char *buf, size_t size)
{
    struct share_dev *sd = ctx;
    struct share *sh = sd->sh;
    char b1[GPUMEM_BYTES_BUF], b2[GPUMEM_BYTES_BUF];
    size_t n = 0, at = 0, shown = 0;
    buf[0] = '\0';
    struct ledger_entry *e = read_entries(sh, &n);
    if (!e)
        return;
    for (size_t i = 0; i < n && at < size; i++) {
        if (e[i].self)
            continue;
        uint64_t cached = 0;
        for (unsigned d = 0; d < e[i].num_devices; d++)
            cached = gpumem__sat_add_u64(cached, gpumem__sat_sub_u64(e[i].dev[d].reserved,
                                                                     e[i].dev[d].in_use));
        int k = snprintf(buf + at, size - at, "%s pid %lld (%s) holds %s, caches %s",
                         shown ? "," : "; other gpumem processes on this GPU:",
                         (long long)e[i].pid, e[i].comm,
                         gpumem__format_bytes(e[i].held, b1, sizeof b1),
                         gpumem__format_bytes(cached, b2, sizeof b2));
        if (k < 0)
            break;
        at += (size_t)k;
        shown++;
    }
    if (shown == 0)
        snprintf(buf, size, "; no other gpumem process on this GPU");
    free(e);
}

/* ----------------------------------------------------------- admission -- */

static gpumem_status free_query(void *ctx, uint64_t *free_bytes, struct reason *why)
{
    struct share *sh = ctx;
    uint64_t total;
    return sh->p.backend->ops->mem_info(sh->p.backend, sh->p.device, free_bytes, &total,
                                        why);
}

/* Asks the other processes for `bytes` and waits for them, at most
 * GPUMEM_SHARE_WAIT_MS; true when one of them answered (a retry may do better).
 * `answering`: this process's give-back thread waits for a lock the caller
 * holds, so the caller answers the others' requests meanwhile
 * (gpumem__ledger_request_answering). */
static bool share_ask(struct share *sh, uint64_t bytes, bool answering)
{
    char buf[GPUMEM_BYTES_BUF];
    struct ledger_request_result r;
    struct reason why;
    unsigned wait_ms = sh->p.opts->share_wait_ms;
    gpumem_status s =
        answering ? gpumem__ledger_request_answering(sh->ledger, bytes, wait_ms, &r, &why)
                  : gpumem__ledger_request(sh->ledger, bytes, wait_ms, &r, &why);
    if (s != GPUMEM_OK) {
        gpumem__log(sh->p.opts, GPUMEM_LOG_WARNING, "gpumem: %s: asking for memory: %s",
                    sh->gpu, why.text);
        return false;
    }
    gpumem__log(sh->p.opts, GPUMEM_LOG_INFO,
                "gpumem: %s: asked the other processes for %s: %u of %u answered in %llu "
                "ms",
                sh->gpu, gpumem__format_bytes(bytes, buf, sizeof buf), r.answered,
                r.givers, (unsigned long long)r.waited_ms);
    return r.answered > 0;
}

/* A growth admission (hook_admit). A ledger that cannot decide (its lock held
 * too long, a truncated file, a failed query) lets it pass: the driver will
 * decide. */
static gpumem_status admit(struct share *sh, unsigned dev, uint64_t bytes,
                           struct reason *why)
{
    struct ledger_free_query q = {free_query, sh};
    gpumem_status s = gpumem__ledger_admit(sh->ledger, dev, bytes, &q, why);
    if (s != GPUMEM_OK && s != GPUMEM_ERR_OUT_OF_MEMORY) {
        gpumem__log(sh->p.opts, GPUMEM_LOG_WARNING,
                    "gpumem: %s: admission without the ledger: %s", sh->gpu, why->text);
        s = GPUMEM_OK;
    }
    return s;
}

/* gpumem__share_plan's step, under the ledger's admission lock: the caller's
 * plan from the room, plus the others' cache while it may still be asked for;
 * once it may not (`fit`), a plan whose whole budgets pass the room is made from
 * the room alone, which such a plan never passes. */
struct plan_step {
    share_plan_fn plan;
    void *ctx;
    unsigned n;
    uint64_t cache; /* the others' cache, counted as free */
    bool fit;       /* the admission must not be refused */
    uint64_t lacks; /* what the plan wanted beyond the room */
};

static void plan_step(void *ctx, uint64_t room, uint64_t *want)
{
    struct plan_step *ps = ctx;
    uint64_t sum = 0;
    ps->plan(ps->ctx, gpumem__sat_add_u64(room, ps->cache), want);
    for (unsigned d = 0; d < ps->n; d++)
        sum = gpumem__sat_add_u64(sum, want[d]);
    ps->lacks = gpumem__sat_sub_u64(sum, room);
    if (ps->fit && ps->lacks > 0)
        ps->plan(ps->ctx, room, want);
}

gpumem_status gpumem__share_plan(struct share *sh, unsigned n, share_plan_fn plan,
                                 void *ctx, uint64_t *admitted, struct reason *why)
{
    struct ledger_free_query q = {free_query, sh};
    struct plan_step ps = {plan, ctx, n, others_cache(sh), false, 0};
    ps.fit = ps.cache == 0;
    gpumem_status s =
        gpumem__ledger_admit_planned(sh->ledger, n, &q, plan_step, &ps, admitted, why);
    if (s == GPUMEM_ERR_OUT_OF_MEMORY && !ps.fit) {
        /* the plan counted what the others cache: ask for it, then plan again
         * from what they left */
        share_ask(sh, ps.lacks, false); /* holds no pool's lock */
        ps.cache = others_cache(sh);
        ps.fit = true;
        s = gpumem__ledger_admit_planned(sh->ledger, n, &q, plan_step, &ps, admitted,
                                         why);
    }
    if (s == GPUMEM_OK || s == GPUMEM_ERR_OUT_OF_MEMORY)
        return s;
    /* the ledger cannot decide (its lock held too long, a truncated file): the
     * plan is made from the driver's free memory, and the driver will decide */
    struct reason ledger_why = *why;
    uint64_t free_bytes;
    if ((s = free_query(sh, &free_bytes, why)) != GPUMEM_OK)
        return s;
    gpumem__log(sh->p.opts, GPUMEM_LOG_WARNING,
                "gpumem: %s: planning without the ledger: %s", sh->gpu, ledger_why.text);
    uint64_t want[GPUMEM_LEDGER_DEVICES];
    plan(ctx, free_bytes, want);
    memset(admitted, 0, n * sizeof *admitted);
    return GPUMEM_OK;
}

void gpumem__share_unadmit(struct share *sh, unsigned dev, uint64_t bytes)
{
    if (sh)
        gpumem__ledger_unadmit(sh->ledger, dev, bytes);
}

/* The pool hooks (pool.h, struct pool_share). A refused growth admission does not
 * ask: the pool first gives its own free regions back, then asks once (hook_ask)
 * for what it still lacks, whether the ledger or the driver refused. */
static gpumem_status hook_admit(void *ctx, uint64_t bytes, struct reason *why)
{
    struct share_dev *sd = ctx;
    return admit(sd->sh, sd->dev, bytes, why);
}

static void hook_unadmit(void *ctx, uint64_t bytes)
{
    struct share_dev *sd = ctx;
    gpumem__ledger_unadmit(sd->sh->ledger, sd->dev, bytes);
}

/* With the pool's lock held (pool.h). The give-back thread needs that lock to
 * release the pool, so a thread that waited for it while this one waits for
 * the other processes would hold up their requests, and two processes short at
 * the same moment would each wait out GPUMEM_SHARE_WAIT_MS for the other. So
 * the pool is marked asking first: the give-back thread then passes it by (it
 * has just given its free regions back before asking: nothing to give). When
 * the give-back thread marked it first, it waits for this lock, and this thread
 * answers the others' requests in its stead while it waits. */
static bool hook_ask(void *ctx, uint64_t bytes)
{
    struct share_dev *sd = ctx;
    unsigned idle = POOL_IDLE;
    bool giver_waits = !atomic_compare_exchange_strong(&sd->state, &idle, POOL_ASKING);
    bool r = share_ask(sd->sh, bytes, giver_waits);
    if (!giver_waits)
        atomic_store(&sd->state, POOL_IDLE);
    return r;
}

void gpumem__share_device(struct share *sh, unsigned dev, const char *name, bool growth,
                          uint64_t limit, bool admit_whole, struct pool_share *hooks)
{
    memset(hooks, 0, sizeof *hooks);
    if (!sh || dev >= GPUMEM_LEDGER_DEVICES)
        return;
    /* a growing pool without a limit shows none (its budget is only what was
     * free at initialization), which also tells other processes that its cache
     * is theirs on request (reclaimable) */
    gpumem__ledger_set_device(sh->ledger, dev,
                              growth ? LEDGER_POLICY_GROWTH : LEDGER_POLICY_GREEDY,
                              admit_whole ? limit : 0);
    gpumem__ledger_set_name(sh->ledger, dev, name);
    sh->devs[dev].whole = admit_whole;
    hooks->ctx = &sh->devs[dev];
    hooks->usage = gpumem__ledger_usage(sh->ledger, dev);
    hooks->taking = gpumem__ledger_taking(sh->ledger);
    hooks->ask = hook_ask;
    hooks->describe = share_describe;
    if (!admit_whole) {
        hooks->admit = hook_admit;
        hooks->unadmit = hook_unadmit;
    }
}

/* ------------------------------------------------------------ give-back -- */

/* On the ledger's give-back thread, holding no lock: what gpumem_release_unused
 * does, for each pool of this GPU that admits what it grows by (each takes its
 * own lock; live allocations are never touched). A pool whose budget was
 * admitted whole keeps its memory: that budget stays held in the ledger, so
 * giving the memory to the driver would let no gpumem process admit it, and
 * would let one that took it from the driver outside its admission break the
 * reservation. */
static void give_back(void *ctx, uint64_t bytes)
{
    struct share *sh = ctx;
    char buf[GPUMEM_BYTES_BUF], got[GPUMEM_BYTES_BUF];
    uint64_t total = 0;
    for (size_t i = 0; i < sh->num_pools && i < GPUMEM_LEDGER_DEVICES; i++) {
        uint64_t released = 0;
        unsigned idle = POOL_IDLE;
        /* a pool that asks is passed by (hook_ask) */
        if (sh->devs[i].whole ||
            !atomic_compare_exchange_strong(&sh->devs[i].state, &idle, POOL_GIVING))
            continue;
        struct reason why;
        if (gpumem__pool_release_unused(sh->pools[i], &released, &why) != GPUMEM_OK)
            gpumem__log(sh->p.opts, GPUMEM_LOG_WARNING,
                        "gpumem: %s: giving memory back: %s", sh->gpu, why.text);
        atomic_store(&sh->devs[i].state, POOL_IDLE);
        total += released;
    }
    gpumem__log(sh->p.opts, GPUMEM_LOG_INFO,
                "gpumem: %s: another process asked for %s; gave back %s", sh->gpu,
                gpumem__format_bytes(bytes, buf, sizeof buf),
                gpumem__format_bytes(total, got, sizeof got));
}

void gpumem__share_give(struct share *sh, struct pool *const *pools, size_t n)
{
    size_t givers = 0;
    for (size_t i = 0; sh && i < n && i < GPUMEM_LEDGER_DEVICES; i++)
        givers += !sh->devs[i].whole;
    /* nothing to give: no thread, and requesters do not wait for this process */
    if (!sh || sh->p.opts->share_give_off || givers == 0)
        return;
    sh->pools = pools;
    sh->num_pools = n;
    struct reason why;
    if (gpumem__ledger_give(sh->ledger, give_back, sh, &why) != GPUMEM_OK)
        gpumem__log(sh->p.opts, GPUMEM_LOG_WARNING,
                    "gpumem: %s: this process will not give memory back on request: %s",
                    sh->gpu, why.text);
}
