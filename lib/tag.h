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

/* The calling thread's tag, interned; NULL when it has none. */
const char *gpumem__tag_current(void);

#endif /* GPUMEM_TAG_H */
