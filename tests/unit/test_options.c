/* Options: defaults, every environment variable with good and bad values (the
 * message names the variable and quotes the value), long values quoted short with
 * the reason whole, GPUMEM_ over TF_ precedence, IGNORE_ENVIRONMENT, user fields
 * over the environment, validation of the user's struct, the size parser (units,
 * exactness, overflow), the simulated device parser (models, compute capability,
 * positions in errors, the 64-device limit) and the table of variables.
 * `test_unit_options readme README.md` checks README's variable table against the
 * table's help texts; `test_unit_options readme-rows` prints the rows it expects. */
#include "harness.h"
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>

/* Unsets every variable the library reads, TensorFlow's spellings included. */
static void clear_env(void)
{
    for (size_t i = 0; i < gpumem__option_var_count(); i++) {
        const struct option_var *v = gpumem__option_var(i);
        if (v->reader != GPUMEM_READ_BY_LIBRARY)
            continue;
        unsetenv(v->name);
        if (v->alias)
            unsetenv(v->alias);
    }
}

/* struct options is ~10 KiB: keep the ones the tests fill off the stack. */
static struct options opts;

/* Loads with only `var`=`value` set (var NULL: nothing set); user may be NULL. */
static gpumem_status load_with(const char *var, const char *value,
                               const gpumem_options *user)
{
    clear_env();
    if (var)
        setenv(var, value, 1);
    gpumem_status s = gpumem__options_load(user, &opts);
    clear_env();
    return s;
}

/* var=value must fail with INVALID_ARGUMENT, a message naming var and quoting value. */
#define EXPECT_BAD_ENV(var, value)                                                       \
    do {                                                                                 \
        ASSERT_STATUS(load_with(var, value, NULL), GPUMEM_ERR_INVALID_ARGUMENT);         \
        ASSERT_CONTAINS(gpumem_last_error(), var);                                       \
        char quoted_[256];                                                               \
        snprintf(quoted_, sizeof quoted_, "'%s'", value);                                \
        ASSERT_CONTAINS(gpumem_last_error(), quoted_);                                   \
    } while (0)

/* ------------------------------------------------------------- defaults -- */

TEST(options_init)
{
    gpumem_options o;
    memset(&o, 0xAB, sizeof o);
    ASSERT_OK(gpumem_options_init(&o));
    ASSERT_EQ(o.struct_size, sizeof(gpumem_options));
    ASSERT_EQ(o.flags, 0);
    ASSERT_EQ(o.backend, GPUMEM_BACKEND_FROM_ENV);
    ASSERT_EQ(o.log_level, 0);
    ASSERT_TRUE(o.sim_devices == NULL);
    ASSERT_TRUE(o.log == NULL);
    ASSERT_TRUE(o.log_user_data == NULL);
    ASSERT_STATUS(gpumem_options_init(NULL), GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(gpumem_last_error(), "gpumem_options_init");
}

static void check_defaults(const struct options *o)
{
    ASSERT_EQ(o->backend, GPUMEM_BACKEND_AUTO);
    ASSERT_EQ(o->num_sim_devices, 1);
    ASSERT_STREQ(o->sim_devices[0].model, "gpumem simulated GPU");
    ASSERT_EQ(o->sim_devices[0].total_bytes, 16 * GPUMEM_GIB);
    ASSERT_EQ(o->sim_devices[0].cc_major, 8);
    ASSERT_EQ(o->sim_devices[0].cc_minor, 0);
    ASSERT_FALSE(o->force_growth);
    ASSERT_TRUE(o->memory_fraction == 0.0);
    ASSERT_FALSE(o->min_system_memory_set);
    ASSERT_EQ(o->min_system_memory_bytes, 0);
    ASSERT_STREQ(o->cuda_library, "");
    ASSERT_TRUE(o->log == NULL);
    ASSERT_EQ(o->log_level, GPUMEM_LOG_ERROR);
}

TEST(defaults)
{
    ASSERT_OK(load_with(NULL, NULL, NULL));
    check_defaults(&opts);
    gpumem_options u;
    ASSERT_OK(gpumem_options_init(&u));
    ASSERT_OK(load_with(NULL, NULL, &u));
    check_defaults(&opts);
    ASSERT_STATUS(gpumem__options_load(NULL, NULL), GPUMEM_ERR_INVALID_ARGUMENT);
}

/* ------------------------------------------------------- GPUMEM_BACKEND -- */

TEST(env_backend)
{
    static const struct {
        const char *value;
        int kind;
    } good[] = {
        {"auto", GPUMEM_BACKEND_AUTO},  {"cuda", GPUMEM_BACKEND_CUDA},
        {"sim", GPUMEM_BACKEND_SIM},    {"SIM", GPUMEM_BACKEND_SIM},
        {"Cuda", GPUMEM_BACKEND_CUDA},  {"  sim \t", GPUMEM_BACKEND_SIM},
        {" AUTO", GPUMEM_BACKEND_AUTO},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        ASSERT_OK(load_with("GPUMEM_BACKEND", good[i].value, NULL));
        ASSERT_EQ(opts.backend, good[i].kind);
    }
    EXPECT_BAD_ENV("GPUMEM_BACKEND", "tpu");
    ASSERT_CONTAINS(gpumem_last_error(), "auto, cuda, sim");
    EXPECT_BAD_ENV("GPUMEM_BACKEND", "");
    EXPECT_BAD_ENV("GPUMEM_BACKEND", "simulated");
    EXPECT_BAD_ENV("GPUMEM_BACKEND", "s im");
    EXPECT_BAD_ENV("GPUMEM_BACKEND", "2");
}

/* --------------------------------------------------- GPUMEM_SIM_DEVICES -- */

TEST(env_sim_devices)
{
    ASSERT_OK(load_with("GPUMEM_SIM_DEVICES", "12GiB,24GiB", NULL));
    ASSERT_EQ(opts.num_sim_devices, 2);
    ASSERT_EQ(opts.sim_devices[0].total_bytes, 12 * GPUMEM_GIB);
    ASSERT_EQ(opts.sim_devices[1].total_bytes, 24 * GPUMEM_GIB);
    ASSERT_STREQ(opts.sim_devices[1].model, "gpumem simulated GPU");

    ASSERT_OK(load_with("GPUMEM_SIM_DEVICES", "TITAN X:12GiB:6.1,A100:40GiB:8.0", NULL));
    ASSERT_EQ(opts.num_sim_devices, 2);
    ASSERT_STREQ(opts.sim_devices[0].model, "TITAN X");
    ASSERT_EQ(opts.sim_devices[0].cc_major, 6);
    ASSERT_EQ(opts.sim_devices[0].cc_minor, 1);

    /* Empty: a machine without GPUs, not an error. */
    ASSERT_OK(load_with("GPUMEM_SIM_DEVICES", "", NULL));
    ASSERT_EQ(opts.num_sim_devices, 0);

    EXPECT_BAD_ENV("GPUMEM_SIM_DEVICES", "12GB");
    ASSERT_CONTAINS(gpumem_last_error(), "use GiB");
    EXPECT_BAD_ENV("GPUMEM_SIM_DEVICES", "100B");
    ASSERT_CONTAINS(gpumem_last_error(), "below the smallest simulated GPU");
    EXPECT_BAD_ENV("GPUMEM_SIM_DEVICES", "TITAN X:12GiB:six");
    EXPECT_BAD_ENV("GPUMEM_SIM_DEVICES", "12GiB,,4GiB");
    EXPECT_BAD_ENV("GPUMEM_SIM_DEVICES", "lots");
}

/* --------------------------------------------------------------- growth -- */

TEST(env_force_growth)
{
    static const struct {
        const char *value;
        bool on;
    } good[] = {
        {"true", true},   {"false", false}, {"1", true},   {"0", false},
        {"yes", true},    {"no", false},    {"on", true},  {"off", false},
        {"TRUE", true},   {"False", false}, {"Yes", true}, {"OFF", false},
        {" true ", true}, {"\tno", false},
    };
    const char *const vars[] = {"GPUMEM_FORCE_ALLOW_GROWTH", "TF_FORCE_GPU_ALLOW_GROWTH"};
    for (size_t v = 0; v < 2; v++) {
        for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
            gpumem_status s = load_with(vars[v], good[i].value, NULL);
            if (s != GPUMEM_OK)
                HARNESS_FAIL("%s='%s': %s", vars[v], good[i].value, gpumem_last_error());
            else if (opts.force_growth != good[i].on)
                HARNESS_FAIL("%s='%s': force_growth %d", vars[v], good[i].value,
                             (int)opts.force_growth);
        }
        EXPECT_BAD_ENV(vars[v], "maybe");
        ASSERT_CONTAINS(gpumem_last_error(), "true/false");
        EXPECT_BAD_ENV(vars[v], "");
        EXPECT_BAD_ENV(vars[v], "2");
        EXPECT_BAD_ENV(vars[v], "truee");
        EXPECT_BAD_ENV(vars[v], "t");
    }
}

TEST(growth_precedence)
{
    clear_env();
    setenv("GPUMEM_FORCE_ALLOW_GROWTH", "false", 1);
    setenv("TF_FORCE_GPU_ALLOW_GROWTH", "true", 1);
    ASSERT_OK(gpumem__options_load(NULL, &opts));
    ASSERT_FALSE(opts.force_growth);

    setenv("GPUMEM_FORCE_ALLOW_GROWTH", "true", 1);
    setenv("TF_FORCE_GPU_ALLOW_GROWTH", "false", 1);
    ASSERT_OK(gpumem__options_load(NULL, &opts));
    ASSERT_TRUE(opts.force_growth);

    unsetenv("GPUMEM_FORCE_ALLOW_GROWTH");
    setenv("TF_FORCE_GPU_ALLOW_GROWTH", "true", 1);
    ASSERT_OK(gpumem__options_load(NULL, &opts));
    ASSERT_TRUE(opts.force_growth);

    /* A bad TF_ value is an error even when GPUMEM_ decides: never silently ignored. */
    setenv("GPUMEM_FORCE_ALLOW_GROWTH", "true", 1);
    setenv("TF_FORCE_GPU_ALLOW_GROWTH", "maybe", 1);
    ASSERT_STATUS(gpumem__options_load(NULL, &opts), GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(gpumem_last_error(), "TF_FORCE_GPU_ALLOW_GROWTH");
    clear_env();
}

/* ------------------------------------------------------------- fraction -- */

TEST(env_memory_fraction)
{
    static const struct {
        const char *value;
        double fraction;
    } good[] = {
        {"0.5", 0.5},   {"0", 0.0},       {"1", 1.0},         {"1.0", 1.0},
        {"1.000", 1.0}, {" 0.25 ", 0.25}, {".5", 0.5},        {"0.333", 0.333},
        {"0.1", 0.1},   {"00.75", 0.75},  {"0.000001", 1e-6}, {"0.0", 0.0},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        gpumem_status s = load_with("GPUMEM_MEMORY_FRACTION", good[i].value, NULL);
        if (s != GPUMEM_OK)
            HARNESS_FAIL("'%s': %s", good[i].value, gpumem_last_error());
        else if (opts.memory_fraction != good[i].fraction)
            HARNESS_FAIL("'%s': got %.17g, expected %.17g", good[i].value,
                         opts.memory_fraction, good[i].fraction);
    }
    /* far below what a double holds, and still not 0 ("no fraction") */
    char tiny[512] = "0.";
    memset(tiny + 2, '0', 400);
    strcpy(tiny + 402, "1");
    ASSERT_OK(load_with("GPUMEM_MEMORY_FRACTION", tiny, NULL));
    ASSERT_TRUE(opts.memory_fraction > 0 && opts.memory_fraction < 1e-300);
    ASSERT_STATUS(load_with("GPUMEM_MEMORY_FRACTION", "1.5", NULL),
                  GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_STREQ(gpumem_last_error(),
                 "GPUMEM_MEMORY_FRACTION: '1.5' is not a number in [0, 1]");
    static const char *const bad[] = {
        "-0.25", "nan",  "NaN", "inf",   "-inf", "",  " ",     "abc", "0.5x", "1.0001",
        "2",     "1e-1", "0,5", "0x0.8", "+0.5", ".", "0.5.5", "10",  "1.",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        EXPECT_BAD_ENV("GPUMEM_MEMORY_FRACTION", bad[i]);
}

/* ---------------------------------------------------- min system memory -- */

TEST(env_min_system_memory)
{
    const char *const vars[] = {"GPUMEM_MIN_SYSTEM_MEMORY_MB",
                                "TF_DEVICE_MIN_SYS_MEMORY_IN_MB"};
    for (size_t v = 0; v < 2; v++) {
        ASSERT_OK(load_with(vars[v], "300", NULL));
        ASSERT_TRUE(opts.min_system_memory_set);
        ASSERT_EQ(opts.min_system_memory_bytes, 300 * GPUMEM_MIB);
        ASSERT_OK(load_with(vars[v], "0", NULL));
        ASSERT_TRUE(opts.min_system_memory_set);
        ASSERT_EQ(opts.min_system_memory_bytes, 0);
        ASSERT_OK(load_with(vars[v], " 1024 ", NULL));
        ASSERT_EQ(opts.min_system_memory_bytes, GPUMEM_GIB);
        /* The largest value that fits: 2^44 - 1 MiB. */
        ASSERT_OK(load_with(vars[v], "17592186044415", NULL));
        ASSERT_EQ(opts.min_system_memory_bytes, UINT64_MAX - GPUMEM_MIB + 1);

        EXPECT_BAD_ENV(vars[v], "lots");
        ASSERT_CONTAINS(gpumem_last_error(), "whole number of MiB");
        EXPECT_BAD_ENV(vars[v], "12abc");
        EXPECT_BAD_ENV(vars[v], "-1");
        EXPECT_BAD_ENV(vars[v], "");
        EXPECT_BAD_ENV(vars[v], "1.5");
        EXPECT_BAD_ENV(vars[v], "512MiB");
        EXPECT_BAD_ENV(vars[v], "17592186044416"); /* 2^64 bytes */
        EXPECT_BAD_ENV(vars[v], "99999999999999999999999");
    }
    ASSERT_OK(load_with(NULL, NULL, NULL));
    ASSERT_FALSE(opts.min_system_memory_set);

    clear_env();
    setenv("GPUMEM_MIN_SYSTEM_MEMORY_MB", "100", 1);
    setenv("TF_DEVICE_MIN_SYS_MEMORY_IN_MB", "700", 1);
    ASSERT_OK(gpumem__options_load(NULL, &opts));
    ASSERT_EQ(opts.min_system_memory_bytes, 100 * GPUMEM_MIB);
    setenv("GPUMEM_MIN_SYSTEM_MEMORY_MB", "0", 1);
    ASSERT_OK(gpumem__options_load(NULL, &opts));
    ASSERT_TRUE(opts.min_system_memory_set);
    ASSERT_EQ(opts.min_system_memory_bytes, 0);
    clear_env();
}

/* --------------------------------------------------------- CUDA library -- */

TEST(env_cuda_library)
{
    ASSERT_OK(load_with("GPUMEM_CUDA_LIBRARY", "/opt/fake/libcuda.so.1", NULL));
    ASSERT_STREQ(opts.cuda_library, "/opt/fake/libcuda.so.1");
    ASSERT_STATUS(load_with("GPUMEM_CUDA_LIBRARY", "", NULL),
                  GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_STREQ(gpumem_last_error(),
                 "GPUMEM_CUDA_LIBRARY is empty: unset it to load libcuda.so.1");

    char path[sizeof opts.cuda_library + 1];
    memset(path, 'p', sizeof path - 1);
    path[0] = '/';
    path[sizeof path - 2] = '\0'; /* 1023 bytes: fits */
    ASSERT_OK(load_with("GPUMEM_CUDA_LIBRARY", path, NULL));
    ASSERT_EQ(strlen(opts.cuda_library), sizeof opts.cuda_library - 1);
    path[sizeof path - 2] = 'p';
    path[sizeof path - 1] = '\0'; /* 1024 bytes: does not */
    ASSERT_STATUS(load_with("GPUMEM_CUDA_LIBRARY", path, NULL),
                  GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(gpumem_last_error(), "GPUMEM_CUDA_LIBRARY");
    ASSERT_CONTAINS(gpumem_last_error(), "1024 bytes");
}

TEST(env_oom_snapshot)
{
    ASSERT_OK(load_with("GPUMEM_OOM_SNAPSHOT", "/tmp/oom.json", NULL));
    ASSERT_STREQ(opts.oom_snapshot, "/tmp/oom.json");
    ASSERT_OK(load_with("GPUMEM_OOM_SNAPSHOT", "", NULL));
    ASSERT_STREQ(opts.oom_snapshot, "");
    char path[sizeof opts.oom_snapshot + 1];
    memset(path, 'p', sizeof path - 1);
    path[sizeof path - 1] = '\0'; /* 1024 bytes: does not fit */
    ASSERT_STATUS(load_with("GPUMEM_OOM_SNAPSHOT", path, NULL),
                  GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(gpumem_last_error(), "GPUMEM_OOM_SNAPSHOT");
}

TEST(env_growth_trim)
{
    ASSERT_OK(load_with("GPUMEM_GROWTH_TRIM", "on", NULL));
    ASSERT_TRUE(opts.growth_trim);
    ASSERT_OK(load_with("GPUMEM_GROWTH_TRIM", "off", NULL));
    ASSERT_FALSE(opts.growth_trim);
    ASSERT_STATUS(load_with("GPUMEM_GROWTH_TRIM", "sometimes", NULL),
                  GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(gpumem_last_error(), "GPUMEM_GROWTH_TRIM");
}

TEST(env_growth_trim_window)
{
    ASSERT_OK(load_with(NULL, NULL, NULL));
    ASSERT_TRUE(opts.growth_trim_window == 1.0); /* the default */
    ASSERT_OK(load_with("GPUMEM_GROWTH_TRIM_WINDOW", "0.25", NULL));
    ASSERT_TRUE(opts.growth_trim_window == 0.25);
    ASSERT_OK(load_with("GPUMEM_GROWTH_TRIM_WINDOW", "0", NULL));
    ASSERT_TRUE(opts.growth_trim_window == 0.0);
    static const char *const bad[] = {"2", "-0.5", "a while", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ASSERT_STATUS(load_with("GPUMEM_GROWTH_TRIM_WINDOW", bad[i], NULL),
                      GPUMEM_ERR_INVALID_ARGUMENT);
        ASSERT_CONTAINS(gpumem_last_error(), "GPUMEM_GROWTH_TRIM_WINDOW");
    }
}

TEST(env_growth_idle_release)
{
    ASSERT_OK(load_with(NULL, NULL, NULL));
    ASSERT_EQ(opts.growth_idle_release_ms, 60000); /* the default */
    ASSERT_OK(load_with("GPUMEM_GROWTH_IDLE_RELEASE_MS", "0", NULL));
    ASSERT_EQ(opts.growth_idle_release_ms, 0); /* never */
    ASSERT_OK(load_with("GPUMEM_GROWTH_IDLE_RELEASE_MS", "86400000", NULL));
    ASSERT_EQ(opts.growth_idle_release_ms, 86400000);
    static const char *const bad[] = {"86400001", "1e3", "-1", "60 s", "", "1234567890"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ASSERT_STATUS(load_with("GPUMEM_GROWTH_IDLE_RELEASE_MS", bad[i], NULL),
                      GPUMEM_ERR_INVALID_ARGUMENT);
        ASSERT_CONTAINS(gpumem_last_error(), "GPUMEM_GROWTH_IDLE_RELEASE_MS");
        ASSERT_CONTAINS(gpumem_last_error(), "from 0 to 86400000");
    }
}

TEST(env_record_history)
{
    ASSERT_OK(load_with("GPUMEM_RECORD_HISTORY", "1000", NULL));
    ASSERT_EQ(opts.record_history, 1000);
    ASSERT_OK(load_with("GPUMEM_RECORD_HISTORY", "0", NULL));
    ASSERT_EQ(opts.record_history, 0);
    ASSERT_OK(load_with("GPUMEM_RECORD_HISTORY", "268435456", NULL));
    ASSERT_EQ(opts.record_history, GPUMEM_RECORD_HISTORY_MAX);
    static const char *const bad[] = {
        "", "-1", "12k", "1e6", " 5", "268435457", "99999999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ASSERT_STATUS(load_with("GPUMEM_RECORD_HISTORY", bad[i], NULL),
                      GPUMEM_ERR_INVALID_ARGUMENT);
        ASSERT_CONTAINS(gpumem_last_error(), "GPUMEM_RECORD_HISTORY");
        ASSERT_CONTAINS(gpumem_last_error(), "268435456");
    }
}

/* ------------------------------------------------- user and environment -- */

TEST(ignore_environment)
{
    clear_env();
    setenv("GPUMEM_BACKEND", "tpu", 1);
    setenv("GPUMEM_SIM_DEVICES", "12GB", 1);
    setenv("GPUMEM_MEMORY_FRACTION", "abc", 1);
    setenv("GPUMEM_FORCE_ALLOW_GROWTH", "maybe", 1);
    setenv("TF_FORCE_GPU_ALLOW_GROWTH", "maybe", 1);
    setenv("GPUMEM_MIN_SYSTEM_MEMORY_MB", "lots", 1);
    setenv("TF_DEVICE_MIN_SYS_MEMORY_IN_MB", "lots", 1);
    setenv("GPUMEM_CUDA_LIBRARY", "/nowhere/libcuda.so.1", 1);
    gpumem_options u;
    ASSERT_OK(gpumem_options_init(&u));
    ASSERT_STATUS(gpumem__options_load(&u, &opts), GPUMEM_ERR_INVALID_ARGUMENT);
    u.flags = GPUMEM_OPTIONS_IGNORE_ENVIRONMENT;
    ASSERT_OK(gpumem__options_load(&u, &opts));
    check_defaults(&opts);

    /* Good values are ignored too. */
    setenv("GPUMEM_BACKEND", "cuda", 1);
    setenv("GPUMEM_SIM_DEVICES", "1GiB,2GiB", 1);
    setenv("GPUMEM_MEMORY_FRACTION", "0.5", 1);
    setenv("GPUMEM_FORCE_ALLOW_GROWTH", "true", 1);
    setenv("TF_FORCE_GPU_ALLOW_GROWTH", "true", 1);
    setenv("GPUMEM_MIN_SYSTEM_MEMORY_MB", "100", 1);
    setenv("TF_DEVICE_MIN_SYS_MEMORY_IN_MB", "100", 1);
    ASSERT_OK(gpumem__options_load(&u, &opts));
    check_defaults(&opts);
    clear_env();
}

static void log_sink(void *user_data, int level, const char *message)
{
    (void)user_data;
    (void)level;
    (void)message;
}

TEST(user_fields_override_environment)
{
    clear_env();
    setenv("GPUMEM_BACKEND", "cuda", 1);
    setenv("GPUMEM_SIM_DEVICES", "1GiB,2GiB", 1);
    setenv("GPUMEM_MEMORY_FRACTION", "0.5", 1);
    gpumem_options u;
    ASSERT_OK(gpumem_options_init(&u));
    int token = 0;
    u.backend = GPUMEM_BACKEND_SIM;
    u.sim_devices = "A:3GiB";
    u.log = log_sink;
    u.log_user_data = &token;
    u.log_level = GPUMEM_LOG_DEBUG;
    ASSERT_OK(gpumem__options_load(&u, &opts));
    ASSERT_EQ(opts.backend, GPUMEM_BACKEND_SIM);
    ASSERT_EQ(opts.num_sim_devices, 1);
    ASSERT_STREQ(opts.sim_devices[0].model, "A");
    ASSERT_EQ(opts.sim_devices[0].total_bytes, 3 * GPUMEM_GIB);
    ASSERT_TRUE(opts.memory_fraction == 0.5); /* no user field: the variable counts */
    ASSERT_TRUE(opts.log == log_sink);
    ASSERT_TRUE(opts.log_user_data == &token);
    ASSERT_EQ(opts.log_level, GPUMEM_LOG_DEBUG);

    /* Zero fields take the environment. */
    u.backend = GPUMEM_BACKEND_FROM_ENV;
    u.sim_devices = NULL;
    ASSERT_OK(gpumem__options_load(&u, &opts));
    ASSERT_EQ(opts.backend, GPUMEM_BACKEND_CUDA);
    ASSERT_EQ(opts.num_sim_devices, 2);

    /* "" from the user: no GPUs, over the environment's two. */
    u.sim_devices = "";
    ASSERT_OK(gpumem__options_load(&u, &opts));
    ASSERT_EQ(opts.num_sim_devices, 0);

    /* A bad variable is an error even when a user field overrides it. */
    setenv("GPUMEM_BACKEND", "tpu", 1);
    u.backend = GPUMEM_BACKEND_SIM;
    ASSERT_STATUS(gpumem__options_load(&u, &opts), GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(gpumem_last_error(), "GPUMEM_BACKEND");

    /* A bad user field names the field, not a variable. */
    unsetenv("GPUMEM_BACKEND");
    u.sim_devices = "12GB";
    ASSERT_STATUS(gpumem__options_load(&u, &opts), GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(gpumem_last_error(), "gpumem_options.sim_devices");
    ASSERT_CONTAINS(gpumem_last_error(), "'12GB'");
    clear_env();
}

static void ignore_log(void *user_data, int level, const char *message)
{
    (void)user_data;
    (void)level;
    (void)message;
}

TEST(user_struct_validation)
{
    clear_env();
    gpumem_options u;
    ASSERT_OK(gpumem_options_init(&u));
    u.struct_size = 0;
    ASSERT_STATUS(gpumem__options_load(&u, &opts), GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(gpumem_last_error(), "struct_size");
    ASSERT_CONTAINS(gpumem_last_error(), "gpumem_options_init");
    u.struct_size = sizeof u - 1;
    ASSERT_STATUS(gpumem__options_load(&u, &opts), GPUMEM_ERR_INVALID_ARGUMENT);
    u.struct_size = sizeof u + 8;
    ASSERT_STATUS(gpumem__options_load(&u, &opts), GPUMEM_ERR_INVALID_ARGUMENT);

    const int32_t good_backends[] = {0, 1, 2, 3};
    for (size_t i = 0; i < 4; i++) {
        ASSERT_OK(gpumem_options_init(&u));
        u.flags = GPUMEM_OPTIONS_IGNORE_ENVIRONMENT;
        u.backend = good_backends[i];
        ASSERT_OK(gpumem__options_load(&u, &opts));
        ASSERT_EQ(opts.backend, i == 0 ? GPUMEM_BACKEND_AUTO : good_backends[i]);
    }
    const int32_t bad_backends[] = {-1, 4, 42, INT32_MIN, INT32_MAX};
    for (size_t i = 0; i < sizeof bad_backends / sizeof bad_backends[0]; i++) {
        u.backend = bad_backends[i];
        ASSERT_STATUS(gpumem__options_load(&u, &opts), GPUMEM_ERR_INVALID_ARGUMENT);
        ASSERT_CONTAINS(gpumem_last_error(), "backend");
    }

    ASSERT_OK(gpumem_options_init(&u));
    const uint32_t bad_flags[] = {0x8, 0xF, 0x80000000u, 0xFFFFFFFFu};
    for (size_t i = 0; i < sizeof bad_flags / sizeof bad_flags[0]; i++) {
        u.flags = bad_flags[i];
        ASSERT_STATUS(gpumem__options_load(&u, &opts), GPUMEM_ERR_INVALID_ARGUMENT);
        ASSERT_CONTAINS(gpumem_last_error(), "flags");
    }
    /* the trim flags, with the environment ignored: on by default and with the
     * flag, off with the other, which wins over the first */
    u.flags = GPUMEM_OPTIONS_TRIM_GROWTH | GPUMEM_OPTIONS_IGNORE_ENVIRONMENT;
    ASSERT_OK(gpumem__options_load(&u, &opts));
    ASSERT_TRUE(opts.growth_trim);
    u.flags = GPUMEM_OPTIONS_IGNORE_ENVIRONMENT;
    ASSERT_OK(gpumem__options_load(&u, &opts));
    ASSERT_TRUE(opts.growth_trim);
    u.flags = GPUMEM_OPTIONS_NO_TRIM_GROWTH | GPUMEM_OPTIONS_IGNORE_ENVIRONMENT;
    ASSERT_OK(gpumem__options_load(&u, &opts));
    ASSERT_FALSE(opts.growth_trim);
    u.flags = GPUMEM_OPTIONS_NO_TRIM_GROWTH | GPUMEM_OPTIONS_TRIM_GROWTH;
    ASSERT_OK(gpumem__options_load(&u, &opts));
    ASSERT_FALSE(opts.growth_trim);

    ASSERT_OK(gpumem_options_init(&u));
    u.flags = GPUMEM_OPTIONS_IGNORE_ENVIRONMENT;
    for (int32_t level = 0; level <= 3; level++) {
        u.log_level = level;
        u.log = NULL; /* a level without a callback: no log */
        ASSERT_OK(gpumem__options_load(&u, &opts));
        ASSERT_TRUE(opts.log == NULL);
        u.log = ignore_log;
        ASSERT_OK(gpumem__options_load(&u, &opts));
        ASSERT_EQ(opts.log_level, level);
        ASSERT_TRUE(opts.log == ignore_log);
    }
    u.log = NULL;
    const int32_t bad_levels[] = {-1, 4, 100};
    for (size_t i = 0; i < sizeof bad_levels / sizeof bad_levels[0]; i++) {
        u.log_level = bad_levels[i];
        ASSERT_STATUS(gpumem__options_load(&u, &opts), GPUMEM_ERR_INVALID_ARGUMENT);
        ASSERT_CONTAINS(gpumem_last_error(), "log_level");
    }
}

/* ----------------------------------------------------------------- sizes -- */

TEST(parse_size_good)
{
    static const struct {
        const char *text;
        uint64_t bytes;
    } good[] = {
        {"0", 0},
        {"4096", 4096},
        {"512MiB", 512 * GPUMEM_MIB},
        {"12 GiB", 12 * GPUMEM_GIB},
        {"1.5TiB", 3 * GPUMEM_TIB / 2},
        {"0.5 GiB", GPUMEM_GIB / 2},
        {"1B", 1},
        {"1 b", 1},
        {"1kib", GPUMEM_KIB},
        {"1KIB", GPUMEM_KIB},
        {"2mIb", 2 * GPUMEM_MIB},
        {"  7  ", 7},
        {"\t3 GiB\n", 3 * GPUMEM_GIB},
        {".5KiB", 512},
        {"1.5", 1},             /* decimals round down to bytes */
        {"0.1 KiB", 102},       /* 102.4 */
        {"0.3 GiB", 322122547}, /* 322122547.2 */
        {"1.999999999999999999999999 B", 1},
        {"0.0000000000001 TiB", 0},       /* 0.1099... bytes */
        {"0.000000000001 TiB", 1},        /* 1.099... bytes */
        {"17179869184", 16 * GPUMEM_GIB}, /* integers are exact, not through double */
        {"16GiB", 17179869184u},
        {"9007199254740993", UINT64_C(9007199254740993)}, /* 2^53 + 1 */
        {"18446744073709551615", UINT64_MAX},
        {"18446744073709551615 B", UINT64_MAX},
        {"16777215TiB", UINT64_MAX - GPUMEM_TIB + 1},
        {"00012GiB", 12 * GPUMEM_GIB},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        uint64_t got = 12345;
        gpumem_status s = gpumem__parse_size("test", good[i].text, &got);
        if (s != GPUMEM_OK)
            HARNESS_FAIL("'%s': %s", good[i].text, gpumem_last_error());
        else if (got != good[i].bytes)
            HARNESS_FAIL("'%s': got %" PRIu64 ", expected %" PRIu64, good[i].text, got,
                         good[i].bytes);
    }
    /* 16777215.9999999999 TiB: just below 2^64, exact. floor(0.9999999999 * 2^40)
     * = 2^40 - 110 (2^40 * 1e-10 = 109.95...). */
    uint64_t got = 0;
    ASSERT_OK(gpumem__parse_size("test", "16777215.9999999999TiB", &got));
    ASSERT_EQ(got, UINT64_MAX - GPUMEM_TIB + 1 + (GPUMEM_TIB - 110));
}

TEST(parse_size_bad)
{
    static const struct {
        const char *text, *needle;
    } bad[] = {
        {"", "empty"},
        {"   ", "empty"},
        {"-1", "negative"},
        {"-0", "negative"},
        {"-1GiB", "negative"},
        {"+5", "number"},
        {"GiB", "number"},
        {"abc", "number"},
        {"12 XiB", "unknown unit 'XiB'"},
        {"12PiB", "unknown unit"},
        {"12GB", "use GiB"},
        {"12 gb", "use GiB"},
        {"512MB", "use MiB"},
        {"4KB", "use KiB"},
        {"1TB", "use TiB"},
        {"12G", "use GiB"},
        {"12k", "use KiB"},
        {"1..5", "after the number"},
        {"1.5.5", "after the number"},
        {"1.", "after the number"},
        {"1. GiB", "after the number"},
        {"12GiB!", "after the number"},
        {"12 GiB 3", "after the number"},
        {"1e9", "after the number"},
        {"0x10", "after the number"},
        {"1,5GiB", "after the number"},
        {"18446744073709551616", "larger"},
        {"18446744073709551615.5 KiB", "larger"},
        {"16777216TiB", "larger"},
        {"16384 PiB", "unknown unit"},
        {"99999999999999999999999", "larger"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t got = 777;
        gpumem_status s = gpumem__parse_size("SOME_VAR", bad[i].text, &got);
        if (s != GPUMEM_ERR_INVALID_ARGUMENT) {
            HARNESS_FAIL("'%s': got %s (%" PRIu64 "), expected INVALID_ARGUMENT",
                         bad[i].text, gpumem_status_name(s), got);
            continue;
        }
        char quoted[128];
        snprintf(quoted, sizeof quoted, "'%s'", bad[i].text);
        ASSERT_CONTAINS(gpumem_last_error(), "SOME_VAR");
        ASSERT_CONTAINS(gpumem_last_error(), quoted);
        ASSERT_CONTAINS(gpumem_last_error(), bad[i].needle);
        ASSERT_EQ(got, 777); /* *out untouched on failure */
    }
}

/* ------------------------------------------------------ simulated devices -- */

static struct sim_device_spec specs[GPUMEM_MAX_SIM_DEVICES + 8];

static gpumem_status parse(const char *text, size_t *count)
{
    return gpumem__parse_sim_devices("GPUMEM_SIM_DEVICES", text, specs,
                                     GPUMEM_MAX_SIM_DEVICES, count);
}

TEST(sim_devices_good)
{
    size_t n = 99;
    ASSERT_OK(parse("TITAN X:12GiB:6.1,A100:40GiB:8.0", &n));
    ASSERT_EQ(n, 2);
    ASSERT_STREQ(specs[0].model, "TITAN X");
    ASSERT_EQ(specs[0].total_bytes, 12 * GPUMEM_GIB);
    ASSERT_EQ(specs[0].cc_major, 6);
    ASSERT_EQ(specs[0].cc_minor, 1);
    ASSERT_STREQ(specs[1].model, "A100");
    ASSERT_EQ(specs[1].total_bytes, 40 * GPUMEM_GIB);
    ASSERT_EQ(specs[1].cc_major, 8);
    ASSERT_EQ(specs[1].cc_minor, 0);

    /* Defaults: model and compute capability 8.0. */
    ASSERT_OK(parse("2GiB,H100:80GiB", &n));
    ASSERT_EQ(n, 2);
    ASSERT_STREQ(specs[0].model, "gpumem simulated GPU");
    ASSERT_EQ(specs[0].total_bytes, 2 * GPUMEM_GIB);
    ASSERT_EQ(specs[0].cc_major, 8);
    ASSERT_EQ(specs[0].cc_minor, 0);
    ASSERT_STREQ(specs[1].model, "H100");
    ASSERT_EQ(specs[1].cc_major, 8);

    /* Whitespace around every field; inner spaces of a model stay. */
    ASSERT_OK(parse("  NVIDIA  GeForce RTX 3090 \t:  24 GiB :  8.6  , 4096MiB ", &n));
    ASSERT_EQ(n, 2);
    ASSERT_STREQ(specs[0].model, "NVIDIA  GeForce RTX 3090");
    ASSERT_EQ(specs[0].total_bytes, 24 * GPUMEM_GIB);
    ASSERT_EQ(specs[0].cc_major, 8);
    ASSERT_EQ(specs[0].cc_minor, 6);
    ASSERT_EQ(specs[1].total_bytes, 4 * GPUMEM_GIB);

    ASSERT_OK(parse("X:1GiB:10.0,Y:1GiB:99.9,Z:1GiB:1.0", &n));
    ASSERT_EQ(n, 3);
    ASSERT_EQ(specs[0].cc_major, 10);
    ASSERT_EQ(specs[1].cc_major, 99);
    ASSERT_EQ(specs[1].cc_minor, 9);
    ASSERT_EQ(specs[2].cc_major, 1);

    /* Bounds: 256 bytes (one granule of the arena) and 64 TiB; a 127-character
     * model. */
    ASSERT_OK(parse("256,64TiB", &n));
    ASSERT_EQ(specs[0].total_bytes, 256);
    ASSERT_EQ(specs[1].total_bytes, 64 * GPUMEM_TIB);
    char text[256];
    memset(text, 'm', 127);
    snprintf(text + 127, sizeof text - 127, ":1GiB");
    ASSERT_OK(parse(text, &n));
    ASSERT_EQ(strlen(specs[0].model), 127);

    /* Empty or blank text: zero GPUs. */
    n = 99;
    ASSERT_OK(parse("", &n));
    ASSERT_EQ(n, 0);
    n = 99;
    ASSERT_OK(parse("  \t", &n));
    ASSERT_EQ(n, 0);
}

TEST(sim_devices_limit)
{
    char text[64 * 8 + 16];
    size_t len = 0;
    for (int i = 0; i < GPUMEM_MAX_SIM_DEVICES; i++)
        len += (size_t)snprintf(text + len, sizeof text - len, "%s%dMiB", i ? "," : "",
                                i + 1);
    size_t n = 0;
    ASSERT_OK(parse(text, &n));
    ASSERT_EQ(n, GPUMEM_MAX_SIM_DEVICES);
    ASSERT_EQ(specs[63].total_bytes, 64 * GPUMEM_MIB);
    snprintf(text + len, sizeof text - len, ",65MiB");
    ASSERT_STATUS(parse(text, &n), GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(gpumem_last_error(), "entry 65");
    ASSERT_CONTAINS(gpumem_last_error(), "at most 64");

    /* The caller's capacity counts, not only the global maximum. */
    ASSERT_STATUS(gpumem__parse_sim_devices("what", "1GiB,2GiB,3GiB", specs, 2, &n),
                  GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(gpumem_last_error(), "entry 3 (position 10)");
    ASSERT_OK(gpumem__parse_sim_devices("what", "1GiB,2GiB", specs, 2, &n));
    ASSERT_EQ(n, 2);
}

TEST(sim_devices_bad)
{
    static const struct {
        const char *text, *needle;
    } bad[] = {
        {"12GiB,,4GiB", "entry 2 (position 6) is empty"},
        {"12GiB,", "entry 2 (position 6) is empty"},
        {",12GiB", "entry 1 (position 0) is empty"},
        {"12GiB, ,4GiB", "entry 2 (position 6) is empty"},
        {"12GB", "use GiB"},
        {"lots", "entry 1"},
        {"A:12GiB,B:lots", "entry 2 (position 10)"},
        {"TITAN X:12GiB:six", "compute capability 'six'"},
        {"TITAN X:12GiB:six", "(position 14)"},
        {"X:1GiB:x.y", "compute capability"},
        {"X:1GiB:8", "MAJOR.MINOR"},
        {"X:1GiB:8.", "MAJOR.MINOR"},
        {"X:1GiB:.5", "MAJOR.MINOR"},
        {"X:1GiB:0.0", "MAJOR.MINOR"},
        {"X:1GiB:100.0", "MAJOR.MINOR"},
        {"X:1GiB:8.10", "MAJOR.MINOR"},
        {"X:1GiB:-8.0", "MAJOR.MINOR"},
        {"X:1GiB:", "MAJOR.MINOR"},
        {"X:1GiB:8.0:extra", "too many ':'"},
        {":4GiB", "model name"},
        {"  :4GiB", "model name"},
        {"X:", "size '': it is empty"},
        {"X: :8.0", "empty"},
        {"0", "zero"},
        {"X:0GiB", "zero"},
        {"0.1", "zero"},
        {"255", "below the smallest simulated GPU, 256 B"},
        {"X:100B", "below the smallest"},
        {"1GiB:8.0", "size '8.0' is below"}, /* a model called 1GiB, of 8 bytes */
        {"65TiB", "64 TiB"},
        {"64.5TiB", "64 TiB"},
        {"-1GiB", "negative"},
        {"X:1GiB;Y:1GiB", "after the number"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t n = 99;
        gpumem_status s = parse(bad[i].text, &n);
        if (s != GPUMEM_ERR_INVALID_ARGUMENT) {
            HARNESS_FAIL("'%s': got %s, expected INVALID_ARGUMENT", bad[i].text,
                         gpumem_status_name(s));
            continue;
        }
        char quoted[160];
        snprintf(quoted, sizeof quoted, "'%s'", bad[i].text);
        ASSERT_CONTAINS(gpumem_last_error(), "GPUMEM_SIM_DEVICES");
        ASSERT_CONTAINS(gpumem_last_error(), quoted);
        ASSERT_CONTAINS(gpumem_last_error(), "entry");
        ASSERT_CONTAINS(gpumem_last_error(), "position");
        ASSERT_CONTAINS(gpumem_last_error(), bad[i].needle);
        ASSERT_EQ(n, 99); /* *count untouched on failure */
    }
    /* 128-character model. */
    char text[256];
    memset(text, 'm', 128);
    snprintf(text + 128, sizeof text - 128, ":1GiB");
    size_t n = 0;
    ASSERT_STATUS(parse(text, &n), GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(gpumem_last_error(), "at most 127");
}

/* ------------------------------------------------------------ long values -- */

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* A message that was cut short at GPUMEM_ERROR_BUF ends in "..." at its limit. */
#define ASSERT_WHOLE_MESSAGE()                                                           \
    ASSERT_LE(strlen(gpumem_last_error()), (size_t)GPUMEM_ERROR_BUF - 2)

/* Every variable the library reads, in both spellings, refuses a 2,000-character
 * value with a message that quotes it shortened (start ... end) and is whole. */
TEST(long_values_quoted_short)
{
    static char value[2048];
    snprintf(value, sizeof value, "BEGIN");
    memset(value + 5, 'x', 2000);
    snprintf(value + 2005, sizeof value - 2005, "END");
    char quoted[GPUMEM_QUOTE_BUF];
    gpumem__quote(value, quoted, sizeof quoted);
    ASSERT_CONTAINS(quoted, " ... ");
    ASSERT_TRUE(strlen(quoted) < 100);
    for (size_t i = 0; i < gpumem__option_var_count(); i++) {
        const struct option_var *v = gpumem__option_var(i);
        if (v->reader != GPUMEM_READ_BY_LIBRARY)
            continue;
        const char *const names[] = {v->name, v->alias};
        for (size_t k = 0; k < 2 && names[k]; k++) {
            ASSERT_STATUS(load_with(names[k], value, NULL), GPUMEM_ERR_INVALID_ARGUMENT);
            ASSERT_CONTAINS(gpumem_last_error(), names[k]);
            ASSERT_CONTAINS(gpumem_last_error(), quoted);
            ASSERT_WHOLE_MESSAGE();
        }
    }
}

/* The two cases: the reason after a long value is whole. */
TEST(long_values_keep_the_reason)
{
    static char text[1024];
    size_t len = 0;
    for (int i = 0; i < 100; i++)
        len += (size_t)snprintf(text + len, sizeof text - len, "%s%dMiB", i ? "," : "",
                                i + 1);
    ASSERT_STATUS(load_with("GPUMEM_SIM_DEVICES", text, NULL),
                  GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(gpumem_last_error(), "GPUMEM_SIM_DEVICES: '1MiB,2MiB,");
    ASSERT_CONTAINS(gpumem_last_error(), " ... ");
    ASSERT_CONTAINS(gpumem_last_error(), ",100MiB': entry 65 (position ");
    ASSERT_TRUE(
        ends_with(gpumem_last_error(), "is one too many; at most 64 simulated devices"));

    /* The same list in gpumem_options.sim_devices. */
    gpumem_options u;
    ASSERT_OK(gpumem_options_init(&u));
    u.flags = GPUMEM_OPTIONS_IGNORE_ENVIRONMENT;
    u.sim_devices = text;
    ASSERT_STATUS(gpumem__options_load(&u, &opts), GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(gpumem_last_error(), "gpumem_options.sim_devices: '1MiB,");
    ASSERT_TRUE(ends_with(gpumem_last_error(), "at most 64 simulated devices"));

    static char level[2001];
    memset(level, 'v', 2000);
    ASSERT_STATUS(load_with("GPUMEM_LOG_LEVEL", level, NULL),
                  GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_TRUE(ends_with(gpumem_last_error(),
                          "' is not one of off, error, warning, info, debug"));
    ASSERT_WHOLE_MESSAGE();

    /* A long field inside a short list: both are quoted short, the reason whole. */
    static char sizes[512];
    memset(sizes, '7', 300);
    snprintf(sizes + 300, sizeof sizes - 300, "GiB");
    snprintf(text, sizeof text, "A:1GiB,B:%s:8.0", sizes);
    ASSERT_STATUS(load_with("GPUMEM_SIM_DEVICES", text, NULL),
                  GPUMEM_ERR_INVALID_ARGUMENT);
    char quoted[GPUMEM_QUOTE_BUF], expected[GPUMEM_ERROR_BUF];
    snprintf(expected, sizeof expected, "entry 2 (position 9): size %s: it is larger",
             gpumem__quote(sizes, quoted, sizeof quoted));
    ASSERT_CONTAINS(gpumem_last_error(), expected);
    ASSERT_TRUE(ends_with(gpumem_last_error(), "than 18446744073709551615 bytes"));
    ASSERT_WHOLE_MESSAGE();

    /* A model name too long is counted, not quoted. */
    static char model[2048];
    memset(model, 'm', 1500);
    snprintf(model + 1500, sizeof model - 1500, ":1GiB");
    ASSERT_STATUS(load_with("GPUMEM_SIM_DEVICES", model, NULL),
                  GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_TRUE(ends_with(gpumem_last_error(),
                          "the model name is 1500 characters long; at most 127"));
}

/* ------------------------------------------------------ table of variables -- */

TEST(option_table)
{
    size_t n = gpumem__option_var_count();
    ASSERT_TRUE(n >= 10);
    ASSERT_TRUE(gpumem__option_var(n) == NULL);
    size_t library = 0;
    for (size_t i = 0; i < n; i++) {
        const struct option_var *v = gpumem__option_var(i);
        ASSERT_TRUE(v != NULL && v->name != NULL && v->help != NULL && v->help[0]);
        if (v == NULL || v->name == NULL || v->help == NULL)
            continue;
        /* A row of README's table: one line, no cell separator. */
        if (strchr(v->help, '|') || strchr(v->help, '\n'))
            HARNESS_FAIL("%s: its help has '|' or a newline", v->name);
        if (v->reader == GPUMEM_READ_BY_LIBRARY) {
            library++;
            if (v->parse == NULL || v->field_size == 0 ||
                v->field + v->field_size > sizeof(struct options))
                HARNESS_FAIL("%s: read by the library without a parser or a field",
                             v->name);
        } else if (v->parse != NULL || v->field_size != 0) {
            HARNESS_FAIL("%s: read elsewhere, with a parser or a field", v->name);
        }
        /* No spelling twice. */
        for (size_t j = 0; j < i; j++) {
            const struct option_var *w = gpumem__option_var(j);
            const char *const mine[] = {v->name, v->alias};
            const char *const theirs[] = {w->name, w->alias};
            for (size_t a = 0; a < 2; a++)
                for (size_t b = 0; b < 2; b++)
                    if (mine[a] && theirs[b] && strcmp(mine[a], theirs[b]) == 0)
                        HARNESS_FAIL("%s is in the table twice", mine[a]);
        }
    }
    ASSERT_EQ(library, 18);
    /* The spellings the library's tests and messages rely on. */
    static const char *const known[] = {
        "GPUMEM_BACKEND",         "GPUMEM_SIM_DEVICES",
        "GPUMEM_SIM_MACHINE",     "GPUMEM_FORCE_ALLOW_GROWTH",
        "GPUMEM_MEMORY_FRACTION", "GPUMEM_MIN_SYSTEM_MEMORY_MB",
        "GPUMEM_CUDA_VMM",        "GPUMEM_LOG_LEVEL",
        "GPUMEM_CUDA_LIBRARY",    "GPUMEM_OOM_SNAPSHOT",
        "GPUMEM_LEDGER",          "GPUMEM_LEDGER_DIR",
        "GPUMEM_SHARE_WAIT_MS",   "GPUMEM_SHARE_GIVE",
        "GPUMEM_GROWTH_TRIM",     "GPUMEM_GROWTH_TRIM_WINDOW",
        "GPUMEM_RECORD_HISTORY",  "GPUMEM_LIBRARY",
        "CUDA_VISIBLE_DEVICES",   "GPUMEM_GROWTH_IDLE_RELEASE_MS",
    };
    for (size_t k = 0; k < sizeof known / sizeof known[0]; k++) {
        bool found = false;
        for (size_t i = 0; i < n; i++)
            found = found || strcmp(gpumem__option_var(i)->name, known[k]) == 0;
        if (!found)
            HARNESS_FAIL("%s is not in the table", known[k]);
    }
}

/* One row of README's variable table for v: "| `NAME` | help |", with " / `ALIAS`"
 * after the name when it has one. */
static void readme_row(const struct option_var *v, char *buf, size_t size)
{
    if (v->alias)
        snprintf(buf, size, "| `%s` / `%s` | %s |", v->name, v->alias, v->help);
    else
        snprintf(buf, size, "| `%s` | %s |", v->name, v->help);
}

/* The variable cell of a row ("`NAME` / `ALIAS`"), into buf. */
static void row_variable(const char *row, char *buf, size_t size)
{
    const char *start = row + 2, *end = strstr(start, " | ");
    size_t n = end ? (size_t)(end - start) : strlen(start);
    snprintf(buf, size, "%.*s", (int)n, start);
}

static const char *readme_path;

/* README's table under "## Environment variables" is the table's rows, in its
 * order: every variable of the table is there with its help text, and README
 * has no variable the table lacks. */
TEST(readme)
{
    FILE *f = fopen(readme_path, "r");
    if (f == NULL) {
        HARNESS_FAIL("cannot open %s", readme_path);
        return;
    }
    static char rows[32][4096];
    size_t nrows = 0;
    char line[4096];
    enum { BEFORE, SECTION, HEADER, ROWS, DONE } at = BEFORE;
    while (at != DONE && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        if (at == BEFORE && strcmp(line, "## Environment variables") == 0)
            at = SECTION;
        else if (at == SECTION && strcmp(line, "| variable | meaning |") == 0)
            at = HEADER;
        else if (at == HEADER)
            at = ROWS; /* |---|---| */
        else if (at == ROWS && strncmp(line, "| ", 2) != 0)
            at = DONE;
        else if (at == ROWS && nrows == sizeof rows / sizeof rows[0])
            HARNESS_FAIL("README's table has more than %zu rows", nrows);
        else if (at == ROWS)
            snprintf(rows[nrows++], sizeof rows[0], "%s", line);
    }
    fclose(f);
    if (nrows == 0) {
        HARNESS_FAIL("%s: no variable table under '## Environment variables'",
                     readme_path);
        return;
    }

    char want[4096], var[256], cell[256];
    size_t n = gpumem__option_var_count();
    for (size_t i = 0; i < n; i++) {
        readme_row(gpumem__option_var(i), want, sizeof want);
        row_variable(want, var, sizeof var);
        size_t r = 0;
        while (r < nrows && (row_variable(rows[r], cell, sizeof cell), strcmp(cell, var)))
            r++;
        if (r == nrows)
            HARNESS_FAIL("README's table has no row for %s; expected\n%s", var, want);
        else if (strcmp(rows[r], want) != 0)
            HARNESS_FAIL("README's row for %s differs from the table's help:\n"
                         "README: %s\ntable:  %s",
                         var, rows[r], want);
        else if (r != i)
            HARNESS_FAIL("README's row for %s is row %zu; the table has it at %zu", var,
                         r + 1, i + 1);
    }
    for (size_t r = 0; r < nrows; r++) {
        row_variable(rows[r], cell, sizeof cell);
        bool known = false;
        for (size_t i = 0; i < n && !known; i++) {
            readme_row(gpumem__option_var(i), want, sizeof want);
            row_variable(want, var, sizeof var);
            known = strcmp(cell, var) == 0;
        }
        if (!known)
            HARNESS_FAIL("README's table has %s, which lib/option_vars.h lacks", cell);
    }
}

/* ------------------------------------------------------------------ log -- */

struct log_record {
    int calls;
    int level;
    char message[256];
};

static void log_record_fn(void *user_data, int level, const char *message)
{
    struct log_record *r = user_data;
    r->calls++;
    r->level = level;
    snprintf(r->message, sizeof r->message, "%s", message);
}

TEST(log_levels)
{
    struct log_record rec = {0, -1, ""};
    gpumem_options u;
    ASSERT_OK(gpumem_options_init(&u));
    u.flags = GPUMEM_OPTIONS_IGNORE_ENVIRONMENT;
    u.log = log_record_fn;
    u.log_user_data = &rec;
    u.log_level = GPUMEM_LOG_INFO;
    ASSERT_OK(gpumem__options_load(&u, &opts));

    gpumem__log(&opts, GPUMEM_LOG_WARNING, "pool %d: %s", 3, "grew");
    ASSERT_EQ(rec.calls, 1);
    ASSERT_EQ(rec.level, GPUMEM_LOG_WARNING);
    ASSERT_STREQ(rec.message, "pool 3: grew");
    gpumem__log(&opts, GPUMEM_LOG_INFO, "info");
    ASSERT_EQ(rec.calls, 2);
    ASSERT_STREQ(rec.message, "info");
    gpumem__log(&opts, GPUMEM_LOG_DEBUG, "too detailed");
    ASSERT_EQ(rec.calls, 2);
    gpumem__log(&opts, GPUMEM_LOG_ERROR, "error");
    ASSERT_EQ(rec.calls, 3);

    /* Default level: errors only. */
    u.log_level = 0;
    ASSERT_OK(gpumem__options_load(&u, &opts));
    gpumem__log(&opts, GPUMEM_LOG_WARNING, "warning");
    ASSERT_EQ(rec.calls, 3);
    gpumem__log(&opts, GPUMEM_LOG_ERROR, "error %s", "again");
    ASSERT_EQ(rec.calls, 4);
    ASSERT_STREQ(rec.message, "error again");

    /* No callback, or no options: nothing happens. */
    u.log = NULL;
    ASSERT_OK(gpumem__options_load(&u, &opts));
    gpumem__log(&opts, GPUMEM_LOG_ERROR, "dropped");
    gpumem__log(NULL, GPUMEM_LOG_ERROR, "dropped");
    ASSERT_EQ(rec.calls, 4);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "readme") == 0) {
        readme_path = argv[2];
        RUN(readme);
        HARNESS_EXIT();
    }
    if (argc == 2 && strcmp(argv[1], "readme-rows") == 0) {
        char row[4096];
        for (size_t i = 0; i < gpumem__option_var_count(); i++) {
            readme_row(gpumem__option_var(i), row, sizeof row);
            printf("%s\n", row);
        }
        return 0;
    }
    RUN(options_init);
    RUN(defaults);
    RUN(env_backend);
    RUN(env_sim_devices);
    RUN(env_force_growth);
    RUN(growth_precedence);
    RUN(env_memory_fraction);
    RUN(env_min_system_memory);
    RUN(env_cuda_library);
    RUN(env_oom_snapshot);
    RUN(env_growth_trim);
    RUN(env_growth_trim_window);
    RUN(env_growth_idle_release);
    RUN(env_record_history);
    RUN(ignore_environment);
    RUN(user_fields_override_environment);
    RUN(user_struct_validation);
    RUN(parse_size_good);
    RUN(parse_size_bad);
    RUN(sim_devices_good);
    RUN(sim_devices_limit);
    RUN(sim_devices_bad);
    RUN(long_values_quoted_short);
    RUN(long_values_keep_the_reason);
    RUN(option_table);
    RUN(log_levels);
    HARNESS_EXIT();
}
