/* The fork generation: which process of a fork() lineage this is, for every layer
 * that must tell its own state from a copy inherited from a parent process (the
 * runtime's magic, the CUDA backend's record of where cuInit ran). Below the
 * backend and the runtime: it includes nothing of gpumem but the platform. */
#ifndef GPUMEM_FORK_H
#define GPUMEM_FORK_H

#include "platform.h"

/* The process's fork generation: 0 in a process that was not forked (or forked
 * before gpumem was first used), one more than its parent's in a forked child.
 * The first call registers the fork handler that counts it; a module that keeps
 * its own per-process state registers its child handler after calling this, so
 * that the handler, run after the generation's (handlers run in the order they
 * were registered), sees the child's generation. */
unsigned gpumem__fork_generation(void);

#endif /* GPUMEM_FORK_H */
