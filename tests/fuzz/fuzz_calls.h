/* What the fuzz targets of the public API (fuzz_api.c, fuzz_streams.c) check
 * of every call: a status the header lists, and a message with each failure
 * (known); a status the call's own documentation lists (only, a mask of ST()
 * bits: its "Returns:" in gpumem.h). A violation is printed after FUZZ_TARGET,
 * the includer's name, and aborts. */
#ifndef GPUMEM_FUZZ_CALLS_H
#define GPUMEM_FUZZ_CALLS_H

#include "gpumem.h"

#include <stdio.h>
#include <stdlib.h>

static void die(const char *what, const char *call)
{
    fprintf(stderr, FUZZ_TARGET ": %s: %s\n  last error: %s\n", call, what,
            gpumem_last_error());
    abort();
}

static gpumem_status known(gpumem_status s, const char *call)
{
    if ((int)s < GPUMEM_OK || (int)s > GPUMEM_ERR_UNSUPPORTED)
        die("a status the header does not list", call);
    if (s != GPUMEM_OK && !gpumem_last_error()[0])
        die("a failure without a message", call);
    return s;
}

#define ST(name) (1u << GPUMEM_##name)

static gpumem_status only(gpumem_status s, unsigned listed, const char *call)
{
    if (!(known(s, call) < 32 && listed & 1u << s))
        die("a status the call's documentation does not list", call);
    return s;
}

#endif /* GPUMEM_FUZZ_CALLS_H */
