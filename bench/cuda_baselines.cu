/* gpumem-cuda-baselines: replays an allocation trace (DESIGN.md's format, as
 * gpumem-replay reads it) through CUDA's own allocators on a real GPU, for the
 * real-GPU table of bench/run_cuda.sh.
 *
 *   gpumem-cuda-baselines --allocator cudaMalloc|cudaMallocAsync [--repeat N] TRACE
 *
 * Prints one JSON line with gpumem-replay's keys: ns_per_op is the median of N
 * timed replays after one untimed warm-up (each replay's clock stops after the
 * stream is synchronized, so a stream-ordered free is paid for); what a replay
 * leaves live is freed untimed. peak_reserved_bytes is what the device gave up:
 * for cudaMalloc, the largest drop of cudaMemGetInfo's free memory below its
 * value before the replay, sampled after every operation of one more, untimed
 * replay (it includes the driver's own rounding of each block); for
 * cudaMallocAsync, the default pool's cudaMemPoolAttrReservedMemHigh after that
 * replay, the pool's release threshold set to the maximum so that it keeps its
 * memory between synchronizations as a caching allocator does. peak_live_bytes is
 * the trace's peak of raw requested bytes; failures counts the failed allocations
 * of the last timed replay. A request of 0 bytes asks for 1, as gpumem-replay's api
 * allocator does. Exit status 77 when there is no CUDA device, 2 on bad input,
 * 1 on a CUDA error. */
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

namespace
{

struct Op {
    bool alloc;
    uint32_t id;
    uint64_t size;
};

struct Trace {
    std::string name;
    std::vector<Op> ops;
    uint32_t nids = 0;
    uint64_t peak_live = 0; /* raw requested bytes */
};

bool parse(const char *path, Trace &tr)
{
    std::ifstream in(path);
    if (!in) {
        std::fprintf(stderr, "gpumem-cuda-baselines: cannot read %s\n", path);
        return false;
    }
    std::string base = path;
    size_t slash = base.find_last_of('/');
    if (slash != std::string::npos)
        base = base.substr(slash + 1);
    size_t dot = base.rfind(".trace");
    tr.name = dot == std::string::npos ? base : base.substr(0, dot);
    std::unordered_map<std::string, uint32_t> ids;
    std::vector<uint64_t> live;
    uint64_t cur = 0;
    std::string line;
    for (size_t n = 1; std::getline(in, line); n++) {
        std::istringstream ls(line);
        std::string kind, id;
        if (!(ls >> kind) || kind[0] == '#')
            continue;
        if ((kind != "a" && kind != "f") || !(ls >> id)) {
            std::fprintf(stderr, "gpumem-cuda-baselines: %s:%zu: bad line\n", path, n);
            return false;
        }
        Op op{kind == "a", 0, 0};
        auto it = ids.find(id);
        if (op.alloc) {
            if (!(ls >> op.size)) {
                std::fprintf(stderr, "gpumem-cuda-baselines: %s:%zu: bad size\n", path,
                             n);
                return false;
            }
            if (it == ids.end()) {
                it = ids.emplace(id, tr.nids++).first;
                live.push_back(0);
            }
            op.id = it->second;
            if (live[op.id]) {
                std::fprintf(stderr, "gpumem-cuda-baselines: %s:%zu: ID %s is live\n",
                             path, n, id.c_str());
                return false;
            }
            /* a zero-byte request is live with 0 bytes: mark it by size + 1 */
            live[op.id] = op.size + 1;
            cur += op.size;
            tr.peak_live = std::max(tr.peak_live, cur);
        } else {
            if (it == ids.end() || !live[it->second]) {
                std::fprintf(stderr,
                             "gpumem-cuda-baselines: %s:%zu: free of unknown ID\n", path,
                             n);
                return false;
            }
            op.id = it->second;
            cur -= live[op.id] - 1;
            live[op.id] = 0;
        }
        tr.ops.push_back(op);
    }
    return true;
}

bool check(cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return true;
    std::fprintf(stderr, "gpumem-cuda-baselines: %s: %s\n", what, cudaGetErrorString(e));
    return false;
}

/* One replay; returns its nanoseconds, or -1 on a CUDA error. sample: track the
 * lowest free memory after every operation (the untimed peak replay). */
double replay(const Trace &tr, bool async, cudaStream_t s, std::vector<void *> &ptrs,
              uint64_t *failures, size_t *min_free)
{
    *failures = 0;
    auto t0 = std::chrono::steady_clock::now();
    for (const Op &op : tr.ops) {
        if (op.alloc) {
            void *p = nullptr;
            size_t bytes = op.size ? (size_t)op.size : 1;
            cudaError_t e = async ? cudaMallocAsync(&p, bytes, s) : cudaMalloc(&p, bytes);
            if (e != cudaSuccess) {
                (void)cudaGetLastError(); /* an out-of-memory error is not sticky */
                p = nullptr;
                ++*failures;
            }
            ptrs[op.id] = p;
        } else if (ptrs[op.id]) {
            cudaError_t e = async ? cudaFreeAsync(ptrs[op.id], s) : cudaFree(ptrs[op.id]);
            if (!check(e, "free"))
                return -1;
            ptrs[op.id] = nullptr;
        }
        if (min_free) {
            size_t fr, total;
            if (!check(cudaMemGetInfo(&fr, &total), "cudaMemGetInfo"))
                return -1;
            *min_free = std::min(*min_free, fr);
        }
    }
    if (!check(cudaStreamSynchronize(s), "cudaStreamSynchronize"))
        return -1;
    auto t1 = std::chrono::steady_clock::now();
    for (void *&p : ptrs) {
        if (p && !check(async ? cudaFreeAsync(p, s) : cudaFree(p), "free"))
            return -1;
        p = nullptr;
    }
    if (!check(cudaStreamSynchronize(s), "cudaStreamSynchronize"))
        return -1;
    return std::chrono::duration<double, std::nano>(t1 - t0).count();
}

} // namespace

int main(int argc, char **argv)
{
    const char *allocator = "cudaMalloc", *path = nullptr;
    long repeat = 11;
    for (int i = 1; i < argc; i++) {
        if (!std::strcmp(argv[i], "--allocator") && i + 1 < argc) {
            allocator = argv[++i];
        } else if (!std::strcmp(argv[i], "--repeat") && i + 1 < argc) {
            char *end;
            repeat = std::strtol(argv[++i], &end, 10);
            if (*end || repeat < 1) {
                std::fprintf(stderr, "gpumem-cuda-baselines: --repeat takes N >= 1\n");
                return 2;
            }
        } else if (argv[i][0] != '-' && !path) {
            path = argv[i];
        } else {
            path = nullptr;
            break;
        }
    }
    bool async = !std::strcmp(allocator, "cudaMallocAsync");
    if (!path || (!async && std::strcmp(allocator, "cudaMalloc"))) {
        std::fprintf(stderr, "usage: gpumem-cuda-baselines --allocator "
                             "cudaMalloc|cudaMallocAsync [--repeat N] TRACE\n");
        return 2;
    }
    Trace tr;
    if (!parse(path, tr))
        return 2;
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        std::fprintf(stderr, "gpumem-cuda-baselines: no CUDA device\n");
        return 77;
    }
    cudaStream_t s;
    if (!check(cudaSetDevice(0), "cudaSetDevice") ||
        !check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate"))
        return 1;
    cudaMemPool_t pool = nullptr;
    if (async) {
        uint64_t keep = UINT64_MAX;
        if (!check(cudaDeviceGetDefaultMemPool(&pool, 0),
                   "cudaDeviceGetDefaultMemPool") ||
            !check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
                   "cudaMemPoolSetAttribute"))
            return 1;
    }
    std::vector<void *> ptrs(tr.nids, nullptr);
    uint64_t failures = 0;
    std::vector<double> ns;
    for (long r = 0; r <= repeat; r++) {
        double t = replay(tr, async, s, ptrs, &failures, nullptr);
        if (t < 0)
            return 1;
        if (r)
            ns.push_back(t);
    }
    std::sort(ns.begin(), ns.end());
    double ns_per_op = tr.ops.empty() ? 0 : ns[ns.size() / 2] / (double)tr.ops.size();

    /* the peak, untimed: a fresh pool (trimmed, its high-water mark reset) or the
     * device's free memory before the replay as the baseline */
    uint64_t peak_reserved = 0, sample_failures = 0;
    if (async) {
        uint64_t zero = 0;
        if (!check(cudaMemPoolTrimTo(pool, 0), "cudaMemPoolTrimTo") ||
            !check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &zero),
                   "cudaMemPoolSetAttribute") ||
            replay(tr, true, s, ptrs, &sample_failures, nullptr) < 0 ||
            !check(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh,
                                           &peak_reserved),
                   "cudaMemPoolGetAttribute"))
            return 1;
    } else {
        size_t before, total;
        if (!check(cudaMemGetInfo(&before, &total), "cudaMemGetInfo"))
            return 1;
        size_t low = before;
        if (replay(tr, false, s, ptrs, &sample_failures, &low) < 0)
            return 1;
        peak_reserved = before - low;
    }
    cudaDeviceProp prop;
    if (!check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties"))
        return 1;
    std::printf("{\"trace\": \"%s\", \"allocator\": \"%s\", \"ops\": %zu, "
                "\"ns_per_op\": %.2f, \"peak_live_bytes\": %" PRIu64
                ", \"peak_reserved_bytes\": %" PRIu64 ", \"failures\": %" PRIu64
                ", \"repeat\": %ld, \"device\": \"%s\"}\n",
                tr.name.c_str(), allocator, tr.ops.size(), ns_per_op, tr.peak_live,
                peak_reserved, failures, repeat, prop.name);
    cudaStreamDestroy(s);
    return 0;
}
