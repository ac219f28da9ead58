/* PyTorch's allocation statistics (torch_stats.h; the layout that
 * gpumem_torch_stats writes is in gpumem_torch.h). */
#include "torch_stats.h"

#include "gpumem_torch.h"
#include "graph_pools.h"

#include <atomic>
#include <exception>
#include <cstdint>

namespace gpumem_torch
{
namespace
{

constexpr int max_devices = 64;
constexpr size_t small_size = size_t(1) << 20; /* PyTorch's kSmallSize */

struct Stat {
    std::atomic<int64_t> current{0}, peak{0}, allocated{0}, freed{0};
};

/* [device][metric][pool] */
Stat stats[max_devices][GPUMEM_TORCH_STAT_METRICS][GPUMEM_TORCH_STAT_POOLS];

void raise_peak(Stat &s, int64_t now)
{
    int64_t peak = s.peak.load(std::memory_order_relaxed);
    while (now > peak &&
           !s.peak.compare_exchange_weak(peak, now, std::memory_order_relaxed))
        ;
}

void add(Stat &s, int64_t n)
{
    int64_t now = s.current.fetch_add(n, std::memory_order_relaxed) + n;
    s.allocated.fetch_add(n, std::memory_order_relaxed);
    raise_peak(s, now);
}

void sub(Stat &s, int64_t n)
{
    s.current.fetch_sub(n, std::memory_order_relaxed);
    s.freed.fetch_add(n, std::memory_order_relaxed);
}

template <typename F> void each(int device, size_t size, F f)
{
    if (device < 0 || device >= max_devices)
        return;
    int pool =
        size <= small_size ? GPUMEM_TORCH_STAT_SMALL_POOL : GPUMEM_TORCH_STAT_LARGE_POOL;
    int64_t amounts[GPUMEM_TORCH_STAT_METRICS] = {
        1, static_cast<int64_t>((size + 255) & ~static_cast<size_t>(255)),
        static_cast<int64_t>(size)};
    for (int m = 0; m < GPUMEM_TORCH_STAT_METRICS; m++) {
        f(stats[device][m][GPUMEM_TORCH_STAT_ALL], amounts[m]);
        f(stats[device][m][pool], amounts[m]);
    }
}

} // namespace

void stats_alloc(int device, size_t size) { each(device, size, add); }

void stats_free(int device, size_t size) { each(device, size, sub); }

} // namespace gpumem_torch

using gpumem_torch::max_devices;
using gpumem_torch::stats;

size_t gpumem_torch_stats(int device, int64_t *out, size_t capacity) noexcept
{
    const size_t n =
        GPUMEM_TORCH_STAT_METRICS * GPUMEM_TORCH_STAT_POOLS * GPUMEM_TORCH_STAT_FIELDS;
    if (device < 0 || device >= max_devices || !out)
        return n;
    size_t i = 0;
    for (auto &metric : stats[device])
        for (auto &s : metric) {
            const int64_t f[GPUMEM_TORCH_STAT_FIELDS] = {
                s.current.load(std::memory_order_relaxed),
                s.peak.load(std::memory_order_relaxed),
                s.allocated.load(std::memory_order_relaxed),
                s.freed.load(std::memory_order_relaxed)};
            for (int64_t v : f)
                if (i < capacity)
                    out[i++] = v;
        }
    return n;
}

size_t gpumem_torch_private_pool_stats(int device, int64_t *out, size_t capacity) noexcept
{
    try {
        return gpumem_torch::graph_pool_stats(device, out, capacity);
    } catch (const std::exception &e) {
        (void)e; /* std::mutex's system_error: nothing to report */
        return 0;
    }
}

void gpumem_torch_reset_peak_stats(int device) noexcept
{
    if (device < 0 || device >= max_devices)
        return;
    try {
        gpumem_torch::graph_pool_reset_peak(device);
    } catch (const std::exception &e) {
        (void)e;
    }
    for (auto &metric : stats[device])
        for (auto &s : metric)
            s.peak.store(s.current.load(std::memory_order_relaxed),
                         std::memory_order_relaxed);
}

void gpumem_torch_reset_accumulated_stats(int device) noexcept
{
    if (device < 0 || device >= max_devices)
        return;
    try {
        gpumem_torch::graph_pool_reset_accumulated(device);
    } catch (const std::exception &e) {
        (void)e;
    }
    for (auto &metric : stats[device])
        for (auto &s : metric) {
            s.allocated.store(0, std::memory_order_relaxed);
            s.freed.store(0, std::memory_order_relaxed);
        }
}
