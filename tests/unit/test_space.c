/* Address spaces (lib/space.c) over a backend that only records mappings: what
 * is mapped at once goes in at most eight mappings (extents), one per granule
 * when there are fewer granules, never across a region's start; whole extents
 * of a placed region can be unmapped and mapped again while the region stays
 * placed, and one that reaches past the range asked for stays; extents side by
 * side go back in one call; a region given back unmaps only what is still
 * mapped; a refused unmap keeps only the refused extent and the region's place,
 * and a run refused at once goes back one by one; a failed mapping is undone,
 * each extent tried, and what the backend cannot undo is reported held and
 * keeps the place. */
#include "harness.h"
#include "space.h"

#include <stdio.h>
#include <stdlib.h>

#define G     (64 * 1024ull) /* the double's granularity */
#define BASE  (1ull << 40)
#define SLOTS 200 /* the range: 200 granules, over four words of the map */

/* The double: one flag per granule, the length of the mapping that begins at
 * each granule (0: none begins there), the calls made and the mappings they
 * unmapped, and refusals to inject. */
static struct {
    bool mapped[SLOTS];
    size_t extent[SLOTS];
    unsigned maps, unmaps, unmapped_extents;
    unsigned fail_map, fail_unmap; /* the n-th call fails (0: none) */
    size_t refuse_at;              /* an unmap over granule refuse_at - 1 fails */
    bool stuck, held;              /* what a failing map says */
    bool range_taken;
    unsigned misuse;
    uint64_t granularity; /* what the double says its granularity is (0: G) */
} d;

static size_t slot(uint64_t addr) { return (size_t)((addr - BASE) / G); }

static gpumem_status granularity(struct backend *b, int dev, uint64_t *g,
                                 struct reason *why)
{
    (void)b, (void)dev, (void)why;
    *g = d.granularity ? d.granularity : G;
    return GPUMEM_OK;
}

static gpumem_status alloc_range(struct backend *b, int dev, uint64_t size,
                                 uint64_t *base, struct reason *why)
{
    (void)b, (void)dev, (void)why;
    if (size != SLOTS * G)
        d.misuse++;
    d.range_taken = true;
    *base = BASE;
    return GPUMEM_OK;
}

static gpumem_status free_range(struct backend *b, int dev, uint64_t base, uint64_t size,
                                struct reason *why)
{
    (void)b, (void)dev, (void)why, (void)size;
    for (size_t i = 0; i < SLOTS; i++)
        d.misuse += d.mapped[i]; /* pre: nothing mapped */
    d.misuse += base != BASE;
    d.range_taken = false;
    return GPUMEM_OK;
}

static gpumem_status map(struct backend *b, int dev, uint64_t addr, uint64_t size,
                         bool *stuck, bool *held, struct reason *why)
{
    (void)b, (void)dev;
    *stuck = *held = false;
    size_t i = slot(addr), n = (size_t)(size / G);
    if (size % G || !n || i + n > SLOTS)
        d.misuse++;
    for (size_t k = i; k < i + n && k < SLOTS; k++)
        d.misuse += d.mapped[k]; /* never over a mapping */
    if (++d.maps == d.fail_map) {
        *stuck = d.stuck;
        *held = d.held;
        if (!d.stuck)
            return gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY, "the double refuses");
    }
    for (size_t k = i; k < i + n && k < SLOTS; k++)
        d.mapped[k] = true;
    d.extent[i] = n;
    return d.maps == d.fail_map
               ? gpumem__reason(why, GPUMEM_ERR_OUT_OF_MEMORY, "the double refuses")
               : GPUMEM_OK;
}

/* A run of whole mappings side by side, as cuMemUnmap takes (CUDA's
 * vectorAddMMAP sample unmaps its stripes in one call), never a part of one. */
static gpumem_status unmap(struct backend *b, int dev, uint64_t addr, uint64_t size,
                           struct reason *why)
{
    (void)b, (void)dev;
    size_t i = slot(addr), n = (size_t)(size / G), at = i, whole = 0;
    while (at < i + n && at < SLOTS && d.extent[at] && at + d.extent[at] <= i + n)
        at += d.extent[at], whole++;
    if (i >= SLOTS || !n || at != i + n || size % G)
        d.misuse++;
    ++d.unmaps;
    if (d.unmaps == d.fail_unmap ||
        (d.refuse_at && d.refuse_at - 1 >= i && d.refuse_at - 1 < i + n))
        return gpumem__reason(why, GPUMEM_ERR_BACKEND, "the double refuses");
    for (size_t k = i; k < i + n && k < SLOTS; k++) {
        d.mapped[k] = false;
        d.extent[k] = 0;
    }
    d.unmapped_extents += whole;
    return GPUMEM_OK;
}

static const struct backend_ops ops = {
    .name = "double",
    .space_granularity = granularity,
    .space_alloc_range = alloc_range,
    .space_free_range = free_range,
    .space_map = map,
    .space_unmap = unmap,
};

static struct backend backend = {.ops = &ops, .regions_contiguous = true};

static unsigned mapped_count(void)
{
    unsigned n = 0;
    for (size_t i = 0; i < SLOTS; i++)
        n += d.mapped[i];
    return n;
}

static struct space *fresh(void)
{
    memset(&d, 0, sizeof d);
    struct space *sp = NULL;
    struct reason why;
    ASSERT_OK(gpumem__space_create(&backend, 0, SLOTS * G, &sp, &why));
    return sp;
}

TEST(a_region_is_mapped_granule_by_granule_and_given_back_in_one_call)
{
    struct space *sp = fresh();
    struct reason why;
    uint64_t a = 0, b = 0, held = 1, kept = 1;
    ASSERT_OK(gpumem__space_map(sp, 4 * G, &a, &held, &why));
    ASSERT_EQ(a, BASE);
    ASSERT_EQ(held, 0);
    ASSERT_EQ(d.maps, 4);
    ASSERT_OK(gpumem__space_map(sp, 2 * G, &b, &held, &why));
    ASSERT_EQ(b, BASE + 4 * G); /* side by side */
    ASSERT_EQ(mapped_count(), 6);
    ASSERT_EQ(gpumem__space_unmapped(sp), 0);
    ASSERT_OK(gpumem__space_unmap(sp, a, 4 * G, &kept, &why));
    ASSERT_EQ(kept, 0);
    ASSERT_EQ(d.unmaps, 1); /* its four extents side by side: one call */
    ASSERT_EQ(d.unmapped_extents, 4);
    ASSERT_EQ(mapped_count(), 2);
    ASSERT_OK(gpumem__space_unmap(sp, b, 2 * G, &kept, &why));
    ASSERT_OK(gpumem__space_destroy(sp, &why));
    ASSERT_FALSE(d.range_taken);
    ASSERT_EQ(d.misuse, 0);
}

TEST(granules_inside_a_region_go_back_and_are_mapped_again)
{
    struct space *sp = fresh();
    struct reason why;
    uint64_t a = 0, held = 0, bytes = 0, kept = 1;
    ASSERT_OK(gpumem__space_map(sp, 8 * G, &a, &held, &why));
    ASSERT_OK(gpumem__space_unmap_part(sp, a + 2 * G, 3 * G, &bytes, &why));
    ASSERT_EQ(bytes, 3 * G);
    ASSERT_EQ(d.unmaps, 1);
    ASSERT_EQ(mapped_count(), 5);
    ASSERT_EQ(gpumem__space_unmapped(sp), 3 * G);
    ASSERT_EQ(gpumem__space_unmapped_in(sp, a, 8 * G), 3 * G);
    ASSERT_EQ(gpumem__space_unmapped_in(sp, a + 4 * G, 4 * G), G);
    ASSERT_EQ(gpumem__space_unmapped_in(sp, a, 2 * G), 0);
    /* unmapping again gives nothing back and calls nothing */
    unsigned unmaps = d.unmaps;
    ASSERT_OK(gpumem__space_unmap_part(sp, a + 2 * G, 3 * G, &bytes, &why));
    ASSERT_EQ(bytes, 0);
    ASSERT_EQ(d.unmaps, unmaps);
    /* mapping a range that overlaps mapped and unmapped granules maps only these */
    unsigned maps = d.maps;
    ASSERT_OK(gpumem__space_map_part(sp, a + G, 2 * G, &bytes, &held, &why));
    ASSERT_EQ(bytes, G);
    ASSERT_EQ(d.maps, maps + 1);
    ASSERT_EQ(gpumem__space_unmapped(sp), 2 * G);
    /* the region given back whole unmaps what is still mapped, and its place is
     * free again: the next region lands there */
    ASSERT_OK(gpumem__space_unmap(sp, a, 8 * G, &kept, &why));
    ASSERT_EQ(kept, 0);
    ASSERT_EQ(mapped_count(), 0);
    ASSERT_EQ(gpumem__space_unmapped(sp), 0);
    uint64_t again = 0;
    ASSERT_OK(gpumem__space_map(sp, 8 * G, &again, &held, &why));
    ASSERT_EQ(again, a);
    ASSERT_OK(gpumem__space_unmap(sp, again, 8 * G, &kept, &why));
    ASSERT_OK(gpumem__space_destroy(sp, &why));
    ASSERT_EQ(d.misuse, 0);
}

/* The check a growing pool makes on every allocation while it has given
 * granules back, and the count pool_back makes: whether a range has an
 * unmapped granule and how many, against the test's own record of the
 * granules given back, on random ranges over a region that spans four words of
 * the map (ranges within a word, across words, on and off word boundaries). */
TEST(any_unmapped_answers_as_the_count_does)
{
    struct space *sp = fresh();
    struct reason why;
    uint64_t a = 0, held = 0, bytes = 0, kept = 1, rng = 0x2545F4914F6CDD1Dull;
    bool gone[SLOTS] = {false};
    /* a region per granule: each granule its own extent, to be given back alone */
    for (size_t i = 0; i < SLOTS; i++) {
        uint64_t at = 0;
        ASSERT_OK(gpumem__space_map(sp, G, &at, &held, &why));
        ASSERT_EQ(at, BASE + i * G);
    }
    a = BASE;
    ASSERT_FALSE(gpumem__space_any_unmapped(sp, a, SLOTS * G)); /* all mapped */
    ASSERT_EQ(gpumem__space_unmapped_in(sp, a, SLOTS * G), 0);
    for (int round = 0; round < 24; round++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        uint64_t at = round == 0 ? 63 : round == 1 ? 64 : rng % SLOTS; /* a word's ends */
        ASSERT_OK(gpumem__space_unmap_part(sp, a + at * G, G, &bytes, &why));
        ASSERT_EQ(bytes, gone[at] ? 0 : G);
        gone[at] = true;
        for (int k = 0; k < 400; k++) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            uint64_t lo = rng % SLOTS, n = 1 + (rng >> 32) % (SLOTS - lo), want = 0;
            if (k % 4 == 0) /* short ranges: most allocations are */
                n = 1 + (rng >> 40) % (SLOTS - lo < 3 ? SLOTS - lo : 3);
            for (uint64_t j = lo; j < lo + n; j++)
                want += gone[j];
            ASSERT_EQ(gpumem__space_unmapped_in(sp, a + lo * G, n * G), want * G);
            ASSERT_EQ(gpumem__space_any_unmapped(sp, a + lo * G, n * G), want != 0);
        }
    }
    ASSERT_TRUE(gpumem__space_any_unmapped(sp, a, SLOTS * G));
    for (size_t i = 0; i < SLOTS; i++)
        ASSERT_OK(gpumem__space_unmap(sp, a + i * G, G, &kept, &why));
    ASSERT_OK(gpumem__space_destroy(sp, &why));
    ASSERT_EQ(d.misuse, 0);
}

/* The map is read by shifts: a granularity that is not a power of two (no
 * backend gives one; CUDA's refuses it already) is refused before a range is
 * taken. */
TEST(a_granularity_not_a_power_of_two_is_refused)
{
    memset(&d, 0, sizeof d);
    d.granularity = 3 * G;
    struct space *sp = NULL;
    struct reason why;
    ASSERT_STATUS(gpumem__space_create(&backend, 0, SLOTS * G, &sp, &why),
                  GPUMEM_ERR_UNSUPPORTED);
    ASSERT_CONTAINS(why.text, "not a power of two");
    ASSERT_TRUE(sp == NULL);
    ASSERT_FALSE(d.range_taken);
}

TEST(a_refused_unmap_keeps_only_that_granule_and_the_place)
{
    struct space *sp = fresh();
    struct reason why;
    uint64_t a = 0, b = 0, held = 0, kept = 0;
    ASSERT_OK(gpumem__space_map(sp, 4 * G, &a, &held, &why));
    d.refuse_at = slot(a) + 1 + 1; /* the second granule's extent */
    ASSERT_STATUS(gpumem__space_unmap(sp, a, 4 * G, &kept, &why), GPUMEM_ERR_BACKEND);
    ASSERT_CONTAINS(why.text, "the double refuses");
    ASSERT_EQ(kept, G);
    /* the run refused whole, then extent by extent: the first, the second
     * (refused), and the two after it as a run */
    ASSERT_EQ(d.unmaps, 4);
    ASSERT_EQ(mapped_count(), 1); /* the other three went back */
    ASSERT_TRUE(d.mapped[slot(a) + 1]);
    d.refuse_at = 0;
    ASSERT_EQ(gpumem__space_unmapped(sp), 3 * G); /* of a region still placed */
    ASSERT_OK(gpumem__space_map(sp, 4 * G, &b, &held, &why));
    ASSERT_EQ(b, a + 4 * G); /* its addresses are not used again */
    ASSERT_OK(gpumem__space_unmap(sp, b, 4 * G, &kept, &why));
    /* the range stays reserved under the granule still mapped */
    ASSERT_STATUS(gpumem__space_destroy(sp, &why), GPUMEM_ERR_BACKEND);
    ASSERT_TRUE(d.range_taken);
    ASSERT_EQ(d.misuse, 0);
}

/* The two steps of a pass that lets its owner's lock go around the backend's
 * calls: claimed extents leave the bitmaps at once, without a backend call, and
 * are unmapped later, claims side by side in one call, between the owner's
 * hooks; a refusal puts that extent and the ones after it back, still
 * mapped. */
static unsigned left, entered;
static void count_leave(void *ctx) { (void)ctx, left++; }
static void count_enter(void *ctx) { (void)ctx, entered++; }

TEST(claimed_extents_leave_the_bitmaps_at_once_and_a_refusal_puts_the_rest_back)
{
    struct space *sp = fresh();
    struct reason why;
    uint64_t a = 0, held = 0, bytes = 1, back = 1, kept = 1;
    ASSERT_OK(gpumem__space_map(sp, 8 * G, &a, &held, &why)); /* granule by granule */
    left = entered = 0;
    gpumem__space_set_hooks(sp, count_leave, count_enter, NULL, NULL);
    ASSERT_EQ(gpumem__space_claim_part(sp, a + G, 3 * G), 3 * G);
    ASSERT_EQ(gpumem__space_claim_part(sp, a + 5 * G, 2 * G), 2 * G);
    ASSERT_EQ(d.unmaps, 0); /* nothing asked of the backend yet */
    ASSERT_EQ(mapped_count(), 8);
    ASSERT_EQ(gpumem__space_unmapped(sp), 5 * G);
    ASSERT_EQ(gpumem__space_unmapped_in(sp, a, 8 * G), 5 * G);
    ASSERT_TRUE(gpumem__space_any_unmapped(sp, a + 6 * G, G));
    /* the unmap of a + 2G is refused: the first claim's run is refused whole,
     * then extent by extent: a + G went, a + 2G and the rest come back */
    d.refuse_at = slot(a) + 2 + 1;
    ASSERT_STATUS(gpumem__space_unmap_claimed(sp, &bytes, &back, &why),
                  GPUMEM_ERR_BACKEND);
    ASSERT_CONTAINS(why.text, "the double refuses");
    ASSERT_EQ(bytes, G);
    ASSERT_EQ(back, 4 * G);
    ASSERT_EQ(d.unmaps, 3);
    ASSERT_EQ(left, 1); /* the owner's lock let go once for the run's calls */
    ASSERT_EQ(entered, 1);
    d.refuse_at = 0;
    ASSERT_EQ(mapped_count(), 7);
    ASSERT_EQ(gpumem__space_unmapped(sp), G);
    ASSERT_EQ(gpumem__space_unmapped_in(sp, a + 2 * G, 6 * G), 0);
    /* nothing is left claimed: a second pass unmaps only what it claims */
    ASSERT_OK(gpumem__space_unmap_claimed(sp, &bytes, &back, &why));
    ASSERT_EQ(bytes, 0);
    ASSERT_EQ(d.unmaps, 3);
    ASSERT_EQ(gpumem__space_claim_part(sp, a + 2 * G, 6 * G), 6 * G);
    ASSERT_OK(gpumem__space_unmap_claimed(sp, &bytes, &back, &why));
    ASSERT_EQ(bytes, 6 * G);
    ASSERT_EQ(back, 0);
    ASSERT_EQ(d.unmaps, 4); /* six extents side by side: one call */
    ASSERT_EQ(mapped_count(), 1);
    ASSERT_OK(gpumem__space_unmap(sp, a, 8 * G, &kept, &why));
    ASSERT_EQ(kept, 0);
    ASSERT_EQ(gpumem__space_unmapped(sp), 0);
    ASSERT_OK(gpumem__space_destroy(sp, &why));
    ASSERT_EQ(d.misuse, 0);
}

/* A driver that would not unmap a run of mappings at once (the double refuses
 * the call for the run once): the space unmaps them one by one, the call
 * succeeds, and the owner's warn hook says what was refused. */
static unsigned warned;
static char warned_text[256];
static void count_warn(void *ctx, const char *text)
{
    (void)ctx, warned++;
    snprintf(warned_text, sizeof warned_text, "%s", text);
}

TEST(a_refused_run_goes_back_one_by_one_and_says_so)
{
    struct space *sp = fresh();
    struct reason why;
    uint64_t a = 0, held = 0, bytes = 0, kept = 1;
    warned = 0;
    gpumem__space_set_hooks(sp, NULL, NULL, count_warn, NULL);
    ASSERT_OK(gpumem__space_map(sp, 3 * G, &a, &held, &why));
    d.fail_unmap = d.unmaps + 1; /* the run's call, once */
    ASSERT_OK(gpumem__space_unmap_part(sp, a, 3 * G, &bytes, &why));
    ASSERT_EQ(bytes, 3 * G);
    ASSERT_EQ(d.unmaps, 4); /* the run, then its three extents */
    ASSERT_EQ(d.unmapped_extents, 3);
    ASSERT_EQ(mapped_count(), 0);
    ASSERT_EQ(warned, 1);
    ASSERT_CONTAINS(warned_text, "the double refuses");
    /* one extent alone has nothing to split: a refusal is the caller's */
    ASSERT_OK(gpumem__space_map_part(sp, a, G, &bytes, &held, &why));
    d.fail_unmap = d.unmaps + 1;
    ASSERT_STATUS(gpumem__space_unmap_part(sp, a, G, &bytes, &why), GPUMEM_ERR_BACKEND);
    ASSERT_EQ(warned, 1);
    ASSERT_EQ(mapped_count(), 1);
    ASSERT_OK(gpumem__space_unmap(sp, a, 3 * G, &kept, &why));
    ASSERT_EQ(kept, 0);
    ASSERT_OK(gpumem__space_destroy(sp, &why));
    ASSERT_EQ(d.misuse, 0);
}

TEST(a_failed_mapping_is_undone_and_each_extent_tried)
{
    struct space *sp = fresh();
    struct reason why;
    uint64_t a = 0, held = 1, kept = 0;
    d.fail_map = 3; /* the third granule: two are undone, nothing is held */
    ASSERT_STATUS(gpumem__space_map(sp, 5 * G, &a, &held, &why),
                  GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_EQ(held, 0);
    ASSERT_EQ(d.unmaps, 1); /* the two, side by side, in one call */
    ASSERT_EQ(mapped_count(), 0);
    ASSERT_OK(gpumem__space_map(sp, 5 * G, &a, &held, &why));
    ASSERT_EQ(a, BASE); /* the place was freed */
    ASSERT_OK(gpumem__space_unmap(sp, a, 5 * G, &kept, &why));

    /* the failing granule's memory stays taken: held, but the place is free */
    d.fail_map = d.maps + 2;
    d.held = true;
    ASSERT_STATUS(gpumem__space_map(sp, 3 * G, &a, &held, &why),
                  GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_EQ(held, G);
    ASSERT_EQ(mapped_count(), 0);

    /* stuck: its addresses stay mapped; an undo refused too: both held, the
     * place kept, and the next region goes above it */
    d.fail_map = d.maps + 3;
    d.stuck = true;
    d.refuse_at = 1; /* the first granule (the place is free: at BASE again) */
    ASSERT_STATUS(gpumem__space_map(sp, 4 * G, &a, &held, &why),
                  GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_EQ(held, 2 * G);
    ASSERT_EQ(mapped_count(), 2); /* the first and the stuck third; the second went */
    ASSERT_TRUE(d.mapped[0] && !d.mapped[1] && d.mapped[2]);
    ASSERT_EQ(gpumem__space_unmapped(sp), 2 * G);
    d.fail_map = 0;
    d.refuse_at = 0;
    uint64_t b = 0;
    ASSERT_OK(gpumem__space_map(sp, 4 * G, &b, &held, &why));
    ASSERT_EQ(b, BASE + 4 * G);
    ASSERT_OK(gpumem__space_unmap(sp, b, 4 * G, &kept, &why));
    ASSERT_STATUS(gpumem__space_destroy(sp, &why), GPUMEM_ERR_BACKEND);
    ASSERT_EQ(d.misuse, 0);
}

/* A growth of any size costs at most eight mappings, and goes back in one call. */
TEST(a_large_region_is_mapped_in_eight_extents_and_given_back_in_one_call)
{
    struct space *sp = fresh();
    struct reason why;
    uint64_t a = 0, held = 1, kept = 1;
    ASSERT_OK(gpumem__space_map(sp, 100 * G, &a, &held, &why));
    ASSERT_EQ(d.maps, 8); /* seven of 13 granules and one of 9 */
    ASSERT_EQ(d.extent[0], 13);
    ASSERT_EQ(d.extent[91], 9);
    ASSERT_EQ(mapped_count(), 100);
    ASSERT_OK(gpumem__space_unmap(sp, a, 100 * G, &kept, &why));
    ASSERT_EQ(kept, 0);
    ASSERT_EQ(d.unmaps, 1); /* the eight side by side */
    ASSERT_EQ(d.unmapped_extents, 8);
    ASSERT_OK(gpumem__space_destroy(sp, &why));
    ASSERT_EQ(d.misuse, 0);
}

/* Only whole extents go back; landing on them maps each run of a region in
 * extents of its own, never one across the start of the next region. */
TEST(whole_extents_go_back_and_runs_are_mapped_again_region_by_region)
{
    struct space *sp = fresh();
    struct reason why;
    uint64_t a = 0, b = 0, held = 0, bytes = 0, kept = 1;
    ASSERT_OK(gpumem__space_map(sp, 20 * G, &a, &held, &why)); /* 3 granules each */
    ASSERT_OK(gpumem__space_map(sp, 20 * G, &b, &held, &why));
    ASSERT_EQ(b, a + 20 * G);
    ASSERT_EQ(d.maps, 14);
    /* [a + 2G, a + 10G) holds the extents [3, 6) and [6, 9) whole, not [0, 3)
     * nor [9, 12), which reach past it */
    ASSERT_OK(gpumem__space_unmap_part(sp, a + 2 * G, 8 * G, &bytes, &why));
    ASSERT_EQ(bytes, 6 * G);
    ASSERT_EQ(d.unmaps, 1); /* the two side by side */
    ASSERT_EQ(d.unmapped_extents, 2);
    ASSERT_EQ(gpumem__space_unmapped(sp), 6 * G);
    /* both regions' extents given back from a's 12th granule to b's 9th: a's
     * [12, 20) and b's [0, 9) */
    ASSERT_OK(gpumem__space_unmap_part(sp, a + 12 * G, 17 * G, &bytes, &why));
    ASSERT_EQ(bytes, 17 * G);
    ASSERT_EQ(d.unmaps, 2); /* one call across the regions' boundary */
    /* mapped again run by run: a's 6 granules and a's 8 one by one, b's 9 in
     * five of 2 (and 1), none across b's start (the double refuses to unmap a
     * part of a mapping, so giving a back alone below would fail) */
    unsigned maps = d.maps;
    ASSERT_OK(gpumem__space_map_part(sp, a, 40 * G, &bytes, &held, &why));
    ASSERT_EQ(bytes, 23 * G);
    ASSERT_EQ(d.maps, maps + 6 + 8 + 5);
    ASSERT_EQ(gpumem__space_unmapped(sp), 0);
    ASSERT_OK(gpumem__space_unmap(sp, a, 20 * G, &kept, &why)); /* a's alone */
    ASSERT_EQ(kept, 0);
    ASSERT_EQ(mapped_count(), 20);
    ASSERT_OK(gpumem__space_unmap(sp, b, 20 * G, &kept, &why));
    ASSERT_OK(gpumem__space_destroy(sp, &why));
    ASSERT_EQ(d.misuse, 0);
}

int main(void)
{
    RUN(a_region_is_mapped_granule_by_granule_and_given_back_in_one_call);
    RUN(granules_inside_a_region_go_back_and_are_mapped_again);
    RUN(any_unmapped_answers_as_the_count_does);
    RUN(a_granularity_not_a_power_of_two_is_refused);
    RUN(a_refused_unmap_keeps_only_that_granule_and_the_place);
    RUN(claimed_extents_leave_the_bitmaps_at_once_and_a_refusal_puts_the_rest_back);
    RUN(a_refused_run_goes_back_one_by_one_and_says_so);
    RUN(a_failed_mapping_is_undone_and_each_extent_tried);
    RUN(a_large_region_is_mapped_in_eight_extents_and_given_back_in_one_call);
    RUN(whole_extents_go_back_and_runs_are_mapped_again_region_by_region);
    HARNESS_EXIT();
}
