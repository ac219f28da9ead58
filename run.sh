#!/usr/bin/env bash
# gpumem's two commands:
#   ./run.sh demo   build and run the three-policy shared-GPU demo
#   ./run.sh test   build with -Werror, run every test, check `meson install`,
#                   rerun under ASan+UBSan (and the threads test under TSan), and
#                   end with "N passed, M failed"
# Both install Meson, Ninja and pkg-config with apt-get when they are missing.
set -euo pipefail
cd "$(dirname "$0")"

say() { printf '==> %s\n' "$*"; }

ensure_tools() {
    local missing=()
    command -v meson >/dev/null || missing+=(meson)
    command -v ninja >/dev/null || missing+=(ninja-build)
    command -v pkg-config >/dev/null || missing+=(pkg-config)
    [ ${#missing[@]} -eq 0 ] && return 0
    say "installing ${missing[*]} with apt-get"
    local sudo=()
    [ "$(id -u)" -eq 0 ] || sudo=(sudo)
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get update -qq
    "${sudo[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
}

# Configures (or reconfigures) build dir $1 with the remaining arguments as options.
setup() {
    local dir=$1
    shift
    if [ -f "$dir/build.ninja" ]; then
        meson configure "$dir" "$@" >/dev/null
    else
        meson setup "$dir" "$@" >/dev/null
    fi
}

# Results of the tests run in build dir $1, as "passed failed skipped", from
# Meson's machine-readable log.
count_results() {
    python3 - "$1/meson-logs/testlog.json" <<'PY'
import json, sys
passed = failed = skipped = 0
try:
    lines = open(sys.argv[1]).read().splitlines()
except OSError:
    lines = []
for line in lines:
    if not line.strip():
        continue
    r = json.loads(line).get("result", "")
    if r in ("OK", "EXPECTEDFAIL"):
        passed += 1
    elif r == "SKIP":
        skipped += 1
    else:
        failed += 1
print(passed, failed, skipped)
PY
}

PASSED=0 FAILED=0 SKIPPED=0
tally() { # passed failed skipped
    PASSED=$((PASSED + $1)) FAILED=$((FAILED + $2)) SKIPPED=$((SKIPPED + $3))
}

# Builds dir $1 with the given options and runs its Meson tests.
meson_stage() {
    local dir=$1 label=$2
    shift 2
    say "$label: building $dir"
    if ! setup "$dir" "$@" || ! meson compile -C "$dir" >"$dir/compile.log" 2>&1; then
        cat "$dir/compile.log" 2>/dev/null | tail -40
        echo "$label: BUILD FAILED"
        tally 0 1 0
        return
    fi
    say "$label: testing"
    local suites=()
    [[ $dir == build-tsan ]] && suites=(threads)
    meson test -C "$dir" "${suites[@]}" --print-errorlogs --num-processes 2 || true
    # shellcheck disable=SC2046
    tally $(count_results "$dir")
}

sanitizer_env() {
    # LeakSanitizer needs ptrace-like powers some containers lack: probe once.
    local leaks=1 probe
    probe=$(mktemp -d)
    printf 'int main(void){return 0;}\n' >"$probe/p.c"
    if cc -fsanitize=address "$probe/p.c" -o "$probe/p" 2>/dev/null &&
        ! ASAN_OPTIONS=detect_leaks=1 "$probe/p" 2>/dev/null; then
        leaks=0
        say "LeakSanitizer cannot run here: sanitizer stage runs without leak checks"
    fi
    rm -rf "$probe"
    export ASAN_OPTIONS="detect_leaks=$leaks:abort_on_error=1"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
}

install_stage() {
    say "install: meson install into a staging folder, then build against it"
    local out
    if out=$(bash tests/install/check_install.sh build 2>&1); then
        printf '%s\n' "$out"
        tally 1 0 0
    else
        printf '%s\n' "$out"
        echo "install: FAILED"
        tally 0 1 0
    fi
}

python_stage() {
    [ -d tests/python ] || return 0
    say "python: pytest on the simulated backend"
    if ! /usr/bin/python3 -c 'import pytest' 2>/dev/null; then
        local sudo=()
        [ "$(id -u)" -eq 0 ] || sudo=(sudo)
        DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq python3-pytest >/dev/null
    fi
    local log
    log=$(mktemp)
    GPUMEM_LIBRARY="$PWD/build/lib/libgpumem.so" /usr/bin/python3 -m pytest -q tests/python \
        -p no:cacheprovider 2>&1 | tee "$log" || true
    # pytest's closing line: "12 passed, 1 failed, 2 skipped in 3.2s"
    local p f s e
    p=$(grep -Eo '[0-9]+ passed' "$log" | tail -1 | grep -Eo '[0-9]+' || echo 0)
    f=$(grep -Eo '[0-9]+ failed' "$log" | tail -1 | grep -Eo '[0-9]+' || echo 0)
    e=$(grep -Eo '[0-9]+ errors?' "$log" | tail -1 | grep -Eo '[0-9]+' || echo 0)
    s=$(grep -Eo '[0-9]+ skipped' "$log" | tail -1 | grep -Eo '[0-9]+' || echo 0)
    [ "$p" -eq 0 ] && [ "$f" -eq 0 ] && [ "$e" -eq 0 ] && f=1 # ran nothing: a failure
    tally "$p" $((f + e)) "$s"
    rm -f "$log"
}

cmd_demo() {
    ensure_tools
    setup build
    meson compile -C build >/dev/null
    exec build/examples/gpumem-demo
}

cmd_test() {
    ensure_tools
    local start=$SECONDS
    meson_stage build "build (-Werror)" -Dwerror=true
    install_stage
    python_stage
    sanitizer_env
    meson_stage build-asan "sanitizers (address, undefined)" -Dwerror=true \
        -Db_sanitize=address,undefined -Db_lundef=false
    unset ASAN_OPTIONS UBSAN_OPTIONS
    # ThreadSanitizer on the threads test (it races malloc, free, configuration and
    # implicit initialization). Only that one: TSan's address-space layout refuses the
    # terabyte-sized simulated GPUs other tests create.
    TSAN_OPTIONS="halt_on_error=1" meson_stage build-tsan "thread sanitizer (threads test)" \
        -Dwerror=true -Db_sanitize=thread -Db_lundef=false -Dexamples=false
    say "all stages done in $((SECONDS - start)) s"
    if [ "$SKIPPED" -gt 0 ]; then
        echo "$PASSED passed, $FAILED failed, $SKIPPED skipped"
    else
        echo "$PASSED passed, $FAILED failed"
    fi
    [ "$FAILED" -eq 0 ]
}

case "${1:-}" in
demo) cmd_demo ;;
test) cmd_test ;;
*)
    echo "usage: $0 demo|test" >&2
    exit 2
    ;;
esac
