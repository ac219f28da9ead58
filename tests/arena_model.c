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
static void model_file(struct model *m, struct mchunk c)
{
    if (c.size >= MODEL_LIST_BELOW)
        return;
    size_t at = 0, head = 0;
    while (head < m->norder && m->order[head].size != c.size)
        head++;
    if (head < m->norder && m->order[head].addr < c.addr) {
        at = head + 1; /* after the head, or after the entry the walk stops at */
        for (unsigned k = 1; k < MODEL_LIST_SORTED; k++) {
            size_t next = at;
            while (next < m->norder && m->order[next].size != c.size)
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

/* Merges chunk i, just freed or added, with free neighbours it may join, and files
 * the result. Returns its new index. */
static size_t model_coalesce(struct model *m, size_t i)
{
    if (i + 1 < m->n && m->c[i + 1].is_free &&
        m->c[i].addr + m->c[i].size == m->c[i + 1].addr &&
        model_joined(m, m->c[i + 1].addr)) {
        model_unfile(m, m->c[i + 1]);
        m->c[i].size += m->c[i + 1].size;
        model_erase(m, i + 1);
    }
    if (i > 0 && m->c[i - 1].is_free &&
        m->c[i - 1].addr + m->c[i - 1].size == m->c[i].addr &&
        model_joined(m, m->c[i].addr)) {
        model_unfile(m, m->c[i - 1]);
        m->c[i - 1].size += m->c[i].size;
        model_erase(m, i);
        i--;
    }
    model_file(m, m->c[i]);
    return i;
}

void model_add_region(struct model *m, size_t ri)
{
    struct mregion *r = &m->r[ri];
    r->present = true;
    size_t at = 0;
    while (at < m->n && m->c[at].addr < r->base)
        at++;
    model_insert(m, at, (struct mchunk){r->base, r->size, true});
    model_coalesce(m, at);
}

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

int model_alloc(struct model *m, uint64_t size, uint64_t *addr, uint64_t *got)
{
    if (size > UINT64_MAX - (G - 1))
        return ARENA_NO_FIT;
    uint64_t need = size <= G ? G : (size + G - 1) / G * G;
    size_t best = model_choose(m->c, m->n, need);
    if (best == SIZE_MAX)
        return ARENA_NO_FIT;
    if (m->c[best].size < MODEL_LIST_BELOW) { /* a tie goes to its list's head */
        size_t h = 0;
        while (m->order[h].size != m->c[best].size)
            h++;
        best = 0;
        while (m->c[best].addr != m->order[h].addr)
            best++;
    }
    model_unfile(m, m->c[best]);
    if (m->c[best].size > need) { /* the low end; the rest stays free above it */
        struct mchunk rest = {m->c[best].addr + need, m->c[best].size - need, true};
        model_insert(m, best + 1, rest);
        m->c[best].size = need;
        model_file(m, rest);
    }
    m->c[best].is_free = false;
    *addr = m->c[best].addr;
    *got = need;
    return ARENA_OK;
}

int model_free(struct model *m, uint64_t addr, uint64_t *size)
{
    for (size_t i = 0; i < m->n; i++) {
        if (m->c[i].addr == addr && !m->c[i].is_free) {
            *size = m->c[i].size;
            m->c[i].is_free = true;
            model_coalesce(m, i);
            return ARENA_OK;
        }
    }
    return ARENA_BAD_ADDRESS;
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
            if (!c.is_free || c.addr > rb || c.addr + c.size < re)
                continue;
            struct mchunk lo = {c.addr, rb - c.addr, true};
            struct mchunk hi = {re, c.addr + c.size - re, true};
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

static void match_visit(void *ctx, uint64_t addr, uint64_t size, bool is_free)
{
    struct match *x = ctx;
    if (x->i == x->m->n) {
        x->same = false;
        return;
    }
    const struct mchunk *c = &x->m->c[x->i++];
    if (c->addr != addr || c->size != size || c->is_free != is_free)
        x->same = false;
}

uint64_t model_free_tail(const struct model *m, uint64_t end)
{
    for (size_t i = 0; i < m->n; i++) {
        const struct mchunk *c = &m->c[i];
        if (c->addr + c->size == end)
            return c->is_free && !model_joined(m, end) ? c->size : 0;
    }
    return 0;
}

bool model_matches(const struct model *m, const struct arena *a)
{
    struct match x = {m, 0, true};
    gpumem__arena_walk(a, match_visit, &x);
    return x.same && x.i == m->n;
}
