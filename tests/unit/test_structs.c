/* The struct_size helpers (lib/structs.c) over a made-up struct that gains fields
 * in a later version: a program built with the first version's layout gets only
 * its fields written, at its own stride, and no byte past its struct_size; the
 * fields it does not pass read as 0. Then the checks' three refusals, and the
 * first-version sizes of the four public structs, pinned. */
#include "harness.h"
#include "structs.h"

#include <stdalign.h>
#include <stddef.h>

/* The first version, as an old program compiled it. */
struct thing_v1 {
    uint32_t struct_size;
    int32_t index;
    uint64_t bytes;
};

/* The library's layout, a version later: two fields appended. */
struct thing_v2 {
    uint32_t struct_size;
    int32_t index;
    uint64_t bytes;
    uint64_t added;
    char label[8];
};

static const struct gpumem__struct_kind thing = {"thing", sizeof(struct thing_v2),
                                                 offsetof(struct thing_v1, bytes) +
                                                     sizeof(uint64_t)};

/* An old program's array with what follows it in memory. */
struct old_array {
    struct thing_v1 el[3];
    unsigned char after[64];
};

TEST(an_old_layout_gets_only_its_fields)
{
    struct old_array a;
    memset(&a, 0xEE, sizeof a);
    a.el[0].struct_size = sizeof a.el[0]; /* the others' are not read */
    size_t stride = 0;
    ASSERT_OK(gpumem__struct_check("api", "out[0]", &thing, a.el, 3, &stride));
    ASSERT_EQ(stride, sizeof(struct thing_v1));
    for (int i = 0; i < 3; i++) {
        struct thing_v2 src = {sizeof src, i, 1000u + (unsigned)i, 0xAAAAAAAAAAAAAAAAu,
                               "new"};
        gpumem__struct_put(&thing, a.el, stride, (size_t)i, &src);
    }
    for (int i = 0; i < 3; i++) {
        ASSERT_EQ(a.el[i].struct_size, sizeof(struct thing_v1)); /* each element's */
        ASSERT_EQ(a.el[i].index, i);
        ASSERT_EQ(a.el[i].bytes, 1000u + (unsigned)i);
    }
    for (size_t j = 0; j < sizeof a.after; j++)
        if (a.after[j] != 0xEE) {
            HARNESS_FAIL("byte %zu past the old array was written: 0x%02x", j,
                         a.after[j]);
            break;
        }
}

TEST(an_old_layout_is_read_with_defaults_for_the_rest)
{
    struct thing_v1 in[2] = {{sizeof in[0], 7, 4096}, {0, 8, 8192}};
    size_t stride = 0;
    ASSERT_OK(gpumem__struct_check("api", "configs[0]", &thing, in, 2, &stride));
    ASSERT_EQ(stride, sizeof(struct thing_v1));
    for (size_t i = 0; i < 2; i++) {
        struct thing_v2 got;
        memset(&got, 0xEE, sizeof got);
        gpumem__struct_get(&thing, &got, in, stride, i);
        ASSERT_EQ(got.struct_size, sizeof got); /* the library's layout, whole */
        ASSERT_EQ(got.index, 7 + (int)i);
        ASSERT_EQ(got.bytes, 4096u << i);
        ASSERT_EQ(got.added, 0); /* not passed: the default */
        ASSERT_EQ(got.label[0], 0);
        ASSERT_EQ(got.label[7], 0);
    }
}

TEST(the_library_layout_round_trips)
{
    struct thing_v2 out[2];
    memset(out, 0, sizeof out);
    out[0].struct_size = sizeof out[0];
    size_t stride = 0;
    ASSERT_OK(gpumem__struct_check("api", "out[0]", &thing, out, 2, &stride));
    ASSERT_EQ(stride, sizeof(struct thing_v2));
    struct thing_v2 src = {sizeof src, 3, 5, 6, "label"};
    gpumem__struct_put(&thing, out, stride, 1, &src);
    ASSERT_EQ(out[1].struct_size, sizeof(struct thing_v2));
    ASSERT_EQ(out[1].added, 6);
    ASSERT_STREQ(out[1].label, "label");
    ASSERT_EQ(out[0].index, 0); /* only element 1 was written */
}

TEST(wrong_sizes_are_refused_with_the_remedy)
{
    struct thing_v2 t;
    memset(&t, 0, sizeof t);
    size_t stride = 12345;
    ASSERT_STATUS(gpumem__struct_check("gpumem_x", "out", &thing, &t, 1, &stride),
                  GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(gpumem_last_error(),
                    "gpumem_x: out.struct_size is 0 (not set): set "
                    "it to sizeof(thing), as GPUMEM_STRUCT_INIT(thing) "
                    "does");
    t.struct_size = sizeof(struct thing_v1) - 1;
    ASSERT_STATUS(gpumem__struct_check("gpumem_x", "out[0]", &thing, &t, 1, &stride),
                  GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(gpumem_last_error(), "out[0].struct_size is 15, less than the 16 "
                                         "bytes of the first thing");
    t.struct_size = sizeof(struct thing_v2) + 8;
    ASSERT_STATUS(gpumem__struct_check("gpumem_x", "out", &thing, &t, 1, &stride),
                  GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(gpumem_last_error(),
                    "out.struct_size is 40, more than this library's "
                    "sizeof(thing), 32");
    ASSERT_CONTAINS(gpumem_last_error(), "newer gpumem.h");
    /* the bounds themselves are fine */
    t.struct_size = sizeof(struct thing_v1);
    ASSERT_OK(gpumem__struct_check("gpumem_x", "out", &thing, &t, 1, &stride));
    ASSERT_EQ(stride, 16);
    t.struct_size = sizeof(struct thing_v2);
    ASSERT_OK(gpumem__struct_check("gpumem_x", "out", &thing, &t, 1, &stride));
    ASSERT_EQ(stride, 32);
    /* no element: nothing is read */
    t.struct_size = 0;
    ASSERT_OK(gpumem__struct_check("gpumem_x", "out", &thing, &t, 0, &stride));
    ASSERT_EQ(stride, sizeof(struct thing_v2));
    ASSERT_OK(gpumem__struct_check("gpumem_x", "out", &thing, NULL, 4, &stride));
}

/* The first version's sizes are the ABI of gpumem 0.2 (LP64 and the like): a
 * change here breaks every program built against it. */
TEST(first_version_sizes)
{
    if (alignof(uint64_t) != 8 || sizeof(int) != 4) {
        printf("first_version_sizes: not an LP64-like ABI, sizes not pinned\n");
        return;
    }
    ASSERT_EQ(gpumem__physical_device_struct.min_size, 216);
    ASSERT_EQ(gpumem__logical_device_config_struct.min_size, 20);
    ASSERT_EQ(gpumem__logical_device_struct.min_size, 89);
    ASSERT_EQ(gpumem__memory_info_struct.min_size, 80);
    ASSERT_EQ(gpumem__physical_device_struct.size, sizeof(gpumem_physical_device));
    ASSERT_EQ(gpumem__logical_device_config_struct.size,
              sizeof(gpumem_logical_device_config));
    ASSERT_EQ(gpumem__logical_device_struct.size, sizeof(gpumem_logical_device));
    ASSERT_EQ(gpumem__memory_info_struct.size, sizeof(gpumem_memory_info));
    ASSERT_STREQ(gpumem__memory_info_struct.name, "gpumem_memory_info");
}

int main(void)
{
    RUN(an_old_layout_gets_only_its_fields);
    RUN(an_old_layout_is_read_with_defaults_for_the_rest);
    RUN(the_library_layout_round_trips);
    RUN(wrong_sizes_are_refused_with_the_remedy);
    RUN(first_version_sizes);
    HARNESS_EXIT();
}
