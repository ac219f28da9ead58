/* The runtime's ledger over the driver double shared between processes
 * (FAKECUDA_MACHINE): an idle growing process that freed 10 GiB of a 16 GiB
 * card gives them back when another process allocates 12 GiB, which succeeds;
 * with GPUMEM_LEDGER=off the same allocation is refused, since the second
 * process's budget is what the driver had free. Real processes, a ledger folder
 * of each test's own under /tmp. */
#include "fakecuda.h"
#include "gpumem.h"
#include "harness.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define GiB (UINT64_C(1) << 30)

static char machine[64], dir[64];

static void setup(const char *tag, const char *ledger)
{
    snprintf(machine, sizeof machine, "ldg%ld-%s", (long)getpid(), tag);
    snprintf(dir, sizeof dir, "/tmp/gpumem-cuda-ledger-XXXXXX");
    if (!mkdtemp(dir))
        HARNESS_FAIL("mkdtemp failed");
    setenv("GPUMEM_BACKEND", "cuda", 1);
    setenv("FAKECUDA_DEVICES", "T4:16GiB:7.5", 1);
    setenv("FAKECUDA_MACHINE", machine, 1);
    setenv("GPUMEM_LEDGER_DIR", dir, 1);
    setenv("GPUMEM_LEDGER", ledger, 1);
    setenv("GPUMEM_FORCE_ALLOW_GROWTH", "true", 1);
    unsetenv("GPUMEM_MEMORY_FRACTION");
    unsetenv("GPUMEM_SHARE_GIVE");
    /* The wait ends when the giver answers; its answer is the release of 10 GiB,
     * 5,120 granules of 2 MiB unmapped one driver call after another (about
     * 0.2 s on the double, unloaded; over 0.5 s, the default, under the
     * sanitizers on a loaded machine, where the test failed). */
    setenv("GPUMEM_SHARE_WAIT_MS", "20000", 1);
}

static void teardown(void)
{
    char path[160];
    snprintf(path, sizeof path, "/dev/shm/gpumem-fakecuda-%s-0.u%lu.ledger", machine,
             (unsigned long)geteuid());
    unlink(path);
    snprintf(path, sizeof path,
             "%s/gpumem-GPU-fa4ec0da-0000-4000-8000-000000000000.u%lu.ledger", dir,
             (unsigned long)geteuid());
    unlink(path);
    rmdir(dir);
}

/* A process that allocates and frees 10 GiB, says 'y' (or 'n'), and then waits,
 * calling nothing, until `*release` is closed. */
static pid_t idle_cacher(int *said, int *release)
{
    int up[2], down[2];
    if (pipe(up) != 0 || pipe(down) != 0)
        return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(60);
        close(up[0]);
        close(down[1]);
        void *p = NULL;
        char c = gpumem_malloc(NULL, 0, 10 * GiB, &p) == GPUMEM_OK &&
                         gpumem_free(NULL, p) == GPUMEM_OK
                     ? 'y'
                     : 'n';
        if (c == 'n')
            fprintf(stderr, "idle_cacher: %s\n", gpumem_last_error());
        if (write(up[1], &c, 1) != 1)
            _exit(2);
        while (read(down[0], &c, 1) > 0) {
        }
        _exit(0);
    }
    close(up[1]);
    close(down[0]);
    *said = up[0];
    *release = down[1];
    return pid;
}

/* The scene: the idle process, then this one's 12 GiB in a runtime of its own
 * (created after the fork: the driver is initialized in this process only now). */
static gpumem_status scene(void)
{
    int said = -1, release = -1, st;
    char c = 0;
    pid_t child = idle_cacher(&said, &release);
    ASSERT_EQ(read(said, &c, 1), 1);
    ASSERT_EQ(c, 'y');
    gpumem_runtime *rt = NULL;
    void *p = NULL;
    ASSERT_OK(gpumem_runtime_create(NULL, &rt));
    gpumem_status s = gpumem_malloc(rt, 0, 12 * GiB, &p);
    if (s == GPUMEM_OK)
        ASSERT_OK(gpumem_free(rt, p));
    gpumem_runtime_destroy(rt);
    close(release);
    ASSERT_EQ(waitpid(child, &st, 0), child);
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    close(said);
    return s;
}

TEST(an_idle_process_gives_back_over_the_driver_double)
{
    setup("give", "on");
    gpumem_status s = scene();
    if (s != GPUMEM_OK)
        HARNESS_FAIL("12 GiB refused: %s", gpumem_last_error());
    teardown();
}

TEST(without_the_ledger_the_cache_stays_where_it_is)
{
    setup("off", "off");
    ASSERT_STATUS(scene(), GPUMEM_ERR_OUT_OF_MEMORY);
    teardown();
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    /* each scene's second runtime initializes the driver in this process: the
     * scenes run in children, so that the next one forks from a clean process */
    pid_t pid = fork();
    if (pid == 0) {
        RUN(an_idle_process_gives_back_over_the_driver_double);
        HARNESS_EXIT();
    }
    int st;
    waitpid(pid, &st, 0);
    bool first = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    pid = fork();
    if (pid == 0) {
        RUN(without_the_ledger_the_cache_stays_where_it_is);
        HARNESS_EXIT();
    }
    waitpid(pid, &st, 0);
    bool second = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (!first || !second)
        HARNESS_FAIL("a scene failed");
    HARNESS_EXIT();
}
