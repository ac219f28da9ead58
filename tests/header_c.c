/* The public header compiles on its own as strict C11 (built with -pedantic). */
#include "gpumem.h"

int main(void)
{
    return gpumem_version() == GPUMEM_VERSION_NUMBER ? 0 : 1;
}
