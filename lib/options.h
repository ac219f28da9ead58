/* A runtime's options (struct options): gpumem_options merged over the
 * environment variables of option_vars.h and the defaults, read once when the
 * runtime is created and constant afterwards (read without locks). options.c
 * holds the table of variables, one descriptor each, that drives the parsing. */
#ifndef GPUMEM_OPTIONS_H
#define GPUMEM_OPTIONS_H

#include "gpumem.h"
#include "option_vars.h"
#include "parse.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* GPUMEM_SIM_MACHINE's longest name: "sim-NAME-63" must fit a ledger's UUID. */
#define GPUMEM_SIM_MACHINE_MAX 40

/* GPUMEM_SHARE_WAIT_MS when unset, and its largest value. */
#define GPUMEM_SHARE_WAIT_DEFAULT_MS 500
#define GPUMEM_SHARE_WAIT_MAX_MS     60000

/* GPUMEM_GROWTH_TRIM_WINDOW when unset: the trim's window, in peaks of reserved
 * bytes handed out (lib/growth.c, pool_trim; docs/bench.md, "The trim's window"). */
#define GPUMEM_GROWTH_TRIM_WINDOW_DEFAULT 1.0

/* GPUMEM_GROWTH_IDLE_RELEASE_MS when unset, and its largest value (a day): how
 * long a growing pool stays idle before its free memory goes back (lib/idle.c). */
#define GPUMEM_GROWTH_IDLE_RELEASE_DEFAULT_MS 60000
#define GPUMEM_GROWTH_IDLE_RELEASE_MAX_MS     86400000

/* The runtime's options: gpumem_options merged over the environment, read once. */
struct options {
    int backend;               /* GPUMEM_BACKEND_AUTO, _SIM or _CUDA (never _FROM_ENV) */
    bool backend_from_options; /* gpumem_options.backend chose it, not GPUMEM_BACKEND */
    size_t num_sim_devices;
    struct sim_device_spec sim_devices[GPUMEM_MAX_SIM_DEVICES];
    char
        sim_machine[GPUMEM_SIM_MACHINE_MAX + 1]; /* GPUMEM_SIM_MACHINE; "" = not shared */
    bool force_growth_set;     /* GPUMEM_FORCE_ALLOW_GROWTH / TF_FORCE_GPU_ALLOW_GROWTH */
    bool force_growth;         /* its value: every GPU's growth, whatever was set */
    char force_growth_var[32]; /* the variable that set it */
    double memory_fraction;    /* GPUMEM_MEMORY_FRACTION; 0 = none */
    bool min_system_memory_set; /* GPUMEM_MIN_SYSTEM_MEMORY_MB /
                                   TF_DEVICE_MIN_SYS_MEMORY_IN_MB */
    uint64_t min_system_memory_bytes;
    char cuda_library[1024]; /* GPUMEM_CUDA_LIBRARY; "" (unset) = libcuda.so.1 */
    bool cuda_no_vmm;        /* GPUMEM_CUDA_VMM=false: growth by plain allocations */
    char oom_snapshot[1024]; /* GPUMEM_OOM_SNAPSHOT: where the first out of memory
                                writes a snapshot; "" (unset) = nowhere */
    uint64_t record_history; /* GPUMEM_RECORD_HISTORY: events each logical device's
                                history holds; 0 = off (gpumem_record_history sets
                                it before initialization) */
    /* The ledger (lib/share.c). Negated, so that zeroed options mean the
     * defaults: on, giving. */
    bool ledger_off;        /* GPUMEM_LEDGER=off */
    char ledger_dir[1024];  /* GPUMEM_LEDGER_DIR; "" (unset) = /dev/shm */
    uint32_t share_wait_ms; /* GPUMEM_SHARE_WAIT_MS (set by options_load) */
    bool share_give_off;    /* GPUMEM_SHARE_GIVE=off */
    bool growth_trim;       /* GPUMEM_GROWTH_TRIM, the two flags (set by options_load) */
    double growth_trim_window;       /* GPUMEM_GROWTH_TRIM_WINDOW, in [0, 1] (set by
                                        options_load) */
    uint32_t growth_idle_release_ms; /* GPUMEM_GROWTH_IDLE_RELEASE_MS; 0 = never
                                        (set by options_load) */
    gpumem_log_fn log;
    void *log_user_data;
    int log_level;
    /* The default runtime's: a warning its log would not take is printed on
     * standard error all the same (gpumem__warn), as TensorFlow's LOG(WARNING)
     * is by default, since no program can give that runtime a callback. */
    bool warn_to_stderr;
};

/* Fills *out from `user` (may be NULL) and, unless user->flags has
 * GPUMEM_OPTIONS_IGNORE_ENVIRONMENT, the environment. User fields that are set win
 * over variables. A bad value fails with GPUMEM_ERR_INVALID_ARGUMENT and a message
 * that names the variable (or the option field) and quotes the value (a long one
 * shortened, so that the reason is whole). */
gpumem_status gpumem__options_load(const gpumem_options *user, struct options *out);

/* One environment variable: a GPUMEM_OPTION_VARS line (option_vars.h says what
 * each member means). */
struct option_var {
    const char *name;
    const char *alias; /* NULL: none */
    enum gpumem_option_reader reader;
    /* Parses `value` of the variable `name` (var->name or var->alias) into *out;
     * on failure sets the message (gpumem__fail) naming `name`. NULL when another
     * reader's. */
    gpumem_status (*parse)(const struct option_var *var, const char *name,
                           const char *value, struct options *out);
    size_t field, field_size; /* offset and size in struct options; 0, 0: none */
    const char *help;         /* README's table row text, markdown */
};

/* The table, in reading order: i in [0, gpumem__option_var_count()), NULL past
 * the end. */
size_t gpumem__option_var_count(void);
const struct option_var *gpumem__option_var(size_t i);

#endif /* GPUMEM_OPTIONS_H */
