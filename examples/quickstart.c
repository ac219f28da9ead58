/* Two GPUs configured differently, as TensorFlow cannot: GPU 0 grows on demand
 * under a 2 GiB cap; GPU 1 is split into two logical devices of 4 GiB each.
 * Run it on simulated GPUs: GPUMEM_SIM_DEVICES=8GiB,24GiB ./gpumem-quickstart */
#include <gpumem.h>
#include <stdio.h>

#define GIB (UINT64_C(1) << 30)

static int fail(void)
{
    fprintf(stderr, "%s\n", gpumem_last_error()); /* it names the call and the device */
    return 1;
}

int main(void)
{
    size_t n = 0; /* NULL runtime: the process-wide default, from the environment */
    if (gpumem_list_physical_devices(NULL, NULL, 0, &n) != GPUMEM_OK)
        return fail();
    if (n < 2) {
        fprintf(stderr, "needs two GPUs (try GPUMEM_SIM_DEVICES=8GiB,24GiB)\n");
        return 1;
    }

    /* GPU 0 grows on demand up to 2 GiB; GPU 1 becomes two 4 GiB logical devices
     * (/device:GPU:1 and /device:GPU:2), reserved when the devices initialize. */
    gpumem_logical_device_config cap = GPUMEM_LOGICAL_DEVICE_LIMIT(2 * GIB);
    gpumem_logical_device_config halves[2] = {GPUMEM_LOGICAL_DEVICE_LIMIT(4 * GIB),
                                              GPUMEM_LOGICAL_DEVICE_LIMIT(4 * GIB)};
    if (gpumem_set_memory_growth(NULL, 0, true) != GPUMEM_OK ||
        gpumem_set_logical_device_configuration(NULL, 0, &cap, 1) != GPUMEM_OK ||
        gpumem_set_logical_device_configuration(NULL, 1, halves, 2) != GPUMEM_OK)
        return fail();

    void *x = NULL;
    if (gpumem_malloc(NULL, 0, 256 << 20, &x) != GPUMEM_OK) /* initializes the devices */
        return fail();
    gpumem_memory_info info = GPUMEM_STRUCT_INIT(gpumem_memory_info);
    gpumem_get_memory_info(NULL, 0, &info);
    printf("/device:GPU:0: %llu MiB in use, %llu MiB reserved, limit %llu MiB\n",
           (unsigned long long)(info.current_bytes >> 20),
           (unsigned long long)(info.reserved_bytes >> 20),
           (unsigned long long)(info.limit_bytes >> 20));

    /* Configuration after initialization fails, says why, and changes nothing. */
    if (gpumem_set_memory_growth(NULL, 1, true) == GPUMEM_ERR_ALREADY_INITIALIZED)
        printf("as expected: %s\n", gpumem_last_error());

    gpumem_free(NULL, x);
    uint64_t released = 0;
    gpumem_release_unused(NULL, 0, &released); /* give the cached region back */
    printf("released %llu MiB to the GPU\n", (unsigned long long)(released >> 20));
    return 0;
}
