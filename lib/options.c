/* Options: gpumem_options merged over the environment variables and the defaults,
 * read once when a runtime is created. One descriptor per variable (the table of
 * option_vars.h) drives the reading: its spellings, its parser (parse.c does the
 * text) and the field of struct options it lands in. A variable that is set must
 * parse, even when a user field overrides it: bad values are errors, never
 * silently ignored. No state, no locks. */
#include "internal.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_SIM_BYTES (16 * GPUMEM_GIB)

/* ------------------------------------------------------------ environment -- */

/* Where var's value lands in *out. pre: its field has `size` bytes (the
 * descriptor names the field its parser writes). */
static void *field_of(const struct option_var *var, struct options *out, size_t size)
{
    assert(var->field_size == size);
    (void)size;
    return (char *)out + var->field;
}

/* The message of a variable's bad value: its name, then the parser's reason. */
static gpumem_status fail_var(gpumem_status s, const char *name, const struct reason *why)
{
    return gpumem__fail(s, "%s: %s", name, why->text);
}

static gpumem_status parse_backend(const struct option_var *var, const char *name,
                                   const char *value, struct options *out)
{
    static const char *const words[] = {"auto", "cuda", "sim"};
    static const int kinds[] = {GPUMEM_BACKEND_AUTO, GPUMEM_BACKEND_CUDA,
                                GPUMEM_BACKEND_SIM};
    struct reason why;
    size_t i;
    gpumem_status s = gpumem__scan_word(value, words, 3, &i, &why);
    if (s != GPUMEM_OK)
        return fail_var(s, name, &why);
    *(int *)field_of(var, out, sizeof(int)) = kinds[i];
    return GPUMEM_OK;
}

static gpumem_status parse_sim_devices(const struct option_var *var, const char *name,
                                       const char *value, struct options *out)
{
    struct reason why;
    struct sim_device_spec *specs = field_of(var, out, sizeof out->sim_devices);
    gpumem_status s = gpumem__scan_sim_devices(value, specs, GPUMEM_MAX_SIM_DEVICES,
                                               &out->num_sim_devices, &why);
    return s == GPUMEM_OK ? s : fail_var(s, name, &why);
}

/* A name that goes into file names (sim.c): nothing that could leave the folder. */
static gpumem_status parse_sim_machine(const struct option_var *var, const char *name,
                                       const char *value, struct options *out)
{
    char q[GPUMEM_QUOTE_BUF];
    size_t n = strlen(value);
    bool ok = n >= 1 && n <= GPUMEM_SIM_MACHINE_MAX;
    for (size_t i = 0; ok && i < n; i++)
        ok = (value[i] >= 'a' && value[i] <= 'z') ||
             (value[i] >= 'A' && value[i] <= 'Z') ||
             (value[i] >= '0' && value[i] <= '9') || value[i] == '_' || value[i] == '-';
    if (!ok)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "%s=%s: a machine name is 1 to %d of A-Z a-z 0-9 _ -", name,
                            gpumem__quote(value, q, sizeof q), GPUMEM_SIM_MACHINE_MAX);
    memcpy(field_of(var, out, var->field_size), value, n + 1);
    return GPUMEM_OK;
}

/* Also notes that it was set, and by which spelling (the warning names it). */
static gpumem_status parse_force_growth(const struct option_var *var, const char *name,
                                        const char *value, struct options *out)
{
    struct reason why;
    bool on;
    gpumem_status s = gpumem__scan_bool(value, &on, &why);
    if (s != GPUMEM_OK)
        return fail_var(s, name, &why);
    *(bool *)field_of(var, out, sizeof(bool)) = on;
    out->force_growth_set = true;
    snprintf(out->force_growth_var, sizeof out->force_growth_var, "%s", name);
    return GPUMEM_OK;
}

static gpumem_status parse_fraction(const struct option_var *var, const char *name,
                                    const char *value, struct options *out)
{
    struct reason why;
    gpumem_status s =
        gpumem__scan_fraction(value, field_of(var, out, sizeof(double)), &why);
    return s == GPUMEM_OK ? s : fail_var(s, name, &why);
}

/* Also notes that it was set: 0 is a headroom, not "the default table". */
static gpumem_status parse_min_system_memory(const struct option_var *var,
                                             const char *name, const char *value,
                                             struct options *out)
{
    struct reason why;
    gpumem_status s = gpumem__scan_mib(value, field_of(var, out, sizeof(uint64_t)), &why);
    if (s != GPUMEM_OK)
        return fail_var(s, name, &why);
    out->min_system_memory_set = true;
    return GPUMEM_OK;
}

/* Any level but off sends the log of a runtime given no callback to standard
 * error. */
static gpumem_status parse_log_level(const struct option_var *var, const char *name,
                                     const char *value, struct options *out)
{
    static const char *const words[] = {"off", "error", "warning", "info", "debug"};
    struct reason why;
    size_t i;
    gpumem_status s = gpumem__scan_word(value, words, 5, &i, &why);
    if (s != GPUMEM_OK)
        return fail_var(s, name, &why);
    if (i > 0) {
        out->log = gpumem__log_to_stderr;
        *(int *)field_of(var, out, sizeof(int)) = (int)i - 1 + GPUMEM_LOG_ERROR;
    }
    return GPUMEM_OK;
}

/* A path into its char-array field (GPUMEM_OOM_SNAPSHOT, and the checks of the
 * other paths after their own): refused when it does not fit, with the
 * variable's name and the longest path the field holds. */
static gpumem_status parse_path(const struct option_var *var, const char *name,
                                const char *value, struct options *out)
{
    char q[GPUMEM_QUOTE_BUF];
    size_t n = strlen(value);
    if (n >= var->field_size)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "%s: %s is %zu bytes long; paths of at most %zu bytes are "
                            "supported",
                            name, gpumem__quote(value, q, sizeof q), n,
                            var->field_size - 1);
    memcpy(field_of(var, out, var->field_size), value, n + 1);
    return GPUMEM_OK;
}

static gpumem_status parse_cuda_library(const struct option_var *var, const char *name,
                                        const char *value, struct options *out)
{
    if (value[0] == '\0')
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "%s is empty: unset it to load %s", name, "libcuda.so.1");
    return parse_path(var, name, value, out);
}

/* An on/off word into a bool field; `stored` is what the field holds for "on". */
static gpumem_status parse_switch(const struct option_var *var, const char *name,
                                  const char *value, struct options *out, bool stored)
{
    struct reason why;
    bool on;
    gpumem_status s = gpumem__scan_bool(value, &on, &why);
    if (s != GPUMEM_OK)
        return fail_var(s, name, &why);
    *(bool *)field_of(var, out, sizeof(bool)) = on ? stored : !stored;
    return GPUMEM_OK;
}

/* On/off words that default to on (GPUMEM_CUDA_VMM, GPUMEM_LEDGER,
 * GPUMEM_SHARE_GIVE): the field holds the opposite, so that zeroed options mean
 * the default. */
static gpumem_status parse_off_switch(const struct option_var *var, const char *name,
                                      const char *value, struct options *out)
{
    return parse_switch(var, name, value, out, false);
}

/* On/off words whose field holds "on" (GPUMEM_GROWTH_TRIM, whose default, on, is
 * set before the environment is read). */
static gpumem_status parse_on_switch(const struct option_var *var, const char *name,
                                     const char *value, struct options *out)
{
    return parse_switch(var, name, value, out, true);
}

static gpumem_status parse_ledger_dir(const struct option_var *var, const char *name,
                                      const char *value, struct options *out)
{
    if (value[0] == '\0')
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "%s: empty; unset it for /dev/shm", name);
    return parse_path(var, name, value, out);
}

/* A whole number of milliseconds from 0 to `max`, at most 9 digits, into the
 * uint32_t field. */
static gpumem_status parse_ms(const struct option_var *var, const char *name,
                              const char *value, uint32_t max, struct options *out)
{
    char q[GPUMEM_QUOTE_BUF];
    uint64_t ms = 0;
    size_t n = strlen(value);
    bool ok = n >= 1 && n <= 9;
    for (size_t i = 0; ok && i < n; i++) {
        ok = value[i] >= '0' && value[i] <= '9';
        ms = ms * 10 + (uint64_t)(value[i] - '0');
    }
    if (!ok || ms > max)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "%s=%s: a whole number of milliseconds from 0 to %lu", name,
                            gpumem__quote(value, q, sizeof q), (unsigned long)max);
    *(uint32_t *)field_of(var, out, sizeof(uint32_t)) = (uint32_t)ms;
    return GPUMEM_OK;
}

static gpumem_status parse_share_wait(const struct option_var *var, const char *name,
                                      const char *value, struct options *out)
{
    return parse_ms(var, name, value, GPUMEM_SHARE_WAIT_MAX_MS, out);
}

static gpumem_status parse_idle_release(const struct option_var *var, const char *name,
                                        const char *value, struct options *out)
{
    return parse_ms(var, name, value, GPUMEM_GROWTH_IDLE_RELEASE_MAX_MS, out);
}

static gpumem_status parse_record_history(const struct option_var *var, const char *name,
                                          const char *value, struct options *out)
{
    char q[GPUMEM_QUOTE_BUF];
    uint64_t n = 0;
    bool bad = !value[0];
    for (const char *c = value; *c && !bad; c++) {
        if (*c < '0' || *c > '9' || n > GPUMEM_RECORD_HISTORY_MAX)
            bad = true;
        else
            n = n * 10 + (uint64_t)(*c - '0');
    }
    if (bad || n > GPUMEM_RECORD_HISTORY_MAX)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "%s: %s is not a number of events from 0 (off) to %llu", name,
                            gpumem__quote(value, q, sizeof q),
                            (unsigned long long)GPUMEM_RECORD_HISTORY_MAX);
    *(uint64_t *)field_of(var, out, sizeof(uint64_t)) = n;
    return GPUMEM_OK;
}

#define OPTION_FIELD(member)                                                             \
    offsetof(struct options, member), sizeof(((struct options *)0)->member)
#define OPTION_NO_FIELD 0, 0
#define OPTION_VAR(name, alias, reader, parse, field, help)                              \
    {name, alias, reader, parse, field, help},
static const struct option_var vars[] = {GPUMEM_OPTION_VARS(OPTION_VAR)};
#undef OPTION_VAR

size_t gpumem__option_var_count(void) { return sizeof vars / sizeof vars[0]; }

const struct option_var *gpumem__option_var(size_t i)
{
    return i < sizeof vars / sizeof vars[0] ? &vars[i] : NULL;
}

static gpumem_status load_environment(struct options *out)
{
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        if (vars[i].reader != GPUMEM_READ_BY_LIBRARY)
            continue;
        /* TensorFlow's spelling first, so that GPUMEM_'s overwrites it; both must
         * parse. */
        const char *const names[] = {vars[i].alias, vars[i].name};
        for (size_t k = 0; k < 2; k++) {
            const char *value = names[k] ? getenv(names[k]) : NULL;
            gpumem_status s;
            if (value != NULL &&
                (s = vars[i].parse(&vars[i], names[k], value, out)) != GPUMEM_OK)
                return s;
        }
    }
    return GPUMEM_OK;
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
    const uint32_t known = GPUMEM_OPTIONS_IGNORE_ENVIRONMENT |
                           GPUMEM_OPTIONS_TRIM_GROWTH | GPUMEM_OPTIONS_NO_TRIM_GROWTH;
    if (user->flags & ~known)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "gpumem_options.flags: unknown bits 0x%x (known: "
                            "GPUMEM_OPTIONS_IGNORE_ENVIRONMENT = 0x1, "
                            "GPUMEM_OPTIONS_TRIM_GROWTH = 0x2, "
                            "GPUMEM_OPTIONS_NO_TRIM_GROWTH = 0x4)",
                            (unsigned)(user->flags & ~known));
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
             GPUMEM_SIM_DEFAULT_MODEL);
    out->sim_devices[0].total_bytes = DEFAULT_SIM_BYTES;
    out->sim_devices[0].cc_major = GPUMEM_SIM_DEFAULT_CC_MAJOR;
    out->sim_devices[0].cc_minor = GPUMEM_SIM_DEFAULT_CC_MINOR;
    out->log_level = GPUMEM_LOG_ERROR;
    out->share_wait_ms = GPUMEM_SHARE_WAIT_DEFAULT_MS;
    out->growth_trim = true;
    out->growth_trim_window = GPUMEM_GROWTH_TRIM_WINDOW_DEFAULT;
    out->growth_idle_release_ms = GPUMEM_GROWTH_IDLE_RELEASE_DEFAULT_MS;

    if (!(user && (user->flags & GPUMEM_OPTIONS_IGNORE_ENVIRONMENT)) &&
        (s = load_environment(out)) != GPUMEM_OK)
        return s;

    if (user == NULL)
        return GPUMEM_OK;
    if (user->flags & GPUMEM_OPTIONS_TRIM_GROWTH)
        out->growth_trim = true;
    if (user->flags & GPUMEM_OPTIONS_NO_TRIM_GROWTH) /* wins over the other */
        out->growth_trim = false;
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
