/* Options: gpumem_options merged over the GPUMEM_* / TF_* environment variables
 * and the defaults, read once when a runtime is created; the size and simulated
 * device parsers; the log callback. A variable that is set must parse, even when a
 * user field overrides it: bad values are errors, never silently ignored. Parsing
 * is locale-independent (no strtod, no isspace). No state, no locks. */
#include "internal.h"

#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_SIM_MODEL "gpumem simulated GPU"
#define DEFAULT_SIM_BYTES (16 * GPUMEM_GIB)
#define DEFAULT_CC_MAJOR  8
#define DEFAULT_CC_MINOR  0

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

/* ------------------------------------------------------------------ sizes -- */

/* Parses a size in s into *out. On failure writes the reason (no subject, e.g. "it
 * is negative") into why and returns false. Integers are exact; a decimal part is
 * rounded down to whole bytes, also exactly (no double anywhere). */
static bool size_scan(struct span s, uint64_t *out, char *why, size_t why_size)
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

    s = trim(s);
    if (s.n == 0) {
        snprintf(why, why_size, "it is empty; expected e.g. '12GiB' or '4096'");
        return false;
    }
    if (s.p[0] == '-') {
        snprintf(why, why_size, "it is negative");
        return false;
    }
    size_t i = 0;
    uint64_t whole = 0;
    bool digits = false;
    while (i < s.n && is_digit(s.p[i])) {
        uint64_t d = (uint64_t)(s.p[i] - '0');
        if (whole > (UINT64_MAX - d) / 10) {
            snprintf(why, why_size, "it is larger than %llu bytes",
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
        snprintf(why, why_size,
                 "it does not start with a number; expected e.g. '12GiB' or '4096'");
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
                snprintf(why, why_size, "'%.*s' is ambiguous; use %s (1 %s = %s)",
                         (int)unit.n, unit.p, decimal[u].binary, decimal[u].binary,
                         decimal[u].meaning);
                return false;
            }
        }
        bool word = true;
        for (size_t k = 0; k < unit.n; k++)
            word = word && is_alpha(unit.p[k]);
        if (word)
            snprintf(why, why_size, "unknown unit '%.*s'; use %s", (int)unit.n, unit.p,
                     SIZE_UNITS);
        else
            snprintf(why, why_size, "unexpected '%.*s' after the number; units: %s",
                     (int)unit.n, unit.p, SIZE_UNITS);
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
        snprintf(why, why_size, "it is larger than %llu bytes",
                 (unsigned long long)UINT64_MAX);
        return false;
    }
    *out = total;
    return true;
}

gpumem_status gpumem__parse_size(const char *what, const char *text, uint64_t *out)
{
    char why[160];
    if (text == NULL || out == NULL)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "%s: no size given", what);
    if (!size_scan(span_of(text), out, why, sizeof why))
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "%s: '%s' is not a size: %s",
                            what, text, why);
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
static bool sim_entry_scan(struct span entry, struct sim_device_spec *spec, char *why,
                           size_t why_size, size_t *at)
{
    struct span field[3];
    size_t nfields = 0;
    const char *p = entry.p, *end = entry.p + entry.n;
    for (;;) {
        const char *colon = memchr(p, ':', (size_t)(end - p));
        if (nfields == 3) {
            *at = (size_t)(p - 1 - entry.p);
            snprintf(why, why_size, "too many ':'; expected %s", SIM_SYNTAX);
            return false;
        }
        field[nfields++] = (struct span){p, (size_t)((colon ? colon : end) - p)};
        if (!colon)
            break;
        p = colon + 1;
    }

    memset(spec, 0, sizeof *spec);
    snprintf(spec->model, sizeof spec->model, "%s", DEFAULT_SIM_MODEL);
    spec->cc_major = DEFAULT_CC_MAJOR;
    spec->cc_minor = DEFAULT_CC_MINOR;

    struct span size_text = field[0];
    if (nfields >= 2) {
        struct span model = trim(field[0]);
        *at = (size_t)(model.p - entry.p);
        if (model.n == 0) {
            snprintf(why, why_size, "the model name before ':' is empty");
            return false;
        }
        if (model.n >= sizeof spec->model) {
            snprintf(why, why_size, "the model name is %zu characters long; at most %zu",
                     model.n, sizeof spec->model - 1);
            return false;
        }
        memcpy(spec->model, model.p, model.n);
        spec->model[model.n] = '\0';
        size_text = field[1];
    }
    struct span size = trim(size_text);
    *at = (size_t)(size.p - entry.p);
    char reason[160];
    if (!size_scan(size, &spec->total_bytes, reason, sizeof reason)) {
        snprintf(why, why_size, "size '%.*s': %s", (int)size.n, size.p, reason);
        return false;
    }
    if (spec->total_bytes == 0) {
        snprintf(why, why_size, "size '%.*s' is zero", (int)size.n, size.p);
        return false;
    }
    if (spec->total_bytes < GPUMEM_MIN_SIM_DEVICE_BYTES) {
        snprintf(why, why_size, "size '%.*s' is below the smallest simulated GPU, 256 B",
                 (int)size.n, size.p);
        return false;
    }
    if (spec->total_bytes > GPUMEM_MAX_SIM_DEVICE_BYTES) {
        snprintf(why, why_size, "size '%.*s' is above the limit of 64 TiB", (int)size.n,
                 size.p);
        return false;
    }
    if (nfields == 3) {
        struct span cc = trim(field[2]);
        *at = (size_t)(cc.p - entry.p);
        if (!cc_scan(cc, &spec->cc_major, &spec->cc_minor)) {
            snprintf(why, why_size,
                     "compute capability '%.*s' is not MAJOR.MINOR (major 1..99, minor "
                     "0..9, e.g. 8.0)",
                     (int)cc.n, cc.p);
            return false;
        }
    }
    return true;
}

gpumem_status gpumem__parse_sim_devices(const char *what, const char *text,
                                        struct sim_device_spec *out, size_t capacity,
                                        size_t *count)
{
    if (text == NULL || count == NULL || (out == NULL && capacity > 0))
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "%s: bad arguments to the parser", what);
    struct span all = span_of(text);
    if (trim(all).n == 0) {
        *count = 0; /* a machine without GPUs */
        return GPUMEM_OK;
    }
    size_t n = 0;
    const char *p = text;
    for (;;) {
        const char *comma = strchr(p, ',');
        struct span entry = {p, comma ? (size_t)(comma - p) : strlen(p)};
        size_t pos = (size_t)(p - text);
        char why[256];
        size_t at = 0;
        if (trim(entry).n == 0)
            return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                                "%s: '%s': entry %zu (position %zu) is empty; expected "
                                "comma-separated %s",
                                what, text, n + 1, pos, SIM_SYNTAX);
        if (n == capacity)
            return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                                "%s: '%s': entry %zu (position %zu) is one too many; at "
                                "most %zu simulated devices",
                                what, text, n + 1, pos, capacity);
        if (!sim_entry_scan(entry, &out[n], why, sizeof why, &at))
            return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                                "%s: '%s': entry %zu (position %zu): %s", what, text,
                                n + 1, pos + at, why);
        n++;
        if (!comma)
            break;
        p = comma + 1;
    }
    *count = n;
    return GPUMEM_OK;
}

/* ------------------------------------------------------------ environment -- */

static gpumem_status env_backend(int *backend)
{
    static const struct {
        const char *word;
        int kind;
    } kinds[] = {{"auto", GPUMEM_BACKEND_AUTO},
                 {"cuda", GPUMEM_BACKEND_CUDA},
                 {"sim", GPUMEM_BACKEND_SIM}};
    const char *v = getenv("GPUMEM_BACKEND");
    if (v == NULL)
        return GPUMEM_OK;
    struct span s = trim(span_of(v));
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        if (span_is(s, kinds[i].word)) {
            *backend = kinds[i].kind;
            return GPUMEM_OK;
        }
    }
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "GPUMEM_BACKEND: '%s' is not one of auto, cuda, sim", v);
}

/* *set is left alone when the variable is unset. */
static gpumem_status env_bool(const char *name, bool *set, bool *value)
{
    static const char *const yes[] = {"true", "1", "yes", "on"};
    static const char *const no[] = {"false", "0", "no", "off"};
    const char *v = getenv(name);
    if (v == NULL)
        return GPUMEM_OK;
    struct span s = trim(span_of(v));
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        if (span_is(s, yes[i]) || span_is(s, no[i])) {
            *set = true;
            *value = span_is(s, yes[i]);
            return GPUMEM_OK;
        }
    }
    return gpumem__fail(
        GPUMEM_ERR_INVALID_ARGUMENT,
        "%s: '%s' is not a boolean; use true/false, 1/0, yes/no or on/off", name, v);
}

/* A decimal in [0, 1] ("0.5", "1", ".25", "1.000"), without exponent or sign. The
 * result is the nearest double (as strtod gives) for up to 15 significant digits and
 * 22 decimals: both the mantissa and the power of ten are then exact doubles. */
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

static gpumem_status env_fraction(double *fraction)
{
    const char *v = getenv("GPUMEM_MEMORY_FRACTION");
    if (v == NULL)
        return GPUMEM_OK;
    if (!fraction_scan(trim(span_of(v)), fraction))
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "GPUMEM_MEMORY_FRACTION: '%s' is not a number in [0, 1]", v);
    return GPUMEM_OK;
}

/* A whole number of MiB; *set is left alone when the variable is unset. */
static gpumem_status env_mib(const char *name, bool *set, uint64_t *bytes)
{
    const char *v = getenv(name);
    if (v == NULL)
        return GPUMEM_OK;
    struct span s = trim(span_of(v));
    uint64_t mib = 0;
    bool overflow = false;
    for (size_t i = 0; i < s.n; i++) {
        if (!is_digit(s.p[i]))
            return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                                "%s: '%s' is not a non-negative whole number of MiB "
                                "(e.g. 1024)",
                                name, v);
        uint64_t d = (uint64_t)(s.p[i] - '0');
        if (mib > (UINT64_MAX - d) / 10)
            overflow = true;
        else
            mib = mib * 10 + d;
    }
    if (s.n == 0)
        return gpumem__fail(
            GPUMEM_ERR_INVALID_ARGUMENT,
            "%s: '%s' is not a non-negative whole number of MiB (e.g. 1024)", name, v);
    if (overflow || mib > UINT64_MAX / GPUMEM_MIB)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "%s: '%s' MiB is 2^64 bytes or more", name, v);
    *set = true;
    *bytes = mib * GPUMEM_MIB;
    return GPUMEM_OK;
}

static gpumem_status env_cuda_library(char *path, size_t size)
{
    const char *v = getenv("GPUMEM_CUDA_LIBRARY");
    if (v == NULL)
        return GPUMEM_OK;
    size_t n = strlen(v);
    if (n == 0)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "GPUMEM_CUDA_LIBRARY is empty: unset it to load %s",
                            "libcuda.so.1");
    if (n >= size)
        return gpumem__fail(
            GPUMEM_ERR_INVALID_ARGUMENT,
            "GPUMEM_CUDA_LIBRARY: '%.64s...' is %zu bytes long; paths of at "
            "most %zu bytes are supported",
            v, n, size - 1);
    memcpy(path, v, n + 1);
    return GPUMEM_OK;
}

/* GPUMEM_LOG_LEVEL: off, error, warning, info or debug; any but off sends the log
 * of a runtime given no callback to standard error. */
static gpumem_status env_log_level(struct options *out)
{
    static const char *const levels[] = {"error", "warning", "info", "debug"};
    const char *v = getenv("GPUMEM_LOG_LEVEL");
    if (v == NULL)
        return GPUMEM_OK;
    struct span s = trim(span_of(v));
    if (span_is(s, "off"))
        return GPUMEM_OK;
    for (int i = 0; i < (int)(sizeof levels / sizeof levels[0]); i++) {
        if (span_is(s, levels[i])) {
            out->log = gpumem__log_to_stderr;
            out->log_level = i;
            return GPUMEM_OK;
        }
    }
    return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                        "GPUMEM_LOG_LEVEL: '%s' is not one of off, error, warning, info, "
                        "debug",
                        v);
}

static gpumem_status load_environment(struct options *out)
{
    gpumem_status s;
    if ((s = env_backend(&out->backend)) != GPUMEM_OK)
        return s;

    const char *sim = getenv("GPUMEM_SIM_DEVICES");
    if (sim != NULL) {
        s = gpumem__parse_sim_devices("GPUMEM_SIM_DEVICES", sim, out->sim_devices,
                                      GPUMEM_MAX_SIM_DEVICES, &out->num_sim_devices);
        if (s != GPUMEM_OK)
            return s;
    }

    /* Both spellings must parse; GPUMEM_'s wins when both are set. */
    bool tf_set = false, tf_growth = false, set = false, growth = false;
    if ((s = env_bool("TF_FORCE_GPU_ALLOW_GROWTH", &tf_set, &tf_growth)) != GPUMEM_OK ||
        (s = env_bool("GPUMEM_FORCE_ALLOW_GROWTH", &set, &growth)) != GPUMEM_OK)
        return s;
    if (set || tf_set) {
        out->force_growth_set = true;
        out->force_growth = set ? growth : tf_growth;
        snprintf(out->force_growth_var, sizeof out->force_growth_var, "%s",
                 set ? "GPUMEM_FORCE_ALLOW_GROWTH" : "TF_FORCE_GPU_ALLOW_GROWTH");
    }

    if ((s = env_fraction(&out->memory_fraction)) != GPUMEM_OK)
        return s;

    /* Read TensorFlow's first so that GPUMEM_'s overwrites it. */
    if ((s = env_mib("TF_DEVICE_MIN_SYS_MEMORY_IN_MB", &out->min_system_memory_set,
                     &out->min_system_memory_bytes)) != GPUMEM_OK ||
        (s = env_mib("GPUMEM_MIN_SYSTEM_MEMORY_MB", &out->min_system_memory_set,
                     &out->min_system_memory_bytes)) != GPUMEM_OK)
        return s;

    bool vmm_set = false, vmm = true;
    if ((s = env_bool("GPUMEM_CUDA_VMM", &vmm_set, &vmm)) != GPUMEM_OK)
        return s;
    out->cuda_no_vmm = vmm_set && !vmm;

    if ((s = env_log_level(out)) != GPUMEM_OK)
        return s;
    return env_cuda_library(out->cuda_library, sizeof out->cuda_library);
}

/* --------------------------------------------------------------- options -- */

gpumem_status gpumem_options_init(gpumem_options *opts)
{
    if (opts == NULL)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "gpumem_options_init: `opts` is NULL");
    memset(opts, 0, sizeof *opts);
    opts->struct_size = (uint32_t)sizeof *opts;
    return GPUMEM_OK;
}

static gpumem_status check_user(const gpumem_options *user)
{
    if (user->struct_size != sizeof *user)
        return gpumem__fail(
            GPUMEM_ERR_INVALID_ARGUMENT,
            "gpumem_options.struct_size is %u, expected %zu: initialize the "
            "options with gpumem_options_init() before setting fields",
            (unsigned)user->struct_size, sizeof *user);
    if (user->flags & ~GPUMEM_OPTIONS_IGNORE_ENVIRONMENT)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "gpumem_options.flags: unknown bits 0x%x (known: "
                            "GPUMEM_OPTIONS_IGNORE_ENVIRONMENT = 0x1)",
                            (unsigned)(user->flags & ~GPUMEM_OPTIONS_IGNORE_ENVIRONMENT));
    if (user->backend < GPUMEM_BACKEND_FROM_ENV || user->backend > GPUMEM_BACKEND_CUDA)
        return gpumem__fail(
            GPUMEM_ERR_INVALID_ARGUMENT,
            "gpumem_options.backend: %d is not a gpumem_backend_kind (0 = "
            "from the environment, 1 = auto, 2 = sim, 3 = cuda)",
            (int)user->backend);
    if (user->log_level < GPUMEM_LOG_ERROR || user->log_level > GPUMEM_LOG_DEBUG)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "gpumem_options.log_level: %d is not a gpumem_log_level (0 = "
                            "errors .. 3 = debug)",
                            (int)user->log_level);
    return GPUMEM_OK;
}

gpumem_status gpumem__options_load(const gpumem_options *user, struct options *out)
{
    gpumem_status s;
    if (out == NULL)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "gpumem options: `out` is NULL");
    /* The user's struct first: its other fields mean nothing with the wrong size. */
    if (user != NULL && (s = check_user(user)) != GPUMEM_OK)
        return s;

    memset(out, 0, sizeof *out);
    out->backend = GPUMEM_BACKEND_AUTO;
    out->num_sim_devices = 1;
    snprintf(out->sim_devices[0].model, sizeof out->sim_devices[0].model, "%s",
             DEFAULT_SIM_MODEL);
    out->sim_devices[0].total_bytes = DEFAULT_SIM_BYTES;
    out->sim_devices[0].cc_major = DEFAULT_CC_MAJOR;
    out->sim_devices[0].cc_minor = DEFAULT_CC_MINOR;
    out->log_level = GPUMEM_LOG_ERROR;

    if (!(user && (user->flags & GPUMEM_OPTIONS_IGNORE_ENVIRONMENT)) &&
        (s = load_environment(out)) != GPUMEM_OK)
        return s;

    if (user == NULL)
        return GPUMEM_OK;
    if (user->backend != GPUMEM_BACKEND_FROM_ENV) {
        out->backend = user->backend;
        out->backend_from_options = true;
    }
    if (user->sim_devices != NULL &&
        (s = gpumem__parse_sim_devices("gpumem_options.sim_devices", user->sim_devices,
                                       out->sim_devices, GPUMEM_MAX_SIM_DEVICES,
                                       &out->num_sim_devices)) != GPUMEM_OK)
        return s;
    if (user->log != NULL) { /* a callback takes the log, at its own level */
        out->log = user->log;
        out->log_user_data = user->log_user_data;
        out->log_level = user->log_level;
    }
    return GPUMEM_OK;
}
