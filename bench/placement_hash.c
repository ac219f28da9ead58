/* gpumem-placement-hash: whether a change to the arena kept every placement. It
 * replays a trace (DESIGN.md's "a ID SIZE" / "f ID" lines) on a bare arena of one
 * region at one, two and four times the trace's peak of live bytes (rounded to the
 * granule as the arena counts them) and prints, per capacity, an FNV-1a hash of
 * every address the arena handed out, in order (a failed allocation hashes as 1,
 * and its free is skipped), and the number of failures. Two builds that print the
 * same lines placed every allocation of the trace the same way.
 *
 *   gpumem-placement-hash TRACE...
 *
 * Exit status 0, 1 on an unreadable or malformed trace or a host failure. */
#include "arena.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct op {
    uint64_t id, size; /* id: the trace's ID, numbered in order of appearance */
    bool alloc;
};

/* The trace's IDs (any token) numbered in order of first appearance: open
 * addressing over their text. */
struct ids {
    char **key;
    uint64_t *num;
    size_t cap, n;
};

static uint64_t fnv(const char *s)
{
    uint64_t h = UINT64_C(14695981039346656037);
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * UINT64_C(1099511628211);
    return h;
}

/* The number of `key`, a new one if unseen; UINT64_MAX on host OOM. */
static uint64_t id_of(struct ids *t, const char *key)
{
    if (2 * (t->n + 1) > t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 1024;
        char **key2 = calloc(cap, sizeof *key2);
        uint64_t *num2 = calloc(cap, sizeof *num2);
        if (!key2 || !num2) {
            free(key2);
            free(num2);
            return UINT64_MAX;
        }
        for (size_t i = 0; i < t->cap; i++) {
            if (!t->key[i])
                continue;
            size_t j = fnv(t->key[i]) & (cap - 1);
            while (key2[j])
                j = (j + 1) & (cap - 1);
            key2[j] = t->key[i];
            num2[j] = t->num[i];
        }
        free(t->key);
        free(t->num);
        t->key = key2;
        t->num = num2;
        t->cap = cap;
    }
    size_t j = fnv(key) & (t->cap - 1);
    for (; t->key[j]; j = (j + 1) & (t->cap - 1))
        if (strcmp(t->key[j], key) == 0)
            return t->num[j];
    if (!(t->key[j] = strdup(key)))
        return UINT64_MAX;
    t->num[j] = t->n;
    return t->n++;
}

static void ids_free(struct ids *t)
{
    for (size_t i = 0; i < t->cap; i++)
        free(t->key[i]);
    free(t->key);
    free(t->num);
}

static int hash_trace(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "gpumem-placement-hash: cannot open %s\n", path);
        return 1;
    }
    size_t n = 0, cap = 0;
    struct op *ops = NULL;
    struct ids ids = {0};
    char line[256], key[128];
    int rc = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long long size = 0;
        char kind;
        if (line[0] == '#' || line[0] == '\n')
            continue;
        int k = sscanf(line, "%c %127s %llu", &kind, key, &size);
        if (!((kind == 'a' && k == 3) || (kind == 'f' && k >= 2))) {
            fprintf(stderr, "gpumem-placement-hash: %s: bad line: %s", path, line);
            rc = 1;
            break;
        }
        uint64_t id = id_of(&ids, key);
        if (id == UINT64_MAX) {
            rc = 1;
            break;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 4096;
            struct op *grown = realloc(ops, cap * sizeof *ops);
            if (!grown) {
                rc = 1;
                break;
            }
            ops = grown;
        }
        ops[n++] = (struct op){id, size, kind == 'a'};
    }
    fclose(f);
    uint64_t max_id = ids.n;
    ids_free(&ids);
    uint64_t *addr = rc ? NULL : calloc(max_id + 1, sizeof *addr);
    uint64_t *rounded = rc ? NULL : calloc(max_id + 1, sizeof *rounded);
    if (!rc && (!addr || !rounded))
        rc = 1;
    uint64_t live = 0, peak = 0;
    for (size_t i = 0; !rc && i < n; i++) {
        if (ops[i].alloc) {
            uint64_t g =
                ops[i].size <= ARENA_GRANULE
                    ? ARENA_GRANULE
                    : (ops[i].size + ARENA_GRANULE - 1) / ARENA_GRANULE * ARENA_GRANULE;
            rounded[ops[i].id] = g;
            live += g;
            peak = live > peak ? live : peak;
        } else {
            live -= rounded[ops[i].id];
            rounded[ops[i].id] = 0;
        }
    }
    static const unsigned factors[] = {1, 2, 4};
    for (unsigned fi = 0; !rc && fi < 3; fi++) {
        struct arena *a;
        if (gpumem__arena_create(NULL, &a) != ARENA_OK ||
            gpumem__arena_add_region(a, UINT64_C(1) << 40, peak * factors[fi], false) !=
                ARENA_OK) {
            rc = 1;
            break;
        }
        memset(addr, 0, (max_id + 1) * sizeof *addr);
        uint64_t h = UINT64_C(14695981039346656037);
        unsigned long fails = 0;
        for (size_t i = 0; i < n; i++) {
            uint64_t at, got;
            if (!ops[i].alloc) {
                if (addr[ops[i].id])
                    gpumem__arena_free(a, addr[ops[i].id], NULL);
                addr[ops[i].id] = 0;
            } else if (gpumem__arena_alloc(a, ops[i].size, &at, &got) == ARENA_OK) {
                addr[ops[i].id] = at;
                h = (h ^ at) * UINT64_C(1099511628211);
            } else {
                fails++;
                h = (h ^ 1) * UINT64_C(1099511628211);
            }
        }
        printf("%s x%u: %016llx, %lu failed\n", path, factors[fi], (unsigned long long)h,
               fails);
        gpumem__arena_destroy(a);
    }
    free(addr);
    free(rounded);
    free(ops);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: gpumem-placement-hash TRACE...\n");
        return 1;
    }
    int rc = 0;
    for (int i = 1; i < argc; i++)
        rc |= hash_trace(argv[i]);
    return rc;
}
