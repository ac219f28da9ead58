/* Backend selection: GPUMEM_BACKEND=auto|cuda|sim (or gpumem_options.backend).
 * auto picks CUDA when the driver loads and reports a device, else the simulated
 * GPUs (the log says why, at INFO); cuda without a usable driver fails runtime
 * creation with GPUMEM_ERR_BACKEND and the reason in one line; sim never looks
 * for a driver. */
#include "backend/backend.h"

#include <stdio.h>

gpumem_status gpumem__backend_open(const struct options *opts, struct backend **out)
{
    char why[512];
    gpumem_status s;
    switch (opts->backend) {
    case GPUMEM_BACKEND_CUDA:
        s = gpumem__cuda_open(opts, out);
        if (s == GPUMEM_ERR_UNSUPPORTED || s == GPUMEM_ERR_BACKEND) {
            snprintf(why, sizeof why, "%s", gpumem_last_error());
            return gpumem__fail(
                GPUMEM_ERR_BACKEND,
                "gpumem_runtime_create: the CUDA backend (GPUMEM_BACKEND=cuda) "
                "is not available: %s",
                why);
        }
        return s;
    case GPUMEM_BACKEND_AUTO:
        s = gpumem__cuda_open(opts, out);
        if (s != GPUMEM_ERR_UNSUPPORTED)
            return s; /* CUDA, or a driver that is there but failed */
        gpumem__log(opts, GPUMEM_LOG_INFO, "gpumem: no CUDA (%s); using simulated GPUs",
                    gpumem_last_error());
        return gpumem__sim_open(opts, out);
    case GPUMEM_BACKEND_SIM:
        return gpumem__sim_open(opts, out);
    default:
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "unknown backend %d",
                            opts->backend);
    }
}
