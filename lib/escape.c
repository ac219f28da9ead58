/* Outside text made safe to write out (escape.h): UTF-8 checked byte by byte,
 * JSON strings, terminal text. Each writer appends through put(), which never
 * writes past the buffer it was given, so a long or hostile text can cut the
 * result short but never overflow it. */
#include "escape.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

size_t gpumem__utf8_sequence(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF; /* the range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0)
            lo = 0xA0; /* overlong below U+0800 */
        else if (c == 0xED)
            hi = 0x9F; /* surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0)
            lo = 0x90; /* overlong below U+10000 */
        else if (c == 0xF4)
            hi = 0x8F; /* past U+10FFFF */
    } else {
        return 0; /* a continuation byte, 0xC0, 0xC1, 0xF5..0xFF */
    }
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    return len;
}

/* A bounded writer: text goes to p[at..] while it fits in size - 1 bytes; once a
 * piece does not fit whole, nothing more is written (`full`), and `need` goes on
 * counting what the whole would take. */
struct out {
    char *p;
    size_t size, at, need;
    bool full;
};

static void put(struct out *o, const char *s, size_t n)
{
    o->need += n;
    if (o->full || o->size == 0)
        return;
    if (n > o->size - 1 - o->at) {
        o->full = true;
        return;
    }
    memcpy(o->p + o->at, s, n);
    o->at += n;
}

static void out_end(struct out *o)
{
    if (o->size > 0)
        o->p[o->at] = '\0';
}

size_t gpumem__json_string(const char *s, char *out, size_t size)
{
    static const char hex[] = "0123456789abcdef";
    struct out o = {out, size, 0, 0, false};
    const unsigned char *c = (const unsigned char *)s;
    size_t left = strlen(s);
    put(&o, "\"", 1);
    while (left > 0) {
        size_t n = gpumem__utf8_sequence(c, left);
        if (n == 0) {
            put(&o, "\\ufffd", 6);
            n = 1;
        } else if (*c == '"' || *c == '\\') {
            char e[2] = {'\\', (char)*c};
            put(&o, e, 2);
        } else if (*c < 0x20 || *c == 0x7f) {
            char e[6] = {'\\', 'u', '0', '0', hex[*c >> 4], hex[*c & 15]};
            put(&o, e, 6);
        } else {
            put(&o, (const char *)c, n);
        }
        c += n;
        left -= n;
    }
    put(&o, "\"", 1);
    out_end(&o);
    return o.need;
}

const char *gpumem__terminal_text(const char *s, char *out, size_t size)
{
    struct out o = {out, size, 0, 0, false};
    const unsigned char *c = (const unsigned char *)s;
    size_t left = strlen(s);
    while (left > 0 && !o.full) {
        size_t n = gpumem__utf8_sequence(c, left);
        /* C1 controls: U+0080..U+009F, 0xC2 0x80..0x9F in UTF-8 */
        bool control =
            n == 1 ? *c < 0x20 || *c == 0x7f : n == 2 && c[0] == 0xC2 && c[1] < 0xA0;
        if (n == 0 || control)
            put(&o, "?", 1);
        else
            put(&o, (const char *)c, n);
        n = n ? n : 1;
        c += n;
        left -= n;
    }
    out_end(&o);
    return out;
}
