/* Text that came from outside (a tag, a command name, a model, a path, bytes read
 * from a shared file), made safe to write out: as a JSON string that is valid
 * UTF-8 whatever the bytes, and as text for a terminal with no control
 * character in it. Every writer here is bounded by the buffer it is given and
 * never cuts a character or an escape in half. Pure: no state, no locks. */
#ifndef GPUMEM_ESCAPE_H
#define GPUMEM_ESCAPE_H

#include <stddef.h>

/* The length of the well-formed UTF-8 sequence at s, of at most n bytes (1..4);
 * 0 when s does not start one: a stray continuation byte, an overlong form, a
 * surrogate (U+D800..U+DFFF), a code point past U+10FFFF, 0xC0, 0xC1, 0xF5..0xFF,
 * or a sequence cut short by n. pre: n > 0. */
size_t gpumem__utf8_sequence(const unsigned char *s, size_t n);

/* The longest JSON string gpumem__json_string writes for a text of len bytes,
 * quotes included, NUL excluded: every byte may become a six-character escape. */
#define GPUMEM_JSON_STRING_MAX(len) (6 * (size_t)(len) + 2)

/* Writes s as a JSON string, its quotes included, into out (size bytes, NUL
 * terminated when size > 0; out may be NULL when size is 0) and returns the
 * length of the whole string, NUL excluded, as snprintf does: a result >= size
 * means it was cut short, after the last escape or character that fitted whole.
 * Well-formed UTF-8 is copied as it is; '"' and '\\' are escaped with a
 * backslash, U+0000..U+001F and U+007F as \u00XX; every byte that is not part of
 * a well-formed UTF-8 sequence becomes \ufffd (U+FFFD, the replacement
 * character), one for each such byte. So the result is valid UTF-8 and valid
 * JSON whatever s holds. pre: s not NULL. */
size_t gpumem__json_string(const char *s, char *out, size_t size);

/* Copies s into out (size > 0 bytes) for a terminal: whole characters, as many
 * as fit in size - 1 bytes, each control character (U+0000..U+001F, U+007F and
 * the C1 controls U+0080..U+009F, which some terminals take as the start of an
 * escape sequence) and each byte that is not part of well-formed UTF-8 written as
 * '?'. Returns out. pre: s, out not NULL. */
const char *gpumem__terminal_text(const char *s, char *out, size_t size);

#endif /* GPUMEM_ESCAPE_H */
