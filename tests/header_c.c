/* The public header stands alone as strict C11: it is the first and only
 * include, it is built with -std=c11 -pedantic-errors and without the project's
 * _GNU_SOURCE, and including it twice is harmless. */
#undef _GNU_SOURCE
#include "gpumem.h"
#include "gpumem.h"

int main(void)
{
    gpumem_options opts;
    gpumem_memory_info info = GPUMEM_STRUCT_INIT(gpumem_memory_info);
    gpumem_physical_device gpus[2] = {GPUMEM_STRUCT_INIT(gpumem_physical_device)};
    gpumem_logical_device_config cfg = GPUMEM_LOGICAL_DEVICE_LIMIT(1);
    if (gpumem_options_init(&opts) != GPUMEM_OK || info.current_bytes != 0 ||
        info.struct_size != sizeof info || gpus[0].struct_size != sizeof gpus[0] ||
        cfg.memory_limit_bytes != 1 || cfg.struct_size != sizeof cfg)
        return 1;
    return gpumem_version() == GPUMEM_VERSION_NUMBER ? 0 : 1;
}
