/* Errors: the status strings and names (one X-macro table, after libuv's
 * UV_ERRNO_MAP), the calling thread's last-error message that gpumem__fail records,
 * and the byte-count formatter every message uses. No locks: the message buffer is
 * _Thread_local, the tables are constant. */
#include "internal.h"

#include <stdio.h>
#include <string.h>

/* XX(enumerator without GPUMEM_, sentence). One row per gpumem_status value. */
#define GPUMEM_STATUS_MAP(XX)                                                            \
    XX(OK, "success")                                                                    \
    XX(ERR_INVALID_ARGUMENT, "invalid argument")                                         \
    XX(ERR_NO_SUCH_DEVICE, "no such device")                                             \
    XX(ERR_ALREADY_INITIALIZED, "devices already initialized")                           \
    XX(ERR_OUT_OF_MEMORY, "out of memory")                                               \
    XX(ERR_INVALID_POINTER, "invalid pointer")                                           \
    XX(ERR_BACKEND, "backend (driver) failure")                                          \
    XX(ERR_UNSUPPORTED, "unsupported")

const char *gpumem_status_string(gpumem_status s)
{
    switch (s) {
#define STATUS_STRING_CASE(name, text)                                                   \
    case GPUMEM_##name:                                                                  \
        return text;
        GPUMEM_STATUS_MAP(STATUS_STRING_CASE)
#undef STATUS_STRING_CASE
    }
    return "unknown gpumem status";
}

const char *gpumem_status_name(gpumem_status s)
{
    switch (s) {
#define STATUS_NAME_CASE(name, text)                                                     \
    case GPUMEM_##name:                                                                  \
        return "GPUMEM_" #name;
        GPUMEM_STATUS_MAP(STATUS_NAME_CASE)
#undef STATUS_NAME_CASE
    }
    return "GPUMEM_ERR_UNKNOWN";
}

/* ------------------------------------------------------------ last error -- */

static _Thread_local char last_error[GPUMEM_ERROR_BUF];

bool gpumem__vformat(char *buf, size_t size, const char *fmt, va_list ap)
{
    int n = vsnprintf(buf, size, fmt, ap);
    if (n < 0)
        return false;
    if ((size_t)n >= size) {
        /* Truncated: end with "..." so the reader knows, without cutting a UTF-8
         * sequence in half. */
        size_t end = size - 4;
        while (end > 0 && ((unsigned char)buf[end] & 0xC0) == 0x80)
            end--;
        memcpy(buf + end, "...", 4);
    }
    return true;
}

gpumem_status gpumem__fail(gpumem_status s, const char *fmt, ...)
{
    /* Format into a scratch buffer first: an argument may be gpumem_last_error()
     * itself, and vsnprintf must not read the buffer it writes. */
    char msg[GPUMEM_ERROR_BUF];
    va_list ap;
    va_start(ap, fmt);
    bool ok = gpumem__vformat(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!ok)
        snprintf(msg, sizeof msg, "%s (the message could not be formatted)",
                 gpumem_status_string(s));
    memcpy(last_error, msg, sizeof msg);
    return s;
}

const char *gpumem_last_error(void) { return last_error; }

gpumem_status gpumem__reason(struct reason *why, gpumem_status s, const char *fmt, ...)
{
    if (!why)
        return s;
    va_list ap;
    va_start(ap, fmt);
    bool ok = gpumem__vformat(why->text, sizeof why->text, fmt, ap);
    va_end(ap);
    if (!ok)
        snprintf(why->text, sizeof why->text, "%s", gpumem_status_string(s));
    return s;
}

/* ---------------------------------------------------------- quoted values -- */

/* Appends value[from, to) to buf at *at, control characters (and the quote
 * itself) escaped as \xNN. */
static void quote_span(const char *value, size_t from, size_t to, char *buf, size_t *at)
{
    for (size_t i = from; i < to; i++) {
        unsigned char c = (unsigned char)value[i];
        if (c < 0x20 || c == 0x7f || c == '\'')
            *at += (size_t)snprintf(buf + *at, 5, "\\x%02x", c);
        else
            buf[(*at)++] = (char)c;
    }
}

/* The start of the UTF-8 sequence that holds byte i (never cuts one in half). */
static size_t utf8_start(const char *value, size_t i)
{
    while (i > 0 && ((unsigned char)value[i] & 0xC0) == 0x80)
        i--;
    return i;
}

const char *gpumem__quote(const char *value, char *buf)
{
    size_t len = strlen(value), at = 0;
    buf[at++] = '\'';
    if (len <= GPUMEM_QUOTE_MAX) {
        quote_span(value, 0, len, buf, &at);
    } else {
        size_t head = utf8_start(value, GPUMEM_QUOTE_MAX / 2);
        size_t tail = utf8_start(value, len - GPUMEM_QUOTE_MAX / 2);
        quote_span(value, 0, head, buf, &at);
        memcpy(buf + at, " ... ", 5);
        at += 5;
        quote_span(value, tail, len, buf, &at);
    }
    buf[at++] = '\'';
    buf[at] = '\0';
    return buf;
}

/* ------------------------------------------------------------ byte counts -- */

const char *gpumem__format_bytes(uint64_t bytes, char *buf, size_t buf_size)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (buf == NULL || buf_size == 0)
        return buf;
    if (bytes < GPUMEM_KIB) {
        snprintf(buf, buf_size, "%u B", (unsigned)bytes);
        return buf;
    }
    size_t u = 1;
    double value = (double)bytes / 1024.0;
    /* Move up a unit also when "%.2f" would round to 1024.00 (1048575 B is
     * "1.00 MiB", not "1024.00 KiB"). */
    while (value >= 1023.995 && u + 1 < sizeof units / sizeof units[0]) {
        value /= 1024.0;
        u++;
    }
    snprintf(buf, buf_size, "%.2f %s", value, units[u]);
    return buf;
}
