/* libgpumem_torch_c10.so: libgpumem_torch.so's allocator with out of memory
 * thrown as c10::OutOfMemoryError, PyTorch's own C++ type, which PyTorch raises
 * in Python as torch.cuda.OutOfMemoryError (torch.OutOfMemoryError; a
 * RuntimeError too). Built only against the PyTorch headers and libc10 that
 * python3 finds at configure time (cpp/find_torch.py), and used only by that
 * PyTorch: c10's exception types and std::string must be the very ones PyTorch
 * was built with. No state, no lock: each call is libgpumem_torch.so's. */
#include "gpumem_torch.h"

#include <c10/util/Exception.h>

#include <stdexcept>
#include <string>

#define GPUMEM_TORCH_C10_API extern "C" __attribute__((visibility("default")))

/* gpumem_torch_alloc_or_throw's allocation; throws c10::OutOfMemoryError whose
 * message is "CUDA out of memory. " + gpumem's message for out of memory (PyTorch's
 * own first words), std::runtime_error "gpumem: " + gpumem's message for any other
 * failure. */
GPUMEM_TORCH_C10_API void *gpumem_torch_c10_alloc(gpumem_ssize size, int device,
                                                  void *stream)
{
    void *ptr = nullptr;
    gpumem_status s = gpumem_torch_shim_alloc(size, device, stream, &ptr);
    if (s == GPUMEM_ERR_OUT_OF_MEMORY)
        throw c10::OutOfMemoryError(c10::SourceLocation{__func__, __FILE__,
                                                        static_cast<uint32_t>(__LINE__)},
                                    std::string("CUDA out of memory. ") +
                                        gpumem_last_error());
    if (s != GPUMEM_OK)
        throw std::runtime_error(std::string("gpumem: ") + gpumem_last_error());
    return ptr;
}

/* The version of the PyTorch whose headers and libc10 this library was built
 * against (its torch.__version__): gpumem.torch uses the library only under that
 * version. */
GPUMEM_TORCH_C10_API const char *gpumem_torch_c10_pytorch_version(void)
{
    return GPUMEM_TORCH_BUILT_AGAINST;
}

/* gpumem_torch_free_stream, from this library too, so that PyTorch loads the
 * pair from one file. */
GPUMEM_TORCH_C10_API void gpumem_torch_c10_free(void *ptr, gpumem_ssize size, int device,
                                                void *stream) noexcept
{
    gpumem_torch_free_stream(ptr, size, device, stream);
}
