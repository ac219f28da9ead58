/* Cross-file internal declarations, grouped by the file that defines them.
 * Everything here has the gpumem__ prefix (external linkage, hidden from the
 * shared library by -fvisibility=hidden) so that libgpumem.a can be linked into
 * programs that have their own arena_alloc or pool_init. */
#ifndef GPUMEM_INTERNAL_H
#define GPUMEM_INTERNAL_H

#include "gpumem.h"
#include "platform.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------ error.c -- */

/* Records the printf-style message as the calling thread's last error and returns
 * s. Messages begin with the API name and the object: "gpumem_malloc(/device:GPU:0,
 * 1.00 MiB): ...". */
gpumem_status gpumem__fail(gpumem_status s, const char *fmt, ...) GPUMEM_PRINTF(2, 3);
/* vsnprintf into buf, ending a message cut short at `size` (> 4) with "...";
 * false when the format fails. */
bool gpumem__vformat(char *buf, size_t size, const char *fmt, va_list ap)
    GPUMEM_PRINTF(3, 0);
/* The longest last-error message, with its terminating NUL. */
#define GPUMEM_ERROR_BUF 512

/* A lower layer's reason for a failure, in its own words and without the API
 * call: the entry point words the call once, as
 * gpumem__fail(s, "%s: %s", call, why.text). Lower layers fill one and return a
 * status; they never read gpumem_last_error() back. The length leaves room in the
 * 511-character message for the call's own words before the reason. */
#define GPUMEM_REASON_LEN 400
struct reason {
    char text[GPUMEM_REASON_LEN];
};
/* Writes the printf-style reason into *why (NULL: nothing) and returns s. */
gpumem_status gpumem__reason(struct reason *why, gpumem_status s, const char *fmt, ...)
    GPUMEM_PRINTF(3, 4);

/* A value the user gave, for a message: in single quotes, whole when it has at
 * most GPUMEM_QUOTE_MAX bytes, else at most GPUMEM_QUOTE_MAX / 2 bytes of its
 * start, " ... " and as many of its end, so that a long value never pushes the
 * reason out of the message. Control characters are written as \xNN. Writes at
 * most `size` bytes into buf, NUL included: GPUMEM_QUOTE_BUF always holds the
 * whole quote; a smaller buffer gets it cut short, with its closing quote (size
 * 0: nothing; 1 or 2: ""). Returns buf. */
#define GPUMEM_QUOTE_MAX 64
#define GPUMEM_QUOTE_BUF (4 * GPUMEM_QUOTE_MAX + 16)
const char *gpumem__quote(const char *value, char *buf, size_t size);

/* Writes a human-readable size: "512 B", "1.50 KiB", "12.00 GiB". Returns buf. */
const char *gpumem__format_bytes(uint64_t bytes, char *buf, size_t buf_size);
#define GPUMEM_BYTES_BUF 32

/* ------------------------------------------------ options.c, parse.c -- */

/* struct options, gpumem__options_load and the table of environment variables
 * (options.h, option_vars.h); the parsers of sizes and simulated devices
 * (parse.h). Here so that every module that takes a runtime's options has them. */
#include "options.h"

/* -------------------------------------------------------------- log.c -- */

/* Sends a message to the log callback when level <= opts->log_level: at once, or,
 * between gpumem__log_hold() and the gpumem__log_release() that ends the
 * outermost hold, then, on the same thread. Hold across a section that may log
 * with a gpumem lock held, and release after unlocking: the callback may then call
 * gpumem. The caller's last error is kept across the callback. */
void gpumem__log(const struct options *opts, int level, const char *fmt, ...)
    GPUMEM_PRINTF(3, 4);
/* A warning a user must see: logged at WARNING when the log takes it, otherwise,
 * for the default runtime (opts->warn_to_stderr), printed on standard error as
 * gpumem__print_line writes it. */
void gpumem__warn(const struct options *opts, const char *fmt, ...) GPUMEM_PRINTF(2, 3);
/* Whether gpumem__log(opts, level, ...) reaches a log. */
bool gpumem__log_wants(const struct options *opts, int level);
void gpumem__log_hold(void);
void gpumem__log_release(void);
/* The log of a runtime given no callback when GPUMEM_LOG_LEVEL is set: one line
 * on standard error per message, as gpumem__print_line writes it. */
void gpumem__log_to_stderr(void *user_data, int level, const char *message);
/* "gpumem: [LEVEL: ]message" on standard error, on one line: a leading "gpumem: "
 * of the message is not repeated, and control characters (a newline in an
 * environment value the message quotes) are written as \xNN. */
void gpumem__print_line(const char *level, const char *message);

#endif /* GPUMEM_INTERNAL_H */
