#!/bin/sh
# The ledger's cost to the public malloc/free (issue 23, item 8), as docs/bench.md
# reports it ("The ledger's cost"):
#   1. instructions per (free, allocate) pair under callgrind, one process, with
#      the ledger off and on (the stable figure: the same on every run);
#   2. time, 1 process and 8 processes of one thread on one shared simulated GPU,
#      each as it is and with an idle thread of its own (--idle-thread: as a
#      program that has other threads, which every framework has): ROUNDS
#      invocations of gpumem-ledger each (each runs off and on alternately, RUNS
#      runs of each, and prints on's median against off's), and the median of
#      the invocations' ratios.
#
#   bench/run_ledger.sh [BUILD_DIR]     (default: build-bench, a release build)
#
# Environment: ROUNDS (default 5), RUNS (default 9), PAIRS (per process, default
# 200000 with one process and 40000 with eight), NO_CALLGRIND=1 (skip 1.).
# Prints its figures; writes nothing.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=${1:-$root/build-bench}
rounds=${ROUNDS:-5}
runs=${RUNS:-9}
for n in "$rounds" "$runs" "${PAIRS:-1}"; do
    case $n in
    '' | *[!0-9]* | 0)
        echo "run_ledger.sh: ROUNDS, RUNS and PAIRS take whole numbers above 0, not '$n'" >&2
        exit 2
        ;;
    esac
done

if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" "$root" -Dbuildtype=release -Dbench=true
fi
ninja -C "$build" bench/gpumem-ledger >/dev/null
bench=$build/bench/gpumem-ledger

echo "# gpumem-ledger at $(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)," \
    "$(nproc) cores, $(date -u +%Y-%m-%d)"

if [ "${NO_CALLGRIND:-0}" != 1 ] && command -v valgrind >/dev/null 2>&1; then
    pairs=100000
    # the pairs run in bench_ledger_pairs, the warm-up's (pairs/10 + 1) too
    counted=$((pairs + pairs / 10 + 1))
    for mode in off on; do
        out=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null \
            --collect-atstart=no --toggle-collect=bench_ledger_pairs \
            "$bench" --ledger "$mode" --pairs "$pairs" 2>&1) || {
            printf '%s\n' "$out" >&2
            echo "run_ledger.sh: callgrind failed with the ledger $mode" >&2
            exit 1
        }
        ir=$(printf '%s\n' "$out" | sed -n 's/^==[0-9]*== Collected : \([0-9]*\)$/\1/p')
        [ -n "$ir" ] || {
            echo "run_ledger.sh: callgrind printed no count with the ledger $mode" >&2
            exit 1
        }
        eval "ir_$mode=$ir"
    done
    # shellcheck disable=SC2154 # set by the eval above
    awk -v off="$ir_off" -v on="$ir_on" -v n="$counted" 'BEGIN {
        printf "instructions per pair, 1 process: off %.1f, on %.1f, %.3fx off\n",
            off / n, on / n, on / off }'
fi

for procs in 1 8; do
  for idle in "" --idle-thread; do
    pairs=${PAIRS:-$([ "$procs" = 1 ] && echo 200000 || echo 40000)}
    ratios=""
    r=1
    while [ "$r" -le "$rounds" ]; do
        # shellcheck disable=SC2086 # $idle: no word or one
        out=$("$bench" --processes "$procs" --pairs "$pairs" --runs "$runs" $idle)
        printf '%s\n' "$out" | sed "s/^/  round $r$idle: /" >&2
        ratio=$(printf '%s\n' "$out" | sed -n 's/.* \([0-9.]*\)x off$/\1/p')
        [ -n "$ratio" ] || {
            echo "run_ledger.sh: gpumem-ledger printed no ratio" >&2
            exit 1
        }
        ratios="$ratios $ratio"
        r=$((r + 1))
    done
    # shellcheck disable=SC2086 # one ratio a word
    printf '%s\n' $ratios | sort -n | awk -v p="$procs" -v k="$pairs" -v i="$idle" '
        { v[NR] = $1 }
        END { printf "time, %d process%s%s (%d pairs each): on/off %s (median of %d rounds; all:",
                  p, p == 1 ? "" : "es", i == "" ? "" : " with an idle thread", k,
                  v[int((NR + 1) / 2)], NR
              for (j = 1; j <= NR; j++) printf " %s", v[j]
              print ")" }'
  done
done
