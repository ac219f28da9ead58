/* The shared server of the field: three users on one 12 GiB TITAN X.
 *
 * Each user is a runtime of its own (in real life, a process of its own) and
 * wants about 3 GiB: weights, activations and a workspace. The same three users
 * run under three policies, each on an empty card:
 *   1. TensorFlow's default: the first user reserves (nearly) the whole card at
 *      initialization, and the other two run out of memory.
 *   2. Memory growth: each user takes memory as it needs it; all three run.
 *   3. A 4 GiB limit each: all three run, and none can take more than its share.
 * Exits 0 when each policy came out as described. */
#include "gpumem.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define MIB (UINT64_C(1) << 20)
#define GIB (UINT64_C(1) << 30)
#define CARD "NVIDIA TITAN X (Pascal):12GiB:6.1"
#define USERS 3

enum policy { GREEDY, GROWTH, LIMIT };

static const char *const policy_title[] = {
    "1. Default (greedy, as TensorFlow): the first user takes the card",
    "2. Memory growth on: each user takes what it needs",
    "3. A 4 GiB limit per user: each is capped at its share",
};

struct tensor {
    const char *name;
    uint64_t bytes;
};

static const struct tensor workload[] = {
    {"weights", 1536 * MIB},
    {"activations", 1280 * MIB},
    {"workspace", 256 * MIB},
};

struct user {
    gpumem_runtime *rt;
    void *ptr[sizeof workload / sizeof workload[0]];
    gpumem_memory_info info;
    char outcome[512];
    bool ok;
};

static double gib(uint64_t bytes) { return (double)bytes / (double)GIB; }

static gpumem_runtime *open_runtime(void)
{
    gpumem_options o;
    gpumem_runtime *rt = NULL;
    gpumem_options_init(&o);
    o.backend = GPUMEM_BACKEND_SIM;
    o.flags = GPUMEM_OPTIONS_IGNORE_ENVIRONMENT; /* the story must not depend on the shell */
    o.sim_devices = CARD;
    if (gpumem_runtime_create(&o, &rt) != GPUMEM_OK) {
        fprintf(stderr, "gpumem_runtime_create: %s\n", gpumem_last_error());
        return NULL;
    }
    return rt;
}

/* Configures one user's runtime for the policy, as a program would before its
 * first allocation. */
static bool configure(gpumem_runtime *rt, enum policy p)
{
    if (p == GROWTH)
        return gpumem_set_memory_growth(rt, 0, true) == GPUMEM_OK;
    if (p == LIMIT) {
        gpumem_logical_device_config cfg = {.memory_limit_bytes = 4 * GIB};
        return gpumem_set_logical_device_configuration(rt, 0, &cfg, 1) == GPUMEM_OK;
    }
    return true;
}

/* Allocates the user's tensors and writes to them, as a training step would. */
static void run_user(struct user *u)
{
    u->ok = true;
    snprintf(u->outcome, sizeof u->outcome, "ran: %zu tensors",
             sizeof workload / sizeof workload[0]);
    for (size_t i = 0; i < sizeof workload / sizeof workload[0]; i++) {
        if (gpumem_malloc(u->rt, 0, workload[i].bytes, &u->ptr[i]) != GPUMEM_OK) {
            u->ok = false;
            snprintf(u->outcome, sizeof u->outcome, "FAILED to allocate %s: %s",
                     workload[i].name, gpumem_last_error());
            break;
        }
        /* Simulated device memory is host memory: touch one byte a page, as a
         * kernel filling the tensor would (cheap: the rest is never committed). */
        unsigned char *b = u->ptr[i];
        for (uint64_t off = 0; off < workload[i].bytes; off += 64 * MIB)
            b[off] = (unsigned char)i;
    }
    gpumem_get_memory_info(u->rt, 0, &u->info);
}

static void print_table(struct user *users, uint64_t card_free)
{
    printf("  %-6s %10s %10s %10s %10s  %s\n", "user", "reserved", "in use", "peak", "limit",
           "outcome");
    for (int i = 0; i < USERS; i++) {
        const gpumem_memory_info *m = &users[i].info;
        printf("  %-6d %7.2f GiB %6.2f GiB %6.2f GiB %6.2f GiB  %s\n", i + 1,
               gib(m->reserved_bytes), gib(m->current_bytes), gib(m->peak_bytes),
               gib(m->limit_bytes), users[i].ok ? users[i].outcome : "FAILED (see below)");
    }
    for (int i = 0; i < USERS; i++)
        if (!users[i].ok)
            printf("  user %d: %s\n", i + 1, users[i].outcome);
    printf("  the card has %.2f GiB of 12.00 GiB free with all three users present\n",
           gib(card_free));
}

/* Runs the three users under one policy on an empty card; returns how many ran. */
static int run_policy(enum policy p, bool *over_cap_refused)
{
    struct user users[USERS];
    memset(users, 0, sizeof users);
    int ran = 0;
    printf("\n%s\n", policy_title[p]);
    for (int i = 0; i < USERS; i++) {
        users[i].rt = open_runtime();
        if (!users[i].rt || !configure(users[i].rt, p)) {
            fprintf(stderr, "setup failed: %s\n", gpumem_last_error());
            return -1;
        }
        run_user(&users[i]);
        ran += users[i].ok;
    }
    if (p == LIMIT) {
        /* A fourth-and-a-half GiB would pass user 1's cap: refused by gpumem, not by
         * the card, which still has room. */
        void *extra = NULL;
        *over_cap_refused =
            gpumem_malloc(users[0].rt, 0, 1536 * MIB, &extra) == GPUMEM_ERR_OUT_OF_MEMORY;
        printf("  user 1 asks for 1.50 GiB more (4.50 GiB in all): %s\n",
               *over_cap_refused ? "refused, over its 4 GiB cap" : "ALLOWED");
        gpumem_get_memory_info(users[0].rt, 0, &users[0].info);
    }
    gpumem_physical_device card;
    size_t n = 0;
    gpumem_list_physical_devices(users[0].rt, &card, 1, &n);
    uint64_t reserved = 0;
    for (int i = 0; i < USERS; i++)
        reserved += users[i].info.reserved_bytes;
    print_table(users, card.total_bytes - reserved);
    for (int i = 0; i < USERS; i++)
        gpumem_runtime_destroy(users[i].rt); /* gives the card back for the next policy */
    return ran;
}

int main(void)
{
    printf("gpumem %s demo: three users share one simulated 12 GiB NVIDIA TITAN X (Pascal);\n"
           "each wants %.2f GiB (weights %.2f, activations %.2f, workspace %.2f).\n",
           GPUMEM_VERSION_STRING, gib(workload[0].bytes + workload[1].bytes + workload[2].bytes),
           gib(workload[0].bytes), gib(workload[1].bytes), gib(workload[2].bytes));
    bool refused = false;
    int greedy = run_policy(GREEDY, &refused);
    int growth = run_policy(GROWTH, &refused);
    int limit = run_policy(LIMIT, &refused);
    bool as_told = greedy == 1 && growth == USERS && limit == USERS && refused;
    printf("\nSummary: greedy %d of 3 users ran, growth %d of 3, 4 GiB limits %d of 3%s\n",
           greedy, growth, limit, as_told ? "." : " -- NOT what the demo expects!");
    return as_told ? 0 : 1;
}
