/* The arena's reference model (arena_model.h). */
#include "arena_model.h"

#include <stdlib.h>
#include <string.h>

#define G ARENA_GRANULE

/* Whether memory at addr-1 and at addr may belong to one chunk. */
static bool model_joined(const struct model *m, uint64_t addr)
{
    const struct mregion *left = NULL, *right = NULL;
    for (size_t i = 0; i < m->nr; i++) {
        const struct mregion *r = &m->r[i];
        if (!r->present)
            continue;
        if (r->base < addr && addr < r->base + r->size)
            return true;
        if (r->base + r->size == addr)
            left = r;
        if (r->base == addr)
            right = r;
    }
    return left && right && left->contiguous && right->contiguous;
}

static void model_insert(struct model *m, size_t at, struct mchunk c)
{
    if (m->n == MODEL_MAX)
        abort();
    memmove(&m->c[at + 1], &m->c[at], (m->n - at) * sizeof c);
    m->c[at] = c;
    m->n++;
}

static void model_erase(struct model *m, size_t at)
{
    memmove(&m->c[at], &m->c[at + 1], (m->n - at - 1) * sizeof m->c[0]);
    m->n--;
}

/* Files free chunk c in its size's list, as the arena does: before the head when
 * below its address, else after the last of the next MODEL_LIST_SORTED - 1
 * entries that lie below it. Chunks of MODEL_LIST_BELOW and more are not filed. */
static bool same_list(struct mchunk a, struct mchunk b)
{
    return a.size == b.size && a.owner == b.owner;
}

static void model_file(struct model *m, struct mchunk c)
{
    if (c.size >= MODEL_LIST_BELOW)
        return;
    size_t at = 0, head = 0;
    while (head < m->norder && !same_list(m->order[head], c))
        head++;
    if (head < m->norder && m->order[head].addr < c.addr) {
        at = head + 1; /* after the head, or after the entry the walk stops at */
        for (unsigned k = 1; k < MODEL_LIST_SORTED; k++) {
            size_t next = at;
            while (next < m->norder && !same_list(m->order[next], c))
                next++;
            if (next == m->norder || m->order[next].addr > c.addr)
                break;
            at = next + 1;
        }
    }
    if (m->norder == MODEL_MAX)
        abort();
    memmove(&m->order[at + 1], &m->order[at], (m->norder - at) * sizeof c);
    m->order[at] = c;
    m->norder++;
}

/* Takes free chunk c out of its list (nothing when it is not filed). */
static void model_unfile(struct model *m, struct mchunk c)
{
    for (size_t i = 0; i < m->norder; i++) {
        if (m->order[i].addr == c.addr) {
            memmove(&m->order[i], &m->order[i + 1], (m->norder - i - 1) * sizeof c);
            m->norder--;
            return;
        }
    }
}

/* Whether a chunk freed as `owner`'s joins the free chunk x. */
static bool model_joins(const struct model *m, unsigned owner, struct mchunk x)
{
    uint64_t joins = owner ? m->joins[owner] : 1; /* owner 0 joins its own */
    return x.is_free && (joins >> x.owner & 1);
}

/* Merges chunk i, just freed or added as `owner`'s, with the free neighbours it
 * may join, and theirs while they join, and files the result, `owner`'s. Returns
 * its new index. */
static size_t model_coalesce(struct model *m, size_t i, unsigned owner)
{
    while (i + 1 < m->n && model_joins(m, owner, m->c[i + 1]) &&
           m->c[i].addr + m->c[i].size == m->c[i + 1].addr &&
           model_joined(m, m->c[i + 1].addr)) {
        model_unfile(m, m->c[i + 1]);
        m->c[i].size += m->c[i + 1].size;
        model_erase(m, i + 1);
    }
    while (i > 0 && model_joins(m, owner, m->c[i - 1]) &&
           m->c[i - 1].addr + m->c[i - 1].size == m->c[i].addr &&
           model_joined(m, m->c[i].addr)) {
        model_unfile(m, m->c[i - 1]);
        m->c[i - 1].size += m->c[i].size;
        model_erase(m, i);
        i--;
    }
    m->c[i].owner = owner;
    model_file(m, m->c[i]);
    return i;
}

void model_open_owner(struct model *m, unsigned owner)
{
    if (!m->joins[owner])
        m->joins[owner] = 1 | UINT64_C(1) << owner;
}

void model_set_joins(struct model *m, unsigned owner, uint64_t owners)
{
    if (owner == 0 || !m->joins[owner])
        return;
    for (unsigned o = 1; o < ARENA_OWNERS; o++)
        if (!m->joins[o])
            owners &= ~(UINT64_C(1) << o);
    m->joins[owner] = owners | 1 | UINT64_C(1) << owner;
}

/* The arena's choice among owner o's free chunks in v[0..n) for `need` bytes: the
 * best fit, and below MODEL_LIST_BELOW the head of its size's list (`order`);
 * SIZE_MAX if none fits. */
static size_t model_choose_of(const struct model *m, uint64_t need, unsigned owner)
{
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < m->n; i++)
        if (m->c[i].is_free && m->c[i].owner == owner && m->c[i].size >= need &&
            (best == SIZE_MAX || m->c[i].size < m->c[best].size))
            best = i;
    if (best != SIZE_MAX && m->c[best].size < MODEL_LIST_BELOW) {
        size_t h = 0; /* a tie goes to its list's head */
        while (!same_list(m->order[h], m->c[best]))
            h++;
        best = 0;
        while (m->c[best].addr != m->order[h].addr)
            best++;
    }
    return best;
}

uint64_t model_disown(struct model *m, unsigned owner)
{
    uint64_t bytes = 0;
    if (owner == 0 || !m->joins[owner])
        return 0;
    /* the arena takes the smallest first (its index's first class's minimum) */
    for (size_t i; (i = model_choose_of(m, 0, owner)) != SIZE_MAX;) {
        model_unfile(m, m->c[i]);
        bytes += m->c[i].size;
        model_coalesce(m, i, 0);
    }
    return bytes;
}

void model_close_owner(struct model *m, unsigned owner)
{
    if (owner == 0 || !m->joins[owner])
        return;
    model_disown(m, owner);
    m->joins[owner] = 0;
    for (unsigned o = 1; o < ARENA_OWNERS; o++)
        m->joins[o] &= ~(UINT64_C(1) << owner);
}

void model_add_region_owned(struct model *m, size_t ri, unsigned owner)
{
    struct mregion *r = &m->r[ri];
    r->present = true;
    size_t at = 0;
    while (at < m->n && m->c[at].addr < r->base)
        at++;
    model_insert(m, at, (struct mchunk){r->base, r->size, true, owner});
    model_coalesce(m, at, owner);
}

void model_add_region(struct model *m, size_t ri) { model_add_region_owned(m, ri, 0); }

/* The arena's choice among the chunks v[0..n) (in address order) for a request of
 * `need` bytes: the best fit, the smallest free chunk that holds it, the lowest
 * address among equals (the first found in address order). SIZE_MAX if nothing
 * fits. Chunks that are not free are skipped. */
size_t model_choose(const struct mchunk *v, size_t n, uint64_t need)
{
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < n; i++)
        if (v[i].is_free && v[i].size >= need &&
            (best == SIZE_MAX || v[i].size < v[best].size))
            best = i;
    return best;
}

int model_alloc_owned(struct model *m, uint64_t size, uint64_t owners, uint64_t *addr,
                      uint64_t *got)
{
    if (size > UINT64_MAX - (G - 1))
        return ARENA_NO_FIT;
    uint64_t need = size <= G ? G : (size + G - 1) / G * G;
    /* each open owner's choice, then the smallest, the lowest address on a tie */
    size_t best = SIZE_MAX;
    for (unsigned o = 0; o < ARENA_OWNERS; o++) {
        if (!((owners | 1) >> o & 1) || (o && !m->joins[o]))
            continue;
        size_t i = model_choose_of(m, need, o);
        if (i != SIZE_MAX &&
            (best == SIZE_MAX || m->c[i].size < m->c[best].size ||
             (m->c[i].size == m->c[best].size && m->c[i].addr < m->c[best].addr)))
            best = i;
    }
    if (best == SIZE_MAX)
        return ARENA_NO_FIT;
    model_unfile(m, m->c[best]);
    if (m->c[best].size > need) { /* the low end; the rest stays free above it */
        struct mchunk rest = {m->c[best].addr + need, m->c[best].size - need, true,
                              m->c[best].owner};
        model_insert(m, best + 1, rest);
        m->c[best].size = need;
        model_file(m, rest);
    }
    m->c[best].is_free = false;
    m->c[best].owner = 0;
    *addr = m->c[best].addr;
    *got = need;
    return ARENA_OK;
}

int model_alloc(struct model *m, uint64_t size, uint64_t *addr, uint64_t *got)
{
    return model_alloc_owned(m, size, 1, addr, got);
}

int model_free_owned(struct model *m, uint64_t addr, unsigned owner, uint64_t *size)
{
    if (owner >= ARENA_OWNERS || (owner && !m->joins[owner]))
        return ARENA_BAD_ADDRESS;
    for (size_t i = 0; i < m->n; i++) {
        if (m->c[i].addr == addr && !m->c[i].is_free) {
            *size = m->c[i].size;
            m->c[i].is_free = true;
            model_coalesce(m, i, owner);
            return ARENA_OK;
        }
    }
    return ARENA_BAD_ADDRESS;
}

int model_free(struct model *m, uint64_t addr, uint64_t *size)
{
    return model_free_owned(m, addr, 0, size);
}

/* Carves each present region lying wholly inside one free chunk; returns bytes. */
uint64_t model_release(struct model *m)
{
    uint64_t bytes = 0;
    for (size_t ri = 0; ri < m->nr; ri++) {
        struct mregion *r = &m->r[ri];
        if (!r->present)
            continue;
        uint64_t rb = r->base, re = r->base + r->size;
        for (size_t i = 0; i < m->n; i++) {
            struct mchunk c = m->c[i];
            if (!c.is_free || c.owner != 0 || c.addr > rb || c.addr + c.size < re)
                continue;
            struct mchunk lo = {c.addr, rb - c.addr, true, 0};
            struct mchunk hi = {re, c.addr + c.size - re, true, 0};
            model_unfile(m, c);
            model_erase(m, i);
            if (re < c.addr + c.size)
                model_insert(m, i, hi);
            if (c.addr < rb)
                model_insert(m, i, lo);
            /* the arena files the piece below the region, then the one above */
            if (c.addr < rb)
                model_file(m, lo);
            if (re < c.addr + c.size)
                model_file(m, hi);
            r->present = false;
            bytes += r->size;
            break;
        }
    }
    return bytes;
}

struct match {
    const struct model *m;
    size_t i;
    bool same;
};

static void match_segment(void *ctx, uint64_t base, uint64_t size)
{
    (void)ctx, (void)base, (void)size;
}

static void match_chunk(void *ctx, const struct arena_chunk_info *ci)
{
    struct match *x = ctx;
    if (x->i == x->m->n) {
        x->same = false;
        return;
    }
    const struct mchunk *c = &x->m->c[x->i++];
    if (c->addr != ci->addr || c->size != ci->size || c->is_free != ci->is_free ||
        c->owner != ci->owner)
        x->same = false;
}

uint64_t model_free_tail_owned(const struct model *m, uint64_t end, unsigned *owner)
{
    for (size_t i = 0; i < m->n; i++) {
        const struct mchunk *c = &m->c[i];
        if (c->addr + c->size == end) {
            if (!c->is_free || model_joined(m, end))
                return 0;
            if (owner)
                *owner = c->owner;
            return c->size;
        }
    }
    return 0;
}

uint64_t model_free_tail(const struct model *m, uint64_t end)
{
    return model_free_tail_owned(m, end, NULL);
}

bool model_matches(const struct model *m, const struct arena *a)
{
    struct match x = {m, 0, true};
    gpumem__arena_walk_user(a, match_segment, match_chunk, &x);
    return x.same && x.i == m->n;
}
