// libgpumem_torch.so's hooks over simulated GPUs, called as PyTorch's
// CUDAPluggableAllocator calls them (through std::function, with PyTorch's
// types): a CUDA graph's private pool keeps every block it allocated (freed
// during or after the capture) from everyone else until the pool is released,
// reuses them on the capture's stream, lets streams the filter refuses and
// other devices allocate as usual; the memory fraction before and after
// gpumem's first allocation; PyTorch's statistics of the allocations it asked
// for, split at 1 MiB, with resets.
#include "gpumem_torch.h"
#include "cpp_check.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>

using MempoolId = std::pair<unsigned long long, unsigned long long>;

// The hooks as PyTorch holds them (CUDAPluggableAllocator.h): std::function
// over the address Python handed it.
static std::function<void(int, MempoolId, std::function<bool(CUstream_st *)>)> begin_fn =
    gpumem_torch_begin_allocate_to_pool;
static std::function<void(int, MempoolId)> end_fn = gpumem_torch_end_allocate_to_pool;
static std::function<void(int, MempoolId)> release_fn = gpumem_torch_release_pool;
static std::function<void(double, int)> fraction_fn = gpumem_torch_set_memory_fraction;

static CUstream_st *const capture_stream = reinterpret_cast<CUstream_st *>(0xCA97);
static CUstream_st *const side_stream = reinterpret_cast<CUstream_st *>(0x51DE);

static gpumem_memory_info info(int logical)
{
    gpumem_memory_info mi = GPUMEM_STRUCT_INIT(gpumem_memory_info);
    CHECK(gpumem_get_memory_info(nullptr, logical, &mi) == GPUMEM_OK);
    return mi;
}

static void *alloc(gpumem_ssize size, int device, CUstream_st *stream)
{
    return gpumem_torch_alloc_or_throw(size, device, stream);
}

static void release(void *ptr, gpumem_ssize size, int device, CUstream_st *stream)
{
    gpumem_torch_free_stream(ptr, size, device, stream);
}

static int64_t stat(int device, int metric, int pool, int field)
{
    int64_t all[64];
    size_t n = gpumem_torch_stats(device, all, 64);
    CHECK(n ==
          GPUMEM_TORCH_STAT_METRICS * GPUMEM_TORCH_STAT_POOLS * GPUMEM_TORCH_STAT_FIELDS);
    return all[(metric * GPUMEM_TORCH_STAT_POOLS + pool) * GPUMEM_TORCH_STAT_FIELDS +
               field];
}

enum { CURRENT, PEAK, ALLOCATED, FREED };

static void memory_fraction_before_and_after_the_first_allocation()
{
    fraction_fn(0.5, 1); // before: gpumem's configuration, as set_memory_fraction
    bool threw = false;
    try {
        fraction_fn(1.5, 1);
    } catch (const std::runtime_error &e) {
        threw = std::string(e.what()).find("gpumem: gpumem_set_memory_fraction(") == 0;
    }
    CHECK(threw);
    void *p = alloc(1 << 20, 1, side_stream); // initializes: GPU 1's budget is half
    CHECK(p && info(1).limit_bytes == (uint64_t(1) << 30));
    fraction_fn(0.5, 1); // the value in force: nothing to change
    threw = false;
    try {
        fraction_fn(0.25, 1);
    } catch (const std::runtime_error &e) {
        threw = std::string(e.what()).find("already initialized") != std::string::npos;
    }
    CHECK(threw);
    release(p, 1 << 20, 1, side_stream);
}

static void a_graphs_pool_keeps_its_memory_until_released()
{
    const MempoolId pool{1, 0};
    begin_fn(0, pool, [](CUstream_st *s) { return s == capture_stream; });
    void *x = alloc(4 << 20, 0, capture_stream);  // an intermediate
    void *y = alloc(2 << 20, 0, capture_stream);  // the output
    void *other = alloc(4 << 20, 0, side_stream); // not captured: as usual
    CHECK(x && y && other && x != y);
    CHECK(other != x && other != y);
    release(x, 4 << 20, 0, capture_stream);       // freed during the capture
    void *x2 = alloc(3 << 20, 0, capture_stream); // the capture reuses it
    CHECK(x2 == x);
    release(x2, 3 << 20, 0, capture_stream);
    void *on_gpu1 = alloc(1 << 20, 1, capture_stream); // another device: not this pool's
    end_fn(0, pool);

    uint64_t held = info(0).current_bytes;
    CHECK(held >= (4u + 2u + 4u) << 20);    // x (free in the pool), y, other
    release(y, 2 << 20, 0, capture_stream); // the graph's output, freed after capture
    CHECK(info(0).current_bytes == held);   // still the pool's: the graph may replay
    // nobody else gets the pool's memory now, on any stream
    void *after[3];
    for (int i = 0; i < 3; i++) {
        after[i] = alloc(4 << 20, 0, i == 0 ? capture_stream : side_stream);
        CHECK(after[i] != x && after[i] != y);
    }
    // a second capture into the same pool reuses it (PyTorch shares pools)
    begin_fn(0, pool, [](CUstream_st *s) { return s == capture_stream; });
    void *again = alloc(2 << 20, 0, capture_stream);
    CHECK(again == y || again == x);
    release(again, 2 << 20, 0, capture_stream);
    end_fn(0, pool);

    uint64_t before_release = info(0).current_bytes;
    release_fn(0, pool); // the graph is gone: its free blocks go back to gpumem
    CHECK(info(0).current_bytes == before_release - (4u << 20) - (2u << 20));
    for (void *p : after)
        release(p, 4 << 20, 0, side_stream);
    release(other, 4 << 20, 0, side_stream);
    release(on_gpu1, 1 << 20, 1, capture_stream);
    release_fn(0, {99, 99}); // an unknown pool: nothing
    CHECK(info(0).current_bytes == 0);
}

static void a_live_block_of_a_released_pool_goes_back_when_freed()
{
    const MempoolId pool{2, 0};
    begin_fn(0, pool, [](CUstream_st *) { return true; });
    void *out = alloc(1 << 20, 0, capture_stream);
    end_fn(0, pool);
    release_fn(0, pool); // the graph is gone, its output still lives
    CHECK(info(0).current_bytes == 1 << 20);
    release(out, 1 << 20, 0, capture_stream);
    CHECK(info(0).current_bytes == 0);
}

/* The six figures gpumem_torch_private_pool_stats gives for pool `id` on
 * device 0 in f[0..3] (current, peak, allocated, freed); false: no entry. */
static bool private_pool_bytes(MempoolId id, int64_t f[4])
{
    int64_t all[6 * 16];
    size_t n = gpumem_torch_private_pool_stats(0, all, 6 * 16);
    for (size_t i = 0; i + 6 <= n && i + 6 <= 6 * 16; i += 6)
        if (all[i] == static_cast<int64_t>(id.first) &&
            all[i + 1] == static_cast<int64_t>(id.second)) {
            for (int k = 0; k < 4; k++)
                f[k] = all[i + 2 + k];
            return true;
        }
    return false;
}

/* torch.cuda.empty_cache (gpumem_release_unused) gives back no memory of a
 * living graph's pool, and all of it once the pool is released and its blocks
 * freed; reserved_bytes_by_private_pools counts the pool's bytes throughout. */
static void a_released_pools_memory_goes_back_to_the_gpu()
{
    const MempoolId pool{3, 7};
    int64_t f[4];
    uint64_t released = 0;
    begin_fn(0, pool, [](CUstream_st *) { return true; });
    void *a = alloc(8 << 20, 0, capture_stream);
    void *b = alloc(1 << 20, 0, capture_stream);
    end_fn(0, pool);
    release(a, 8 << 20, 0, capture_stream); // free in the pool, still its
    CHECK(private_pool_bytes(pool, f));
    CHECK(f[0] == 9 << 20 && f[1] == 9 << 20 && f[2] == 9 << 20 && f[3] == 0);
    CHECK(gpumem_release_unused(nullptr, 0, &released) == GPUMEM_OK);
    uint64_t kept = info(0).reserved_bytes;
    CHECK(kept >= 9u << 20); // the graph may replay into it
    release_fn(0, pool);     // the graph is gone: its free block goes back
    CHECK(private_pool_bytes(pool, f));
    CHECK(f[0] == 1 << 20 && f[1] == 9 << 20 && f[3] == 8 << 20);
    release(b, 1 << 20, 0, capture_stream); // and its live one when freed
    CHECK(private_pool_bytes(pool, f) && f[0] == 0 && f[3] == 9 << 20);
    CHECK(info(0).current_bytes == 0);
    CHECK(gpumem_release_unused(nullptr, 0, &released) == GPUMEM_OK);
    CHECK(info(0).reserved_bytes < kept - (8u << 20));
    gpumem_torch_reset_peak_stats(0);
    CHECK(private_pool_bytes(pool, f) && f[1] == 0);
    gpumem_torch_reset_accumulated_stats(0); // a released pool's entry goes
    CHECK(!private_pool_bytes(pool, f));
}

static void pytorchs_statistics()
{
    const int d = 0;
    gpumem_torch_reset_accumulated_stats(d);
    gpumem_torch_reset_peak_stats(d);
    const int64_t base =
        stat(d, GPUMEM_TORCH_STAT_ALLOCATION, GPUMEM_TORCH_STAT_ALL, CURRENT);
    CHECK(base == 0);
    void *small = alloc(1000, d, side_stream);   // small pool: at most 1 MiB
    void *edge = alloc(1 << 20, d, side_stream); // small pool still
    void *large = alloc((1 << 20) + 1, d, side_stream);
    CHECK(stat(d, GPUMEM_TORCH_STAT_ALLOCATION, GPUMEM_TORCH_STAT_ALL, CURRENT) == 3);
    CHECK(stat(d, GPUMEM_TORCH_STAT_ALLOCATION, GPUMEM_TORCH_STAT_SMALL_POOL, CURRENT) ==
          2);
    CHECK(stat(d, GPUMEM_TORCH_STAT_ALLOCATION, GPUMEM_TORCH_STAT_LARGE_POOL, CURRENT) ==
          1);
    CHECK(stat(d, GPUMEM_TORCH_STAT_REQUESTED_BYTES, GPUMEM_TORCH_STAT_ALL, CURRENT) ==
          1000 + (1 << 20) + (1 << 20) + 1);
    const int64_t rounded = 1024 + (1 << 20) + (1 << 20) + 256;
    CHECK(stat(d, GPUMEM_TORCH_STAT_ALLOCATED_BYTES, GPUMEM_TORCH_STAT_ALL, CURRENT) ==
          rounded);
    CHECK(static_cast<int64_t>(info(0).current_bytes) == rounded); // gpumem's own
    release(small, 1000, d, side_stream);
    release(large, (1 << 20) + 1, d, side_stream);
    CHECK(stat(d, GPUMEM_TORCH_STAT_ALLOCATION, GPUMEM_TORCH_STAT_ALL, CURRENT) == 1);
    CHECK(stat(d, GPUMEM_TORCH_STAT_ALLOCATION, GPUMEM_TORCH_STAT_ALL, PEAK) == 3);
    CHECK(stat(d, GPUMEM_TORCH_STAT_ALLOCATION, GPUMEM_TORCH_STAT_ALL, ALLOCATED) == 3);
    CHECK(stat(d, GPUMEM_TORCH_STAT_ALLOCATION, GPUMEM_TORCH_STAT_ALL, FREED) == 2);
    CHECK(stat(d, GPUMEM_TORCH_STAT_ALLOCATED_BYTES, GPUMEM_TORCH_STAT_LARGE_POOL,
               PEAK) == (1 << 20) + 256);
    CHECK(stat(d, GPUMEM_TORCH_STAT_ALLOCATED_BYTES, GPUMEM_TORCH_STAT_LARGE_POOL,
               FREED) == (1 << 20) + 256);
    gpumem_torch_reset_peak_stats(d);
    CHECK(stat(d, GPUMEM_TORCH_STAT_ALLOCATION, GPUMEM_TORCH_STAT_ALL, PEAK) == 1);
    gpumem_torch_reset_accumulated_stats(d);
    CHECK(stat(d, GPUMEM_TORCH_STAT_ALLOCATION, GPUMEM_TORCH_STAT_ALL, ALLOCATED) == 0);
    CHECK(stat(d, GPUMEM_TORCH_STAT_ALLOCATION, GPUMEM_TORCH_STAT_ALL, CURRENT) == 1);
    // an out of memory and a refused free count nothing
    try {
        alloc(int64_t(8) << 30, d, side_stream);
        CHECK(false);
    } catch (const std::runtime_error &) {
    }
    release(edge, 1 << 20, d, side_stream);
    release(edge, 1 << 20, d, side_stream); // a double free
    CHECK(stat(d, GPUMEM_TORCH_STAT_ALLOCATION, GPUMEM_TORCH_STAT_ALL, CURRENT) == 0);
    CHECK(stat(d, GPUMEM_TORCH_STAT_ALLOCATION, GPUMEM_TORCH_STAT_ALL, FREED) == 1);
    CHECK(stat(d, GPUMEM_TORCH_STAT_ALLOCATION, GPUMEM_TORCH_STAT_ALL, ALLOCATED) == 0);
    int64_t none[1] = {-1};
    CHECK(gpumem_torch_stats(64, none, 1) == 36 && none[0] == -1); // past 63: nothing
}

int main()
{
    clear_library_env();
    setenv("GPUMEM_BACKEND", "sim", 1);
    setenv("GPUMEM_SIM_DEVICES", "1GiB,2GiB", 1);
    setenv("GPUMEM_FORCE_ALLOW_GROWTH", "true", 1);

    memory_fraction_before_and_after_the_first_allocation();
    a_graphs_pool_keeps_its_memory_until_released();
    a_live_block_of_a_released_pool_goes_back_when_freed();
    a_released_pools_memory_goes_back_to_the_gpu();
    pytorchs_statistics();

    if (failures)
        std::fprintf(stderr, "%d check(s) failed\n", failures);
    return failures ? 1 : 0;
}
