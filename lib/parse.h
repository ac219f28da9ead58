/* Parsers of what users write: sizes, simulated device lists, booleans, fractions,
 * whole MiB and words from a list. Pure: no environment, no state, no locks, and
 * locale-independent (no strtod, no isspace). The gpumem__scan_* ones are a lower
 * layer: they return a status and their reason, in which the text is quoted with
 * gpumem__quote (a long one shortened to start ... end) and which does not name
 * the text's source; the caller words the message. */
#ifndef GPUMEM_PARSE_H
#define GPUMEM_PARSE_H

#include "gpumem.h"
#include "platform.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct reason; /* internal.h */

#define GPUMEM_MAX_SIM_DEVICES 64
/* A simulated GPU's size: at least one arena granule, at most 64 TiB. */
#define GPUMEM_MIN_SIM_DEVICE_BYTES 256
#define GPUMEM_MAX_SIM_DEVICE_BYTES (64 * GPUMEM_TIB)

/* What an entry that gives only a size has. */
#define GPUMEM_SIM_DEFAULT_MODEL    "gpumem simulated GPU"
#define GPUMEM_SIM_DEFAULT_CC_MAJOR 8
#define GPUMEM_SIM_DEFAULT_CC_MINOR 0

struct sim_device_spec {
    char model[128];        /* GPUMEM_SIM_DEFAULT_MODEL when not given */
    uint64_t total_bytes;   /* within the bounds above */
    int cc_major, cc_minor; /* 8.0 when not given */
};

/* Each gpumem__scan_* returns GPUMEM_OK, or GPUMEM_ERR_INVALID_ARGUMENT with the
 * reason in *why, which begins with the quoted text ("'12GB' is not a size: ...")
 * so that "SOURCE: " before it makes the message. pre: text, out and why not
 * NULL. Outputs are written only on success. */

/* "12GiB", "1.5 TiB", "4096", "512MiB": units B, KiB, MiB, GiB, TiB; a plain
 * number is bytes; decimals are rounded down to whole bytes, exactly. Rejects
 * empty, negative, overflow, decimal or unknown units. */
gpumem_status gpumem__scan_size(const char *text, uint64_t *out, struct reason *why);

/* GPUMEM_SIM_DEVICES syntax: comma-separated SIZE, MODEL:SIZE or MODEL:SIZE:CC (CC
 * as MAJOR.MINOR). Spaces around fields are trimmed; MODEL may contain inner
 * spaces; empty or blank text is zero devices. At most `capacity` entries
 * (out may be NULL when capacity is 0). The reason gives the entry and the
 * position of the offending field. */
gpumem_status gpumem__scan_sim_devices(const char *text, struct sim_device_spec *out,
                                       size_t capacity, size_t *count,
                                       struct reason *why);

/* true/false, 1/0, yes/no, on/off, in any case, spaces around ignored. */
gpumem_status gpumem__scan_bool(const char *text, bool *out, struct reason *why);

/* A decimal in [0, 1] ("0.5", "1", ".25"), without exponent or sign; the nearest
 * double, and never 0 for a positive text (DBL_MIN past what a double holds). */
gpumem_status gpumem__scan_fraction(const char *text, double *out, struct reason *why);

/* A non-negative whole number of MiB, into bytes (below 2^64). */
gpumem_status gpumem__scan_mib(const char *text, uint64_t *bytes, struct reason *why);

/* One of `n` words (any case, spaces around ignored): its index. The reason lists
 * them: "'tpu' is not one of auto, cuda, sim". */
gpumem_status gpumem__scan_word(const char *text, const char *const *words, size_t n,
                                size_t *index, struct reason *why);

/* The scanners above for an entry point: on failure the message is "what: " and
 * the reason, set with gpumem__fail. `what` names the source
 * ("GPUMEM_SIM_DEVICES", "gpumem_options.sim_devices"). NULL arguments are
 * GPUMEM_ERR_INVALID_ARGUMENT. */
gpumem_status gpumem__parse_size(const char *what, const char *text, uint64_t *out);
gpumem_status gpumem__parse_sim_devices(const char *what, const char *text,
                                        struct sim_device_spec *out, size_t capacity,
                                        size_t *count);

#endif /* GPUMEM_PARSE_H */
