/* Snapshots from below: the arena's owner words and its walk by segment, the
 * pool's copy (sequence numbers, requested sizes, tags, region kinds), a copy
 * taken while eight threads allocate and free (each copy must tile its segments
 * and agree with its own counters), the out-of-memory report, and the JSON of a
 * runtime over simulated GPUs (the Python tests check it against the viewer's
 * rules). */
#include "arena.h"
#include "harness.h"
#include "pool_util.h"
#include "tag.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct walked {
    uint64_t seg_base[8], seg_size[8];
    size_t nsegs;
    struct arena_chunk_info chunks[64];
    size_t nchunks;
};

static void on_segment(void *ctx, uint64_t base, uint64_t size)
{
    struct walked *w = ctx;
    w->seg_base[w->nsegs] = base;
    w->seg_size[w->nsegs++] = size;
}

static void on_chunk(void *ctx, const struct arena_chunk_info *c)
{
    struct walked *w = ctx;
    w->chunks[w->nchunks++] = *c;
}

TEST(arena_keeps_the_owner_words_of_live_chunks)
{
    struct arena *a;
    ASSERT_EQ(gpumem__arena_create(NULL, &a), ARENA_OK);
    ASSERT_EQ(gpumem__arena_add_region(a, 1 << 20, 1 << 20, false), ARENA_OK);
    ASSERT_EQ(gpumem__arena_add_region(a, 4 << 20, 1 << 20, false), ARENA_OK);
    uint64_t p[4], got;
    const uint64_t u1[ARENA_USER_WORDS] = {11, 12, 13},
                   u2[ARENA_USER_WORDS] = {21, 22, 23};
    ASSERT_EQ(gpumem__arena_alloc_user(a, 1000, u1, &p[0], &got), ARENA_OK);
    ASSERT_EQ(got, 1024);
    ASSERT_EQ(gpumem__arena_alloc(a, 256, &p[1], &got), ARENA_OK); /* zeros */
    ASSERT_EQ(gpumem__arena_alloc_user(a, 512, u2, &p[2], &got), ARENA_OK);
    ASSERT_EQ(gpumem__arena_free(a, p[1], NULL), ARENA_OK); /* a hole between */
    ASSERT_TRUE(gpumem__arena_check(a, NULL, 0));

    struct walked w = {0};
    gpumem__arena_walk_user(a, on_segment, on_chunk, &w);
    ASSERT_EQ(w.nsegs, 2);
    ASSERT_EQ(w.seg_base[0], 1 << 20);
    ASSERT_EQ(w.seg_base[1], 4 << 20);
    ASSERT_EQ(w.nchunks, 5); /* u1, hole, u2, rest; the second region whole */
    uint64_t at = w.seg_base[0];
    for (size_t i = 0; i < 4; i++) { /* the first segment's chunks tile it */
        ASSERT_EQ(w.chunks[i].addr, at);
        at += w.chunks[i].size;
    }
    ASSERT_EQ(at, w.seg_base[0] + w.seg_size[0]);
    ASSERT_FALSE(w.chunks[0].is_free);
    ASSERT_EQ(w.chunks[0].user[0], 11);
    ASSERT_EQ(w.chunks[0].user[2], 13);
    ASSERT_TRUE(w.chunks[1].is_free);
    ASSERT_EQ(w.chunks[1].user[0], 0); /* a free chunk's words are its links: hidden */
    ASSERT_EQ(w.chunks[2].user[1], 22);
    ASSERT_TRUE(w.chunks[3].is_free);
    ASSERT_TRUE(w.chunks[4].is_free);

    /* a chunk allocated plainly into a record that held words carries zeros */
    ASSERT_EQ(gpumem__arena_free(a, p[2], NULL), ARENA_OK);
    ASSERT_EQ(gpumem__arena_alloc(a, 512, &p[3], &got), ARENA_OK);
    memset(&w, 0, sizeof w);
    gpumem__arena_walk_user(a, on_segment, on_chunk, &w);
    for (size_t i = 0; i < w.nchunks; i++)
        if (w.chunks[i].addr == p[3])
            ASSERT_EQ(w.chunks[i].user[1], 0);
    ASSERT_TRUE(gpumem__arena_check(a, NULL, 0));
    gpumem__arena_destroy(a);
}

/* ---------------------------------------------------------------- pools -- */

static void setup(void) { pool_fixture_open("snap:4GiB"); }

static void teardown(void) { pool_fixture_close(); }

/* Every segment tiled by its chunks in address order, the live bytes those of
 * the counters. Returns the live chunks. */
static size_t check_copy(const struct pool_copy *c)
{
    uint64_t live = 0, reserved = 0;
    size_t nlive = 0, next = 0;
    for (size_t g = 0; g < c->nsegs; g++) {
        const struct pool_segment *s = &c->segs[g];
        ASSERT_EQ(s->first, next);
        uint64_t at = s->base;
        for (size_t i = s->first; i < s->first + s->count; i++) {
            const struct pool_chunk *k = &c->chunks[i];
            ASSERT_EQ(k->addr, at);
            at += k->size;
            if (!k->is_free) {
                live += k->size;
                nlive++;
                CHECK(k->requested > 0 && k->requested <= k->size &&
                      k->size - k->requested < 256);
                CHECK(k->seq > 0);
            }
        }
        ASSERT_EQ(at, s->base + s->size);
        reserved += s->size;
        next = s->first + s->count;
    }
    ASSERT_EQ(next, c->nchunks);
    ASSERT_EQ(live, c->info.current_bytes);
    ASSERT_EQ(reserved, c->info.reserved_bytes);
    return nlive;
}

TEST(pool_copy_has_sequence_requested_size_tag_and_kind)
{
    setup();
    struct pool *pool = make_pool(1 * GPUMEM_GIB, true);
    uint64_t a, b, c;
    ASSERT_OK(gpumem__pool_alloc(pool, 1000, &a, &why));
    ASSERT_OK(gpumem_set_tag("weights"));
    ASSERT_OK(gpumem__pool_alloc(pool, 300 * GPUMEM_MIB + 5, &b, &why));
    ASSERT_OK(gpumem_set_tag(NULL));
    ASSERT_OK(gpumem__pool_alloc(pool, 4096, &c, &why));
    ASSERT_OK(gpumem__pool_free(pool, c, &why));
    ASSERT_OK(gpumem__pool_alloc(pool, 2000, &c, &why));

    struct pool_copy copy;
    ASSERT_OK(gpumem__pool_copy(pool, &copy, &why));
    ASSERT_EQ(check_copy(&copy), 3);
    /* a 2 MiB region, then what 300 MiB + 5 lacks beyond that region's free tail,
     * rounded to the 2 MiB granularity: 300 MiB (simulated regions touch: one
     * segment) */
    ASSERT_EQ(copy.info.reserved_bytes, 302 * GPUMEM_MIB);
    for (size_t i = 0; i < copy.nchunks; i++) {
        const struct pool_chunk *k = &copy.chunks[i];
        if (k->addr == a) {
            ASSERT_EQ(k->seq, 1);
            ASSERT_EQ(k->requested, 1000);
            ASSERT_TRUE(k->tag == NULL);
        } else if (k->addr == b) {
            ASSERT_EQ(k->seq, 2);
            ASSERT_EQ(k->requested, 300 * GPUMEM_MIB + 5);
            ASSERT_STREQ(k->tag, "weights");
        } else if (k->addr == c) {
            ASSERT_EQ(k->seq, 4); /* the freed third counts */
            ASSERT_EQ(k->requested, 2000);
        }
    }
    /* the simulated GPU models virtual memory: a growing pool maps its regions
     * into its address range */
    for (size_t g = 0; g < copy.nsegs; g++)
        ASSERT_EQ(copy.segs[g].kind, POOL_REGION_VMM);
    ASSERT_EQ(copy.growth, true);
    gpumem__pool_copy_free(&copy);
    gpumem__pool_destroy(pool);

    pool = make_pool(64 * GPUMEM_MIB, false);
    ASSERT_OK(gpumem__pool_take_budget(pool, &why));
    ASSERT_OK(gpumem__pool_copy(pool, &copy, &why));
    ASSERT_EQ(copy.nsegs, 1);
    ASSERT_EQ(copy.segs[0].kind, POOL_REGION_GREEDY);
    ASSERT_EQ(copy.nchunks, 1);
    ASSERT_TRUE(copy.chunks[0].is_free);
    gpumem__pool_copy_free(&copy);
    gpumem__pool_destroy(pool);
    teardown();
}

TEST(tags_are_interned_and_checked)
{
    char long_tag[200];
    memset(long_tag, 'x', sizeof long_tag - 1);
    long_tag[sizeof long_tag - 1] = '\0';
    ASSERT_STATUS(gpumem_set_tag(long_tag), GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(gpumem_last_error(), "at most 127");
    char text[16];
    snprintf(text, sizeof text, "layer-%d", 7);
    ASSERT_OK(gpumem_set_tag(text));
    const char *first = gpumem_get_tag();
    ASSERT_TRUE(first != text); /* a copy: the caller's buffer may go */
    memset(text, 0, sizeof text);
    ASSERT_STREQ(gpumem_get_tag(), "layer-7");
    ASSERT_OK(gpumem_set_tag("layer-7"));
    ASSERT_TRUE(gpumem_get_tag() == first); /* one copy per text */
    ASSERT_OK(gpumem_set_tag(""));
    ASSERT_TRUE(gpumem_get_tag() == NULL);
}

struct churn {
    struct pool *pool;
    int id;
    _Atomic int *stop;
};

static void *churn_thread(void *arg)
{
    struct churn *c = arg;
    uint64_t held[32] = {0};
    unsigned rng = (unsigned)c->id * 2654435761u + 1;
    char tag[16];
    snprintf(tag, sizeof tag, "thread-%d", c->id);
    gpumem_set_tag(tag);
    struct reason r;
    while (!atomic_load(c->stop)) {
        rng = rng * 1103515245u + 12345u;
        unsigned i = (rng >> 8) % 32;
        if (held[i]) {
            gpumem__pool_free(c->pool, held[i], &r);
            held[i] = 0;
        } else if (gpumem__pool_alloc(c->pool, 1 + (rng >> 12) % (256 * 1024), &held[i],
                                      &r) != GPUMEM_OK) {
            held[i] = 0;
        }
    }
    for (unsigned i = 0; i < 32; i++)
        if (held[i])
            gpumem__pool_free(c->pool, held[i], &r);
    return NULL;
}

TEST(copies_during_eight_allocating_threads_are_consistent)
{
    setup();
    struct pool *pool = make_pool(1 * GPUMEM_GIB, true);
    _Atomic int stop = 0;
    pthread_t t[8];
    struct churn c[8];
    for (int i = 0; i < 8; i++) {
        c[i] = (struct churn){pool, i, &stop};
        pthread_create(&t[i], NULL, churn_thread, &c[i]);
    }
    /* At least 300 copies, and on until one has seen the threads' allocations
     * (at most 10 s): on a loaded machine, or unoptimized, 300 copies can all
     * come before the threads get going. */
    size_t most = 0;
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (int round = 0;; round++) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (round >= 300 && (most > 8 || now.tv_sec - start.tv_sec >= 10))
            break;
        struct pool_copy copy;
        ASSERT_OK(gpumem__pool_copy(pool, &copy, &why));
        size_t n = check_copy(&copy);
        most = n > most ? n : most;
        for (size_t i = 0; i < copy.nchunks; i++)
            if (!copy.chunks[i].is_free)
                CHECK(copy.chunks[i].tag &&
                      strncmp(copy.chunks[i].tag, "thread-", 7) == 0);
        gpumem__pool_copy_free(&copy);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < 8; i++)
        pthread_join(t[i], NULL);
    CHECK(most > 8); /* the copies saw the threads' allocations */
    gpumem__pool_destroy(pool);
    teardown();
}

TEST(out_of_memory_names_cached_bytes_and_the_largest_allocations)
{
    setup();
    struct pool *pool = make_pool(64 * GPUMEM_MIB, false);
    ASSERT_OK(gpumem__pool_take_budget(pool, &why));
    uint64_t p[8];
    ASSERT_OK(gpumem_set_tag("kv-cache"));
    for (int i = 0; i < 8; i++)
        ASSERT_OK(gpumem__pool_alloc(pool, 8 * GPUMEM_MIB - 256, &p[i], &why));
    ASSERT_OK(gpumem_set_tag(NULL));
    ASSERT_OK(gpumem__pool_free(pool, p[1], &why)); /* two holes of 8 MiB */
    ASSERT_OK(gpumem__pool_free(pool, p[5], &why));
    uint64_t q;
    ASSERT_STATUS(gpumem__pool_alloc(pool, 12 * GPUMEM_MIB, &q, &why),
                  GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_CONTAINS(why.text, "cached 16.00 MiB");
    ASSERT_CONTAINS(why.text, "largest free block 8.00 MiB");
    ASSERT_CONTAINS(why.text, "unusable for this request 16.00 MiB");
    ASSERT_CONTAINS(why.text, "largest live: 8.00 MiB 'kv-cache', 8.00 MiB 'kv-cache'");
    gpumem__pool_destroy(pool);
    teardown();
}

int main(void)
{
    RUN(arena_keeps_the_owner_words_of_live_chunks);
    RUN(pool_copy_has_sequence_requested_size_tag_and_kind);
    RUN(tags_are_interned_and_checked);
    RUN(copies_during_eight_allocating_threads_are_consistent);
    RUN(out_of_memory_names_cached_bytes_and_the_largest_allocations);
    HARNESS_EXIT();
}
