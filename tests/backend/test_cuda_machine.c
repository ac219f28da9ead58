/* The driver double's FAKECUDA_MACHINE: processes that name the same machine
 * share each device's free memory, as a real driver's processes share a card:
 * what one process allocates (cuMemAlloc_v2 or cuMemCreate) the others' free
 * memory lacks and their allocations cannot take, until it frees or is killed;
 * without the variable each process has its own devices. Real processes. */
#include "backend/cuda_api.h"
#include "fakecuda.h"
#include "harness.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define DECLARE(name, params) CUresult name params;
CUDA_API_ALL(DECLARE)
#undef DECLARE

#define GiB (UINT64_C(1) << 30)

static char machine[64];

/* cuInit and the primary context of device 0 current, on `devices`. */
static void start(const char *devices, const char *name)
{
    setenv("FAKECUDA_DEVICES", devices, 1);
    if (name)
        setenv("FAKECUDA_MACHINE", name, 1);
    else
        unsetenv("FAKECUDA_MACHINE");
    fakecuda_reset();
    CUcontext ctx;
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxPushCurrent_v2(ctx), CUDA_SUCCESS);
}

/* A child process that allocates `bytes` on device 0 (by cuMemCreate when
 * `vmm`), says so on the pipe, and holds them until the pipe back closes. */
static pid_t holder(const char *name, uint64_t bytes, bool vmm, int *said, int *release)
{
    int up[2], down[2];
    if (pipe(up) != 0 || pipe(down) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(up[0]);
        close(down[1]);
        start("T4:16GiB:7.5", name);
        CUdeviceptr p;
        CUmemGenericAllocationHandle h;
        CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                    .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
        CUresult r = vmm ? cuMemCreate(&h, bytes, &prop, 0) : cuMemAlloc_v2(&p, bytes);
        char c = r == CUDA_SUCCESS ? 'y' : 'n';
        if (write(up[1], &c, 1) != 1)
            _exit(2);
        while (read(down[0], &c, 1) > 0) {
        }
        if (r == CUDA_SUCCESS && vmm)
            cuMemRelease(h);
        _exit(r == CUDA_SUCCESS ? 0 : 1);
    }
    close(up[1]);
    close(down[0]);
    *said = up[0];
    *release = down[1];
    return pid;
}

TEST(a_machines_processes_share_free_memory)
{
    snprintf(machine, sizeof machine, "t%ld", (long)getpid());
    int said, release;
    char c = 0;
    pid_t child = holder(machine, 10 * GiB, false, &said, &release);
    ASSERT_EQ(read(said, &c, 1), 1);
    ASSERT_EQ(c, 'y');
    start("T4:16GiB:7.5", machine);
    size_t f = 0, t = 0;
    ASSERT_EQ(cuMemGetInfo_v2(&f, &t), CUDA_SUCCESS);
    ASSERT_EQ(f, 6 * GiB);
    ASSERT_EQ(fakecuda_free_bytes(0), 6 * GiB);
    CUdeviceptr p, q;
    ASSERT_EQ(cuMemAlloc_v2(&p, 8 * GiB), CUDA_ERROR_OUT_OF_MEMORY);
    ASSERT_EQ(cuMemAlloc_v2(&p, 4 * GiB), CUDA_SUCCESS);
    /* this process's 4 GiB refuse a second process's 4 GiB, by cuMemCreate too */
    int said2, release2;
    pid_t second = holder(machine, 4 * GiB, true, &said2, &release2);
    ASSERT_EQ(read(said2, &c, 1), 1);
    ASSERT_EQ(c, 'n');
    close(release2);
    int st;
    ASSERT_EQ(waitpid(second, &st, 0), second);
    close(said2);
    /* a killed process's memory is free again */
    kill(child, SIGKILL);
    ASSERT_EQ(waitpid(child, &st, 0), child);
    close(said);
    close(release);
    ASSERT_EQ(fakecuda_free_bytes(0), 12 * GiB);
    ASSERT_EQ(cuMemAlloc_v2(&q, 12 * GiB), CUDA_SUCCESS);
    ASSERT_EQ(cuMemFree_v2(q), CUDA_SUCCESS);
    ASSERT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
    ASSERT_EQ(fakecuda_free_bytes(0), 16 * GiB);
    ASSERT_EQ(fakecuda_misuses(), 0);
    fakecuda_reset();
    char path[128];
    snprintf(path, sizeof path, "/dev/shm/gpumem-fakecuda-%s-0.u%lu.ledger", machine,
             (unsigned long)geteuid());
    unlink(path);
}

TEST(without_a_machine_each_process_has_its_own_devices)
{
    int said, release;
    char c = 0;
    pid_t child = holder(NULL, 10 * GiB, true, &said, &release);
    ASSERT_EQ(read(said, &c, 1), 1);
    ASSERT_EQ(c, 'y');
    start("T4:16GiB:7.5", NULL);
    ASSERT_EQ(fakecuda_free_bytes(0), 16 * GiB);
    close(release);
    int st;
    ASSERT_EQ(waitpid(child, &st, 0), child);
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    close(said);
    fakecuda_reset();
}

int main(void)
{
    RUN(a_machines_processes_share_free_memory);
    RUN(without_a_machine_each_process_has_its_own_devices);
    return harness_failures ? 1 : 0;
}
