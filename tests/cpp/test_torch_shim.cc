// libgpumem_torch.so over simulated GPUs: out of memory throws std::runtime_error
// with PyTorch's words first, other failures throw without them, nothing is
// printed, the free never throws, and the pools serve again after a throw.
// Caught as PyTorch catches it where an operator returns to Python: as
// std::exception.
#include "gpumem_torch.h"
#include "cpp_check.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <typeinfo>
#include <unistd.h>

static bool starts_with(const std::string &s, const char *prefix)
{
    return s.compare(0, std::strlen(prefix), prefix) == 0;
}

static bool contains(const std::string &s, const char *part)
{
    return s.find(part) != std::string::npos;
}

// The outcome of one call, as PyTorch's boundary would see it.
struct outcome {
    void *ptr = nullptr;
    bool threw = false;
    bool runtime_error = false;
    std::string what;
};

static outcome call(gpumem_ssize size, int device)
{
    outcome o;
    int dummy = 0;
    void *stream = &dummy; // any stream: PyTorch's cudaStream_t
    try {
        o.ptr = gpumem_torch_alloc_or_throw(size, device, stream);
    } catch (const std::exception &e) {
        o.threw = true;
        o.runtime_error = typeid(e) == typeid(std::runtime_error);
        o.what = e.what();
    }
    return o;
}

static gpumem_memory_info info(int logical)
{
    gpumem_memory_info mi = GPUMEM_STRUCT_INIT(gpumem_memory_info);
    CHECK(gpumem_get_memory_info(nullptr, logical, &mi) == GPUMEM_OK);
    return mi;
}

// Everything the calls write to standard error while `fn` runs.
template <class F> static std::string stderr_of(F fn)
{
    std::fflush(stderr);
    FILE *tmp = std::tmpfile();
    int saved = dup(2);
    if (!tmp || saved < 0 || dup2(fileno(tmp), 2) < 0) {
        std::fprintf(stderr, "cannot redirect standard error\n");
        std::exit(1);
    }
    fn();
    std::fflush(stderr);
    dup2(saved, 2);
    close(saved);
    std::string text;
    std::rewind(tmp);
    for (int c; (c = std::fgetc(tmp)) != EOF;)
        text += static_cast<char>(c);
    std::fclose(tmp);
    return text;
}

static_assert(noexcept(gpumem_torch_free_stream(nullptr, 0, 0, nullptr)),
              "PyTorch frees from deleters: the free must not throw");

int main()
{
    clear_library_env();
    setenv("GPUMEM_BACKEND", "sim", 1);
    setenv("GPUMEM_SIM_DEVICES", "1GiB,2GiB", 1);

    // GPU 0: two logical devices of 64 MiB; PyTorch's device 0 is the first.
    gpumem_logical_device_config halves[2] = {GPUMEM_LOGICAL_DEVICE_LIMIT(64 << 20),
                                              GPUMEM_LOGICAL_DEVICE_LIMIT(64 << 20)};
    CHECK(gpumem_set_logical_device_configuration(nullptr, 0, halves, 2) == GPUMEM_OK);

    outcome a = call(1 << 20, 0);
    CHECK(!a.threw && a.ptr != nullptr);
    CHECK(reinterpret_cast<uintptr_t>(a.ptr) % 256 == 0);
    std::memset(a.ptr, 7, 1 << 20); // simulated GPU memory is host memory
    CHECK(info(0).current_bytes == 1 << 20 && info(1).current_bytes == 0);

    outcome g1 = call(4096, 1); // PyTorch's device 1: GPU 1, /device:GPU:2
    CHECK(!g1.threw && g1.ptr != nullptr && info(2).current_bytes == 4096);

    // Out of memory: thrown, with PyTorch's words and then gpumem's reason.
    outcome oom;
    std::string printed = stderr_of([&] { oom = call(128 << 20, 0); });
    CHECK(oom.threw && oom.runtime_error && oom.ptr == nullptr);
    CHECK(
        starts_with(oom.what, "CUDA out of memory. gpumem_malloc_async(/device:GPU:0, "));
    CHECK(contains(oom.what, "out of memory"));
    CHECK(printed.empty()); // the message travels in the exception, not on stderr
    if (!starts_with(oom.what, "CUDA out of memory. ") || !printed.empty())
        std::fprintf(stderr, "what(): %s\nprinted: %s\n", oom.what.c_str(),
                     printed.c_str());
    CHECK(info(0).num_ooms == 1);

    // ... and the pool serves again at once.
    outcome b = call(32 << 20, 0);
    CHECK(!b.threw && b.ptr != nullptr && info(0).current_bytes == (33 << 20));

    // Other failures throw without PyTorch's out-of-memory words.
    outcome nodev = call(64, 7);
    CHECK(nodev.threw && nodev.runtime_error);
    CHECK(nodev.what == "gpumem: gpumem_torch_alloc(GPU:7): no such GPU "
                        "(there are 2)");
    outcome negative = call(-5, 0);
    CHECK(negative.threw && negative.runtime_error);
    CHECK(starts_with(negative.what,
                      "gpumem: gpumem_torch_alloc(GPU:0): negative size -5"));

    // Size 0: nothing to allocate, no error (PyTorch asks for empty tensors).
    outcome zero = call(0, 0);
    CHECK(!zero.threw && zero.ptr == nullptr);

    int dummy = 0;
    gpumem_torch_free_stream(a.ptr, 1 << 20, 0, &dummy);
    gpumem_torch_free_stream(b.ptr, 32 << 20, 0, &dummy);
    gpumem_torch_free_stream(g1.ptr, 4096, 1, &dummy);
    gpumem_torch_free_stream(nullptr, 0, 0, &dummy); // PyTorch may free NULL
    CHECK(info(0).current_bytes == 0 && info(2).current_bytes == 0);
    CHECK(info(0).num_frees == 2);
    // A double free neither throws nor changes anything; the reason is kept.
    gpumem_torch_free_stream(a.ptr, 1 << 20, 0, &dummy);
    CHECK(info(0).num_frees == 2);
    CHECK(starts_with(gpumem_last_error(), "gpumem_free_async("));

    if (failures)
        std::fprintf(stderr, "%d check(s) failed\n", failures);
    return failures ? 1 : 0;
}
