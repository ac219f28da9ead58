/* The struct_size rule of gpumem.h ("Struct sizes"): the check of a caller's
 * struct_size and the bounded copies between the caller's layout (its struct_size,
 * also the stride of its arrays) and this library's (sizeof). Nothing here locks
 * or keeps state. Invariant: no byte at or past the caller's struct_size is read
 * or written. */
#ifndef GPUMEM_STRUCTS_H
#define GPUMEM_STRUCTS_H

#include "gpumem.h"

#include <stddef.h>

/* One caller-sized struct: its name for messages, this library's sizeof, and the
 * smallest struct_size accepted, the end of the first version's last field (a
 * program compiled with that version has a struct at least this large). */
struct gpumem__struct_kind {
    const char *name;
    size_t size;
    size_t min_size;
};

extern const struct gpumem__struct_kind gpumem__physical_device_struct;
extern const struct gpumem__struct_kind gpumem__logical_device_config_struct;
extern const struct gpumem__struct_kind gpumem__logical_device_struct;
extern const struct gpumem__struct_kind gpumem__memory_info_struct;
extern const struct gpumem__struct_kind gpumem__driver_call_struct;

/* Checks the struct_size of `first`, the caller's struct or its array's first
 * element, which `arg` names in the message ("out", "out[0]"). NULL `first` or
 * n == 0 (no element to read) is not checked. On success *stride is the caller's
 * element size (k->size when nothing was checked).
 * Returns: GPUMEM_OK; GPUMEM_ERR_INVALID_ARGUMENT with a message starting with
 *          `api` that says how to set struct_size. */
gpumem_status gpumem__struct_check(const char *api, const char *arg,
                                   const struct gpumem__struct_kind *k, const void *first,
                                   size_t n, size_t *stride);

/* Writes `src` (this library's layout) into element i of the caller's array `dst`
 * of `stride`-byte elements: the bytes within both sizes, and struct_size = stride.
 * pre: stride from gpumem__struct_check. */
void gpumem__struct_put(const struct gpumem__struct_kind *k, void *dst, size_t stride,
                        size_t i, const void *src);

/* Reads element i of the caller's array `src` of `stride`-byte elements into
 * `dst` (this library's layout): the fields past stride take 0, and
 * dst's struct_size is k->size. pre: stride from gpumem__struct_check. */
void gpumem__struct_get(const struct gpumem__struct_kind *k, void *dst, const void *src,
                        size_t stride, size_t i);

#endif /* GPUMEM_STRUCTS_H */
