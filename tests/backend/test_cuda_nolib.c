/* No usable driver, through the public API: a missing library, one that is not
 * a driver, NVIDIA's stub libcuda (argv[1] when meson found a toolkit; its cuInit
 * always fails) and the default libcuda.so.1 on a machine without one. cuda fails
 * with GPUMEM_ERR_BACKEND and one line, auto simulates and logs why, and
 * libgpumem itself never maps libcuda. */
#include "gpumem.h"
#include "harness.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char log_text[8192];

static void keep_log(void *user, int level, const char *message)
{
    (void)user;
    size_t n = strlen(log_text);
    snprintf(log_text + n, sizeof log_text - n, "[%d] %s\n", level, message);
}

static gpumem_status create(int kind, gpumem_runtime **rt)
{
    gpumem_options o;
    gpumem_options_init(&o);
    o.backend = kind;
    o.sim_devices = "gpumem simulated GPU:2GiB";
    o.log = keep_log;
    o.log_level = GPUMEM_LOG_INFO;
    log_text[0] = '\0';
    *rt = NULL;
    return gpumem_runtime_create(&o, rt);
}

/* With GPUMEM_CUDA_LIBRARY=library (NULL: unset), the cuda backend fails with a
 * message that contains `why`. */
static void no_driver_with(const char *library, const char *why)
{
    if (library)
        setenv("GPUMEM_CUDA_LIBRARY", library, 1);
    else
        unsetenv("GPUMEM_CUDA_LIBRARY");
    gpumem_runtime *rt;
    ASSERT_STATUS(create(GPUMEM_BACKEND_CUDA, &rt), GPUMEM_ERR_BACKEND);
    ASSERT_TRUE(rt == NULL);
    ASSERT_CONTAINS(gpumem_last_error(),
                    "gpumem_runtime_create: the CUDA backend (gpumem_options.backend = "
                    "GPUMEM_BACKEND_CUDA) is not available: ");
    ASSERT_CONTAINS(gpumem_last_error(), why);
    ASSERT_TRUE(strchr(gpumem_last_error(), '\n') == NULL);
    printf("     cuda: %s\n", gpumem_last_error());
}

/* A library the user named that does not load, or is not a driver: a bad value,
 * which fails auto too (it does not quietly simulate GPUs). */
static void bad_library(const char *library, const char *why)
{
    no_driver_with(library, why);
    gpumem_runtime *rt;
    ASSERT_STATUS(create(GPUMEM_BACKEND_AUTO, &rt), GPUMEM_ERR_BACKEND);
    ASSERT_TRUE(rt == NULL);
    ASSERT_CONTAINS(gpumem_last_error(), "GPUMEM_CUDA_LIBRARY: ");
    ASSERT_CONTAINS(gpumem_last_error(), why);
    ASSERT_TRUE(strstr(log_text, "using simulated GPUs") == NULL);
}

/* No driver on this machine (GPUMEM_CUDA_LIBRARY=library, NULL: unset): cuda
 * fails with a message that contains `why`, auto simulates and logs it. */
static void no_cuda_with(const char *library, const char *why)
{
    no_driver_with(library, why);
    gpumem_runtime *rt;
    ASSERT_OK(create(GPUMEM_BACKEND_AUTO, &rt));
    if (!rt)
        return;
    ASSERT_CONTAINS(log_text, "[2] gpumem: no CUDA (");
    ASSERT_CONTAINS(log_text, why);
    ASSERT_CONTAINS(log_text, "using simulated GPUs");
    gpumem_physical_device d = GPUMEM_STRUCT_INIT(gpumem_physical_device);
    size_t n = 0;
    ASSERT_OK(gpumem_list_physical_devices(rt, &d, 1, &n));
    ASSERT_EQ(n, 1);
    ASSERT_STREQ(d.model, "gpumem simulated GPU");
    void *p = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, 4096, &p));
    memset(p, 1, 4096); /* simulated memory is host memory */
    ASSERT_OK(gpumem_free(rt, p));
    gpumem_runtime_destroy(rt);
}

/* true when a file whose name contains "libcuda" is mapped into this process. */
static bool libcuda_mapped(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return false;
    char line[1024];
    bool found = false;
    while (fgets(line, sizeof line, f))
        found = found || strstr(line, "libcuda") != NULL;
    fclose(f);
    return found;
}

static const char *stub_library;

TEST(libgpumem_does_not_load_libcuda) { ASSERT_FALSE(libcuda_mapped()); }

TEST(a_missing_library)
{
    bad_library("/nonexistent/libcuda.so.1",
                "cannot load the CUDA driver library '/nonexistent/libcuda.so.1': "
                "/nonexistent/libcuda.so.1: cannot open shared object file");
    ASSERT_FALSE(libcuda_mapped());
}

TEST(a_library_that_is_not_a_driver)
{
    bad_library("libm.so.6",
                "the CUDA driver library 'libm.so.6' has no entry point cuInit");
}

TEST(the_toolkits_stub_library)
{
    if (!stub_library) {
        printf("     (no toolkit stub libcuda found at configure time: skipped)\n");
        return;
    }
    /* Every entry point resolves in NVIDIA's own export table; its cuInit then
     * says it is a stub, and so does cuGetErrorName (hence the number). */
    no_cuda_with(stub_library, "cuInit(0) failed: CUresult 34");
    ASSERT_FALSE(libcuda_mapped()); /* unloaded again */
}

TEST(the_default_library_on_a_machine_without_a_driver)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h) {
        dlclose(h);
        printf("     (this machine has libcuda.so.1: skipped)\n");
        return;
    }
    no_cuda_with(NULL, "cannot load the CUDA driver library 'libcuda.so.1': ");
}

TEST(the_environment_selects_cuda_for_the_default_options)
{
    setenv("GPUMEM_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1);
    setenv("GPUMEM_BACKEND", "cuda", 1);
    gpumem_runtime *rt = NULL;
    ASSERT_STATUS(gpumem_runtime_create(NULL, &rt), GPUMEM_ERR_BACKEND);
    ASSERT_CONTAINS(gpumem_last_error(), "the CUDA backend (GPUMEM_BACKEND=cuda) ");
    ASSERT_CONTAINS(gpumem_last_error(), "/nonexistent/libcuda.so.1");
    setenv("GPUMEM_BACKEND", "sim", 1);
    ASSERT_OK(gpumem_runtime_create(NULL, &rt));
    gpumem_runtime_destroy(rt);
    unsetenv("GPUMEM_BACKEND");
}

int main(int argc, char **argv)
{
    stub_library = argc > 1 && argv[1][0] ? argv[1] : NULL;
    unsetenv("GPUMEM_BACKEND");
    RUN(libgpumem_does_not_load_libcuda);
    RUN(a_missing_library);
    RUN(a_library_that_is_not_a_driver);
    RUN(the_toolkits_stub_library);
    RUN(the_default_library_on_a_machine_without_a_driver);
    RUN(the_environment_selects_cuda_for_the_default_options);
    HARNESS_EXIT();
}
