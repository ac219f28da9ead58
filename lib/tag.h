/* Allocation tags: a label the calling thread gives the allocations it makes
 * (gpumem_set_tag), kept with each chunk and shown in snapshots and in the
 * out-of-memory report. A tag's text is interned once per process and never freed,
 * and numbered 1..GPUMEM_TAGS_MAX, so a chunk holds a small number (13 bits of an
 * owner word, pool.h) whose text stays valid in any later snapshot. No lock: the
 * intern list only grows, by compare-and-swap; the current tag is per thread. */
#ifndef GPUMEM_TAG_H
#define GPUMEM_TAG_H

#include "internal.h"

#define GPUMEM_TAG_MAX  127u  /* longest tag, in bytes */
#define GPUMEM_TAGS_MAX 4096u /* distinct tags a process may intern */

#define GPUMEM_TAG_BITS 13u /* bits of a tag's number: 0 (none) .. GPUMEM_TAGS_MAX */
_Static_assert(GPUMEM_TAGS_MAX < 1u << GPUMEM_TAG_BITS, "a tag number fits its bits");

/* The calling thread's tag, as its number; 0 when it has none. Read on every
 * allocation: initial-exec, so that reading it is one load, also in the shared
 * library (4 bytes of the static TLS that glibc keeps for libraries opened
 * later). */
#if defined(__GNUC__) && !defined(_WIN32)
extern _Thread_local uint32_t gpumem__tag __attribute__((tls_model("initial-exec")));
#else
extern _Thread_local uint32_t gpumem__tag;
#endif

static inline uint32_t gpumem__tag_current(void) { return gpumem__tag; }

/* The text of tag number `n`; NULL for 0 or a number no tag has. Lock-free. */
const char *gpumem__tag_text(uint64_t n);

#endif /* GPUMEM_TAG_H */
