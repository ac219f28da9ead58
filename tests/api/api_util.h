/* Helpers shared by the public-API tests: sizes, runtimes over simulated GPUs
 * (isolated from the environment, or reading it), memory info, environment
 * cleanup. Only gpumem.h and the harness: these tests know the contract alone. */
#ifndef GPUMEM_API_UTIL_H
#define GPUMEM_API_UTIL_H

#include "gpumem.h"
#include "harness.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KiB ((uint64_t)1024)
#define MiB (KiB * 1024)
#define GiB (MiB * 1024)

/* A runtime over the simulated GPUs `devices`, ignoring the environment, whose
 * log goes to `log` (may be NULL) at `level` and above. */
static inline gpumem_runtime *sim_runtime_logged(const char *devices, gpumem_log_fn log,
                                                 void *user_data, int level)
{
    gpumem_options o;
    gpumem_runtime *rt = NULL;
    if (gpumem_options_init(&o) != GPUMEM_OK) {
        HARNESS_FAIL("gpumem_options_init failed");
        return NULL;
    }
    o.backend = GPUMEM_BACKEND_SIM;
    o.flags = GPUMEM_OPTIONS_IGNORE_ENVIRONMENT;
    o.sim_devices = devices;
    if (log) {
        o.log = log;
        o.log_user_data = user_data;
        o.log_level = level;
    }
    gpumem_status s = gpumem_runtime_create(&o, &rt);
    if (s != GPUMEM_OK || rt == NULL) {
        HARNESS_FAIL("gpumem_runtime_create(\"%s\"): %s (%s)", devices,
                     gpumem_status_name(s), gpumem_last_error());
        return NULL;
    }
    return rt;
}

/* A runtime over the simulated GPUs `devices`, ignoring the environment. */
static inline gpumem_runtime *sim_runtime(const char *devices)
{
    return sim_runtime_logged(devices, NULL, NULL, 0);
}

/* A runtime over simulated GPUs that reads the environment (the variables under
 * test); the caller has set them. */
static inline gpumem_runtime *env_runtime(const char *devices)
{
    gpumem_options o;
    gpumem_runtime *rt = NULL;
    ASSERT_OK(gpumem_options_init(&o));
    o.backend = GPUMEM_BACKEND_SIM;
    o.sim_devices = devices;
    gpumem_status s = gpumem_runtime_create(&o, &rt);
    if (s != GPUMEM_OK || rt == NULL) {
        HARNESS_FAIL("gpumem_runtime_create(\"%s\") with the environment: %s (%s)",
                     devices, gpumem_status_name(s), gpumem_last_error());
        return NULL;
    }
    return rt;
}

/* The variables the library reads, from its own table (a list of names with no
 * types of the library: these tests still know only gpumem.h). By path, since
 * only tests/ is on these tests' include path. */
#include "../../lib/option_vars.h"

static const struct {
    const char *name, *alias;
    enum gpumem_option_reader reader;
} env_vars[] = {
#define API_UTIL_ENV_VAR(name, alias, reader, ...) {name, alias, reader},
    GPUMEM_OPTION_VARS(API_UTIL_ENV_VAR)
#undef API_UTIL_ENV_VAR
};

/* Unsets every variable the library reads, TensorFlow's spellings included. */
static inline void clear_env(void)
{
    for (size_t i = 0; i < sizeof env_vars / sizeof env_vars[0]; i++) {
        if (env_vars[i].reader != GPUMEM_READ_BY_LIBRARY)
            continue;
        unsetenv(env_vars[i].name);
        if (env_vars[i].alias)
            unsetenv(env_vars[i].alias);
    }
}

static inline gpumem_memory_info info_of(gpumem_runtime *rt, int logical)
{
    gpumem_memory_info mi;
    memset(&mi, 0, sizeof mi);
    mi.struct_size = sizeof mi;
    ASSERT_OK(gpumem_get_memory_info(rt, logical, &mi));
    return mi;
}

static inline void copy_error(char *buf, size_t n)
{
    const char *e = gpumem_last_error();
    snprintf(buf, n, "%s", e ? e : "(null)");
}

#endif /* GPUMEM_API_UTIL_H */
