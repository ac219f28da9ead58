/* gpumem_snapshot_json and gpumem_snapshot_file through the public API: the
 * two-call idiom and its refusals, one logical device or all, files, and
 * GPUMEM_OOM_SNAPSHOT writing once, at the first out of memory (the JSON itself
 * is checked against the viewer's rules by tests/python/test_snapshot.py). */
#include "api_util.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char *snapshot_of(gpumem_runtime *rt, int logical)
{
    size_t n = 0;
    ASSERT_OK(gpumem_snapshot_json(rt, logical, NULL, 0, &n));
    char *buf = malloc(n);
    ASSERT_OK(gpumem_snapshot_json(rt, logical, buf, n, &n));
    ASSERT_EQ(strlen(buf) + 1, n);
    return buf;
}

static size_t count(const char *s, const char *what)
{
    size_t k = 0;
    for (const char *p = strstr(s, what); p; p = strstr(p + 1, what))
        k++;
    return k;
}

TEST(two_calls_and_refusals)
{
    gpumem_runtime *rt = sim_runtime("SNAP:2GiB,SNAP:1GiB");
    void *p[3];
    ASSERT_OK(gpumem_set_tag("c-test"));
    for (int i = 0; i < 3; i++)
        ASSERT_OK(gpumem_malloc(rt, i % 2, 1000 + (size_t)i, &p[i]));
    ASSERT_OK(gpumem_set_tag(NULL));

    char *all = snapshot_of(rt, -1);
    ASSERT_TRUE(strncmp(all, "{\"format\":\"gpumem-snapshot\",\"version\":1,", 40) == 0);
    ASSERT_EQ(count(all, "\"state\":\"active_allocated\""), 3);
    ASSERT_EQ(count(all, "\"tag\":\"c-test\""), 3);
    ASSERT_EQ(count(all, "\"requested_size\":1001,\"state\""), 1);
    ASSERT_CONTAINS(all, "\"device_traces\":[[],[]]");
    char *one = snapshot_of(rt, 1);
    ASSERT_EQ(count(one, "\"state\":\"active_allocated\""), 1);
    ASSERT_EQ(count(one, "\"device\":0"), 0);
    ASSERT_CONTAINS(one, "\"device_traces\":[[],[]]"); /* indexed by device */

    size_t n = 0;
    char small[64] = "untouched";
    ASSERT_STATUS(gpumem_snapshot_json(rt, -1, small, sizeof small, &n),
                  GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(gpumem_last_error(), "the buffer holds 64");
    ASSERT_EQ(n, strlen(all) + 1); /* the size it needs now */
    ASSERT_STREQ(small, "untouched");
    ASSERT_STATUS(gpumem_snapshot_json(rt, -1, NULL, 0, NULL),
                  GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(gpumem_last_error(), "`length` is NULL");
    ASSERT_STATUS(gpumem_snapshot_json(rt, -1, NULL, 10, &n),
                  GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(gpumem_snapshot_json(rt, 2, NULL, 0, &n), GPUMEM_ERR_NO_SUCH_DEVICE);
    ASSERT_STATUS(gpumem_snapshot_file(rt, -1, "/nonexistent-dir/x.json"),
                  GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(gpumem_last_error(), "No such file or directory");
    ASSERT_STATUS(gpumem_snapshot_file(rt, -1, NULL), GPUMEM_ERR_INVALID_ARGUMENT);

    char path[] = "/tmp/gpumem-snapshot-XXXXXX";
    int fd = mkstemp(path);
    ASSERT_TRUE(fd >= 0);
    close(fd);
    ASSERT_OK(gpumem_snapshot_file(rt, -1, path));
    FILE *f = fopen(path, "r");
    char *text = calloc(1, strlen(all) + 16);
    size_t got = fread(text, 1, strlen(all) + 15, f);
    fclose(f);
    unlink(path);
    ASSERT_EQ(got, strlen(all));
    ASSERT_STREQ(text, all);
    free(text);
    free(all);
    free(one);
    for (int i = 0; i < 3; i++)
        ASSERT_OK(gpumem_free(rt, p[i]));
    gpumem_runtime_destroy(rt);
}

TEST(out_of_memory_writes_one_snapshot)
{
    char path[] = "/tmp/gpumem-oom-XXXXXX";
    int fd = mkstemp(path);
    ASSERT_TRUE(fd >= 0);
    close(fd);
    unlink(path);
    setenv("GPUMEM_OOM_SNAPSHOT", path, 1);
    gpumem_runtime *rt = env_runtime("OOM:1GiB");
    unsetenv("GPUMEM_OOM_SNAPSHOT");
    void *p, *q;
    ASSERT_OK(gpumem_malloc(rt, 0, 256 * MiB, &p));
    ASSERT_EQ(access(path, F_OK), -1); /* nothing before the out of memory */
    ASSERT_STATUS(gpumem_malloc(rt, 0, 4 * GiB, &q), GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_CONTAINS(gpumem_last_error(), "gpumem_malloc(/device:GPU:0, 4.00 GiB)");
    ASSERT_CONTAINS(gpumem_last_error(), "largest live: 256.00 MiB");
    ASSERT_EQ(access(path, F_OK), 0);
    unlink(path);
    ASSERT_STATUS(gpumem_malloc(rt, 0, 4 * GiB, &q), GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_EQ(access(path, F_OK), -1); /* the first only */
    ASSERT_OK(gpumem_free(rt, p));
    gpumem_runtime_destroy(rt);
}

/* The entries of folder `dir`, "." and ".." left out. */
static int entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    ASSERT_TRUE(d != NULL);
    for (struct dirent *e; d && (e = readdir(d));)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    if (d)
        closedir(d);
    return n;
}

static void read_file(const char *path, char *out, size_t n)
{
    FILE *f = fopen(path, "r");
    size_t got = f ? fread(out, 1, n - 1, f) : 0;
    out[got] = '\0';
    if (f)
        fclose(f);
}

/* Issue 33, item 3: a symbolic link planted where a snapshot or a trace goes had
 * its target overwritten. Now a link at the path is refused and left alone (its
 * target untouched), and a file is written whole or not at all: to a new file in
 * the same folder, renamed onto the path (a new inode; a hard link to the old
 * file keeps the old text), with nothing left behind, whether it worked or not. */
TEST(files_are_written_whole_and_never_through_a_link)
{
    char dir[] = "/tmp/gpumem-snapfiles-XXXXXX", target[128], link_path[128], path[128],
         old_name[128], text[256];
    ASSERT_TRUE(mkdtemp(dir) != NULL);
    snprintf(target, sizeof target, "%s/target", dir);
    snprintf(link_path, sizeof link_path, "%s/snap.json", dir);
    snprintf(path, sizeof path, "%s/real.json", dir);
    snprintf(old_name, sizeof old_name, "%s/old.json", dir);
    FILE *f = fopen(target, "w");
    fputs("precious", f);
    fclose(f);
    ASSERT_EQ(symlink(target, link_path), 0);

    gpumem_runtime *rt = sim_runtime("FILE:1GiB");
    ASSERT_STATUS(gpumem_snapshot_file(rt, -1, link_path), GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(gpumem_last_error(), "symbolic link");
    ASSERT_STATUS(gpumem_history_trace_file(rt, -1, link_path),
                  GPUMEM_ERR_INVALID_ARGUMENT);
    read_file(target, text, sizeof text);
    ASSERT_STREQ(text, "precious");
    struct stat st;
    ASSERT_EQ(lstat(link_path, &st), 0);
    ASSERT_TRUE(S_ISLNK(st.st_mode));
    /* not a regular file: refused too */
    ASSERT_STATUS(gpumem_snapshot_file(rt, -1, dir), GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(gpumem_last_error(), "not a regular file");

    /* replaced by rename: the old inode keeps the old text */
    f = fopen(path, "w");
    fputs("old", f);
    fclose(f);
    ASSERT_EQ(link(path, old_name), 0);
    struct stat before, after;
    ASSERT_EQ(stat(path, &before), 0);
    ASSERT_OK(gpumem_snapshot_file(rt, -1, path));
    ASSERT_EQ(stat(path, &after), 0);
    ASSERT_TRUE(before.st_ino != after.st_ino);
    read_file(old_name, text, sizeof text);
    ASSERT_STREQ(text, "old");
    read_file(path, text, sizeof text);
    ASSERT_TRUE(strncmp(text, "{\"format\":\"gpumem-snapshot\"", 27) == 0);
    ASSERT_OK(gpumem_history_trace_file(rt, -1, path));
    read_file(path, text, sizeof text);
    ASSERT_TRUE(strncmp(text, "# gpumem event history", 22) == 0);
    ASSERT_EQ(entries(dir), 4); /* target, the link, real.json, old.json */
    /* a name of 250 bytes: its temporary name must still fit in NAME_MAX */
    char longname[400];
    int at = snprintf(longname, sizeof longname, "%s/", dir);
    memset(longname + at, 'n', 250);
    longname[at + 250] = '\0';
    ASSERT_OK(gpumem_snapshot_file(rt, -1, longname));
    ASSERT_EQ(unlink(longname), 0);

    /* the out-of-memory snapshot, in a child (it is written once per process) */
    pid_t child = fork();
    if (child == 0) {
        setenv("GPUMEM_OOM_SNAPSHOT", link_path, 1);
        gpumem_runtime *c = env_runtime("OOM:1GiB");
        void *q;
        _exit(gpumem_malloc(c, 0, 4 * GiB, &q) == GPUMEM_ERR_OUT_OF_MEMORY ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    read_file(target, text, sizeof text);
    ASSERT_STREQ(text, "precious");
    ASSERT_EQ(entries(dir), 4); /* no temporary file left */

    gpumem_runtime_destroy(rt);
    unlink(link_path);
    unlink(target);
    unlink(path);
    unlink(old_name);
    rmdir(dir);
}

TEST(no_gpu_gives_an_empty_snapshot)
{
    gpumem_runtime *rt = sim_runtime("");
    char *text = snapshot_of(rt, -1);
    ASSERT_CONTAINS(text, "\"segments\":[],\"device_traces\":[],\"devices\":[]");
    free(text);
    gpumem_runtime_destroy(rt);
}

/* `"driver_calls":{...}` as a snapshot writes GPU `physical`'s calls now: the
 * entry points called, from gpumem_list_driver_calls. */
static void expected_calls(gpumem_runtime *rt, int physical, char *out, size_t n)
{
    gpumem_driver_call e[64] = {GPUMEM_STRUCT_INIT(gpumem_driver_call)};
    size_t k = 0, len;
    ASSERT_OK(gpumem_list_driver_calls(rt, physical, e, 64, &k));
    len = (size_t)snprintf(out, n, "\"driver_calls\":{");
    bool comma = false;
    for (size_t i = 0; i < k && i < 64 && len < n; i++) {
        if (!e[i].calls)
            continue;
        len +=
            (size_t)snprintf(out + len, n - len,
                             "%s\"%s\":{\"calls\":%llu,\"ns\":%llu,\"bytes\":%llu}",
                             comma ? "," : "", e[i].name, (unsigned long long)e[i].calls,
                             (unsigned long long)e[i].ns, (unsigned long long)e[i].bytes);
        comma = true;
    }
    if (len < n)
        snprintf(out + len, n - len, "}}");
}

/* Each logical device's entry carries its physical GPU's driver calls: the two
 * logical devices of GPU 0 the same figures, GPU 1's its own. */
TEST(each_device_carries_its_gpus_driver_calls)
{
    gpumem_runtime *rt = sim_runtime("SNAP-DC:2GiB,SNAP-DC:1GiB");
    if (!rt)
        return;
    gpumem_logical_device_config two[2] = {GPUMEM_LOGICAL_DEVICE_LIMIT(256 * MiB),
                                           GPUMEM_LOGICAL_DEVICE_LIMIT(256 * MiB)};
    ASSERT_OK(gpumem_set_logical_device_configuration(rt, 0, two, 2));
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    void *p = NULL, *q = NULL;
    ASSERT_OK(gpumem_malloc(rt, 1, 5 * MiB, &p)); /* GPU 0 maps */
    ASSERT_OK(gpumem_malloc(rt, 2, 1 * MiB, &q)); /* GPU 1, greedy */
    char gpu0[2048], gpu1[2048];
    expected_calls(rt, 0, gpu0, sizeof gpu0);
    expected_calls(rt, 1, gpu1, sizeof gpu1);
    ASSERT_CONTAINS(gpu0, "\"cuMemMap\":{\"calls\":");
    ASSERT_CONTAINS(gpu1, "\"cuMemAlloc_v2\":{\"calls\":1,");
    char *all = snapshot_of(rt, -1);
    ASSERT_EQ(count(all, gpu0), 2);
    ASSERT_EQ(count(all, gpu1), 1);
    ASSERT_EQ(count(all, "\"driver_calls\":"), 3);
    ASSERT_EQ(count(all, "\"calls\":0"), 0); /* only the entry points called */
    free(all);
    ASSERT_OK(gpumem_free(rt, p));
    ASSERT_OK(gpumem_free(rt, q));
    gpumem_runtime_destroy(rt);
}

/* A growing pool's hole given back (gpumem_release_unused unmaps its whole
 * granules): the free block still tiles its segment, and says how much of it
 * was given back, so that what is cached is reserved minus active. A granule
 * shared with a live block stays mapped. */
TEST(a_block_given_back_says_so)
{
    gpumem_runtime *rt = sim_runtime("SNAP-U:1GiB");
    ASSERT_OK(gpumem_set_memory_growth(rt, 0, true));
    void *a = NULL, *b = NULL, *c = NULL, *x = NULL;
    ASSERT_OK(gpumem_malloc(rt, 0, 24 * MiB, &x)); /* one region of 24 MiB */
    ASSERT_OK(gpumem_free(rt, x));
    ASSERT_OK(gpumem_malloc(rt, 0, 8 * MiB, &a));
    ASSERT_OK(gpumem_malloc(rt, 0, 8 * MiB, &b));
    ASSERT_OK(gpumem_malloc(rt, 0, 8 * MiB - 4096, &c));
    ASSERT_OK(gpumem_free(rt, b)); /* a hole inside the region */
    char *before = snapshot_of(rt, 0);
    ASSERT_EQ(count(before, "\"unmapped_size\""), 0); /* all of it mapped */
    uint64_t released = 0;
    ASSERT_OK(gpumem_release_unused(rt, 0, &released));
    ASSERT_EQ(released, 8 * MiB);
    char *after = snapshot_of(rt, 0);
    ASSERT_EQ(count(after, "\"state\":\"inactive\""), 2); /* b's, c's tail */
    ASSERT_EQ(count(after, "\"unmapped_size\":8388608"), 1);
    ASSERT_EQ(count(after, "\"unmapped_size\""), 1);       /* c's tail shares a granule */
    ASSERT_EQ(count(after, "\"total_size\":25165824"), 1); /* one segment still */
    ASSERT_EQ(info_of(rt, 0).reserved_bytes, 16 * MiB);
    free(before);
    free(after);
    ASSERT_OK(gpumem_free(rt, a));
    ASSERT_OK(gpumem_free(rt, c));
    gpumem_runtime_destroy(rt);
}

int main(void)
{
    RUN(two_calls_and_refusals);
    RUN(files_are_written_whole_and_never_through_a_link);
    RUN(out_of_memory_writes_one_snapshot);
    RUN(no_gpu_gives_an_empty_snapshot);
    RUN(each_device_carries_its_gpus_driver_calls);
    RUN(a_block_given_back_says_so);
    HARNESS_EXIT();
}
