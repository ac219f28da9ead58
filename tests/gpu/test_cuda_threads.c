/* What docs/bench.md's figures for the ledger's cost rest on (suite 'gpu'): a
 * process that uses the real CUDA driver has threads of the driver's own once a
 * context exists, before gpumem starts any (a limited pool starts no give-back
 * thread), so glibc's cheaper one-thread mutexes never apply under CUDA, and the
 * give-back thread changes nothing there. Counts /proc/self/task. Exits 77
 * (skipped) where there is no driver or no GPU. */
#include "gpumem.h"
#include "harness.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MiB ((uint64_t)1 << 20)

static int thread_count(void)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    if (!d)
        return -1;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

TEST(a_cuda_process_has_the_drivers_threads)
{
    ASSERT_EQ(thread_count(), 1);
    gpumem_options o;
    gpumem_options_init(&o);
    o.backend = GPUMEM_BACKEND_CUDA;
    o.flags = GPUMEM_OPTIONS_IGNORE_ENVIRONMENT;
    gpumem_runtime *rt = NULL;
    if (gpumem_runtime_create(&o, &rt) != GPUMEM_OK) {
        printf("no usable CUDA GPU: %s: skipped (it runs on a machine with an NVIDIA GPU "
               "and its driver)\n",
               gpumem_last_error());
        exit(77);
    }
    gpumem_logical_device_config cfg = GPUMEM_LOGICAL_DEVICE_LIMIT(64 * MiB);
    void *p = NULL;
    size_t n = 0;
    if (gpumem_list_physical_devices(rt, NULL, 0, &n) != GPUMEM_OK || n == 0 ||
        gpumem_set_logical_device_configuration(rt, 0, &cfg, 1) != GPUMEM_OK ||
        gpumem_malloc(rt, 0, MiB, &p) != GPUMEM_OK) {
        printf("no usable CUDA GPU: %s: skipped (it runs on a machine with an NVIDIA GPU "
               "and its driver)\n",
               gpumem_last_error());
        gpumem_runtime_destroy(rt);
        exit(77);
    }
    int threads = thread_count();
    printf("threads with a CUDA context and a limited pool: %d\n", threads);
    ASSERT_TRUE(threads > 1);
    ASSERT_OK(gpumem_free(rt, p));
    gpumem_runtime_destroy(rt);
}

int main(void)
{
    RUN(a_cuda_process_has_the_drivers_threads);
    HARNESS_EXIT();
}
