/* A fuzz target for what gpumem reads from a ledger file that another process
 * may have written (issue 33, item 2; docs/ledger.md, "Who may share"): a valid
 * ledger is made, then the input patches any bytes of it (its header, its
 * slots, the figures and names of processes), makes slots look live (their
 * locks taken through a second open file description, as another process
 * would), and may truncate or extend it after it is opened. A read-only opener
 * (gpumem-smi) and a process that claims a slot, publishes, admits, asks for
 * give-back and reads must get a status, never a crash or an access out of
 * bounds (run it under ASan); what a read lists is within its bounds.
 *
 * Input: byte 0 flags (bit 0..3: slots 0..3 look live; bit 4: truncate after
 * the read-only open; bit 5: no process claims a slot), bytes 1..4 the size to
 * truncate to, byte 5 the logical device and bytes 6..13 the bytes to admit,
 * then patches: 3 bytes of offset (times 3, within the file) and one byte of
 * length, then that many bytes. Built and run like fuzz_parse.c. */
#include "ledger.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define UUID  "GPU-fuzz-ledger"
#define TOTAL (UINT64_C(80) << 30)

static char dir[64], path[256];

static void die(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz-ledger: %s: %s\n", what, detail);
    abort();
}

static void setup(void)
{
    if (dir[0])
        return;
    snprintf(dir, sizeof dir, "/tmp/gpumem-fuzz-ledger-XXXXXX");
    if (!mkdtemp(dir))
        die("mkdtemp", dir);
    /* the file a process of this user creates (docs/ledger.md, "The file") */
    struct ledger_params p = {.dir = dir, .uuid = UUID, .total_bytes = TOTAL, .slots = 8};
    struct ledger *l;
    struct reason why;
    if (gpumem__ledger_open(&p, &l, &why) != GPUMEM_OK)
        die("the first open", why.text);
    snprintf(path, sizeof path, "%s", gpumem__ledger_path(l));
    gpumem__ledger_close(l);
}

static void check_entries(const struct ledger_entry *e, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (e[i].num_devices > GPUMEM_LEDGER_DEVICES || e[i].slot >= 8)
            die("an entry out of bounds", "num_devices or slot");
        if (!memchr(e[i].comm, '\0', sizeof e[i].comm))
            die("a command name not terminated", "comm");
        for (unsigned d = 0; d < e[i].num_devices; d++)
            if (!memchr(e[i].dev[d].name, '\0', sizeof e[i].dev[d].name))
                die("a device name not terminated", "name");
    }
}

static void read_all(struct ledger *l)
{
    struct ledger_entry *e = calloc(8, sizeof *e);
    size_t n = 0;
    struct reason why;
    if (!e)
        return;
    if (gpumem__ledger_read(l, e, 8, &n, &why) == GPUMEM_OK) {
        if (n > 8)
            die("more live processes than slots", "read");
        check_entries(e, n);
    }
    free(e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 14)
        return 0;
    setup();
    /* a fresh, valid ledger of 8 slots, then the patches */
    unlink(path);
    struct ledger_params p = {.dir = dir, .uuid = UUID, .total_bytes = TOTAL, .slots = 8};
    struct ledger *l;
    struct reason why;
    if (gpumem__ledger_open(&p, &l, &why) != GPUMEM_OK)
        die("a fresh open", why.text);
    gpumem__ledger_close(l);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        die("open", path);
    struct stat st;
    fstat(fd, &st);
    size_t file = (size_t)st.st_size;
    uint8_t flags = data[0];
    uint32_t cut;
    memcpy(&cut, data + 1, 4);
    unsigned dev = data[5];
    uint64_t bytes;
    memcpy(&bytes, data + 6, 8);
    for (size_t at = 14; at + 4 <= size;) {
        size_t off =
            ((size_t)data[at] | (size_t)data[at + 1] << 8 | (size_t)data[at + 2] << 16) *
            3 % file;
        size_t len = data[at + 3];
        at += 4;
        if (len > size - at)
            len = size - at;
        if (len > file - off)
            len = file - off;
        if (pwrite(fd, data + at, len, (off_t)off) != (ssize_t)len)
            die("pwrite", path);
        at += len;
    }
    /* slots that look live: their locks held by another open file description */
    for (unsigned i = 0; i < 4; i++) {
        if (!(flags & (1u << i)))
            continue;
        struct flock fl = {.l_type = F_WRLCK,
                           .l_whence = SEEK_SET,
                           .l_start = 256 + (off_t)i * (64 + 80 * GPUMEM_LEDGER_DEVICES),
                           .l_len = 1};
        fcntl(fd, F_OFD_SETLK, &fl);
    }

    struct ledger_params ro = {.dir = dir, .uuid = UUID, .read_only = true};
    struct ledger *reader = NULL, *writer = NULL;
    if (gpumem__ledger_open(&ro, &reader, &why) != GPUMEM_OK)
        reader = NULL;
    p.lock_wait_ms = 1;
    if (!(flags & 0x20) && gpumem__ledger_open(&p, &writer, &why) != GPUMEM_OK)
        writer = NULL;
    /* resized under a reader's feet (a process that maps the file for writing
     * trusts whoever may write it: docs/ledger.md) */
    if ((flags & 0x10) && !writer)
        if (ftruncate(fd, (off_t)(cut % (2 * file + 1))) != 0)
            die("ftruncate", path);
    if (reader)
        read_all(reader);
    if (writer) {
        gpumem__ledger_set_device(writer, dev % GPUMEM_LEDGER_DEVICES,
                                  LEDGER_POLICY_GROWTH, bytes);
        gpumem__ledger_set_name(writer, dev % GPUMEM_LEDGER_DEVICES, "/device:GPU:0");
        gpumem_status s = gpumem__ledger_admit(writer, dev, bytes, NULL, &why);
        if (s != GPUMEM_OK && s != GPUMEM_ERR_OUT_OF_MEMORY && s != GPUMEM_ERR_BACKEND &&
            s != GPUMEM_ERR_INVALID_ARGUMENT)
            die("an admission's undocumented status", why.text);
        if (s == GPUMEM_OK && bytes > TOTAL)
            die("admitted more than the GPU holds", "admit");
        gpumem__ledger_set_usage(writer, dev, bytes / 2, bytes / 2, bytes);
        struct ledger_request_result r;
        gpumem__ledger_request(writer, bytes, 0, &r, &why);
        read_all(writer);
        gpumem__ledger_unadmit(writer, dev, bytes);
    }
    gpumem__ledger_close(writer);
    gpumem__ledger_close(reader);
    close(fd);
    return 0;
}
