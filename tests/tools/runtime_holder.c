/* A gpumem process for the gpumem-smi tests: initializes a runtime from the
 * environment, allocates on logical device 0 the sizes given as arguments (in
 * MiB; "-N" frees the N-th allocation made so far, 1-based), prints one line
 * "ready" followed by, for each logical device, its gpumem_get_memory_info as
 * "name limit reserved in_use peak", then waits (calling nothing) until its
 * standard input ends. usage: runtime_holder [MIB | -N]... */
#include "gpumem.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    void *ptrs[64] = {0};
    int n = 0;
    gpumem_status s = gpumem_initialize(NULL);
    for (int i = 1; s == GPUMEM_OK && i < argc && n < 64; i++) {
        long v = strtol(argv[i], NULL, 10);
        if (v < 0 && -v <= n)
            s = gpumem_free(NULL, ptrs[-v - 1]);
        else if (v > 0)
            s = gpumem_malloc(NULL, 0, (uint64_t)v << 20, &ptrs[n++]);
    }
    if (s != GPUMEM_OK) {
        fprintf(stderr, "runtime_holder: %s\n", gpumem_last_error());
        return 1;
    }
    gpumem_logical_device devs[8];
    for (size_t i = 0; i < 8; i++)
        devs[i].struct_size = (uint32_t)sizeof devs[i];
    size_t count = 0;
    if (gpumem_list_logical_devices(NULL, devs, 8, &count) != GPUMEM_OK)
        return 1;
    printf("ready");
    for (size_t i = 0; i < count && i < 8; i++) {
        gpumem_memory_info m = GPUMEM_STRUCT_INIT(gpumem_memory_info);
        if (gpumem_get_memory_info(NULL, (int)i, &m) != GPUMEM_OK)
            return 1;
        printf(" %s %llu %llu %llu %llu", devs[i].name, (unsigned long long)m.limit_bytes,
               (unsigned long long)m.reserved_bytes, (unsigned long long)m.current_bytes,
               (unsigned long long)m.peak_bytes);
    }
    printf("\n");
    fflush(stdout);
    while (getchar() != EOF) {
    }
    return 0;
}
