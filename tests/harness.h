/* A tiny test harness (after libuv's test/task.h): each check prints both sides
 * and the location on failure; a test file is a main() that runs TEST cases and
 * returns non-zero when any check failed. Meson treats exit code 77 as "skipped". */
#ifndef GPUMEM_TEST_HARNESS_H
#define GPUMEM_TEST_HARNESS_H

#include "gpumem.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static int harness_failures;
static const char *harness_case = "";

#define HARNESS_FAIL(...)                                                                \
    do {                                                                                 \
        fprintf(stderr, "%s:%d: [%s] ", __FILE__, __LINE__, harness_case);               \
        fprintf(stderr, __VA_ARGS__);                                                    \
        fputc('\n', stderr);                                                             \
        harness_failures++;                                                              \
    } while (0)

#define CHECK(cond)                                                                      \
    do {                                                                                 \
        if (!(cond))                                                                     \
            HARNESS_FAIL("check failed: %s", #cond);                                     \
    } while (0)

#define ASSERT_TRUE(cond)  CHECK(cond)
#define ASSERT_FALSE(cond) CHECK(!(cond))

#define ASSERT_EQ(a, b)                                                                  \
    do {                                                                                 \
        unsigned long long a_ = (unsigned long long)(a);                                 \
        unsigned long long b_ = (unsigned long long)(b);                                 \
        if (a_ != b_)                                                                    \
            HARNESS_FAIL("%s == %s: %llu != %llu", #a, #b, a_, b_);                      \
    } while (0)

#define ASSERT_NE(a, b)                                                                  \
    do {                                                                                 \
        unsigned long long a_ = (unsigned long long)(a);                                 \
        unsigned long long b_ = (unsigned long long)(b);                                 \
        if (a_ == b_)                                                                    \
            HARNESS_FAIL("%s != %s: both %llu", #a, #b, a_);                             \
    } while (0)

#define ASSERT_LE(a, b)                                                                  \
    do {                                                                                 \
        unsigned long long a_ = (unsigned long long)(a);                                 \
        unsigned long long b_ = (unsigned long long)(b);                                 \
        if (!(a_ <= b_))                                                                 \
            HARNESS_FAIL("%s <= %s: %llu > %llu", #a, #b, a_, b_);                       \
    } while (0)

#define ASSERT_STATUS(expr, expected)                                                    \
    do {                                                                                 \
        gpumem_status s_ = (expr);                                                       \
        if (s_ != (expected))                                                            \
            HARNESS_FAIL("%s: got %s, expected %s (last error: %s)", #expr,              \
                         gpumem_status_name(s_), gpumem_status_name(expected),           \
                         gpumem_last_error());                                           \
    } while (0)

#define ASSERT_OK(expr) ASSERT_STATUS(expr, GPUMEM_OK)

#define ASSERT_STREQ(a, b)                                                               \
    do {                                                                                 \
        const char *a_ = (a), *b_ = (b);                                                 \
        if (strcmp(a_, b_) != 0)                                                         \
            HARNESS_FAIL("%s == %s: \"%s\" != \"%s\"", #a, #b, a_, b_);                  \
    } while (0)

#define ASSERT_CONTAINS(haystack, needle)                                                \
    do {                                                                                 \
        const char *h_ = (haystack), *n_ = (needle);                                     \
        if (h_ == NULL || strstr(h_, n_) == NULL)                                        \
            HARNESS_FAIL("\"%s\" does not contain \"%s\"", h_ ? h_ : "(null)", n_);      \
    } while (0)

/* Runs one case: TEST(name) { ... } defines it, RUN(name) calls it. */
#define TEST(name) static void test_##name(void)
#define RUN(name)                                                                        \
    do {                                                                                 \
        int before_ = harness_failures;                                                  \
        harness_case = #name;                                                            \
        test_##name();                                                                   \
        printf("%s %s\n", harness_failures == before_ ? "ok  " : "FAIL", #name);         \
        fflush(stdout);                                                                  \
    } while (0)

#define HARNESS_EXIT()                                                                   \
    do {                                                                                 \
        if (harness_failures)                                                            \
            fprintf(stderr, "%d check(s) failed\n", harness_failures);                   \
        return harness_failures ? 1 : 0;                                                 \
    } while (0)

#endif /* GPUMEM_TEST_HARNESS_H */
