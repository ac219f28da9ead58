/* gpumem.h's "Struct sizes" rule through the public API: a struct_size that is 0,
 * too small or too large is refused by every call that takes such a struct, with
 * the remedy in the message, before anything is written or initialized; an array's
 * first struct_size is the stride of every element and the library writes no byte
 * past it, read or written (a layout smaller than today's, as a program built
 * against an older header passes once fields are appended). */
#include "api_util.h"

#include <stdbool.h>

static bool initialized(gpumem_runtime *rt)
{
    bool on = true;
    ASSERT_OK(gpumem_is_initialized(rt, &on));
    return on;
}

/* True when every byte of buf[from, to) is `b`. */
static bool untouched(const void *buf, size_t from, size_t to, unsigned char b)
{
    const unsigned char *p = buf;
    for (size_t i = from; i < to; i++)
        if (p[i] != b)
            return false;
    return true;
}

static const uint32_t bad_sizes[] = {0, 8, 100000};

TEST(each_call_refuses_a_wrong_struct_size_and_changes_nothing)
{
    gpumem_runtime *rt = sim_runtime("ST-A:4GiB,ST-B:2GiB");
    if (!rt)
        return;
    const gpumem_logical_device_config two[2] = {GPUMEM_LOGICAL_DEVICE_LIMIT(1 * GiB),
                                                 GPUMEM_LOGICAL_DEVICE_LIMIT(2 * GiB)};
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, two, 2));
    for (size_t b = 0; b < sizeof bad_sizes / sizeof bad_sizes[0]; b++) {
        uint32_t bad = bad_sizes[b];
        size_t count = 777;
        const char *how = bad == 0   ? "is 0 (not set)"
                          : bad < 20 ? "less than"
                                     : "more than";

        gpumem_physical_device d[2];
        memset(d, 0x5A, sizeof d);
        d[0].struct_size = bad;
        ASSERT_STATUS(gpumem_list_physical_devices(rt, d, 2, &count),
                      GPUMEM_ERR_INVALID_ARGUMENT);
        ASSERT_CONTAINS(gpumem_last_error(),
                        "gpumem_list_physical_devices: out[0].struct_size");
        ASSERT_CONTAINS(gpumem_last_error(), how);
        ASSERT_CONTAINS(gpumem_last_error(),
                        "GPUMEM_STRUCT_INIT(gpumem_physical_device)");
        ASSERT_EQ(count, 777);
        ASSERT_TRUE(untouched(d, sizeof d[0].struct_size, sizeof d, 0x5A));

        gpumem_logical_device_config cfg[3];
        memset(cfg, 0x5A, sizeof cfg);
        cfg[0].struct_size = bad;
        ASSERT_STATUS(gpumem_get_logical_device_configuration(rt, 0, cfg, 3, &count),
                      GPUMEM_ERR_INVALID_ARGUMENT);
        ASSERT_CONTAINS(gpumem_last_error(), "out[0].struct_size");
        ASSERT_CONTAINS(gpumem_last_error(), how);
        ASSERT_CONTAINS(gpumem_last_error(), "sizeof(gpumem_logical_device_config)");
        ASSERT_EQ(count, 777);
        ASSERT_TRUE(untouched(cfg, sizeof cfg[0].struct_size, sizeof cfg, 0x5A));

        gpumem_logical_device_config one = GPUMEM_LOGICAL_DEVICE_LIMIT(512 * MiB);
        one.struct_size = bad;
        ASSERT_STATUS(gpumem_set_logical_device_configuration(rt, 0, &one, 1),
                      GPUMEM_ERR_INVALID_ARGUMENT);
        ASSERT_CONTAINS(gpumem_last_error(), "gpumem_set_logical_device_configuration: "
                                             "configs[0].struct_size");
        ASSERT_CONTAINS(gpumem_last_error(), how);
        gpumem_logical_device_config now[3] = {
            GPUMEM_STRUCT_INIT(gpumem_logical_device_config)};
        ASSERT_OK(gpumem_get_logical_device_configuration(rt, 0, now, 3, &count));
        ASSERT_EQ(count, 2); /* the configuration stays */
        ASSERT_EQ(now[1].memory_limit_bytes, 2 * GiB);

        /* These two initialize the runtime on success; not on this failure. */
        gpumem_logical_device l[4];
        memset(l, 0x5A, sizeof l);
        l[0].struct_size = bad;
        count = 777;
        ASSERT_STATUS(gpumem_list_logical_devices(rt, l, 4, &count),
                      GPUMEM_ERR_INVALID_ARGUMENT);
        ASSERT_CONTAINS(gpumem_last_error(),
                        "gpumem_list_logical_devices: out[0].struct_size");
        ASSERT_CONTAINS(gpumem_last_error(), "GPUMEM_STRUCT_INIT(gpumem_logical_device)");
        ASSERT_EQ(count, 777);
        ASSERT_TRUE(untouched(l, sizeof l[0].struct_size, sizeof l, 0x5A));

        gpumem_memory_info mi;
        memset(&mi, 0x5A, sizeof mi);
        mi.struct_size = bad;
        ASSERT_STATUS(gpumem_get_memory_info(rt, 0, &mi), GPUMEM_ERR_INVALID_ARGUMENT);
        ASSERT_CONTAINS(gpumem_last_error(), "gpumem_get_memory_info: out.struct_size");
        ASSERT_CONTAINS(gpumem_last_error(), how);
        ASSERT_CONTAINS(gpumem_last_error(), "GPUMEM_STRUCT_INIT(gpumem_memory_info)");
        ASSERT_TRUE(untouched(&mi, sizeof mi.struct_size, sizeof mi, 0x5A));

        gpumem_driver_call dc[2];
        memset(dc, 0x5A, sizeof dc);
        dc[0].struct_size = bad;
        count = 777;
        ASSERT_STATUS(gpumem_list_driver_calls(rt, -1, dc, 2, &count),
                      GPUMEM_ERR_INVALID_ARGUMENT);
        ASSERT_CONTAINS(gpumem_last_error(),
                        "gpumem_list_driver_calls: out[0].struct_size");
        ASSERT_CONTAINS(gpumem_last_error(), how);
        ASSERT_CONTAINS(gpumem_last_error(), "GPUMEM_STRUCT_INIT(gpumem_driver_call)");
        ASSERT_EQ(count, 777);
        ASSERT_TRUE(untouched(dc, sizeof dc[0].struct_size, sizeof dc, 0x5A));
        ASSERT_FALSE(initialized(rt));
    }
    /* After initialization too. */
    ASSERT_OK(gpumem_initialize(rt));
    gpumem_memory_info zero = {0};
    ASSERT_STATUS(gpumem_get_memory_info(rt, 0, &zero), GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(gpumem_last_error(), "out.struct_size is 0 (not set)");
    gpumem_runtime_destroy(rt);
}

TEST(the_first_element_sizes_the_array)
{
    gpumem_runtime *rt = sim_runtime("ST-C:4GiB,ST-D:2GiB,ST-E:1GiB");
    if (!rt)
        return;
    /* Elements after the first carry garbage in struct_size: not read, and set
     * by the library in every element it fills; the element past the capacity is
     * left alone. */
    gpumem_physical_device d[3];
    memset(d, 0x5A, sizeof d);
    d[0].struct_size = sizeof d[0];
    size_t count = 0;
    ASSERT_OK(gpumem_list_physical_devices(rt, d, 2, &count));
    ASSERT_EQ(count, 3);
    ASSERT_EQ(d[1].struct_size, sizeof d[1]);
    ASSERT_STREQ(d[1].model, "ST-D");
    ASSERT_EQ(d[2].struct_size, 0x5A5A5A5A);

    gpumem_logical_device_config cfg[2];
    memset(cfg, 0x5A, sizeof cfg);
    cfg[0] = (gpumem_logical_device_config)GPUMEM_LOGICAL_DEVICE_LIMIT(1 * GiB);
    cfg[1].memory_limit_bytes = 2 * GiB;
    cfg[1].priority = 0;
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, cfg, 2));

    gpumem_logical_device l[4];
    memset(l, 0x5A, sizeof l);
    l[0].struct_size = sizeof l[0];
    ASSERT_OK(gpumem_list_logical_devices(rt, l, 4, &count));
    ASSERT_EQ(count, 4);
    for (size_t i = 0; i < 4; i++) {
        ASSERT_EQ(l[i].struct_size, sizeof l[i]);
        ASSERT_EQ(l[i].index, i);
    }
    ASSERT_EQ(l[1].memory_limit_bytes, 2 * GiB);

    gpumem_driver_call dc[3];
    memset(dc, 0x5A, sizeof dc);
    dc[0].struct_size = sizeof dc[0];
    ASSERT_OK(gpumem_list_driver_calls(rt, 0, dc, 2, &count));
    ASSERT_TRUE(count > 2);
    ASSERT_EQ(dc[1].struct_size, sizeof dc[1]);
    ASSERT_TRUE(strncmp(dc[1].name, "cu", 2) == 0);
    ASSERT_EQ(dc[2].struct_size, 0x5A5A5A5A);
    gpumem_runtime_destroy(rt);
}

/* A program built against an older gpumem.h passes a smaller struct_size, its
 * array's stride. gpumem_logical_device's first version ends at memory_growth,
 * before the struct's tail padding, and gpumem_logical_device_config's at
 * priority: the smallest sizes accepted, packed as no compiler would, so that
 * any byte the library wrote or read past them would show. */
TEST(a_smaller_struct_size_is_the_stride_and_the_bound)
{
    const size_t ldev_v1 = offsetof(gpumem_logical_device, memory_growth) + sizeof(bool);
    const size_t cfg_v1 = offsetof(gpumem_logical_device_config, priority) + sizeof(int);
    if (ldev_v1 == sizeof(gpumem_logical_device) ||
        cfg_v1 == sizeof(gpumem_logical_device_config)) {
        printf("no tail padding on this ABI: the smaller strides equal sizeof\n");
        return;
    }
    gpumem_runtime *rt = sim_runtime("ST-F:4GiB");
    if (!rt)
        return;

    /* Three configurations at a cfg_v1 stride over 0xFF bytes: read at another
     * stride, an element would hold a limit of 0xFF... bytes, which is refused. */
    gpumem_logical_device_config in_storage[4];
    unsigned char *in = (unsigned char *)in_storage;
    memset(in_storage, 0xFF, sizeof in_storage);
    const uint64_t limits[3] = {1 * GiB, 512 * MiB, 256 * MiB};
    const uint32_t stride = (uint32_t)cfg_v1;
    for (size_t i = 0; i < 3; i++) {
        int priority = (int)i;
        memcpy(in + i * cfg_v1 +
                   offsetof(gpumem_logical_device_config, memory_limit_bytes),
               &limits[i], sizeof limits[i]);
        memcpy(in + i * cfg_v1 + offsetof(gpumem_logical_device_config, priority),
               &priority, sizeof priority);
    }
    memcpy(in, &stride, sizeof stride);
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, in_storage, 3));

    /* Read back at the same stride, with a guard after the third element. */
    gpumem_logical_device_config out_storage[4];
    unsigned char *out = (unsigned char *)out_storage;
    memset(out_storage, 0xA5, sizeof out_storage);
    memcpy(out, &stride, sizeof stride);
    size_t count = 0;
    ASSERT_OK(gpumem_get_logical_device_configuration(rt, 0, out_storage, 3, &count));
    ASSERT_EQ(count, 3);
    for (size_t i = 0; i < 3; i++) {
        uint32_t size;
        uint64_t limit;
        int priority;
        memcpy(&size, out + i * cfg_v1, sizeof size);
        memcpy(&limit,
               out + i * cfg_v1 +
                   offsetof(gpumem_logical_device_config, memory_limit_bytes),
               sizeof limit);
        memcpy(&priority,
               out + i * cfg_v1 + offsetof(gpumem_logical_device_config, priority),
               sizeof priority);
        ASSERT_EQ(size, cfg_v1);
        ASSERT_EQ(limit, limits[i]);
        ASSERT_EQ(priority, i);
    }
    ASSERT_TRUE(untouched(out_storage, 3 * cfg_v1, sizeof out_storage, 0xA5));

    gpumem_logical_device dev_storage[4];
    unsigned char *dev = (unsigned char *)dev_storage;
    memset(dev_storage, 0xA5, sizeof dev_storage);
    const uint32_t dstride = (uint32_t)ldev_v1;
    memcpy(dev, &dstride, sizeof dstride);
    ASSERT_OK(gpumem_list_logical_devices(rt, dev_storage, 3, &count));
    ASSERT_EQ(count, 3);
    for (size_t i = 0; i < 3; i++) {
        gpumem_logical_device got;
        memset(&got, 0, sizeof got);
        memcpy(&got, dev + i * ldev_v1, ldev_v1);
        ASSERT_EQ(got.struct_size, ldev_v1);
        ASSERT_EQ(got.index, i);
        ASSERT_EQ(got.physical_index, 0);
        ASSERT_EQ(got.memory_limit_bytes, limits[i]);
        ASSERT_FALSE(got.memory_growth);
        char name[32];
        snprintf(name, sizeof name, "/device:GPU:%zu", i);
        ASSERT_STREQ(got.name, name);
    }
    ASSERT_TRUE(untouched(dev_storage, 3 * ldev_v1, sizeof dev_storage, 0xA5));
    gpumem_runtime_destroy(rt);
}

int main(void)
{
    clear_env();
    RUN(each_call_refuses_a_wrong_struct_size_and_changes_nothing);
    RUN(the_first_element_sizes_the_array);
    RUN(a_smaller_struct_size_is_the_stride_and_the_bound);
    HARNESS_EXIT();
}
