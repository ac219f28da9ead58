/* A stand-in for a gpumem process that shares a GPU, for gpumem-smi's test (no
 * runtime writes ledger slots yet): opens the GPUs as the library does (the
 * environment's backend), takes `--outside BYTES` of GPU memory outside any
 * ledger and each logical device's reserved bytes from the driver, claims a slot
 * in the GPU's ledger in DIR, publishes the figures, prints "ready UUID" and holds
 * everything until its standard input closes (or it is killed).
 * `--comm-hex HEX` renames the process first (prctl(PR_SET_NAME), the bytes
 * given in hex: a hostile or broken command name, issue 33), `--name-hex DEV:HEX`
 * publishes such bytes as logical device DEV's name.
 * usage: ledger_writer DIR GPU [--comm-hex HEX] [--outside BYTES]
 * [--name-hex DEV:HEX] [DEV:POLICY:LIMIT:RESERVED:IN_USE:PEAK]... */
#include "backend/backend.h"
#include "ledger.h"
#include "options.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

static int fail(const char *what, const char *text)
{
    fprintf(stderr, "ledger_writer: %s: %s\n", what, text);
    return 1;
}

/* The bytes that hex text stands for, into out (size bytes, NUL-terminated);
 * false when it is not hex or does not fit. */
static bool unhex(const char *hex, char *out, size_t size)
{
    size_t n = strlen(hex) / 2;
    if (strlen(hex) % 2 || n >= size)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1)
            return false;
        out[i] = (char)v;
    }
    out[n] = '\0';
    return true;
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return fail("usage",
                    "ledger_writer DIR GPU [--outside BYTES] [DEV:POLICY:...]...");
    for (int i = 3; i + 1 < argc; i++) {
        char comm[16];
        if (strcmp(argv[i], "--comm-hex") == 0 &&
            (!unhex(argv[i + 1], comm, sizeof comm) ||
             prctl(PR_SET_NAME, (unsigned long)comm, 0, 0, 0) != 0))
            return fail("comm", argv[i + 1]);
    }
    const char *dir = argv[1];
    int gpu = atoi(argv[2]);
    struct options opts;
    struct backend *b;
    struct reason why;
    struct ledger *l;
    if (gpumem__options_load(NULL, &opts) != GPUMEM_OK)
        return fail("options", gpumem_last_error());
    if (gpumem__backend_open(&opts, &b, &why) != GPUMEM_OK)
        return fail("backend", why.text);
    gpumem_physical_device d = GPUMEM_STRUCT_INIT(gpumem_physical_device);
    if (b->ops->device_props(b, gpu, &d, &why) != GPUMEM_OK)
        return fail("device", why.text);
    struct ledger_params p = {.dir = dir, .uuid = d.uuid, .total_bytes = d.total_bytes};
    if (gpumem__ledger_open(&p, &l, &why) != GPUMEM_OK)
        return fail("ledger", why.text);
    uint64_t addr;
    for (int i = 3; i < argc; i++) {
        if (strcmp(argv[i], "--outside") == 0 && i + 1 < argc) {
            uint64_t n = strtoull(argv[++i], NULL, 10);
            if (b->ops->alloc_region(b, gpu, n, &addr, &why) != GPUMEM_OK)
                return fail("outside", why.text);
            continue;
        }
        if (strcmp(argv[i], "--comm-hex") == 0 && i + 1 < argc) {
            i++;
            continue;
        }
        if (strcmp(argv[i], "--name-hex") == 0 && i + 1 < argc) {
            char name[GPUMEM_LEDGER_NAME_LEN];
            unsigned dev;
            const char *colon = strchr(argv[++i], ':');
            if (!colon || sscanf(argv[i], "%u:", &dev) != 1 ||
                !unhex(colon + 1, name, sizeof name) ||
                gpumem__ledger_set_device(l, dev, LEDGER_POLICY_GROWTH, 0) != GPUMEM_OK ||
                gpumem__ledger_set_name(l, dev, name) != GPUMEM_OK)
                return fail("name", argv[i]);
            continue;
        }
        unsigned dev;
        char policy[16];
        unsigned long long limit, reserved, in_use, peak;
        if (sscanf(argv[i], "%u:%15[a-z]:%llu:%llu:%llu:%llu", &dev, policy, &limit,
                   &reserved, &in_use, &peak) != 6)
            return fail("figures", argv[i]);
        enum ledger_policy pol =
            strcmp(policy, "greedy") == 0 ? LEDGER_POLICY_GREEDY : LEDGER_POLICY_GROWTH;
        if (reserved && b->ops->alloc_region(b, gpu, reserved, &addr, &why) != GPUMEM_OK)
            return fail("reserve", why.text);
        gpumem__ledger_set_device(l, dev, pol, limit);
        gpumem__ledger_set_usage(l, dev, in_use, reserved, peak);
    }
    printf("ready %s\n", d.uuid);
    fflush(stdout);
    char c;
    while (fread(&c, 1, 1, stdin) == 1) {
    }
    gpumem__ledger_close(l);
    b->ops->destroy(b); /* its regions go with the process */
    return 0;
}
