/* Runs a libFuzzer-style target without libFuzzer (any C compiler): each file
 * named on the command line as one input (a crash found by the fuzzer, say), or
 * seeded pseudo-random inputs, every other one written in the characters that
 * sizes and device lists are made of, so that parsers get past their first byte:
 *
 *   fuzz-NAME-inputs [FILE...]
 *   fuzz-NAME-inputs --random COUNT SEED [PART/PARTS]
 *
 * With PART/PARTS (1 <= PART <= PARTS) the same COUNT inputs are made but only
 * every PARTS-th one is run, from the PART-th on: the PARTS parts together run
 * exactly the inputs of one whole run, so that they may run side by side.
 *
 * The target aborts on a violation; this returns 0 when every input ran. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t next(uint64_t *state)
{
    uint64_t x = *state += UINT64_C(0x9E3779B97F4A7C15);
    x = (x ^ (x >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94D049BB133111EB);
    return x ^ (x >> 31);
}

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return 1;
    }
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0, n;
    do {
        if (len == cap) {
            cap = cap ? 2 * cap : 4096;
            uint8_t *grown = realloc(buf, cap);
            if (!grown) {
                fprintf(stderr, "%s: out of memory\n", path);
                free(buf);
                fclose(f);
                return 1;
            }
            buf = grown;
        }
        n = fread(buf + len, 1, cap - len, f);
        len += n;
    } while (n > 0);
    fclose(f);
    LLVMFuzzerTestOneInput(buf, len);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    if ((argc == 4 || argc == 5) && strcmp(argv[1], "--random") == 0) {
        long count = strtol(argv[2], NULL, 10);
        uint64_t state = strtoull(argv[3], NULL, 10);
        long part = 1, parts = 1;
        if (argc == 5 && (sscanf(argv[4], "%ld/%ld", &part, &parts) != 2 || parts < 1 ||
                          part < 1 || part > parts)) {
            fprintf(stderr, "%s: PART/PARTS, 1 <= PART <= PARTS: '%s'\n", argv[0],
                    argv[4]);
            return 2;
        }
        static uint8_t buf[3 * 1024];
        for (long i = 0; i < count; i++) {
            size_t len = 10 + (size_t)(next(&state) % (sizeof buf - 10));
            static const char text[] = "0123456789 .,:-+eBiKMGTPkmgt\tx";
            bool as_text = i % 2;
            for (size_t j = 0; j < len; j++) {
                uint64_t r = next(&state);
                buf[j] =
                    as_text && j > 0 ? (uint8_t)text[r % (sizeof text - 1)] : (uint8_t)r;
            }
            if (as_text)
                len = 1 + len % 48; /* short, as such texts are */
            if (i % parts == part - 1)
                LLVMFuzzerTestOneInput(buf, len);
        }
        if (parts > 1)
            printf("%ld random inputs (seed %s), part %ld of %ld (inputs %ld, %ld, %ld, "
                   "...: %ld of them): no violation\n",
                   count, argv[3], part, parts, part, part + parts, part + 2 * parts,
                   (count - part) / parts + (count >= part));
        else
            printf("%ld random inputs (seed %s): no violation\n", count, argv[3]);
        return 0;
    }
    if (argc > 1 && argv[1][0] == '-') {
        fprintf(stderr, "usage: %s [FILE...] | --random COUNT SEED [PART/PARTS]\n",
                argv[0]);
        return 2;
    }
    int bad = 0;
    for (int i = 1; i < argc; i++)
        bad |= run_file(argv[i]);
    printf("%d input file(s): %s\n", argc - 1,
           bad ? "some could not be read" : "no violation");
    return bad;
}
