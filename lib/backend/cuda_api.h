/* gpumem's own declarations of the part of the CUDA driver API it uses, so that
 * the library builds without a CUDA toolkit: the types, the enumerators and the
 * entry points (as lists of X(name, parameters), every one returning CUresult).
 * Names, values and layouts are the driver's (cuda.h of CUDA 11 to 13, 64-bit);
 * tests/backend/test_cuda_header.c checks them against cuda.h at compile time
 * wherever a toolkit is found. struct cuda_api is a table of the entry points:
 * cuda.c fills it with dlsym, and a test may pass its own (VMA's
 * pVulkanFunctions). Only lib/backend/ and the tests include this header. */
#ifndef GPUMEM_CUDA_API_H
#define GPUMEM_CUDA_API_H

#include <stddef.h>

/* ----------------------------------------------------------------- types -- */

typedef int CUdevice;                   /* a device ordinal */
typedef struct CUctx_st *CUcontext;     /* opaque: only the driver defines it */
typedef unsigned long long CUdeviceptr; /* device address (CUdeviceptr_v2) */
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct CUevent_st *CUevent;   /* opaque */
typedef struct CUstream_st *CUstream; /* opaque; NULL is the legacy default stream */

/* The driver's status codes; those gpumem names in code or tests. Every other
 * value is passed through as a number (and named by cuGetErrorName). */
typedef enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_DEINITIALIZED = 4,
    CUDA_ERROR_STUB_LIBRARY = 34,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_READY = 600, /* cuEventQuery: the work before the event is queued */
    CUDA_ERROR_LAUNCH_FAILED = 719,
    CUDA_ERROR_NOT_PERMITTED = 800,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_SYSTEM_DRIVER_MISMATCH = 803,
    CUDA_ERROR_UNKNOWN = 999
} CUresult;

typedef enum {
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
    CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102
} CUdevice_attribute;

typedef enum { CU_EVENT_DISABLE_TIMING = 0x2 } CUevent_flags;
typedef enum { CU_MEM_ALLOCATION_TYPE_PINNED = 1 } CUmemAllocationType;
typedef enum { CU_MEM_HANDLE_TYPE_NONE = 0 } CUmemAllocationHandleType;
typedef enum { CU_MEM_LOCATION_TYPE_DEVICE = 1 } CUmemLocationType;
typedef enum { CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3 } CUmemAccess_flags;
typedef enum {
    CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0,
    CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1
} CUmemAllocationGranularity_flags;

typedef struct {
    CUmemLocationType type;
    int id; /* the device ordinal for CU_MEM_LOCATION_TYPE_DEVICE */
} CUmemLocation;

/* Zero every field first (the driver checks the reserved bytes). */
typedef struct {
    CUmemAllocationType type;
    CUmemAllocationHandleType requestedHandleTypes;
    CUmemLocation location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} CUmemAllocationProp;

typedef struct {
    CUmemLocation location;
    CUmemAccess_flags flags;
} CUmemAccessDesc;

/* A device's UUID: 16 raw bytes, printed by nvidia-smi as GPU-xxxxxxxx-xxxx-... */
typedef struct CUuuid_st {
    char bytes[16];
} CUuuid;

/* ---------------------------------------------------------- entry points -- */

/* Required: without any of these the driver is unusable for gpumem. Where cuda.h
 * maps a name to a versioned symbol (cuMemAlloc -> cuMemAlloc_v2) the versioned
 * one is listed: it is the symbol a program built with cuda.h calls. The events
 * order stream-ordered frees (lib/streams.c); cuEventRecord is the legacy-stream
 * symbol (cuda.h without CUDA_API_PER_THREAD_DEFAULT_STREAM), so a NULL stream is
 * the legacy default stream, as cudaStream_t 0 is to PyTorch and CuPy. */
#define CUDA_API_REQUIRED(X)                                                             \
    X(cuInit, (unsigned int flags))                                                      \
    X(cuDeviceGetCount, (int *count))                                                    \
    X(cuDeviceGet, (CUdevice * device, int ordinal))                                     \
    X(cuDeviceGetName, (char *name, int len, CUdevice dev))                              \
    X(cuDeviceTotalMem_v2, (size_t * bytes, CUdevice dev))                               \
    X(cuDeviceGetAttribute, (int *value, CUdevice_attribute attrib, CUdevice dev))       \
    X(cuDevicePrimaryCtxRetain, (CUcontext * ctx, CUdevice dev))                         \
    X(cuDevicePrimaryCtxRelease_v2, (CUdevice dev))                                      \
    X(cuCtxPushCurrent_v2, (CUcontext ctx))                                              \
    X(cuCtxPopCurrent_v2, (CUcontext * ctx))                                             \
    X(cuMemGetInfo_v2, (size_t * free_bytes, size_t * total_bytes))                      \
    X(cuMemAlloc_v2, (CUdeviceptr * dptr, size_t bytes))                                 \
    X(cuMemFree_v2, (CUdeviceptr dptr))                                                  \
    X(cuEventCreate, (CUevent * event, unsigned int flags))                              \
    X(cuEventDestroy_v2, (CUevent event))                                                \
    X(cuEventRecord, (CUevent event, CUstream stream))                                   \
    X(cuEventQuery, (CUevent event))                                                     \
    X(cuEventSynchronize, (CUevent event))

/* Optional: without them a message gives the status as a number. */
#define CUDA_API_ERRORS(X)                                                               \
    X(cuGetErrorName, (CUresult error, const char **name))                               \
    X(cuGetErrorString, (CUresult error, const char **text))

/* Optional as a group (CUDA 10.2 and later): without all of them, or on a
 * device without CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, pools
 * grow by plain allocations. */
#define CUDA_API_VMM(X)                                                                  \
    X(cuMemAddressReserve, (CUdeviceptr * ptr, size_t size, size_t alignment,            \
                            CUdeviceptr addr, unsigned long long flags))                 \
    X(cuMemAddressFree, (CUdeviceptr ptr, size_t size))                                  \
    X(cuMemCreate, (CUmemGenericAllocationHandle * handle, size_t size,                  \
                    const CUmemAllocationProp *prop, unsigned long long flags))          \
    X(cuMemRelease, (CUmemGenericAllocationHandle handle))                               \
    X(cuMemMap, (CUdeviceptr ptr, size_t size, size_t offset,                            \
                 CUmemGenericAllocationHandle handle, unsigned long long flags))         \
    X(cuMemUnmap, (CUdeviceptr ptr, size_t size))                                        \
    X(cuMemSetAccess,                                                                    \
      (CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count))         \
    X(cuMemGetAllocationGranularity,                                                     \
      (size_t * granularity, const CUmemAllocationProp *prop,                            \
       CUmemAllocationGranularity_flags option))

/* Optional: without it (drivers before CUDA 9.2), a GPU's UUID is "". cuda.h
 * maps cuDeviceGetUuid to the _v2 symbol (CUDA 11.4 and later), which differs
 * only in also filling MIG instances' own UUIDs; older drivers have the
 * unversioned one, which cuda.c resolves in its place. */
#define CUDA_API_UUID(X) X(cuDeviceGetUuid_v2, (CUuuid * uuid, CUdevice dev))

#define CUDA_API_ALL(X)                                                                  \
    CUDA_API_REQUIRED(X) CUDA_API_ERRORS(X) CUDA_API_VMM(X) CUDA_API_UUID(X)

/* cuda_fn_cuMemAlloc_v2 and so on: one pointer type per entry point. */
#define CUDA_API_FN_TYPE(name, params) typedef CUresult(*cuda_fn_##name) params;
CUDA_API_ALL(CUDA_API_FN_TYPE)
#undef CUDA_API_FN_TYPE

/* The table the backend calls through. A field is NULL when the symbol was not
 * found (allowed for the optional groups only). */
struct cuda_api {
#define CUDA_API_FIELD(name, params) cuda_fn_##name name;
    CUDA_API_ALL(CUDA_API_FIELD)
#undef CUDA_API_FIELD
};

#endif /* GPUMEM_CUDA_API_H */
