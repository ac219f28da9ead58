/* Errors: every status has a distinct string and name and unknown values have the
 * fallbacks; the last-error message starts empty, is per thread, survives successes,
 * may quote itself and is truncated safely; gpumem__format_bytes' table. */
#include "harness.h"
#include "internal.h"

#include <limits.h>
#include <pthread.h>
#include <stdlib.h>

/* Runs first: nothing has failed on the main thread yet. */
TEST(last_error_starts_empty)
{
    ASSERT_TRUE(gpumem_last_error() != NULL);
    ASSERT_STREQ(gpumem_last_error(), "");
}

TEST(status_strings_and_names)
{
    static const struct {
        gpumem_status s;
        const char *name, *string;
    } all[] = {
        {GPUMEM_OK, "GPUMEM_OK", "success"},
        {GPUMEM_ERR_INVALID_ARGUMENT, "GPUMEM_ERR_INVALID_ARGUMENT", "invalid argument"},
        {GPUMEM_ERR_NO_SUCH_DEVICE, "GPUMEM_ERR_NO_SUCH_DEVICE", "no such device"},
        {GPUMEM_ERR_ALREADY_INITIALIZED, "GPUMEM_ERR_ALREADY_INITIALIZED",
         "devices already initialized"},
        {GPUMEM_ERR_OUT_OF_MEMORY, "GPUMEM_ERR_OUT_OF_MEMORY", "out of memory"},
        {GPUMEM_ERR_INVALID_POINTER, "GPUMEM_ERR_INVALID_POINTER", "invalid pointer"},
        {GPUMEM_ERR_BACKEND, "GPUMEM_ERR_BACKEND", "backend (driver) failure"},
        {GPUMEM_ERR_UNSUPPORTED, "GPUMEM_ERR_UNSUPPORTED", "unsupported"},
    };
    const size_t n = sizeof all / sizeof all[0];
    for (size_t i = 0; i < n; i++) {
        ASSERT_EQ(all[i].s, i); /* the numbers are stable */
        ASSERT_STREQ(gpumem_status_name(all[i].s), all[i].name);
        ASSERT_STREQ(gpumem_status_string(all[i].s), all[i].string);
        for (size_t j = 0; j < i; j++) {
            const char *si = gpumem_status_string(all[i].s),
                       *sj = gpumem_status_string(all[j].s);
            const char *ni = gpumem_status_name(all[i].s),
                       *nj = gpumem_status_name(all[j].s);
            if (strcmp(si, sj) == 0)
                HARNESS_FAIL("%s and %s share the string \"%s\"", all[i].name,
                             all[j].name, si);
            if (strcmp(ni, nj) == 0)
                HARNESS_FAIL("%s and %s share the name %s", all[i].name, all[j].name, ni);
        }
    }
}

TEST(unknown_status)
{
    const int unknown[] = {8, 9, 100, -1, INT_MAX, INT_MIN};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        ASSERT_STREQ(gpumem_status_string((gpumem_status)unknown[i]),
                     "unknown gpumem status");
        ASSERT_STREQ(gpumem_status_name((gpumem_status)unknown[i]), "GPUMEM_ERR_UNKNOWN");
    }
}

TEST(fail_records_and_returns)
{
    ASSERT_STATUS(gpumem__fail(GPUMEM_ERR_NO_SUCH_DEVICE, "gpumem_x(GPU:%d): no %s", 7,
                               "GPU"),
                  GPUMEM_ERR_NO_SUCH_DEVICE);
    ASSERT_STREQ(gpumem_last_error(), "gpumem_x(GPU:7): no GPU");

    /* A success does not clear it. */
    gpumem_options o;
    ASSERT_OK(gpumem_options_init(&o));
    ASSERT_STREQ(gpumem_last_error(), "gpumem_x(GPU:7): no GPU");

    /* The message may quote the previous one. */
    ASSERT_STATUS(gpumem__fail(GPUMEM_ERR_BACKEND, "outer: %s", gpumem_last_error()),
                  GPUMEM_ERR_BACKEND);
    ASSERT_STREQ(gpumem_last_error(), "outer: gpumem_x(GPU:7): no GPU");

    /* The next failure replaces it. */
    gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "second");
    ASSERT_STREQ(gpumem_last_error(), "second");
    gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "%s", "");
    ASSERT_STREQ(gpumem_last_error(), "");
}

TEST(truncation)
{
    char big[2000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    big[0] = 'A';
    ASSERT_STATUS(gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "%s", big),
                  GPUMEM_ERR_OUT_OF_MEMORY);
    const char *e = gpumem_last_error();
    ASSERT_EQ(strlen(e), 511);
    ASSERT_EQ(e[0], 'A');
    ASSERT_EQ(e[507], 'x');
    ASSERT_STREQ(e + 508, "...");

    /* Exactly 511 characters fit without "...". */
    big[511] = '\0';
    gpumem__fail(GPUMEM_ERR_OUT_OF_MEMORY, "%s", big);
    ASSERT_EQ(strlen(gpumem_last_error()), 511);
    ASSERT_EQ(gpumem_last_error()[510], 'x');
    big[511] = 'x';

    /* The cut never splits a UTF-8 sequence: 507 ASCII bytes, then two-byte
     * characters; byte 508 is the second byte of one. */
    char utf8[1200];
    memset(utf8, 'a', 507);
    size_t len = 507;
    while (len + 3 < sizeof utf8) {
        utf8[len++] = (char)0xC3;
        utf8[len++] = (char)0xA9; /* U+00E9 */
    }
    utf8[len] = '\0';
    gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "%s", utf8);
    e = gpumem_last_error();
    ASSERT_LE(strlen(e), 511);
    ASSERT_EQ(strlen(e), 510);
    ASSERT_STREQ(e + 507, "...");
    ASSERT_EQ(e[506], 'a');
}

/* ------------------------------------------------------------- threads -- */

static pthread_barrier_t barrier;

struct thread_case {
    const char *message;
    char seen_before[64]; /* the thread's last error before it failed */
    char seen_after[600];
    gpumem_status status;
};

static void *thread_main(void *arg)
{
    struct thread_case *c = arg;
    snprintf(c->seen_before, sizeof c->seen_before, "%s", gpumem_last_error());
    c->status = gpumem__fail(GPUMEM_ERR_BACKEND, "%s", c->message);
    /* Both threads have failed before either reads its message back. */
    pthread_barrier_wait(&barrier);
    snprintf(c->seen_after, sizeof c->seen_after, "%s", gpumem_last_error());
    pthread_barrier_wait(&barrier);
    return NULL;
}

/* A log message longer than the log's 1024-byte buffer ends with "..." too, as
 * the last error does; a short one arrives whole. */
static char logged[2048];
static void keep_log(void *user_data, int level, const char *message)
{
    (void)user_data;
    (void)level;
    snprintf(logged, sizeof logged, "%s", message);
}

TEST(log_truncation)
{
    struct options o = {.log = keep_log, .log_level = GPUMEM_LOG_DEBUG};
    char long_text[1500];
    memset(long_text, 'x', sizeof long_text - 1);
    long_text[sizeof long_text - 1] = '\0';
    gpumem__log(&o, GPUMEM_LOG_ERROR, "start %s", long_text);
    ASSERT_EQ(strlen(logged), 1023);
    ASSERT_TRUE(strncmp(logged, "start xxx", 9) == 0);
    ASSERT_STREQ(logged + 1020, "...");
    gpumem__log(&o, GPUMEM_LOG_INFO, "short %d", 42);
    ASSERT_STREQ(logged, "short 42");
    logged[0] = '\0';
    o.log_level = GPUMEM_LOG_WARNING;
    gpumem__log(&o, GPUMEM_LOG_INFO, "filtered");
    ASSERT_STREQ(logged, "");
}

TEST(last_error_is_per_thread)
{
    gpumem__fail(GPUMEM_ERR_INVALID_ARGUMENT, "main thread's message");
    struct thread_case cases[2] = {{.message = "thread one: cuMemAlloc_v2 failed"},
                                   {.message = "thread two: no such device"}};
    ASSERT_EQ(pthread_barrier_init(&barrier, NULL, 2), 0);
    pthread_t threads[2];
    for (int i = 0; i < 2; i++)
        ASSERT_EQ(pthread_create(&threads[i], NULL, thread_main, &cases[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(threads[i], NULL);
    pthread_barrier_destroy(&barrier);
    for (int i = 0; i < 2; i++) {
        ASSERT_STREQ(cases[i].seen_before, ""); /* a new thread starts empty */
        ASSERT_EQ(cases[i].status, GPUMEM_ERR_BACKEND);
        ASSERT_STREQ(cases[i].seen_after, cases[i].message);
    }
    ASSERT_STREQ(gpumem_last_error(), "main thread's message");
}

/* ---------------------------------------------------------- byte counts -- */

TEST(format_bytes)
{
    static const struct {
        uint64_t bytes;
        const char *text;
    } table[] = {
        {0, "0 B"},
        {1, "1 B"},
        {255, "255 B"},
        {1023, "1023 B"},
        {1024, "1.00 KiB"},
        {1536, "1.50 KiB"},
        {1048575, "1.00 MiB"}, /* not "1024.00 KiB" */
        {GPUMEM_MIB, "1.00 MiB"},
        {3 * GPUMEM_MIB / 2, "1.50 MiB"},
        {500 * GPUMEM_MIB, "500.00 MiB"},
        {GPUMEM_GIB - 1, "1.00 GiB"},
        {12 * GPUMEM_GIB, "12.00 GiB"},
        {GPUMEM_TIB, "1.00 TiB"},
        {64 * GPUMEM_TIB, "64.00 TiB"},
        {1024 * GPUMEM_TIB, "1.00 PiB"},
        {UINT64_C(1) << 60, "1.00 EiB"},
        {UINT64_MAX, "16.00 EiB"},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        char buf[GPUMEM_BYTES_BUF];
        memset(buf, '#', sizeof buf);
        const char *r = gpumem__format_bytes(table[i].bytes, buf, sizeof buf);
        ASSERT_TRUE(r == buf);
        ASSERT_STREQ(buf, table[i].text);
    }
    /* Short buffers: always NUL-terminated inside them, nothing written past. */
    char small[8];
    memset(small, '#', sizeof small);
    gpumem__format_bytes(12 * GPUMEM_GIB, small, 5);
    ASSERT_STREQ(small, "12.0");
    ASSERT_EQ(small[5], '#');
    gpumem__format_bytes(255, small, 1);
    ASSERT_STREQ(small, "");
    small[0] = '#';
    gpumem__format_bytes(255, small, 0);
    ASSERT_EQ(small[0], '#');
}

/* A lower layer's reason: formatted into the struct, returned status, NULL ignored,
 * cut with "..." like any message. */
TEST(reason)
{
    struct reason why;
    ASSERT_STATUS(gpumem__reason(&why, GPUMEM_ERR_BACKEND, "cuMemCreate failed: %d", 2),
                  GPUMEM_ERR_BACKEND);
    ASSERT_STREQ(why.text, "cuMemCreate failed: 2");
    ASSERT_STATUS(gpumem__reason(NULL, GPUMEM_ERR_OUT_OF_MEMORY, "x"),
                  GPUMEM_ERR_OUT_OF_MEMORY);
    char big[1000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    gpumem__reason(&why, GPUMEM_ERR_INVALID_ARGUMENT, "%s", big);
    ASSERT_EQ(strlen(why.text), GPUMEM_REASON_LEN - 1);
    ASSERT_CONTAINS(why.text + GPUMEM_REASON_LEN - 4, "...");
}

/* Quoted values: short ones whole, long ones as start ... end within the bound,
 * control characters and quotes escaped, no UTF-8 sequence cut in half. */
TEST(quote)
{
    char buf[GPUMEM_QUOTE_BUF];
    ASSERT_STREQ(gpumem__quote("12GiB", buf, GPUMEM_QUOTE_BUF), "'12GiB'");
    ASSERT_STREQ(gpumem__quote("", buf, GPUMEM_QUOTE_BUF), "''");
    ASSERT_STREQ(gpumem__quote("a\nb'c", buf, GPUMEM_QUOTE_BUF), "'a\\x0ab\\x27c'");
    char longv[2001];
    for (size_t i = 0; i < sizeof longv - 1; i++)
        longv[i] = (char)('0' + i % 10);
    longv[sizeof longv - 1] = '\0';
    gpumem__quote(longv, buf, GPUMEM_QUOTE_BUF);
    ASSERT_LE(strlen(buf), (size_t)GPUMEM_QUOTE_MAX + 7);
    ASSERT_CONTAINS(buf, "'01234");
    ASSERT_CONTAINS(buf, " ... ");
    ASSERT_CONTAINS(buf, "6789'");
    /* every byte a control character: the escapes stay within the buffer */
    memset(longv, '\x01', sizeof longv - 1);
    ASSERT_LE(strlen(gpumem__quote(longv, buf, GPUMEM_QUOTE_BUF)), sizeof buf - 1);
    /* two-byte sequences (é) across both cuts */
    char utf[401] = "";
    for (int i = 0; i < 200; i++)
        strcat(utf, "\xc3\xa9");
    gpumem__quote(utf, buf, GPUMEM_QUOTE_BUF);
    const char *dots = strstr(buf, " ... ");
    ASSERT_TRUE(dots != NULL);
    ASSERT_EQ((unsigned char)dots[-1], 0xa9);
    ASSERT_EQ((unsigned char)dots[5], 0xc3);
}

/* Issue 33, item 1: a long value whose end (or start) is a run of UTF-8
 * continuation bytes was written whole into the buffer (the search for the start
 * of a sequence walked back over all of them), 3,000 bytes into 272 on the stack.
 * Each end keeps at most GPUMEM_QUOTE_MAX / 2 bytes whatever the bytes are, and a
 * buffer smaller than GPUMEM_QUOTE_BUF gets a quote cut short, never more. The
 * guard bytes after the buffer catch a write past it without ASan too. */
TEST(quote_stays_in_its_buffer)
{
    static char value[3010];
    memcpy(value, "1GiB", 4);
    memset(value + 4, 0xbe, 3000);
    value[3004] = '\0';
    struct {
        char buf[GPUMEM_QUOTE_BUF];
        char guard[64];
    } g;
    memset(g.guard, 0x5a, sizeof g.guard);
    gpumem__quote(value, g.buf, sizeof g.buf);
    ASSERT_LE(strlen(g.buf), (size_t)GPUMEM_QUOTE_MAX + 7);
    ASSERT_CONTAINS(g.buf, "'1GiB");
    ASSERT_CONTAINS(g.buf, " ... ");
    for (size_t i = 0; i < sizeof g.guard; i++)
        ASSERT_EQ((unsigned char)g.guard[i], 0x5a);
    /* continuation bytes from the first byte on, and every byte a control one */
    unsigned char fills[] = {0x80, 0xbf, 0x01, 0xff, 0xc3};
    for (size_t f = 0; f < sizeof fills; f++) {
        memset(value, fills[f], 3004);
        gpumem__quote(value, g.buf, sizeof g.buf);
        ASSERT_LE(strlen(g.buf), sizeof g.buf - 1);
        for (size_t i = 0; i < sizeof g.guard; i++)
            ASSERT_EQ((unsigned char)g.guard[i], 0x5a);
    }
    /* small buffers: cut short, quotes kept, never past `size` */
    char small[8];
    memset(small, 0x5a, sizeof small);
    ASSERT_STREQ(gpumem__quote("abcdefghij", small, 6), "'abc'");
    ASSERT_EQ((unsigned char)small[6], 0x5a);
    ASSERT_STREQ(gpumem__quote("\x01\x02", small, 7), "'\\x01'");
    ASSERT_STREQ(gpumem__quote("\x01\x02", small, 6), "''"); /* no escape cut */
    ASSERT_STREQ(gpumem__quote("abc", small, 2), "");
    ASSERT_STREQ(gpumem__quote("abc", small, 3), "''");
}

/* The reproduction of issue 33: GPUMEM_MIN_SYSTEM_MEMORY_MB set to "1GiB" and
 * 3,000 bytes of 0xbe killed gpumem_runtime_create with SIGSEGV; now it is refused
 * with a message that names the variable and quotes the value short. */
TEST(long_continuation_bytes_in_a_variable)
{
    static char value[3010];
    memcpy(value, "1GiB", 4);
    memset(value + 4, 0xbe, 3000);
    value[3004] = '\0';
    setenv("GPUMEM_MIN_SYSTEM_MEMORY_MB", value, 1);
    gpumem_runtime *rt = NULL;
    gpumem_status s = gpumem_runtime_create(NULL, &rt);
    unsetenv("GPUMEM_MIN_SYSTEM_MEMORY_MB");
    ASSERT_STATUS(s, GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(gpumem_last_error(), "GPUMEM_MIN_SYSTEM_MEMORY_MB");
    ASSERT_CONTAINS(gpumem_last_error(), " ... ");
    ASSERT_LE(strlen(gpumem_last_error()), (size_t)GPUMEM_ERROR_BUF - 1);
}

int main(void)
{
    RUN(last_error_starts_empty);
    RUN(status_strings_and_names);
    RUN(unknown_status);
    RUN(fail_records_and_returns);
    RUN(truncation);
    RUN(quote_stays_in_its_buffer);
    RUN(long_continuation_bytes_in_a_variable);
    RUN(log_truncation);
    RUN(last_error_is_per_thread);
    RUN(format_bytes);
    RUN(reason);
    RUN(quote);
    HARNESS_EXIT();
}
