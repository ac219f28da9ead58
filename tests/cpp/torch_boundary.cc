// What PyTorch does with a pluggable allocator's alloc function, for the Python
// tests' stand-in torch (tests/python/standins/torch): it calls the function, and
// where the operator returns to Python it catches std::exception and raises
// RuntimeError with what(). ctypes cannot catch a C++ exception, so the stand-in
// calls the shim through this function. Test-only, never installed.
#include <sys/types.h>

#include <cstring>
#include <exception>

using alloc_fn = void *(*)(ssize_t size, int device, void *stream);

// 0: *out is the pointer; 1: a std::exception was thrown, its what() (cut to fit)
// is in `what`; 2: something else was thrown.
extern "C" __attribute__((visibility("default"))) int torch_boundary_alloc(
    alloc_fn fn, ssize_t size, int device, void *stream, void **out, char *what,
    size_t capacity)
{
    try {
        *out = fn(size, device, stream);
        return 0;
    } catch (const std::exception &e) {
        if (capacity > 0) {
            std::strncpy(what, e.what(), capacity - 1);
            what[capacity - 1] = '\0';
        }
        return 1;
    } catch (...) {
        return 2;
    }
}
