/* gpumem-ledger: what the per-GPU ledger costs the public malloc/free (issue 23,
 * item 8), with it on against off, in processes that share one simulated GPU.
 *
 *   gpumem-ledger [--processes N] [--pairs N] [--runs N] [--ledger on|off|both]
 *                 [--idle-thread]
 *
 * Each run starts N processes (one thread each) on one shared simulated 8 GiB
 * GPU (GPUMEM_SIM_MACHINE and GPUMEM_LEDGER_DIR of this invocation's own, removed
 * at the end), all with the ledger on or all off (GPUMEM_LEDGER). Each process
 * creates a runtime with growth on, keeps 64 blocks live and, for each of `pairs`
 * steps, frees one and allocates it again, sizes cycling through 64 values from
 * 256 B to 1 MiB (as gpumem-entry does); a step is one (free, allocate) pair.
 * The processes start their pairs together and each measures its own thread's
 * CPU time, so that eight processes on fewer cores are not timed waiting for
 * one. Runs alternate off, on, off, on...; printed: the median ns per pair over
 * `runs` runs of each (a run's figure: the mean of its processes) and on's ratio
 * to off, measured in the same invocation.
 * --idle-thread: each process first starts a thread that only sleeps, as a
 * program with threads of its own has them. Without it, a process with the
 * ledger off has one thread and one with it on two (the ledger's give-back
 * thread, asleep on a futex), and glibc runs a one-thread process's mutexes
 * more cheaply: that, not the ledger's stores, is most of the time difference.
 * Before timing, each process checks that it is in the GPU's ledger with the
 * ledger on (a live slot with its pid) and not in it with the ledger off, so the
 * two never measure the same thing by mistake; a failed check exits 2.
 * With --ledger on or off and --processes 1, the pairs run in the calling
 * process, inside bench_ledger_pairs (callgrind: --toggle-collect=bench_ledger_pairs,
 * then divide by `pairs`). */
#include "gpumem.h"
#include "ledger.h"

#include <dirent.h>
#include <pthread.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__GNUC__)
#define NOINLINE __attribute__((noinline))
#else
#define NOINLINE
#endif

#define SLOTS         64
#define MAX_PROCESSES 64

static size_t sizes[SLOTS];
static char machine[48];
static char ledger_dir[64];
static pid_t parent;     /* the invocation's process, which alone removes the files */
static bool idle_thread; /* --idle-thread: each process starts one that sleeps */

static void die(const char *what, const char *why)
{
    fprintf(stderr, "gpumem-ledger: %s failed: %s\n", what, why);
    exit(2);
}

static uint64_t ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

NOINLINE static void bench_ledger_pairs(gpumem_runtime *rt, void **slot, long pairs)
{
    for (long i = 0; i < pairs; i++) {
        int k = (int)(i % SLOTS);
        if (gpumem_free(rt, slot[k]) != GPUMEM_OK ||
            gpumem_malloc(rt, 0, sizes[(k + i) % SLOTS], &slot[k]) != GPUMEM_OK)
            die("a pair", gpumem_last_error());
    }
}

/* Whether this process has a live slot in the ledger of rt's GPU 0. */
static bool in_ledger(gpumem_runtime *rt)
{
    gpumem_physical_device gpu = GPUMEM_STRUCT_INIT(gpumem_physical_device);
    size_t n = 0;
    if (gpumem_list_physical_devices(rt, &gpu, 1, &n) != GPUMEM_OK || n != 1)
        die("gpumem_list_physical_devices", gpumem_last_error());
    struct ledger_params p = {.dir = ledger_dir, .uuid = gpu.uuid, .read_only = true};
    struct ledger *l;
    struct reason why;
    if (gpumem__ledger_open(&p, &l, &why) != GPUMEM_OK)
        return false; /* no ledger file at all */
    static struct ledger_entry e[GPUMEM_LEDGER_SLOTS];
    size_t count = 0;
    bool found = false;
    if (gpumem__ledger_read(l, e, GPUMEM_LEDGER_SLOTS, &count, &why) != GPUMEM_OK)
        die("reading the ledger", why.text);
    for (size_t i = 0; i < count && i < GPUMEM_LEDGER_SLOTS; i++)
        found = found || e[i].pid == (int64_t)getpid();
    gpumem__ledger_close(l);
    return found;
}

/* An idle thread, which only waits: what a program's other threads are to the
 * ledger's give-back thread (see --idle-thread in main). */
static void *sleeper(void *arg)
{
    (void)arg;
    for (;;)
        pause();
    return NULL;
}

/* One process's part of a run: its runtime with the ledger on or off, 64 live
 * blocks, a warm-up; then, between `ready` and `go`, its pairs. Returns the
 * thread CPU ns per pair. With ready < 0, it starts at once. */
static double one_process(bool ledger, long pairs, int ready, int go)
{
    setenv("GPUMEM_LEDGER", ledger ? "on" : "off", 1);
    pthread_t t;
    if (idle_thread && pthread_create(&t, NULL, sleeper, NULL) != 0)
        die("pthread_create", "no idle thread");
    gpumem_runtime *rt;
    if (gpumem_runtime_create(NULL, &rt) != GPUMEM_OK)
        die("gpumem_runtime_create", gpumem_last_error());
    if (gpumem_set_memory_growth(rt, 0, true) != GPUMEM_OK)
        die("gpumem_set_memory_growth", gpumem_last_error());
    void *slot[SLOTS];
    for (int k = 0; k < SLOTS; k++)
        if (gpumem_malloc(rt, 0, sizes[k], &slot[k]) != GPUMEM_OK)
            die("gpumem_malloc (fill)", gpumem_last_error());
    if (in_ledger(rt) != ledger)
        die(ledger ? "GPUMEM_LEDGER=on" : "GPUMEM_LEDGER=off",
            ledger ? "this process has no slot in its GPU's ledger"
                   : "this process has a slot in its GPU's ledger");
    bench_ledger_pairs(rt, slot, pairs / 10 + 1); /* warm-up */
    char c = 'r';
    if (ready >= 0 && (write(ready, &c, 1) != 1 || read(go, &c, 1) != 1))
        die("waiting for the start", strerror(errno));
    uint64_t t0 = ns(CLOCK_THREAD_CPUTIME_ID);
    bench_ledger_pairs(rt, slot, pairs);
    uint64_t elapsed = ns(CLOCK_THREAD_CPUTIME_ID) - t0;
    for (int k = 0; k < SLOTS; k++)
        if (gpumem_free(rt, slot[k]) != GPUMEM_OK)
            die("gpumem_free (drain)", gpumem_last_error());
    gpumem_runtime_destroy(rt);
    return (double)elapsed / (double)pairs;
}

/* One run of n processes: the mean of their ns per pair. */
static double run_once(bool ledger, int n, long pairs)
{
    int ready[2], go[2], res[2];
    if (pipe(ready) != 0 || pipe(go) != 0 || pipe(res) != 0)
        die("pipe", strerror(errno));
    pid_t pid[MAX_PROCESSES];
    fflush(stdout);
    for (int i = 0; i < n; i++) {
        pid[i] = fork();
        if (pid[i] < 0)
            die("fork", strerror(errno));
        if (pid[i] == 0) {
            close(ready[0]);
            close(go[1]);
            close(res[0]);
            double r = one_process(ledger, pairs, ready[1], go[0]);
            if (write(res[1], &r, sizeof r) != (ssize_t)sizeof r)
                _exit(2);
            _exit(0);
        }
    }
    close(ready[1]);
    close(go[0]);
    close(res[1]);
    char c;
    for (int i = 0; i < n; i++)
        if (read(ready[0], &c, 1) != 1)
            die("a process", "it ended before its pairs (see above)");
    for (int i = 0; i < n; i++)
        if (write(go[1], "g", 1) != 1)
            die("starting the processes", strerror(errno));
    double sum = 0;
    for (int i = 0; i < n; i++) {
        double r;
        if (read(res[0], &r, sizeof r) != (ssize_t)sizeof r)
            die("a process", "it ended without its figure (see above)");
        sum += r;
    }
    for (int i = 0; i < n; i++) {
        int st;
        if (waitpid(pid[i], &st, 0) != pid[i] || !WIFEXITED(st) || WEXITSTATUS(st))
            die("a process", "it did not exit 0");
    }
    close(ready[0]);
    close(go[1]);
    close(res[0]);
    return sum / n;
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

static void remove_files(void)
{
    char path[512];
    if (getpid() != parent) /* a process of a run that failed: leave them */
        return;
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

int main(int argc, char **argv)
{
    int processes = 1, runs = 9;
    long pairs = 200000;
    const char *mode = "both";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--processes") == 0 && i + 1 < argc)
            processes = atoi(argv[++i]);
        else if (strcmp(argv[i], "--pairs") == 0 && i + 1 < argc)
            pairs = atol(argv[++i]);
        else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc)
            runs = atoi(argv[++i]);
        else if (strcmp(argv[i], "--ledger") == 0 && i + 1 < argc)
            mode = argv[++i];
        else if (strcmp(argv[i], "--idle-thread") == 0)
            idle_thread = true;
        else {
            fprintf(stderr, "usage: gpumem-ledger [--processes N] [--pairs N] "
                            "[--runs N] [--ledger on|off|both] [--idle-thread]\n");
            return 2;
        }
    }
    bool on = strcmp(mode, "on") == 0, off = strcmp(mode, "off") == 0;
    if (processes < 1 || processes > MAX_PROCESSES || pairs < 1 || runs < 1 ||
        runs > 101 || !(on || off || strcmp(mode, "both") == 0)) {
        fprintf(stderr,
                "gpumem-ledger: processes 1..%d, pairs and runs (1..101) "
                "positive, --ledger on, off or both\n",
                MAX_PROCESSES);
        return 2;
    }
    for (int k = 0; k < SLOTS; k++) /* 256 B .. 1 MiB, spread over the classes */
        sizes[k] = (size_t)256 << (k % 13);
    /* Every GPUMEM_ variable this bench depends on is set here (and only what
     * the shell sets otherwise, such as GPUMEM_LOG_LEVEL, is left). */
    snprintf(machine, sizeof machine, "bench-ledger-%ld", (long)getpid());
    snprintf(ledger_dir, sizeof ledger_dir, "/dev/shm/gpumem-bench-ledger-XXXXXX");
    if (!mkdtemp(ledger_dir))
        die("mkdtemp", strerror(errno));
    setenv("GPUMEM_BACKEND", "sim", 1);
    setenv("GPUMEM_SIM_DEVICES", "gpumem bench GPU:8GiB", 1);
    setenv("GPUMEM_SIM_MACHINE", machine, 1);
    setenv("GPUMEM_LEDGER_DIR", ledger_dir, 1);
    unsetenv("GPUMEM_SHARE_GIVE");
    unsetenv("GPUMEM_FORCE_ALLOW_GROWTH");
    unsetenv("GPUMEM_MEMORY_FRACTION");
    parent = getpid();
    atexit(remove_files);
#if defined(__OPTIMIZE__)
    const char *opt = "optimized";
#else
    const char *opt = "NOT OPTIMIZED: figures mean little";
#endif
    if ((on || off) && processes == 1) {
        /* In this process, for callgrind: no fork, no figure to compare. */
        double r = one_process(on, pairs, -1, -1);
        printf("# gpumem-ledger: ledger %s, 1 process, %ld pairs, in this process (%s)\n"
               "%-4s %8.1f ns/pair (thread CPU time)\n",
               mode, pairs, opt, mode, r);
        return 0;
    }
    printf("# gpumem-ledger: %d process%s of one thread, %ld pairs each, median of %d "
           "runs, thread CPU time (%s)\n",
           processes, processes == 1 ? "" : "es", pairs, runs, opt);
    double *t[2];
    t[0] = calloc((size_t)runs, sizeof(double));
    t[1] = calloc((size_t)runs, sizeof(double));
    if (!t[0] || !t[1])
        die("calloc", "out of memory");
    bool want[2] = {!on, !off}; /* [0] off, [1] on */
    for (int m = 0; m < 2; m++)
        if (want[m])
            run_once(m == 1, processes, pairs / 10 + 1); /* warm-up */
    /* Alternating, so that the machine's drift falls on both alike. */
    for (int r = 0; r < runs; r++)
        for (int m = 0; m < 2; m++)
            if (want[m])
                t[m][r] = run_once(m == 1, processes, pairs);
    double median[2] = {0, 0};
    for (int m = 0; m < 2; m++) {
        if (!want[m])
            continue;
        qsort(t[m], (size_t)runs, sizeof(double), cmp_double);
        median[m] = t[m][runs / 2];
    }
    if (want[0])
        printf("off  %8.1f ns/pair  (runs %.1f .. %.1f)\n", median[0], t[0][0],
               t[0][runs - 1]);
    if (want[1])
        printf("on   %8.1f ns/pair  (runs %.1f .. %.1f)%s", median[1], t[1][0],
               t[1][runs - 1], want[0] ? "" : "\n");
    if (want[0] && want[1])
        printf("  %5.3fx off\n", median[1] / median[0]);
    free(t[0]);
    free(t[1]);
    return 0;
}
