/* Parsers of what users write (parse.h): sizes, simulated device lists, booleans,
 * fractions, whole MiB and words. They read only their text and return a status
 * and a reason that quotes the text with gpumem__quote, so that a long value is
 * shortened and never pushes the reason out of the message. Locale-independent
 * (no strtod, no isspace). No state, no locks. */
#include "parse.h"

#include "internal.h"

#include <float.h>
#include <stdio.h>
#include <string.h>

#define SIZE_UNITS "B, KiB, MiB, GiB or TiB"
#define SIM_SYNTAX "SIZE, MODEL:SIZE or MODEL:SIZE:CC"

/* ------------------------------------------------------------ text helpers -- */

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

static bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

static char lower(char c) { return (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c; }

/* A slice of a string, not NUL-terminated. */
struct span {
    const char *p;
    size_t n;
};

static struct span trim(struct span s)
{
    while (s.n > 0 && is_space(s.p[0])) {
        s.p++;
        s.n--;
    }
    while (s.n > 0 && is_space(s.p[s.n - 1]))
        s.n--;
    return s;
}

static struct span span_of(const char *text)
{
    struct span s = {text, strlen(text)};
    return s;
}

/* ASCII case-insensitive comparison of a span with a NUL-terminated word. */
static bool span_is(struct span s, const char *word)
{
    size_t n = strlen(word);
    if (s.n != n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (lower(s.p[i]) != lower(word[i]))
            return false;
    return true;
}

/* gpumem__quote of a slice. gpumem__quote keeps at most GPUMEM_QUOTE_MAX / 2
 * bytes of each end of a long value (fewer, by at most 3, so as not to cut a
 * UTF-8 sequence), so a copy of the slice's first and last SPAN_KEEP bytes quotes
 * as the whole slice would, without a copy as long as the slice. */
#define SPAN_KEEP (GPUMEM_QUOTE_MAX / 2 + 8)
static const char *quote_span(struct span s, char *buf, size_t size)
{
    char copy[2 * SPAN_KEEP + 1];
    if (s.n <= 2 * SPAN_KEEP) {
        memcpy(copy, s.p, s.n);
        copy[s.n] = '\0';
    } else {
        memcpy(copy, s.p, SPAN_KEEP);
        memcpy(copy + SPAN_KEEP, s.p + s.n - SPAN_KEEP, SPAN_KEEP);
        copy[2 * SPAN_KEEP] = '\0';
    }
    return gpumem__quote(copy, buf, size);
}

/* ------------------------------------------------------------------ sizes -- */

/* Parses a size in s into *out. On failure writes the reason, without the size
 * itself (e.g. "it is negative"), into *why. Integers are exact; a decimal part is
 * rounded down to whole bytes, also exactly (no double anywhere). */
static bool size_scan(struct span s, uint64_t *out, struct reason *why)
{
    static const struct {
        const char *name;
        uint64_t bytes;
    } units[] = {{"B", 1},
                 {"KiB", GPUMEM_KIB},
                 {"MiB", GPUMEM_MIB},
                 {"GiB", GPUMEM_GIB},
                 {"TiB", GPUMEM_TIB}};
    /* Decimal or bare units that people write for binary ones. */
    static const struct {
        const char *name, *binary, *meaning;
    } decimal[] = {{"K", "KiB", "1024 bytes"}, {"KB", "KiB", "1024 bytes"},
                   {"M", "MiB", "1024 KiB"},   {"MB", "MiB", "1024 KiB"},
                   {"G", "GiB", "1024 MiB"},   {"GB", "GiB", "1024 MiB"},
                   {"T", "TiB", "1024 GiB"},   {"TB", "TiB", "1024 GiB"}};
    const gpumem_status bad = GPUMEM_ERR_INVALID_ARGUMENT;
    char q[GPUMEM_QUOTE_BUF];

    s = trim(s);
    if (s.n == 0) {
        gpumem__reason(why, bad, "it is empty; expected e.g. '12GiB' or '4096'");
        return false;
    }
    if (s.p[0] == '-') {
        gpumem__reason(why, bad, "it is negative");
        return false;
    }
    size_t i = 0;
    uint64_t whole = 0;
    bool digits = false;
    while (i < s.n && is_digit(s.p[i])) {
        uint64_t d = (uint64_t)(s.p[i] - '0');
        if (whole > (UINT64_MAX - d) / 10) {
            gpumem__reason(why, bad, "it is larger than %llu bytes",
                           (unsigned long long)UINT64_MAX);
            return false;
        }
        whole = whole * 10 + d;
        digits = true;
        i++;
    }
    struct span frac = {s.p + i, 0};
    if (i + 1 < s.n && s.p[i] == '.' && is_digit(s.p[i + 1])) {
        frac.p = s.p + i + 1;
        i++;
        while (i < s.n && is_digit(s.p[i])) {
            frac.n++;
            i++;
        }
        digits = true;
    }
    if (!digits) {
        gpumem__reason(
            why, bad, "it does not start with a number; expected e.g. '12GiB' or '4096'");
        return false;
    }

    struct span unit = trim((struct span){s.p + i, s.n - i});
    uint64_t unit_bytes = 0;
    if (unit.n == 0)
        unit_bytes = 1;
    for (size_t u = 0; unit_bytes == 0 && u < sizeof units / sizeof units[0]; u++)
        if (span_is(unit, units[u].name))
            unit_bytes = units[u].bytes;
    if (unit_bytes == 0) {
        for (size_t u = 0; u < sizeof decimal / sizeof decimal[0]; u++) {
            if (span_is(unit, decimal[u].name)) {
                gpumem__reason(why, bad, "%s is ambiguous; use %s (1 %s = %s)",
                               quote_span(unit, q, sizeof q), decimal[u].binary,
                               decimal[u].binary, decimal[u].meaning);
                return false;
            }
        }
        bool word = true;
        for (size_t k = 0; k < unit.n; k++)
            word = word && is_alpha(unit.p[k]);
        if (word)
            gpumem__reason(why, bad, "unknown unit %s; use %s",
                           quote_span(unit, q, sizeof q), SIZE_UNITS);
        else
            gpumem__reason(why, bad, "unexpected %s after the number; units: %s",
                           quote_span(unit, q, sizeof q), SIZE_UNITS);
        return false;
    }

    /* floor(unit * 0.d1d2...dk) by Horner from the last digit: t = floor((d * unit +
     * t) / 10) stays below 10 * unit, and flooring at each step floors the whole
     * (floor((a + floor(x)) / 10) == floor((a + x) / 10) for integer a). */
    uint64_t part = 0;
    for (size_t k = frac.n; k > 0; k--)
        part = ((uint64_t)(frac.p[k - 1] - '0') * unit_bytes + part) / 10;
    uint64_t total;
    if (whole > UINT64_MAX / unit_bytes ||
        !gpumem__add_u64(whole * unit_bytes, part, &total)) {
        gpumem__reason(why, bad, "it is larger than %llu bytes",
                       (unsigned long long)UINT64_MAX);
        return false;
    }
    *out = total;
    return true;
}

gpumem_status gpumem__scan_size(const char *text, uint64_t *out, struct reason *why)
{
    struct reason inner;
    char q[GPUMEM_QUOTE_BUF];
    if (!size_scan(span_of(text), out, &inner))
        return gpumem__reason(why, GPUMEM_ERR_INVALID_ARGUMENT, "%s is not a size: %s",
                              gpumem__quote(text, q, sizeof q), inner.text);
    return GPUMEM_OK;
}

gpumem_status gpumem__parse_size(const char *what, const char *text, uint64_t *out)
{
    struct reason why;
    gpumem_status s;
    if (text == NULL || out == NULL)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "%s: no size given", what);
    if ((s = gpumem__scan_size(text, out, &why)) != GPUMEM_OK)
        return gpumem__fail(s, "%s: %s", what, why.text);
    return GPUMEM_OK;
}

/* ------------------------------------------------------- simulated devices -- */

/* "MAJOR.MINOR": major 1..99, minor 0..9. */
static bool cc_scan(struct span s, int *major, int *minor)
{
    if (s.n < 3 || s.n > 4 || s.p[s.n - 2] != '.' || !is_digit(s.p[s.n - 1]))
        return false;
    int m = 0;
    for (size_t i = 0; i + 2 < s.n; i++) {
        if (!is_digit(s.p[i]))
            return false;
        m = m * 10 + (s.p[i] - '0');
    }
    if (m < 1)
        return false;
    *major = m;
    *minor = s.p[s.n - 1] - '0';
    return true;
}

/* One entry (already known non-empty) into *spec. On failure writes the reason
 * and the offset (from entry.p) of the offending field. */
static bool sim_entry_scan(struct span entry, struct sim_device_spec *spec,
                           struct reason *why, size_t *at)
{
    const gpumem_status bad = GPUMEM_ERR_INVALID_ARGUMENT;
    char q[GPUMEM_QUOTE_BUF];
    struct span field[3];
    size_t nfields = 0;
    const char *p = entry.p, *end = entry.p + entry.n;
    for (;;) {
        const char *colon = memchr(p, ':', (size_t)(end - p));
        if (nfields == 3) {
            *at = (size_t)(p - 1 - entry.p);
            gpumem__reason(why, bad, "too many ':'; expected %s", SIM_SYNTAX);
            return false;
        }
        field[nfields++] = (struct span){p, (size_t)((colon ? colon : end) - p)};
        if (!colon)
            break;
        p = colon + 1;
    }

    memset(spec, 0, sizeof *spec);
    snprintf(spec->model, sizeof spec->model, "%s", GPUMEM_SIM_DEFAULT_MODEL);
    spec->cc_major = GPUMEM_SIM_DEFAULT_CC_MAJOR;
    spec->cc_minor = GPUMEM_SIM_DEFAULT_CC_MINOR;

    struct span size_text = field[0];
    if (nfields >= 2) {
        struct span model = trim(field[0]);
        *at = (size_t)(model.p - entry.p);
        if (model.n == 0) {
            gpumem__reason(why, bad, "the model name before ':' is empty");
            return false;
        }
        if (model.n >= sizeof spec->model) {
            gpumem__reason(why, bad, "the model name is %zu characters long; at most %zu",
                           model.n, sizeof spec->model - 1);
            return false;
        }
        memcpy(spec->model, model.p, model.n);
        spec->model[model.n] = '\0';
        size_text = field[1];
    }
    struct span size = trim(size_text);
    *at = (size_t)(size.p - entry.p);
    struct reason inner;
    if (!size_scan(size, &spec->total_bytes, &inner)) {
        gpumem__reason(why, bad, "size %s: %s", quote_span(size, q, sizeof q),
                       inner.text);
        return false;
    }
    if (spec->total_bytes == 0) {
        gpumem__reason(why, bad, "size %s is zero", quote_span(size, q, sizeof q));
        return false;
    }
    if (spec->total_bytes < GPUMEM_MIN_SIM_DEVICE_BYTES) {
        gpumem__reason(why, bad, "size %s is below the smallest simulated GPU, 256 B",
                       quote_span(size, q, sizeof q));
        return false;
    }
    if (spec->total_bytes > GPUMEM_MAX_SIM_DEVICE_BYTES) {
        gpumem__reason(why, bad, "size %s is above the limit of 64 TiB",
                       quote_span(size, q, sizeof q));
        return false;
    }
    if (nfields == 3) {
        struct span cc = trim(field[2]);
        *at = (size_t)(cc.p - entry.p);
        if (!cc_scan(cc, &spec->cc_major, &spec->cc_minor)) {
            gpumem__reason(why, bad,
                           "compute capability %s is not MAJOR.MINOR (major 1..99, minor "
                           "0..9, e.g. 8.0)",
                           quote_span(cc, q, sizeof q));
            return false;
        }
    }
    return true;
}

gpumem_status gpumem__scan_sim_devices(const char *text, struct sim_device_spec *out,
                                       size_t capacity, size_t *count, struct reason *why)
{
    const gpumem_status bad = GPUMEM_ERR_INVALID_ARGUMENT;
    char q[GPUMEM_QUOTE_BUF];
    if (trim(span_of(text)).n == 0) {
        *count = 0; /* a machine without GPUs */
        return GPUMEM_OK;
    }
    size_t n = 0;
    const char *p = text;
    for (;;) {
        const char *comma = strchr(p, ',');
        struct span entry = {p, comma ? (size_t)(comma - p) : strlen(p)};
        size_t pos = (size_t)(p - text);
        struct reason inner;
        size_t at = 0;
        if (trim(entry).n == 0)
            return gpumem__reason(why, bad,
                                  "%s: entry %zu (position %zu) is empty; expected "
                                  "comma-separated %s",
                                  gpumem__quote(text, q, sizeof q), n + 1, pos,
                                  SIM_SYNTAX);
        if (n == capacity)
            return gpumem__reason(why, bad,
                                  "%s: entry %zu (position %zu) is one too many; at "
                                  "most %zu simulated devices",
                                  gpumem__quote(text, q, sizeof q), n + 1, pos, capacity);
        if (!sim_entry_scan(entry, &out[n], &inner, &at))
            return gpumem__reason(why, bad, "%s: entry %zu (position %zu): %s",
                                  gpumem__quote(text, q, sizeof q), n + 1, pos + at,
                                  inner.text);
        n++;
        if (!comma)
            break;
        p = comma + 1;
    }
    *count = n;
    return GPUMEM_OK;
}

gpumem_status gpumem__parse_sim_devices(const char *what, const char *text,
                                        struct sim_device_spec *out, size_t capacity,
                                        size_t *count)
{
    struct reason why;
    gpumem_status s;
    if (text == NULL || count == NULL || (out == NULL && capacity > 0))
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "%s: bad arguments to the parser", what);
    if ((s = gpumem__scan_sim_devices(text, out, capacity, count, &why)) != GPUMEM_OK)
        return gpumem__fail(s, "%s: %s", what, why.text);
    return GPUMEM_OK;
}

/* ------------------------------------------------- booleans, numbers, words -- */

gpumem_status gpumem__scan_bool(const char *text, bool *out, struct reason *why)
{
    static const char *const yes[] = {"true", "1", "yes", "on"};
    static const char *const no[] = {"false", "0", "no", "off"};
    char q[GPUMEM_QUOTE_BUF];
    struct span s = trim(span_of(text));
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        if (span_is(s, yes[i]) || span_is(s, no[i])) {
            *out = span_is(s, yes[i]);
            return GPUMEM_OK;
        }
    }
    return gpumem__reason(why, GPUMEM_ERR_INVALID_ARGUMENT,
                          "%s is not a boolean; use true/false, 1/0, yes/no or on/off",
                          gpumem__quote(text, q, sizeof q));
}

/* The result is the nearest double (as strtod gives) for up to 15 significant
 * digits and 22 decimals: both the mantissa and the power of ten are then exact
 * doubles. */
static bool fraction_scan(struct span s, double *out)
{
    size_t i = 0;
    uint64_t whole = 0;
    bool digits = false;
    for (; i < s.n && is_digit(s.p[i]); i++) {
        if (whole <= 1)
            whole = whole * 10 + (uint64_t)(s.p[i] - '0');
        digits = true;
    }
    uint64_t mantissa = 0;
    double scale = 1;
    bool nonzero_fraction = false;
    if (i + 1 < s.n && s.p[i] == '.' && is_digit(s.p[i + 1])) { /* not "1." */
        i++;
        for (; i < s.n && is_digit(s.p[i]); i++) {
            digits = true;
            if (s.p[i] != '0')
                nonzero_fraction = true;
            /* Digits past the 19th cannot change a double in [0, 1]. */
            if (mantissa < UINT64_C(1000000000000000000)) {
                mantissa = mantissa * 10 + (uint64_t)(s.p[i] - '0');
                scale *= 10;
            }
        }
    }
    if (!digits || i != s.n || whole > 1 || (whole == 1 && nonzero_fraction))
        return false;
    *out = whole == 1 ? 1.0 : (double)mantissa / scale;
    /* Past about 300 zeros after the point, scale overflows and the quotient is 0;
     * the fraction is still positive (a budget of 0 bytes), never "no fraction". */
    if (*out == 0 && nonzero_fraction)
        *out = DBL_MIN;
    return true;
}

gpumem_status gpumem__scan_fraction(const char *text, double *out, struct reason *why)
{
    char q[GPUMEM_QUOTE_BUF];
    if (!fraction_scan(trim(span_of(text)), out))
        return gpumem__reason(why, GPUMEM_ERR_INVALID_ARGUMENT,
                              "%s is not a number in [0, 1]",
                              gpumem__quote(text, q, sizeof q));
    return GPUMEM_OK;
}

gpumem_status gpumem__scan_mib(const char *text, uint64_t *bytes, struct reason *why)
{
    char q[GPUMEM_QUOTE_BUF];
    struct span s = trim(span_of(text));
    uint64_t mib = 0;
    bool overflow = false;
    for (size_t i = 0; i < s.n; i++) {
        if (!is_digit(s.p[i]))
            return gpumem__reason(why, GPUMEM_ERR_INVALID_ARGUMENT,
                                  "%s is not a non-negative whole number of MiB "
                                  "(e.g. 1024)",
                                  gpumem__quote(text, q, sizeof q));
        uint64_t d = (uint64_t)(s.p[i] - '0');
        if (mib > (UINT64_MAX - d) / 10)
            overflow = true;
        else
            mib = mib * 10 + d;
    }
    if (s.n == 0)
        return gpumem__reason(why, GPUMEM_ERR_INVALID_ARGUMENT,
                              "%s is not a non-negative whole number of MiB (e.g. 1024)",
                              gpumem__quote(text, q, sizeof q));
    if (overflow || mib > UINT64_MAX / GPUMEM_MIB)
        return gpumem__reason(why, GPUMEM_ERR_INVALID_ARGUMENT,
                              "%s MiB is 2^64 bytes or more",
                              gpumem__quote(text, q, sizeof q));
    *bytes = mib * GPUMEM_MIB;
    return GPUMEM_OK;
}

gpumem_status gpumem__scan_word(const char *text, const char *const *words, size_t n,
                                size_t *index, struct reason *why)
{
    char q[GPUMEM_QUOTE_BUF];
    struct span s = trim(span_of(text));
    for (size_t i = 0; i < n; i++) {
        if (span_is(s, words[i])) {
            *index = i;
            return GPUMEM_OK;
        }
    }
    /* The words are the library's own, short: the list always fits. */
    char list[GPUMEM_REASON_LEN / 2] = "";
    size_t len = 0;
    for (size_t i = 0; i < n && len < sizeof list; i++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "",
                                words[i]);
    return gpumem__reason(why, GPUMEM_ERR_INVALID_ARGUMENT, "%s is not one of %s",
                          gpumem__quote(text, q, sizeof q), list);
}
