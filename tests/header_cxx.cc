// The public header stands alone as C++ (extern "C", no C-only constructs) and
// its functions link from C++.
#include "gpumem.h"
#include "gpumem.h"

int main()
{
    gpumem_options opts;
    gpumem_memory_info info = {};
    // The struct_size initializers, under the project's warnings (-Wextra: no
    // missing-field-initializers warning).
    gpumem_memory_info sized = GPUMEM_STRUCT_INIT(gpumem_memory_info);
    gpumem_physical_device gpus[2] = {GPUMEM_STRUCT_INIT(gpumem_physical_device)};
    gpumem_logical_device_config cfg = GPUMEM_LOGICAL_DEVICE_LIMIT(1);
    gpumem_status s = gpumem_options_init(&opts);
    if (s != GPUMEM_OK || info.current_bytes != 0 || gpumem_status_string(s) == nullptr)
        return 1;
    if (sized.struct_size != sizeof sized || sized.num_ooms != 0 ||
        gpus[0].struct_size != sizeof gpus[0] || gpus[1].struct_size != 0 ||
        cfg.struct_size != sizeof cfg || cfg.memory_limit_bytes != 1)
        return 1;
    return gpumem_version() == GPUMEM_VERSION_NUMBER ? 0 : 1;
}
