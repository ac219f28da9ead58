/* Private pools for CUDA graphs (graph_pools.h): the captures under way, and
 * per pool its blocks (each one's rounded size) and its free ones by (stream,
 * size). One mutex; the lock-free fast path reads two counters. */
#include "graph_pools.h"

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace gpumem_torch
{
namespace
{

struct Pool {
    bool released = false;
    int device = -1;
    std::unordered_map<void *, size_t> blocks;             /* every block: its size */
    std::multimap<std::pair<void *, size_t>, void *> free; /* (stream, size) -> block */
};

struct Capture {
    int device;
    MempoolId id;
    StreamFilter filter;
};

std::mutex mu;
std::map<MempoolId, Pool> pools;
std::unordered_map<void *, MempoolId> owner; /* a pool's block -> its pool */
std::vector<Capture> captures;
std::atomic<size_t> capturing{0}; /* captures.size() */
std::atomic<size_t> held{0};      /* owner.size() */

/* PyTorch's reserved_bytes_by_private_pools, per pool, kept after the pool goes */
struct Bytes {
    int device = -1;
    int64_t current = 0, peak = 0, allocated = 0, freed = 0;
};
std::map<MempoolId, Bytes> bytes;

void bytes_in(MempoolId id, int device, size_t n)
{
    Bytes &b = bytes[id];
    b.device = device;
    b.current += static_cast<int64_t>(n);
    b.allocated += static_cast<int64_t>(n);
    if (b.current > b.peak)
        b.peak = b.current;
}

void bytes_out(MempoolId id, size_t n)
{
    Bytes &b = bytes[id];
    b.current -= static_cast<int64_t>(n);
    b.freed += static_cast<int64_t>(n);
}

size_t rounded(size_t size) { return (size + 255) & ~static_cast<size_t>(255); }

/* A free block of `p` for `size` bytes on `stream`: the smallest that holds
 * it, when it is at most twice as large (a larger one is left for a larger
 * request: the pool does not split). NULL when none. pre: mu held. */
void *take_free(Pool &p, void *stream, size_t size)
{
    auto it = p.free.lower_bound({stream, size});
    if (it == p.free.end() || it->first.first != stream || it->first.second / 2 > size)
        return nullptr;
    void *ptr = it->second;
    p.free.erase(it);
    return ptr;
}

void forget_block(Pool &p, void *ptr)
{
    bytes_out(owner[ptr], p.blocks[ptr]);
    p.blocks.erase(ptr);
    owner.erase(ptr);
    held.store(owner.size(), std::memory_order_relaxed);
}

} // namespace

bool graph_pool_alloc(size_t size, int device, void *stream, void **ptr, gpumem_status *s)
{
    if (capturing.load(std::memory_order_relaxed) == 0)
        return false;
    std::lock_guard<std::mutex> lock(mu);
    const Capture *claim = nullptr;
    for (auto it = captures.rbegin(); it != captures.rend() && !claim; ++it)
        if (it->device == device && it->filter &&
            it->filter(static_cast<CUstream_st *>(stream)))
            claim = &*it;
    if (!claim)
        return false;
    Pool &p = pools[claim->id];
    size_t need = rounded(size);
    if (void *reused = take_free(p, stream, need)) {
        *ptr = reused;
        *s = GPUMEM_OK;
        return true;
    }
    *s = gpumem_torch_alloc(static_cast<gpumem_ssize>(size), device, stream, ptr);
    if (*s == GPUMEM_OK && *ptr) {
        p.blocks[*ptr] = need;
        owner[*ptr] = claim->id;
        bytes_in(claim->id, device, need);
        held.store(owner.size(), std::memory_order_relaxed);
    }
    return true;
}

bool graph_pool_free(void *ptr, void *stream)
{
    if (held.load(std::memory_order_relaxed) == 0)
        return false;
    std::unique_lock<std::mutex> lock(mu);
    auto o = owner.find(ptr);
    if (o == owner.end())
        return false;
    auto pit = pools.find(o->second);
    Pool &p = pit->second;
    if (!p.released) {
        p.free.insert({{stream, p.blocks[ptr]}, ptr});
        return true;
    }
    forget_block(p, ptr);
    if (p.blocks.empty())
        pools.erase(pit);
    lock.unlock();
    (void)gpumem_free_async(nullptr, ptr, stream);
    return true;
}

size_t graph_pool_stats(int device, int64_t *out, size_t capacity)
{
    std::lock_guard<std::mutex> lock(mu);
    size_t n = 0;
    for (auto &e : bytes) {
        if (e.second.device != device)
            continue;
        const int64_t f[6] = {static_cast<int64_t>(e.first.first),
                              static_cast<int64_t>(e.first.second),
                              e.second.current,
                              e.second.peak,
                              e.second.allocated,
                              e.second.freed};
        for (int64_t v : f) {
            if (out && n < capacity)
                out[n] = v;
            n++;
        }
    }
    return n;
}

void graph_pool_reset_peak(int device)
{
    std::lock_guard<std::mutex> lock(mu);
    for (auto &e : bytes)
        if (e.second.device == device)
            e.second.peak = e.second.current;
}

void graph_pool_reset_accumulated(int device)
{
    std::lock_guard<std::mutex> lock(mu);
    for (auto it = bytes.begin(); it != bytes.end();) {
        Bytes &b = it->second;
        if (b.device == device) {
            b.allocated = b.freed = 0;
            if (b.current == 0 && pools.find(it->first) == pools.end()) {
                it = bytes.erase(it);
                continue;
            }
        }
        ++it;
    }
}

void graph_pool_begin(int device, MempoolId id, StreamFilter filter)
{
    std::lock_guard<std::mutex> lock(mu);
    pools[id].released = false;
    pools[id].device = device;
    bytes[id].device = device;
    captures.push_back({device, id, std::move(filter)});
    capturing.store(captures.size(), std::memory_order_relaxed);
    (void)gpumem_stream_capture(true); /* no event query or wait until it ends */
}

void graph_pool_end(int device, MempoolId id)
{
    std::lock_guard<std::mutex> lock(mu);
    for (auto it = captures.rbegin(); it != captures.rend(); ++it)
        if (it->device == device && it->id == id) {
            captures.erase(std::next(it).base());
            (void)gpumem_stream_capture(false);
            break;
        }
    capturing.store(captures.size(), std::memory_order_relaxed);
}

void graph_pool_release(int device, MempoolId id)
{
    (void)device; /* a pool id names one pool whatever the device */
    std::vector<std::pair<void *, void *>> give; /* (block, stream) */
    {
        std::lock_guard<std::mutex> lock(mu);
        auto pit = pools.find(id);
        if (pit == pools.end())
            return;
        Pool &p = pit->second;
        p.released = true;
        for (auto &f : p.free)
            give.push_back({f.second, f.first.first});
        p.free.clear();
        for (auto &g : give)
            forget_block(p, g.first);
        if (p.blocks.empty())
            pools.erase(pit);
    }
    for (auto &g : give)
        (void)gpumem_free_async(nullptr, g.first, g.second);
}

} // namespace gpumem_torch
