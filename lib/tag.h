/* Allocation tags: a label the calling thread gives the allocations it makes
 * (gpumem_set_tag), kept with each chunk and shown in snapshots and in the
 * out-of-memory report. A tag's text is interned once per process and never freed,
 * so a chunk holds a plain pointer that stays valid in any later snapshot. No
 * lock: the intern list only grows, by compare-and-swap; the current tag is
 * per thread. */
#ifndef GPUMEM_TAG_H
#define GPUMEM_TAG_H

#include "internal.h"

#define GPUMEM_TAG_MAX  127u  /* longest tag, in bytes */
#define GPUMEM_TAGS_MAX 4096u /* distinct tags a process may intern */

/* The calling thread's tag, interned; NULL when it has none. Read on every
 * allocation: initial-exec, so that reading it is one load, also in the shared
 * library (8 bytes of the static TLS that glibc keeps for libraries opened
 * later). */
#if defined(__GNUC__) && !defined(_WIN32)
extern _Thread_local const char *gpumem__tag __attribute__((tls_model("initial-exec")));
#else
extern _Thread_local const char *gpumem__tag;
#endif

static inline const char *gpumem__tag_current(void) { return gpumem__tag; }

#endif /* GPUMEM_TAG_H */
