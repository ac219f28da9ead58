/* A fuzz target for what gpumem writes of outside text (issue 33, items 1 and
 * 4): quoting a value for a message (gpumem__quote), formatting a message
 * (gpumem__vformat), a JSON string (gpumem__json_string), terminal text
 * (gpumem__terminal_text), and a snapshot's JSON after gpumem_set_tag with the
 * text. Every writer stays inside the buffer it is given (guard bytes after it,
 * and ASan), whatever the size; what it writes is NUL-terminated within it; the
 * JSON is valid UTF-8 with no raw control byte, the terminal text has no control
 * character, by a decoder written apart from lib/escape.c.
 *
 * Input: byte 0 chooses the writer, byte 1 the buffer's size, the rest is the
 * text, cut at the first NUL. Built and run like fuzz_parse.c (tests/meson.build). */
#include "escape.h"
#include "internal.h"
#include "utf8_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void die(const char *what, const char *text)
{
    fprintf(stderr, "fuzz-text: %s\n  text: '%s'\n", what, text);
    abort();
}

/* Whether s[0, n) is well-formed UTF-8 (RFC 3629) with no byte below 0x20 and
 * no 0x7f; with `no_c1`, no U+0080..U+009F either (tests/utf8_check.h). */
static bool clean_utf8(const unsigned char *s, size_t n, bool no_c1)
{
    return utf8_check(s, n, true, no_c1);
}

/* A whole JSON string: quotes at its ends only, escapes gpumem writes only. */
static bool json_string_ok(const char *s, size_t n)
{
    if (n < 2 || s[0] != '"' || s[n - 1] != '"')
        return false;
    if (!clean_utf8((const unsigned char *)s, n, false))
        return false;
    for (size_t i = 1; i + 1 < n; i++) {
        if (s[i] == '"')
            return false;
        if (s[i] != '\\')
            continue;
        if (i + 2 >= n)
            return false;
        if (s[i + 1] == '"' || s[i + 1] == '\\') {
            i++;
        } else if (s[i + 1] == 'u' && i + 6 < n &&
                   strspn(s + i + 2, "0123456789abcdef") >= 4) {
            i += 5;
        } else {
            return false;
        }
    }
    return true;
}

#define GUARD 32

/* A buffer of `size` bytes followed by guard bytes, in one allocation, so that
 * a write past `size` shows even without ASan. */
static char *guarded(size_t size)
{
    char *b = malloc(size + GUARD);
    if (!b)
        abort();
    memset(b, 0x5a, size + GUARD);
    return b;
}

static void check_guard(const char *b, size_t size, const char *text)
{
    for (size_t i = 0; i < GUARD; i++)
        if ((unsigned char)b[size + i] != 0x5a)
            die("a write past the buffer", text);
}

static void fuzz_quote(const char *text, size_t size)
{
    char *b = guarded(size);
    gpumem__quote(text, b, size);
    check_guard(b, size, text);
    if (size > 0 && !memchr(b, '\0', size))
        die("a quote not terminated within its buffer", text);
    size_t n = size ? strlen(b) : 0;
    if (size >= 3 && (n < 2 || b[0] != '\'' || b[n - 1] != '\''))
        die("a quote without its quotes", text);
    if (size >= GPUMEM_QUOTE_BUF && n > 2 * (4 * (GPUMEM_QUOTE_MAX / 2)) + 7)
        die("a quote longer than its bound", text);
    free(b);
}

static void format(char *b, size_t size, const char *fmt, ...) GPUMEM_PRINTF(3, 4);
static void format(char *b, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    gpumem__vformat(b, size, fmt, ap);
    va_end(ap);
}

static void fuzz_vformat(const char *text, size_t size)
{
    char *b = guarded(size);
    format(b, size, "x(%s): %s", text, text);
    check_guard(b, size, text);
    if (size > 0 && !memchr(b, '\0', size))
        die("a message not terminated within its buffer", text);
    free(b);
}

static void fuzz_json(const char *text, size_t size)
{
    char *b = guarded(size);
    size_t n = gpumem__json_string(text, size ? b : NULL, size);
    check_guard(b, size, text);
    if (n > GPUMEM_JSON_STRING_MAX(strlen(text)))
        die("a JSON string longer than its bound", text);
    if (size > 0 && strlen(b) > n)
        die("a JSON string longer than it says", text);
    if (n < size && (strlen(b) != n || !json_string_ok(b, n)))
        die("a JSON string that is not valid UTF-8 or not a JSON string", text);
    free(b);
    /* whole, in a buffer it says is enough */
    char *whole = guarded(n + 1);
    if (gpumem__json_string(text, whole, n + 1) != n || !json_string_ok(whole, n))
        die("a whole JSON string that is not valid", text);
    check_guard(whole, n + 1, text);
    free(whole);
}

static void fuzz_terminal(const char *text, size_t size)
{
    if (size == 0)
        size = 1;
    char *b = guarded(size);
    gpumem__terminal_text(text, b, size);
    check_guard(b, size, text);
    if (!memchr(b, '\0', size))
        die("terminal text not terminated within its buffer", text);
    if (!clean_utf8((const unsigned char *)b, strlen(b), true))
        die("terminal text with a control character or bad UTF-8", text);
    free(b);
}

/* gpumem_set_tag(text), an allocation, and the snapshot's JSON: valid UTF-8 with
 * no raw control byte. One simulated runtime for the whole run. */
static void fuzz_snapshot(const char *text)
{
    static gpumem_runtime *rt;
    if (!rt) {
        gpumem_options o;
        gpumem_options_init(&o);
        o.flags = GPUMEM_OPTIONS_IGNORE_ENVIRONMENT;
        o.backend = GPUMEM_BACKEND_SIM;
        o.sim_devices = "1GiB";
        if (gpumem_runtime_create(&o, &rt) != GPUMEM_OK)
            die("no simulated runtime", gpumem_last_error());
    }
    gpumem_status s = gpumem_set_tag(text);
    if (s != GPUMEM_OK && s != GPUMEM_ERR_INVALID_ARGUMENT &&
        s != GPUMEM_ERR_OUT_OF_MEMORY) /* too long; too many tags */
        die("gpumem_set_tag: an undocumented status", text);
    void *p = NULL;
    if (gpumem_malloc(rt, 0, 256, &p) != GPUMEM_OK)
        die("gpumem_malloc failed", gpumem_last_error());
    gpumem_set_tag(NULL);
    size_t len = 0;
    gpumem_snapshot_json(rt, 0, NULL, 0, &len);
    char *json = malloc(len + 4096);
    if (!json || gpumem_snapshot_json(rt, 0, json, len + 4096, &len) != GPUMEM_OK)
        die("gpumem_snapshot_json failed", gpumem_last_error());
    if (strlen(json) + 1 != len ||
        !clean_utf8((const unsigned char *)json, len - 1, false))
        die("a snapshot that is not valid UTF-8 (or has a raw control byte)", text);
    free(json);
    gpumem_free(rt, p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    char *text = malloc(size - 1);
    if (!text)
        return 0;
    memcpy(text, data + 2, size - 2);
    text[size - 2] = '\0';
    /* sizes around the small ones and around GPUMEM_QUOTE_BUF */
    size_t buf = data[1] < 128 ? data[1] : GPUMEM_QUOTE_BUF - 128 + (size_t)data[1];
    switch (data[0] % 5) {
    case 0:
        fuzz_quote(text, buf);
        break;
    case 1:
        fuzz_vformat(text, buf);
        break;
    case 2:
        fuzz_json(text, buf);
        break;
    case 3:
        fuzz_terminal(text, buf);
        break;
    default:
        fuzz_snapshot(text);
        break;
    }
    free(text);
    return 0;
}
