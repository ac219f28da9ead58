/* GPUMEM_SIM_MACHINE: simulated GPUs shared by real processes. One free-memory
 * count across processes (a child's regions lower the parent's free memory and
 * refuse its allocation), a killed process's bytes stop counting, the same UUID
 * in every process of a machine and a different one per process without it, a
 * device list that differs from the machine's refused, a forked child that
 * opens its own share, and bad names refused. Each test uses a machine name of
 * its own (with this process's pid) and removes its files. */
#include "backend/backend.h"
#include "harness.h"
#include "options.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static struct reason why;
static char machine[64];

static struct options load(const char *devices, const char *name)
{
    struct options o;
    setenv("GPUMEM_BACKEND", "sim", 1);
    setenv("GPUMEM_SIM_DEVICES", devices, 1);
    if (name)
        setenv("GPUMEM_SIM_MACHINE", name, 1);
    else
        unsetenv("GPUMEM_SIM_MACHINE");
    if (gpumem__options_load(NULL, &o) != GPUMEM_OK)
        HARNESS_FAIL("options: %s", gpumem_last_error());
    return o;
}

static void new_machine(const char *tag)
{
    snprintf(machine, sizeof machine, "t%ld-%s", (long)getpid(), tag);
}

static void remove_machine(size_t devices)
{
    char path[160];
    snprintf(path, sizeof path, "/dev/shm/gpumem-sim-%s.machine", machine);
    unlink(path);
    for (size_t i = 0; i < devices; i++) {
        snprintf(path, sizeof path, "/dev/shm/gpumem-sim-%s-%zu.u%lu.ledger", machine, i,
                 (unsigned long)geteuid());
        unlink(path);
    }
}

static uint64_t free_of(struct backend *b, int dev)
{
    uint64_t f = 0, t = 0;
    ASSERT_OK(b->ops->mem_info(b, dev, &f, &t, &why));
    return f;
}

/* A child that opens the machine, takes `bytes` on GPU `dev`, writes its GPU's
 * UUID to the pipe and waits until the pipe `hold` is closed (or it is killed). */
static pid_t holder(const char *devices, const char *name, int dev, uint64_t bytes,
                    int *uuid_fd, int *release_fd)
{
    int up[2], down[2];
    if (pipe(up) != 0 || pipe(down) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(up[0]);
        close(down[1]);
        struct options o = load(devices, name);
        struct backend *b;
        uint64_t addr;
        gpumem_physical_device d = GPUMEM_STRUCT_INIT(gpumem_physical_device);
        if (gpumem__sim_open(&o, &b, &why) != GPUMEM_OK ||
            b->ops->device_props(b, dev, &d, &why) != GPUMEM_OK ||
            (bytes && b->ops->alloc_region(b, dev, bytes, &addr, &why) != GPUMEM_OK)) {
            fprintf(stderr, "holder: %s\n", why.text);
            _exit(1);
        }
        if (write(up[1], d.uuid, sizeof d.uuid) != (ssize_t)sizeof d.uuid)
            _exit(2);
        char c;
        while (read(down[0], &c, 1) > 0) {
        }
        b->ops->destroy(b);
        _exit(0);
    }
    close(up[1]);
    close(down[0]);
    *uuid_fd = up[0];
    *release_fd = down[1];
    return pid;
}

static void wait_ok(pid_t pid)
{
    int st = 0;
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

TEST(processes_of_a_machine_share_one_free_memory_count)
{
    new_machine("count");
    const char *devs = "A:1GiB,B:2GiB";
    int uuid_fd, release_fd;
    char theirs[48] = "";
    pid_t child = holder(devs, machine, 1, 1536 * GPUMEM_MIB, &uuid_fd, &release_fd);
    ASSERT_TRUE(child > 0);
    ASSERT_EQ(read(uuid_fd, theirs, sizeof theirs), sizeof theirs);

    struct options o = load(devs, machine);
    struct backend *b;
    ASSERT_OK(gpumem__sim_open(&o, &b, &why));
    ASSERT_EQ(free_of(b, 0), 1 * GPUMEM_GIB);
    ASSERT_EQ(free_of(b, 1), 512 * GPUMEM_MIB);
    gpumem_physical_device d = GPUMEM_STRUCT_INIT(gpumem_physical_device);
    ASSERT_OK(b->ops->device_props(b, 1, &d, &why));
    ASSERT_STREQ(d.uuid, theirs);
    ASSERT_EQ(strlen(d.uuid), 40);
    ASSERT_TRUE(strncmp(d.uuid, "GPU-", 4) == 0);
    gpumem_physical_device d0 = GPUMEM_STRUCT_INIT(gpumem_physical_device);
    ASSERT_OK(b->ops->device_props(b, 0, &d0, &why));
    ASSERT_TRUE(strcmp(d0.uuid, d.uuid) != 0);

    /* the child's 1.5 GiB refuse this process's 1 GiB, and the message says so */
    uint64_t addr, small;
    ASSERT_STATUS(b->ops->alloc_region(b, 1, 1 * GPUMEM_GIB, &addr, &why),
                  GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_CONTAINS(why.text, "GPUMEM_SIM_MACHINE");
    ASSERT_OK(b->ops->alloc_region(b, 1, 256 * GPUMEM_MIB, &small, &why));
    ASSERT_EQ(free_of(b, 1), 256 * GPUMEM_MIB);

    /* this process's region counts in the child's view too: a second holder
     * cannot take what is left plus one granule */
    int uuid2, release2;
    pid_t second = holder(devs, machine, 1, 256 * GPUMEM_MIB + 256, &uuid2, &release2);
    int st = 0;
    ASSERT_EQ(waitpid(second, &st, 0), second);
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 1);
    close(uuid2);
    close(release2);

    /* a killed process's bytes stop counting */
    kill(child, SIGKILL);
    ASSERT_EQ(waitpid(child, &st, 0), child);
    close(uuid_fd);
    close(release_fd);
    ASSERT_EQ(free_of(b, 1), 1792 * GPUMEM_MIB);
    ASSERT_OK(b->ops->alloc_region(b, 1, 1 * GPUMEM_GIB, &addr, &why));
    ASSERT_OK(b->ops->free_region(b, 1, addr, 1 * GPUMEM_GIB, &why));
    ASSERT_OK(b->ops->free_region(b, 1, small, 256 * GPUMEM_MIB, &why));
    ASSERT_EQ(free_of(b, 1), 2 * GPUMEM_GIB);
    b->ops->destroy(b);
    remove_machine(2);
}

TEST(a_process_that_ends_gives_its_bytes_back)
{
    new_machine("end");
    int uuid_fd, release_fd;
    char theirs[48];
    pid_t child = holder("1GiB", machine, 0, 512 * GPUMEM_MIB, &uuid_fd, &release_fd);
    ASSERT_EQ(read(uuid_fd, theirs, sizeof theirs), sizeof theirs);
    struct options o = load("1GiB", machine);
    struct backend *b;
    ASSERT_OK(gpumem__sim_open(&o, &b, &why));
    ASSERT_EQ(free_of(b, 0), 512 * GPUMEM_MIB);
    close(release_fd); /* the child destroys its backend and exits */
    wait_ok(child);
    close(uuid_fd);
    ASSERT_EQ(free_of(b, 0), 1 * GPUMEM_GIB);
    b->ops->destroy(b);
    remove_machine(1);
}

TEST(without_a_machine_each_process_has_its_own_gpus)
{
    int uuid_fd, release_fd;
    char theirs[48];
    pid_t child = holder("1GiB", NULL, 0, 768 * GPUMEM_MIB, &uuid_fd, &release_fd);
    ASSERT_EQ(read(uuid_fd, theirs, sizeof theirs), sizeof theirs);
    struct options o = load("1GiB", NULL);
    struct backend *b, *b2;
    ASSERT_OK(gpumem__sim_open(&o, &b, &why));
    ASSERT_EQ(free_of(b, 0), 1 * GPUMEM_GIB);
    gpumem_physical_device d = GPUMEM_STRUCT_INIT(gpumem_physical_device);
    gpumem_physical_device again = GPUMEM_STRUCT_INIT(gpumem_physical_device);
    ASSERT_OK(b->ops->device_props(b, 0, &d, &why));
    ASSERT_EQ(strlen(d.uuid), 40);
    ASSERT_TRUE(strcmp(d.uuid, theirs) != 0); /* another process's own card */
    /* but the same hardware, so the same UUID, for every runtime of this process */
    ASSERT_OK(gpumem__sim_open(&o, &b2, &why));
    ASSERT_OK(b2->ops->device_props(b2, 0, &again, &why));
    ASSERT_STREQ(again.uuid, d.uuid);
    b2->ops->destroy(b2);
    b->ops->destroy(b);
    close(release_fd);
    wait_ok(child);
    close(uuid_fd);
}

TEST(another_device_list_is_refused)
{
    new_machine("list");
    struct options o = load("A:1GiB,B:2GiB", machine);
    struct backend *b, *other;
    ASSERT_OK(gpumem__sim_open(&o, &b, &why));
    /* another process with other GPUs: refused, with both lists' story */
    pid_t pid = fork();
    if (pid == 0) {
        struct options mine = load("A:1GiB,B:4GiB", machine);
        gpumem_status s = gpumem__sim_open(&mine, &other, &why);
        _exit(s == GPUMEM_ERR_INVALID_ARGUMENT && strstr(why.text, machine) &&
                      strstr(why.text, "B 2147483648 8.0") &&
                      strstr(why.text, "GPUMEM_SIM_DEVICES")
                  ? 0
                  : 1);
    }
    wait_ok(pid);
    /* and in this process: the registry makes new hardware for another list */
    struct options mine = load("A:1GiB", machine);
    ASSERT_STATUS(gpumem__sim_open(&mine, &other, &why), GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(why.text, "other simulated GPUs");
    b->ops->destroy(b);
    remove_machine(2);
}

TEST(a_forked_child_takes_its_own_share)
{
    new_machine("fork");
    struct options o = load("1GiB", machine);
    struct backend *b;
    uint64_t addr;
    ASSERT_OK(gpumem__sim_open(&o, &b, &why));
    ASSERT_OK(b->ops->alloc_region(b, 0, 256 * GPUMEM_MIB, &addr, &why));
    pid_t pid = fork();
    if (pid == 0) {
        /* the parent's slot is not the child's: a new open attaches anew, and
         * counts what the parent holds */
        struct backend *c;
        uint64_t f = 0, t = 0, a;
        int ok = gpumem__sim_open(&o, &c, &why) == GPUMEM_OK &&
                 c->ops->mem_info(c, 0, &f, &t, &why) == GPUMEM_OK &&
                 f == 768 * GPUMEM_MIB &&
                 c->ops->alloc_region(c, 0, 512 * GPUMEM_MIB, &a, &why) == GPUMEM_OK &&
                 c->ops->alloc_region(c, 0, 512 * GPUMEM_MIB, &a, &why) ==
                     GPUMEM_ERR_OUT_OF_MEMORY;
        if (!ok)
            fprintf(stderr, "child: free %llu: %s\n", (unsigned long long)f, why.text);
        _exit(ok ? 0 : 1);
    }
    wait_ok(pid);
    ASSERT_EQ(free_of(b, 0), 768 * GPUMEM_MIB); /* the child's share went with it */
    ASSERT_OK(b->ops->free_region(b, 0, addr, 256 * GPUMEM_MIB, &why));
    b->ops->destroy(b);
    remove_machine(1);
}

TEST(a_bad_machine_name_is_refused)
{
    struct options o;
    setenv("GPUMEM_SIM_MACHINE", "../etc", 1);
    ASSERT_STATUS(gpumem__options_load(NULL, &o), GPUMEM_ERR_INVALID_ARGUMENT);
    ASSERT_CONTAINS(gpumem_last_error(), "GPUMEM_SIM_MACHINE");
    setenv("GPUMEM_SIM_MACHINE", "", 1);
    ASSERT_STATUS(gpumem__options_load(NULL, &o), GPUMEM_ERR_INVALID_ARGUMENT);
    setenv("GPUMEM_SIM_MACHINE", "a-name_of-exactly-forty-characters-12345", 1);
    ASSERT_OK(gpumem__options_load(NULL, &o));
    ASSERT_STREQ(o.sim_machine, "a-name_of-exactly-forty-characters-12345");
    setenv("GPUMEM_SIM_MACHINE", "a-name_of-exactly-forty-characters-123456", 1);
    ASSERT_STATUS(gpumem__options_load(NULL, &o), GPUMEM_ERR_INVALID_ARGUMENT);
    unsetenv("GPUMEM_SIM_MACHINE");
}

/* Granules mapped into an address range count on the machine as regions do: a
 * child maps 768 MiB granule by granule, this process sees them taken, cannot map
 * past what is left, and gets them back when the child is killed. */
TEST(mapped_granules_count_across_processes)
{
    new_machine("vmm");
    const uint64_t g = 2 * GPUMEM_MIB;
    int up[2], down[2];
    ASSERT_TRUE(pipe(up) == 0 && pipe(down) == 0);
    pid_t child = fork();
    if (child == 0) {
        close(up[0]);
        close(down[1]);
        struct options o = load("1GiB", machine);
        struct backend *b;
        uint64_t base;
        bool stuck, held;
        if (gpumem__sim_open(&o, &b, &why) != GPUMEM_OK ||
            b->ops->space_alloc_range(b, 0, 1 * GPUMEM_GIB, &base, &why) != GPUMEM_OK)
            _exit(1);
        for (uint64_t at = 0; at < 768 * GPUMEM_MIB; at += g)
            if (b->ops->space_map(b, 0, base + at, g, &stuck, &held, &why) != GPUMEM_OK)
                _exit(2);
        char c = 'm';
        if (write(up[1], &c, 1) != 1)
            _exit(3);
        while (read(down[0], &c, 1) > 0) {
        }
        _exit(0);
    }
    close(up[1]);
    close(down[0]);
    char c;
    ASSERT_EQ(read(up[0], &c, 1), 1);
    struct options o = load("1GiB", machine);
    struct backend *b;
    uint64_t base;
    bool stuck, held;
    ASSERT_OK(gpumem__sim_open(&o, &b, &why));
    ASSERT_EQ(free_of(b, 0), 256 * GPUMEM_MIB);
    ASSERT_OK(b->ops->space_alloc_range(b, 0, 512 * GPUMEM_MIB, &base, &why));
    for (uint64_t at = 0; at < 256 * GPUMEM_MIB; at += g)
        ASSERT_OK(b->ops->space_map(b, 0, base + at, g, &stuck, &held, &why));
    ASSERT_EQ(free_of(b, 0), 0);
    ASSERT_STATUS(b->ops->space_map(b, 0, base + 256 * GPUMEM_MIB, g, &stuck, &held,
                                    &why),
                  GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_CONTAINS(why.text, "GPUMEM_SIM_MACHINE");
    int st = 0;
    kill(child, SIGKILL);
    ASSERT_EQ(waitpid(child, &st, 0), child);
    close(up[0]);
    close(down[1]);
    ASSERT_EQ(free_of(b, 0), 768 * GPUMEM_MIB);
    for (uint64_t at = 0; at < 256 * GPUMEM_MIB; at += g)
        ASSERT_OK(b->ops->space_unmap(b, 0, base + at, g, &why));
    ASSERT_EQ(free_of(b, 0), 1 * GPUMEM_GIB);
    ASSERT_OK(b->ops->space_free_range(b, 0, base, 512 * GPUMEM_MIB, &why));
    b->ops->destroy(b);
    remove_machine(1);
}

int main(void)
{
    RUN(processes_of_a_machine_share_one_free_memory_count);
    RUN(a_process_that_ends_gives_its_bytes_back);
    RUN(without_a_machine_each_process_has_its_own_gpus);
    RUN(another_device_list_is_refused);
    RUN(mapped_granules_count_across_processes);
    RUN(a_forked_child_takes_its_own_share);
    RUN(a_bad_machine_name_is_refused);
    return harness_failures ? 1 : 0;
}
