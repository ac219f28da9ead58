/* Configuration: the setters and getters of what initialization will build
 * (visible GPUs, memory growth, memory fractions, logical devices), and the
 * physical table they are checked against. Every table is read and written under
 * rt->lock; after initialization a setter succeeds only when it would change
 * nothing (as in TensorFlow, so that a re-run notebook cell does not fail), and
 * otherwise says what initialized the devices. */
#include "runtime.h"
#include "structs.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- helpers -- */

static gpumem_status check_physical(const gpumem_runtime *rt, const char *api,
                                    int physical)
{
    if (physical < 0 || (size_t)physical >= rt->num_physical)
        return gpumem__fail(
            GPUMEM_ERR_NO_SUCH_DEVICE,
            "%s(GPU:%d): no such physical device (this runtime has %zu GPU%s)", api,
            physical, rt->num_physical, rt->num_physical == 1 ? "" : "s");
    return GPUMEM_OK;
}

static gpumem_status already_initialized(const gpumem_runtime *rt, const char *api,
                                         const char *object)
{
    return gpumem__fail(GPUMEM_ERR_ALREADY_INITIALIZED,
                        "%s(%s): the devices are already initialized (by %s), so this "
                        "configuration can no longer change; make configuration calls "
                        "before that",
                        api, object, rt->init_reason);
}

/* ---------------------------------------------------------- enumeration -- */

gpumem_status gpumem_list_physical_devices(gpumem_runtime *rt,
                                           gpumem_physical_device *out, size_t capacity,
                                           size_t *count)
{
    static const char api[] = "gpumem_list_physical_devices";
    size_t stride;
    gpumem_status s = resolve(&rt, api);
    if (s == GPUMEM_OK)
        s = gpumem__check_list_args(api, &gpumem__physical_device_struct, out, capacity,
                                    count, &stride);
    if (s != GPUMEM_OK)
        return s;
    /* The physical table never changes after creation. */
    for (size_t i = 0; i < rt->num_physical && i < capacity; i++)
        gpumem__struct_put(&gpumem__physical_device_struct, out, stride, i,
                           &rt->physical[i]);
    *count = rt->num_physical;
    return GPUMEM_OK;
}

/* ----------------------------------------------------------- visibility -- */

gpumem_status gpumem_set_visible_devices(gpumem_runtime *rt, const int *physical,
                                         size_t n)
{
    static const char api[] = "gpumem_set_visible_devices";
    gpumem_status s = resolve(&rt, api);
    if (s != GPUMEM_OK)
        return s;
    if (!physical && n)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "%s: `physical` is NULL but n is %zu", api, n);
    gpumem__mutex_lock(&rt->lock);
    bool *want = calloc(rt->num_physical ? rt->num_physical : 1, sizeof *want);
    if (!want) {
        s = gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "%s: out of host memory", api);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if ((s = check_physical(rt, api, physical[i])) != GPUMEM_OK)
            goto out;
        if (want[physical[i]]) {
            s = gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "%s: GPU:%d is listed twice",
                             api, physical[i]);
            goto out;
        }
        want[physical[i]] = true;
    }
    if (serving(rt)) {
        if (memcmp(want, rt->visible, rt->num_physical * sizeof *want) != 0)
            s = already_initialized(rt, api, "visible devices");
        goto out;
    }
    memcpy(rt->visible, want, rt->num_physical * sizeof *want);
out:
    gpumem__mutex_unlock(&rt->lock);
    free(want);
    return s;
}

gpumem_status gpumem_get_visible_devices(gpumem_runtime *rt, int *out, size_t capacity,
                                         size_t *count)
{
    static const char api[] = "gpumem_get_visible_devices";
    gpumem_status s = resolve(&rt, api);
    if (s == GPUMEM_OK)
        s = gpumem__check_list_args(api, NULL, out, capacity, count, NULL);
    if (s != GPUMEM_OK)
        return s;
    gpumem__mutex_lock(&rt->lock);
    size_t k = 0;
    for (size_t i = 0; i < rt->num_physical; i++) {
        if (!rt->visible[i])
            continue;
        if (k < capacity)
            out[k] = (int)i;
        k++;
    }
    *count = k;
    gpumem__mutex_unlock(&rt->lock);
    return GPUMEM_OK;
}

/* --------------------------------------------------------------- growth -- */

gpumem_status gpumem_set_memory_growth(gpumem_runtime *rt, int physical, bool enable)
{
    static const char api[] = "gpumem_set_memory_growth";
    char object[32];
    gpumem_status s = resolve_call(&rt, api, OBJ_PHYSICAL, physical, 0, NULL);
    if (s != GPUMEM_OK)
        return s;
    gpumem__mutex_lock(&rt->lock);
    if ((s = check_physical(rt, api, physical)) != GPUMEM_OK)
        goto out;
    if (serving(rt)) {
        snprintf(object, sizeof object, "GPU:%d", physical);
        if (rt->config[physical].growth != enable)
            s = already_initialized(rt, api, object);
        goto out;
    }
    rt->config[physical].growth = enable;
out:
    gpumem__mutex_unlock(&rt->lock);
    return s;
}

/* The getters of a per-GPU setting: *copy receives GPU `physical`'s
 * configuration, read under the lock, once rt, `out` (named `name` in the
 * message) and the index are checked. */
static gpumem_status read_config(gpumem_runtime *rt, const char *api, int physical,
                                 const void *out, const char *name,
                                 struct phys_config *copy)
{
    gpumem_status s = resolve_call(&rt, api, OBJ_PHYSICAL, physical, 0, NULL);
    if (s != GPUMEM_OK)
        return s;
    if (!out)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "%s: `%s` is NULL", api, name);
    gpumem__mutex_lock(&rt->lock);
    if ((s = check_physical(rt, api, physical)) == GPUMEM_OK)
        *copy = rt->config[physical];
    gpumem__mutex_unlock(&rt->lock);
    return s;
}

gpumem_status gpumem_get_memory_growth(gpumem_runtime *rt, int physical, bool *enabled)
{
    struct phys_config c = {0}; /* read_config fills it on success; gcc -O3 cannot tell */
    gpumem_status s =
        read_config(rt, "gpumem_get_memory_growth", physical, enabled, "enabled", &c);
    if (s == GPUMEM_OK)
        *enabled = c.growth;
    return s;
}

/* ------------------------------------------------------------- fraction -- */

gpumem_status gpumem_set_memory_fraction(gpumem_runtime *rt, int physical,
                                         double fraction)
{
    static const char api[] = "gpumem_set_memory_fraction";
    char object[32];
    gpumem_status s = resolve_call(&rt, api, OBJ_PHYSICAL, physical, 0, NULL);
    if (s != GPUMEM_OK)
        return s;
    snprintf(object, sizeof object, physical == -1 ? "every GPU" : "GPU:%d", physical);
    if (isnan(fraction) || fraction < 0.0 || fraction > 1.0)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "%s(%s): fraction %.17g is not in [0, 1] (0 clears it)", api,
                            object, fraction);
    gpumem__mutex_lock(&rt->lock);
    size_t first = 0, last = rt->num_physical;
    if (physical != -1) {
        if ((s = check_physical(rt, api, physical)) != GPUMEM_OK)
            goto out;
        first = (size_t)physical;
        last = first + 1;
    }
    if (serving(rt)) {
        for (size_t i = first; i < last; i++)
            if (rt->config[i].fraction != fraction)
                s = already_initialized(rt, api, object);
        goto out;
    }
    for (size_t i = first; i < last; i++)
        rt->config[i].fraction = fraction;
out:
    gpumem__mutex_unlock(&rt->lock);
    return s;
}

gpumem_status gpumem_get_memory_fraction(gpumem_runtime *rt, int physical,
                                         double *fraction)
{
    struct phys_config c = {0}; /* as above */
    gpumem_status s =
        read_config(rt, "gpumem_get_memory_fraction", physical, fraction, "fraction", &c);
    if (s == GPUMEM_OK)
        *fraction = c.fraction;
    return s;
}

/* ------------------------------------------------------ logical devices -- */

static bool same_logical_config(const struct phys_config *c,
                                const gpumem_logical_device_config *configs, size_t n)
{
    if (c->num_logical != n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (c->logical[i].memory_limit_bytes != configs[i].memory_limit_bytes ||
            c->logical[i].priority != configs[i].priority)
            return false;
    return true;
}

gpumem_status gpumem_set_logical_device_configuration(
    gpumem_runtime *rt, int physical, const gpumem_logical_device_config *configs,
    size_t n)
{
    static const char api[] = "gpumem_set_logical_device_configuration";
    char object[32];
    gpumem_logical_device_config own[GPUMEM_MAX_LOGICAL_PER_GPU];
    size_t stride;
    gpumem_status s = resolve_call(&rt, api, OBJ_PHYSICAL, physical, 0, NULL);
    if (s != GPUMEM_OK)
        return s;
    if (!configs && n)
        return gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT,
                            "%s(GPU:%d): `configs` is NULL but n is %zu", api, physical,
                            n);
    if (n > GPUMEM_MAX_LOGICAL_PER_GPU)
        return gpumem__fail(
            GPUMEM_ERR_INVALID_ARGUMENT,
            "%s(GPU:%d): %zu logical devices requested; at most %d per GPU", api,
            physical, n, GPUMEM_MAX_LOGICAL_PER_GPU);
    s = gpumem__struct_check(api, "configs[0]", &gpumem__logical_device_config_struct,
                             configs, n, &stride);
    if (s != GPUMEM_OK)
        return s;
    /* From here on, the caller's array in this library's layout. */
    for (size_t i = 0; i < n; i++)
        gpumem__struct_get(&gpumem__logical_device_config_struct, &own[i], configs,
                           stride, i);
    configs = own;
    gpumem__mutex_lock(&rt->lock);
    if ((s = check_physical(rt, api, physical)) != GPUMEM_OK)
        goto out;
    s = gpumem__check_logical_config(api, physical, rt->physical[physical].total_bytes,
                                     configs, n);
    if (s != GPUMEM_OK)
        goto out;
    struct phys_config *c = &rt->config[physical];
    if (serving(rt)) {
        snprintf(object, sizeof object, "GPU:%d", physical);
        if (!same_logical_config(c, configs, n))
            s = already_initialized(rt, api, object);
        goto out;
    }
    c->num_logical = n;
    for (size_t i = 0; i < n; i++)
        c->logical[i] = configs[i];
out:
    gpumem__mutex_unlock(&rt->lock);
    return s;
}

gpumem_status gpumem_get_logical_device_configuration(gpumem_runtime *rt, int physical,
                                                      gpumem_logical_device_config *out,
                                                      size_t capacity, size_t *count)
{
    static const char api[] = "gpumem_get_logical_device_configuration";
    size_t stride;
    gpumem_status s = resolve_call(&rt, api, OBJ_PHYSICAL, physical, 0, NULL);
    if (s == GPUMEM_OK)
        s = gpumem__check_list_args(api, &gpumem__logical_device_config_struct, out,
                                    capacity, count, &stride);
    if (s != GPUMEM_OK)
        return s;
    gpumem__mutex_lock(&rt->lock);
    if ((s = check_physical(rt, api, physical)) == GPUMEM_OK) {
        const struct phys_config *c = &rt->config[physical];
        for (size_t i = 0; i < c->num_logical && i < capacity; i++)
            gpumem__struct_put(&gpumem__logical_device_config_struct, out, stride, i,
                               &c->logical[i]);
        *count = c->num_logical;
    }
    gpumem__mutex_unlock(&rt->lock);
    return s;
}
