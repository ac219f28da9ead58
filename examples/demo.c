/* The shared server of the field: three users on one 12 GiB TITAN X.
 *
 * Each user is a process of its own, as on a lab's server, and wants about
 * 3 GiB: weights, activations and a workspace, which it writes to. The same
 * three users run under three policies, each on an empty card, and gpumem-smi
 * shows the card while they run:
 *   1. TensorFlow's default: the first user reserves (nearly) the whole card at
 *      initialization, and the other two run out of memory.
 *   2. Memory growth: each user takes memory as it needs it; all three run.
 *   3. A 4 GiB limit each: all three run, and none can take more than its share.
 * Then what no allocator that decides alone can do:
 *   4. A user in growth mode that used and freed a lot keeps it cached and sits
 *      idle; a second user needs more than is free. Without give-back (as with
 *      TensorFlow or PyTorch) the second fails; with it, the first gives its
 *      cache back on request, from a thread, while it calls nothing, and both run.
 * The card is simulated and shared by the processes through a machine name and a
 * ledger folder of this run's own (GPUMEM_SIM_MACHINE, GPUMEM_LEDGER_DIR, removed
 * at the end); every other GPUMEM_ and TF_ variable is unset, so the story is
 * the same on every machine. Each scene checks what it tells. Exits 0 when every
 * scene came out as described, 1 otherwise. */
#include "gpumem.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

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

/* Scene 4: user 1 keeps its weights and has freed two 4 GiB activations; user 2
 * then needs its weights and 4 GiB of activations, more than the card has free. */
static const struct tensor trainer[] = {{"weights", 1536 * MIB}};
static const struct tensor newcomer[] = {
    {"weights", 1536 * MIB},
    {"activations", 4 * GIB},
};
#define NEWCOMER      (sizeof newcomer / sizeof newcomer[0])
#define TRAINER_FREED (2 * 4 * GIB) /* allocated, written and freed by user 1 */
#define TRAINER_STEP  (2 * GIB)     /* user 1's next step, once both run */

/* What a user process says back after each step. */
struct report {
    bool ok;                 /* the step succeeded */
    int status;              /* its gpumem_status */
    gpumem_memory_info info; /* after the step */
    uint64_t card_total;     /* the card's memory, as the user sees it */
    char error[512];         /* why the step failed */
};

/* Steps the demo asks of a running user (a byte on its command pipe and a size). */
struct command {
    char op;       /* 'a' allocate `bytes` and keep it, 'f' free what 'a' kept, 'i' report
                      only, 'x' exit */
    char name[15]; /* of what 'a' allocates, for messages */
    uint64_t bytes;
};

struct user {
    int number;         /* 1-based, as printed */
    pid_t pid;          /* 0: not started */
    int cmd_fd;         /* the demo writes commands here */
    int rep_fd;         /* and reads reports here */
    struct report rep;  /* the first report: its tensors */
    struct report last; /* the latest report */
};

/* This run's shared card: names of its own, so that runs never meet each other or
 * a user's real ledger. */
static char machine[48];
static char ledger_dir[64];
static char smi_path[4200]; /* "" when gpumem-smi is not beside the demo */

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

/* ------------------------------------------------------ a user process -- */

static gpumem_runtime *open_runtime(struct report *r)
{
    gpumem_options o;
    gpumem_runtime *rt = NULL;
    gpumem_options_init(&o);
    o.backend = GPUMEM_BACKEND_SIM;
    o.sim_devices = CARD;
    /* The environment is read: GPUMEM_SIM_MACHINE and the ledger's variables are
     * only there, and the demo set them all (main). */
    if (gpumem_runtime_create(&o, &rt) != GPUMEM_OK) {
        snprintf(r->error, sizeof r->error, "gpumem_runtime_create: %s",
                 gpumem_last_error());
        return NULL;
    }
    gpumem_physical_device card = GPUMEM_STRUCT_INIT(gpumem_physical_device);
    size_t n = 0;
    if (gpumem_list_physical_devices(rt, &card, 1, &n) == GPUMEM_OK && n == 1)
        r->card_total = card.total_bytes;
    return rt;
}

/* Configures the user's runtime for the policy, as a program does before its
 * first allocation. */
static bool configure(gpumem_runtime *rt, enum policy p, struct report *r)
{
    gpumem_status s = GPUMEM_OK;
    if (p == GROWTH) {
        s = gpumem_set_memory_growth(rt, 0, true);
    } else if (p == LIMITED) {
        gpumem_logical_device_config cfg = GPUMEM_LOGICAL_DEVICE_LIMIT(LIMIT);
        s = gpumem_set_logical_device_configuration(rt, 0, &cfg, 1);
    }
    if (s != GPUMEM_OK)
        snprintf(r->error, sizeof r->error, "configuration failed: %s",
                 gpumem_last_error());
    return s == GPUMEM_OK;
}

/* Allocates a tensor and writes to both of its ends, as a training step would;
 * false with r->error set when either fails. The first allocation initializes
 * the user's device. */
static bool allocate(gpumem_runtime *rt, const struct tensor *t, int fill, void **out,
                     struct report *r)
{
    char sz[32];
    gpumem_status s = gpumem_malloc(rt, 0, t->bytes, out);
    r->status = s;
    if (s != GPUMEM_OK) {
        snprintf(r->error, sizeof r->error, "%s (%s): %s", t->name,
                 size_str(t->bytes, sz, sizeof sz), gpumem_last_error());
        *out = NULL;
        return false;
    }
    unsigned char *p = *out;
    memset(p, fill, TOUCH);
    memset(p + t->bytes - TOUCH, fill, TOUCH);
    if (p[0] != p[t->bytes - 1]) {
        snprintf(r->error, sizeof r->error, "%s: memory did not keep what was written",
                 t->name);
        return false;
    }
    return true;
}

static bool write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return false;
        p += k;
        n -= (size_t)k;
    }
    return true;
}

static bool read_all(int fd, void *buf, size_t n)
{
    char *p = buf;
    while (n > 0) {
        ssize_t k = read(fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return false;
        p += k;
        n -= (size_t)k;
    }
    return true;
}

/* The body of a user's process: its runtime, its tensors, a report, then steps
 * on command until told to exit (or until the demo is gone). Between commands it
 * is blocked in read(): idle, calling nothing of gpumem. */
static void user_main(int number, enum policy p, const struct tensor *job, size_t njob,
                      int cmd_fd, int rep_fd)
{
    char comm[32]; /* the kernel keeps 15 characters: "demo-user-N" fits */
    snprintf(comm, sizeof comm, "demo-user-%d", number);
    prctl(PR_SET_NAME, comm); /* the command gpumem-smi shows */
    struct report r;
    memset(&r, 0, sizeof r);
    r.info.struct_size = sizeof r.info;
    void *kept[TENSORS + 1] = {0};
    void *extra[8] = {0};
    size_t nextra = 0;
    gpumem_runtime *rt = open_runtime(&r);
    r.ok = rt && configure(rt, p, &r);
    /* Initialized before its first tensor, as a framework's session does: its
     * budget is planned from the card as it is now. */
    if (r.ok && (r.status = gpumem_initialize(rt)) != GPUMEM_OK) {
        snprintf(r.error, sizeof r.error, "%s", gpumem_last_error());
        r.ok = false;
    }
    for (size_t i = 0; i < njob && r.ok; i++)
        r.ok = allocate(rt, &job[i], 0x11 * (int)(i + 1), &kept[i], &r);
    if (rt)
        gpumem_get_memory_info(rt, 0, &r.info);
    struct command c;
    while (write_all(rep_fd, &r, sizeof r) && read_all(cmd_fd, &c, sizeof c) &&
           c.op != 'x') {
        r.ok = true;
        r.status = GPUMEM_OK;
        r.error[0] = '\0';
        if (c.op == 'a' && rt && nextra < sizeof extra / sizeof extra[0]) {
            c.name[sizeof c.name - 1] = '\0';
            const struct tensor t = {c.name, c.bytes};
            r.ok = allocate(rt, &t, 0x77, &extra[nextra], &r);
            nextra += extra[nextra] != NULL;
        } else if (c.op == 'f') {
            while (nextra > 0)
                gpumem_free(rt, extra[--nextra]);
        }
        if (rt)
            gpumem_get_memory_info(rt, 0, &r.info);
    }
    /* Destroying the runtime gives its memory back to the card; so would the
     * process's end, since the card counts a dead process's memory as free. */
    gpumem_runtime_destroy(rt);
    _exit(0);
}

/* ------------------------------------------------------------ the demo -- */

static struct user *started[8]; /* users running now: a new one closes their pipes */
static size_t nstarted;

/* Starts user `number` with `job` under policy p, giving back its cache on
 * request or not, and reads its first report; false when the process could not
 * be started or ended without a report (the demo itself failed). */
static bool start_user(struct user *u, int number, enum policy p,
                       const struct tensor *job, size_t njob, bool give)
{
    int cmd[2], rep[2];
    memset(u, 0, sizeof *u);
    u->number = number;
    u->cmd_fd = u->rep_fd = -1;
    if (pipe2(cmd, O_CLOEXEC) != 0)
        return false;
    if (pipe2(rep, O_CLOEXEC) != 0) {
        close(cmd[0]);
        close(cmd[1]);
        return false;
    }
    setenv("GPUMEM_SHARE_GIVE", give ? "on" : "off", 1);
    fflush(stdout); /* or the child's exit would print it twice */
    pid_t pid = fork();
    if (pid == 0) {
        /* The other users' pipes stay the demo's: a user must see its own
         * command pipe close when the demo goes, whichever order they end in. */
        for (size_t i = 0; i < nstarted; i++) {
            close(started[i]->cmd_fd);
            close(started[i]->rep_fd);
        }
        close(cmd[1]);
        close(rep[0]);
        user_main(number, p, job, njob, cmd[0], rep[1]);
    }
    close(cmd[0]);
    close(rep[1]);
    if (pid < 0) {
        close(cmd[1]);
        close(rep[0]);
        perror("fork");
        return false;
    }
    u->pid = pid;
    u->cmd_fd = cmd[1];
    u->rep_fd = rep[0];
    started[nstarted++] = u;
    if (!read_all(u->rep_fd, &u->rep, sizeof u->rep)) {
        fprintf(stderr, "user %d's process (pid %ld) ended without a report\n", number,
                (long)pid);
        return false;
    }
    u->last = u->rep;
    return true;
}

/* Asks a running user for a step (allocating `bytes` of `what` for 'a') and waits
 * for its report; false when it is gone. */
static bool ask(struct user *u, char op, const char *what, uint64_t bytes)
{
    struct command c = {.op = op, .bytes = bytes};
    snprintf(c.name, sizeof c.name, "%s", what);
    if (u->pid <= 0 || !write_all(u->cmd_fd, &c, sizeof c) ||
        !read_all(u->rep_fd, &u->last, sizeof u->last)) {
        fprintf(stderr, "user %d's process (pid %ld) is gone\n", u->number, (long)u->pid);
        return false;
    }
    return true;
}

/* Tells every running user to exit and waits for them, so that the next scene
 * starts on an empty card. */
static void stop_users(void)
{
    for (size_t i = 0; i < nstarted; i++) {
        struct command c = {.op = 'x'};
        write_all(started[i]->cmd_fd, &c, sizeof c);
        close(started[i]->cmd_fd);
    }
    for (size_t i = 0; i < nstarted; i++) {
        waitpid(started[i]->pid, NULL, 0);
        close(started[i]->rep_fd);
        started[i]->pid = 0;
    }
    nstarted = 0;
}

/* Runs gpumem-smi with `arg` (NULL: none) on this run's card and ledger folder;
 * its standard output in out (NUL-terminated, cut at n - 1). Returns its exit
 * status, or -1 when it could not be run. */
static int run_smi(const char *arg, char *out, size_t n)
{
    char ledger_opt[] = "--ledger-dir";
    int fds[2];
    out[0] = '\0';
    if (pipe2(fds, O_CLOEXEC) != 0)
        return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        dup2(fds[1], STDERR_FILENO); /* its messages go in the table's place */
        char *argv[] = {smi_path, ledger_opt, ledger_dir, (char *)arg, NULL};
        execv(smi_path, argv);
        fprintf(stderr, "cannot run %s: %s\n", smi_path, strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    if (pid < 0) {
        close(fds[0]);
        return -1;
    }
    size_t len = 0;
    ssize_t k;
    char rest[512]; /* past n - 1: read on, or gpumem-smi would block writing */
    while ((k = len < n - 1 ? read(fds[0], out + len, n - 1 - len)
                            : read(fds[0], rest, sizeof rest)) > 0 ||
           (k < 0 && errno == EINTR))
        len += k > 0 && len < n - 1 ? (size_t)k : 0;
    out[len] = '\0';
    close(fds[0]);
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
        return -1;
    return WEXITSTATUS(st);
}

/* The figure `key` of the first logical device of process `pid` in gpumem-smi's
 * JSON; false when it is not there. */
static bool json_figure(const char *json, pid_t pid, const char *key, uint64_t *out)
{
    char pat[64];
    snprintf(pat, sizeof pat, "{\"pid\": %ld,", (long)pid);
    const char *p = strstr(json, pat);
    if (!p)
        return false;
    const char *end = strstr(p + 1, "{\"pid\": "); /* the next process, if any */
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    p = strstr(p, pat);
    if (!p || (end && p > end))
        return false;
    return sscanf(p + strlen(pat), "%" SCNu64, out) == 1;
}

/* Prints gpumem-smi's table of the card while the users run, and checks that its
 * --json shows each user's figures as the user itself counts them. Returns false
 * when gpumem-smi fails or disagrees; true, having said so, when it is not built. */
static bool show_smi(struct user *const *users, size_t n)
{
    static char out[1 << 16];
    if (!smi_path[0]) {
        printf("  (no gpumem-smi table: it is not built, see the note at the top)\n");
        return true;
    }
    printf("  gpumem-smi, while they run:\n");
    int rc = run_smi(NULL, out, sizeof out);
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n"))
        printf("  | %s\n", line);
    if (rc != 0) {
        printf("  gpumem-smi FAILED (exit status %d)\n", rc);
        return false;
    }
    rc = run_smi("--json", out, sizeof out);
    bool agree = rc == 0;
    for (size_t i = 0; i < n && agree; i++) {
        const struct user *u = users[i];
        uint64_t reserved, in_use;
        agree = json_figure(out, u->pid, "reserved_bytes", &reserved) &&
                json_figure(out, u->pid, "in_use_bytes", &in_use) &&
                reserved == u->last.info.reserved_bytes &&
                in_use == u->last.info.current_bytes;
        if (!agree)
            printf("  gpumem-smi --json does NOT show user %d (pid %ld) as it counts "
                   "itself\n",
                   u->number, (long)u->pid);
    }
    if (agree)
        printf("  gpumem-smi --json shows each user's reserved and in-use bytes as the "
               "user counts them\n");
    return agree;
}

static void print_table(struct user *const *users, size_t n, const char *outcome_ok)
{
    char a[32], b[32], c[32], d[32];
    uint64_t reserved = 0, total = 0;
    printf("  %-4s  %7s  %10s  %10s  %10s  %10s  %s\n", "user", "pid", "reserved",
           "in use", "peak", "limit", "outcome");
    for (size_t i = 0; i < n; i++) {
        const struct user *u = users[i];
        const gpumem_memory_info *m = &u->last.info;
        printf("  %-4d  %7ld  %10s  %10s  %10s  %10s  %s\n", u->number, (long)u->pid,
               size_str(m->reserved_bytes, a, sizeof a),
               size_str(m->current_bytes, b, sizeof b),
               size_str(m->peak_bytes, c, sizeof c),
               size_str(m->limit_bytes, d, sizeof d),
               u->rep.ok ? outcome_ok : "OUT OF MEMORY");
        reserved += m->reserved_bytes;
        if (u->rep.card_total)
            total = u->rep.card_total;
    }
    for (size_t i = 0; i < n; i++) {
        if (!users[i]->rep.ok) {
            printf("  user %d failed to allocate\n", users[i]->number);
            print_wrapped(6, users[i]->rep.error);
        }
    }
    printf("  card: %s of %s free while %s run\n",
           size_str(total > reserved ? total - reserved : 0, a, sizeof a),
           size_str(total, b, sizeof b), n == USERS ? "the three users" : "they");
}

/* Runs the three users under one policy on an empty card, one process each,
 * started one after the other; returns how many ran, or -1 when the demo itself
 * could not be set up. */
static int run_policy(enum policy p, bool *cap_held, bool *smi_ok)
{
    struct user users[USERS];
    struct user *all[USERS];
    int ran = 0, result = -1;
    printf("\n%s\n", policy_title[p]);
    for (int i = 0; i < USERS; i++) {
        all[i] = &users[i];
        if (!start_user(&users[i], i + 1, p, workload, TENSORS, true))
            goto out;
        ran += users[i].rep.ok;
    }
    if (p == LIMITED) {
        /* 1.5 GiB more would take user 1 to 4.5 GiB, past its cap: its pool
         * refuses, whatever the card has left. */
        if (!ask(&users[0], 'a', "activations", 1536 * MIB))
            goto out;
        *cap_held = users[0].last.status == GPUMEM_ERR_OUT_OF_MEMORY;
        printf("  user 1 asks for 1.50 GiB more (4.50 GiB in all): %s\n",
               *cap_held ? "refused by its 4 GiB cap" : "NOT refused");
        if (!users[0].last.ok)
            print_wrapped(6, users[0].last.error);
        if (!ask(&users[0], 'f', "", 0))
            goto out;
    }
    print_table(all, USERS, "ran (3 tensors written)");
    *smi_ok = show_smi(all, USERS) && *smi_ok;
    result = ran;
out:
    stop_users();
    return result;
}

/* Scene 4, once: user 1 (growth) loads its weights and runs a large step, and
 * the 8 GiB it freed stay cached while it sits idle; then user 2 (growth)
 * starts and needs more than the card has free. Returns false when the demo
 * itself failed; *ran says whether user 2's tensors were allocated (and, with
 * give-back, whether its budget counted user 1's cache), *given how much user
 * 1's reserve fell meanwhile. */
static bool give_back_run(bool give, struct user *a, struct user *b, bool *ran,
                          uint64_t *given, bool *smi_ok)
{
    char v[32], x[32], y[32], z[32], w[32], line[512];
    *ran = false;
    *given = 0;
    if (!start_user(a, 1, GROWTH, trainer, 1, give) || !a->rep.ok)
        return false;
    /* Two 4 GiB activations, written and freed: the pool keeps them cached. */
    if (!ask(a, 'a', "activations", TRAINER_FREED / 2) || !a->last.ok ||
        !ask(a, 'a', "activations", TRAINER_FREED / 2) || !a->last.ok ||
        !ask(a, 'f', "", 0))
        return false;
    uint64_t before = a->last.info.reserved_bytes;
    uint64_t total = a->rep.card_total, need = 0;
    for (size_t i = 0; i < NEWCOMER; i++)
        need += newcomer[i].bytes;
    snprintf(line, sizeof line,
             "user 1 (growth%s) loads its weights (%s), runs a large step (%s at its "
             "peak) and frees its activations: %s reserved, %s in use, %s cached; then "
             "it sits idle",
             give ? "" : ", GPUMEM_SHARE_GIVE=off",
             size_str(trainer[0].bytes, v, sizeof v),
             size_str(a->last.info.peak_bytes, x, sizeof x),
             size_str(before, y, sizeof y),
             size_str(a->last.info.current_bytes, z, sizeof z),
             size_str(before - a->last.info.current_bytes, w, sizeof w));
    print_wrapped(2, line);
    if (!start_user(b, 2, GROWTH, NULL, 0, true) || !b->rep.ok)
        return false;
    snprintf(line, sizeof line,
             "user 2 (growth) starts and needs %s; the card has %s free; user 2's "
             "budget: %s (%s, less the driver's headroom)",
             size_str(need, x, sizeof x),
             size_str(total > before ? total - before : 0, y, sizeof y),
             size_str(b->rep.info.limit_bytes, z, sizeof z),
             give ? "what is free and what user 1 caches and would give back"
                  : "what is free: user 1 gives nothing back");
    print_wrapped(2, line);
    if (give) { /* what nvidia-smi cannot show: memory held but not in use */
        struct user *both[2] = {a, b};
        *smi_ok = show_smi(both, 2) && *smi_ok;
    }
    b->rep.ok = true;
    for (size_t i = 0; i < NEWCOMER && b->rep.ok; i++) {
        if (!ask(b, 'a', newcomer[i].name, newcomer[i].bytes))
            return false;
        b->rep = b->last; /* its outcome, as the table shows it */
    }
    if (!ask(a, 'i', "", 0)) /* user 1's figures now: it called nothing meanwhile */
        return false;
    /* With give-back, the budget the line above explains must pass what is free. */
    *ran = b->rep.ok && (!give || b->rep.info.limit_bytes > total - before);
    *given =
        before > a->last.info.reserved_bytes ? before - a->last.info.reserved_bytes : 0;
    return true;
}

static bool run_give_back(bool *refused_without, bool *ran_with, uint64_t *given,
                          bool *both_ran, bool *smi_ok)
{
    char x[32];
    struct user a, b;
    struct user *both[2] = {&a, &b};
    bool ran = false, ok;
    uint64_t gone = 0;
    printf("\n4. Give-back on request: a user's cache goes to the user who needs it\n");
    printf(" a. as with TensorFlow or PyTorch, the cache stays where it is\n");
    ok = give_back_run(false, &a, &b, &ran, &gone, smi_ok);
    if (ok) {
        *refused_without = !ran && b.last.status == GPUMEM_ERR_OUT_OF_MEMORY && gone == 0;
        printf("  user 2: %s; user 1 still reserves %s\n",
               ran ? "ran (NOT refused)" : "OUT OF MEMORY",
               size_str(a.last.info.reserved_bytes, x, sizeof x));
        if (!ran)
            print_wrapped(6, b.rep.error);
    }
    stop_users();
    if (!ok)
        return false;

    printf(" b. with gpumem's give-back (the default)\n");
    ok = give_back_run(true, &a, &b, &ran, &gone, smi_ok);
    if (ok) {
        *ran_with = ran;
        *given = gone;
        printf("  user 2: %s; user 1's give-back thread released %s while user 1 sat "
               "idle\n",
               ran ? "ran" : "OUT OF MEMORY", size_str(gone, x, sizeof x));
        if (!ran)
            print_wrapped(6, b.rep.error);
        /* Both run: user 1 takes its next step beside user 2. */
        ok = ask(&a, 'a', "activations", TRAINER_STEP);
        if (ok) {
            *both_ran = ran && a.last.ok;
            printf("  user 1's next step (%s of activations): %s\n",
                   size_str(TRAINER_STEP, x, sizeof x),
                   a.last.ok ? "ran" : "OUT OF MEMORY");
            if (!a.last.ok)
                print_wrapped(6, a.last.error);
            a.rep.ok = a.last.ok;
            print_table(both, 2, "ran (tensors written)");
        }
    }
    stop_users();
    return ok;
}

/* Finds gpumem-smi in the build folder the demo was built in (the demo is
 * build/examples/gpumem-demo, gpumem-smi build/tools/gpumem-smi). */
static void find_smi(void)
{
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    smi_path[0] = '\0';
    if (n <= 0)
        return;
    self[n] = '\0';
    for (int up = 0; up < 2; up++) {
        char *slash = strrchr(self, '/');
        if (!slash)
            return;
        *slash = '\0';
    }
    snprintf(smi_path, sizeof smi_path, "%.4080s/tools/gpumem-smi", self);
    if (access(smi_path, X_OK) != 0) {
        printf("Note: gpumem-smi is not at %s, so the demo runs without its tables "
               "(`meson compile -C build gpumem-smi` builds it).\n",
               smi_path);
        smi_path[0] = '\0';
    }
}

/* Unsets every GPUMEM_ and TF_ variable (the story must not depend on the shell)
 * and sets this run's own. */
static bool set_environment(void)
{
    extern char **environ;
    for (bool again = true; again;) {
        again = false;
        for (char **e = environ; *e; e++) {
            if (strncmp(*e, "GPUMEM_", 7) == 0 || strncmp(*e, "TF_", 3) == 0) {
                char name[256];
                size_t len = strcspn(*e, "=");
                snprintf(name, sizeof name, "%.*s", (int)len, *e);
                unsetenv(name);
                again = true; /* environ changed under us: start again */
                break;
            }
        }
    }
    snprintf(machine, sizeof machine, "demo-%ld", (long)getpid());
    snprintf(ledger_dir, sizeof ledger_dir, "/tmp/gpumem-demo-XXXXXX");
    if (!mkdtemp(ledger_dir)) {
        perror("mkdtemp /tmp/gpumem-demo-XXXXXX");
        return false;
    }
    setenv("GPUMEM_BACKEND", "sim", 1);
    setenv("GPUMEM_SIM_DEVICES", CARD, 1);
    setenv("GPUMEM_SIM_MACHINE", machine, 1);
    setenv("GPUMEM_LEDGER", "on", 1);
    setenv("GPUMEM_LEDGER_DIR", ledger_dir, 1);
    /* The wait ends as soon as every giver has answered (a few ms here); on a
     * loaded machine (the test suite beside it) an idle process's thread may take
     * longer than the default 500 ms to be scheduled, and the story is not about
     * that. */
    setenv("GPUMEM_SHARE_WAIT_MS", "5000", 1);
    return true;
}

/* Removes this run's ledger folder and its simulated machine's files. */
static void remove_files(void)
{
    char path[512];
    DIR *d = opendir(ledger_dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            snprintf(path, sizeof path, "%s/%s", ledger_dir, e->d_name);
            unlink(path);
        }
        closedir(d);
        rmdir(ledger_dir);
    }
    snprintf(path, sizeof path, "/dev/shm/gpumem-sim-%s.machine", machine);
    unlink(path);
    /* the machine's count of its one card, a ledger file per user (ledger.c) */
    snprintf(path, sizeof path, "/dev/shm/gpumem-sim-%s-0.u%lu.ledger", machine,
             (unsigned long)geteuid());
    unlink(path);
}

/* A user process stuck in gpumem would otherwise hang the demo in waitpid. */
static void too_long(int sig)
{
    static const char msg[] = "\nThe demo took more than 90 s: a user process is "
                              "stuck. NOT what the demo expects!\n";
    (void)sig;
    if (write(STDOUT_FILENO, msg, sizeof msg - 1) < 0)
        _exit(1);
    _exit(1);
}

int main(void)
{
    char a[32], b[32], c[32], d[32];
    uint64_t want = 0;
    for (size_t i = 0; i < TENSORS; i++)
        want += workload[i].bytes;
    signal(SIGPIPE, SIG_IGN); /* a user that died is seen by its pipe's EOF */
    signal(SIGALRM, too_long);
    alarm(90); /* it takes a few seconds */
    if (!set_environment())
        return 1;
    printf("gpumem %s demo: three users share one simulated 12 GiB NVIDIA TITAN X "
           "(Pascal),\neach a process of its own.\n"
           "Each wants %s: weights %s, activations %s, workspace %s.\n",
           GPUMEM_VERSION_STRING, size_str(want, a, sizeof a),
           size_str(workload[0].bytes, b, sizeof b),
           size_str(workload[1].bytes, c, sizeof c),
           size_str(workload[2].bytes, d, sizeof d));
    find_smi();

    bool cap_held = false, smi_ok = true;
    int greedy = run_policy(GREEDY, &cap_held, &smi_ok);
    int growth = run_policy(GROWTH, &cap_held, &smi_ok);
    int limited = run_policy(LIMITED, &cap_held, &smi_ok);
    bool refused_without = false, ran_with = false, both_ran = false;
    uint64_t given = 0;
    bool scene4 = run_give_back(&refused_without, &ran_with, &given, &both_ran, &smi_ok);
    /* User 2 lacked 3 GiB (5.5 GiB needed, 2.5 GiB free): user 1 must have given
     * at least that much back for the story to be the one told. */
    bool gave = scene4 && refused_without && ran_with && both_ran && given >= 3 * GIB;
    remove_files();

    bool as_told =
        greedy == 1 && growth == USERS && limited == USERS && cap_held && gave && smi_ok;
    printf(
        "\nSummary: greedy %d of 3 users ran, growth %d of 3, 4 GiB limits %d of 3%s;\n"
        "given back on request: %s %s;\ngpumem-smi: %s.\n",
        greedy < 0 ? 0 : greedy, growth < 0 ? 0 : growth, limited < 0 ? 0 : limited,
        cap_held ? " (and the cap held)" : " (and the cap did NOT hold)",
        size_str(given, a, sizeof a),
        gave ? "by user 1, and user 2 ran (and did not without it)" : "NOT as told",
        !smi_path[0] ? "not built, not shown"
        : smi_ok     ? "it showed every user as the user counts itself"
                     : "FAILED or disagreed with a user");
    printf("%s\n", as_told ? "As expected." : "NOT what the demo expects!");
    return as_told ? 0 : 1;
}
