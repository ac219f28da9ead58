#!/usr/bin/env bash
# How run.sh counts (meson test 'run-counts'): its functions, sourced without
# running a command, on made-up Meson logs and pytest reports. The last line of
# `./run.sh test` is only as true as these counts.
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=../run.sh
source "$root/run.sh"
set +e
status=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

expect() { # what got wanted
    if [ "$2" != "$3" ]; then
        echo "FAIL: $1: got '$2', expected '$3'"
        status=1
    else
        echo "ok   $1"
    fi
}

# Meson's testlog.json: OK and EXPECTEDFAIL pass, SKIP is skipped, the rest fail
mkdir -p "$tmp/b/meson-logs"
for t in "a OK" "b EXPECTEDFAIL" "c SKIP" "d FAIL" "e TIMEOUT"; do
    set -- $t
    printf '{"name": "gpumem:suite / %s", "result": "%s"}\n' "$1" "$2"
done >"$tmp/b/meson-logs/testlog.json"
expect "meson results" "$(count_meson_results "$tmp/b")" "2 2 1"
expect "meson results, every test named ran" "$(count_meson_results "$tmp/b" a d)" "2 2 1"
expect "meson results, a test named that did not run" \
    "$(count_meson_results "$tmp/b" a renamed 2>/dev/null)" "2 3 1"
expect "meson results, no log" "$(count_meson_results "$tmp/none" a)" "0 1 0"

# pytest's JUnit report: one count per test case, whatever pytest's totals say
cat >"$tmp/report.xml" <<'XML'
<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="1" failures="1" skipped="1" tests="3">
<testcase classname="t" name="passes"/>
<testcase classname="t" name="fails_then_errors_in_teardown">
<failure message="assert 0"/><error message="teardown"/></testcase>
<testcase classname="t" name="skipped"><skipped message="no GPU"/></testcase>
</testsuite></testsuites>
XML
expect "pytest report" "$(count_pytest_results "$tmp/report.xml")" "1 1 1"
printf '<testsuites><testsuite tests="0"/></testsuites>\n' >"$tmp/empty.xml"
expect "pytest report with no test" "$(count_pytest_results "$tmp/empty.xml")" "0 1 0"
expect "no pytest report" "$(count_pytest_results "$tmp/none.xml")" "0 1 0"

# the no-CUDA stage: Meson's log decides, once the stage built
printf 'Run-time dependency CUDA (modules: cudart) found: NO (tried system)\n' >"$tmp/no.txt"
printf 'Run-time dependency CUDA (modules: cudart) found: YES 13.0\n' >"$tmp/yes.txt"
printf 'ERROR: a setup that failed before looking for CUDA\n' >"$tmp/none.txt"
expect "no CUDA, not built" "$(nocuda_verdict 0 "$tmp/none.txt" yes "")" "0 0 0"
expect "no CUDA, not found" "$(nocuda_verdict 1 "$tmp/no.txt" yes "")" "0 0 0"
expect "no CUDA, found" "$(nocuda_verdict 1 "$tmp/yes.txt" yes "" 2>/dev/null)" "0 1 0"
expect "no CUDA, found where it could not be hidden" \
    "$(nocuda_verdict 1 "$tmp/yes.txt" no /usr/local/cuda 2>/dev/null)" "0 0 1"
expect "no CUDA, the log says nothing" \
    "$(nocuda_verdict 1 "$tmp/none.txt" yes "" 2>/dev/null)" "0 1 0"

# skip reasons are kept whole, however long (what would make the test run comes
# last)
long="no usable CUDA GPU: cuInit failed or no device: skipped (it runs on a machine"
long+=" with an NVIDIA GPU and its driver, and its reason ends here)"
printf '{"name": "gpumem:gpu / far", "result": "SKIP", "stdout": "%s\\n"}\n' "$long" \
    >"$tmp/b/meson-logs/testlog.json"
expect "meson skip, whole reason" "$(meson_skips "$tmp/b")" "far"$'\t'"$tmp/b"$'\t'"$long"
printf '<testsuites><testsuite><testcase classname="t.x" name="y"><skipped message="%s"/>'\
'</testcase></testsuite></testsuites>\n' "$long" >"$tmp/skip.xml"
expect "pytest skip, whole reason" "$(pytest_skips "$tmp/skip.xml")" \
    "t/x.py::y"$'\t'"python"$'\t'"$long"

# README's count of tests, checked on a machine without clang and a toolkit
said='it runs 3 builds and 12\ntests: the last line is `10 passed, 0 failed`, after 2 skipped.'
printf '%b\n' "$said" >"$tmp/README.md"
PASSED=9 FAILED=0 SKIPPED=2
count_changers() { :; }
readme_count_check "$tmp/README.md" >"$tmp/out"
expect "readme count, as README says: one pass" "$PASSED $FAILED $SKIPPED" "10 0 2"
PASSED=9 FAILED=0 SKIPPED=3
readme_count_check "$tmp/README.md" >"$tmp/out"
expect "readme count, one test more: one failure" "$PASSED $FAILED $SKIPPED" "9 1 3"
expect "readme count, one test more: what to write" \
    "$(grep -o 'write [0-9]* there' "$tmp/out")" "write 13 there"
count_changers() { echo clang; echo "a CUDA toolkit"; }
PASSED=9 FAILED=0 SKIPPED=3 SKIPS=""
readme_count_check "$tmp/README.md" >"$tmp/out"
expect "readme count, with clang and a toolkit: skipped" "$PASSED $FAILED $SKIPPED" "9 0 4"
expect "readme count, with clang and a toolkit: why" "$(printf '%s' "$SKIPS" | cut -f3)" \
    "$tmp/README.md's count is for a machine without clang and a CUDA toolkit; this one has clang and a CUDA toolkit (a Debian 12 with only what run.sh installs runs it)"
count_changers() { :; }
printf 'it runs 12 tests: the last line is `10 passed, 0 failed`, after 1 skipped\n' \
    >"$tmp/README.md"
PASSED=9 FAILED=0 SKIPPED=2
readme_count_check "$tmp/README.md" >/dev/null
expect "readme count, figures that do not add up: one failure" "$PASSED $FAILED" "9 1"
printf 'it runs all the tests\n' >"$tmp/README.md"
PASSED=9 FAILED=0 SKIPPED=2
readme_count_check "$tmp/README.md" >/dev/null
expect "readme count, no count in README: one failure" "$PASSED $FAILED" "9 1"

# the stages run two at a time, a stage after the one it needs; the counts are
# summed in the table's order, each stage's output shown whole, and a stage that
# dies before it counts is one failure
(
    stage_table() {
        printf '%s\t%s\t%s\t%s\n' one f/ - st_one two f/ - st_two three f/ one st_three \
            "it dies" f/ - st_dies
    }
    st_one() { echo "one: line 1"; sleep 2; echo "one: line 2"; tally 2 0 1; note_skips $'x\tf/\twhy'; }
    st_two() { echo "two: line 1"; echo "two: line 2"; tally 3 1 0; }
    st_three() { [ -e "$RESULTS/one.done" ] && echo "three: after one" && tally 1 0 0; }
    st_dies() { exit 3; }
    ensure_tools() { return 0; }
    readme_count_check() { :; }
    cd "$tmp" || exit 1
    PASSED=0 FAILED=0 SKIPPED=0 SKIPS=""
    out=$(cmd_test 2>&1)
    rc=$?
    expect "stages: the last line" "$(printf '%s\n' "$out" | tail -n 1)" "6 passed, 2 failed"
    expect "stages: the status" "$rc" "1"
    expect "stages: the skip" "$(printf '%s\n' "$out" | grep -A1 '^1 skipped')" \
        "$(printf '1 skipped (not counted below):\n  x in f/: why')"
    expect "stages: a stage's lines together" \
        "$(printf '%s\n' "$out" | grep -A1 'one: line 1' | tail -n 1)" "one: line 2"
    expect "stages: one before the stage that needs it" \
        "$(printf '%s\n' "$out" | grep -c '^three: after one')" 1
    expect "stages: two side by side with one" \
        "$(printf '%s\n' "$out" | grep -o 'one: line 2\|two: line 2' | head -n 1)" "two: line 2"
    expect "stages: the stage that died" \
        "$(printf '%s\n' "$out" | grep -c '^it dies: the stage stopped before it counted')" 1
    exit $status
) || status=1

# without Meson, Ninja or pkg-config, and no way to install them: one failure
ensure_tools() { return 1; }
out=$(cmd_test 2>&1)
rc=$?
expect "tools missing: the last line" "$(printf '%s\n' "$out" | tail -n 1)" "0 passed, 1 failed"
expect "tools missing: the status" "$rc" "1"

exit $status
