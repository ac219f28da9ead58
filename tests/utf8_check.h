/* A UTF-8 decoder written apart from lib/escape.c, after RFC 3629's table, for
 * the tests and the fuzz target that check what escape.c writes
 * (tests/unit/test_escape.c, tests/fuzz/fuzz_text.c). Header only. */
#ifndef GPUMEM_TESTS_UTF8_CHECK_H
#define GPUMEM_TESTS_UTF8_CHECK_H

#include <stdbool.h>
#include <stddef.h>

/* Whether s[0, n) is well-formed UTF-8; with `no_controls`, also no byte below
 * 0x20 and no 0x7f, and with `no_c1`, no U+0080..U+009F either. */
static inline bool utf8_check(const unsigned char *s, size_t n, bool no_controls,
                              bool no_c1)
{
    for (size_t i = 0; i < n;) {
        unsigned cp, len;
        if (s[i] < 0x80) {
            if (no_controls && (s[i] < 0x20 || s[i] == 0x7f))
                return false;
            i++;
            continue;
        }
        if ((s[i] & 0xE0) == 0xC0)
            cp = s[i] & 0x1F, len = 2;
        else if ((s[i] & 0xF0) == 0xE0)
            cp = s[i] & 0x0F, len = 3;
        else if ((s[i] & 0xF8) == 0xF0)
            cp = s[i] & 0x07, len = 4;
        else
            return false;
        if (i + len > n)
            return false;
        for (unsigned k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return false;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        unsigned least = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
        if (cp < least || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        if (no_c1 && cp >= 0x80 && cp <= 0x9F)
            return false;
        i += len;
    }
    return true;
}

#endif /* GPUMEM_TESTS_UTF8_CHECK_H */
