#!/usr/bin/env python3
"""Replays allocation traces through PyTorch's CUDA caching allocator.

    python3 bench/torch_replay.py [--repeat N] [--label NAME] TRACE...

For bench/run_cuda.sh. The allocator is called from C++, not through tensors:
c10::cuda::CUDACachingAllocator::raw_alloc and raw_delete, from a small
extension compiled on the spot (torch.utils.cpp_extension.load_inline), so the
time is the allocator's and not Python's or a tensor's. Whatever
PYTORCH_CUDA_ALLOC_CONF the process starts with applies (run_cuda.sh runs it
once as is and once with expandable_segments:True; the setting is read when
CUDA starts, hence one process per setting).

Per trace, one JSON line with gpumem-replay's keys: ns_per_op is the median of N
timed replays after one untimed warm-up, each stopped after the stream is
synchronized; what a replay leaves live is freed untimed. peak_reserved_bytes is
torch.cuda.memory_stats()'s reserved_bytes.all.peak over one more replay after
empty_cache() and reset_peak_memory_stats(); peak_live_bytes the trace's peak of
raw requested bytes. A request of 0 bytes asks for 1. Exit status 77 when
PyTorch is missing or sees no CUDA device.
"""

import argparse
import json
import os
import sys

CPP = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#include <chrono>
#include <cstdint>
#include <vector>

// ops: kinds (1 alloc, 0 free), ids and sizes, int64 tensors on the host.
// Returns the nanoseconds of each of repeat + 1 replays (the first is the
// warm-up) and, last, the failed allocations of the last replay.
std::vector<double> replay(torch::Tensor kinds, torch::Tensor ids, torch::Tensor sizes,
                           int64_t nids, int64_t repeat) {
    const int64_t *k = kinds.data_ptr<int64_t>(), *id = ids.data_ptr<int64_t>(),
                  *sz = sizes.data_ptr<int64_t>();
    int64_t n = kinds.numel();
    std::vector<void *> ptrs(nids, nullptr);
    std::vector<double> out;
    double failures = 0;
    auto stream = c10::cuda::getCurrentCUDAStream();
    for (int64_t r = 0; r <= repeat; r++) {
        failures = 0;
        auto t0 = std::chrono::steady_clock::now();
        for (int64_t i = 0; i < n; i++) {
            if (k[i]) {
                void *p = nullptr;
                try {
                    p = c10::cuda::CUDACachingAllocator::raw_alloc(sz[i] ? (size_t)sz[i] : 1);
                } catch (const c10::Error &) {
                    p = nullptr;
                }
                if (!p)
                    failures++;
                ptrs[id[i]] = p;
            } else if (ptrs[id[i]]) {
                c10::cuda::CUDACachingAllocator::raw_delete(ptrs[id[i]]);
                ptrs[id[i]] = nullptr;
            }
        }
        stream.synchronize();
        auto t1 = std::chrono::steady_clock::now();
        for (void *&p : ptrs) {
            if (p)
                c10::cuda::CUDACachingAllocator::raw_delete(p);
            p = nullptr;
        }
        stream.synchronize();
        out.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count());
    }
    out.push_back(failures);
    return out;
}
"""


def parse(path):
    """(kinds, ids, sizes, number of IDs, peak of raw live bytes) of a trace."""
    kinds, ids, sizes, index, live = [], [], [], {}, {}
    cur = peak = 0
    with open(path) as f:
        for n, line in enumerate(f, 1):
            t = line.split()
            if not t or t[0].startswith("#"):
                continue
            if t[0] == "a" and len(t) >= 3:
                i = index.setdefault(t[1], len(index))
                size = int(t[2])
                live[i] = size
                cur += size
                peak = max(peak, cur)
                kinds.append(1)
                sizes.append(size)
            elif t[0] == "f" and len(t) >= 2 and index.get(t[1]) in live:
                i = index[t[1]]
                cur -= live.pop(i)
                kinds.append(0)
                sizes.append(0)
            else:
                sys.exit(f"torch_replay.py: {path}:{n}: bad line")
            ids.append(i)
    return kinds, ids, sizes, len(index), peak


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=11)
    ap.add_argument("--label", default="torch")
    ap.add_argument("traces", nargs="+")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat takes N >= 1")
    try:
        import torch
        from torch.utils.cpp_extension import load_inline
    except ImportError as e:
        print(f"torch_replay.py: PyTorch is not importable ({e})", file=sys.stderr)
        return 77
    if not torch.cuda.is_available():
        print("torch_replay.py: PyTorch sees no CUDA device", file=sys.stderr)
        return 77
    ext = load_inline(
        name="gpumem_bench_torch_replay",
        cpp_sources=CPP,
        functions=["replay"],
        with_cuda=True,
        extra_cflags=["-O2"],
        verbose=False,
    )
    torch.cuda.init()
    for path in args.traces:
        kinds, ids, sizes, nids, peak_live = parse(path)
        k = torch.tensor(kinds, dtype=torch.int64)
        i = torch.tensor(ids, dtype=torch.int64)
        s = torch.tensor(sizes, dtype=torch.int64)
        res = ext.replay(k, i, s, nids, args.repeat)
        times, failures = sorted(res[1:-1]), int(res[-1])
        ns_per_op = times[len(times) // 2] / len(kinds) if kinds else 0.0
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        ext.replay(k, i, s, nids, 0)
        reserved = torch.cuda.memory_stats().get("reserved_bytes.all.peak", 0)
        torch.cuda.empty_cache()
        name = os.path.basename(path)
        if name.endswith(".trace"):
            name = name[: -len(".trace")]
        print(json.dumps({
            "trace": name,
            "allocator": args.label,
            "ops": len(kinds),
            "ns_per_op": round(ns_per_op, 2),
            "peak_live_bytes": peak_live,
            "peak_reserved_bytes": reserved,
            "failures": failures,
            "repeat": args.repeat,
            "device": torch.cuda.get_device_name(0),
        }), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
