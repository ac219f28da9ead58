/* The struct_size rule of gpumem.h ("Struct sizes"): a caller's struct_size is
 * checked once per call, before anything changes, and every copy between its
 * layout and the library's is bounded by it. No locks, no state. */
#include "structs.h"

#include "internal.h"

#include <string.h>

/* The end of `field`: a struct_size below it cannot hold the field. */
#define END_OF(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))
/* min_size is the end of the last field of gpumem 0.2, the first version with
 * struct_size: it stays as it is when fields are appended. */
#define KIND(type, last_v1_field)                                                        \
    {                                                                                    \
#type, sizeof(type), END_OF(type, last_v1_field)                                 \
    }

const struct gpumem__struct_kind gpumem__physical_device_struct =
    KIND(gpumem_physical_device, compute_minor);
const struct gpumem__struct_kind gpumem__logical_device_config_struct =
    KIND(gpumem_logical_device_config, priority);
const struct gpumem__struct_kind gpumem__logical_device_struct =
    KIND(gpumem_logical_device, memory_growth);
const struct gpumem__struct_kind gpumem__memory_info_struct =
    KIND(gpumem_memory_info, num_ooms);
/* after gpumem 0.2: its own first version ends at `bytes` */
const struct gpumem__struct_kind gpumem__driver_call_struct =
    KIND(gpumem_driver_call, bytes);

/* The copies below treat the first four bytes of every element as struct_size. */
_Static_assert(offsetof(gpumem_physical_device, struct_size) == 0, "struct_size first");
_Static_assert(offsetof(gpumem_logical_device_config, struct_size) == 0,
               "struct_size first");
_Static_assert(offsetof(gpumem_logical_device, struct_size) == 0, "struct_size first");
_Static_assert(offsetof(gpumem_memory_info, struct_size) == 0, "struct_size first");
_Static_assert(offsetof(gpumem_driver_call, struct_size) == 0, "struct_size first");

gpumem_status gpumem__struct_check(const char *api, const char *arg,
                                   const struct gpumem__struct_kind *k, const void *first,
                                   size_t n, size_t *stride)
{
    uint32_t size;
    *stride = k->size;
    if (!first || n == 0)
        return GPUMEM_OK;
    memcpy(&size, first, sizeof size);
    if (size == 0)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "%s: %s.struct_size is 0 (not set): set it to sizeof(%s), "
                            "as GPUMEM_STRUCT_INIT(%s) does",
                            api, arg, k->name, k->name);
    if (size < k->min_size)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "%s: %s.struct_size is %u, less than the %zu bytes of the "
                            "first %s: set it to sizeof(%s), as GPUMEM_STRUCT_INIT(%s) "
                            "does",
                            api, arg, (unsigned)size, k->min_size, k->name, k->name,
                            k->name);
    /* A larger struct comes from a newer gpumem.h than this library, or is an
     * uninitialized one: either way its fields past k->size cannot be honoured,
     * and trusting the size would write past the caller's array. */
    if (size > k->size)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "%s: %s.struct_size is %u, more than this library's "
                            "sizeof(%s), %zu (gpumem %s): a program built against a "
                            "newer gpumem.h needs that version's library; otherwise set "
                            "struct_size to sizeof(%s), as GPUMEM_STRUCT_INIT(%s) does",
                            api, arg, (unsigned)size, k->name, k->size,
                            GPUMEM_VERSION_STRING, k->name, k->name);
    *stride = size;
    return GPUMEM_OK;
}

void gpumem__struct_put(const struct gpumem__struct_kind *k, void *dst, size_t stride,
                        size_t i, const void *src)
{
    unsigned char *el = (unsigned char *)dst + i * stride;
    uint32_t size = (uint32_t)stride;
    memcpy(el, src, stride < k->size ? stride : k->size);
    memcpy(el, &size, sizeof size);
}

void gpumem__struct_get(const struct gpumem__struct_kind *k, void *dst, const void *src,
                        size_t stride, size_t i)
{
    uint32_t size = (uint32_t)k->size;
    memset(dst, 0, k->size);
    memcpy(dst, (const unsigned char *)src + i * stride,
           stride < k->size ? stride : k->size);
    memcpy(dst, &size, sizeof size);
}
