/* The shared server of the field: three users on one 12 GiB TITAN X.
 *
 * Each user is a runtime of its own (in real life, a process of its own) and
 * wants about 3 GiB: weights, activations and a workspace, which it writes to.
 * The same three users run under three policies, each on an empty card:
 *   1. TensorFlow's default: the first user reserves (nearly) the whole card at
 *      initialization, and the other two run out of memory.
 *   2. Memory growth: each user takes memory as it needs it; all three run.
 *   3. A 4 GiB limit each: all three run, and none can take more than its share.
 * The card is simulated (GPUMEM_BACKEND_SIM) and the environment is ignored, so
 * the story is the same on every machine. Exits 0 when each policy came out as
 * described, 1 otherwise. */
#include "gpumem.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define MIB   (UINT64_C(1) << 20)
#define GIB   (UINT64_C(1) << 30)
#define CARD  "NVIDIA TITAN X (Pascal):12GiB:6.1"
#define USERS 3
#define LIMIT (4 * GIB)
/* How much of each end of a tensor is written. Simulated device memory is host
 * memory: writing all 9 GiB of tensors would need 9 GiB of RAM. */
#define TOUCH (4 * MIB)

enum policy { GREEDY, GROWTH, LIMITED };

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
#define TENSORS (sizeof workload / sizeof workload[0])

struct user {
    gpumem_runtime *rt;
    void *ptr[TENSORS];
    gpumem_memory_info info; /* struct_size set in run_policy */
    bool ok;
    char error[512]; /* gpumem_last_error() of the failed allocation */
};

/* "11.51 GiB", "275 MiB", "0 B": short, and exact enough to read. */
static const char *size_str(uint64_t bytes, char *buf, size_t len)
{
    if (bytes >= GIB)
        snprintf(buf, len, "%.2f GiB", (double)bytes / (double)GIB);
    else if (bytes >= MIB)
        snprintf(buf, len, "%.0f MiB", (double)bytes / (double)MIB);
    else
        snprintf(buf, len, "%" PRIu64 " B", bytes);
    return buf;
}

/* Prints text at the given indent, wrapped at spaces to stay within 90 columns. */
static void print_wrapped(int indent, const char *text)
{
    const int width = 90 - indent;
    while (*text) {
        int len = (int)strlen(text);
        if (len > width) {
            len = width;
            /* break at a space, but not between a number and its unit */
            while (len > 0 && (text[len] != ' ' || isdigit((unsigned char)text[len - 1])))
                len--;
            if (len == 0) /* one long word: cut it */
                len = width;
        }
        printf("%*s%.*s\n", indent, "", len, text);
        text += len;
        while (*text == ' ')
            text++;
    }
}

static gpumem_runtime *open_runtime(void)
{
    gpumem_options o;
    gpumem_runtime *rt = NULL;
    gpumem_options_init(&o);
    o.backend = GPUMEM_BACKEND_SIM;
    o.flags =
        GPUMEM_OPTIONS_IGNORE_ENVIRONMENT; /* the story must not depend on the shell */
    o.sim_devices = CARD;
    if (gpumem_runtime_create(&o, &rt) != GPUMEM_OK) {
        fprintf(stderr, "gpumem_runtime_create: %s\n", gpumem_last_error());
        return NULL;
    }
    return rt;
}

/* Configures one user's runtime for the policy, as a program does before its
 * first allocation. */
static bool configure(gpumem_runtime *rt, enum policy p)
{
    gpumem_status s = GPUMEM_OK;
    if (p == GROWTH) {
        s = gpumem_set_memory_growth(rt, 0, true);
    } else if (p == LIMITED) {
        gpumem_logical_device_config cfg = GPUMEM_LOGICAL_DEVICE_LIMIT(LIMIT);
        s = gpumem_set_logical_device_configuration(rt, 0, &cfg, 1);
    }
    if (s != GPUMEM_OK)
        fprintf(stderr, "configuration failed: %s\n", gpumem_last_error());
    return s == GPUMEM_OK;
}

/* Allocates the user's tensors and writes to them, as a training step would.
 * The first allocation initializes the user's devices. */
static void run_user(struct user *u)
{
    u->ok = true;
    for (size_t i = 0; i < TENSORS && u->ok; i++) {
        char sz[32];
        if (gpumem_malloc(u->rt, 0, workload[i].bytes, &u->ptr[i]) != GPUMEM_OK) {
            u->ok = false;
            snprintf(u->error, sizeof u->error, "%s (%s): %s", workload[i].name,
                     size_str(workload[i].bytes, sz, sizeof sz), gpumem_last_error());
            break;
        }
        unsigned char *t = u->ptr[i];
        memset(t, 0x11 * (int)(i + 1), TOUCH);
        memset(t + workload[i].bytes - TOUCH, 0x11 * (int)(i + 1), TOUCH);
        if (t[0] != t[workload[i].bytes - 1]) {
            u->ok = false;
            snprintf(u->error, sizeof u->error,
                     "%s: memory did not keep what was written", workload[i].name);
        }
    }
    gpumem_get_memory_info(u->rt, 0, &u->info);
}

static void print_table(const struct user *users, uint64_t card_total)
{
    char a[32], b[32], c[32], d[32];
    uint64_t reserved = 0;
    printf("  %-4s  %10s  %10s  %10s  %10s  %s\n", "user", "reserved", "in use", "peak",
           "limit", "outcome");
    for (int i = 0; i < USERS; i++) {
        const gpumem_memory_info *m = &users[i].info;
        printf("  %-4d  %10s  %10s  %10s  %10s  %s\n", i + 1,
               size_str(m->reserved_bytes, a, sizeof a),
               size_str(m->current_bytes, b, sizeof b),
               size_str(m->peak_bytes, c, sizeof c),
               size_str(m->limit_bytes, d, sizeof d),
               users[i].ok ? "ran (3 tensors written)" : "OUT OF MEMORY");
        reserved += m->reserved_bytes;
    }
    for (int i = 0; i < USERS; i++) {
        if (!users[i].ok) {
            printf("  user %d failed to allocate\n", i + 1);
            print_wrapped(6, users[i].error);
        }
    }
    printf("  card: %s of %s free while the three users run\n",
           size_str(card_total - reserved, a, sizeof a),
           size_str(card_total, b, sizeof b));
}

/* Runs the three users under one policy on an empty card; returns how many ran,
 * or -1 when the demo itself could not be set up. */
static int run_policy(enum policy p, bool *cap_held)
{
    struct user users[USERS];
    memset(users, 0, sizeof users);
    int ran = 0, result = 0;
    printf("\n%s\n", policy_title[p]);
    for (int i = 0; i < USERS; i++) {
        users[i].info.struct_size = sizeof users[i].info;
        users[i].rt = open_runtime();
        if (!users[i].rt || !configure(users[i].rt, p)) {
            result = -1;
            goto out;
        }
        run_user(&users[i]);
        ran += users[i].ok;
    }
    if (p == LIMITED) {
        /* 1.5 GiB more would take user 1 to 4.5 GiB, past its cap: its pool
         * refuses, whatever the card has left. */
        void *extra = NULL;
        gpumem_status s = gpumem_malloc(users[0].rt, 0, 1536 * MIB, &extra);
        *cap_held = s == GPUMEM_ERR_OUT_OF_MEMORY;
        printf("  user 1 asks for 1.50 GiB more (4.50 GiB in all): %s\n",
               *cap_held ? "refused by its 4 GiB cap" : "NOT refused");
        if (s != GPUMEM_OK)
            print_wrapped(6, gpumem_last_error());
        gpumem_free(users[0].rt, extra);
        gpumem_get_memory_info(users[0].rt, 0, &users[0].info);
    }
    gpumem_physical_device card = GPUMEM_STRUCT_INIT(gpumem_physical_device);
    size_t n = 0;
    if (gpumem_list_physical_devices(users[0].rt, &card, 1, &n) != GPUMEM_OK || n != 1) {
        fprintf(stderr, "gpumem_list_physical_devices: %s\n", gpumem_last_error());
        result = -1;
        goto out;
    }
    print_table(users, card.total_bytes);
    result = ran;
out:
    /* Destroying a runtime gives its memory back to the card, so the next policy
     * starts on an empty card. */
    for (int i = 0; i < USERS; i++)
        gpumem_runtime_destroy(users[i].rt);
    return result;
}

int main(void)
{
    char a[32], b[32], c[32], d[32];
    uint64_t want = 0;
    for (size_t i = 0; i < TENSORS; i++)
        want += workload[i].bytes;
    printf("gpumem %s demo: three users share one simulated 12 GiB NVIDIA TITAN X "
           "(Pascal).\n"
           "Each wants %s: weights %s, activations %s, workspace %s.\n",
           GPUMEM_VERSION_STRING, size_str(want, a, sizeof a),
           size_str(workload[0].bytes, b, sizeof b),
           size_str(workload[1].bytes, c, sizeof c),
           size_str(workload[2].bytes, d, sizeof d));

    bool cap_held = false;
    int greedy = run_policy(GREEDY, &cap_held);
    int growth = run_policy(GROWTH, &cap_held);
    int limited = run_policy(LIMITED, &cap_held);
    bool as_told = greedy == 1 && growth == USERS && limited == USERS && cap_held;
    printf(
        "\nSummary: greedy %d of 3 users ran, growth %d of 3, 4 GiB limits %d of 3%s\n",
        greedy < 0 ? 0 : greedy, growth < 0 ? 0 : growth, limited < 0 ? 0 : limited,
        cap_held ? " (and the cap held)" : " (and the cap did NOT hold)");
    printf("%s\n", as_told ? "As expected." : "NOT what the demo expects!");
    return as_told ? 0 : 1;
}
