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

# without Meson, Ninja or pkg-config, and no way to install them: one failure
ensure_tools() { return 1; }
out=$(cmd_test 2>&1)
rc=$?
expect "tools missing: the last line" "$(printf '%s\n' "$out" | tail -n 1)" "0 passed, 1 failed"
expect "tools missing: the status" "$rc" "1"

exit $status
