// libgpumem_torch_c10.so over simulated GPUs, built against the installed
// PyTorch's headers and libc10: out of memory is thrown as c10::OutOfMemoryError
// (what PyTorch raises as torch.cuda.OutOfMemoryError), its message PyTorch's
// words and then gpumem's, so `catch (const c10::OutOfMemoryError &)` takes it
// as PyTorch's boundary does; other failures are std::runtime_error, not c10's
// out of memory; the pair loads from the one file and the pool serves again.
#include "gpumem_torch.h"
#include "cpp_check.h"

#include <c10/util/Exception.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

extern "C" void *gpumem_torch_c10_alloc(gpumem_ssize size, int device, void *stream);
extern "C" void gpumem_torch_c10_free(void *ptr, gpumem_ssize size, int device,
                                      void *stream) noexcept;

int main()
{
    clear_library_env();
    setenv("GPUMEM_BACKEND", "sim", 1);
    setenv("GPUMEM_SIM_DEVICES", "1GiB", 1);
    int dummy = 0;
    void *stream = &dummy;

    void *p = gpumem_torch_c10_alloc(1 << 20, 0, stream);
    CHECK(p != nullptr);

    bool caught = false;
    std::string message;
    try {
        (void)gpumem_torch_c10_alloc(int64_t(200) << 30, 0, stream);
    } catch (const c10::OutOfMemoryError &e) {
        caught = true;
        message = e.what_without_backtrace();
    } catch (const std::exception &e) {
        std::fprintf(stderr, "not c10::OutOfMemoryError: %s\n", e.what());
    }
    CHECK(caught);
    CHECK(
        message.rfind("CUDA out of memory. gpumem_malloc_async(/device:GPU:0, 200.00 GiB",
                      0) == 0);
    CHECK(message.find("out of memory:") != std::string::npos);
    if (caught && message.rfind("CUDA out of memory. ", 0) != 0)
        std::fprintf(stderr, "message: %s\n", message.c_str());

    // c10::OutOfMemoryError is a c10::Error, which PyTorch catches first
    bool as_error = false;
    try {
        (void)gpumem_torch_c10_alloc(int64_t(200) << 30, 0, stream);
    } catch (const c10::Error &) {
        as_error = true;
    }
    CHECK(as_error);

    bool other = false;
    try {
        (void)gpumem_torch_c10_alloc(64, 7, stream);
    } catch (const c10::Error &) {
        std::fprintf(stderr, "a missing GPU was thrown as a c10::Error\n");
    } catch (const std::runtime_error &e) {
        other = std::string(e.what()).rfind("gpumem: gpumem_torch_alloc(GPU:7)", 0) == 0;
    }
    CHECK(other);

    void *q = gpumem_torch_c10_alloc(512 << 20, 0, stream); // it goes on
    CHECK(q != nullptr);
    gpumem_torch_c10_free(q, 512 << 20, 0, stream);
    gpumem_torch_c10_free(p, 1 << 20, 0, stream);
    gpumem_memory_info mi = GPUMEM_STRUCT_INIT(gpumem_memory_info);
    CHECK(gpumem_get_memory_info(nullptr, 0, &mi) == GPUMEM_OK);
    CHECK(mi.current_bytes == 0 && mi.num_ooms == 2 && mi.num_frees == 2);

    if (failures)
        std::fprintf(stderr, "%d check(s) failed\n", failures);
    return failures ? 1 : 0;
}
