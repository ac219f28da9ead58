#!/bin/sh
# The real-GPU table in one command (issue 22, item 4): replays the generated
# workloads on CUDA device 0 through
#   gpumem-growth     gpumem_malloc/gpumem_free on the CUDA backend, growing
#                     (gpumem-replay --allocator api-cuda --growth), and
#   gpumem-growth-no-trim  the same with GPUMEM_GROWTH_TRIM off: the trim's
#                     driver calls in time, its memory in peak
#   gpumem-growth-async  the same through gpumem_malloc_async/gpumem_free_async
#                     on the default stream, the path gpumem.torch takes
#                     (--allocator api-cuda-async --growth)
#   cudaMalloc        cudaMalloc/cudaFree        (bench/cuda_baselines.cu)
#   cudaMallocAsync   cudaMallocAsync/cudaFreeAsync on the default pool
#   torch             PyTorch's caching allocator (bench/torch_replay.py), and
#   torch-expandable  the same with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
#                     (both only when `python3 -c 'import torch'` works)
# and prints one table: ns/op and peak reserved / peak live, the denominator the
# trace's peak of raw requested bytes for every row, and gpumem's CUDA driver calls
# per 1,000 operations; then, so that every GPU run measures the price of a call,
# the nanoseconds per call of each entry point gpumem's rows called, as gpumem
# timed them (gpumem_list_driver_calls), beside the price list's
# (tests/fakecuda/driver_prices.h) that models a GPU without one (bench/cuda_table.py).
#
#   bench/run_cuda.sh [BUILD_DIR]        (default: build-bench, a release build)
#
# Environment: REPEAT (timed replays, default 11), TRACE_OPS (multiplies the
# traces' lengths), NVCC (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc),
# WORKLOADS (default "training serving random tiny"), PYTHON (default python3),
# REPLAY (a gpumem-replay to run instead of building BUILD_DIR's), TRAIN=1 (then
# also bench/torch_train.py: a training step and the batch-size finder under
# gpumem.torch against PyTorch's allocator, ROUNDS alternated rounds each,
# default 8; PyTorch needed).
# The JSON lines stay in BUILD_DIR/cuda-results.jsonl. Exits 77, measuring
# nothing, where there is no CUDA GPU or no nvcc; any other failure stops it.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=${1:-$root/build-bench}
repeat=${REPEAT:-11}
python=${PYTHON:-python3}
workloads=${WORKLOADS:-training serving random tiny}
case $repeat in
'' | *[!0-9]* | 0)
    echo "run_cuda.sh: REPEAT takes a whole number from 1, not '$repeat'" >&2
    exit 2
    ;;
esac

skip() {
    echo "run_cuda.sh: $*; nothing measured (skipped)" >&2
    exit 77
}
die() {
    echo "run_cuda.sh: $*" >&2
    exit 1
}

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    skip "no CUDA GPU here (nvidia-smi lists none)"
fi
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[ -x "$nvcc" ] || skip "no nvcc (set NVCC)"

replay=${REPLAY:-}
if [ -z "$replay" ]; then
    if [ ! -f "$build/build.ninja" ]; then
        meson setup "$build" "$root" -Dbuildtype=release -Dbench=true >/dev/null
    fi
    ninja -C "$build" bench/gpumem-replay >/dev/null
    replay=$build/bench/gpumem-replay
fi
[ -x "$replay" ] || die "no gpumem-replay at $replay"
mkdir -p "$build/bench"
baselines=$build/bench/gpumem-cuda-baselines
"$nvcc" -O2 -std=c++17 -o "$baselines" "$here/cuda_baselines.cu" ||
    die "nvcc could not build bench/cuda_baselines.cu"
traces=$build/bench-traces
"$python" "$here/gen_traces.py" --out "$traces" --ops "${TRACE_OPS:-1}" >/dev/null
out=$build/cuda-results.jsonl
: > "$out"

for w in $workloads; do
    t=$traces/$w.trace
    for trim in 1 0; do
        label=gpumem-growth
        [ $trim = 1 ] || label=gpumem-growth-no-trim
        echo "== $w / $label" >&2
        # not in a pipeline, whose status would be sed's
        line=$(GPUMEM_BENCH_GROWTH_TRIM=$trim "$replay" --allocator api-cuda --growth \
            --repeat "$repeat" --json "$t") || die "gpumem-replay failed on $w ($label)"
        printf '%s\n' "$line" |
            sed "s/\"allocator\": \"api-cuda\"/\"allocator\": \"$label\"/" >> "$out"
    done
    echo "== $w / gpumem-growth-async" >&2
    line=$("$replay" --allocator api-cuda-async --growth --repeat "$repeat" --json "$t") ||
        die "gpumem-replay failed on $w (gpumem-growth-async)"
    printf '%s\n' "$line" |
        sed 's/"allocator": "api-cuda-async"/"allocator": "gpumem-growth-async"/' >> "$out"
    for a in cudaMalloc cudaMallocAsync; do
        echo "== $w / $a" >&2
        "$baselines" --allocator "$a" --repeat "$repeat" "$t" >> "$out" ||
            die "gpumem-cuda-baselines failed on $w / $a"
    done
done

if "$python" -c 'import torch' 2>/dev/null; then
    set --
    for w in $workloads; do
        set -- "$@" "$traces/$w.trace"
    done
    echo "== PyTorch's caching allocator" >&2
    rc=0
    "$python" "$here/torch_replay.py" --repeat "$repeat" --label torch "$@" >> "$out" || rc=$?
    if [ $rc = 0 ]; then
        echo "== PyTorch's caching allocator, expandable segments" >&2
        PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "$python" "$here/torch_replay.py" \
            --repeat "$repeat" --label torch-expandable "$@" >> "$out" ||
            die "torch_replay.py failed (expandable segments)"
    elif [ $rc = 77 ]; then
        echo "run_cuda.sh: PyTorch sees no CUDA device; its rows are left out" >&2
    else
        die "torch_replay.py failed"
    fi
else
    echo "run_cuda.sh: PyTorch is not importable; its rows are left out" >&2
fi

"$python" "$here/cuda_table.py" --traces "$traces" "$out"

if [ "${TRAIN:-0}" = 1 ]; then
    echo "== a training step and the batch-size finder (bench/torch_train.py)" >&2
    "$python" "$here/torch_train.py" --rounds "${ROUNDS:-8}" ||
        die "torch_train.py failed (training)"
    "$python" "$here/torch_train.py" --rounds "${ROUNDS:-8}" --finder ||
        die "torch_train.py failed (finder)"
fi
