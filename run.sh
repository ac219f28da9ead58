#!/usr/bin/env bash
# gpumem's two commands:
#   ./run.sh demo   build and run the three-policy shared-GPU demo
#   ./run.sh test   build with -Werror and run every test; rerun them under
#                   ASan+UBSan (and the threads and CUDA-double tests under
#                   TSan), without a CUDA toolkit and with clang; check `meson
#                   install`; run the Python tests; two stages at a time
#                   (stage_table); end with one line "N passed, M failed"
# Before building, each works out every Debian package it needs that is missing
# (Meson, Ninja, pkg-config, a C compiler, python3; `test` also python3-pytest)
# and installs them all in one apt-get call, as root or with sudo; when it
# cannot, it names them in one sentence and stops. Build folders are reused, so
# a second run only rebuilds what changed.
# For run.sh's own tests only: RUNSH_TEST_EUID=N makes it act as user id N when
# it decides whether it may install (tests/python/test_run_sh.py).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

say() { printf '==> %s\n' "$*"; }

# The user id run.sh acts as (RUNSH_TEST_EUID: for its tests only, see above).
acting_uid() { echo "${RUNSH_TEST_EUID:-${EUID:-$(id -u)}}"; }

# The python3 that has pytest (Debian's python3-pytest is /usr/bin/python3's,
# and the python3 on PATH may be another), printed; none: status 1.
pytest_python() {
    local py
    for py in python3 /usr/bin/python3; do
        if "$py" -c 'import pytest' >/dev/null 2>&1; then
            echo "$py"
            return 0
        fi
    done
    return 1
}

# The Debian packages command $1 (demo or test) needs and that are missing
# here, one a line. Optional tools (clang, clang-format, a C++ compiler, nvcc)
# are not among them: without one, the tests that need it are skipped, by name.
missing_packages() {
    command -v meson >/dev/null || echo meson
    command -v ninja >/dev/null || echo ninja-build
    command -v pkg-config >/dev/null || echo pkg-config
    command -v python3 >/dev/null || echo python3
    # Meson's own search when CC is not set; a CC that is set is the user's call
    if [ -z "${CC:-}" ] && ! command -v cc >/dev/null && ! command -v gcc >/dev/null &&
        ! command -v clang >/dev/null; then
        echo gcc
    fi
    if [ "$1" = test ] && compgen -G 'tests/python/test_*.py' >/dev/null &&
        ! pytest_python >/dev/null; then
        echo python3-pytest
    fi
}

# Makes sure everything command $1 needs is here before anything is built: the
# missing packages are installed in one apt-get call (as root, or with sudo);
# when that cannot be done, or does not help, one sentence names them (status 1).
ensure_tools() {
    local missing why
    mapfile -t missing < <(missing_packages "$1")
    [ ${#missing[@]} -eq 0 ] && return 0
    local list="${missing[*]}"
    if ! command -v apt-get >/dev/null; then
        why="this system has no apt-get, so install them (or its own packages of the same tools) yourself"
    elif [ "$(acting_uid)" -ne 0 ] && ! command -v sudo >/dev/null; then
        why="ask an administrator to install them (apt-get install $list)"
    else
        local sudo=()
        [ "$(acting_uid)" -eq 0 ] || sudo=(sudo)
        say "installing $list with apt-get${sudo:+ (with sudo)}"
        # a failed update may still leave lists that have the packages: the
        # install (and the check after it) decides
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq || true
        if "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            "${missing[@]}" >/dev/null; then
            mapfile -t missing < <(missing_packages "$1")
            [ ${#missing[@]} -eq 0 ] && return 0
            list="${missing[*]}"
            why="apt-get installed them, but these are still not found on PATH ($PATH)"
        else
            why="apt-get could not install them (see above): install them, or ask an administrator to (apt-get install $list)"
        fi
    fi
    echo "run.sh needs these Debian packages: $list; $why." >&2
    return 1
}

# The project's own options (meson_options.txt) at their defaults, as -D
# arguments, so that a build folder made before a default changed is brought in
# line with a fresh one.
PROJECT_DEFAULTS=()
project_defaults() {
    [ ${#PROJECT_DEFAULTS[@]} -gt 0 ] && return 0
    mapfile -t PROJECT_DEFAULTS < <(meson introspect --buildoptions meson.build 2>/dev/null |
        python3 -c '
import json, sys
try:
    options = json.load(sys.stdin)
except ValueError:
    options = []
for o in options:
    if o.get("section") != "user":
        continue
    v = o["value"]
    if isinstance(v, bool):
        v = "true" if v else "false"
    elif isinstance(v, list):
        v = ",".join(map(str, v))
    print("-D%s=%s" % (o["name"], v))')
}

# Configures build folder $1 with the remaining arguments as options (on top of
# the project's defaults): a new folder is set up, an existing one only gets its
# options changed (Meson reconfigures on the next compile if they differ). A
# folder Meson cannot use (another Meson version, a half-finished setup) is
# wiped and set up again.
setup() {
    local dir=$1
    shift
    project_defaults
    local opts=() d
    for d in "${PROJECT_DEFAULTS[@]}"; do
        [[ " $* " == *" ${d%%=*}="* ]] || opts+=("$d") # an explicit value wins
    done
    opts+=("$@")
    if [ -f "$dir/build.ninja" ] && "${WRAP[@]}" meson configure "$dir" "${opts[@]}" >/dev/null 2>&1; then
        return 0
    fi
    local log rc=0
    log=$(mktemp)
    if [ -d "$dir" ]; then
        "${WRAP[@]}" meson setup --wipe "$dir" "${opts[@]}" >"$log" 2>&1 ||
            "${WRAP[@]}" meson setup "$dir" "${opts[@]}" >"$log" 2>&1 || rc=$?
    else
        "${WRAP[@]}" meson setup "$dir" "${opts[@]}" >"$log" 2>&1 || rc=$?
    fi
    [ "$rc" -eq 0 ] || cat "$log"
    rm -f "$log"
    return "$rc"
}

# Compiles build folder $1: everything, or with test names after it only what
# those tests run (their programs and what these link, so that a stage that runs
# a few tests does not build every other one); the compiler's output goes to
# $1/compile.log and is shown only when the build fails.
compile() {
    local dir=$1 targets=()
    shift
    if [ $# -gt 0 ]; then
        # a reused folder whose meson.build files changed since its set-up: make
        # Meson regenerate first, so that introspection knows tests added since
        "${WRAP[@]}" ninja -C "$dir" build.ninja >"$dir/compile.log" 2>&1 || true
        mapfile -t targets < <(test_targets "$dir" "$@")
        [ ${#targets[@]} -gt 0 ] || targets=(all) # introspection failed: build all
    fi
    if ! "${WRAP[@]}" ninja -C "$dir" "${targets[@]}" >"$dir/compile.log" 2>&1; then
        tail -n 60 "$dir/compile.log"
        return 1
    fi
}

# The Ninja targets (paths in build folder $1) of the tests named after it: each
# one's program when the build makes it, and the targets it depends on, from
# Meson's introspection; nothing when that cannot be read.
test_targets() {
    "${WRAP[@]}" meson introspect --tests --targets "$1" 2>/dev/null |
        python3 -c '
import json, os, sys
build = os.path.realpath(sys.argv[1])
try:
    info = json.load(sys.stdin)
except ValueError:
    sys.exit()
files = {t["id"]: t["filename"] for t in info.get("targets", [])}
out = []
for test in info.get("tests", []):
    if test["name"] not in sys.argv[2:]:
        continue
    paths = [test["cmd"][0]] + [f for d in test.get("depends", []) for f in files.get(d, [])]
    for p in paths:
        p = os.path.realpath(p)
        if p.startswith(build + os.sep) and os.path.relpath(p, build) not in out:
            out.append(os.path.relpath(p, build))
print("\n".join(out))' "$@"
}

# ------------------------------------------------------------ counting --
PASSED=0 FAILED=0 SKIPPED=0
tally() { # passed failed skipped
    PASSED=$((PASSED + $1)) FAILED=$((FAILED + $2)) SKIPPED=$((SKIPPED + $3))
}

# What was skipped, one "NAME<TAB>WHERE<TAB>WHY" a line (WHERE: the build folder
# or stage; may be empty), for the summary to name them.
SKIPS=""
note_skips() { # lines as above, in one argument (none when it is empty)
    [ -z "$1" ] || SKIPS+="$1"$'\n'
}

# The tests Meson skipped in build folder $1, as note_skips takes them; WHY is
# the last line the test wrote (a skipped test's reason, by this suite's habit).
meson_skips() {
    python3 - "$1/meson-logs/testlog.json" "$1" <<'PY' || true
import json, sys
try:
    lines = open(sys.argv[1], encoding="utf-8").read().splitlines()
except OSError:
    lines = []
for line in lines:
    try:
        test = json.loads(line)
    except ValueError:
        continue
    if test.get("result") != "SKIP":
        continue
    said = ((test.get("stdout") or "") + "\n" + (test.get("stderr") or "")).split("\n")
    said = [s.strip() for s in said if s.strip()]
    why = " ".join(said[-1].split()) if said else "no reason given"
    print("%s\t%s\t%s" % (test.get("name", "?").rsplit(" / ", 1)[-1], sys.argv[2], why))
PY
}

# The skipped tests, grouped by test and reason: "NAME in W1, W2: WHY" a line.
skip_summary() {
    printf '%s' "$SKIPS" | python3 -c '
import sys
groups = {}
for line in sys.stdin.read().splitlines():
    name, where, why = (line.split("\t") + ["", ""])[:3]
    places = groups.setdefault((name, why), [])
    if where and where not in places:
        places.append(where)
for (name, why), places in groups.items():
    print("  %s%s: %s" % (name, " in " + ", ".join(places) if places else "", why))'
}

# "passed failed skipped" of the tests Meson ran last in build folder $1, read
# from its machine-readable log (one JSON object a line). OK and EXPECTEDFAIL
# pass, SKIP is skipped, anything else (FAIL, TIMEOUT, UNEXPECTEDPASS, ERROR)
# fails. No log at all counts as one failure, and so does each test named after
# $1 that did not run (`meson test NAME` passes over a name it does not know).
count_meson_results() {
    python3 - "$1/meson-logs/testlog.json" "${@:2}" <<'PY'
import json, sys
counts = {"passed": 0, "failed": 0, "skipped": 0}
ran = set()
try:
    with open(sys.argv[1], encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                test = json.loads(line)
            except ValueError:
                test = {"result": "unreadable"}
            ran.add(test.get("name", "").rsplit(" / ", 1)[-1])
            result = test.get("result", "")
            if result in ("OK", "EXPECTEDFAIL"):
                counts["passed"] += 1
            elif result == "SKIP":
                counts["skipped"] += 1
            else:
                counts["failed"] += 1
except OSError:
    counts["failed"] += 1
    ran = None
for name in sys.argv[2:] if ran is not None else ():
    if name not in ran:
        print("test '%s' was asked for but did not run (counted as one failed test)"
              % name, file=sys.stderr)
        counts["failed"] += 1
print(counts["passed"], counts["failed"], counts["skipped"])
PY
}

# -------------------------------------------------------------- stages --
# A command prefix for the build and test commands of a stage (empty: none).
WRAP=()

# The same build and tests with clang, when it is installed, and unoptimized
# (-O0, the buildtype `debug` a developer may pick): a second compiler's
# warnings, and code that builds only because an optimizer folds it away (a libm
# call on constants, which clang leaves to the linker; a reference to a driver
# symbol that -O2 drops and -O0 keeps).
clang_stage() {
    if ! command -v clang >/dev/null 2>&1; then
        say "clang: skipped (clang is not installed)"
        tally 0 0 1
        note_skips $'clang stage\tbuild-clang\tclang is not installed (apt-get install clang runs it)'
        return 0
    fi
    CC=clang meson_stage build-clang "clang, -O0 (-Werror)" -- -Dwerror=true \
        -Dbuildtype=debug
}

# The build without a CUDA toolkit: the library needs none, and every test must
# pass when none is found. nvcc is taken off PATH (a folder of PATH that holds
# one is replaced by a folder of links to everything else in it: with Debian's
# nvidia-cuda-toolkit, that folder is /usr/bin), CUDA_PATH/CUDA_HOME/CUDA_ROOT
# point nowhere, and, where this shell may (root with unshare), the toolkit's
# folders are covered by empty ones in a private mount namespace, so that Meson's
# default /usr/local/cuda is gone too.
nocuda_stage() {
    local hide=() d nvcc path="" shadow="" n=0
    nvcc=$(command -v nvcc || true)
    # nvcc's own toolkit folder, unless nvcc is a wrapper in a shared prefix
    # (/usr/local/bin/nvcc calling /usr/local/cuda/bin/nvcc): /usr/local is
    # never covered, only the toolkit folders in it.
    if [ -n "$nvcc" ]; then
        d=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
        case $d in / | /usr | /usr/local) ;; *) hide+=("$d") ;; esac
    fi
    for d in /usr/local/cuda /usr/local/cuda-* /opt/cuda; do
        [ -d "$d" ] && hide+=("$(readlink -f "$d")")
    done
    # Nothing of a toolkit on this machine (no nvcc, none of its folders, no
    # CUDA_PATH, CUDA_HOME or CUDA_ROOT): build/ was then built and tested
    # without one, with the same options, so its tests are this stage's; what
    # is left to check is that its Meson found none.
    if no_toolkit_here; then
        say "no CUDA toolkit: there is none on this machine, so build/ is the build" \
            "without one (its tests ran there)"
        local verdict
        verdict=$(nocuda_verdict 1 build/meson-logs/meson-log.txt yes "")
        # shellcheck disable=SC2086
        tally $verdict
        [ "$verdict" != "0 0 0" ] || tally 1 0 0
        return 0
    fi
    local IFS=:
    for d in $PATH; do
        if [ -x "$d/nvcc" ]; then
            [ -n "$shadow" ] || shadow=$(mktemp -d)
            n=$((n + 1))
            mkdir "$shadow/$n"
            (unset IFS && ln -s "$d"/* "$shadow/$n/" && rm -f "$shadow/$n/nvcc")
            d=$shadow/$n
        fi
        path=${path:+$path:}$d
    done
    unset IFS
    WRAP=(env "PATH=$path" CUDA_PATH=/nonexistent/cuda CUDA_HOME=/nonexistent/cuda
        CUDA_ROOT=/nonexistent/cuda)
    local how="nvcc off PATH" hidden=yes
    [ ${#hide[@]} -eq 0 ] || hidden=no
    if [ ${#hide[@]} -gt 0 ] && [ "${EUID:-$(id -u)}" -eq 0 ] &&
        unshare -m true 2>/dev/null; then
        hidden=yes
        # shellcheck disable=SC2016
        WRAP=(unshare -m sh -c 'for d in $HIDE; do [ -d "$d" ] || continue; mount -t tmpfs none "$d" || exit 1; done
            exec "$@"' sh "${WRAP[@]}")
        HIDE=$(printf '%s\n' "${hide[@]}" | sort -u | tr '\n' ' ')
        export HIDE
        how="$how, ${HIDE% } hidden"
    fi
    meson_stage build-nocuda "no CUDA toolkit ($how)" -- -Dwerror=true
    WRAP=()
    unset HIDE
    [ -z "$shadow" ] || rm -rf "$shadow"
    local verdict
    verdict=$(nocuda_verdict "$STAGE_BUILT" build-nocuda/meson-logs/meson-log.txt \
        "$hidden" "${hide[*]}")
    # shellcheck disable=SC2086
    tally $verdict
    if [ "${verdict##* }" != 0 ]; then
        note_skips "no-CUDA check"$'\t'"build-nocuda"$'\t'"${hide[*]} could not be hidden (needs root and unshare)"
    fi
}

# Whether this machine has nothing of a CUDA toolkit: no nvcc on PATH, none of
# the folders a toolkit is installed in, no CUDA_PATH, CUDA_HOME or CUDA_ROOT.
no_toolkit_here() {
    local d
    command -v nvcc >/dev/null && return 1
    for d in /usr/local/cuda /usr/local/cuda-* /opt/cuda; do
        [ -d "$d" ] && return 1
    done
    [ -z "${CUDA_PATH:-}${CUDA_HOME:-}${CUDA_ROOT:-}" ]
}

# "passed failed skipped" for whether the no-CUDA stage's Meson found a toolkit:
# $1 whether the stage built (if not, meson_stage counted that, and Meson's log
# may say anything), $2 Meson's log, $3 whether the toolkit's folders were
# hidden ("yes"/"no"), $4 those folders. Says why on a line of its own.
nocuda_verdict() {
    if [ "$1" -eq 0 ] || grep -qi 'dependency cuda.* found: NO' "$2"; then
        echo 0 0 0
    elif ! grep -qi 'dependency cuda.* found: YES' "$2"; then
        echo "no CUDA toolkit: Meson's log does not say whether it found one" \
            "(counted as one failed test)" >&2
        echo 0 1 0
    elif [ "$3" = no ]; then
        # without root (or unshare) a toolkit folder stays visible: the stage
        # then proves nothing about a machine without one, and says so
        echo "no CUDA toolkit: $4 could not be hidden (needs root and unshare):" \
            "Meson found it (counted as one skipped)" >&2
        echo 0 0 1
    else
        echo "no CUDA toolkit: Meson still found one (counted as one failed test)" >&2
        echo 0 1 0
    fi
}

# Builds folder $1 (label $2) with the options that follow "--" and runs its
# Meson tests: all of them, or only the test names given before "--", each of
# which must then run. STAGE_BUILT says whether the folder was set up and built.
STAGE_BUILT=0
meson_stage() {
    local dir=$1 label=$2
    shift 2
    local test_args=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do
        test_args+=("$1")
        shift
    done
    [ $# -gt 0 ] && shift
    say "$label: building $dir"
    STAGE_BUILT=0
    if ! setup "$dir" "$@" || ! compile "$dir" "${test_args[@]}"; then
        echo "$label: BUILD FAILED (counted as one failed test)"
        tally 0 1 0
        return 0
    fi
    STAGE_BUILT=1
    say "$label: testing"
    # A stale log from an earlier run must not be counted if this one dies early.
    rm -f "$dir/meson-logs/testlog.json"
    # --no-rebuild: compile just built what the tests need (and Ninja would
    # otherwise say "no work to do" before the first test). The other worker's
    # stage shares the cores (cmd_test): timeouts count double.
    "${WRAP[@]}" meson test -C "$dir" --no-rebuild --print-errorlogs \
        --num-processes "$JOBS" --timeout-multiplier 2 "${test_args[@]}" || true
    # shellcheck disable=SC2046
    tally $(count_meson_results "$dir" "${test_args[@]}")
    note_skips "$(meson_skips "$dir")"
}

# Exports the sanitizer options. LeakSanitizer needs ptrace-like powers that
# some containers deny (it then dies with "LeakSanitizer has encountered a fatal
# error"): probe it once on a program that leaks nothing, and fall back to
# detect_leaks=0 with a note.
sanitizer_env() {
    local leaks=1 probe cc=${CC:-cc}
    probe=$(mktemp -d)
    printf 'int main(void) { return 0; }\n' >"$probe/p.c"
    if "$cc" -fsanitize=address "$probe/p.c" -o "$probe/p" >/dev/null 2>&1; then
        if ! ASAN_OPTIONS=detect_leaks=1 "$probe/p" >"$probe/out" 2>&1; then
            leaks=0
            say "note: LeakSanitizer cannot run here ($(head -n 1 "$probe/out"))"
            say "note: the sanitizer stage runs with detect_leaks=0"
        fi
    fi
    rm -rf "$probe"
    export ASAN_OPTIONS="detect_leaks=$leaks:abort_on_error=1"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
}

# `meson install` into a staging folder, then a program built with pkg-config
# against it. The script prints one "PASS: ..." or "FAIL: ..." line per check.
install_stage() {
    say "install: meson install into a staging folder, then build against it"
    local log p f rc=0
    log=$(mktemp)
    set +e
    bash tests/install/check_install.sh build 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    set -e
    p=$(grep -c '^PASS: ' "$log" || true)
    f=$(grep -c '^FAIL: ' "$log" || true)
    # It failed without saying which check (it died): one failure more.
    [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
    [ "$p" -eq 0 ] && [ "$f" -eq 0 ] && f=1 # it checked nothing
    tally "$p" "$f" 0
    rm -f "$log"
}

# The Python package's tests (tests/python/test_*.py, pytest, through ctypes on
# the simulated backend against build/lib/libgpumem.so); nothing to do until
# such files exist. ensure_tools made sure of pytest before the first build;
# results are read from pytest's JUnit XML report.
python_stage() {
    compgen -G 'tests/python/test_*.py' >/dev/null || return 0
    say "python: pytest on the simulated backend"
    local py
    if ! py=$(pytest_python); then
        echo "python: pytest is not available (counted as one failed test)"
        tally 0 1 0
        return 0
    fi
    local report=build/pytest-report.xml
    rm -f "$report"
    GPUMEM_LIBRARY="$PWD/build/lib/libgpumem.so" PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" \
        "$py" -m pytest -q -p no:cacheprovider --junitxml="$report" tests/python || true
    # shellcheck disable=SC2046
    tally $(count_pytest_results "$report")
    note_skips "$(pytest_skips "$report")"
}

# "passed failed skipped" from pytest's JUnit XML report $1; no report, or one
# with no test in it, counts as one failure.
count_pytest_results() {
    python3 - "$1" <<'PY'
import sys, xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except (OSError, ET.ParseError):
    print(0, 1, 0)            # no report: pytest did not get to run the tests
    sys.exit()
# one count per test case: pytest's totals count a test that fails and then
# errors in its teardown twice, and take it off the number of tests once more
passed = failed = skipped = 0
for case in root.iter("testcase"):
    kinds = {child.tag for child in case}
    if kinds & {"failure", "error"}:
        failed += 1
    elif "skipped" in kinds:
        skipped += 1
    else:
        passed += 1
if passed + failed + skipped == 0:
    failed = 1                # collected nothing: a broken stage, not a pass
print(passed, failed, skipped)
PY
}

# The tests pytest skipped, from its JUnit XML report $1, as note_skips takes them.
pytest_skips() {
    python3 - "$1" <<'PY' || true
import sys, xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except (OSError, ET.ParseError):
    sys.exit()
for case in root.iter("testcase"):
    if {child.tag for child in case} & {"failure", "error"}:
        continue
    for skipped in case.iter("skipped"):
        why = " ".join((skipped.get("message") or "no reason given").split())
        print("%s.py::%s\tpython\t%s" % (case.get("classname", "?").replace(".", "/"),
                                          case.get("name", "?"), why))
        break
PY
}

# ------------------------------------------------------------ commands --
cmd_demo() {
    ensure_tools demo || exit 1
    if [ ! -x build/examples/gpumem-demo ]; then
        say "building gpumem (first run; later runs reuse build/)"
    fi
    setup build
    # The demo and what the README tells a reader to run after it (the
    # quickstart, and through its link the build/lib/libgpumem.so that the
    # Python example loads), and nothing else: a test or bench being edited
    # elsewhere in the tree does not stop the demo.
    if ! meson compile -C build gpumem-demo gpumem-quickstart >build/compile.log 2>&1; then
        tail -n 60 build/compile.log
        exit 1
    fi
    exec build/examples/gpumem-demo
}

# The stages of `./run.sh test`, one "NAME<TAB>FOLDER<TAB>NEEDS<TAB>FUNCTION" a
# line, in the order README's "What `./run.sh test` runs" lists them (a test,
# readme-run, compares the two) and the summary counts them. Two workers run
# them side by side, since on two cores one stage seldom keeps both busy: each
# takes the next stage in this order that the other has not taken, once the
# stage NEEDS ("-": none) has ended (install and python use build/). The
# sanitizers' stage, the longest, is the second worker's from the start.
stage_table() {
    printf '%s\t%s\t%s\t%s\n' \
        build build/ - build_stage \
        sanitizers build-asan/ - asan_stage \
        threads build-tsan/ - tsan_stage \
        install build/ build install_stage \
        python build/ build python_stage \
        "no CUDA toolkit" build-nocuda/ build nocuda_stage \
        clang build-clang/ - clang_stage
}

build_stage() { meson_stage build "build (-Werror)" -- -Dwerror=true; }

asan_stage() {
    sanitizer_env
    meson_stage build-asan "sanitizers (address, undefined)" -- \
        -Dwerror=true -Db_sanitize=address,undefined -Db_lundef=false
    unset ASAN_OPTIONS UBSAN_OPTIONS
}

# ThreadSanitizer on the threads, streams and idle tests (they race malloc, free,
# configuration and implicit initialization) and on the CUDA backend's tests
# over the driver double (threads share the backend's contexts and the log
# callback): TSan's address-space layout refuses the terabyte-sized simulated
# GPUs other tests create. Only these tests' programs are built.
TSAN_TESTS=(mutex threads streams idle cuda cuda-faults-1of2 cuda-faults-2of2 cuda-env cuda-env-init
    cuda-stubs cuda-streams cuda-record-stream cuda-history cuda-calls)
tsan_stage() {
    TSAN_OPTIONS="halt_on_error=1" meson_stage build-tsan \
        "thread sanitizer (threads, CUDA double)" "${TSAN_TESTS[@]}" -- \
        -Dwerror=true -Db_sanitize=thread -Db_lundef=false -Dexamples=false -Dbench=false
}

# Runs stage function $2 (stage $1) in a subshell with its output in
# $RESULTS/KEY.log, shown whole when the stage ends (one stage's lines at a
# time, whichever worker ends first), its counts and time in KEY.counts and its
# skips in KEY.skips (KEY: $1 with dashes for spaces); KEY.done says it ended. A
# stage that dies leaves no counts: cmd_test counts it as one failure.
run_stage() {
    local key=${1// /-} start=$SECONDS
    say "$1: started"
    # shellcheck disable=SC2030 # the stage's own counts, written to KEY.counts
    (
        PASSED=0 FAILED=0 SKIPPED=0 SKIPS=""
        "$2" >"$RESULTS/$key.log" 2>&1
        printf '%s' "$SKIPS" >"$RESULTS/$key.skips"
        echo "$PASSED $FAILED $SKIPPED $((SECONDS - start))" >"$RESULTS/$key.counts"
    ) || true
    if command -v flock >/dev/null; then
        flock "$RESULTS/print.lock" cat "$RESULTS/$key.log"
    else
        cat "$RESULTS/$key.log"
    fi
    touch "$RESULTS/$key.done"
}

# One of cmd_test's two workers: takes the stages of stage_table in turn that
# the other has not taken (a stage is taken by creating its folder in $RESULTS,
# which only one can), each once the stage it needs is done, and runs them.
run_worker() {
    local rows row name needs fn
    mapfile -t rows < <(stage_table)
    for row in "${rows[@]}"; do
        IFS=$'\t' read -r name _ needs fn <<<"$row"
        mkdir "$RESULTS/taken-${name// /-}" 2>/dev/null || continue
        while [ "$needs" != - ] && [ ! -e "$RESULTS/${needs// /-}.done" ]; do
            sleep 1
        done
        run_stage "$name" "$fn"
    done
    return 0
}

# What this machine has that changes how many tests run, one a line: clang (a
# stage of its own) and a CUDA toolkit (its tests, and the no-CUDA stage's).
count_changers() {
    command -v clang >/dev/null && echo clang
    no_toolkit_here || echo "a CUDA toolkit"
    return 0
}

# The last check (counted as one test): README's "What `./run.sh test` runs"
# says how many tests the command runs on a machine without clang and a CUDA
# toolkit (Debian 12 with only what run.sh installs), in the words "N tests: the
# last line is `P passed, 0 failed`, after S skipped". On such a machine N must
# be this run's count, this check included, and P + S must be N; elsewhere the
# check is skipped, naming what this machine has. README $1.
# shellcheck disable=SC2031 # the totals cmd_test summed from the stages' files
readme_count_check() {
    local said n p k total=$((PASSED + FAILED + SKIPPED + 1)) extra=()
    # shellcheck disable=SC2016 # README's backquotes, not an expansion
    said=$(tr '\n' ' ' <"$1" | tr -s ' ' |
        grep -o '[0-9][0-9]* tests: the last line is `[0-9][0-9]* passed, 0 failed`, after [0-9][0-9]* skipped' |
        head -n 1 || true)
    if [ -z "$said" ]; then
        echo "readme count: $1 does not say how many tests run (\"N tests: the last line" \
            "is \`P passed, 0 failed\`, after S skipped\"; counted as one failed test)"
        tally 0 1 0
        return 0
    fi
    read -r n p k <<<"$(printf '%s\n' "$said" |
        sed 's/^\([0-9]*\) tests: .*`\([0-9]*\) passed, .* after \([0-9]*\) skipped$/\1 \2 \3/')"
    mapfile -t extra < <(count_changers)
    if [ "$((p + k))" -ne "$n" ]; then
        echo "readme count: $1 says $n tests but $p passed and $k skipped" \
            "(counted as one failed test)"
        tally 0 1 0
    elif [ ${#extra[@]} -gt 0 ]; then
        local has=${extra[0]} why
        [ ${#extra[@]} -lt 2 ] || has+=" and ${extra[1]}"
        why="$1's count is for a machine without clang and a CUDA toolkit; this one has"
        why+=" $has (a Debian 12 with only what run.sh installs runs it)"
        echo "readme count: skipped: $why"
        tally 0 0 1
        note_skips "readme count"$'\t\t'"$why"
    elif [ "$n" -ne "$total" ]; then
        echo "readme count: $1 says $n tests, this run counted $total (this check" \
            "included; counted as one failed test): write $total there"
        tally 0 1 0
    else
        echo "readme count: $1's $n tests are this run's"
        tally 1 0 0
    fi
}

# shellcheck disable=SC2031 # the totals are summed here, from the stages' files
cmd_test() {
    if ! ensure_tools test; then
        echo "0 passed, 1 failed"
        return 1
    fi
    local start=$SECONDS rows row name key p f k t times=""
    RESULTS=$(mktemp -d)
    run_worker &
    local first=$!
    sleep 0.2 # the first takes build (its NEEDS are none), the second sanitizers
    run_worker &
    wait "$first" || true
    wait $! || true
    mapfile -t rows < <(stage_table)
    for row in "${rows[@]}"; do
        IFS=$'\t' read -r name _ _ _ <<<"$row"
        key=${name// /-}
        if read -r p f k t <"$RESULTS/$key.counts" 2>/dev/null; then
            tally "$p" "$f" "$k"
            note_skips "$(cat "$RESULTS/$key.skips")"
            times+="${times:+, }$name $t s"
        else
            echo "$name: the stage stopped before it counted its tests (counted as one" \
                "failed test; its output is above)"
            tally 0 1 0
        fi
    done
    rm -rf "$RESULTS"
    readme_count_check README.md
    say "all stages done in $((SECONDS - start)) s, two at a time ($times)"
    if [ "$SKIPPED" -ne 0 ]; then
        echo "$SKIPPED skipped (not counted below):"
        skip_summary
    fi
    echo "$PASSED passed, $FAILED failed"
    [ "$FAILED" -eq 0 ]
}

JOBS=$(nproc 2>/dev/null || echo 2)
# Sourced (tests/check_run_counts.sh): the functions only, no command.
[ "${BASH_SOURCE[0]}" = "$0" ] || return 0
case "${1:-}" in
demo) cmd_demo ;;
test) cmd_test ;;
*)
    echo "usage: $0 demo|test" >&2
    exit 2
    ;;
esac
