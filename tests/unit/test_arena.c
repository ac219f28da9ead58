/* The arena alone: exact best fit and its ties, split, coalescing (within and across
 * contiguous regions, never across other boundaries), bad regions and frees, release
 * of free regions, stats, host OOM at every allocation, a randomized comparison with
 * an exact reference model, a larger stress run, a million chunks against the clock,
 * and metadata that does not grow with the bytes of a region.
 * gpumem__arena_check runs after every step. */
#include "harness.h"

#include "arena.h"
#include "arena_model.h"
#include "platform.h"

#include <stdlib.h>
#include <time.h>

#define G   ARENA_GRANULE
#define MIB GPUMEM_MIB

/* Asserts the arena's invariants and prints what broke. */
#define CHECK_ARENA(a)                                                                   \
    do {                                                                                 \
        char m_[512];                                                                    \
        if (!gpumem__arena_check((a), m_, sizeof m_))                                    \
            HARNESS_FAIL("arena_check: %s", m_);                                         \
    } while (0)

/* ---------------------------------------------------------------- helpers -- */

struct rec {
    uint64_t addr, size;
    bool is_free;
};

struct layout {
    struct rec *v;
    size_t n, cap;
};

static void layout_visit(void *ctx, uint64_t addr, uint64_t size, bool is_free)
{
    struct layout *l = ctx;
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 64;
        l->v = realloc(l->v, l->cap * sizeof *l->v);
        if (!l->v)
            abort();
    }
    l->v[l->n++] = (struct rec){addr, size, is_free};
}

/* The chunks in address order. */
static struct layout layout_of(const struct arena *a)
{
    struct layout l = {NULL, 0, 0};
    gpumem__arena_walk(a, layout_visit, &l);
    return l;
}

static bool layout_equal(const struct layout *x, const struct layout *y)
{
    if (x->n != y->n)
        return false;
    for (size_t i = 0; i < x->n; i++)
        if (x->v[i].addr != y->v[i].addr || x->v[i].size != y->v[i].size ||
            x->v[i].is_free != y->v[i].is_free)
            return false;
    return true;
}

/* Stats without metadata_bytes, which a failed reservation may legitimately grow. */
static bool totals_equal(const struct arena_stats *x, const struct arena_stats *y)
{
    return x->capacity_bytes == y->capacity_bytes &&
           x->allocated_bytes == y->allocated_bytes && x->free_bytes == y->free_bytes &&
           x->largest_free == y->largest_free && x->live_chunks == y->live_chunks &&
           x->free_chunks == y->free_chunks && x->regions == y->regions &&
           x->segments == y->segments;
}

static struct arena_stats stats_of(const struct arena *a)
{
    struct arena_stats s;
    gpumem__arena_stats(a, &s);
    return s;
}

static struct arena *make_arena(void)
{
    struct arena *a = NULL;
    ASSERT_EQ(gpumem__arena_create(NULL, &a), ARENA_OK);
    CHECK_ARENA(a);
    return a;
}

/* Allocates and checks; returns the address (or UINT64_MAX on failure). */
static uint64_t alloc_ok(struct arena *a, uint64_t size)
{
    uint64_t addr = UINT64_MAX, got = 0;
    int r = gpumem__arena_alloc(a, size, &addr, &got);
    if (r != ARENA_OK)
        HARNESS_FAIL("alloc(%llu) returned %d", (unsigned long long)size, r);
    CHECK_ARENA(a);
    return r == ARENA_OK ? addr : UINT64_MAX;
}

static void free_ok(struct arena *a, uint64_t addr)
{
    int r = gpumem__arena_free(a, addr, NULL);
    if (r != ARENA_OK)
        HARNESS_FAIL("free(0x%llx) returned %d", (unsigned long long)addr, r);
    CHECK_ARENA(a);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t rng_state;

static uint64_t rnd(void)
{
    uint64_t x = rng_state += UINT64_C(0x9E3779B97F4A7C15);
    x = (x ^ (x >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94D049BB133111EB);
    return x ^ (x >> 31);
}

static uint64_t rnd_below(uint64_t n) { return rnd() % n; }

/* ------------------------------------------------------------------- basics -- */

TEST(empty_arena)
{
    struct arena *a = make_arena();
    struct arena_stats s = stats_of(a);
    ASSERT_EQ(s.capacity_bytes, 0);
    ASSERT_EQ(s.largest_free, 0);
    ASSERT_EQ(s.regions, 0);
    ASSERT_EQ(s.segments, 0);
    ASSERT_TRUE(s.metadata_bytes > 0);
    uint64_t addr, got;
    ASSERT_EQ(gpumem__arena_alloc(a, 1, &addr, &got), ARENA_NO_FIT);
    ASSERT_EQ(gpumem__arena_free(a, 0, NULL), ARENA_BAD_ADDRESS);
    ASSERT_EQ(gpumem__arena_lookup(a, 0), 0);
    ASSERT_EQ(gpumem__arena_release_free_regions(a, NULL, NULL), 0);
    CHECK_ARENA(a);
    gpumem__arena_destroy(a);
    gpumem__arena_destroy(NULL);
}

TEST(sizes_round_up_to_the_granule)
{
    struct arena *a = make_arena();
    ASSERT_EQ(gpumem__arena_add_region(a, 0x100000, MIB, true), ARENA_OK);
    static const uint64_t ask[] = {0, 1, 255, 256, 257, 511, 512, 1000};
    static const uint64_t want[] = {256, 256, 256, 256, 512, 512, 512, 1024};
    uint64_t next = 0x100000;
    for (size_t i = 0; i < sizeof ask / sizeof ask[0]; i++) {
        uint64_t addr, got;
        ASSERT_EQ(gpumem__arena_alloc(a, ask[i], &addr, &got), ARENA_OK);
        ASSERT_EQ(addr, next);
        ASSERT_EQ(got, want[i]);
        ASSERT_EQ(addr % G, 0);
        ASSERT_EQ(gpumem__arena_lookup(a, addr), want[i]);
        next += got;
        CHECK_ARENA(a);
    }
    gpumem__arena_destroy(a);
}

TEST(huge_requests_do_not_fit)
{
    struct arena *a = make_arena();
    ASSERT_EQ(gpumem__arena_add_region(a, 0, UINT64_MAX - (G - 1), true), ARENA_OK);
    CHECK_ARENA(a);
    struct arena_stats before = stats_of(a);
    ASSERT_EQ(before.largest_free, UINT64_MAX - (G - 1));
    uint64_t addr = 7, got = 7;
    ASSERT_EQ(gpumem__arena_alloc(a, UINT64_MAX, &addr, &got), ARENA_NO_FIT);
    ASSERT_EQ(gpumem__arena_alloc(a, UINT64_MAX - 1, &addr, &got), ARENA_NO_FIT);
    ASSERT_EQ(gpumem__arena_alloc(a, UINT64_MAX - (G - 2), &addr, &got), ARENA_NO_FIT);
    ASSERT_EQ(addr, 7);
    struct arena_stats after = stats_of(a);
    ASSERT_TRUE(totals_equal(&before, &after));
    CHECK_ARENA(a);
    /* the largest representable chunk fits exactly, and the whole space goes to it */
    ASSERT_EQ(gpumem__arena_alloc(a, UINT64_MAX - (G - 1), &addr, &got), ARENA_OK);
    ASSERT_EQ(addr, 0);
    ASSERT_EQ(got, UINT64_MAX - (G - 1));
    CHECK_ARENA(a);
    ASSERT_EQ(gpumem__arena_alloc(a, 1, &addr, &got), ARENA_NO_FIT);
    free_ok(a, 0);
    ASSERT_EQ(stats_of(a).free_chunks, 1);
    /* a huge region split near its top */
    uint64_t x = alloc_ok(a, UINT64_MAX - 2 * G + 1);
    ASSERT_EQ(x, 0);
    uint64_t y = alloc_ok(a, 1);
    ASSERT_EQ(y, UINT64_MAX - 2 * G + 1);
    ASSERT_EQ(stats_of(a).free_chunks, 0);
    gpumem__arena_destroy(a);
}

/* Frees b (4 granules, low) and d (2 granules, high): first fit for 2 granules would
 * take b's hole, best fit takes d's. */
TEST(best_fit_not_first_fit)
{
    struct arena *a = make_arena();
    ASSERT_EQ(gpumem__arena_add_region(a, 0x10000, 64 * G, true), ARENA_OK);
    uint64_t p = alloc_ok(a, G);
    uint64_t b = alloc_ok(a, 4 * G);
    uint64_t q = alloc_ok(a, G);
    uint64_t d = alloc_ok(a, 2 * G);
    uint64_t r = alloc_ok(a, G);
    ASSERT_EQ(b, p + G);
    ASSERT_EQ(d, q + G);
    free_ok(a, b);
    free_ok(a, d);
    ASSERT_EQ(stats_of(a).free_chunks, 3); /* b's, d's and the tail */
    ASSERT_EQ(alloc_ok(a, 2 * G), d);
    /* 3 granules: b's hole is now the best (the tail is larger) */
    ASSERT_EQ(alloc_ok(a, 3 * G), b);
    ASSERT_EQ(alloc_ok(a, 1), b + 3 * G);
    /* nothing but the tail is left */
    ASSERT_EQ(alloc_ok(a, 1), r + G);
    gpumem__arena_destroy(a);
}

/* Eight holes of 3 granules. Below 16 KiB ties go to the head of the size's list
 * (lib/arena.c, list_push), not to the lowest address as they did before: that
 * keeps a freed chunk near the head, in cache for the next allocation of its size,
 * at a million chunks (issue 22; docs/bench.md, "The tie rule"). Freed in
 * descending order, each becomes the head: the lowest first. Freed in ascending
 * order, the first four keep address order and each later one is filed after the
 * fourth: h0..h3, then h7, h6, h5, h4. */
TEST(ties_below_16_kib_go_to_the_head_of_the_list)
{
    struct arena *a = make_arena();
    ASSERT_EQ(gpumem__arena_add_region(a, 0x40000, 256 * G, true), ARENA_OK);
    uint64_t holes[8];
    for (int i = 0; i < 8; i++) {
        holes[i] = alloc_ok(a, 3 * G);
        alloc_ok(a, G); /* keeps the holes apart */
    }
    for (int i = 7; i >= 0; i--)
        free_ok(a, holes[i]);
    CHECK_ARENA(a);
    for (int i = 0; i < 8; i++)
        ASSERT_EQ(alloc_ok(a, 3 * G), holes[i]);
    for (int i = 0; i < 8; i++)
        free_ok(a, holes[i]);
    CHECK_ARENA(a);
    const int ascending[8] = {0, 1, 2, 3, 7, 6, 5, 4};
    for (int i = 0; i < 8; i++)
        ASSERT_EQ(alloc_ok(a, 3 * G), holes[ascending[i]]);
    /* smaller requests: each takes the low end of the head's hole, the lowest here */
    for (int i = 7; i >= 0; i -= 2)
        free_ok(a, holes[i]);
    ASSERT_EQ(alloc_ok(a, G), holes[1]);
    ASSERT_EQ(alloc_ok(a, 2 * G), holes[1] + G); /* the exact 2-granule rest wins */
    ASSERT_EQ(alloc_ok(a, 2 * G), holes[3]);
    ASSERT_EQ(alloc_ok(a, 3 * G), holes[5]);
    CHECK_ARENA(a);
    gpumem__arena_destroy(a);
}

/* From 16 KiB (64 granules, the classes of several sizes' treaps) ties go to the
 * lowest address, whatever the order the holes were freed in. */
TEST(ties_from_16_kib_go_to_the_lowest_address)
{
    struct arena *a = make_arena();
    ASSERT_EQ(gpumem__arena_add_region(a, 0x400000, 2048 * G, true), ARENA_OK);
    uint64_t holes[8];
    for (int i = 0; i < 8; i++) {
        holes[i] = alloc_ok(a, 64 * G);
        alloc_ok(a, G); /* keeps the holes apart */
    }
    for (int i = 0; i < 8; i++)
        free_ok(a, holes[i]);
    for (int i = 0; i < 8; i++)
        ASSERT_EQ(alloc_ok(a, 64 * G), holes[i]);
    for (int i = 7; i >= 0; i--)
        free_ok(a, holes[i]);
    for (int i = 0; i < 8; i++)
        ASSERT_EQ(alloc_ok(a, 64 * G), holes[i]);
    CHECK_ARENA(a);
    gpumem__arena_destroy(a);
}

/* Holes whose sizes share a size class (97..100 granules) and straddle classes: the
 * answer is exact, not the first chunk of a class. */
TEST(best_fit_is_exact_within_a_size_class)
{
    struct arena *a = make_arena();
    ASSERT_EQ(gpumem__arena_add_region(a, 0, 4096 * G, true), ARENA_OK);
    static const uint64_t sizes[] = {100, 97, 99, 98, 130, 129, 200};
    uint64_t addr[7];
    for (int i = 0; i < 7; i++) {
        addr[i] = alloc_ok(a, sizes[i] * G);
        alloc_ok(a, G);
    }
    for (int i = 0; i < 7; i++)
        free_ok(a, addr[i]);
    ASSERT_EQ(alloc_ok(a, 98 * G), addr[3]);
    ASSERT_EQ(alloc_ok(a, 98 * G - 5), addr[2]); /* rounds to 98, takes the 99 */
    ASSERT_EQ(alloc_ok(a, 97 * G), addr[1]);
    /* 101: the 100 is too small; the next class up holds 130 and 129 */
    ASSERT_EQ(alloc_ok(a, 101 * G), addr[5]);
    ASSERT_EQ(gpumem__arena_lookup(a, addr[5]), 101 * G);
    ASSERT_EQ(alloc_ok(a, 28 * G), addr[5] + 101 * G); /* the rest of the 129 */
    ASSERT_EQ(alloc_ok(a, 100 * G), addr[0]);
    ASSERT_EQ(alloc_ok(a, 129 * G), addr[4]);
    ASSERT_EQ(alloc_ok(a, 150 * G), addr[6]);
    gpumem__arena_destroy(a);
}

/* Large requests take the exact best fit too: a 300-granule request takes the
 * hole of 300, not a slightly larger one higher up (the spread rule, issue 22,
 * took the 330 above it), and a smaller request the smallest hole that holds it. */
TEST(large_requests_take_the_exact_best_fit)
{
    struct arena *a = make_arena();
    ASSERT_EQ(gpumem__arena_add_region(a, 0, 8192 * G, true), ARENA_OK);
    static const uint64_t sizes[] = {300, 300, 330, 400};
    uint64_t addr[4];
    for (int i = 0; i < 4; i++) {
        addr[i] = alloc_ok(a, sizes[i] * G);
        alloc_ok(a, G);
    }
    for (int i = 0; i < 4; i++)
        free_ok(a, addr[i]);
    ASSERT_EQ(alloc_ok(a, 250 * G), addr[0]);
    ASSERT_EQ(alloc_ok(a, 300 * G), addr[1]); /* the exact fit */
    ASSERT_EQ(alloc_ok(a, 300 * G), addr[2]); /* the 330, below the 400 in size */
    ASSERT_EQ(alloc_ok(a, 300 * G), addr[3]);
    ASSERT_EQ(alloc_ok(a, 30 * G), addr[2] + 300 * G); /* the 30 left of the 330 */
    ASSERT_TRUE(gpumem__arena_check(a, NULL, 0));
    gpumem__arena_destroy(a);
}

/* Holes are refilled before the untouched end is cut, whatever the request's size
 * (issue 22: the top-first rule carved every request without an exact fit from the
 * top, and stranded holes that no later size matched exactly). */
TEST(holes_are_refilled_before_the_untouched_end)
{
    struct arena *a = make_arena();
    ASSERT_EQ(gpumem__arena_add_region(a, 0, 100 * G, true), ARENA_OK);
    uint64_t x = alloc_ok(a, 10 * G);
    alloc_ok(a, G);
    uint64_t y = alloc_ok(a, 20 * G);
    alloc_ok(a, G);
    free_ok(a, x); /* holes of 10 granules at 0 and 20 at 11; the top: 68 at 32 */
    free_ok(a, y);
    ASSERT_EQ(alloc_ok(a, 10 * G), x);
    ASSERT_EQ(alloc_ok(a, 15 * G), y); /* the 20, not the top */
    ASSERT_EQ(alloc_ok(a, 50 * G), 32 * G);
    ASSERT_EQ(alloc_ok(a, 5 * G), y + 15 * G); /* the 5 left of the 20, exactly */
    ASSERT_EQ(alloc_ok(a, 12 * G), 82 * G);
    ASSERT_TRUE(gpumem__arena_check(a, NULL, 0));
    gpumem__arena_destroy(a);
}

/* Issue 22's serving failure, in small: KV blocks of one size, allocated back to
 * back per request. A finished request leaves a hole of several blocks that no
 * single block matches exactly; the next request's blocks fill it from its low
 * end, so the untouched end stays whole for a large prefill temporary (the
 * top-first rule cut the blocks from the top end, and the temporary failed with
 * enough memory free). */
TEST(fixed_size_blocks_fill_a_hole_of_several_blocks)
{
    const uint64_t B = 8 * G; /* one KV block */
    struct arena *a = make_arena();
    ASSERT_EQ(gpumem__arena_add_region(a, 0, 18 * B, true), ARENA_OK);
    uint64_t first[4];
    for (int i = 0; i < 4; i++)
        first[i] = alloc_ok(a, B); /* request 1 */
    for (int i = 0; i < 4; i++)
        ASSERT_EQ(alloc_ok(a, B), (uint64_t)(4 + i) * B); /* request 2 */
    for (int i = 0; i < 4; i++)
        free_ok(a, first[i]); /* request 1 ends: a hole of 4 blocks */
    for (int i = 0; i < 4; i++)
        ASSERT_EQ(alloc_ok(a, B), (uint64_t)i * B); /* request 3 refills it */
    ASSERT_EQ(alloc_ok(a, 10 * B), 8 * B);          /* the prefill fits */
    ASSERT_EQ(stats_of(a).free_bytes, 0);
    ASSERT_TRUE(gpumem__arena_check(a, NULL, 0));
    gpumem__arena_destroy(a);
}

TEST(split_and_no_split)
{
    struct arena *a = make_arena();
    ASSERT_EQ(gpumem__arena_add_region(a, 0x1000, 16 * G, true), ARENA_OK);
    uint64_t x = alloc_ok(a, 4 * G);
    ASSERT_EQ(x, 0x1000);
    uint64_t y = alloc_ok(a, 4 * G);
    struct layout l = layout_of(a);
    ASSERT_EQ(l.n, 3);
    ASSERT_TRUE(l.v[2].is_free);
    ASSERT_EQ(l.v[2].addr, 0x1000 + 8 * G);
    ASSERT_EQ(l.v[2].size, 8 * G);
    free(l.v);
    /* an exact fit leaves no remainder */
    free_ok(a, x);
    struct arena_stats s = stats_of(a);
    ASSERT_EQ(s.free_chunks, 2);
    ASSERT_EQ(alloc_ok(a, 4 * G), x);
    ASSERT_EQ(stats_of(a).free_chunks, 1);
    /* a one-granule remainder is split off */
    uint64_t z = alloc_ok(a, 7 * G);
    ASSERT_EQ(z, y + 4 * G);
    l = layout_of(a);
    ASSERT_EQ(l.n, 4);
    ASSERT_TRUE(l.v[3].is_free);
    ASSERT_EQ(l.v[3].addr, z + 7 * G);
    ASSERT_EQ(l.v[3].size, G);
    free(l.v);
    ASSERT_EQ(alloc_ok(a, 1), z + 7 * G);
    s = stats_of(a);
    ASSERT_EQ(s.free_chunks, 0);
    ASSERT_EQ(s.free_bytes, 0);
    ASSERT_EQ(s.largest_free, 0);
    uint64_t addr, got;
    ASSERT_EQ(gpumem__arena_alloc(a, 1, &addr, &got), ARENA_NO_FIT);
    gpumem__arena_destroy(a);
}

TEST(coalesce_left_right_both)
{
    struct arena *a = make_arena();
    ASSERT_EQ(gpumem__arena_add_region(a, 0x100000, 32 * G, true), ARENA_OK);
    uint64_t c[6];
    for (int i = 0; i < 6; i++)
        c[i] = alloc_ok(a, (uint64_t)(i + 1) * G);
    /* c5 is followed by the free tail: freeing it merges right */
    free_ok(a, c[5]);
    ASSERT_EQ(stats_of(a).free_chunks, 1);
    ASSERT_EQ(stats_of(a).largest_free, (32 - 15) * G);
    /* left: c1 free, then c2 merges into it */
    free_ok(a, c[1]);
    ASSERT_EQ(stats_of(a).free_chunks, 2);
    free_ok(a, c[2]);
    ASSERT_EQ(stats_of(a).free_chunks, 2);
    ASSERT_EQ(stats_of(a).largest_free, (32 - 15) * G);
    struct layout l = layout_of(a);
    ASSERT_EQ(l.n, 5);
    ASSERT_EQ(l.v[1].addr, c[1]);
    ASSERT_EQ(l.v[1].size, 5 * G);
    ASSERT_TRUE(l.v[1].is_free);
    free(l.v);
    free_ok(a, c[4]); /* merges right with c5 and the tail */
    ASSERT_EQ(stats_of(a).free_chunks, 2);
    free_ok(a, c[3]); /* merges left with c1..c2 and right with c4..tail */
    ASSERT_EQ(stats_of(a).free_chunks, 1);
    ASSERT_EQ(stats_of(a).largest_free, 31 * G);
    free_ok(a, c[0]); /* merges right: one chunk again */
    l = layout_of(a);
    ASSERT_EQ(l.n, 1);
    ASSERT_EQ(l.v[0].addr, 0x100000);
    ASSERT_EQ(l.v[0].size, 32 * G);
    free(l.v);
    gpumem__arena_destroy(a);
}

/* ----------------------------------------------------------------- regions -- */

TEST(contiguous_regions_coalesce)
{
    /* added left to right, right to left, and a middle one bridging two */
    static const int orders[3][3] = {{0, 1, 2}, {2, 1, 0}, {0, 2, 1}};
    for (int o = 0; o < 3; o++) {
        struct arena *a = make_arena();
        for (int k = 0; k < 3; k++) {
            uint64_t base = 0x10000000 + (uint64_t)orders[o][k] * MIB;
            ASSERT_EQ(gpumem__arena_add_region(a, base, MIB, true), ARENA_OK);
            CHECK_ARENA(a);
        }
        struct arena_stats s = stats_of(a);
        ASSERT_EQ(s.regions, 3);
        ASSERT_EQ(s.segments, 1);
        ASSERT_EQ(s.free_chunks, 1);
        ASSERT_EQ(s.largest_free, 3 * MIB);
        /* a chunk spanning two regions, and one spanning all three after a free */
        uint64_t x = alloc_ok(a, MIB + MIB / 2);
        ASSERT_EQ(x, 0x10000000);
        free_ok(a, x);
        x = alloc_ok(a, 3 * MIB);
        ASSERT_EQ(x, 0x10000000);
        free_ok(a, x);
        ASSERT_EQ(stats_of(a).free_chunks, 1);
        gpumem__arena_destroy(a);
    }
}

/* The free tail of a segment: what a contiguous region added at its end joins. */
TEST(free_tail)
{
    struct arena *a = make_arena();
    ASSERT_EQ(gpumem__arena_free_tail(a, 5 * MIB), 0); /* no segment at all */
    ASSERT_EQ(gpumem__arena_add_region(a, 4 * MIB, MIB, true), ARENA_OK);
    ASSERT_EQ(gpumem__arena_free_tail(a, 5 * MIB), MIB);   /* all free */
    ASSERT_EQ(gpumem__arena_free_tail(a, 4 * MIB), 0);     /* a start, not an end */
    ASSERT_EQ(gpumem__arena_free_tail(a, 4 * MIB + G), 0); /* inside */
    uint64_t x = alloc_ok(a, MIB / 4);
    ASSERT_EQ(gpumem__arena_free_tail(a, 5 * MIB), 3 * MIB / 4);
    uint64_t y = alloc_ok(a, 3 * MIB / 4); /* the tail is live */
    ASSERT_EQ(gpumem__arena_free_tail(a, 5 * MIB), 0);
    free_ok(a, x);
    ASSERT_EQ(gpumem__arena_free_tail(a, 5 * MIB), 0); /* a hole is not the tail */
    /* a contiguous region at the end joins the segment, and its end is the tail's */
    ASSERT_EQ(gpumem__arena_add_region(a, 5 * MIB, MIB, true), ARENA_OK);
    ASSERT_EQ(gpumem__arena_free_tail(a, 5 * MIB), 0);
    ASSERT_EQ(gpumem__arena_free_tail(a, 6 * MIB), MIB);
    free_ok(a, y);
    ASSERT_EQ(gpumem__arena_free_tail(a, 6 * MIB), 2 * MIB);
    /* a region that is not contiguous ends a segment of its own */
    ASSERT_EQ(gpumem__arena_add_region(a, 6 * MIB, MIB, false), ARENA_OK);
    ASSERT_EQ(gpumem__arena_free_tail(a, 6 * MIB), 2 * MIB);
    ASSERT_EQ(gpumem__arena_free_tail(a, 7 * MIB), MIB);
    CHECK_ARENA(a);
    gpumem__arena_destroy(a);
}

/* Regions added next to used chunks: the new space joins a free neighbour or
 * becomes a chunk of its own; a used chunk may span the old boundary. */
TEST(contiguous_region_next_to_used_chunks)
{
    struct arena *a = make_arena();
    ASSERT_EQ(gpumem__arena_add_region(a, 4 * MIB, MIB, true), ARENA_OK);
    uint64_t whole = alloc_ok(a, MIB);
    ASSERT_EQ(gpumem__arena_add_region(a, 5 * MIB, MIB, true), ARENA_OK); /* right */
    CHECK_ARENA(a);
    ASSERT_EQ(gpumem__arena_add_region(a, 3 * MIB, MIB, true), ARENA_OK); /* left */
    CHECK_ARENA(a);
    struct arena_stats s = stats_of(a);
    ASSERT_EQ(s.segments, 1);
    ASSERT_EQ(s.free_chunks, 2);
    free_ok(a, whole);
    ASSERT_EQ(stats_of(a).free_chunks, 1);
    ASSERT_EQ(stats_of(a).largest_free, 3 * MIB);
    /* used on both sides of a gap, then the gap is filled */
    uint64_t x = alloc_ok(a, 3 * MIB);
    ASSERT_EQ(gpumem__arena_add_region(a, 7 * MIB, MIB, true), ARENA_OK);
    uint64_t y = alloc_ok(a, MIB);
    ASSERT_EQ(y, 7 * MIB);
    ASSERT_EQ(gpumem__arena_add_region(a, 6 * MIB, MIB, true), ARENA_OK); /* bridge */
    CHECK_ARENA(a);
    s = stats_of(a);
    ASSERT_EQ(s.segments, 1);
    ASSERT_EQ(s.free_chunks, 1);
    free_ok(a, x);
    free_ok(a, y);
    ASSERT_EQ(stats_of(a).free_chunks, 1);
    ASSERT_EQ(stats_of(a).largest_free, 5 * MIB);
    /* bridge between a free end and a used start, and the reverse */
    x = alloc_ok(a, 5 * MIB);
    free_ok(a, x);
    ASSERT_EQ(gpumem__arena_add_region(a, 9 * MIB, MIB, true), ARENA_OK);
    y = alloc_ok(a, MIB); /* the 9 MiB region exactly: best fit */
    ASSERT_EQ(y, 9 * MIB);
    ASSERT_EQ(gpumem__arena_add_region(a, 8 * MIB, MIB, true), ARENA_OK);
    CHECK_ARENA(a);
    s = stats_of(a);
    ASSERT_EQ(s.segments, 1);
    ASSERT_EQ(s.free_chunks, 1);
    ASSERT_EQ(s.largest_free, 6 * MIB);
    x = alloc_ok(a, 6 * MIB);
    ASSERT_EQ(x, 3 * MIB);
    free_ok(a, y);
    ASSERT_EQ(gpumem__arena_add_region(a, 11 * MIB, MIB, true), ARENA_OK);
    uint64_t z = alloc_ok(a, MIB); /* two free 1 MiB chunks: the lower one */
    ASSERT_EQ(z, 9 * MIB);
    free_ok(a, z);
    /* bridge between two free ends */
    ASSERT_EQ(gpumem__arena_add_region(a, 10 * MIB, MIB, true), ARENA_OK);
    CHECK_ARENA(a);
    s = stats_of(a);
    ASSERT_EQ(s.segments, 1);
    ASSERT_EQ(s.free_chunks, 1);
    ASSERT_EQ(s.largest_free, 3 * MIB);
    /* a free end grows to the right, a free start to the left */
    ASSERT_EQ(gpumem__arena_add_region(a, 12 * MIB, MIB, true), ARENA_OK);
    CHECK_ARENA(a);
    free_ok(a, x);
    ASSERT_EQ(gpumem__arena_add_region(a, 2 * MIB, MIB, true), ARENA_OK);
    CHECK_ARENA(a);
    s = stats_of(a);
    ASSERT_EQ(s.segments, 1);
    ASSERT_EQ(s.regions, 11);
    ASSERT_EQ(s.free_chunks, 1);
    ASSERT_EQ(s.largest_free, 11 * MIB);
    ASSERT_EQ(alloc_ok(a, 11 * MIB), 2 * MIB);
    gpumem__arena_destroy(a);
}

TEST(non_contiguous_regions_do_not_coalesce)
{
    struct arena *a = make_arena();
    /* touching, but one of each pair is not contiguous */
    ASSERT_EQ(gpumem__arena_add_region(a, 0, MIB, false), ARENA_OK);
    ASSERT_EQ(gpumem__arena_add_region(a, MIB, MIB, false), ARENA_OK);
    ASSERT_EQ(gpumem__arena_add_region(a, 2 * MIB, MIB, true), ARENA_OK);
    ASSERT_EQ(gpumem__arena_add_region(a, 4 * MIB, MIB, true), ARENA_OK);
    ASSERT_EQ(gpumem__arena_add_region(a, 3 * MIB, MIB, false), ARENA_OK);
    CHECK_ARENA(a);
    struct arena_stats s = stats_of(a);
    ASSERT_EQ(s.regions, 5);
    ASSERT_EQ(s.segments, 5);
    ASSERT_EQ(s.free_chunks, 5);
    ASSERT_EQ(s.largest_free, MIB);
    uint64_t addr, got;
    ASSERT_EQ(gpumem__arena_alloc(a, MIB + 1, &addr, &got), ARENA_NO_FIT);
    uint64_t x[5];
    for (int i = 0; i < 5; i++) {
        x[i] = alloc_ok(a, MIB);
        ASSERT_EQ(x[i], (uint64_t)i * MIB); /* equal sizes: lowest address first */
    }
    for (int i = 0; i < 5; i++)
        free_ok(a, x[i]);
    s = stats_of(a);
    ASSERT_EQ(s.free_chunks, 5);
    ASSERT_EQ(s.largest_free, MIB);
    /* a contiguous region touching contiguous [4, 5) joins it, not its other side */
    ASSERT_EQ(gpumem__arena_add_region(a, 5 * MIB, MIB, true), ARENA_OK);
    CHECK_ARENA(a);
    s = stats_of(a);
    ASSERT_EQ(s.segments, 5);
    ASSERT_EQ(s.largest_free, 2 * MIB);
    gpumem__arena_destroy(a);
}

TEST(bad_regions_are_rejected)
{
    struct arena *a = make_arena();
    ASSERT_EQ(gpumem__arena_add_region(a, 16 * MIB, 4 * MIB, true), ARENA_OK);
    ASSERT_EQ(gpumem__arena_add_region(a, 32 * MIB, 4 * MIB, false), ARENA_OK);
    uint64_t x = alloc_ok(a, MIB);
    struct arena_stats before = stats_of(a);
    struct layout lb = layout_of(a);
    static const struct {
        uint64_t base, size;
    } bad[] = {
        {1, MIB},                        /* misaligned base */
        {64 * MIB, 100},                 /* misaligned size */
        {64 * MIB + 128, MIB},           /* misaligned base */
        {64 * MIB, 0},                   /* empty */
        {UINT64_MAX - 255, 512},         /* wraps */
        {UINT64_MAX - 1023, 1024 + 256}, /* wraps */
        {UINT64_MAX - 255, 256},         /* ends exactly at 2^64: wraps */
        {16 * MIB, 4 * MIB},             /* identical */
        {15 * MIB, 2 * MIB},             /* overlaps the start */
        {19 * MIB, 2 * MIB},             /* overlaps the end */
        {17 * MIB, MIB},                 /* inside */
        {15 * MIB, 6 * MIB},             /* contains */
        {20 * MIB - G, 13 * MIB},        /* spans from one into the other */
        {35 * MIB, 2 * MIB},             /* overlaps the non-contiguous one */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        for (int contiguous = 0; contiguous < 2; contiguous++) {
            ASSERT_EQ(gpumem__arena_add_region(a, bad[i].base, bad[i].size, contiguous),
                      ARENA_BAD_RANGE);
            CHECK_ARENA(a);
        }
    }
    struct arena_stats after = stats_of(a);
    struct layout la = layout_of(a);
    ASSERT_TRUE(totals_equal(&before, &after));
    ASSERT_TRUE(layout_equal(&lb, &la));
    free(lb.v);
    free(la.v);
    /* touching on both sides is fine */
    ASSERT_EQ(gpumem__arena_add_region(a, 20 * MIB, 12 * MIB, true), ARENA_OK);
    ASSERT_EQ(gpumem__arena_add_region(a, UINT64_MAX - 511, 256, true), ARENA_OK);
    CHECK_ARENA(a);
    ASSERT_EQ(stats_of(a).segments, 3);
    free_ok(a, x);
    gpumem__arena_destroy(a);
}

/* --------------------------------------------------------------- bad frees -- */

TEST(bad_frees_change_nothing)
{
    struct arena *a = make_arena();
    ASSERT_EQ(gpumem__arena_add_region(a, 0x200000, MIB, true), ARENA_OK);
    uint64_t x = alloc_ok(a, 4 * G);
    uint64_t y = alloc_ok(a, 4 * G);
    uint64_t z = alloc_ok(a, 4 * G);
    free_ok(a, y);
    struct arena_stats before = stats_of(a);
    struct layout lb = layout_of(a);
    const uint64_t bad[] = {
        y,              /* already freed */
        y + G,          /* inside a free chunk */
        x + G,          /* interior of a live chunk */
        x + 1,          /* misaligned interior */
        z + 4 * G,      /* start of the free tail: never allocated */
        0,              /* outside any region */
        0x200000 + MIB, /* just past the region */
        UINT64_MAX,
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t size = 12345;
        ASSERT_EQ(gpumem__arena_free(a, bad[i], &size), ARENA_BAD_ADDRESS);
        ASSERT_EQ(size, 12345);
        CHECK_ARENA(a);
    }
    struct arena_stats after = stats_of(a);
    struct layout la = layout_of(a);
    ASSERT_TRUE(totals_equal(&before, &after));
    ASSERT_TRUE(layout_equal(&lb, &la));
    free(lb.v);
    free(la.v);
    uint64_t size = 0;
    ASSERT_EQ(gpumem__arena_free(a, x, &size), ARENA_OK);
    ASSERT_EQ(size, 4 * G);
    ASSERT_EQ(gpumem__arena_free(a, x, &size), ARENA_BAD_ADDRESS); /* double free */
    CHECK_ARENA(a);
    free_ok(a, z);
    ASSERT_EQ(stats_of(a).free_chunks, 1);
    gpumem__arena_destroy(a);
}

TEST(lookup)
{
    struct arena *a = make_arena();
    ASSERT_EQ(gpumem__arena_add_region(a, 0x300000, MIB, true), ARENA_OK);
    uint64_t x = alloc_ok(a, 1000);
    uint64_t y = alloc_ok(a, 3 * G);
    ASSERT_EQ(gpumem__arena_lookup(a, x), 4 * G);
    ASSERT_EQ(gpumem__arena_lookup(a, y), 3 * G);
    ASSERT_EQ(gpumem__arena_lookup(a, x + G), 0);     /* interior */
    ASSERT_EQ(gpumem__arena_lookup(a, y + 3 * G), 0); /* the free tail */
    ASSERT_EQ(gpumem__arena_lookup(a, 0), 0);         /* outside */
    free_ok(a, x);
    ASSERT_EQ(gpumem__arena_lookup(a, x), 0); /* freed */
    ASSERT_EQ(gpumem__arena_lookup(a, y), 3 * G);
    gpumem__arena_destroy(a);
}

/* ---------------------------------------------------------- release regions -- */

struct released {
    uint64_t base[32], size[32];
    int n;
};

static void on_release(void *ctx, uint64_t base, uint64_t size)
{
    struct released *r = ctx;
    if (r->n < 32) {
        r->base[r->n] = base;
        r->size[r->n] = size;
    }
    r->n++;
}

TEST(release_free_regions)
{
    struct arena *a = make_arena();
    /* segment A: contiguous regions [0,1) [1,2) [2,3) [3,4) [4,5) MiB (units below)
     * segment B: non-contiguous [8,9)
     * segment C: non-contiguous [9,10), kept busy
     * segment D: contiguous [12,13) [13,14) */
    const uint64_t M = MIB, base = 64 * M;
    for (int i = 0; i < 5; i++)
        ASSERT_EQ(gpumem__arena_add_region(a, base + (uint64_t)i * M, M, true), ARENA_OK);
    /* in A: used [0.5, 1.25) so regions 0 and 1 are partly used; the free chunk
     * [1.25, 5) holds regions 2, 3, 4 wholly */
    uint64_t lo = alloc_ok(a, M / 2);
    uint64_t used = alloc_ok(a, 3 * M / 4);
    free_ok(a, lo);
    ASSERT_EQ(used, base + M / 2);
    ASSERT_EQ(gpumem__arena_add_region(a, base + 8 * M, M, false), ARENA_OK);
    ASSERT_EQ(gpumem__arena_add_region(a, base + 9 * M, M, false), ARENA_OK);
    ASSERT_EQ(gpumem__arena_add_region(a, base + 12 * M, M, true), ARENA_OK);
    ASSERT_EQ(gpumem__arena_add_region(a, base + 13 * M, M, true), ARENA_OK);
    CHECK_ARENA(a);
    ASSERT_EQ(stats_of(a).segments, 4);
    /* 1 MiB requests go to the 1 MiB chunks, B then C; B is freed again */
    uint64_t in_b = alloc_ok(a, M);
    ASSERT_EQ(in_b, base + 8 * M);
    uint64_t in_c = alloc_ok(a, M);
    ASSERT_EQ(in_c, base + 9 * M);
    free_ok(a, in_b);
    /* D: used at its very end, so [12,13) is wholly free but [13,14) is not */
    uint64_t d1 = alloc_ok(a, 2 * M - G);
    ASSERT_EQ(d1, base + 12 * M);
    uint64_t d2 = alloc_ok(a, G);
    ASSERT_EQ(d2, base + 14 * M - G);
    free_ok(a, d1);

    struct arena_stats before = stats_of(a);
    struct released r = {.n = 0};
    uint64_t bytes = gpumem__arena_release_free_regions(a, on_release, &r);
    CHECK_ARENA(a);
    ASSERT_EQ(bytes, 5 * M);
    ASSERT_EQ(r.n, 5);
    static const uint64_t want[] = {2, 3, 4, 8, 12};
    for (int i = 0; i < 5 && i < r.n; i++) {
        ASSERT_EQ(r.base[i], base + want[i] * M);
        ASSERT_EQ(r.size[i], M);
    }
    struct arena_stats s = stats_of(a);
    ASSERT_EQ(s.capacity_bytes, before.capacity_bytes - 5 * M);
    ASSERT_EQ(s.allocated_bytes, before.allocated_bytes);
    ASSERT_EQ(s.regions, 4);
    ASSERT_EQ(s.segments, 3);
    ASSERT_EQ(s.live_chunks, 3);
    /* pieces left free: [0, 0.5) and [1.25, 2) in A, [13, 14-G) in D */
    struct layout l = layout_of(a);
    static const struct rec want_layout[] = {
        {64 * MIB, MIB / 2, true},
        {64 * MIB + MIB / 2, 3 * MIB / 4, false},
        {64 * MIB + MIB + MIB / 4, 3 * MIB / 4, true},
        {73 * MIB, MIB, false},
        {77 * MIB, MIB - G, true},
        {78 * MIB - G, G, false},
    };
    struct layout want_l = {(struct rec *)want_layout, 6, 6};
    ASSERT_TRUE(layout_equal(&l, &want_l));
    free(l.v);
    ASSERT_EQ(s.free_chunks, 3);
    ASSERT_EQ(s.largest_free, M - G);
    /* nothing more to release while everything is busy */
    ASSERT_EQ(gpumem__arena_release_free_regions(a, on_release, &r), 0);
    ASSERT_EQ(r.n, 5);
    /* free everything: each remaining region goes, segments vanish */
    free_ok(a, used);
    free_ok(a, in_c);
    free_ok(a, d2);
    bytes = gpumem__arena_release_free_regions(a, on_release, &r);
    CHECK_ARENA(a);
    ASSERT_EQ(bytes, 4 * M);
    ASSERT_EQ(r.n, 9);
    s = stats_of(a);
    ASSERT_EQ(s.capacity_bytes, 0);
    ASSERT_EQ(s.regions, 0);
    ASSERT_EQ(s.segments, 0);
    ASSERT_EQ(s.free_chunks, 0);
    /* and the arena is usable again */
    ASSERT_EQ(gpumem__arena_add_region(a, base + 2 * M, M, true), ARENA_OK);
    ASSERT_EQ(alloc_ok(a, M), base + 2 * M);
    gpumem__arena_destroy(a);
}

/* One free chunk spanning five contiguous regions, partly into the first and the
 * last: the three inside go, the segment splits in two, both ends stay free. */
TEST(release_splits_a_segment)
{
    struct arena *a = make_arena();
    const uint64_t M = MIB;
    for (int i = 0; i < 5; i++)
        ASSERT_EQ(gpumem__arena_add_region(a, (uint64_t)(i + 1) * M, M, true), ARENA_OK);
    uint64_t head = alloc_ok(a, M / 2);
    uint64_t mid = alloc_ok(a, 4 * M);
    uint64_t tail = alloc_ok(a, M / 2);
    ASSERT_EQ(tail, 5 * M + M / 2);
    free_ok(a, mid);
    struct released r = {.n = 0};
    ASSERT_EQ(gpumem__arena_release_free_regions(a, on_release, &r), 3 * M);
    CHECK_ARENA(a);
    ASSERT_EQ(r.n, 3);
    ASSERT_EQ(r.base[0], 2 * M);
    ASSERT_EQ(r.base[2], 4 * M);
    struct arena_stats s = stats_of(a);
    ASSERT_EQ(s.segments, 2);
    ASSERT_EQ(s.regions, 2);
    ASSERT_EQ(s.free_chunks, 2);
    ASSERT_EQ(s.largest_free, M / 2);
    uint64_t addr, got;
    ASSERT_EQ(gpumem__arena_alloc(a, M / 2 + 1, &addr, &got), ARENA_NO_FIT);
    /* refilling the hole reunites everything into one segment and one chunk */
    ASSERT_EQ(gpumem__arena_add_region(a, 3 * M, M, true), ARENA_OK);
    ASSERT_EQ(gpumem__arena_add_region(a, 2 * M, M, true), ARENA_OK);
    ASSERT_EQ(gpumem__arena_add_region(a, 4 * M, M, true), ARENA_OK);
    CHECK_ARENA(a);
    free_ok(a, head);
    free_ok(a, tail);
    s = stats_of(a);
    ASSERT_EQ(s.segments, 1);
    ASSERT_EQ(s.free_chunks, 1);
    ASSERT_EQ(s.largest_free, 5 * M);
    /* used in the middle only: the regions on both sides go, the middle stays */
    mid = alloc_ok(a, 2 * M + G);
    free_ok(a, mid);
    mid = alloc_ok(a, M);
    uint64_t inner = alloc_ok(a, M + G); /* [2, 3+G): regions 2 and 3 are busy */
    free_ok(a, mid);
    ASSERT_EQ(inner, 2 * M);
    r.n = 0;
    ASSERT_EQ(gpumem__arena_release_free_regions(a, on_release, &r), 3 * M);
    CHECK_ARENA(a);
    ASSERT_EQ(r.n, 3);
    ASSERT_EQ(r.base[0], 1 * M);
    ASSERT_EQ(r.base[1], 4 * M);
    ASSERT_EQ(r.base[2], 5 * M);
    s = stats_of(a);
    ASSERT_EQ(s.segments, 1);
    ASSERT_EQ(s.regions, 2);
    ASSERT_EQ(s.free_chunks, 1);
    ASSERT_EQ(s.largest_free, M - G);
    free_ok(a, inner);
    ASSERT_EQ(gpumem__arena_release_free_regions(a, NULL, NULL), 2 * M);
    CHECK_ARENA(a);
    ASSERT_EQ(stats_of(a).segments, 0);
    gpumem__arena_destroy(a);
}

TEST(stats_and_largest_free)
{
    struct arena *a = make_arena();
    ASSERT_EQ(gpumem__arena_add_region(a, 0, 10 * MIB, true), ARENA_OK);
    ASSERT_EQ(gpumem__arena_add_region(a, 16 * MIB, 3 * MIB, false), ARENA_OK);
    struct arena_stats s = stats_of(a);
    ASSERT_EQ(s.capacity_bytes, 13 * MIB);
    ASSERT_EQ(s.allocated_bytes, 0);
    ASSERT_EQ(s.free_bytes, 13 * MIB);
    ASSERT_EQ(s.largest_free, 10 * MIB);
    ASSERT_EQ(gpumem__arena_largest_free(a), 10 * MIB);
    ASSERT_EQ(s.live_chunks, 0);
    ASSERT_EQ(s.free_chunks, 2);
    ASSERT_EQ(s.regions, 2);
    ASSERT_EQ(s.segments, 2);
    uint64_t x = alloc_ok(a, 8 * MIB);
    ASSERT_EQ(x, 0);
    s = stats_of(a);
    ASSERT_EQ(s.allocated_bytes, 8 * MIB);
    ASSERT_EQ(s.free_bytes, 5 * MIB);
    ASSERT_EQ(s.largest_free, 3 * MIB);
    ASSERT_EQ(s.live_chunks, 1);
    ASSERT_EQ(s.free_chunks, 2);
    uint64_t y = alloc_ok(a, 3 * MIB); /* both fit: 3 MiB is exact */
    ASSERT_EQ(y, 16 * MIB);
    s = stats_of(a);
    ASSERT_EQ(s.largest_free, 2 * MIB);
    ASSERT_EQ(s.free_chunks, 1);
    uint64_t z = alloc_ok(a, 2 * MIB);
    ASSERT_EQ(z, 8 * MIB);
    s = stats_of(a);
    ASSERT_EQ(s.largest_free, 0);
    ASSERT_EQ(s.free_bytes, 0);
    ASSERT_EQ(s.free_chunks, 0);
    ASSERT_EQ(s.live_chunks, 3);
    free_ok(a, x);
    free_ok(a, z);
    free_ok(a, y);
    s = stats_of(a);
    ASSERT_EQ(s.largest_free, 10 * MIB);
    ASSERT_EQ(s.allocated_bytes, 0);
    gpumem__arena_destroy(a);
}

TEST(metadata_does_not_grow_with_bytes)
{
    struct arena *a = make_arena();
    ASSERT_EQ(gpumem__arena_add_region(a, GPUMEM_TIB, GPUMEM_TIB, true), ARENA_OK);
    CHECK_ARENA(a);
    struct arena_stats s = stats_of(a);
    ASSERT_EQ(s.capacity_bytes, GPUMEM_TIB);
    ASSERT_LE(s.metadata_bytes, 64 * GPUMEM_KIB - 1);
    uint64_t one_tib = s.metadata_bytes;
    gpumem__arena_destroy(a);

    a = make_arena();
    ASSERT_EQ(gpumem__arena_add_region(a, GPUMEM_GIB, 80 * GPUMEM_GIB, false), ARENA_OK);
    s = stats_of(a);
    ASSERT_EQ(s.metadata_bytes, one_tib); /* the same few records, whatever the size */
    uint64_t x = alloc_ok(a, 40 * GPUMEM_GIB);
    alloc_ok(a, 1);
    free_ok(a, x);
    ASSERT_LE(stats_of(a).metadata_bytes, 64 * GPUMEM_KIB - 1);
    gpumem__arena_destroy(a);
}

/* -------------------------------------------------------- fault injection -- */

struct faulty {
    long fail_at; /* 1-based index of the host allocation to fail; 0: never */
    long calls;   /* host allocations attempted */
    long failed;  /* failures injected */
    long live;    /* blocks outstanding */
};

static void *faulty_alloc(void *ctx, size_t bytes)
{
    struct faulty *f = ctx;
    if (++f->calls == f->fail_at) {
        f->failed++;
        return NULL;
    }
    void *p = malloc(bytes);
    if (p)
        f->live++;
    return p;
}

static void faulty_free(void *ctx, void *p)
{
    struct faulty *f = ctx;
    f->live--;
    free(p);
}

/* Evaluates expr after a snapshot of the arena; when it returns ARENA_HOST_OOM,
 * checks the invariants and that neither the totals nor the chunks changed. */
#define FAULTY_OP(a, expr) (snapshot_take(a), snapshot_compare((a), (expr), __LINE__))

static struct arena_stats snap_stats;
static struct layout snap_layout;

static void snapshot_take(const struct arena *a)
{
    free(snap_layout.v);
    snap_stats = stats_of(a);
    snap_layout = layout_of(a);
}

static int snapshot_compare(const struct arena *a, int r, int line)
{
    if (r == ARENA_HOST_OOM) {
        char m[512];
        if (!gpumem__arena_check(a, m, sizeof m))
            HARNESS_FAIL("line %d: check after host OOM: %s", line, m);
        struct arena_stats now = stats_of(a);
        struct layout l = layout_of(a);
        if (!totals_equal(&snap_stats, &now) || !layout_equal(&snap_layout, &l))
            HARNESS_FAIL("line %d: host OOM changed the arena", line);
        free(l.v);
    }
    return r;
}

struct outcome {
    struct arena_stats stats; /* before destroy, metadata_bytes zeroed */
    struct layout layout;
    uint64_t released;
};

/* Touches every host allocation path: the arena itself, slab blocks, hash growth,
 * region and segment arrays, release. Each operation that hits the injected
 * failure must report ARENA_HOST_OOM, change nothing, and succeed when retried. */
static void fault_scenario(struct faulty *f, struct outcome *out)
{
    struct arena_host_allocator host = {faulty_alloc, faulty_free, f};
    struct arena *a = NULL;
    int r;
    while ((r = gpumem__arena_create(&host, &a)) == ARENA_HOST_OOM)
        ;
    ASSERT_EQ(r, ARENA_OK);
    if (!a)
        return;
    const uint64_t M = MIB;
    /* 12 regions: contiguous pairs and loners, enough to grow both arrays */
    for (int i = 0; i < 12; i++) {
        uint64_t base = (uint64_t)(i / 2) * 4 * M + (uint64_t)(i % 2) * M;
        bool contiguous = i % 4 != 3;
        while ((r = FAULTY_OP(a, gpumem__arena_add_region(a, base, M, contiguous))) ==
               ARENA_HOST_OOM)
            ;
        ASSERT_EQ(r, ARENA_OK);
    }
    /* enough chunks for several slab blocks and hash growths */
    static uint64_t addrs[600];
    for (int i = 0; i < 600; i++) {
        uint64_t got, size = (uint64_t)(1 + i % 7) * 4 * G;
        while ((r = FAULTY_OP(a, gpumem__arena_alloc(a, size, &addrs[i], &got))) ==
               ARENA_HOST_OOM)
            ;
        ASSERT_EQ(r, ARENA_OK);
    }
    for (int i = 0; i < 600; i++)
        if (i % 50 != 1)
            ASSERT_EQ(gpumem__arena_free(a, addrs[i], NULL), ARENA_OK);
    CHECK_ARENA(a);
    for (;;) {
        snapshot_take(a);
        long before = f->failed;
        out->released = gpumem__arena_release_free_regions(a, NULL, NULL);
        if (f->failed == before)
            break;
        ASSERT_EQ(out->released, 0); /* host OOM: nothing released */
        snapshot_compare(a, ARENA_HOST_OOM, __LINE__);
    }
    CHECK_ARENA(a);
    /* grow again after the release */
    while ((r = FAULTY_OP(a, gpumem__arena_add_region(a, 100 * M, M, true))) ==
           ARENA_HOST_OOM)
        ;
    ASSERT_EQ(r, ARENA_OK);
    for (int i = 0; i < 40; i++) {
        uint64_t got;
        while ((r = FAULTY_OP(a, gpumem__arena_alloc(a, 64 * G, &addrs[i], &got))) ==
               ARENA_HOST_OOM)
            ;
        ASSERT_EQ(r, ARENA_OK);
    }
    CHECK_ARENA(a);
    out->stats = stats_of(a);
    out->stats.metadata_bytes = 0;
    out->layout = layout_of(a);
    gpumem__arena_destroy(a);
    ASSERT_EQ(f->live, 0); /* nothing leaked, on any path */
}

TEST(host_oom_at_every_allocation)
{
    struct faulty ref_f = {.fail_at = 0};
    struct outcome ref = {{0}, {NULL, 0, 0}, 0};
    fault_scenario(&ref_f, &ref);
    ASSERT_TRUE(ref.released > 0);
    ASSERT_TRUE(ref_f.calls > 10); /* the scenario does allocate a fair number of times */
    int failures = harness_failures;
    long n;
    for (n = 1; n <= ref_f.calls + 1 && harness_failures == failures; n++) {
        struct faulty f = {.fail_at = n};
        struct outcome o = {{0}, {NULL, 0, 0}, 0};
        fault_scenario(&f, &o);
        /* failures and retries end exactly where the run without failures ended */
        if (o.released != ref.released || !totals_equal(&o.stats, &ref.stats) ||
            !layout_equal(&o.layout, &ref.layout))
            HARNESS_FAIL("failing host allocation %ld changed the outcome", n);
        free(o.layout.v);
        if (f.failed == 0)
            break; /* ran past the last host allocation */
    }
    ASSERT_EQ(n, ref_f.calls + 1);
    free(ref.layout.v);
    free(snap_layout.v);
    snap_layout = (struct layout){NULL, 0, 0};
}

/* ----------------------------------------------------------------- owners -- */

/* A free chunk's owner at addr (the chunk that starts there), or -1. */
struct owner_at {
    uint64_t addr;
    int owner;
};

static void owner_seg(void *ctx, uint64_t base, uint64_t size)
{
    (void)ctx, (void)base, (void)size;
}

static void owner_chunk(void *ctx, const struct arena_chunk_info *c)
{
    struct owner_at *w = ctx;
    if (c->addr == w->addr && c->is_free)
        w->owner = (int)c->owner;
}

static int free_owner_at(const struct arena *a, uint64_t addr)
{
    struct owner_at w = {addr, -1};
    gpumem__arena_walk_user(a, owner_seg, owner_chunk, &w);
    return w.owner;
}

static uint64_t alloc_from(struct arena *a, uint64_t size, uint64_t owners)
{
    uint64_t addr = UINT64_MAX, got = 0;
    int r = gpumem__arena_alloc_owned(a, size, owners, NULL, &addr, &got);
    if (r != ARENA_OK)
        HARNESS_FAIL("alloc_owned(%llu, 0x%llx) returned %d", (unsigned long long)size,
                     (unsigned long long)owners, r);
    CHECK_ARENA(a);
    return r == ARENA_OK ? addr : UINT64_MAX;
}

static void free_as(struct arena *a, uint64_t addr, unsigned owner)
{
    int r = gpumem__arena_free_owned(a, addr, owner, NULL);
    if (r != ARENA_OK)
        HARNESS_FAIL("free_owned(0x%llx, %u) returned %d", (unsigned long long)addr,
                     owner, r);
    CHECK_ARENA(a);
}

/* What an owner frees is its own: its allocations and owner 0's may take it,
 * nobody else's; disowned, it is anyone's. */
TEST(an_owners_free_memory_serves_it_and_nobody_else)
{
    struct arena *a = make_arena();
    ASSERT_EQ(gpumem__arena_add_region(a, 0, 4 * MIB, true), ARENA_OK);
    ASSERT_EQ(gpumem__arena_owner_open(a, 1), ARENA_OK);
    ASSERT_EQ(gpumem__arena_owner_open(a, 2), ARENA_OK);
    uint64_t x = alloc_ok(a, MIB), y = alloc_ok(a, MIB), z = alloc_ok(a, 2 * MIB);
    free_as(a, y, 1);
    ASSERT_EQ(free_owner_at(a, y), 1);
    ASSERT_FALSE(gpumem__arena_owner_empty(a, 1));
    ASSERT_TRUE(gpumem__arena_owner_empty(a, 2));
    uint64_t addr, got;
    ASSERT_EQ(gpumem__arena_alloc(a, MIB, &addr, &got), ARENA_NO_FIT); /* owner 0 */
    ASSERT_EQ(gpumem__arena_alloc_owned(a, MIB, UINT64_C(1) << 2, NULL, &addr, &got),
              ARENA_NO_FIT);
    ASSERT_EQ(gpumem__arena_largest_free_owned(a, 1), 0);
    ASSERT_EQ(gpumem__arena_largest_free_owned(a, 2), MIB);
    ASSERT_EQ(gpumem__arena_largest_free(a), MIB);
    ASSERT_EQ(alloc_from(a, MIB / 2, UINT64_C(1) << 1), y); /* its low end */
    ASSERT_EQ(free_owner_at(a, y + MIB / 2), 1);            /* the rest stays its */
    free_as(a, y, 1);
    ASSERT_EQ(gpumem__arena_disown(a, 1), MIB);
    ASSERT_TRUE(gpumem__arena_owner_empty(a, 1));
    ASSERT_EQ(free_owner_at(a, y), 0);
    ASSERT_EQ(alloc_ok(a, MIB), y);
    free_ok(a, x);
    free_ok(a, y);
    free_ok(a, z);
    ASSERT_EQ(stats_of(a).free_chunks, 1);
    gpumem__arena_destroy(a);
}

/* Owner 0's free chunks join an owner's as it frees, and so do the owner's own
 * chunks beyond them, which owner 0's kept apart; owner 0's frees join only
 * owner 0's; two other owners never join unless one is told to. */
TEST(an_owners_frees_join_owner_0s_and_its_own_beyond_them)
{
    struct arena *a = make_arena();
    ASSERT_EQ(gpumem__arena_add_region(a, 0, 8 * MIB, true), ARENA_OK);
    ASSERT_EQ(gpumem__arena_owner_open(a, 1), ARENA_OK);
    ASSERT_EQ(gpumem__arena_owner_open(a, 2), ARENA_OK);
    uint64_t c[8];
    for (int i = 0; i < 8; i++)
        c[i] = alloc_ok(a, MIB);
    free_as(a, c[0], 1); /* 1 | 0 | live | 1 | 2 | 0 | live | live */
    free_ok(a, c[1]);
    free_as(a, c[3], 1);
    free_as(a, c[4], 2);
    free_ok(a, c[5]);
    ASSERT_EQ(free_owner_at(a, c[0]), 1);
    ASSERT_EQ(free_owner_at(a, c[1]), 0); /* owner 0's free did not join owner 1's */
    ASSERT_EQ(free_owner_at(a, c[4]), 2); /* 1 and 2 stay apart */
    ASSERT_EQ(stats_of(a).free_chunks, 5);
    free_as(a, c[2], 1); /* joins c[1] (owner 0's), then c[0] and c[3] beyond */
    ASSERT_EQ(free_owner_at(a, c[0]), 1);
    ASSERT_EQ(gpumem__arena_largest_free_owned(a, UINT64_C(1) << 1), 4 * MIB);
    ASSERT_EQ(stats_of(a).free_chunks, 3);
    free_as(a, c[7], 2); /* 1 | 2 | 0 | live | 2 */
    ASSERT_EQ(stats_of(a).free_chunks, 4);
    unsigned owner = 99;
    ASSERT_EQ(gpumem__arena_free_tail_owned(a, 8 * MIB, &owner), MIB);
    ASSERT_EQ(owner, 2);
    ASSERT_EQ(gpumem__arena_free_tail(a, 8 * MIB), MIB);
    gpumem__arena_set_joins(a, 2, UINT64_C(1) << 1); /* 2 joins 1's from now */
    free_as(a, c[6], 2); /* joins c[7], c[5] (0's), c[4], then c[0..3] (1's) */
    ASSERT_EQ(stats_of(a).free_chunks, 1);
    ASSERT_EQ(free_owner_at(a, 0), 2);
    ASSERT_TRUE(gpumem__arena_owner_empty(a, 1));
    gpumem__arena_owner_close(a, 1); /* nobody joins it any more */
    ASSERT_EQ(gpumem__arena_free_owned(a, c[0], 1, NULL), ARENA_BAD_ADDRESS);
    ASSERT_EQ(gpumem__arena_disown(a, 2), 8 * MIB);
    ASSERT_EQ(free_owner_at(a, 0), 0);
    CHECK_ARENA(a);
    gpumem__arena_destroy(a);
}

/* A region added as an owner's joins its free tail; a release takes only owner
 * 0's free regions; bad owners are refused and change nothing. */
TEST(owned_regions_releases_and_bad_owners)
{
    struct arena *a = make_arena();
    ASSERT_EQ(gpumem__arena_owner_open(a, 0), ARENA_BAD_RANGE);
    ASSERT_EQ(gpumem__arena_owner_open(a, ARENA_OWNERS), ARENA_BAD_RANGE);
    ASSERT_EQ(gpumem__arena_add_region_owned(a, 0, MIB, true, 3), ARENA_BAD_RANGE);
    ASSERT_EQ(gpumem__arena_owner_open(a, 3), ARENA_OK);
    ASSERT_EQ(gpumem__arena_owner_open(a, 3), ARENA_OK); /* open already */
    ASSERT_EQ(gpumem__arena_add_region_owned(a, 0, MIB, true, 3), ARENA_OK);
    ASSERT_EQ(gpumem__arena_add_region_owned(a, MIB, MIB, true, 3), ARENA_OK);
    ASSERT_EQ(gpumem__arena_add_region(a, 2 * MIB, MIB, true), ARENA_OK);
    CHECK_ARENA(a);
    ASSERT_EQ(stats_of(a).free_chunks, 2); /* 3's two regions joined; 0's apart */
    ASSERT_EQ(gpumem__arena_release_free_regions(a, NULL, NULL), MIB); /* 0's only */
    ASSERT_EQ(stats_of(a).capacity_bytes, 2 * MIB);
    uint64_t x = alloc_from(a, 2 * MIB, UINT64_C(1) << 3);
    struct arena_stats before = stats_of(a);
    ASSERT_EQ(gpumem__arena_free_owned(a, x, 5, NULL), ARENA_BAD_ADDRESS);
    ASSERT_EQ(gpumem__arena_free_owned(a, x, ARENA_OWNERS, NULL), ARENA_BAD_ADDRESS);
    struct arena_stats after = stats_of(a);
    ASSERT_TRUE(totals_equal(&before, &after));
    free_as(a, x, 3);
    ASSERT_EQ(gpumem__arena_release_free_regions(a, NULL, NULL), 0);
    gpumem__arena_owner_close(a, 3);
    ASSERT_EQ(gpumem__arena_release_free_regions(a, NULL, NULL), 2 * MIB);
    CHECK_ARENA(a);
    gpumem__arena_destroy(a);
}

/* ------------------------------------------------------ exact model, random -- */

/* Draws a request: granule counts below 64 (a class per size) or, with `wide`,
 * mostly counts of 64 and more, where a class spans several sizes and a chunk may
 * keep its place in the index when it shrinks or grows. */
static uint64_t model_request(bool wide)
{
    if (!wide)
        return rnd_below(8) == 0 ? rnd_below(64 * G) : rnd_below(6 * G);
    uint64_t k = rnd_below(10);
    if (k < 3)
        return rnd_below(6 * G);
    if (k < 8) /* 64..160 granules: classes of 2 and 4 sizes, near neighbours */
        return (64 + rnd_below(96)) * G - rnd_below(G);
    return rnd_below(1200 * G);
}

/* With `owners`, owners 1 to 4 are open: allocations take from random sets of
 * them, frees give to a random one (or owner 0), and now and then an owner is
 * disowned or joins others (arena.h, "Owners of free memory"). */
static void model_run_owned(uint64_t seed, bool wide, bool owners)
{
    rng_state = seed;
    /* regions of a few sizes: touching contiguous runs, touching non-contiguous
     * neighbours, and gaps; some added at the start, the others as the run goes */
    struct mregion regions[24];
    uint64_t at = 0x1000000;
    for (int i = 0; i < 24; i++) {
        uint64_t size = (uint64_t)(1 + rnd_below(16)) * (wide ? 256 : 8) * G;
        regions[i] = (struct mregion){at, size, rnd_below(4) != 0, false};
        at += size + (rnd_below(5) == 0 ? 16 * G : 0);
    }
    static struct model m;
    memset(&m, 0, sizeof m);
    m.r = regions;
    m.nr = 24;
    struct arena *a = make_arena();
    for (unsigned o = 1; owners && o <= 4; o++) {
        ASSERT_EQ(gpumem__arena_owner_open(a, o), ARENA_OK);
        model_open_owner(&m, o);
    }
    for (size_t i = 0; i < 24; i += 2) {
        model_add_region(&m, i);
        ASSERT_EQ(gpumem__arena_add_region(a, regions[i].base, regions[i].size,
                                           regions[i].contiguous),
                  ARENA_OK);
    }
    CHECK_ARENA(a);
    uint64_t live[512];
    size_t nlive = 0;
    int failures = harness_failures;
    for (int op = 0; op < 30000 && harness_failures == failures; op++) {
        uint64_t k = rnd_below(100);
        unsigned owner = owners ? (unsigned)rnd_below(5) : 0;
        if (owners && k == 0) {
            ASSERT_EQ(gpumem__arena_disown(a, owner), model_disown(&m, owner));
        } else if (owners && k == 1) {
            uint64_t join = rnd_below(32) << 1;
            gpumem__arena_set_joins(a, owner, join);
            model_set_joins(&m, owner, join);
        } else if (k < 2) {
            size_t ri = (size_t)rnd_below(24);
            if (!regions[ri].present) {
                model_add_region(&m, ri);
                ASSERT_EQ(gpumem__arena_add_region(a, regions[ri].base, regions[ri].size,
                                                   regions[ri].contiguous),
                          ARENA_OK);
            } else {
                ASSERT_EQ(gpumem__arena_add_region(a, regions[ri].base, regions[ri].size,
                                                   regions[ri].contiguous),
                          ARENA_BAD_RANGE);
            }
        } else if (k < 3) {
            uint64_t want = model_release(&m);
            /* only free memory goes, so no live chunk is lost */
            ASSERT_EQ(gpumem__arena_release_free_regions(a, NULL, NULL), want);
        } else if (k < 55 && nlive < 512) {
            uint64_t size = model_request(wide);
            uint64_t ma = 0, mg = 0, aa = 0, ag = 0,
                     set = owners ? rnd_below(32) << 1 : 0;
            int mr = model_alloc_owned(&m, size, set, &ma, &mg);
            int ar = set ? gpumem__arena_alloc_owned(a, size, set, NULL, &aa, &ag)
                         : gpumem__arena_alloc(a, size, &aa, &ag);
            ASSERT_EQ(ar, mr);
            if (mr == ARENA_OK) {
                ASSERT_EQ(aa, ma);
                ASSERT_EQ(ag, mg);
                live[nlive++] = ma;
            }
        } else if (k < 97 && nlive) {
            size_t i = (size_t)rnd_below(nlive);
            uint64_t ms = 0, as = 0;
            ASSERT_EQ(model_free_owned(&m, live[i], owner, &ms), ARENA_OK);
            ASSERT_EQ(gpumem__arena_lookup(a, live[i]), ms);
            ASSERT_EQ(owner ? gpumem__arena_free_owned(a, live[i], owner, &as)
                            : gpumem__arena_free(a, live[i], &as),
                      ARENA_OK);
            ASSERT_EQ(as, ms);
            live[i] = live[--nlive];
        } else {
            /* mostly bad frees: interior addresses, free chunks, or (when it
             * happens to start there) the next live chunk, a good free */
            uint64_t addr =
                nlive ? live[rnd_below(nlive)] + G * (1 + rnd_below(2)) : regions[0].base;
            uint64_t ms = 0, as = 0;
            int want = model_free(&m, addr, &ms);
            if (want == ARENA_OK) {
                ASSERT_EQ(gpumem__arena_free(a, addr, &as), ARENA_OK);
                ASSERT_EQ(as, ms);
                for (size_t i = 0; i < nlive; i++) {
                    if (live[i] == addr) {
                        live[i] = live[--nlive];
                        break;
                    }
                }
            } else {
                ASSERT_EQ(gpumem__arena_free(a, addr, NULL), ARENA_BAD_ADDRESS);
            }
        }
        if (op % 4 == 0)
            CHECK_ARENA(a);
        if (op % 16 == 0 && !model_matches(&m, a))
            HARNESS_FAIL("op %d: the arena's chunks differ from the model's "
                         "(seed %llu)",
                         op, (unsigned long long)seed);
        if (op % 16 == 0) {
            for (size_t i = 0; i < 24; i++) {
                uint64_t end = regions[i].base + regions[i].size;
                unsigned ao = ARENA_OWNERS, mo = ARENA_OWNERS;
                if (gpumem__arena_free_tail_owned(a, end, &ao) !=
                        model_free_tail_owned(&m, end, &mo) ||
                    ao != mo)
                    HARNESS_FAIL("op %d: the free tail at 0x%llx differs from the "
                                 "model's (seed %llu)",
                                 op, (unsigned long long)end, (unsigned long long)seed);
            }
        }
    }
    ASSERT_TRUE(model_matches(&m, a));
    gpumem__arena_destroy(a);
}

static void model_run(uint64_t seed, bool wide) { model_run_owned(seed, wide, false); }

TEST(random_operations_match_an_exact_model)
{
    model_run(20240611, false);
    model_run(20240613, false);
}

/* The same with chunks of 64 granules and more, whose classes hold several sizes:
 * a chunk that shrinks (the rest of a split) or grows (a free neighbour joins it)
 * keeps its place in the index only while it stays between its neighbours there. */
TEST(random_operations_in_wide_classes_match_an_exact_model)
{
    model_run(7, true);
    model_run(20240612, true);
    model_run(8, true);
    model_run(20240614, true);
}

/* The same with owners: every choice, join and hand-over as the model's. */
TEST(random_operations_with_owners_match_an_exact_model)
{
    model_run_owned(20261128, false, true);
    model_run_owned(31, true, true);
    model_run_owned(32, true, true);
}

/* ------------------------------------------------------------------ stress -- */

/* The test's own record of live chunks: addr -> size, open addressing. */
struct live_map {
    uint64_t *addr, *size;
    size_t cap, n;
};

static size_t lm_slot(const struct live_map *lm, uint64_t addr)
{
    size_t i = (size_t)((addr >> 8) * UINT64_C(0x9E3779B97F4A7C15) >> 40) & (lm->cap - 1);
    while (lm->addr[i] != UINT64_MAX && lm->addr[i] != addr)
        i = (i + 1) & (lm->cap - 1);
    return i;
}

struct free_scan {
    uint64_t need, best_addr, best_size, used_bytes;
    size_t used, mismatched;
    const struct live_map *lm;
    struct mchunk *free_v; /* the free chunks in address order, for model_choose */
    size_t free_n, free_cap;
};

static void scan_visit(void *ctx, uint64_t addr, uint64_t size, bool is_free)
{
    struct free_scan *s = ctx;
    if (is_free) {
        if (s->free_n == s->free_cap) {
            s->free_cap = s->free_cap ? 2 * s->free_cap : 256;
            s->free_v = realloc(s->free_v, s->free_cap * sizeof *s->free_v);
            if (!s->free_v)
                abort();
        }
        s->free_v[s->free_n++] = (struct mchunk){addr, size, true, 0};
    } else {
        size_t i = lm_slot(s->lm, addr);
        if (s->lm->addr[i] != addr || s->lm->size[i] != size)
            s->mismatched++;
        s->used++;
        s->used_bytes += size;
    }
}

TEST(randomized_stress)
{
    const uint64_t seed = 77;
    rng_state = seed;
    struct live_map lm = {NULL, NULL, 1 << 14, 0};
    lm.addr = malloc(lm.cap * sizeof *lm.addr);
    lm.size = malloc(lm.cap * sizeof *lm.size);
    uint64_t *order = malloc(8192 * sizeof *order);
    if (!lm.addr || !lm.size || !order)
        abort();
    memset(lm.addr, 0xff, lm.cap * sizeof *lm.addr);
    size_t norder = 0;
    struct arena *a = make_arena();
    uint64_t next_base = 0x100000000;
    for (int i = 0; i < 4; i++) {
        ASSERT_EQ(gpumem__arena_add_region(a, next_base, 64 * MIB, i != 2), ARENA_OK);
        next_base += 64 * MIB + (i == 1 ? 0 : MIB);
    }
    uint64_t live_bytes = 0, best_checks = 0, allocs = 0, t0 = now_ns();
    size_t peak = 0;
    const int ops = 200000;
    int failures = harness_failures;
    for (int op = 0; op < ops && harness_failures == failures; op++) {
        /* the live count follows a target that sweeps between 500 and 5,000 and
         * back, twice */
        int phase = op % (ops / 2);
        size_t target = 500 + (size_t)(phase < ops / 4 ? phase : ops / 2 - phase) * 4500 /
                                  (size_t)(ops / 4);
        bool do_alloc = norder < 8192 && rnd_below(10) < (norder < target ? 7u : 3u);
        if (do_alloc) {
            uint64_t k = rnd_below(100), size;
            if (k < 60)
                size = 1 + rnd_below(8 * G);
            else if (k < 95)
                size = 1 + rnd_below(256 * G);
            else
                size = 1 + rnd_below(4 * MIB);
            uint64_t expect_addr = UINT64_MAX, expect_size = 0;
            bool predicted = allocs++ % 50 == 0;
            struct mchunk *ties = NULL; /* below MODEL_LIST_BELOW: the free chunks of
                                           the best fit's size, any of which may win */
            size_t nties = 0;
            if (predicted) {
                /* predict the best fit from a full walk */
                struct free_scan s = {.need = size <= G ? G : (size + G - 1) / G * G,
                                      .best_addr = UINT64_MAX,
                                      .best_size = UINT64_MAX,
                                      .lm = &lm};
                gpumem__arena_walk(a, scan_visit, &s);
                ASSERT_EQ(s.mismatched, 0);
                ASSERT_EQ(s.used, lm.n);
                ASSERT_EQ(s.used_bytes, live_bytes);
                size_t pick = model_choose(s.free_v, s.free_n, s.need);
                if (pick != SIZE_MAX) {
                    s.best_addr = s.free_v[pick].addr;
                    expect_size = s.free_v[pick].size;
                }
                /* the walk does not say which chunk heads its size's list: a tie
                 * below MODEL_LIST_BELOW may go to any chunk of the best size */
                if (expect_size && expect_size < MODEL_LIST_BELOW) {
                    for (size_t t = 0; t < s.free_n; t++)
                        if (s.free_v[t].size == expect_size)
                            s.free_v[nties++] = s.free_v[t];
                    ties = s.free_v;
                } else {
                    free(s.free_v);
                }
                expect_addr = s.best_addr;
                best_checks++;
            }
            uint64_t addr, got;
            int r = gpumem__arena_alloc(a, size, &addr, &got);
            if (predicted)
                ASSERT_EQ(r == ARENA_NO_FIT, expect_addr == UINT64_MAX);
            if (ties) {
                bool among = false;
                for (size_t t = 0; t < nties; t++)
                    among |= ties[t].addr == addr;
                free(ties);
                ASSERT_TRUE(r == ARENA_OK && among);
                expect_addr = addr;
            }
            if (r == ARENA_NO_FIT) {
                ASSERT_EQ(expect_addr, UINT64_MAX);
                ASSERT_EQ(gpumem__arena_add_region(a, next_base, 64 * MIB, rnd_below(2)),
                          ARENA_OK);
                next_base += 64 * MIB + (rnd_below(2) ? MIB : 0);
                continue;
            }
            ASSERT_EQ(r, ARENA_OK);
            if (expect_addr != UINT64_MAX)
                ASSERT_EQ(addr, expect_addr);
            ASSERT_TRUE(got >= size && got - size < G + (size == 0 ? G : 0));
            size_t i = lm_slot(&lm, addr);
            if (lm.addr[i] == addr)
                HARNESS_FAIL("op %d: 0x%llx handed out twice (seed %llu)", op,
                             (unsigned long long)addr, (unsigned long long)seed);
            lm.addr[i] = addr;
            lm.size[i] = got;
            lm.n++;
            order[norder++] = addr;
            live_bytes += got;
            if (norder > peak)
                peak = norder;
        } else if (norder) {
            size_t j = (size_t)rnd_below(norder);
            uint64_t addr = order[j], size = 0;
            order[j] = order[--norder];
            ASSERT_EQ(gpumem__arena_lookup(a, addr), lm.size[lm_slot(&lm, addr)]);
            ASSERT_EQ(gpumem__arena_free(a, addr, &size), ARENA_OK);
            size_t i = lm_slot(&lm, addr);
            ASSERT_EQ(size, lm.size[i]);
            live_bytes -= size;
            /* delete, then put the rest of the probe run back */
            lm.addr[i] = UINT64_MAX;
            for (size_t k = (i + 1) & (lm.cap - 1); lm.addr[k] != UINT64_MAX;
                 k = (k + 1) & (lm.cap - 1)) {
                uint64_t ka = lm.addr[k], ks = lm.size[k];
                lm.addr[k] = UINT64_MAX;
                size_t t = lm_slot(&lm, ka);
                lm.addr[t] = ka;
                lm.size[t] = ks;
            }
            lm.n--;
            if (rnd_below(4) == 0)
                ASSERT_EQ(gpumem__arena_free(a, addr, NULL), ARENA_BAD_ADDRESS);
        }
        if (op % 20000 == 19999) {
            uint64_t cap = stats_of(a).capacity_bytes;
            uint64_t got = gpumem__arena_release_free_regions(a, NULL, NULL);
            ASSERT_EQ(stats_of(a).capacity_bytes, cap - got);
        }
        if (op % 2000 == 0)
            CHECK_ARENA(a);
    }
    CHECK_ARENA(a);
    printf("     randomized_stress: %d operations in %.3f s, up to %zu live chunks, "
           "%llu best fits predicted\n",
           ops, (double)(now_ns() - t0) / 1e9, peak, (unsigned long long)best_checks);
    struct arena_stats s = stats_of(a);
    ASSERT_EQ(s.live_chunks, lm.n);
    ASSERT_EQ(s.allocated_bytes, live_bytes);
    ASSERT_TRUE(best_checks > 1000);
    while (norder)
        ASSERT_EQ(gpumem__arena_free(a, order[--norder], NULL), ARENA_OK);
    CHECK_ARENA(a);
    s = stats_of(a);
    ASSERT_EQ(s.free_chunks, s.segments); /* everything coalesced */
    ASSERT_EQ(s.capacity_bytes, gpumem__arena_release_free_regions(a, NULL, NULL));
    CHECK_ARENA(a);
    gpumem__arena_destroy(a);
    free(lm.addr);
    free(lm.size);
    free(order);
}

/* A quadratic path at a million chunks would take minutes: the bound only has to be
 * far below that, with room for sanitizers and unoptimized builds. */

/* A million chunks: split off one by one, every other one freed in ascending order
 * (sorted insertions degenerate an unbalanced tree), the 500,000 holes of mixed
 * sizes refilled by best fit, then everything freed: a third ascending, a third
 * descending (each merging left), a third in random order (merging both ways).
 * check() bounds every treap's depth, so a degenerate (quadratic) index fails it;
 * the time is printed for the curious, never asserted (timing belongs in bench/). */
TEST(a_million_chunks)
{
    enum { N = 999999 };
    uint64_t *addr = malloc(N * sizeof *addr);
    uint64_t *perm = malloc(N / 3 * sizeof *perm);
    if (!addr || !perm)
        abort();
    rng_state = 5;
    uint64_t t0 = now_ns();
    struct arena *a = make_arena();
    ASSERT_EQ(gpumem__arena_add_region(a, 0, 4 * (uint64_t)N * G, true), ARENA_OK);
    size_t bad = 0;
    for (size_t i = 0; i < N; i++) {
        uint64_t got;
        bad += gpumem__arena_alloc(a, (1 + i % 3) * G, &addr[i], &got) != ARENA_OK;
    }
    for (size_t i = 0; i < N; i += 2)
        bad += gpumem__arena_free(a, addr[i], NULL) != ARENA_OK;
    struct arena_stats s = stats_of(a);
    ASSERT_EQ(s.live_chunks, N / 2);
    ASSERT_EQ(s.free_chunks, N / 2 + 1);
    for (size_t i = 0; i < N; i += 2) {
        uint64_t got;
        bad += gpumem__arena_alloc(a, (1 + rnd_below(3)) * G, &addr[i], &got) != ARENA_OK;
    }
    ASSERT_EQ(bad, 0);
    CHECK_ARENA(a);
    uint64_t t1 = now_ns();
    for (size_t i = 0; i < N; i += 3)
        bad += gpumem__arena_free(a, addr[i], NULL) != ARENA_OK;
    for (size_t i = N - 2; i < N; i -= 3)
        bad += gpumem__arena_free(a, addr[i], NULL) != ARENA_OK;
    size_t n = 0;
    for (size_t i = 2; i < N; i += 3)
        perm[n++] = addr[i];
    for (size_t i = n; i-- > 1;) {
        size_t j = (size_t)rnd_below(i + 1);
        uint64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    uint64_t t2 = now_ns();
    for (size_t i = 0; i < n; i++)
        bad += gpumem__arena_free(a, perm[i], NULL) != ARENA_OK;
    uint64_t t3 = now_ns();
    ASSERT_EQ(bad, 0);
    CHECK_ARENA(a);
    s = stats_of(a);
    ASSERT_EQ(s.free_chunks, 1);
    ASSERT_EQ(s.live_chunks, 0);
    gpumem__arena_destroy(a);
    double secs = (double)(now_ns() - t0) / 1e9;
    printf("     a_million_chunks: %.3f s in all; %.0f ns per ordered free, "
           "%.0f ns per random free\n",
           secs, (double)(t2 - t1) / (2.0 * N / 3), (double)(t3 - t2) / (double)n);
    free(addr);
    free(perm);
}

/* ------------------------------------- largest free chunks (pool.c) -- */

struct seen {
    uint64_t addr[4096], size[4096];
    size_t n, stop_after; /* visit returns false after this many (0: never) */
};

static bool seen_visit(void *ctx, uint64_t addr, uint64_t size)
{
    struct seen *v = ctx;
    if (v->n < 4096) {
        v->addr[v->n] = addr;
        v->size[v->n] = size;
    }
    v->n++;
    return !v->stop_after || v->n < v->stop_after;
}

struct want {
    uint64_t min, count, bytes, xor_addr;
};

static void want_visit(void *ctx, uint64_t addr, uint64_t size, bool is_free)
{
    struct want *w = ctx;
    if (is_free && size >= w->min) {
        w->count++;
        w->bytes += size;
        w->xor_addr ^= addr * 0x9E3779B97F4A7C15ull;
    }
}

/* A growing pool's trim looks at the largest holes first: every free chunk of at
 * least min_size once, sizes never rising, ties from the highest address in a
 * class of several sizes; none below min_size; and the walk stops when told. On
 * random layouts over regions that join and regions that do not. */
TEST(free_chunks_walked_largest_first)
{
    rng_state = 0x5eed1e5;
    for (int round = 0; round < 40; round++) {
        struct arena *a = make_arena();
        ASSERT_EQ(gpumem__arena_add_region(a, 0x10000000, 256u << 20, true), ARENA_OK);
        ASSERT_EQ(gpumem__arena_add_region(a, 0x40000000, 64u << 20, round % 2),
                  ARENA_OK);
        uint64_t live[600];
        size_t n = 0;
        for (int op = 0; op < 1500; op++) {
            if (n && (rnd_below(3) == 0 || n == 600)) {
                size_t k = (size_t)rnd_below(n);
                free_ok(a, live[k]);
                live[k] = live[--n];
            } else {
                /* 256 B to 4 MiB, log-uniform: classes of one size and of many */
                uint64_t size = (uint64_t)256 << rnd_below(15);
                size += rnd_below(size);
                uint64_t at, got;
                if (gpumem__arena_alloc(a, size, &at, &got) == ARENA_OK)
                    live[n++] = at;
            }
        }
        CHECK_ARENA(a);
        uint64_t mins[] = {0, 256, 4096, 16384, 100000, 1u << 20, 3u << 20};
        for (size_t m = 0; m < sizeof mins / sizeof mins[0]; m++) {
            static struct seen v;
            v.n = 0;
            v.stop_after = 0;
            gpumem__arena_walk_free_largest(a, mins[m], seen_visit, &v);
            struct want w = {mins[m], 0, 0, 0};
            gpumem__arena_walk(a, want_visit, &w);
            ASSERT_EQ(v.n, w.count);
            ASSERT_TRUE(v.n <= 4096);
            uint64_t bytes = 0, x = 0;
            for (size_t i = 0; i < v.n; i++) {
                ASSERT_TRUE(v.size[i] >= mins[m]);
                ASSERT_EQ(gpumem__arena_lookup(a, v.addr[i]), 0); /* not live */
                if (i > 0) {
                    ASSERT_TRUE(v.size[i] <= v.size[i - 1]);
                    if (v.size[i] == v.size[i - 1] && v.size[i] >= 16384)
                        ASSERT_TRUE(v.addr[i] < v.addr[i - 1]);
                }
                bytes += v.size[i];
                x ^= v.addr[i] * 0x9E3779B97F4A7C15ull;
            }
            ASSERT_EQ(bytes, w.bytes);
            ASSERT_EQ(x, w.xor_addr);
            if (v.n > 0)
                ASSERT_EQ(v.size[0], stats_of(a).largest_free);
            if (w.count > 3) { /* told to stop after three */
                v.n = 0;
                v.stop_after = 3;
                gpumem__arena_walk_free_largest(a, mins[m], seen_visit, &v);
                ASSERT_EQ(v.n, 3);
            }
        }
        while (n)
            free_ok(a, live[--n]);
        static struct seen e;
        e.n = 0;
        e.stop_after = 0;
        gpumem__arena_walk_free_largest(a, 1u << 30, seen_visit, &e);
        ASSERT_EQ(e.n, 0); /* nothing that large */
        gpumem__arena_walk_free_largest(a, 0, seen_visit, &e);
        ASSERT_EQ(e.n, 2); /* the two regions, apart: two free chunks */
        gpumem__arena_destroy(a);
    }
    struct arena *a = make_arena();
    static struct seen none;
    none.n = 0;
    none.stop_after = 0;
    gpumem__arena_walk_free_largest(a, 0, seen_visit, &none); /* an empty arena */
    ASSERT_EQ(none.n, 0);
    gpumem__arena_destroy(a);
}

int main(void)
{
    RUN(empty_arena);
    RUN(sizes_round_up_to_the_granule);
    RUN(huge_requests_do_not_fit);
    RUN(best_fit_not_first_fit);
    RUN(ties_below_16_kib_go_to_the_head_of_the_list);
    RUN(ties_from_16_kib_go_to_the_lowest_address);
    RUN(best_fit_is_exact_within_a_size_class);
    RUN(large_requests_take_the_exact_best_fit);
    RUN(holes_are_refilled_before_the_untouched_end);
    RUN(fixed_size_blocks_fill_a_hole_of_several_blocks);
    RUN(split_and_no_split);
    RUN(coalesce_left_right_both);
    RUN(contiguous_regions_coalesce);
    RUN(free_tail);
    RUN(contiguous_region_next_to_used_chunks);
    RUN(non_contiguous_regions_do_not_coalesce);
    RUN(bad_regions_are_rejected);
    RUN(bad_frees_change_nothing);
    RUN(lookup);
    RUN(release_free_regions);
    RUN(release_splits_a_segment);
    RUN(stats_and_largest_free);
    RUN(metadata_does_not_grow_with_bytes);
    RUN(host_oom_at_every_allocation);
    RUN(random_operations_match_an_exact_model);
    RUN(random_operations_in_wide_classes_match_an_exact_model);
    RUN(random_operations_with_owners_match_an_exact_model);
    RUN(an_owners_free_memory_serves_it_and_nobody_else);
    RUN(an_owners_frees_join_owner_0s_and_its_own_beyond_them);
    RUN(owned_regions_releases_and_bad_owners);
    RUN(randomized_stress);
    RUN(a_million_chunks);
    RUN(free_chunks_walked_largest_first);
    HARNESS_EXIT();
}
