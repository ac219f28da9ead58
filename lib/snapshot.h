/* Snapshots (snapshot.c): what the runtime's serving paths call. The entry points
 * themselves are gpumem.h's gpumem_snapshot_json and gpumem_snapshot_file. */
#ifndef GPUMEM_SNAPSHOT_H
#define GPUMEM_SNAPSHOT_H

#include "runtime.h"

/* After an out of memory on rt, with no lock held: writes the snapshot that
 * GPUMEM_OOM_SNAPSHOT asks for, once per process; a failure goes to the log. Never
 * touches the caller's last error. */
void gpumem__snapshot_on_oom(gpumem_runtime *rt);

#endif /* GPUMEM_SNAPSHOT_H */
