/* lib/escape.c (issue 33, item 4): UTF-8 checked byte by byte, JSON strings that
 * are valid UTF-8 whatever the bytes, terminal text without control characters,
 * and every writer bounded by the buffer it is given. */
#include "escape.h"
#include "harness.h"
#include "utf8_check.h"

#include <stdlib.h>
#include <string.h>

/* Whether s[0, n) is well-formed UTF-8 (tests/utf8_check.h: a decoder written
 * apart from escape.c's). */
static bool valid_utf8(const unsigned char *s, size_t n)
{
    return utf8_check(s, n, false, false);
}

static const char *json(const char *s)
{
    static char out[512];
    size_t n = gpumem__json_string(s, out, sizeof out);
    CHECK(n < sizeof out);
    return out;
}

TEST(json_strings)
{
    ASSERT_STREQ(json(""), "\"\"");
    ASSERT_STREQ(json("plain"), "\"plain\"");
    ASSERT_STREQ(json("a\"b\\c"), "\"a\\\"b\\\\c\"");
    ASSERT_STREQ(json("\x01\n\x1f\x7f"), "\"\\u0001\\u000a\\u001f\\u007f\"");
    ASSERT_STREQ(json("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
                 "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"");
    /* gpumem_set_tag("\xff\xfe") of the issue: one U+FFFD per byte */
    ASSERT_STREQ(json("\xff\xfe"), "\"\\ufffd\\ufffd\"");
    ASSERT_STREQ(json("bad\xff"), "\"bad\\ufffd\"");
    /* stray continuation, overlong, surrogate, past U+10FFFF, cut short */
    ASSERT_STREQ(json("\x80"), "\"\\ufffd\"");
    ASSERT_STREQ(json("\xc0\xaf"), "\"\\ufffd\\ufffd\"");
    ASSERT_STREQ(json("\xe0\x80\xaf"), "\"\\ufffd\\ufffd\\ufffd\"");
    ASSERT_STREQ(json("\xed\xa0\x80"), "\"\\ufffd\\ufffd\\ufffd\"");
    ASSERT_STREQ(json("\xf4\x90\x80\x80"), "\"\\ufffd\\ufffd\\ufffd\\ufffd\"");
    ASSERT_STREQ(json("\xe2\x82"), "\"\\ufffd\\ufffd\"");
    ASSERT_STREQ(json("x\xe2\x82y"), "\"x\\ufffd\\ufffdy\"");
}

/* Cut short like snprintf, after the last piece that fits whole, never past
 * `size`; the length says what the whole takes. */
TEST(json_bounded)
{
    struct {
        char out[8];
        char guard[16];
    } g;
    memset(g.guard, 0x5a, sizeof g.guard);
    size_t n = gpumem__json_string("ab\xff\xff", g.out, sizeof g.out);
    ASSERT_EQ(n, (size_t)16);
    ASSERT_STREQ(g.out, "\"ab"); /* \ufffd does not fit whole in what is left */
    for (size_t i = 0; i < sizeof g.guard; i++)
        ASSERT_EQ((unsigned char)g.guard[i], 0x5a);
    ASSERT_EQ(gpumem__json_string("ab", NULL, 0), (size_t)4);
    ASSERT_EQ(gpumem__json_string("\xc3\xa9", g.out, 3), (size_t)4);
    ASSERT_STREQ(g.out, "\""); /* é is not cut in half */
}

TEST(terminal_text)
{
    char out[64];
    ASSERT_STREQ(gpumem__terminal_text("plain caf\xc3\xa9", out, sizeof out),
                 "plain caf\xc3\xa9");
    ASSERT_STREQ(gpumem__terminal_text("bad\xff", out, sizeof out), "bad?");
    ASSERT_STREQ(gpumem__terminal_text("\x1b[2J\x07\x7f\n", out, sizeof out), "?[2J???");
    /* C1 controls: CSI as one byte (not UTF-8) and as U+009B */
    ASSERT_STREQ(gpumem__terminal_text("\x9b"
                                       "2J \xc2\x9b"
                                       "2J \xc2\xa0",
                                       out, sizeof out),
                 "?2J ?2J \xc2\xa0");
    /* whole characters only, never past `size` */
    ASSERT_STREQ(gpumem__terminal_text("ab\xc3\xa9", out, 4), "ab");
    ASSERT_STREQ(gpumem__terminal_text("abc", out, 1), "");
}

/* Random bytes: the JSON is valid UTF-8 and a JSON string (no raw control byte,
 * quotes only at its ends), and the terminal text has no control character. */
TEST(random_bytes)
{
    srand(33);
    unsigned char in[64];
    char out[GPUMEM_JSON_STRING_MAX(sizeof in) + 1], term[sizeof in + 1];
    for (int round = 0; round < 20000; round++) {
        size_t n = (size_t)(rand() % (int)sizeof in);
        for (size_t i = 0; i < n; i++)
            in[i] = (unsigned char)(rand() % 255 + 1);
        in[n] = '\0';
        size_t len = gpumem__json_string((const char *)in, out, sizeof out);
        ASSERT_TRUE(len < sizeof out);
        ASSERT_EQ(strlen(out), len);
        ASSERT_TRUE(valid_utf8((const unsigned char *)out, len));
        ASSERT_TRUE(out[0] == '"' && out[len - 1] == '"');
        for (size_t i = 1; i + 1 < len; i++) {
            ASSERT_TRUE((unsigned char)out[i] >= 0x20 && out[i] != 0x7f);
            if (out[i] == '"')
                ASSERT_EQ(out[i - 1], '\\');
            if (out[i] == '\\')
                i++; /* the escaped character */
        }
        gpumem__terminal_text((const char *)in, term, sizeof term);
        size_t t = strlen(term);
        ASSERT_TRUE(valid_utf8((const unsigned char *)term, t));
        for (size_t i = 0; i < t; i++) {
            unsigned char c = (unsigned char)term[i];
            ASSERT_TRUE(c >= 0x20 && c != 0x7f);
            if (c == 0xC2)
                ASSERT_TRUE((unsigned char)term[i + 1] >= 0xA0);
        }
    }
}

int main(void)
{
    RUN(json_strings);
    RUN(json_bounded);
    RUN(terminal_text);
    RUN(random_bytes);
    HARNESS_EXIT();
}
