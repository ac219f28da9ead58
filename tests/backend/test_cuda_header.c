/* Compile-time check of lib/backend/cuda_api.h against the toolkit's cuda.h:
 * gpumem's declarations are included under renamed identifiers (a forgotten one
 * collides with cuda.h), then enumerator values, type sizes, struct layouts and
 * the entry points' parameter lists (instantiated with cuda.h's types, against
 * the types of its prototypes) are compared. If it compiles, it passes. */
#include <cuda.h>

#define CUdevice                          gm_CUdevice
#define CUcontext                         gm_CUcontext
#define CUdeviceptr                       gm_CUdeviceptr
#define CUmemGenericAllocationHandle      gm_CUmemGenericAllocationHandle
#define CUevent                           gm_CUevent
#define CUstream                          gm_CUstream
#define CUevent_flags                     gm_CUevent_flags
#define CU_EVENT_DISABLE_TIMING           gm_CU_EVENT_DISABLE_TIMING
#define CUDA_ERROR_NOT_READY              gm_CUDA_ERROR_NOT_READY
#define CUresult                          gm_CUresult
#define CUdevice_attribute                gm_CUdevice_attribute
#define CUmemAllocationType               gm_CUmemAllocationType
#define CUmemAllocationHandleType         gm_CUmemAllocationHandleType
#define CUmemLocationType                 gm_CUmemLocationType
#define CUmemAccess_flags                 gm_CUmemAccess_flags
#define CUmemAllocationGranularity_flags  gm_CUmemAllocationGranularity_flags
#define CUmemLocation                     gm_CUmemLocation
#define CUmemAllocationProp               gm_CUmemAllocationProp
#define CUmemAccessDesc                   gm_CUmemAccessDesc
#define CUuuid                            gm_CUuuid
#define CUuuid_st                         gm_CUuuid_st
#define CUDA_SUCCESS                      gm_CUDA_SUCCESS
#define CUDA_ERROR_INVALID_VALUE          gm_CUDA_ERROR_INVALID_VALUE
#define CUDA_ERROR_OUT_OF_MEMORY          gm_CUDA_ERROR_OUT_OF_MEMORY
#define CUDA_ERROR_NOT_INITIALIZED        gm_CUDA_ERROR_NOT_INITIALIZED
#define CUDA_ERROR_DEINITIALIZED          gm_CUDA_ERROR_DEINITIALIZED
#define CUDA_ERROR_STUB_LIBRARY           gm_CUDA_ERROR_STUB_LIBRARY
#define CUDA_ERROR_NO_DEVICE              gm_CUDA_ERROR_NO_DEVICE
#define CUDA_ERROR_INVALID_DEVICE         gm_CUDA_ERROR_INVALID_DEVICE
#define CUDA_ERROR_INVALID_CONTEXT        gm_CUDA_ERROR_INVALID_CONTEXT
#define CUDA_ERROR_INVALID_HANDLE         gm_CUDA_ERROR_INVALID_HANDLE
#define CUDA_ERROR_NOT_FOUND              gm_CUDA_ERROR_NOT_FOUND
#define CUDA_ERROR_LAUNCH_FAILED          gm_CUDA_ERROR_LAUNCH_FAILED
#define CUDA_ERROR_NOT_PERMITTED          gm_CUDA_ERROR_NOT_PERMITTED
#define CUDA_ERROR_NOT_SUPPORTED          gm_CUDA_ERROR_NOT_SUPPORTED
#define CUDA_ERROR_SYSTEM_DRIVER_MISMATCH gm_CUDA_ERROR_SYSTEM_DRIVER_MISMATCH
#define CUDA_ERROR_UNKNOWN                gm_CUDA_ERROR_UNKNOWN
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR                                     \
    gm_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR                                     \
    gm_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
#define CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED                          \
    gm_CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
#define CU_MEM_ALLOCATION_TYPE_PINNED        gm_CU_MEM_ALLOCATION_TYPE_PINNED
#define CU_MEM_HANDLE_TYPE_NONE              gm_CU_MEM_HANDLE_TYPE_NONE
#define CU_MEM_LOCATION_TYPE_DEVICE          gm_CU_MEM_LOCATION_TYPE_DEVICE
#define CU_MEM_ACCESS_FLAGS_PROT_READWRITE   gm_CU_MEM_ACCESS_FLAGS_PROT_READWRITE
#define CU_MEM_ALLOC_GRANULARITY_MINIMUM     gm_CU_MEM_ALLOC_GRANULARITY_MINIMUM
#define CU_MEM_ALLOC_GRANULARITY_RECOMMENDED gm_CU_MEM_ALLOC_GRANULARITY_RECOMMENDED

#include "backend/cuda_api.h"

#undef CUdevice
#undef CUcontext
#undef CUdeviceptr
#undef CUmemGenericAllocationHandle
#undef CUevent
#undef CUstream
#undef CUevent_flags
#undef CU_EVENT_DISABLE_TIMING
#undef CUDA_ERROR_NOT_READY
#undef CUresult
#undef CUdevice_attribute
#undef CUmemAllocationType
#undef CUmemAllocationHandleType
#undef CUmemLocationType
#undef CUmemAccess_flags
#undef CUmemAllocationGranularity_flags
#undef CUmemLocation
#undef CUmemAllocationProp
#undef CUmemAccessDesc
#undef CUuuid
#undef CUuuid_st
#undef CUDA_SUCCESS
#undef CUDA_ERROR_INVALID_VALUE
#undef CUDA_ERROR_OUT_OF_MEMORY
#undef CUDA_ERROR_NOT_INITIALIZED
#undef CUDA_ERROR_DEINITIALIZED
#undef CUDA_ERROR_STUB_LIBRARY
#undef CUDA_ERROR_NO_DEVICE
#undef CUDA_ERROR_INVALID_DEVICE
#undef CUDA_ERROR_INVALID_CONTEXT
#undef CUDA_ERROR_INVALID_HANDLE
#undef CUDA_ERROR_NOT_FOUND
#undef CUDA_ERROR_LAUNCH_FAILED
#undef CUDA_ERROR_NOT_PERMITTED
#undef CUDA_ERROR_NOT_SUPPORTED
#undef CUDA_ERROR_SYSTEM_DRIVER_MISMATCH
#undef CUDA_ERROR_UNKNOWN
#undef CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
#undef CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
#undef CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
#undef CU_MEM_ALLOCATION_TYPE_PINNED
#undef CU_MEM_HANDLE_TYPE_NONE
#undef CU_MEM_LOCATION_TYPE_DEVICE
#undef CU_MEM_ACCESS_FLAGS_PROT_READWRITE
#undef CU_MEM_ALLOC_GRANULARITY_MINIMUM
#undef CU_MEM_ALLOC_GRANULARITY_RECOMMENDED

#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>

#if CUDA_VERSION < 11000
#error "the check expects cuda.h of CUDA 11 or later"
#endif

/* ----------------------------------------------------------- enumerators -- */

#define SAME_VALUE(name) _Static_assert((long long)gm_##name == (long long)name, #name);
SAME_VALUE(CUDA_SUCCESS)
SAME_VALUE(CUDA_ERROR_INVALID_VALUE)
SAME_VALUE(CUDA_ERROR_OUT_OF_MEMORY)
SAME_VALUE(CUDA_ERROR_NOT_INITIALIZED)
SAME_VALUE(CUDA_ERROR_DEINITIALIZED)
SAME_VALUE(CUDA_ERROR_STUB_LIBRARY)
SAME_VALUE(CUDA_ERROR_NO_DEVICE)
SAME_VALUE(CUDA_ERROR_INVALID_DEVICE)
SAME_VALUE(CUDA_ERROR_INVALID_CONTEXT)
SAME_VALUE(CUDA_ERROR_INVALID_HANDLE)
SAME_VALUE(CUDA_ERROR_NOT_FOUND)
SAME_VALUE(CUDA_ERROR_NOT_READY)
SAME_VALUE(CU_EVENT_DISABLE_TIMING)
SAME_VALUE(CUDA_ERROR_LAUNCH_FAILED)
SAME_VALUE(CUDA_ERROR_NOT_PERMITTED)
SAME_VALUE(CUDA_ERROR_NOT_SUPPORTED)
SAME_VALUE(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH)
SAME_VALUE(CUDA_ERROR_UNKNOWN)
SAME_VALUE(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
SAME_VALUE(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
SAME_VALUE(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)
SAME_VALUE(CU_MEM_ALLOCATION_TYPE_PINNED)
SAME_VALUE(CU_MEM_HANDLE_TYPE_NONE)
SAME_VALUE(CU_MEM_LOCATION_TYPE_DEVICE)
SAME_VALUE(CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
SAME_VALUE(CU_MEM_ALLOC_GRANULARITY_MINIMUM)
SAME_VALUE(CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)

/* ----------------------------------------------------------------- types -- */

#define SAME_SHAPE(name)                                                                 \
    _Static_assert(sizeof(gm_##name) == sizeof(name), "sizeof " #name);                  \
    _Static_assert(alignof(gm_##name) == alignof(name), "alignof " #name);
SAME_SHAPE(CUdevice)
SAME_SHAPE(CUcontext)
SAME_SHAPE(CUdeviceptr)
SAME_SHAPE(CUmemGenericAllocationHandle)
SAME_SHAPE(CUevent)
SAME_SHAPE(CUstream)
SAME_SHAPE(CUevent_flags)
SAME_SHAPE(CUresult)
SAME_SHAPE(CUdevice_attribute)
SAME_SHAPE(CUmemAllocationType)
SAME_SHAPE(CUmemAllocationHandleType)
SAME_SHAPE(CUmemLocationType)
SAME_SHAPE(CUmemAccess_flags)
SAME_SHAPE(CUmemAllocationGranularity_flags)
SAME_SHAPE(CUmemLocation)
SAME_SHAPE(CUmemAllocationProp)
SAME_SHAPE(CUmemAccessDesc)
SAME_SHAPE(CUuuid)

/* Integer and pointer typedefs must be the very same types, not just as large. */
_Static_assert(_Generic((gm_CUdevice)0, CUdevice : 1, default : 0), "CUdevice");
_Static_assert(_Generic((gm_CUdeviceptr)0, CUdeviceptr : 1, default : 0), "CUdeviceptr");
_Static_assert(_Generic((gm_CUmemGenericAllocationHandle)0,
                        CUmemGenericAllocationHandle : 1, default : 0),
               "CUmemGenericAllocationHandle");
_Static_assert(_Generic((gm_CUcontext)0, CUcontext : 1, default : 0), "CUcontext");
_Static_assert(_Generic((gm_CUevent)0, CUevent : 1, default : 0), "CUevent");
_Static_assert(_Generic((gm_CUstream)0, CUstream : 1, default : 0), "CUstream");

#define SAME_FIELD(type, field)                                                          \
    _Static_assert(offsetof(gm_##type, field) == offsetof(type, field),                  \
                   #type "." #field);                                                    \
    _Static_assert(sizeof(((gm_##type *)0)->field) == sizeof(((type *)0)->field),        \
                   "sizeof " #type "." #field);
SAME_FIELD(CUmemLocation, type)
SAME_FIELD(CUmemLocation, id)
SAME_FIELD(CUmemAllocationProp, type)
SAME_FIELD(CUmemAllocationProp, requestedHandleTypes)
SAME_FIELD(CUmemAllocationProp, location)
SAME_FIELD(CUmemAllocationProp, win32HandleMetaData)
SAME_FIELD(CUmemAllocationProp, allocFlags)
SAME_FIELD(CUmemAllocationProp, allocFlags.compressionType)
SAME_FIELD(CUmemAllocationProp, allocFlags.gpuDirectRDMACapable)
SAME_FIELD(CUmemAllocationProp, allocFlags.usage)
SAME_FIELD(CUmemAllocationProp, allocFlags.reserved)
SAME_FIELD(CUmemAccessDesc, location)
SAME_FIELD(CUmemAccessDesc, flags)
SAME_FIELD(CUuuid, bytes)

/* ---------------------------------------------------------- entry points -- */

/* Each of gpumem's parameter lists, read with cuda.h's types, must make the type
 * of cuda.h's prototype of that symbol. _Generic does not evaluate its operand, so
 * nothing refers to the driver's symbols and the test links without libcuda at
 * any optimization level (an assignment of their addresses did not at -O0). */
#define SAME_SIGNATURE(name, params)                                                     \
    _Static_assert(_Generic(&name, CUresult(*) params : 1, default : 0), #name);
CUDA_API_ALL(SAME_SIGNATURE)
#undef SAME_SIGNATURE

int main(void)
{
    /* The table holds one pointer per entry point, nothing else. */
    size_t entry_points = 0;
#define COUNT(name, params) entry_points++;
    CUDA_API_ALL(COUNT)
#undef COUNT
    if (sizeof(struct cuda_api) != entry_points * sizeof(void (*)(void)))
        return 1;
    printf("cuda_api.h agrees with cuda.h of CUDA %d.%d on %zu entry points\n",
           CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10, entry_points);
    return 0;
}
