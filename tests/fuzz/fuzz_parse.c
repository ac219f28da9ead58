/* A fuzz target for what gpumem reads from users as text: sizes ("1.5 GiB"), the
 * simulated-device list (GPUMEM_SIM_DEVICES) and every environment variable that
 * gpumem__options_load reads. Any text must either parse into values within their
 * documented ranges or fail with GPUMEM_ERR_INVALID_ARGUMENT and a message that
 * names its source; nothing may crash or read past the text (run it under ASan).
 *
 * Every variable of lib/option_vars.h that the library parses is fuzzed, by each
 * of its names. Messages quote the text (gpumem__quote): a long text of UTF-8
 * continuation bytes overflowed the quote's buffer (issue 33, item 1).
 *
 * Input: byte 0 chooses the parser (and the variable), the rest is the text, cut
 * at the first NUL. Built and run like fuzz_arena.c (tests/meson.build). */
#include "internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Every variable gpumem__options_load parses, by each of its names (the table
 * of lib/option_vars.h, so that a new variable is fuzzed too). */
static const char *variables[2 * 64];
static size_t nvariables;

static void list_variables(void)
{
    if (nvariables)
        return;
    for (size_t i = 0; i < gpumem__option_var_count(); i++) {
        const struct option_var *v = gpumem__option_var(i);
        if (!v->parse || v->reader != GPUMEM_READ_BY_LIBRARY)
            continue;
        if (nvariables + 2 > sizeof variables / sizeof variables[0])
            abort(); /* the table outgrew this list */
        variables[nvariables++] = v->name;
        if (v->alias)
            variables[nvariables++] = v->alias;
    }
}
#define NVARIABLES nvariables

static void die(const char *what, const char *text)
{
    fprintf(stderr, "fuzz-parse: %s\n  text: '%s'\n  last error: %s\n", what, text,
            gpumem_last_error());
    abort();
}

/* A failure: INVALID_ARGUMENT, with a message that names where the text came from. */
static void check_refusal(gpumem_status s, const char *source, const char *text)
{
    if (s != GPUMEM_ERR_INVALID_ARGUMENT)
        die("a refusal that is not GPUMEM_ERR_INVALID_ARGUMENT", text);
    if (!strstr(gpumem_last_error(), source))
        die("a refusal whose message does not name its source", text);
    if (strlen(gpumem_last_error()) >= GPUMEM_ERROR_BUF)
        die("a message longer than its buffer", text);
}

static void fuzz_size(const char *text)
{
    uint64_t v = 0;
    gpumem_status s = gpumem__parse_size("SIZE", text, &v);
    if (s != GPUMEM_OK) {
        check_refusal(s, "SIZE", text);
        return;
    }
    /* what it parsed, written back as bytes, parses to the same */
    char again[32];
    uint64_t w = 0;
    snprintf(again, sizeof again, "%" PRIu64, v);
    if (gpumem__parse_size("SIZE", again, &w) != GPUMEM_OK || w != v)
        die("a parsed size does not survive being written back in bytes", text);
    /* digits alone are bytes */
    size_t n = strlen(text), lead = strspn(text, " \t");
    size_t digits = strspn(text + lead, "0123456789");
    if (digits && digits < 20 && lead + digits == n && strtoull(text, NULL, 10) != v)
        die("a plain number is not its own count of bytes", text);
}

static void fuzz_sim_devices(const char *text)
{
    struct sim_device_spec spec[GPUMEM_MAX_SIM_DEVICES];
    size_t count = 0;
    gpumem_status s =
        gpumem__parse_sim_devices("SIM", text, spec, GPUMEM_MAX_SIM_DEVICES, &count);
    if (s != GPUMEM_OK) {
        check_refusal(s, "SIM", text);
        return;
    }
    if (count > GPUMEM_MAX_SIM_DEVICES)
        die("more simulated devices than there is room for", text);
    for (size_t i = 0; i < count; i++) {
        const struct sim_device_spec *d = &spec[i];
        if (!memchr(d->model, '\0', sizeof d->model) || !d->model[0])
            die("a model name that is empty or not terminated", text);
        if (d->total_bytes < GPUMEM_MIN_SIM_DEVICE_BYTES ||
            d->total_bytes > GPUMEM_MAX_SIM_DEVICE_BYTES || d->cc_major < 1 ||
            d->cc_major > 99 || d->cc_minor < 0 || d->cc_minor > 9)
            die("a device size or compute capability out of range", text);
    }
}

static void fuzz_variable(const char *name, const char *text)
{
    for (size_t i = 0; i < NVARIABLES; i++)
        unsetenv(variables[i]);
    /* putenv with a string of our own, not setenv: glibc keeps every value ever
     * given to setenv for the life of the process, which over millions of inputs
     * grows until libFuzzer's memory limit stops the run */
    size_t nlen = strlen(name), tlen = strlen(text);
    char *entry = malloc(nlen + 1 + tlen + 1);
    if (!entry)
        return;
    memcpy(entry, name, nlen);
    entry[nlen] = '=';
    memcpy(entry + nlen + 1, text, tlen + 1);
    if (putenv(entry) != 0) {
        free(entry);
        return;
    }
    struct options o;
    gpumem_status s = gpumem__options_load(NULL, &o);
    unsetenv(name); /* takes `entry` out of the environment before it is freed */
    free(entry);
    if (s != GPUMEM_OK) {
        check_refusal(s, name, text);
        return;
    }
    if (o.backend != GPUMEM_BACKEND_AUTO && o.backend != GPUMEM_BACKEND_SIM &&
        o.backend != GPUMEM_BACKEND_CUDA)
        die("a backend out of range", text);
    if (!(o.memory_fraction >= 0.0 && o.memory_fraction <= 1.0))
        die("a memory fraction out of [0, 1]", text);
    if (o.num_sim_devices > GPUMEM_MAX_SIM_DEVICES)
        die("more simulated devices than there is room for", text);
    if (!memchr(o.cuda_library, '\0', sizeof o.cuda_library))
        die("a CUDA library path that is not terminated", text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    list_variables();
    char *text = malloc(size);
    if (!text)
        return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    unsigned which = data[0] % (2 + NVARIABLES);
    if (which == 0)
        fuzz_size(text);
    else if (which == 1)
        fuzz_sim_devices(text);
    else
        fuzz_variable(variables[which - 2], text);
    free(text);
    return 0;
}
