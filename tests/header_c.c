/* The public header stands alone as strict C11: it is the first and only
 * include, it is built with -std=c11 -pedantic-errors and without the project's
 * _GNU_SOURCE, and including it twice is harmless. */
#undef _GNU_SOURCE
#include "gpumem.h"
#include "gpumem.h"

int main(void)
{
    gpumem_options opts;
    gpumem_memory_info info = {0};
    gpumem_logical_device_config cfg = {.memory_limit_bytes = 1, .priority = 0};
    if (gpumem_options_init(&opts) != GPUMEM_OK || info.current_bytes != 0 ||
        cfg.memory_limit_bytes != 1)
        return 1;
    return gpumem_version() == GPUMEM_VERSION_NUMBER ? 0 : 1;
}
