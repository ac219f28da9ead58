#!/bin/sh
# Regenerates the bench results and writes them into docs/bench.md and the
# README's results table (between its bench markers):
#   every allocator x every workload: ns/op (median of the timed replays),
#   instructions per operation under callgrind (the warm replay only), the minimum
#   capacity factor (the clairvoyant yardstick: that factor only); the api in growth mode; the scaling run; the commit and the
#   machine.
#
#   bench/run_all.sh [BUILD_DIR]        (default: build-bench, a release build)
#
# Environment: REPEAT (timed replays, default 11), ROUNDS (runs of arena and api,
# taken alternately, whose median ns/op counts; default 3), NO_CALLGRIND=1 (skip the
# instruction counts), TRACE_OPS (multiplies the generated traces' lengths),
# SEEDS (the seeds of the minimum-capacity spread, default "1 2 3 4 5 6 7 8";
# seed 1 is the main table's).
# A replay, callgrind or scaling run that fails stops the script before it writes
# anything into the docs.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=${1:-$root/build-bench}
repeat=${REPEAT:-11}
rounds=${ROUNDS:-3}
for n in "$repeat" "$rounds"; do
    case $n in
    '' | *[!0-9]*)
        echo "run_all.sh: REPEAT and ROUNDS take whole numbers, not '$n'" >&2
        exit 2
        ;;
    esac
done
SEEDS=${SEEDS:-1 2 3 4 5 6 7 8}

if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" "$root" -Dbuildtype=release
fi
ninja -C "$build" bench/gpumem-replay bench/gpumem-scaling >/dev/null
replay=$build/bench/gpumem-replay
scaling=$build/bench/gpumem-scaling
traces=$build/bench-traces
out=$build/bench-results.jsonl

die() {
    echo "run_all.sh: $*; docs/bench.md and README.md are left as they were" >&2
    exit 1
}

# run_replay LABEL ARGS...: the replay's JSON line, or the script stops
run_replay() {
    label=$1
    shift
    "$replay" "$@" --json || die "gpumem-replay failed on $label"
}

python3 "$here/gen_traces.py" --out "$traces" --ops "${TRACE_OPS:-1}" >/dev/null

have_cg=0
if [ "${NO_CALLGRIND:-0}" != 1 ] && command -v valgrind >/dev/null 2>&1; then
    have_cg=1
fi

: > "$out"
{
    printf '{"kind": "machine", "cpu": "%s", "nproc": %s, "revision": "%s", "date": "%s", "compiler": "%s", "valgrind": "%s"}\n' \
        "$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)" \
        "$(nproc)" \
        "$(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)" \
        "$(date -u +%Y-%m-%d)" \
        "$("$replay" --repeat 0 "$here/traces/smoke.trace" |
            sed -n '1s/.*, compiler \(.*\), build type.*/\1/p')" \
        "$(valgrind --version 2>/dev/null || echo none)"
} >> "$out"

for w in training serving random tiny; do
    for a in arena api first-fit tlsf malloc; do
        echo "== $w / $a" >&2
        line=$(run_replay "$w / $a" --allocator "$a" --repeat "$repeat" --find-min-capacity \
            "$traces/$w.trace") || exit 1
        ir=null
        if [ $have_cg = 1 ]; then
            # the warm replay only: the counts are zeroed where the timed replays
            # begin and cover only the allocator's entry points (replay.c says how)
            cg=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null \
                --collect-atstart=no --toggle-collect='bench_op_*' \
                --zero-before=bench_timed_replays_begin \
                "$replay" --allocator "$a" --repeat 1 --json "$traces/$w.trace" 2>&1) ||
                die "callgrind failed on $w / $a"
            ir=$(printf '%s\n' "$cg" | sed -n 's/^==[0-9]*== Collected : \([0-9]*\)$/\1/p')
            [ -n "$ir" ] || die "callgrind printed no count on $w / $a"
        fi
        printf '%s\n' "$line" | sed "s/}\$/, \"callgrind_ir\": $ir}/" >> "$out"
    done
    # arena and api again, alternately: report.py takes each one's median over the
    # rounds, so that a slow spell of this shared machine during one run does not
    # decide the api-against-arena ratio
    r=2
    while [ "$repeat" -gt 0 ] && [ "$r" -le "$rounds" ]; do
        for a in arena api; do
            echo "== $w / $a, round $r" >&2
            line=$(run_replay "$w / $a, round $r" --allocator "$a" --repeat "$repeat" \
                "$traces/$w.trace") || exit 1
            printf '%s\n' "$line" | sed 's/^{/{"kind": "round", /' >> "$out"
        done
        r=$((r + 1))
    done
    # the placement that knows every lifetime: a yardstick for the minimum
    # capacity only (it scans every free block on every allocation)
    echo "== $w / clairvoyant" >&2
    line=$(run_replay "$w / clairvoyant" --allocator clairvoyant --repeat 0 \
        --find-min-capacity "$traces/$w.trace") || exit 1
    printf '%s\n' "$line" | sed 's/}$/, "callgrind_ir": null}/' >> "$out"
    echo "== $w / api --growth" >&2
    line=$(run_replay "$w / api --growth" --allocator api --growth --repeat "$repeat" \
        "$traces/$w.trace") || exit 1
    printf '%s\n' "$line" | sed 's/"allocator": "api"/"allocator": "api-growth"/' >> "$out"
done
# the minimum capacity factor is one trace's worst moment, so it moves from seed to
# seed: the same generator with other seeds shows how far (fixed pools only)
for seed in $SEEDS; do
    [ "$seed" = 1 ] && continue
    python3 "$here/gen_traces.py" --out "$traces-seed$seed" --seed "$seed" \
        --ops "${TRACE_OPS:-1}" >/dev/null
    for w in training serving random tiny; do
        for a in arena first-fit tlsf clairvoyant; do
            echo "== seed $seed: $w / $a" >&2
            line=$(run_replay "seed $seed: $w / $a" --allocator "$a" --repeat 0 \
                --find-min-capacity "$traces-seed$seed/$w.trace") || exit 1
            printf '%s\n' "$line" |
                sed "s/^{/{\"kind\": \"seed\", \"seed\": $seed, /" >> "$out"
        done
    done
done
echo "== scaling" >&2
"$scaling" --json >> "$out"

python3 "$here/report.py" "$out" "$root/docs/bench.md" "$root/README.md"
echo "wrote $root/docs/bench.md and the README's table (raw results: $out)" >&2
