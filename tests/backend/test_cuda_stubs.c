/* The CUDA backend over a struct cuda_api of stubs (VMA's pVulkanFunctions): no
 * library at all. Required entry points missing, cuInit failing, no device, a
 * driver without the VMM group or without error names, contexts pushed and
 * popped around every device call, the OUT_OF_MEMORY mapping, a nonsensical
 * granularity, and the retained contexts released at destroy. */
#include "backend/backend.h"
#include "backend/cuda_api.h"
#include "harness.h"

#include <stdlib.h>

/* The reason of the last backend call that failed. */
static struct reason why;

#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)

static struct {
    CUresult init, alloc;
    int count;
    int vmm_attribute;
    size_t granularity;
    int depth, max_depth, retained, released;
    CUdeviceptr next;
    CUresult query; /* what cuEventQuery returns */
    int events;     /* created and not destroyed */
    CUstream recorded_on;
} stub;

static struct CUctx_st *const stub_ctx = (struct CUctx_st *)&stub;

static CUresult s_init(unsigned int flags)
{
    return flags ? CUDA_ERROR_INVALID_VALUE : stub.init;
}
static CUresult s_count(int *n)
{
    *n = stub.count;
    return CUDA_SUCCESS;
}
static CUresult s_get(CUdevice *d, int i)
{
    *d = i;
    return CUDA_SUCCESS;
}
static CUresult s_name(char *name, int len, CUdevice d)
{
    snprintf(name, (size_t)len, "Stub GPU %d", d);
    return CUDA_SUCCESS;
}
static CUresult s_total(size_t *bytes, CUdevice d)
{
    (void)d;
    *bytes = 8 * GiB;
    return CUDA_SUCCESS;
}
static CUresult s_attr(int *v, CUdevice_attribute a, CUdevice d)
{
    (void)d;
    *v = a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR   ? 8
         : a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR ? 9
                                                             : stub.vmm_attribute;
    return CUDA_SUCCESS;
}
static CUresult s_retain(CUcontext *c, CUdevice d)
{
    (void)d;
    *c = stub_ctx;
    stub.retained++;
    return CUDA_SUCCESS;
}
static CUresult s_release(CUdevice d)
{
    (void)d;
    stub.released++;
    return CUDA_SUCCESS;
}
static CUresult s_push(CUcontext c)
{
    if (c != stub_ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (++stub.depth > stub.max_depth)
        stub.max_depth = stub.depth;
    return CUDA_SUCCESS;
}
static CUresult s_pop(CUcontext *c)
{
    if (stub.depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    stub.depth--;
    if (c)
        *c = stub_ctx;
    return CUDA_SUCCESS;
}
static CUresult s_info(size_t *f, size_t *t)
{
    if (stub.depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    *f = 6 * GiB;
    *t = 8 * GiB;
    return CUDA_SUCCESS;
}
static CUresult s_alloc(CUdeviceptr *p, size_t bytes)
{
    if (stub.depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (stub.alloc)
        return stub.alloc;
    *p = stub.next;
    stub.next += bytes;
    return CUDA_SUCCESS;
}
static CUresult s_free(CUdeviceptr p)
{
    (void)p;
    return stub.depth ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}
static CUresult s_granularity(size_t *g, const CUmemAllocationProp *prop,
                              CUmemAllocationGranularity_flags option)
{
    (void)prop;
    (void)option;
    *g = stub.granularity;
    return CUDA_SUCCESS;
}
static CUresult s_reserve(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr,
                          unsigned long long flags)
{
    (void)size, (void)align, (void)addr, (void)flags;
    *p = UINT64_C(1) << 40;
    return CUDA_SUCCESS;
}
static CUresult s_addr_free(CUdeviceptr p, size_t size)
{
    (void)p, (void)size;
    return CUDA_SUCCESS;
}
static CUresult s_create(CUmemGenericAllocationHandle *h, size_t size,
                         const CUmemAllocationProp *prop, unsigned long long flags)
{
    (void)size, (void)prop, (void)flags;
    *h = 1;
    return CUDA_SUCCESS;
}
static CUresult s_mem_release(CUmemGenericAllocationHandle h)
{
    (void)h;
    return CUDA_SUCCESS;
}
static CUresult s_map(CUdeviceptr p, size_t size, size_t off,
                      CUmemGenericAllocationHandle h, unsigned long long flags)
{
    (void)p, (void)size, (void)off, (void)h, (void)flags;
    return CUDA_SUCCESS;
}
static CUresult s_unmap(CUdeviceptr p, size_t size)
{
    (void)p, (void)size;
    return CUDA_SUCCESS;
}
static CUresult s_access(CUdeviceptr p, size_t size, const CUmemAccessDesc *d, size_t n)
{
    (void)p, (void)size, (void)d, (void)n;
    return CUDA_SUCCESS;
}
/* Every event call needs the device's context current (stub.depth). */
static struct CUevent_st *const stub_event = (struct CUevent_st *)&stub.events;
static CUresult s_event_create(CUevent *e, unsigned int flags)
{
    if (stub.depth == 0 || flags != CU_EVENT_DISABLE_TIMING)
        return CUDA_ERROR_INVALID_CONTEXT;
    stub.events++;
    *e = stub_event;
    return CUDA_SUCCESS;
}
static CUresult s_event_destroy(CUevent e)
{
    if (stub.depth == 0 || e != stub_event)
        return CUDA_ERROR_INVALID_CONTEXT;
    stub.events--;
    return CUDA_SUCCESS;
}
static CUresult s_event_record(CUevent e, CUstream s)
{
    if (stub.depth == 0 || e != stub_event)
        return CUDA_ERROR_INVALID_CONTEXT;
    stub.recorded_on = s;
    return CUDA_SUCCESS;
}
static CUresult s_event_query(CUevent e)
{
    return stub.depth == 0 || e != stub_event ? CUDA_ERROR_INVALID_CONTEXT : stub.query;
}
static CUresult s_event_sync(CUevent e)
{
    return stub.depth == 0 || e != stub_event ? CUDA_ERROR_INVALID_CONTEXT : CUDA_SUCCESS;
}

static CUresult s_error_name(CUresult r, const char **name)
{
    *name = r == CUDA_ERROR_OUT_OF_MEMORY ? "CUDA_ERROR_OUT_OF_MEMORY" : NULL;
    return *name ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* The required group only: no error names, no VMM. */
static struct cuda_api required(void)
{
    struct cuda_api api;
    memset(&api, 0, sizeof api);
    api.cuInit = s_init;
    api.cuDeviceGetCount = s_count;
    api.cuDeviceGet = s_get;
    api.cuDeviceGetName = s_name;
    api.cuDeviceTotalMem_v2 = s_total;
    api.cuDeviceGetAttribute = s_attr;
    api.cuDevicePrimaryCtxRetain = s_retain;
    api.cuDevicePrimaryCtxRelease_v2 = s_release;
    api.cuCtxPushCurrent_v2 = s_push;
    api.cuCtxPopCurrent_v2 = s_pop;
    api.cuMemGetInfo_v2 = s_info;
    api.cuMemAlloc_v2 = s_alloc;
    api.cuMemFree_v2 = s_free;
    api.cuEventCreate = s_event_create;
    api.cuEventDestroy_v2 = s_event_destroy;
    api.cuEventRecord = s_event_record;
    api.cuEventQuery = s_event_query;
    api.cuEventSynchronize = s_event_sync;
    return api;
}

static struct cuda_api with_vmm(void)
{
    struct cuda_api api = required();
    api.cuGetErrorName = s_error_name;
    api.cuMemAddressReserve = s_reserve;
    api.cuMemAddressFree = s_addr_free;
    api.cuMemCreate = s_create;
    api.cuMemRelease = s_mem_release;
    api.cuMemMap = s_map;
    api.cuMemUnmap = s_unmap;
    api.cuMemSetAccess = s_access;
    api.cuMemGetAllocationGranularity = s_granularity;
    return api;
}

static struct options opts;

static void reset(void)
{
    memset(&stub, 0, sizeof stub);
    stub.count = 2;
    stub.vmm_attribute = 1;
    stub.granularity = 2 * MiB;
    stub.next = UINT64_C(1) << 32;
    gpumem_options u;
    gpumem_options_init(&u);
    u.flags = GPUMEM_OPTIONS_IGNORE_ENVIRONMENT;
    u.backend = GPUMEM_BACKEND_CUDA;
    if (gpumem__options_load(&u, &opts) != GPUMEM_OK)
        HARNESS_FAIL("options: %s", gpumem_last_error());
}

TEST(a_missing_required_entry_point)
{
    reset();
    struct cuda_api api = required();
    api.cuMemAlloc_v2 = NULL;
    struct backend *b = NULL;
    ASSERT_STATUS(gpumem__cuda_open_api(&opts, &api, &b, &why), GPUMEM_ERR_UNSUPPORTED);
    ASSERT_CONTAINS(why.text, "has no entry point cuMemAlloc_v2");
    ASSERT_TRUE(b == NULL);
}

TEST(cuinit_failing_without_error_names)
{
    reset();
    stub.init = CUDA_ERROR_UNKNOWN;
    struct cuda_api api = required();
    struct backend *b = NULL;
    ASSERT_STATUS(gpumem__cuda_open_api(&opts, &api, &b, &why), GPUMEM_ERR_UNSUPPORTED);
    ASSERT_STREQ(why.text, "cuInit(0) failed: CUresult 999");
}

TEST(no_device)
{
    reset();
    stub.count = 0;
    struct cuda_api api = required();
    struct backend *b = NULL;
    setenv("CUDA_VISIBLE_DEVICES", "", 1);
    ASSERT_STATUS(gpumem__cuda_open_api(&opts, &api, &b, &why), GPUMEM_ERR_UNSUPPORTED);
    ASSERT_CONTAINS(why.text, "reports no device (CUDA_VISIBLE_DEVICES='')");
    unsetenv("CUDA_VISIBLE_DEVICES");
}

TEST(a_driver_without_vmm_has_no_spaces)
{
    reset();
    struct cuda_api api = required();
    struct backend *b = NULL;
    ASSERT_OK(gpumem__cuda_open_api(&opts, &api, &b, &why));
    if (!b)
        return;
    ASSERT_STREQ(b->ops->name, "cuda");
    ASSERT_TRUE(b->ops->space_map == NULL && b->ops->space_alloc_range == NULL &&
                b->ops->space_granularity == NULL);
    ASSERT_FALSE(b->regions_contiguous);
    ASSERT_FALSE(b->host_accessible);
    ASSERT_EQ(b->ops->device_count(b), 2);
    gpumem_physical_device d = GPUMEM_STRUCT_INIT(gpumem_physical_device);
    ASSERT_OK(b->ops->device_props(b, 1, &d, &why));
    ASSERT_STREQ(d.model, "Stub GPU 1");
    ASSERT_EQ(d.compute_major, 8);
    ASSERT_EQ(d.compute_minor, 9);
    ASSERT_EQ(stub.retained, 0); /* describing devices makes no context */

    uint64_t f = 0, t = 0, addr = 0;
    ASSERT_OK(b->ops->mem_info(b, 0, &f, &t, &why));
    ASSERT_EQ(f, 6 * GiB);
    ASSERT_EQ(stub.retained, 1);
    ASSERT_EQ(stub.depth, 0);
    ASSERT_EQ(stub.max_depth, 1);
    ASSERT_OK(b->ops->alloc_region(b, 0, 4 * MiB, &addr, &why));
    ASSERT_EQ(addr, UINT64_C(1) << 32);
    ASSERT_OK(b->ops->free_region(b, 0, addr, 4 * MiB, &why));
    ASSERT_EQ(stub.retained, 1); /* retained once per device, not per call */

    stub.alloc = CUDA_ERROR_OUT_OF_MEMORY;
    ASSERT_STATUS(b->ops->alloc_region(b, 1, 4 * MiB, &addr, &why),
                  GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_STREQ(why.text, "cuMemAlloc_v2(4194304) on GPU:1 failed: CUresult 2");
    stub.alloc = CUDA_ERROR_LAUNCH_FAILED;
    ASSERT_STATUS(b->ops->alloc_region(b, 1, 4 * MiB, &addr, &why), GPUMEM_ERR_BACKEND);
    ASSERT_STREQ(why.text, "cuMemAlloc_v2(4194304) on GPU:1 failed: CUresult 719");
    ASSERT_EQ(stub.depth, 0);
    b->ops->destroy(b);
    ASSERT_EQ(stub.released, 2);
}

TEST(a_driver_with_vmm_offers_spaces)
{
    reset();
    struct cuda_api api = with_vmm();
    struct backend *b = NULL;
    ASSERT_OK(gpumem__cuda_open_api(&opts, &api, &b, &why));
    if (!b)
        return;
    ASSERT_TRUE(b->ops->space_map != NULL);
    uint64_t g = 0, base = 0;
    ASSERT_OK(b->ops->space_granularity(b, 0, &g, &why));
    ASSERT_EQ(g, 2 * MiB);
    ASSERT_OK(b->ops->space_alloc_range(b, 0, 64 * MiB, &base, &why));
    bool stuck = true, held = true;
    ASSERT_OK(b->ops->space_map(b, 0, base, 2 * MiB, &stuck, &held, &why));
    ASSERT_FALSE(stuck || held);
    ASSERT_OK(b->ops->space_unmap(b, 0, base, 2 * MiB, &why));
    ASSERT_OK(b->ops->space_free_range(b, 0, base, 64 * MiB, &why));
    /* the driver's name is used when it has one */
    stub.alloc = CUDA_ERROR_OUT_OF_MEMORY;
    ASSERT_STATUS(b->ops->alloc_region(b, 0, 2 * MiB, &base, &why),
                  GPUMEM_ERR_OUT_OF_MEMORY);
    ASSERT_STREQ(why.text,
                 "cuMemAlloc_v2(2097152) on GPU:0 failed: CUDA_ERROR_OUT_OF_MEMORY (2)");
    /* a granularity that is no power of two is refused, not used */
    stub.granularity = 3000;
    ASSERT_STATUS(b->ops->space_granularity(b, 1, &g, &why), GPUMEM_ERR_BACKEND);
    ASSERT_CONTAINS(why.text, "gave 3000, not a power of two");
    ASSERT_EQ(stub.depth, 0);
    b->ops->destroy(b);
    ASSERT_EQ(stub.released, stub.retained);
}

TEST(a_device_without_vmm_says_so)
{
    reset();
    stub.vmm_attribute = 0;
    struct cuda_api api = with_vmm();
    struct backend *b = NULL;
    ASSERT_OK(gpumem__cuda_open_api(&opts, &api, &b, &why));
    if (!b)
        return;
    ASSERT_TRUE(b->ops->space_granularity == NULL); /* no device supports it */
    b->ops->destroy(b);
    ASSERT_EQ(stub.retained, 0);
    ASSERT_EQ(stub.released, 0);
}

/* The events run in the device's context (pushed and popped around each call);
 * cuEventQuery's CUDA_ERROR_NOT_READY is an answer, not a failure. */
TEST(events_run_in_the_device_context)
{
    reset();
    struct cuda_api api = required();
    struct backend *b = NULL;
    ASSERT_OK(gpumem__cuda_open_api(&opts, &api, &b, &why));
    if (!b)
        return;
    ASSERT_TRUE(b->ops->event_create && b->ops->event_destroy && b->ops->event_record &&
                b->ops->event_query && b->ops->event_synchronize);
    void *ev = NULL;
    bool done = false;
    ASSERT_OK(b->ops->event_create(b, 1, &ev, &why));
    ASSERT_TRUE(ev == stub_event);
    ASSERT_EQ(stub.events, 1);
    ASSERT_OK(b->ops->event_record(b, 1, ev, (void *)0x1234, &why));
    ASSERT_TRUE(stub.recorded_on == (CUstream)0x1234);
    ASSERT_OK(b->ops->event_query(b, 1, ev, &done, &why));
    ASSERT_TRUE(done);
    stub.query = CUDA_ERROR_NOT_READY;
    ASSERT_OK(b->ops->event_query(b, 1, ev, &done, &why));
    ASSERT_FALSE(done);
    stub.query = CUDA_ERROR_LAUNCH_FAILED;
    done = true;
    ASSERT_STATUS(b->ops->event_query(b, 1, ev, &done, &why), GPUMEM_ERR_BACKEND);
    ASSERT_STREQ(why.text, "cuEventQuery on GPU:1 failed: CUresult 719");
    ASSERT_TRUE(done); /* untouched on failure */
    ASSERT_OK(b->ops->event_synchronize(b, 1, ev, &why));
    ASSERT_OK(b->ops->event_destroy(b, 1, ev, &why));
    ASSERT_EQ(stub.events, 0);
    ASSERT_EQ(stub.depth, 0);
    ASSERT_EQ(stub.max_depth, 1);
    b->ops->destroy(b);
    ASSERT_EQ(stub.released, stub.retained);
}

int main(void)
{
    RUN(a_missing_required_entry_point);
    RUN(cuinit_failing_without_error_names);
    RUN(no_device);
    RUN(a_driver_without_vmm_has_no_spaces);
    RUN(a_driver_with_vmm_offers_spaces);
    RUN(a_device_without_vmm_says_so);
    RUN(events_run_in_the_device_context);
    HARNESS_EXIT();
}
