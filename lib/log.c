/* The log: messages to the runtime's callback, or to standard error when
 * GPUMEM_LOG_LEVEL asks for it and no callback was given. A message logged while
 * gpumem holds a lock waits in a per-thread queue until the lock is let go (see
 * gpumem__log_hold), so that a callback that calls gpumem, to read a pool's
 * numbers after an error say, does not deadlock on that lock. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct held_message {
    struct held_message *next;
    gpumem_log_fn log;
    void *user_data;
    int level;
    char text[];
};

/* This thread's queue: depth counts the holds; delivering is set while the queue
 * is being emptied, so that a callback's own gpumem call, which holds and
 * releases too, leaves the rest of the queue to the loop already emptying it. */
static _Thread_local struct {
    unsigned depth;
    bool delivering;
    struct held_message *head, **tail;
} held;

/* Calls the callback with the caller's last error kept: a callback's failing
 * gpumem call must not change what the call being logged reports. */
static void deliver(gpumem_log_fn log, void *user_data, int level, const char *text)
{
    char saved[GPUMEM_ERROR_BUF];
    memcpy(saved, gpumem_last_error(), sizeof saved);
    log(user_data, level, text);
    if (strcmp(saved, gpumem_last_error()) != 0)
        (void)gpumem__fail(GPUMEM_OK, "%s", saved);
}

bool gpumem__log_wants(const struct options *opts, int level)
{
    return opts != NULL && opts->log != NULL && level <= opts->log_level;
}

/* Sends msg, formatted, to opts's log (pre: gpumem__log_wants): at once, or
 * queued while the log is held. */
static void log_message(const struct options *opts, int level, const char *msg)
{
    if (held.depth > 0) {
        size_t n = strlen(msg) + 1;
        struct held_message *m = malloc(sizeof *m + n);
        if (m) {
            m->next = NULL;
            m->log = opts->log;
            m->user_data = opts->log_user_data;
            m->level = level;
            memcpy(m->text, msg, n);
            if (!held.head)
                held.tail = &held.head;
            *held.tail = m;
            held.tail = &m->next;
            return;
        }
        /* Out of host memory: deliver now rather than lose the message; a callback
         * that keeps the header's old rule (no gpumem calls) is still safe. */
    }
    deliver(opts->log, opts->log_user_data, level, msg);
}

void gpumem__log(const struct options *opts, int level, const char *fmt, ...)
{
    if (!gpumem__log_wants(opts, level))
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    bool ok = gpumem__vformat(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (ok)
        log_message(opts, level, msg);
}

void gpumem__log_hold(void) { held.depth++; }

void gpumem__log_release(void)
{
    /* nothing queued: the common case, one look at this thread's queue */
    if (--held.depth > 0 || held.delivering || !held.head)
        return;
    held.delivering = true;
    while (held.head) {
        struct held_message *m = held.head;
        held.head = m->next;
        deliver(m->log, m->user_data, m->level, m->text);
        free(m);
    }
    held.delivering = false;
}

void gpumem__warn(const struct options *opts, const char *fmt, ...)
{
    bool logged = gpumem__log_wants(opts, GPUMEM_LOG_WARNING);
    if (!logged && !(opts && opts->warn_to_stderr))
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    bool ok = gpumem__vformat(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!ok)
        return;
    if (logged)
        log_message(opts, GPUMEM_LOG_WARNING, msg);
    else
        gpumem__print_line(NULL, msg);
}

void gpumem__print_line(const char *level, const char *message)
{
    static const char prefix[] = "gpumem: ";
    if (strncmp(message, prefix, sizeof prefix - 1) == 0)
        message += sizeof prefix - 1;
    char line[4 * 1024 + 64];
    int n = snprintf(line, sizeof line, "%s%s%s", prefix, level ? level : "",
                     level ? ": " : "");
    size_t at = n > 0 && (size_t)n < sizeof line ? (size_t)n : 0;
    /* each byte takes at most 4 (\xNN), and the loop stops while 5 are left */
    for (const unsigned char *c = (const unsigned char *)message;
         *c && at + 5 <= sizeof line; c++) {
        if (*c < 0x20 || *c == 0x7f)
            at += (size_t)snprintf(line + at, sizeof line - at, "\\x%02x", *c);
        else
            line[at++] = (char)*c;
    }
    line[at] = '\0';
    fprintf(stderr, "%s\n", line);
}

void gpumem__log_to_stderr(void *user_data, int level, const char *message)
{
    static const char *const names[] = {"ERROR", "WARNING", "INFO", "DEBUG"};
    (void)user_data;
    gpumem__print_line(level >= 0 && level <= GPUMEM_LOG_DEBUG ? names[level] : "LOG",
                       message);
}
