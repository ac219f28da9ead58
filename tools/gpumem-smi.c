/* gpumem-smi: what the gpumem processes of this machine hold on each GPU (issue
 * 23, item 3), read from the GPUs' ledgers (lib/ledger.c, read-only: it claims
 * no slot and writes nothing) and from the driver, found as the library finds
 * it (GPUMEM_BACKEND, GPUMEM_SIM_DEVICES, GPUMEM_SIM_MACHINE). A table, or with
 * --json one object; --watch SECONDS repeats. Exit status: 0 shown, 1 a usage or
 * driver error, 2 no GPU, 3 no ledger on any GPU (nothing to show, said once:
 * in the table, or on standard error with --json), naming what is needed when the
 * GPUs are simulated ones of its own. Single threaded; no locks of its own. */
#include "backend/backend.h"
#include "escape.h"
#include "ledger.h"
#include "options.h"

#include <dirent.h>
#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { EXIT_SHOWN = 0, EXIT_ERROR = 1, EXIT_NO_GPU = 2, EXIT_NO_LEDGER = 3 };

struct gpu_view {
    gpumem_physical_device props;
    uint64_t free_bytes;
    bool has_ledger;
    char ledger_error[GPUMEM_REASON_LEN]; /* a ledger there but unreadable: why */
    unsigned ledgers;                     /* users' ledgers read */
    unsigned unreadable;                  /* others' ledgers this user may not read */
    struct ledger_entry *entries;
    size_t num_entries;
    uint64_t reserved; /* sum over every process and logical device */
};

static const char *policy_name(uint32_t p)
{
    return p == LEDGER_POLICY_GREEDY   ? "greedy"
           : p == LEDGER_POLICY_GROWTH ? "growth"
                                       : "-";
}

static const char *user_name(uint32_t uid, char *buf, size_t n)
{
    struct passwd *pw = getpwuid((uid_t)uid);
    if (pw && pw->pw_name)
        snprintf(buf, n, "%s", pw->pw_name);
    else
        snprintf(buf, n, "%u", (unsigned)uid);
    return buf;
}

static int by_value(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* The users with a ledger of GPU `uuid` in dir, from the files' names
 * (gpumem-<uuid>.u<uid>.ledger), into uids (at most cap), in order; how many. */
static size_t ledger_users(const char *dir, const char *uuid, uint32_t *uids, size_t cap)
{
    char prefix[128];
    snprintf(prefix, sizeof prefix, "gpumem-%s.u", uuid);
    size_t plen = strlen(prefix), n = 0;
    DIR *d = opendir(dir ? dir : "/dev/shm");
    if (!d)
        return 0;
    for (struct dirent *e; n < cap && (e = readdir(d)) != NULL;) {
        if (strncmp(e->d_name, prefix, plen) != 0)
            continue; /* first: a shorter name ends before rest would begin */
        const char *rest = e->d_name + plen;
        size_t digits = strspn(rest, "0123456789");
        if (digits == 0 || digits > 10 || strcmp(rest + digits, ".ledger") != 0)
            continue;
        unsigned long long uid = strtoull(rest, NULL, 10);
        if (uid <= UINT32_MAX)
            uids[n++] = (uint32_t)uid;
    }
    closedir(d);
    qsort(uids, n, sizeof *uids, by_value);
    return n;
}

/* Adds the processes of user uid's ledger of GPU g to g->entries. */
static void read_ledger(const char *dir, struct gpu_view *g, uint32_t uid)
{
    struct reason why;
    struct ledger_params p = {.dir = dir,
                              .uuid = g->props.uuid,
                              .read_only = true,
                              .of_user = true,
                              .user = uid};
    struct ledger *l;
    if (gpumem__ledger_open(&p, &l, &why) != GPUMEM_OK) {
        char path[1200];
        gpumem__ledger_file_name(dir, g->props.uuid, uid, path, sizeof path);
        if (uid != (uint32_t)geteuid() && access(path, R_OK) != 0)
            g->unreadable++; /* another user's, closed to this one: as it should be */
        else if (!g->ledger_error[0])
            snprintf(g->ledger_error, sizeof g->ledger_error, "%s", why.text);
        return;
    }
    size_t n = 0;
    gpumem_status s = gpumem__ledger_read(l, NULL, 0, &n, &why);
    struct ledger_entry *mine = NULL;
    for (int tries = 0; s == GPUMEM_OK && tries < 5; tries++) {
        size_t cap = n + 4;
        free(mine);
        mine = calloc(cap, sizeof *mine);
        if (!mine) {
            s = GPUMEM_ERR_OUT_OF_MEMORY;
            snprintf(why.text, sizeof why.text, "out of memory");
            break;
        }
        s = gpumem__ledger_read(l, mine, cap, &n, &why);
        if (n <= cap)
            break;
    }
    struct ledger_entry *all =
        s == GPUMEM_OK ? realloc(g->entries, (g->num_entries + n + 1) * sizeof *all)
                       : NULL;
    if (s == GPUMEM_OK && !all) {
        s = GPUMEM_ERR_OUT_OF_MEMORY;
        snprintf(why.text, sizeof why.text, "out of memory");
    }
    if (s == GPUMEM_OK) {
        g->entries = all;
        memcpy(all + g->num_entries, mine, n * sizeof *mine);
        g->num_entries += n;
        g->ledgers++;
    } else if (!g->ledger_error[0]) {
        snprintf(g->ledger_error, sizeof g->ledger_error, "%s", why.text);
    }
    free(mine);
    gpumem__ledger_close(l);
}

/* Reads GPU `i`'s figures and its ledgers' processes into *g. */
static gpumem_status look(struct backend *b, int i, const char *dir, struct gpu_view *g)
{
    struct reason why;
    memset(g, 0, sizeof *g);
    g->props.struct_size = sizeof g->props;
    g->props.index = i;
    uint64_t total;
    gpumem_status s = b->ops->device_props(b, i, &g->props, &why);
    if (s == GPUMEM_OK)
        s = b->ops->mem_info(b, i, &g->free_bytes, &total, &why);
    if (s != GPUMEM_OK) {
        fprintf(stderr, "gpumem-smi: GPU:%d: %s\n", i, why.text);
        return s;
    }
    if (!g->props.uuid[0])
        return GPUMEM_OK; /* no UUID, no ledger */
    /* each user has a ledger of the GPU (docs/ledger.md, "Who may share"): all
     * of them that this user may read, each opened read-only (a copy read with
     * pread, never mapped: a file shortened meanwhile cannot bring this down) */
    uint32_t uids[256];
    size_t users = ledger_users(dir, g->props.uuid, uids, sizeof uids / sizeof uids[0]);
    for (size_t u = 0; u < users; u++)
        read_ledger(dir, g, uids[u]);
    g->has_ledger = g->ledgers > 0;
    for (size_t k = 0; k < g->num_entries; k++)
        for (unsigned d = 0; d < g->entries[k].num_devices; d++)
            g->reserved += g->entries[k].dev[d].reserved;
    return GPUMEM_OK;
}

/* The memory on the card that no gpumem pool holds: contexts, libraries, other
 * processes. Never below 0 (the figures are read at different moments). */
static uint64_t outside(const struct gpu_view *g)
{
    uint64_t used =
        g->props.total_bytes -
        (g->free_bytes < g->props.total_bytes ? g->free_bytes : g->props.total_bytes);
    return used > g->reserved ? used - g->reserved : 0;
}

/* A logical device's name as its process published it ("/device:GPU:0"), else
 * "logical K" (a process of a library before names, or a writer that set none). */
static void device_name(const struct ledger_device_figures *f, unsigned index, char *out,
                        size_t n)
{
    if (f->name[0])
        snprintf(out, n, "%s", f->name);
    else
        snprintf(out, n, "logical %u", index);
}

/* s as a JSON string: valid UTF-8 whatever its bytes (a command name, a model,
 * a device name from a ledger: gpumem__json_string writes a byte outside
 * well-formed UTF-8 as \ufffd). */
static void json_string(const char *s)
{
    char small[256];
    size_t n = gpumem__json_string(s, small, sizeof small);
    if (n < sizeof small) {
        fputs(small, stdout);
        return;
    }
    char *big = malloc(n + 1);
    if (big && gpumem__json_string(s, big, n + 1) == n)
        fputs(big, stdout);
    else
        fputs("null", stdout);
    free(big);
}

/* s for the table: no control character (an escape sequence in a command name
 * would reach the terminal) and no byte outside well-formed UTF-8, each shown as
 * '?' (gpumem__terminal_text); at most n - 1 bytes, whole characters. */
static const char *shown(const char *s, char *buf, size_t n)
{
    return gpumem__terminal_text(s, buf, n);
}

static void print_json(const struct gpu_view *gpus, size_t n)
{
    char user[64];
    printf("{\"gpus\": [");
    for (size_t i = 0; i < n; i++) {
        const struct gpu_view *g = &gpus[i];
        printf("%s{\"index\": %d, \"uuid\": ", i ? ", " : "", g->props.index);
        json_string(g->props.uuid);
        printf(", \"model\": ");
        json_string(g->props.model);
        printf(", \"total_bytes\": %llu, \"free_bytes\": %llu, "
               "\"outside_pools_bytes\": %llu, \"ledger\": %s, "
               "\"unreadable_ledgers\": %u, \"processes\": [",
               (unsigned long long)g->props.total_bytes,
               (unsigned long long)g->free_bytes, (unsigned long long)outside(g),
               g->has_ledger ? "true" : "false", g->unreadable);
        for (size_t k = 0; k < g->num_entries; k++) {
            const struct ledger_entry *e = &g->entries[k];
            printf("%s{\"pid\": %lld, \"user\": ", k ? ", " : "", (long long)e->pid);
            json_string(user_name(e->uid, user, sizeof user));
            printf(", \"command\": ");
            json_string(e->comm);
            printf(", \"logical_devices\": [");
            bool first = true;
            for (unsigned d = 0; d < e->num_devices; d++) {
                const struct ledger_device_figures *f = &e->dev[d];
                if (f->policy == LEDGER_POLICY_UNUSED)
                    continue;
                char name[GPUMEM_LEDGER_NAME_LEN];
                device_name(f, d, name, sizeof name);
                printf("%s{\"name\": ", first ? "" : ", ");
                json_string(name);
                printf(", \"policy\": \"%s\", "
                       "\"limit_bytes\": %llu, \"reserved_bytes\": %llu, "
                       "\"in_use_bytes\": %llu, \"cached_bytes\": %llu, "
                       "\"peak_bytes\": %llu}",
                       policy_name(f->policy), (unsigned long long)f->limit,
                       (unsigned long long)f->reserved, (unsigned long long)f->in_use,
                       (unsigned long long)(f->reserved > f->in_use
                                                ? f->reserved - f->in_use
                                                : 0),
                       (unsigned long long)f->peak);
                first = false;
            }
            printf("]}");
        }
        printf("]}");
    }
    printf("]}\n");
}

static const char *bytes(uint64_t v, char *buf)
{
    return gpumem__format_bytes(v, buf, 32);
}

/* Why no GPU has a ledger, in one sentence (no newline): what gpumem-smi needs
 * to show processes. `own_sim`: the GPUs are simulated and not shared
 * (GPUMEM_SIM_MACHINE unset), so they are this process's own. */
static void no_ledger_sentence(FILE *to, size_t n, bool own_sim, const char *dir)
{
    if (own_sim)
        fprintf(to,
                "no ledger: %s simulated GPU%s %s gpumem-smi's own (GPUMEM_SIM_MACHINE "
                "is not set); to see gpumem processes on simulated GPUs, run gpumem-smi "
                "while they run, with the GPUMEM_SIM_MACHINE=NAME and GPUMEM_SIM_DEVICES "
                "they have",
                n == 1 ? "this" : "these", n == 1 ? "" : "s", n == 1 ? "is" : "are");
    else
        fprintf(to,
                "no ledger: no gpumem process shares %s (ledgers are looked for in %s)",
                n == 1 ? "this GPU" : "these GPUs", dir ? dir : "/dev/shm");
}

/* The table; when no GPU has a ledger (`any_ledger` false), one sentence after
 * the GPUs says why, once, rather than a line under each GPU. */
static void print_table(const struct gpu_view *gpus, size_t n, bool any_ledger,
                        bool own_sim, const char *dir)
{
    char a[32], b[32], c[32], d[32], e2[32], f[32], user[64];
    char t1[4 * 128], t2[4 * 64], t3[4 * GPUMEM_LEDGER_NAME_LEN],
        t4[4 * GPUMEM_REASON_LEN], t5[64];
    for (size_t i = 0; i < n; i++) {
        const struct gpu_view *g = &gpus[i];
        printf("GPU %d  %s  %s\n", g->props.index, shown(g->props.model, t1, sizeof t1),
               g->props.uuid[0] ? shown(g->props.uuid, t2, sizeof t2) : "(no UUID)");
        printf("  memory: %s total, %s free (driver), %s outside gpumem pools\n",
               bytes(g->props.total_bytes, a), bytes(g->free_bytes, b),
               bytes(outside(g), c));
        if (g->unreadable)
            printf("  %u other user%s ledger%s not readable by this user\n",
                   g->unreadable, g->unreadable == 1 ? "'s" : "s'",
                   g->unreadable == 1 ? " is" : "s are");
        if (!g->has_ledger) {
            if (g->ledger_error[0])
                printf("  ledger unreadable: %s\n",
                       shown(g->ledger_error, t4, sizeof t4));
            else if (any_ledger)
                printf("  no ledger: no gpumem process shares this GPU\n");
            continue;
        }
        if (g->num_entries == 0) {
            printf("  no gpumem process\n");
            continue;
        }
        printf("  %8s %-10s %-16s %-14s %-7s %10s %10s %10s %10s %10s\n", "PID", "USER",
               "COMMAND", "DEVICE", "POLICY", "LIMIT", "RESERVED", "IN USE", "CACHED",
               "PEAK");
        for (size_t k = 0; k < g->num_entries; k++) {
            const struct ledger_entry *e = &g->entries[k];
            bool any = false;
            for (unsigned dv = 0; dv < e->num_devices; dv++) {
                const struct ledger_device_figures *fg = &e->dev[dv];
                if (fg->policy == LEDGER_POLICY_UNUSED)
                    continue;
                char name[GPUMEM_LEDGER_NAME_LEN];
                device_name(fg, dv, name, sizeof name);
                printf("  %8lld %-10.10s %-16s %-14s %-7s %10s %10s %10s %10s %10s\n",
                       (long long)e->pid,
                       shown(user_name(e->uid, user, sizeof user), t5, sizeof t5),
                       shown(e->comm, t2, GPUMEM_LEDGER_COMM_LEN),
                       shown(name, t3, sizeof t3), policy_name(fg->policy),
                       fg->limit ? bytes(fg->limit, a) : "none", bytes(fg->reserved, b),
                       bytes(fg->in_use, c),
                       bytes(fg->reserved > fg->in_use ? fg->reserved - fg->in_use : 0,
                             d),
                       bytes(fg->peak, e2));
                any = true;
            }
            if (!any)
                printf("  %8lld %-10.10s %-16s (no logical device yet) %s\n",
                       (long long)e->pid,
                       shown(user_name(e->uid, user, sizeof user), t5, sizeof t5),
                       shown(e->comm, t2, GPUMEM_LEDGER_COMM_LEN), bytes(0, f));
        }
    }
    if (!any_ledger) {
        no_ledger_sentence(stdout, n, own_sim, dir);
        putchar('\n');
    }
}

/* Shows the GPUs of `b` once. `own_sim`: see no_ledger_sentence. When no GPU
 * has a ledger (exit status 3) the reason is said once: in the table, or with
 * --json (whose standard output is the object alone) on standard error. */
static int show(struct backend *b, const char *dir, bool json, bool own_sim)
{
    size_t n = b->ops->device_count(b);
    if (n == 0) {
        fprintf(stderr, "gpumem-smi: no GPU found\n");
        return EXIT_NO_GPU;
    }
    struct gpu_view *gpus = calloc(n, sizeof *gpus);
    if (!gpus) {
        fprintf(stderr, "gpumem-smi: out of memory\n");
        return EXIT_ERROR;
    }
    int rc = EXIT_SHOWN;
    bool any_ledger = false;
    for (size_t i = 0; i < n && rc == EXIT_SHOWN; i++) {
        if (look(b, (int)i, dir, &gpus[i]) != GPUMEM_OK)
            rc = EXIT_ERROR;
        any_ledger = any_ledger || gpus[i].has_ledger;
    }
    if (rc == EXIT_SHOWN) {
        if (json)
            print_json(gpus, n);
        else
            print_table(gpus, n, any_ledger, own_sim, dir);
        if (!any_ledger) {
            if (json) {
                fputs("gpumem-smi: ", stderr);
                no_ledger_sentence(stderr, n, own_sim, dir);
                fputc('\n', stderr);
            }
            rc = EXIT_NO_LEDGER;
        }
    }
    for (size_t i = 0; i < n; i++)
        free(gpus[i].entries);
    free(gpus);
    return rc;
}

static int usage(FILE *to, int rc)
{
    fprintf(to,
            "usage: gpumem-smi [--json] [--watch SECONDS] [--ledger-dir DIR]\n"
            "  what the gpumem processes of this machine hold on each GPU, from the\n"
            "  GPUs' ledgers; the GPUs are found as gpumem finds them (GPUMEM_BACKEND,\n"
            "  GPUMEM_SIM_DEVICES, GPUMEM_SIM_MACHINE); the ledgers in --ledger-dir,\n"
            "  else GPUMEM_LEDGER_DIR, else /dev/shm\n"
            "  exit status: 0 shown, 1 error, 2 no GPU, 3 no ledger on any GPU\n");
    return rc;
}

int main(int argc, char **argv)
{
    bool json = false;
    double watch = 0;
    const char *dir = NULL; /* --ledger-dir */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = true;
        } else if (strcmp(argv[i], "--watch") == 0 && i + 1 < argc) {
            char *end;
            watch = strtod(argv[++i], &end);
            if (*end || !(watch > 0) || watch > 86400) {
                fprintf(stderr, "gpumem-smi: --watch takes seconds, > 0: '%s'\n",
                        argv[i]);
                return usage(stderr, EXIT_ERROR);
            }
        } else if (strcmp(argv[i], "--ledger-dir") == 0 && i + 1 < argc) {
            dir = argv[++i];
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            return usage(stdout, EXIT_SHOWN);
        } else {
            fprintf(stderr, "gpumem-smi: unknown argument '%s'\n", argv[i]);
            return usage(stderr, EXIT_ERROR);
        }
    }
    /* the runtime's options, parsed as a runtime parses them (option_vars.h), so
     * that the tool finds the GPUs and the ledgers that the processes use, and
     * refuses a bad value with the same message */
    struct options opts;
    if (gpumem__options_load(NULL, &opts) != GPUMEM_OK) {
        fprintf(stderr, "gpumem-smi: %s\n", gpumem_last_error());
        return EXIT_ERROR;
    }
    if (!dir && opts.ledger_dir[0]) /* GPUMEM_LEDGER_DIR */
        dir = opts.ledger_dir;
    struct backend *b;
    struct reason why;
    gpumem_status s = gpumem__backend_open(&opts, &b, &why);
    if (s != GPUMEM_OK) {
        fprintf(stderr, "gpumem-smi: no GPU: %s\n", why.text);
        return s == GPUMEM_ERR_BACKEND || s == GPUMEM_ERR_UNSUPPORTED ? EXIT_NO_GPU
                                                                      : EXIT_ERROR;
    }
    int rc;
    for (;;) {
        if (watch > 0 && !json && isatty(STDOUT_FILENO))
            fputs("\033[H\033[2J", stdout); /* a screen per round, as watch(1) */
        rc = show(b, dir, json, b->host_accessible && !opts.sim_machine[0]);
        if (watch <= 0 || rc == EXIT_ERROR || rc == EXIT_NO_GPU)
            break;
        fflush(stdout);
        struct timespec ts = {(time_t)watch,
                              (long)((watch - (double)(time_t)watch) * 1e9)};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
    b->ops->destroy(b);
    return rc;
}
