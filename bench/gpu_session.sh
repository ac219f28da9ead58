#!/bin/sh
# Every check that needs a GPU, in one command, for a session that is lent one
# for a few minutes (the device tool's 15 minutes, starts included): builds
# into /tmp (a debug build for the tests, a release one for the bench), then,
# each step bounded by a timeout and the next step run whatever the last gave,
#   1. meson test --suite gpu          the C tests that need a GPU (stream rule,
#                                      driver calls, threads, the CUDA example)
#   2. tests/python/test_gpu_torch.py  PyTorch and CuPy on the GPU (skipped
#                                      where either is missing)
#   3. bench/run_cuda.sh               the real-GPU table, REPEAT=3, and with
#                                      TRAIN=1 the training step and the
#                                      batch-size finder against PyTorch's
#                                      allocator (bench/torch_train.py)
#   4. bench/growth --allocator api-cuda  gen_indep.py's random churn in growing
#                                      pools, 12 replays, the trim on and off:
#                                      what its swaps cost a real driver before
#                                      it stops (docs/bench.md, "The trim's
#                                      mistakes")
# and ends with one line per step: its name, its exit status, its seconds. The
# logs go to $OUT (the device tool's folder) when it is set, else to
# /tmp/gpumem-gpu-session. Where there is no GPU every step skips, quickly.
#
#   bench/gpu_session.sh              (STEP_LIMIT: seconds a step may take,
#                                      default 240; ROUNDS for torch_train.py,
#                                      default 4; SKIP_BENCH=1 leaves step 3 out;
#                                      PYTHON: the interpreter with PyTorch)
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
out=${OUT:-/tmp/gpumem-gpu-session}
limit=${STEP_LIMIT:-240}
mkdir -p "$out"
results=""

step() { # name command...: runs it under the limit, its output in $out/name.log
    name=$1
    shift
    start=$(date +%s)
    timeout "$limit" "$@" >"$out/$name.log" 2>&1
    rc=$?
    results="$results
$name: exit $rc, $(($(date +%s) - start)) s"
    tail -n 30 "$out/$name.log"
}

# A build of the tree into $1 with the options after it (a step's command).
build() {
    # shellcheck disable=SC2016 # expanded by that `sh -c`, not here
    printf '{ meson setup "$0" "$@" -Dwerror=false || meson setup --reconfigure "$0" "$@" -Dwerror=false; } && ninja -C "$0"'
}

cd "$root" || exit 1
nvidia-smi -L >"$out/gpus.txt" 2>&1 || echo "no nvidia-smi" >>"$out/gpus.txt"
step build-debug sh -c "$(build)" /tmp/gpumem-gpu-debug
step gpu-suite meson test -C /tmp/gpumem-gpu-debug --suite gpu --print-errorlogs -v
step python-gpu env GPUMEM_LIBRARY=/tmp/gpumem-gpu-debug/lib/libgpumem.so \
    "${PYTHON:-python3}" -m pytest -v -rs tests/python/test_gpu_torch.py
if [ "${SKIP_BENCH:-0}" != 1 ]; then
    step build-release sh -c "$(build)" /tmp/gpumem-gpu-release --buildtype=release \
        -Dbench=true
    step run-cuda env REPEAT=3 TRAIN=1 ROUNDS="${ROUNDS:-4}" \
        bench/run_cuda.sh /tmp/gpumem-gpu-release
    cp /tmp/gpumem-gpu-release/cuda-results.jsonl "$out/" 2>/dev/null
    # (with a GPU only: api-cuda has no device to replay on without one)
    if nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
        for trim in --trim --no-trim; do
            step "churn$trim" "${PYTHON:-python3}" bench/growth \
                --replay /tmp/gpumem-gpu-release/bench/gpumem-replay \
                --allocator api-cuda --family indep --only ichurn --seeds 1-2 \
                --replays 12 --traces /tmp/gpumem-gpu-churn "$trim"
        done
    fi
fi
echo "gpu session, $(head -n 1 "$out/gpus.txt"):$results"
