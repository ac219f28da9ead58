/* The per-GPU ledger (lib/ledger.c) with real processes: each child forks from
 * this one and opens the ledger afresh, as another program would. Admission
 * races, SIGKILL at each point (holding the admission lock, updating its
 * figures, requesting, giving), corrupt, truncated, foreign and unreadable
 * files, a full slot table, an idle process giving back through its thread, and
 * fork children. Every case works in its own mkdtemp folder under /tmp. */
#include "ledger.h"

#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#define MiB  (UINT64_C(1) << 20)
#define GiB  (UINT64_C(1) << 30)
#define UUID "GPU-0123abcd-test"
/* the slowest a dead process's share may take to come back (issue 23) */
#define RECLAIM_LIMIT_MS 1000

static char dir[64];
static char ledger_file[128];

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/gpumem-ledger-XXXXXX");
    if (!mkdtemp(dir)) {
        HARNESS_FAIL("mkdtemp: %s", strerror(errno));
        exit(1);
    }
    snprintf(ledger_file, sizeof ledger_file, "%s/gpumem-%s.u%lu.ledger", dir, UUID,
             (unsigned long)geteuid());
}

/* Removes the folder and what is in it (files only: no case makes folders in it
 * but the one that puts a folder in the ledger's place, which removes it). */
static void remove_dir(void)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char path[512];
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
        closedir(d);
    }
    if (rmdir(dir) != 0)
        HARNESS_FAIL("rmdir %s: %s", dir, strerror(errno));
}

static struct ledger_params params(uint64_t total)
{
    struct ledger_params p;
    memset(&p, 0, sizeof p);
    p.dir = dir;
    p.uuid = UUID;
    p.total_bytes = total;
    return p;
}

static struct ledger *open_ok(uint64_t total)
{
    struct ledger_params p = params(total);
    struct ledger *l = NULL;
    struct reason why = {""};
    gpumem_status s = gpumem__ledger_open(&p, &l, &why);
    if (s != GPUMEM_OK)
        HARNESS_FAIL("open: %s: %s", gpumem_status_name(s), why.text);
    return l;
}

static struct ledger *open_read_only(void)
{
    struct ledger_params p = params(0);
    p.read_only = true;
    struct ledger *l = NULL;
    struct reason why = {""};
    gpumem_status s = gpumem__ledger_open(&p, &l, &why);
    if (s != GPUMEM_OK)
        HARNESS_FAIL("open read-only: %s: %s", gpumem_status_name(s), why.text);
    return l;
}

/* The live processes' total holding, and their count. */
static uint64_t total_held(struct ledger *l, size_t *count)
{
    struct ledger_entry e[16];
    size_t n = 0;
    struct reason why = {""};
    if (gpumem__ledger_read(l, e, 16, &n, &why) != GPUMEM_OK)
        HARNESS_FAIL("read: %s", why.text);
    uint64_t sum = 0;
    for (size_t i = 0; i < n && i < 16; i++)
        sum += e[i].held;
    if (count)
        *count = n;
    return sum;
}

/* ------------------------------------------------------------ children -- */

/* Sleeps until a signal kills the process (no handler is installed, so pause()
 * never returns); the return only satisfies the callers' types. */
static int sleep_until_killed(void)
{
    while (pause() == -1) {
    }
    return 0;
}

/* Forks a child that runs fn(arg) and exits with its result; an alarm ends one
 * that hangs. */
static pid_t spawn(int (*fn)(void *), void *arg)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        HARNESS_FAIL("fork: %s", strerror(errno));
        exit(1);
    }
    if (pid == 0) {
        alarm(30);
        _exit(fn(arg));
    }
    return pid;
}

/* Waits for a child at most 10 s: its exit status, 128 + a signal, or -1. */
static int reap(pid_t pid)
{
    int status = 0;
    for (int waited = 0; waited < 1000; waited++) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (r < 0 && errno != EINTR)
            return -1;
        usleep(10 * 1000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    HARNESS_FAIL("child %ld did not end", (long)pid);
    return -1;
}

static void kill_and_reap(pid_t pid)
{
    kill(pid, SIGKILL);
    int r = reap(pid);
    if (r != 128 + SIGKILL)
        HARNESS_FAIL("child %ld ended with %d, not by SIGKILL", (long)pid, r);
}

/* Reads one byte within ms milliseconds; false on timeout or end of file. */
static bool wait_byte(int fd, char *c, int ms)
{
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, ms) != 1)
        return false;
    return read(fd, c, 1) == 1;
}

static void send_byte(int fd, char c)
{
    if (write(fd, &c, 1) != 1)
        _exit(90);
}

struct chan {
    int fds[2];
};

static void chan_open(struct chan *c)
{
    if (pipe(c->fds) != 0) {
        HARNESS_FAIL("pipe: %s", strerror(errno));
        exit(1);
    }
}

static void chan_close(struct chan *c)
{
    close(c->fds[0]);
    close(c->fds[1]);
}

/* Admits `bytes` on device 0 of a ledger of `total` bytes, retrying for at most
 * 3 s: the time from the call until it passed, or UINT64_MAX. */
static uint64_t admit_within(struct ledger *l, uint64_t bytes)
{
    uint64_t start = now_ms();
    struct reason why = {""};
    while (now_ms() - start < 3000) {
        gpumem_status s = gpumem__ledger_admit(l, 0, bytes, NULL, &why);
        if (s == GPUMEM_OK)
            return now_ms() - start;
        if (s != GPUMEM_ERR_OUT_OF_MEMORY) {
            HARNESS_FAIL("admit: %s: %s", gpumem_status_name(s), why.text);
            return UINT64_MAX;
        }
        usleep(1000);
    }
    HARNESS_FAIL("admit of %llu MiB still refused after 3 s: %s",
                 (unsigned long long)(bytes / MiB), why.text);
    return UINT64_MAX;
}

/* --------------------------------------------------------------- cases -- */

TEST(create_and_attach)
{
    make_dir();
    mode_t old = umask(077);
    struct ledger *a = open_ok(1000 * MiB);
    umask(old);
    struct ledger *b = open_ok(1000 * MiB);
    if (!a || !b)
        goto out;
    struct stat st;
    ASSERT_EQ(stat(ledger_file, &st), 0);
    /* whatever the umask: the user's own (issue 33: it was 0666 under umask 077) */
    ASSERT_EQ(st.st_mode & 0777, 0600);
    ASSERT_EQ(st.st_uid, geteuid());
    ASSERT_STREQ(gpumem__ledger_path(a), ledger_file);
    ASSERT_EQ(gpumem__ledger_slot_count(a), GPUMEM_LEDGER_SLOTS);
    ASSERT_EQ(gpumem__ledger_total_bytes(b), 1000 * MiB);
    ASSERT_NE(gpumem__ledger_slot(a), gpumem__ledger_slot(b));

    char comm[32] = "";
    FILE *f = fopen("/proc/self/comm", "r");
    if (f) {
        if (fgets(comm, sizeof comm, f))
            comm[strcspn(comm, "\n")] = '\0';
        fclose(f);
    }
    ASSERT_OK(gpumem__ledger_set_device(a, 2, LEDGER_POLICY_GROWTH, 512 * MiB));
    gpumem__ledger_set_usage(a, 2, 10 * MiB, 64 * MiB, 12 * MiB);
    struct ledger_entry e[4];
    size_t n = 0;
    ASSERT_OK(gpumem__ledger_read(b, e, 4, &n, NULL));
    ASSERT_EQ(n, 2);
    for (size_t i = 0; i < n && i < 4; i++) {
        ASSERT_EQ(e[i].pid, getpid());
        ASSERT_EQ(e[i].uid, getuid());
        ASSERT_STREQ(e[i].comm, comm);
        ASSERT_TRUE(e[i].start_time > 0);
        ASSERT_EQ(e[i].self, (int)e[i].slot == gpumem__ledger_slot(b));
        if ((int)e[i].slot == gpumem__ledger_slot(a)) {
            ASSERT_EQ(e[i].num_devices, 3);
            ASSERT_EQ(e[i].dev[2].policy, LEDGER_POLICY_GROWTH);
            ASSERT_EQ(e[i].dev[2].limit, 512 * MiB);
            ASSERT_EQ(e[i].dev[2].in_use, 10 * MiB);
            ASSERT_EQ(e[i].dev[2].reserved, 64 * MiB);
            ASSERT_EQ(e[i].dev[2].peak, 12 * MiB);
            ASSERT_EQ(e[i].held, 64 * MiB);
        }
    }
    /* the two-call idiom */
    ASSERT_OK(gpumem__ledger_read(b, NULL, 0, &n, NULL));
    ASSERT_EQ(n, 2);
    ASSERT_OK(gpumem__ledger_read(b, e, 1, &n, NULL));
    ASSERT_EQ(n, 2);
    gpumem__ledger_close(a);
    a = NULL;
    ASSERT_OK(gpumem__ledger_read(b, e, 4, &n, NULL));
    ASSERT_EQ(n, 1);

    /* no temporary file is left behind: the folder holds the ledger alone */
    DIR *d = opendir(dir);
    int files = 0;
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL)
        files += de->d_name[0] != '.';
    if (d)
        closedir(d);
    ASSERT_EQ(files, 1);
out:
    gpumem__ledger_close(a);
    gpumem__ledger_close(b);
    remove_dir();
}

TEST(bad_params)
{
    make_dir();
    struct ledger *l = (struct ledger *)&l;
    struct reason why = {""};
    struct ledger_params p = params(MiB);
    const char *bad[] = {
        "", "../etc", "a/b", "gpu.0",
        "0123456789012345678901234567890123456789012345678901234567890123"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        p.uuid = bad[i];
        ASSERT_STATUS(gpumem__ledger_open(&p, &l, &why), GPUMEM_ERR_INVALID_ARGUMENT);
        ASSERT_CONTAINS(why.text, "UUID");
        ASSERT_TRUE(l == NULL);
    }
    p = params(0);
    ASSERT_STATUS(gpumem__ledger_open(&p, &l, &why), GPUMEM_ERR_INVALID_ARGUMENT);
    p = params(MiB);
    p.slots = GPUMEM_LEDGER_MAX_SLOTS + 1;
    ASSERT_STATUS(gpumem__ledger_open(&p, &l, &why), GPUMEM_ERR_INVALID_ARGUMENT);
    p = params(MiB);
    p.dir = "/nonexistent/gpumem-ledger";
    ASSERT_STATUS(gpumem__ledger_open(&p, &l, &why), GPUMEM_ERR_BACKEND);
    ASSERT_CONTAINS(why.text, "/nonexistent/gpumem-ledger/gpumem-" UUID ".u");
    /* read-only opens an existing file only */
    p = params(0);
    p.read_only = true;
    ASSERT_STATUS(gpumem__ledger_open(&p, &l, &why), GPUMEM_ERR_BACKEND);
    ASSERT_CONTAINS(why.text, "No such file");
    remove_dir();
}

TEST(admission_and_saturation)
{
    make_dir();
    struct ledger *a = open_ok(1000 * MiB), *b = open_ok(1000 * MiB);
    struct reason why = {""};
    if (!a || !b)
        goto out;
    ASSERT_OK(gpumem__ledger_admit(a, 0, 600 * MiB, NULL, &why));
    ASSERT_STATUS(gpumem__ledger_admit(b, 0, 600 * MiB, NULL, &why),
                  GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_CONTAINS(why.text, ledger_file);
    char pid[32];
    snprintf(pid, sizeof pid, "pid %ld", (long)getpid());
    ASSERT_CONTAINS(why.text, pid); /* the holder is named */
    ASSERT_CONTAINS(why.text, "600.00 MiB");
    ASSERT_OK(gpumem__ledger_admit(b, 3, 400 * MiB, NULL, &why));
    /* exactly full, then one byte over */
    ASSERT_STATUS(gpumem__ledger_admit(b, 3, 1, NULL, &why), GPUMEM_ERR_OUT_OF_MEMORY);

    /* a process holds the larger of admitted and reserved */
    gpumem__ledger_set_usage(a, 0, 0, 700 * MiB, 0);
    ASSERT_EQ(total_held(a, NULL), 1100 * MiB);
    gpumem__ledger_unadmit(b, 3, 400 * MiB);
    ASSERT_STATUS(gpumem__ledger_admit(b, 0, 301 * MiB, NULL, &why),
                  GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_OK(gpumem__ledger_admit(b, 0, 300 * MiB, NULL, &why));

    /* taking back more than admitted stops at 0, never wraps to 17 TB */
    gpumem__ledger_unadmit(a, 0, UINT64_MAX);
    gpumem__ledger_set_usage(a, 0, 0, 0, 0);
    gpumem__ledger_unadmit(a, 5, 1);
    struct ledger_entry e[2];
    size_t n = 0;
    ASSERT_OK(gpumem__ledger_read(a, e, 2, &n, NULL));
    for (size_t i = 0; i < n && i < 2; i++)
        if (e[i].self)
            ASSERT_EQ(e[i].held, 0);
    ASSERT_EQ(total_held(a, NULL), 300 * MiB);

    /* sums saturate: a huge figure refuses, it does not wrap into passing */
    ASSERT_STATUS(gpumem__ledger_admit(a, 1, UINT64_MAX, NULL, &why),
                  GPUMEM_ERR_OUT_OF_MEMORY);
    gpumem__ledger_set_usage(b, 7, 0, UINT64_MAX, 0);
    ASSERT_STATUS(gpumem__ledger_admit(a, 1, 1, NULL, &why), GPUMEM_ERR_OUT_OF_MEMORY);
    gpumem__ledger_set_usage(b, 7, 0, 0, 0);
    ASSERT_OK(gpumem__ledger_admit(a, 1, 1, NULL, &why));

    ASSERT_STATUS(gpumem__ledger_admit(a, GPUMEM_LEDGER_DEVICES, 1, NULL, &why),
                  GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(gpumem__ledger_set_device(a, GPUMEM_LEDGER_DEVICES, 0, 0),
                  GPUMEM_ERR_INVALID_ARGUMENT);
out:
    gpumem__ledger_close(a);
    gpumem__ledger_close(b);
    remove_dir();
}

struct fake_free {
    uint64_t free_bytes;
    gpumem_status status;
    int calls;
};

static gpumem_status query_free(void *ctx, uint64_t *free_bytes, struct reason *why)
{
    struct fake_free *f = ctx;
    f->calls++;
    *free_bytes = f->free_bytes;
    if (f->status != GPUMEM_OK)
        return gpumem__reason(why, f->status, "cuMemGetInfo failed (test)");
    return GPUMEM_OK;
}

TEST(admission_with_driver_free)
{
    make_dir();
    struct ledger *a = open_ok(1000 * MiB), *b = open_ok(1000 * MiB);
    struct reason why = {""};
    struct fake_free f = {500 * MiB, GPUMEM_OK, 0};
    struct ledger_free_query q = {query_free, &f};
    if (!a || !b)
        goto out;
    ASSERT_OK(gpumem__ledger_admit(a, 0, 400 * MiB, &q, &why));
    ASSERT_EQ(f.calls, 1);
    /* a's 400 MiB are admitted, not taken yet: the driver's 500 MiB free are
     * not all b's */
    ASSERT_STATUS(gpumem__ledger_admit(b, 0, 200 * MiB, &q, &why),
                  GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_CONTAINS(why.text, "admitted and not yet taken");
    ASSERT_CONTAINS(why.text, ledger_file);
    /* a took them: the driver now says 100 MiB free, all b's */
    gpumem__ledger_set_usage(a, 0, 0, 400 * MiB, 0);
    f.free_bytes = 100 * MiB;
    ASSERT_OK(gpumem__ledger_admit(b, 0, 100 * MiB, &q, &why));
    /* the query's failure is the admission's */
    f.status = GPUMEM_ERR_BACKEND;
    ASSERT_STATUS(gpumem__ledger_admit(b, 1, 1, &q, &why), GPUMEM_ERR_BACKEND);
    ASSERT_CONTAINS(why.text, "cuMemGetInfo failed (test)");
    /* a budget within what the device already reserved takes nothing new: no
     * driver query */
    f.status = GPUMEM_OK;
    f.calls = 0;
    gpumem__ledger_set_usage(b, 2, 0, 50 * MiB, 0);
    ASSERT_OK(gpumem__ledger_admit(b, 2, 50 * MiB, &q, &why));
    ASSERT_EQ(f.calls, 0);
out:
    gpumem__ledger_close(a);
    gpumem__ledger_close(b);
    remove_dir();
}

struct planned {
    uint64_t room;    /* the room the plan was given */
    uint64_t want[2]; /* what it wants: UINT64_MAX = the room, split */
    int calls;
};

static void plan_split(void *ctx, uint64_t room, uint64_t *want)
{
    struct planned *pl = ctx;
    pl->calls++;
    pl->room = room;
    want[0] = pl->want[0] == UINT64_MAX ? room / 2 : pl->want[0];
    want[1] = pl->want[1] == UINT64_MAX ? room - room / 2 : pl->want[1];
}

/* The room a plan is given is what gpumem__ledger_admit's two checks leave, so
 * that a plan that wants no more is admitted, whatever happened before the lock:
 * here a's 400 MiB, admitted and not yet taken, are free in the driver's
 * figure, which a plan made from that figure alone counted twice (the cause of
 * issue 31's 32 processes failing initialization). */
TEST(a_plan_is_admitted_against_the_room_it_is_given)
{
    make_dir();
    struct ledger *a = open_ok(1000 * MiB), *b = open_ok(1000 * MiB);
    struct reason why = {""};
    struct fake_free f = {500 * MiB, GPUMEM_OK, 0};
    struct ledger_free_query q = {query_free, &f};
    struct planned pl = {0, {UINT64_MAX, UINT64_MAX}, 0};
    uint64_t want[2];
    if (!a || !b)
        goto out;
    ASSERT_OK(gpumem__ledger_admit(a, 0, 400 * MiB, &q, &why));
    ASSERT_OK(gpumem__ledger_admit_planned(b, 2, &q, plan_split, &pl, want, &why));
    ASSERT_EQ(pl.room, 100 * MiB); /* 500 free, 400 of them a's */
    ASSERT_EQ(total_held(a, NULL), 500 * MiB);
    /* b's own holding counts too: nothing is left */
    ASSERT_OK(gpumem__ledger_admit_planned(b, 2, &q, plan_split, &pl, want, &why));
    ASSERT_EQ(pl.room, 0);
    /* without a query, the GPU's total less every holding */
    pl.want[0] = pl.want[1] = 0;
    ASSERT_OK(gpumem__ledger_admit_planned(b, 2, NULL, plan_split, &pl, want, &why));
    ASSERT_EQ(pl.room, 500 * MiB);
    /* a plan that wants more than its room is refused and admits nothing */
    pl.want[0] = 200 * MiB;
    pl.want[1] = 301 * MiB;
    ASSERT_STATUS(gpumem__ledger_admit_planned(b, 2, NULL, plan_split, &pl, want, &why),
                  GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_CONTAINS(why.text, "501.00 MiB asked, 500.00 MiB may be admitted now");
    ASSERT_CONTAINS(why.text, ledger_file);
    ASSERT_EQ(total_held(a, NULL), 500 * MiB);
    /* within what a device reserved already, a plan adds nothing to the holding */
    gpumem__ledger_set_usage(b, 1, 0, 450 * MiB, 0); /* b: 50 + 450 */
    pl.want[0] = 0;
    pl.want[1] = 400 * MiB; /* 50 + 400 admitted, within the 450 reserved */
    ASSERT_OK(gpumem__ledger_admit_planned(b, 2, NULL, plan_split, &pl, want, &why));
    ASSERT_EQ(pl.room, 100 * MiB);
    ASSERT_EQ(total_held(a, NULL), 900 * MiB);
    /* a failed query fails the admission before any plan */
    f.status = GPUMEM_ERR_BACKEND;
    pl.calls = 0;
    ASSERT_STATUS(gpumem__ledger_admit_planned(b, 2, &q, plan_split, &pl, want, &why),
                  GPUMEM_ERR_BACKEND);
    ASSERT_EQ(pl.calls, 0);
    ASSERT_STATUS(gpumem__ledger_admit_planned(b, 0, NULL, plan_split, &pl, want, &why),
                  GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(gpumem__ledger_admit_planned(b, GPUMEM_LEDGER_DEVICES + 1, NULL,
                                               plan_split, &pl, want, &why),
                  GPUMEM_ERR_INVALID_ARGUMENT);
out:
    gpumem__ledger_close(a);
    gpumem__ledger_close(b);
    remove_dir();
}

/* Eight processes admitted at the same instant: each opens first, then all are
 * released by one close of a pipe they all read. */
struct racer {
    struct chan ready, go, result, done;
};

static int race_child(void *arg)
{
    struct racer *r = arg;
    close(r->go.fds[1]);
    close(r->done.fds[1]);
    struct ledger_params p = params(1000 * MiB);
    struct ledger *l = NULL;
    if (gpumem__ledger_open(&p, &l, NULL) != GPUMEM_OK)
        return 2;
    send_byte(r->ready.fds[1], 'r');
    char c;
    if (read(r->go.fds[0], &c, 1) != 0)
        return 3;
    gpumem_status s = gpumem__ledger_admit(l, 0, 300 * MiB, NULL, NULL);
    send_byte(r->result.fds[1], s == GPUMEM_OK                  ? 'y'
                                : s == GPUMEM_ERR_OUT_OF_MEMORY ? 'n'
                                                                : 'e');
    while (read(r->done.fds[0], &c, 1) > 0) {
    }
    gpumem__ledger_close(l);
    return 0;
}

TEST(eight_admitted_at_once)
{
    make_dir();
    for (int round = 0; round < 20; round++) {
        struct racer r;
        chan_open(&r.ready);
        chan_open(&r.go);
        chan_open(&r.result);
        chan_open(&r.done);
        pid_t pids[8];
        for (int i = 0; i < 8; i++)
            pids[i] = spawn(race_child, &r);
        close(r.go.fds[0]);
        close(r.done.fds[0]);
        char c;
        int ready = 0;
        while (ready < 8 && wait_byte(r.ready.fds[0], &c, 5000))
            ready++;
        ASSERT_EQ(ready, 8);
        close(r.go.fds[1]); /* go */
        int yes = 0, no = 0;
        for (int i = 0; i < 8 && wait_byte(r.result.fds[0], &c, 5000); i++) {
            yes += c == 'y';
            no += c == 'n';
        }
        /* 300 MiB three times fit 1000 MiB, four times do not */
        ASSERT_EQ(yes, 3);
        ASSERT_EQ(no, 5);
        struct ledger *ro = open_read_only();
        if (ro) {
            size_t n = 0;
            ASSERT_LE(total_held(ro, &n), 1000 * MiB);
            ASSERT_EQ(n, 8);
            gpumem__ledger_close(ro);
        }
        close(r.done.fds[1]);
        for (int i = 0; i < 8; i++)
            ASSERT_EQ(reap(pids[i]), 0);
        close(r.ready.fds[0]);
        close(r.ready.fds[1]);
        close(r.result.fds[0]);
        close(r.result.fds[1]);
    }
    remove_dir();
}

/* A child that admits `bytes` of 1000 MiB, then stops at `point` until killed. */
enum kill_point { HOLDING_ADMISSION_LOCK, UPDATING, REQUESTING, GIVING };
struct victim {
    enum kill_point point;
    uint64_t bytes;
    struct chan ready;
};

static gpumem_status stop_in_query(void *ctx, uint64_t *free_bytes, struct reason *why)
{
    (void)why;
    struct victim *v = ctx;
    *free_bytes = UINT64_MAX;
    send_byte(v->ready.fds[1], 'k');
    sleep_until_killed();
    return GPUMEM_OK;
}

static void stop_in_give(void *ctx, uint64_t bytes)
{
    (void)bytes;
    struct victim *v = ctx;
    send_byte(v->ready.fds[1], 'k');
    sleep_until_killed();
}

static int victim_child(void *arg)
{
    struct victim *v = arg;
    struct ledger_params p = params(1000 * MiB);
    struct ledger *l = NULL;
    if (gpumem__ledger_open(&p, &l, NULL) != GPUMEM_OK ||
        gpumem__ledger_admit(l, 0, v->bytes, NULL, NULL) != GPUMEM_OK)
        return 2;
    struct ledger_free_query q = {stop_in_query, v};
    struct ledger_request_result res;
    switch (v->point) {
    case HOLDING_ADMISSION_LOCK:
        gpumem__ledger_admit(l, 1, MiB, &q, NULL); /* stops inside */
        break;
    case UPDATING:
        send_byte(v->ready.fds[1], 'k');
        for (uint64_t i = 0;; i++) {
            gpumem__ledger_set_usage(l, 0, i % v->bytes, (i * 7) % v->bytes, i);
            gpumem__ledger_unadmit(l, 1, 1);
        }
    case REQUESTING:
        send_byte(v->ready.fds[1], 'r');
        gpumem__ledger_request(l, v->bytes, 30000, &res, NULL);
        break;
    case GIVING:
        if (gpumem__ledger_give(l, stop_in_give, v, NULL) != GPUMEM_OK)
            return 3;
        send_byte(v->ready.fds[1], 'g');
        for (;;)
            pause();
    }
    return 4;
}

/* Kills the victim and measures how long until its share is back: until this
 * process's ledger admits `asked` bytes, which fit only without the victim. */
static void kill_and_measure(const char *what, pid_t pid, struct ledger *mine,
                             uint64_t asked)
{
    uint64_t t0 = now_ms();
    kill(pid, SIGKILL);
    uint64_t took = admit_within(mine, asked);
    printf("  %s: share back %llu ms after SIGKILL\n", what, (unsigned long long)took);
    ASSERT_LE(took, RECLAIM_LIMIT_MS);
    ASSERT_LE(now_ms() - t0, RECLAIM_LIMIT_MS);
    ASSERT_EQ(reap(pid), 128 + SIGKILL);
    gpumem__ledger_unadmit(mine, 0, UINT64_MAX);
}

TEST(sigkill_holding_admission_lock)
{
    make_dir();
    struct victim v = {HOLDING_ADMISSION_LOCK, 600 * MiB, {{-1, -1}}};
    chan_open(&v.ready);
    struct ledger_params p = params(1000 * MiB);
    p.lock_wait_ms = 100;
    struct ledger *quick = NULL, *mine = open_ok(1000 * MiB);
    ASSERT_OK(gpumem__ledger_open(&p, &quick, NULL));
    pid_t pid = spawn(victim_child, &v);
    char c;
    ASSERT_TRUE(wait_byte(v.ready.fds[0], &c, 5000));
    if (quick && mine) {
        /* the lock is held: a bounded wait, then a reason, no hang */
        struct reason why = {""};
        uint64_t t0 = now_ms();
        ASSERT_STATUS(gpumem__ledger_admit(quick, 0, MiB, NULL, &why),
                      GPUMEM_ERR_BACKEND);
        ASSERT_LE(now_ms() - t0, 1000);
        ASSERT_CONTAINS(why.text, "admission lock");
        ASSERT_CONTAINS(why.text, ledger_file);
        kill_and_measure("holding the admission lock", pid, mine, 1000 * MiB);
    } else {
        kill_and_reap(pid);
    }
    gpumem__ledger_close(quick);
    gpumem__ledger_close(mine);
    chan_close(&v.ready);
    remove_dir();
}

TEST(sigkill_updating_figures)
{
    make_dir();
    struct victim v = {UPDATING, 600 * MiB, {{-1, -1}}};
    chan_open(&v.ready);
    struct ledger *mine = open_ok(1000 * MiB);
    pid_t pid = spawn(victim_child, &v);
    char c;
    ASSERT_TRUE(wait_byte(v.ready.fds[0], &c, 5000));
    usleep(20 * 1000); /* well inside its loop of updates */
    if (mine)
        kill_and_measure("updating its figures", pid, mine, 1000 * MiB);
    else
        kill_and_reap(pid);
    gpumem__ledger_close(mine);
    chan_close(&v.ready);
    remove_dir();
}

struct delayed_kill {
    pid_t pid;
    unsigned after_ms;
    uint64_t at_ms;
};

static void *kill_later(void *arg)
{
    struct delayed_kill *k = arg;
    usleep(k->after_ms * 1000);
    k->at_ms = now_ms();
    kill(k->pid, SIGKILL);
    return NULL;
}

/* A giver G whose callback never returns, and a requester R waiting for it
 * (30 s): R killed mid-request leaves nothing held, and a request that waits
 * for G stops waiting once G dies mid-give. */
TEST(sigkill_requesting_and_giving)
{
    make_dir();
    struct victim g = {GIVING, 400 * MiB, {{-1, -1}}},
                  r = {REQUESTING, 400 * MiB, {{-1, -1}}};
    chan_open(&g.ready);
    chan_open(&r.ready);
    struct ledger *mine = open_ok(1000 * MiB);
    char c;
    pid_t gp = spawn(victim_child, &g);
    ASSERT_TRUE(wait_byte(g.ready.fds[0], &c, 5000) && c == 'g');
    pid_t rp = spawn(victim_child, &r);
    ASSERT_TRUE(wait_byte(r.ready.fds[0], &c, 5000) && c == 'r');
    /* G got R's request and is stuck in its callback: R is mid-request */
    ASSERT_TRUE(wait_byte(g.ready.fds[0], &c, 5000) && c == 'k');
    if (mine) {
        kill_and_measure("mid-request", rp, mine, 600 * MiB);
        /* this process's request waits for G, until G dies */
        struct delayed_kill k = {gp, 100, 0};
        pthread_t t;
        ASSERT_EQ(pthread_create(&t, NULL, kill_later, &k), 0);
        struct ledger_request_result res;
        ASSERT_OK(gpumem__ledger_request(mine, MiB, 5000, &res, NULL));
        uint64_t end = now_ms();
        pthread_join(t, NULL);
        ASSERT_TRUE(res.complete);
        ASSERT_EQ(res.givers, 0);
        printf("  mid-give: the request ended %llu ms after SIGKILL\n",
               (unsigned long long)(end - k.at_ms));
        ASSERT_LE(end - k.at_ms, RECLAIM_LIMIT_MS);
        uint64_t took = admit_within(mine, 1000 * MiB);
        ASSERT_LE(now_ms() - k.at_ms, RECLAIM_LIMIT_MS + took);
        ASSERT_LE(took, RECLAIM_LIMIT_MS);
        ASSERT_EQ(reap(gp), 128 + SIGKILL);
    } else {
        kill_and_reap(rp);
        kill_and_reap(gp);
    }
    gpumem__ledger_close(mine);
    chan_close(&g.ready);
    chan_close(&r.ready);
    remove_dir();
}

/* ----------------------------------------------------- corrupt files -- */

/* Writes `len` bytes at `at` of the ledger file. */
static void poke(off_t at, const void *bytes, size_t len)
{
    int fd = open(ledger_file, O_WRONLY);
    if (fd < 0 || pwrite(fd, bytes, len, at) != (ssize_t)len)
        HARNESS_FAIL("poke %s: %s", ledger_file, strerror(errno));
    if (fd >= 0)
        close(fd);
}

/* Makes a valid ledger file of `slots` slots, with no one attached. */
static void fresh_file(unsigned slots)
{
    unlink(ledger_file);
    struct ledger_params p = params(1000 * MiB);
    p.slots = slots;
    struct ledger *l = NULL;
    ASSERT_OK(gpumem__ledger_open(&p, &l, NULL));
    gpumem__ledger_close(l);
}

/* Opening is refused at once, with a reason that names the file and says `why`. */
static void expect_refused_as(const char *what, const char *words, uint64_t total,
                              bool reader_too)
{
    struct ledger_params p = params(total);
    struct ledger *l = (struct ledger *)&p;
    struct reason why = {""};
    uint64_t t0 = now_ms();
    gpumem_status s = gpumem__ledger_open(&p, &l, &why);
    if (s != GPUMEM_ERR_BACKEND)
        HARNESS_FAIL("%s: got %s, expected GPUMEM_ERR_BACKEND", what,
                     gpumem_status_name(s));
    ASSERT_TRUE(l == NULL);
    ASSERT_CONTAINS(why.text, ledger_file);
    ASSERT_CONTAINS(why.text, words);
    ASSERT_LE(now_ms() - t0, 1000);
    if (!reader_too)
        return;
    /* a reader is refused alike */
    p.read_only = true;
    if (gpumem__ledger_open(&p, &l, &why) != GPUMEM_ERR_BACKEND)
        HARNESS_FAIL("%s: a read-only open was not refused", what);
    if (l)
        gpumem__ledger_close(l);
}

static void expect_refused(const char *what, const char *words, uint64_t total)
{
    expect_refused_as(what, words, total, true);
}

TEST(corrupt_truncated_foreign)
{
    make_dir();
    /* the layout's offsets, pinned here: changing them needs a new version */
    const off_t magic_at = 0, version_at = 8, slot_size_at = 16, slots_at = 20,
                uuid_at = 40;
    uint32_t u32;

    fresh_file(4);
    poke(magic_at, "NOTLEDGR", 8);
    expect_refused("bad magic", "not a gpumem ledger", 1000 * MiB);

    fresh_file(4);
    u32 = 99;
    poke(version_at, &u32, 4);
    expect_refused("foreign version", "layout version 99", 1000 * MiB);

    fresh_file(4);
    u32 = 12345;
    poke(slot_size_at, &u32, 4);
    expect_refused("foreign slot size", "sizes", 1000 * MiB);

    fresh_file(4);
    u32 = 0;
    poke(slots_at, &u32, 4);
    expect_refused("no slots", "0 slots", 1000 * MiB);

    fresh_file(4);
    u32 = 0xffffffffu;
    poke(slots_at, &u32, 4);
    expect_refused("too many slots", "4294967295 slots", 1000 * MiB);

    fresh_file(4);
    u32 = 5; /* more slots than the file holds */
    poke(slots_at, &u32, 4);
    expect_refused("slots past the end", "truncated", 1000 * MiB);

    fresh_file(4);
    ASSERT_EQ(truncate(ledger_file, 100), 0);
    expect_refused("truncated in its header", "truncated", 1000 * MiB);

    fresh_file(4);
    struct stat st;
    ASSERT_EQ(stat(ledger_file, &st), 0);
    ASSERT_EQ(truncate(ledger_file, st.st_size - 1), 0);
    expect_refused("truncated by one byte", "truncated", 1000 * MiB);

    fresh_file(4);
    ASSERT_EQ(truncate(ledger_file, 0), 0);
    expect_refused("empty", "truncated", 1000 * MiB);

    fresh_file(4);
    ASSERT_EQ(truncate(ledger_file, st.st_size + 4096), 0);
    expect_refused("longer than its slots", "expected", 1000 * MiB);

    fresh_file(4);
    poke(uuid_at, "GPU-ffff", 8);
    expect_refused("another GPU's", "another GPU", 1000 * MiB);

    fresh_file(4);
    char junk[64];
    memset(junk, 'x', sizeof junk);
    poke(uuid_at, junk, sizeof junk); /* no terminating NUL */
    expect_refused("UUID without its end", "another GPU", 1000 * MiB);

    fresh_file(4);
    /* (a reader does not know the size: it takes the file's) */
    expect_refused_as("another size of GPU", "says the GPU has", 2000 * MiB, false);

    /* not a regular file in its place: a folder, a FIFO (the open must not
     * block), a symbolic link (not followed) */
    unlink(ledger_file);
    ASSERT_EQ(mkdir(ledger_file, 0700), 0);
    expect_refused("a folder", "", 1000 * MiB);
    rmdir(ledger_file);
    ASSERT_EQ(mkfifo(ledger_file, 0666), 0);
    expect_refused("a FIFO", "not a regular file", 1000 * MiB);
    unlink(ledger_file);
    char target[160];
    snprintf(target, sizeof target, "%s/elsewhere", dir);
    ASSERT_EQ(symlink(target, ledger_file), 0);
    expect_refused("a symbolic link", "cannot open", 1000 * MiB);
    unlink(ledger_file);
    remove_dir();
}

/* A file truncated by someone else after it was opened: the next admission,
 * request and read notice and refuse, and nothing faults (the slot itself is
 * still inside the shorter file, see docs/ledger.md on the residual risk). */
TEST(truncated_while_open)
{
    make_dir();
    struct ledger_params p = params(1000 * MiB);
    p.slots = 4;
    struct ledger *l = NULL;
    struct reason why = {""};
    struct ledger_request_result res;
    size_t n;
    ASSERT_OK(gpumem__ledger_open(&p, &l, &why));
    if (l) {
        ASSERT_EQ(gpumem__ledger_slot(l), 0);
        ASSERT_OK(gpumem__ledger_admit(l, 0, MiB, NULL, &why));
        struct stat st;
        ASSERT_EQ(stat(ledger_file, &st), 0);
        ASSERT_EQ(truncate(ledger_file, st.st_size - 1024), 0);
        ASSERT_STATUS(gpumem__ledger_admit(l, 0, MiB, NULL, &why), GPUMEM_ERR_BACKEND);
        ASSERT_CONTAINS(why.text, ledger_file);
        ASSERT_CONTAINS(why.text, "changed size");
        ASSERT_STATUS(gpumem__ledger_request(l, MiB, 100, &res, &why),
                      GPUMEM_ERR_BACKEND);
        ASSERT_STATUS(gpumem__ledger_read(l, NULL, 0, &n, &why), GPUMEM_ERR_BACKEND);
        gpumem__ledger_close(l);
    }
    remove_dir();
}

/* A ledger this user cannot open: refused with the system's words, no crash.
 * Root opens anything, so as root the check runs in a child that gives up its
 * privileges (uid and gid 65534, "nobody"). */
static int unreadable_child(void *arg)
{
    (void)arg;
    if (getuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0))
        return 2;
    harness_failures = 0;
    /* the reader asks for the file of the user it was made for */
    struct ledger_params p = params(0);
    p.read_only = true;
    p.of_user = true;
    p.user = getuid() == 65534 ? 0 : getuid();
    struct ledger *l = NULL;
    struct reason why = {""};
    ASSERT_STATUS(gpumem__ledger_open(&p, &l, &why), GPUMEM_ERR_BACKEND);
    ASSERT_CONTAINS(why.text, "Permission denied");
    return harness_failures ? 1 : 0;
}

TEST(unreadable_and_other_users)
{
    make_dir();
    fresh_file(4);
    if (getuid() == 0)
        ASSERT_EQ(chmod(dir, 0711), 0); /* mkdtemp's 0700: let "nobody" through */
    else
        ASSERT_EQ(chmod(ledger_file, 0000), 0);
    ASSERT_EQ(reap(spawn(unreadable_child, NULL)), 0);
    remove_dir();
}

/* ------------------------------------------- hostile neighbours (issue 33) -- */

/* Another user ("nobody"), against root's ledger: it can neither open the file
 * (to write, read, lock or map it), nor shorten it, nor zero its figures, nor
 * link, rename or remove it in a sticky folder such as /dev/shm. Returns 0 when
 * every attempt was refused. */
static int neighbour_child(void *arg)
{
    (void)arg;
    if (setgid(65534) != 0 || setuid(65534) != 0)
        return 2;
    if (open(ledger_file, O_RDWR) >= 0 || errno != EACCES)
        return 3;
    if (open(ledger_file, O_RDONLY) >= 0 || errno != EACCES)
        return 4;
    if (truncate(ledger_file, 0) == 0 || errno != EACCES)
        return 5;
    char elsewhere[300];
    snprintf(elsewhere, sizeof elsewhere, "%s/moved", dir);
    if (rename(ledger_file, elsewhere) == 0 || unlink(ledger_file) == 0)
        return 6;
    /* the library refuses to read another user's ledger it may not open */
    struct ledger_params p = params(0);
    p.read_only = true;
    p.of_user = true;
    p.user = 0;
    struct ledger *l = NULL;
    if (gpumem__ledger_open(&p, &l, NULL) != GPUMEM_ERR_BACKEND)
        return 7;
    /* and gives this user a ledger of its own, which root's processes do not
     * count (nor does it count theirs: the driver's free memory is the word
     * between users) */
    p = params(4 * GiB);
    if (gpumem__ledger_open(&p, &l, NULL) != GPUMEM_OK)
        return 8;
    bool own = strstr(gpumem__ledger_path(l), ".u65534.ledger") != NULL;
    gpumem_status s = gpumem__ledger_admit(l, 0, 3 * GiB, NULL, NULL);
    gpumem__ledger_close(l);
    return !own ? 9 : s != GPUMEM_OK ? 10 : 0;
}

/* The attacks of issue 33 on the ledger, by another user: truncating a root
 * process's ledger (it died of SIGBUS), and zeroing a live process's figures
 * (which let a second process be admitted 3 GiB on a 4 GiB card of which 3 GiB
 * were held). Both are refused by the file's mode and owner; the root process
 * goes on, and the second admission is refused. Needs root (to be two users);
 * as another user the check of the mode and owner above stands for it. */
TEST(another_user_can_neither_shorten_nor_zero)
{
    if (getuid() != 0) {
        printf("(not root: the check of a second user is skipped)\n");
        return;
    }
    make_dir();
    ASSERT_EQ(chmod(dir, 01777), 0); /* as /dev/shm: anyone may add files */
    struct ledger *a = open_ok(4 * GiB);
    if (!a)
        goto out;
    ASSERT_OK(gpumem__ledger_admit(a, 0, 3 * GiB, NULL, NULL));
    gpumem__ledger_set_usage(a, 0, 3 * GiB, 3 * GiB, 3 * GiB);
    ASSERT_EQ(reap(spawn(neighbour_child, NULL)), 0);
    /* the mapping is whole: every figure and call works */
    struct ledger_usage *u = gpumem__ledger_usage(a, 0);
    ASSERT_TRUE(u != NULL);
    if (u)
        atomic_store_explicit(&u->in_use, 2 * GiB, memory_order_relaxed);
    struct ledger *b = open_ok(4 * GiB);
    struct reason why = {""};
    if (b) {
        ASSERT_STATUS(gpumem__ledger_admit(b, 0, 3 * GiB, NULL, &why),
                      GPUMEM_ERR_OUT_OF_MEMORY);
        ASSERT_OK(gpumem__ledger_admit(b, 0, 1 * GiB, NULL, &why));
        size_t count = 0;
        ASSERT_EQ(total_held(b, &count), 4 * GiB);
        ASSERT_EQ(count, 2);
    }
    gpumem__ledger_close(b);
out:
    gpumem__ledger_close(a);
    remove_dir();
}

/* Files planted at the ledger's name: one another user owns (as root: chown),
 * and one of this user's that others may open (0666, 0640). Each is refused
 * with the reason, by a process and by a reader, never used or crashed on. */
TEST(a_planted_or_open_file_is_refused)
{
    make_dir();
    fresh_file(4);
    ASSERT_EQ(chmod(ledger_file, 0666), 0);
    expect_refused("mode 0666", "mode 0666 lets other users open it", 1000 * MiB);
    ASSERT_EQ(chmod(ledger_file, 0640), 0);
    expect_refused("mode 0640", "mode 0640", 1000 * MiB);
    ASSERT_EQ(chmod(ledger_file, 0600), 0);
    if (getuid() == 0) {
        ASSERT_EQ(chown(ledger_file, 65534, 65534), 0);
        expect_refused("another user's", "owned by user 65534, not 0", 1000 * MiB);
    }
    remove_dir();
}

/* A reader (gpumem-smi) of a ledger whose writer shortens and restores it
 * without pause: it reads copies with pread, never a mapping, so every read
 * ends with a status and the reader lives (it died of SIGBUS when it mapped the
 * file). The writer here is this user; as root, gpumem-smi reads every user's
 * ledgers, whose owners could do the same to it. */
static int shortener_child(void *arg)
{
    const struct chan *stop = arg;
    int fd = open(ledger_file, O_RDWR);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0)
        return 2;
    char c;
    for (unsigned i = 0; !wait_byte(stop->fds[0], &c, 0); i++)
        if (ftruncate(fd, i % 2 ? st.st_size : (off_t)(i / 2 % 3) * 2048) != 0)
            return 3;
    return ftruncate(fd, st.st_size) == 0 ? 0 : 4;
}

TEST(a_reader_survives_a_file_shortened_under_it)
{
    make_dir();
    fresh_file(4);
    struct ledger *owner = open_ok(1000 * MiB);
    struct ledger *reader = open_read_only();
    if (owner && reader) {
        struct chan stop;
        chan_open(&stop);
        pid_t child = spawn(shortener_child, &stop);
        unsigned ok = 0, refused = 0;
        uint64_t end = now_ms() + 500;
        while (now_ms() < end) {
            struct ledger_entry e[4];
            size_t n = 0;
            struct reason why = {""};
            gpumem_status s = gpumem__ledger_read(reader, e, 4, &n, &why);
            ok += s == GPUMEM_OK;
            refused += s == GPUMEM_ERR_BACKEND;
            ASSERT_TRUE(s == GPUMEM_OK || s == GPUMEM_ERR_BACKEND);
            ASSERT_LE(n, 4);
        }
        send_byte(stop.fds[1], 's');
        ASSERT_EQ(reap(child), 0);
        chan_close(&stop);
        printf("(reads while the file changed size: %u listed, %u refused)\n", ok,
               refused);
        ASSERT_TRUE(refused > 0);
    }
    gpumem__ledger_close(reader);
    /* the owner's mapping was shortened too (the same user did it): its next
     * admission is refused, not faulted on; the file is whole again by now */
    gpumem__ledger_close(owner);
    remove_dir();
}

/* A ledger replaced while mapped (renamed over by this user; another user
 * cannot in a sticky folder): the process keeps its mapping of the old file and
 * goes on; a newcomer uses the new one. Nothing faults. */
TEST(replaced_while_mapped)
{
    make_dir();
    struct ledger *a = open_ok(1000 * MiB);
    if (a) {
        ASSERT_OK(gpumem__ledger_admit(a, 0, 600 * MiB, NULL, NULL));
        char other[300];
        snprintf(other, sizeof other, "%s.new", ledger_file);
        ASSERT_EQ(rename(ledger_file, other), 0);
        fresh_file(4); /* a new, empty one in its place */
        ASSERT_OK(gpumem__ledger_admit(a, 0, 100 * MiB, NULL, NULL));
        size_t count = 0;
        ASSERT_EQ(total_held(a, &count), 700 * MiB);
        struct ledger *b = open_ok(1000 * MiB);
        ASSERT_EQ(total_held(b, &count), 0); /* the new file: no one but b */
        ASSERT_EQ(count, 1);
        gpumem__ledger_close(b);
    }
    gpumem__ledger_close(a);
    remove_dir();
}

/* ------------------------------------------------------------- slots -- */

static int hold_slot_child(void *arg)
{
    struct chan *ready = arg;
    struct ledger_params p = params(1000 * MiB);
    struct ledger *l = NULL;
    if (gpumem__ledger_open(&p, &l, NULL) != GPUMEM_OK)
        return 2;
    send_byte(ready->fds[1], 'h');
    return sleep_until_killed();
}

TEST(full_slot_table)
{
    make_dir();
    fresh_file(3);
    struct ledger *held[2] = {open_ok(1000 * MiB), open_ok(1000 * MiB)};
    struct chan ready;
    chan_open(&ready);
    pid_t pid = spawn(hold_slot_child, &ready);
    char c;
    ASSERT_TRUE(wait_byte(ready.fds[0], &c, 5000));
    /* an existing file keeps its slot count */
    struct ledger_params p = params(1000 * MiB);
    p.slots = 10;
    struct ledger *l = (struct ledger *)&p;
    struct reason why = {""};
    uint64_t t0 = now_ms();
    ASSERT_STATUS(gpumem__ledger_open(&p, &l, &why), GPUMEM_ERR_BACKEND);
    ASSERT_LE(now_ms() - t0, 1000);
    ASSERT_TRUE(l == NULL);
    ASSERT_CONTAINS(why.text, ledger_file);
    ASSERT_CONTAINS(why.text, "all 3 slots are held by live processes");
    /* a dead holder's slot is taken by the next process that attaches */
    kill_and_reap(pid);
    l = open_ok(1000 * MiB);
    ASSERT_TRUE(l != NULL);
    gpumem__ledger_close(l);
    /* and a closed one's at once */
    gpumem__ledger_close(held[1]);
    held[1] = open_ok(1000 * MiB);
    ASSERT_TRUE(held[1] != NULL);
    gpumem__ledger_close(held[0]);
    gpumem__ledger_close(held[1]);
    chan_close(&ready);
    remove_dir();
}

/* A dead process's figures are wiped by the next admission, so a display shows
 * its slot free; while it lived its figures were there. */
static int admit_and_wait_child(void *arg)
{
    struct chan *ready = arg;
    struct ledger_params p = params(1000 * MiB);
    struct ledger *l = NULL;
    if (gpumem__ledger_open(&p, &l, NULL) != GPUMEM_OK ||
        gpumem__ledger_admit(l, 0, 100 * MiB, NULL, NULL) != GPUMEM_OK)
        return 2;
    send_byte(ready->fds[1], 'a');
    return sleep_until_killed();
}

TEST(dead_slot_reclaimed)
{
    make_dir();
    struct ledger *mine = open_ok(1000 * MiB);
    struct chan ready;
    chan_open(&ready);
    pid_t pid = spawn(admit_and_wait_child, &ready);
    char c;
    ASSERT_TRUE(wait_byte(ready.fds[0], &c, 5000));
    struct ledger *ro = open_read_only();
    size_t n = 0;
    if (ro && mine) {
        ASSERT_EQ(total_held(ro, &n), 100 * MiB);
        ASSERT_EQ(n, 2);
        kill_and_reap(pid);
        /* a reader never counts the dead, reclaimed or not */
        ASSERT_EQ(total_held(ro, &n), 0);
        ASSERT_EQ(n, 1);
        ASSERT_OK(gpumem__ledger_admit(mine, 0, 1000 * MiB, NULL, NULL));
        /* the slot is now free in the file itself */
        int fd = open(ledger_file, O_RDONLY);
        uint32_t state = 7;
        off_t slot1 = 256 + 1 * (off_t)(64 + 80 * GPUMEM_LEDGER_DEVICES);
        ASSERT_EQ(pread(fd, &state, 4, slot1 + 4), 4);
        ASSERT_EQ(state, 0);
        close(fd);
        /* a read-only ledger admits nothing, writes nothing */
        struct reason why = {""};
        ASSERT_STATUS(gpumem__ledger_admit(ro, 0, 1, NULL, &why), GPUMEM_ERR_UNSUPPORTED);
        ASSERT_CONTAINS(why.text, "read-only");
        ASSERT_EQ(gpumem__ledger_slot(ro), -1);
    } else {
        kill_and_reap(pid);
    }
    gpumem__ledger_close(ro);
    gpumem__ledger_close(mine);
    chan_close(&ready);
    remove_dir();
}

/* ----------------------------------------------------------- give-back -- */

struct idle {
    struct chan ready, got;
    unsigned delay_ms; /* the callback takes this long */
    bool gives;
};

static void give_to_pipe(void *ctx, uint64_t bytes)
{
    struct idle *d = ctx;
    if (d->delay_ms)
        usleep(d->delay_ms * 1000);
    if (write(d->got.fds[1], &bytes, sizeof bytes) != (ssize_t)sizeof bytes)
        _exit(91);
}

/* Opens, starts giving (or not), says so, then sleeps, calling nothing. */
static int idle_child(void *arg)
{
    struct idle *d = arg;
    struct ledger_params p = params(1000 * MiB);
    struct ledger *l = NULL;
    if (gpumem__ledger_open(&p, &l, NULL) != GPUMEM_OK)
        return 2;
    if (d->gives && gpumem__ledger_give(l, give_to_pipe, d, NULL) != GPUMEM_OK)
        return 3;
    send_byte(d->ready.fds[1], 'i');
    return sleep_until_killed();
}

static pid_t start_idle(struct idle *d, bool gives, unsigned delay_ms)
{
    chan_open(&d->ready);
    chan_open(&d->got);
    d->gives = gives;
    d->delay_ms = delay_ms;
    pid_t pid = spawn(idle_child, d);
    char c;
    ASSERT_TRUE(wait_byte(d->ready.fds[0], &c, 5000));
    return pid;
}

static void stop_idle(struct idle *d, pid_t pid)
{
    kill_and_reap(pid);
    chan_close(&d->ready);
    chan_close(&d->got);
}

static void never_called(void *ctx, uint64_t bytes)
{
    (void)bytes;
    (*(int *)ctx)++;
}

/* Children that start a thread are forked while this process has none of its
 * own (ThreadSanitizer refuses threads in a child of a multi-threaded process):
 * this process starts giving last. */
TEST(idle_process_gives_back)
{
    make_dir();
    struct ledger *mine = open_ok(1000 * MiB);
    int own_calls = 0;
    struct reason why = {""};
    struct ledger_request_result res;
    struct idle d;

    /* one that opted out is not waited for */
    pid_t pid = start_idle(&d, false, 0);
    if (mine) {
        uint64_t t0 = now_ms();
        ASSERT_OK(gpumem__ledger_request(mine, MiB, 2000, &res, &why));
        ASSERT_TRUE(res.complete);
        ASSERT_EQ(res.givers, 0);
        ASSERT_LE(now_ms() - t0, 500);
    }
    stop_idle(&d, pid);

    /* a slow one is waited for as long as asked, no longer */
    pid = start_idle(&d, true, 1500);
    if (mine) {
        ASSERT_OK(gpumem__ledger_request(mine, MiB, 200, &res, &why));
        ASSERT_FALSE(res.complete);
        ASSERT_EQ(res.givers, 1);
        ASSERT_EQ(res.answered, 0);
        ASSERT_TRUE(res.waited_ms >= 200);
        ASSERT_LE(res.waited_ms, 1000); /* not the giver's 1500 ms */
    }
    stop_idle(&d, pid);

    /* an idle one answers every request through its thread */
    pid = start_idle(&d, true, 0);
    if (mine) {
        /* this process gives too, but not to itself */
        ASSERT_OK(gpumem__ledger_give(mine, never_called, &own_calls, &why));
        ASSERT_STATUS(gpumem__ledger_give(mine, never_called, &own_calls, &why),
                      GPUMEM_ERR_INVALID_ARGUMENT);
        for (int round = 0; round < 3; round++) {
            ASSERT_OK(gpumem__ledger_request(mine, (100 + (uint64_t)round) * MiB, 2000,
                                             &res, &why));
            ASSERT_TRUE(res.complete);
            ASSERT_EQ(res.givers, 1);
            ASSERT_EQ(res.answered, 1);
            ASSERT_LE(res.waited_ms, 1000);
            uint64_t bytes = 0;
            struct pollfd pf = {d.got.fds[0], POLLIN, 0};
            ASSERT_EQ(poll(&pf, 1, 2000), 1);
            ASSERT_EQ(read(d.got.fds[0], &bytes, sizeof bytes), sizeof bytes);
            ASSERT_EQ(bytes, (100 + (uint64_t)round) * MiB);
            if (round == 0)
                printf("  idle giver answered in %llu ms\n",
                       (unsigned long long)res.waited_ms);
        }
        ASSERT_EQ(own_calls, 0);
    }
    stop_idle(&d, pid);

    /* closing stops the thread promptly */
    uint64_t t0 = now_ms();
    gpumem__ledger_close(mine);
    ASSERT_LE(now_ms() - t0, 500);
    remove_dir();
}

/* A process whose give-back thread is stuck in its callback (as a pool's give
 * waits for the lock its own asking thread holds) and whose other thread then
 * asks: `entered` says the callback began, `go` makes that thread ask (with
 * gpumem__ledger_request_answering), `done` says it asked, `unstick` ends the
 * first callback (later ones return at once). */
struct stuck {
    struct chan ready, entered, go, done, unstick;
    _Atomic int gives;
};

static void give_stuck(void *ctx, uint64_t bytes)
{
    struct stuck *st = ctx;
    char c;
    (void)bytes;
    if (atomic_fetch_add(&st->gives, 1) > 0)
        return;
    send_byte(st->entered.fds[1], 'e');
    if (!wait_byte(st->unstick.fds[0], &c, 20000))
        _exit(92);
}

static int stuck_child(void *arg)
{
    struct stuck *st = arg;
    struct ledger_params p = params(1000 * MiB);
    struct ledger *l = NULL;
    struct ledger_request_result res;
    char c;
    if (gpumem__ledger_open(&p, &l, NULL) != GPUMEM_OK ||
        gpumem__ledger_give(l, give_stuck, st, NULL) != GPUMEM_OK)
        return 2;
    send_byte(st->ready.fds[1], 'i');
    if (!wait_byte(st->go.fds[0], &c, 20000) ||
        gpumem__ledger_request_answering(l, MiB, 0, &res, NULL) != GPUMEM_OK)
        return 3;
    send_byte(st->done.fds[1], 'd');
    return sleep_until_killed();
}

struct asking {
    struct ledger *l;
    unsigned wait_ms;
    struct ledger_request_result res;
};

static void *ask_thread(void *arg)
{
    struct asking *a = arg;
    if (gpumem__ledger_request(a->l, MiB, a->wait_ms, &a->res, NULL) != GPUMEM_OK)
        a->res.givers = 99;
    return NULL;
}

/* This process asks (on a thread) a giver whose thread is stuck; its other
 * thread asks too, answering for it: this process's request is answered then,
 * long before its 10 s. The stuck thread, once free, answers as before. */
TEST(a_requester_answers_for_its_stuck_giver)
{
    make_dir();
    struct ledger *mine = open_ok(1000 * MiB);
    struct stuck st;
    struct stuck *sp = &st;
    chan_open(&st.ready);
    chan_open(&st.entered);
    chan_open(&st.go);
    chan_open(&st.done);
    chan_open(&st.unstick);
    atomic_init(&st.gives, 0);
    pid_t pid = spawn(stuck_child, sp);
    char c;
    ASSERT_TRUE(wait_byte(st.ready.fds[0], &c, 5000));
    struct asking a = {mine, 10000, {0, 0, false, 0}};
    pthread_t t;
    bool started = mine && pthread_create(&t, NULL, ask_thread, &a) == 0;
    if (started) {
        ASSERT_TRUE(wait_byte(st.entered.fds[0], &c, 5000));
        send_byte(st.go.fds[1], 'g');
        ASSERT_TRUE(wait_byte(st.done.fds[0], &c, 5000));
        pthread_join(t, NULL);
        ASSERT_TRUE(a.res.complete);
        ASSERT_EQ(a.res.givers, 1);
        ASSERT_EQ(a.res.answered, 1);
        ASSERT_LE(a.res.waited_ms, 5000);
        printf("  answered for a stuck giver in %llu ms\n",
               (unsigned long long)a.res.waited_ms);
        send_byte(st.unstick.fds[1], 'u');
        /* the giver's thread answers again on its own */
        a.wait_ms = 5000;
        ask_thread(&a);
        ASSERT_TRUE(a.res.complete);
        ASSERT_EQ(a.res.answered, 1);
    }
    kill_and_reap(pid);
    chan_close(&st.ready);
    chan_close(&st.entered);
    chan_close(&st.go);
    chan_close(&st.done);
    chan_close(&st.unstick);
    gpumem__ledger_close(mine);
    remove_dir();
}

/* ---------------------------------------------------------------- fork -- */

struct forked {
    struct ledger *parent;
    int parent_slot;
};

static void not_the_childs(void *ctx, uint64_t bytes)
{
    (void)ctx;
    (void)bytes;
}

static int fork_child(void *arg)
{
    struct forked *f = arg;
    harness_failures = 0;
    harness_case = "fork child";
    struct reason why = {""};
    struct ledger_request_result res;
    size_t n;
    ASSERT_STATUS(gpumem__ledger_admit(f->parent, 0, MiB, NULL, &why),
                  GPUMEM_ERR_UNSUPPORTED);
    ASSERT_CONTAINS(why.text, "fork()");
    ASSERT_CONTAINS(why.text, ledger_file);
    ASSERT_STATUS(gpumem__ledger_request(f->parent, MiB, 100, &res, &why),
                  GPUMEM_ERR_UNSUPPORTED);
    ASSERT_STATUS(gpumem__ledger_read(f->parent, NULL, 0, &n, &why),
                  GPUMEM_ERR_UNSUPPORTED);
    ASSERT_STATUS(gpumem__ledger_give(f->parent, not_the_childs, NULL, &why),
                  GPUMEM_ERR_UNSUPPORTED);
    ASSERT_STATUS(gpumem__ledger_set_device(f->parent, 0, LEDGER_POLICY_GREEDY, 1),
                  GPUMEM_ERR_UNSUPPORTED);
    gpumem__ledger_set_usage(f->parent, 0, 1, 999 * MiB, 1); /* nothing */
    gpumem__ledger_unadmit(f->parent, 0, UINT64_MAX);        /* nothing */
    /* the child's own ledger: its own slot */
    struct ledger *own = open_ok(1000 * MiB);
    if (own) {
        ASSERT_NE(gpumem__ledger_slot(own), f->parent_slot);
        ASSERT_OK(gpumem__ledger_admit(own, 0, 300 * MiB, NULL, &why));
        ASSERT_STATUS(gpumem__ledger_admit(own, 0, 400 * MiB, NULL, &why),
                      GPUMEM_ERR_OUT_OF_MEMORY);
    }
    gpumem__ledger_close(f->parent); /* the parent's slot stays */
    gpumem__ledger_close(own);
    return harness_failures ? 1 : 0;
}

/* A process that admits 600 MiB, forks a child that sleeps, and waits. */
static int sleeper(void *arg)
{
    (void)arg;
    return sleep_until_killed();
}

static int parent_with_child(void *arg)
{
    struct chan *ready = arg;
    struct ledger_params p = params(1000 * MiB);
    struct ledger *l = NULL;
    if (gpumem__ledger_open(&p, &l, NULL) != GPUMEM_OK ||
        gpumem__ledger_admit(l, 0, 600 * MiB, NULL, NULL) != GPUMEM_OK ||
        gpumem__ledger_give(l, not_the_childs, NULL, NULL) != GPUMEM_OK)
        return 2;
    pid_t child = spawn(sleeper, NULL);
    if (write(ready->fds[1], &child, sizeof child) != (ssize_t)sizeof child)
        return 3;
    return sleep_until_killed();
}

TEST(fork_children)
{
    make_dir();
    struct ledger *mine = open_ok(1000 * MiB);
    struct reason why = {""};

    /* a parent killed while its forked child lives: the child's copy of the fd
     * was closed at the fork and it never had the mapping, so the parent's slot
     * dies with the parent (first, while this process has no thread: see
     * idle_process_gives_back) */
    struct chan ready;
    chan_open(&ready);
    pid_t parent = spawn(parent_with_child, &ready);
    pid_t child = 0;
    struct pollfd pf = {ready.fds[0], POLLIN, 0};
    ASSERT_EQ(poll(&pf, 1, 5000), 1);
    ASSERT_EQ(read(ready.fds[0], &child, sizeof child), sizeof child);
    if (mine) {
        ASSERT_STATUS(gpumem__ledger_admit(mine, 0, 1000 * MiB, NULL, &why),
                      GPUMEM_ERR_OUT_OF_MEMORY);
        kill_and_measure("a parent whose forked child lives on", parent, mine,
                         1000 * MiB);
        ASSERT_EQ(kill(child, 0), 0); /* the child was alive all along */
    } else {
        kill_and_reap(parent);
    }
    if (child > 0)
        kill(child, SIGKILL); /* not ours to reap: init adopts it */
    chan_close(&ready);

    /* a child's calls on the parent's ledger are refused; it opens its own */
    if (mine) {
        ASSERT_OK(gpumem__ledger_admit(mine, 0, 600 * MiB, NULL, &why));
        ASSERT_OK(gpumem__ledger_give(mine, not_the_childs, NULL, &why));
        gpumem__ledger_set_usage(mine, 0, 5 * MiB, 10 * MiB, 6 * MiB);
        struct forked f = {mine, gpumem__ledger_slot(mine)};
        ASSERT_EQ(reap(spawn(fork_child, &f)), 0);
        /* the parent's slot and figures are as they were */
        struct ledger_entry e[4];
        size_t n = 0;
        ASSERT_OK(gpumem__ledger_read(mine, e, 4, &n, &why));
        ASSERT_EQ(n, 1);
        ASSERT_TRUE(e[0].self);
        ASSERT_EQ(e[0].dev[0].admitted, 600 * MiB);
        ASSERT_EQ(e[0].dev[0].reserved, 10 * MiB);
        ASSERT_TRUE(e[0].gives);
        ASSERT_STATUS(gpumem__ledger_admit(mine, 0, 401 * MiB, NULL, &why),
                      GPUMEM_ERR_OUT_OF_MEMORY);
    }
    gpumem__ledger_close(mine);
    remove_dir();
}

int main(void)
{
    RUN(create_and_attach);
    RUN(bad_params);
    RUN(admission_and_saturation);
    RUN(admission_with_driver_free);
    RUN(a_plan_is_admitted_against_the_room_it_is_given);
    RUN(eight_admitted_at_once);
    RUN(sigkill_holding_admission_lock);
    RUN(sigkill_updating_figures);
    RUN(sigkill_requesting_and_giving);
    RUN(corrupt_truncated_foreign);
    RUN(truncated_while_open);
    RUN(unreadable_and_other_users);
    RUN(another_user_can_neither_shorten_nor_zero);
    RUN(a_planted_or_open_file_is_refused);
    RUN(a_reader_survives_a_file_shortened_under_it);
    RUN(replaced_while_mapped);
    RUN(full_slot_table);
    RUN(dead_slot_reclaimed);
    RUN(idle_process_gives_back);
    RUN(a_requester_answers_for_its_stuck_giver);
    RUN(fork_children);
    HARNESS_EXIT();
}
