/* Running checks in a forked child without hanging the suite: the child runs a
 * function with the harness and exits with its count of failed checks; an alarm
 * ends a child that hangs (a lock copied in a held state), and the parent waits
 * for it a few seconds longer at most, then kills it. */
#ifndef GPUMEM_TEST_FORK_UTIL_H
#define GPUMEM_TEST_FORK_UTIL_H

#include "gpumem.h"
#include "harness.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs fn(arg) in a child given `limit` seconds; true when it passed every check.
 * A child that failed, hung or died is a failure of the calling test. */
static inline bool in_child(const char *what, void (*fn)(void *), void *arg,
                            unsigned limit)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        HARNESS_FAIL("%s: fork: %s", what, strerror(errno));
        return false;
    }
    if (pid == 0) {
        alarm(limit);
        harness_failures = 0;
        harness_case = what;
        fn(arg);
        fflush(stdout);
        fflush(stderr);
        _exit(harness_failures > 100 ? 100 : harness_failures);
    }
    int status = 0;
    for (unsigned waited_ms = 0;; waited_ms += 10) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            break;
        if (r < 0 && errno != EINTR) {
            HARNESS_FAIL("%s: waitpid: %s", what, strerror(errno));
            return false;
        }
        if (waited_ms >= (limit + 5) * 1000) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            HARNESS_FAIL("%s: the child did not end within %u s", what, limit + 5);
            return false;
        }
        usleep(10 * 1000);
    }
    if (WIFSIGNALED(status)) {
        HARNESS_FAIL("%s: the child died of signal %d%s", what, WTERMSIG(status),
                     WTERMSIG(status) == SIGALRM ? " (SIGALRM: it hung)" : "");
        return false;
    }
    if (WEXITSTATUS(status) != 0) {
        HARNESS_FAIL("%s: %d check(s) failed in the child", what, WEXITSTATUS(status));
        return false;
    }
    return true;
}

/* A call refused in a forked child because its runtime (or the driver) is the
 * parent's: GPUMEM_ERR_UNSUPPORTED, and a message that begins with the call, this
 * process's pid, `from` ("the one that initialized the runtime") and the parent's
 * pid, and names the 'spawn' method. */
static inline void expect_fork_refusal(const char *what, gpumem_status s,
                                       const char *call, const char *from, long parent)
{
    if (s != GPUMEM_ERR_UNSUPPORTED)
        HARNESS_FAIL("%s: got %s, expected GPUMEM_ERR_UNSUPPORTED (last error: %s)", what,
                     gpumem_status_name(s), gpumem_last_error());
    char want[512];
    snprintf(want, sizeof want,
             "%s: this process (pid %ld) descends by fork() from %s (pid %ld)", call,
             (long)getpid(), from, parent);
    const char *e = gpumem_last_error();
    if (strncmp(e, want, strlen(want)) != 0)
        HARNESS_FAIL("%s: \"%s\" does not begin with \"%s\"", what, e, want);
    ASSERT_CONTAINS(e, "'spawn'");
}

#endif /* GPUMEM_TEST_FORK_UTIL_H */
