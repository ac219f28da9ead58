/* Backend selection: GPUMEM_BACKEND=auto|cuda|sim (or gpumem_options.backend).
 * auto picks CUDA when the driver loads and reports a device, else the simulated
 * GPUs. This release has no CUDA backend yet, so auto always simulates and an
 * explicit cuda request fails with a message that says so. */
#include "backend/backend.h"

gpumem_status gpumem__backend_open(const struct options *opts, struct backend **out)
{
    switch (opts->backend) {
    case GPUMEM_BACKEND_CUDA:
        return gpumem__fail(GPUMEM_ERR_BACKEND,
                            "GPUMEM_BACKEND=cuda: this build of gpumem has no CUDA backend "
                            "(only the simulated one); use sim or auto");
    case GPUMEM_BACKEND_AUTO:
        gpumem__log(opts, GPUMEM_LOG_INFO,
                    "gpumem: no CUDA backend in this build; using simulated GPUs");
        return gpumem__sim_open(opts, out);
    case GPUMEM_BACKEND_SIM:
        return gpumem__sim_open(opts, out);
    default:
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "unknown backend %d", opts->backend);
    }
}
