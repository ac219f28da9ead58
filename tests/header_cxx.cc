// The public header compiles on its own as C++ and links from C++.
#include "gpumem.h"

int main()
{
    gpumem_options opts;
    if (gpumem_options_init(&opts) != GPUMEM_OK)
        return 1;
    return gpumem_version() == GPUMEM_VERSION_NUMBER ? 0 : 1;
}
