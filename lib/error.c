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
    if ((size_t)n >= size && size >= 4) {
        /* Truncated: end with "..." so the reader knows, without cutting a UTF-8
         * sequence in half (at most three continuation bytes: a longer run is not
         * UTF-8, and is cut where it is). */
        size_t end = size - 4;
        for (int k = 0; k < 3 && end > 0 && ((unsigned char)buf[end] & 0xC0) == 0x80; k++)
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

/* A bounded writer into buf[0, size): a piece that does not fit whole in what is
 * left (one byte kept for the NUL) is dropped, and so is everything after it. */
struct quote_out {
    char *buf;
    size_t size, at;
    bool full;
};

static void quote_put(struct quote_out *o, const char *s, size_t n)
{
    if (o->full || n > o->size - 1 - o->at) {
        o->full = true;
        return;
    }
    memcpy(o->buf + o->at, s, n);
    o->at += n;
}

/* Appends value[from, to), control characters (and the quote itself) escaped as
 * \xNN. */
static void quote_span(const char *value, size_t from, size_t to, struct quote_out *o)
{
    for (size_t i = from; i < to; i++) {
        unsigned char c = (unsigned char)value[i];
        if (c < 0x20 || c == 0x7f || c == '\'') {
            char e[5];
            snprintf(e, sizeof e, "\\x%02x", c);
            quote_put(o, e, 4);
        } else {
            quote_put(o, (const char *)&c, 1);
        }
    }
}

static bool continuation(const char *value, size_t i)
{
    return ((unsigned char)value[i] & 0xC0) == 0x80;
}

const char *gpumem__quote(const char *value, char *buf, size_t size)
{
    if (!buf || size == 0)
        return buf;
    buf[0] = '\0';
    if (size < 3)
        return buf;
    /* one byte less than the buffer for the text, so that the closing quote
     * always fits: a value cut short loses its end, never its quote */
    struct quote_out o = {buf, size - 1, 0, false};
    size_t len = strlen(value);
    quote_put(&o, "'", 1);
    if (len <= GPUMEM_QUOTE_MAX) {
        quote_span(value, 0, len, &o);
    } else {
        /* GPUMEM_QUOTE_MAX / 2 bytes of each end at most, never cutting a UTF-8
         * sequence: the head ends before one that crosses its end, the tail starts
         * after one that crosses its start. A UTF-8 sequence has at most three
         * continuation bytes, so each search stops after three: a longer run is
         * not UTF-8, and is cut where it is. */
        size_t head = GPUMEM_QUOTE_MAX / 2, tail = len - GPUMEM_QUOTE_MAX / 2;
        for (int k = 0; k < 3 && head > 0 && continuation(value, head); k++)
            head--;
        for (int k = 0; k < 3 && tail < len && continuation(value, tail); k++)
            tail++;
        quote_span(value, 0, head, &o);
        quote_put(&o, " ... ", 5);
        quote_span(value, tail, len, &o);
    }
    buf[o.at++] = '\'';
    buf[o.at] = '\0';
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
