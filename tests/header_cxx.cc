// The public header stands alone as C++ (extern "C", no C-only constructs) and
// its functions link from C++.
#include "gpumem.h"
#include "gpumem.h"

int main()
{
    gpumem_options opts;
    gpumem_memory_info info = {};
    gpumem_status s = gpumem_options_init(&opts);
    if (s != GPUMEM_OK || info.current_bytes != 0 || gpumem_status_string(s) == nullptr)
        return 1;
    return gpumem_version() == GPUMEM_VERSION_NUMBER ? 0 : 1;
}
