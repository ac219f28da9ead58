#!/bin/sh
# Smoke test of gpumem-replay (suite bench-smoke): correctness only, never time.
#   smoke.sh REPLAY TRACE ALLOCATOR   runs the allocator on the tiny trace
#   smoke.sh REPLAY TRACE bad-input   checks that bad arguments and traces are refused
#   smoke.sh REPLAY TRACE lifetimes   the clairvoyant baseline on traces/lifetimes.trace
set -u
replay=$1 trace=$2 mode=$3
peak=23862016   # the smoke trace's peak of live bytes, sizes rounded to 256 B
status=0

fail() { echo "FAIL: $*" >&2; status=1; }

field() { # field NAME JSON -> the value
    printf '%s\n' "$2" | sed -n "s/.*\"$1\": \([^,}]*\).*/\1/p"
}

if [ "$mode" = bad-input ]; then
    tmp=${TMPDIR:-/tmp}/gpumem-smoke-$$
    mkdir -p "$tmp" || exit 1
    printf 'a x 100\nf y\n' > "$tmp/unknown.trace"
    printf 'a x 100\na x 200\n' > "$tmp/twice.trace"
    printf 'a x\n' > "$tmp/nosize.trace"
    printf 'z x 1\n' > "$tmp/op.trace"
    printf 'a x 100\n\000a y 100\n' > "$tmp/nul.trace"
    printf 'a x 18446744073709551615\nf x\n' > "$tmp/huge.trace"
    printf 'a x 9223372036854775808\na y 9223372036854775808\n' > "$tmp/sum.trace"
    for t in unknown twice nosize op nul huge sum; do
        if "$replay" --repeat 0 "$tmp/$t.trace" > /dev/null 2>&1; then
            fail "a bad trace ($t) was accepted"
        fi
    done
    for args in "--allocator nosuch" "--capacity 12 " "--repeat -1" \
                "--allocator arena --growth" "--capacity 4096 --capacity-factor 2" \
                "--bogus"; do
        # shellcheck disable=SC2086
        if "$replay" $args "$trace" > /dev/null 2>&1; then
            fail "bad arguments accepted: $args"
        fi
    done
    # strtoull and strtol take leading blanks, a sign and an empty string
    for value in " -5" "+4096" ""; do
        if "$replay" --capacity "$value" "$trace" > /dev/null 2>&1; then
            fail "--capacity '$value' was accepted"
        fi
        if "$replay" --repeat "$value" "$trace" > /dev/null 2>&1; then
            fail "--repeat '$value' was accepted"
        fi
    done
    printf 'a x 18446744073709551616\nf x\n' > "$tmp/range.trace"
    err=$("$replay" --repeat 0 "$tmp/range.trace" 2>&1 >/dev/null) &&
        fail "a size of 2^64 was accepted"
    case $err in
    *"past 2^64 - 1 bytes"*) ;;
    *) fail "a size of 2^64: '$err' does not say it is too large" ;;
    esac
    if "$replay" --repeat 0 "$tmp/missing.trace" > /dev/null 2>&1; then
        fail "a missing trace was accepted"
    fi
    # a folder opens but cannot be read: say so, not "no operations"
    err=$("$replay" --repeat 0 "$tmp" 2>&1 >/dev/null) &&
        fail "a folder was accepted as a trace"
    case $err in
    *"Is a directory"*) ;;
    *) fail "a folder as the trace: '$err' does not say it is a folder" ;;
    esac
    rm -rf "$tmp"
    exit $status
fi

if [ "$mode" = lifetimes ]; then
    # at exactly the peak, only a placement that knows y outlives x fits z; the
    # timed replays reuse one instance, whose clock must restart with each
    knows=$("$replay" --allocator clairvoyant --capacity-factor 1 --repeat 3 --json "$trace")
    echo "$knows"
    [ "$(field failures "$knows")" = 0 ] || fail "clairvoyant: failures at the peak"
    blind=$("$replay" --allocator first-fit --capacity-factor 1 --repeat 0 --json "$trace")
    [ "$(field failures "$blind")" != 0 ] || fail "first fit fits z at the peak too"
    exit $status
fi

out=$("$replay" --allocator "$mode" --repeat 1 --find-min-capacity --json "$trace") ||
    { echo "FAIL: gpumem-replay exited with $?" >&2; exit 1; }
echo "$out"
[ "$(field allocator "$out")" = "\"$mode\"" ] || fail "allocator"
[ "$(field ops "$out")" = 302 ] || fail "ops is not 302"
[ "$(field peak_live_bytes "$out")" = $peak ] || fail "peak_live_bytes is not $peak"
[ "$(field failures "$out")" = 0 ] || fail "failures at twice the peak"
ns=$(field ns_per_op "$out")
[ "$ns" != null ] || fail "no ns_per_op"
# the driver's price: gpumem's own allocator on a GPU counts its calls, the others none
calls=$(field driver_calls_per_1000_ops "$out")
modelled=$(field modelled_ns_per_op "$out")
if [ "$mode" = api ]; then
    [ "$calls" != null ] && [ "$modelled" != null ] || fail "api: no driver figures"
else
    [ "$calls" = null ] && [ "$modelled" = null ] ||
        fail "$mode counts no driver calls, yet $calls per 1,000 ops, modelled $modelled"
fi
factor=$(field min_capacity_factor "$out")
if [ "$mode" = malloc ]; then
    [ "$factor" = null ] || fail "malloc has no capacity, yet a min factor $factor"
else
    # a factor in [1, 2]: the replay at twice the peak had no failure
    awk -v f="$factor" 'BEGIN { exit !(f >= 1 && f <= 2) }' ||
        fail "min_capacity_factor $factor is not in [1, 2]"
    # the definition: no failure at that factor, failures one 0.1% step below it
    at=$("$replay" --allocator "$mode" --repeat 0 --capacity-factor "$factor" --json "$trace")
    [ "$(field failures "$at")" = 0 ] || fail "failures at the min capacity factor $factor"
    below=$(awk -v f="$factor" 'BEGIN { printf "%.3f", f - 0.001 }')
    if awk -v b="$below" 'BEGIN { exit !(b >= 1) }'; then
        under=$("$replay" --allocator "$mode" --repeat 0 --capacity-factor "$below" --json \
            "$trace")
        [ "$(field failures "$under")" != 0 ] ||
            fail "no failure at $below, below the min capacity factor $factor"
    fi
    # the robust minimum (issue 34): at or above the plain one, no failure at any
    # point of its window (it and the next 100 points of the 0.1% grid), a failure
    # one step below it (that point's window holds no other failing point)
    rout=$("$replay" --allocator "$mode" --repeat 0 --robust-min-capacity --json "$trace")
    robust=$(field robust_min_capacity_factor "$rout")
    [ "$(field min_capacity_factor "$rout")" = "$factor" ] ||
        fail "--robust-min-capacity changed the plain minimum"
    awk -v r="$robust" -v f="$factor" 'BEGIN { exit !(r >= f && r <= 2) }' ||
        fail "robust_min_capacity_factor $robust is not in [$factor, 2]"
    for k in $(seq 0 100); do
        p=$(awk -v r="$robust" -v k="$k" 'BEGIN { printf "%.3f", r + k / 1000 }')
        at=$("$replay" --allocator "$mode" --repeat 0 --capacity-factor "$p" --json "$trace")
        [ "$(field failures "$at")" = 0 ] ||
            fail "failures at $p, inside the robust minimum's window ($robust)"
    done
    below=$(awk -v r="$robust" 'BEGIN { printf "%.3f", r - 0.001 }')
    if awk -v b="$below" 'BEGIN { exit !(b >= 1) }'; then
        under=$("$replay" --allocator "$mode" --repeat 0 --capacity-factor "$below" --json \
            "$trace")
        [ "$(field failures "$under")" != 0 ] ||
            fail "no failure at $below, below the robust minimum $robust"
    fi
    # at half the peak the trace cannot run without failures
    half=$("$replay" --allocator "$mode" --repeat 0 --capacity-factor 0.5 --json "$trace")
    [ "$(field failures "$half")" != 0 ] || fail "no failure at half the peak"
    # a free block that holds the request is found when it is the only one and
    # lies in the request's own size class (y fits x's hole, beside s, exactly):
    # no allocation fails while a free block would hold it. s stays live, so the
    # replays also free what a trace leaves (free_untimed)
    tmp=${TMPDIR:-/tmp}/gpumem-smoke-$$.trace
    printf 'a x 16640\na s 256\nf x\na y 16640\nf y\n' > "$tmp"
    fits=$("$replay" --allocator "$mode" --repeat 2 --capacity-factor 1 --json "$tmp")
    rm -f "$tmp"
    [ "$(field failures "$fits")" = 0 ] ||
        fail "a request failed while a free block of its own size class held it"
fi
case $mode in
    first-fit | tlsf | clairvoyant)
        # the largest request there is, 2^64 - 256 bytes, in a pool of exactly that
        tmp=${TMPDIR:-/tmp}/gpumem-smoke-$$.trace
        printf 'a x 18446744073709551360\nf x\n' > "$tmp"
        max=$("$replay" --allocator "$mode" --repeat 0 --capacity-factor 1 --json "$tmp")
        rm -f "$tmp"
        [ "$(field failures "$max")" = 0 ] || fail "a request of 2^64 - 256 bytes failed"
        ;;
    api)
        cap=$(field capacity_bytes "$out")
        [ "$(field peak_reserved_bytes "$out")" = "$cap" ] ||
            fail "a greedy pool reserves its whole limit"
        grow=$("$replay" --allocator api --growth --repeat 1 --json "$trace")
        echo "$grow"
        [ "$(field failures "$grow")" = 0 ] || fail "failures with growth"
        # growing from nothing (the one replay of --repeat 0) maps: driver calls
        cold=$("$replay" --allocator api --growth --repeat 0 --json "$trace")
        awk -v c="$(field driver_calls_per_1000_ops "$cold")" 'BEGIN { exit !(c > 0) }' ||
            fail "a growing pool's first replay made no driver call"
        reserved=$(field peak_reserved_bytes "$grow")
        awk -v r="$reserved" -v p=$peak 'BEGIN { exit !(r >= p && r <= 2 * p) }' ||
            fail "growth reserved $reserved for a peak of $peak"
        ;;
esac
# the text form has a header with the revision and a line of results
text=$("$replay" --allocator "$mode" --repeat 0 "$trace")
printf '%s\n' "$text" | head -1 | grep -q '^# gpumem-replay .*compiler' || fail "header"
[ "$(printf '%s\n' "$text" | wc -l)" -eq 3 ] || fail "text output is not 3 lines"
# eleven columns, the last two the driver's: calls per 1,000 operations, modelled ns/op
printf '%s\n' "$text" | sed -n 2p | grep -q 'driver_calls_per_1000_ops	modelled_ns_per_op$' ||
    fail "the header has not the driver's columns last"
[ "$(printf '%s\n' "$text" | sed -n 3p | awk -F'\t' '{ print NF }')" -eq 11 ] ||
    fail "the result line has not 11 columns"
exit $status
