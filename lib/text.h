/* Texts made of a runtime's pools, which snapshot.c (the JSON of
 * gpumem_snapshot_json) and trace.c (the allocation trace of
 * gpumem_history_trace) format: the growing host buffer they are written into,
 * the copies of the pools they are made from (each taken under its pool's lock,
 * then formatted with no lock held), and the two ways an entry point gives one,
 * into the caller's buffer (the two-call idiom) or into a file, after resolving
 * and initializing the runtime and checking the logical device. */
#ifndef GPUMEM_TEXT_H
#define GPUMEM_TEXT_H

#include "runtime.h"

/* A growing host buffer; `failed` once an allocation failed (then it stays, and
 * what is written after is dropped: the formatter checks it once, at its end). */
struct text {
    char *p;
    size_t len, cap;
    bool failed;
};

void gpumem__text_printf(struct text *o, const char *fmt, ...) GPUMEM_PRINTF(2, 3);
/* A JSON string (quotes included): valid UTF-8 and valid JSON whatever bytes s
 * holds (gpumem__json_string: a byte outside well-formed UTF-8 becomes \ufffd);
 * NULL is null. */
void gpumem__text_string(struct text *o, const char *s);

/* Copies of the pools of logical devices [first, last] (no GPU: last is first -
 * 1, and there is none), one after the other; gpumem__text_free_copies frees
 * them, whatever this returned. */
gpumem_status gpumem__text_copy_pools(gpumem_runtime *rt, int first, int last,
                                      struct pool_copy **out, struct reason *why);
void gpumem__text_free_copies(struct pool_copy *copies, int first, int last);

/* Formats the text of logical devices [first, last] of a serving runtime into *o;
 * its reason in the formatter's words. */
typedef gpumem_status (*text_format_fn)(gpumem_runtime *rt, int first, int last,
                                        struct text *o, struct reason *why);

/* For entry point `api`: the text that `format` makes of logical device
 * `logical` (-1: all) into buf (two-call idiom; *length, the size it needs,
 * NUL included); `what` names it in messages. Initializes the runtime. */
gpumem_status gpumem__text_give(gpumem_runtime *rt, const char *api, const char *what,
                                text_format_fn format, int logical, char *buf,
                                size_t capacity, size_t *length);
/* For entry point `api`: the same text into the file at `path`, written whole or
 * not at all (a new file in the same folder, renamed onto `path`), never through
 * a symbolic link at `path` (refused). */
gpumem_status gpumem__text_file(gpumem_runtime *rt, const char *api,
                                text_format_fn format, int logical, const char *path);
/* Writes the text that `format` makes of [first, last] of a serving runtime to
 * `path`, with no message of its own (the out-of-memory snapshot's). */
gpumem_status gpumem__text_write(gpumem_runtime *rt, text_format_fn format, int first,
                                 int last, const char *path, struct reason *why);

#endif /* GPUMEM_TEXT_H */
