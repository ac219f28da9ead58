#!/usr/bin/env bash
# The install check: `meson install` of build folder $1 (default: build) into a
# staging folder, then the files a user gets (the header, libgpumem.so.1 with its
# soname, libgpumem.a, gpumem.pc), then a small program built with
# `pkg-config --cflags --libs gpumem` against the staged copy, run with
# LD_LIBRARY_PATH into the stage, the same program linked against libgpumem.a,
# and a parent project that builds gpumem as its Meson subproject (whose install
# leaves gpumem's Python package out unless asked). Then gpumem built afresh (in
# the staging folder, the library alone) and installed into a prefix with a
# space in its name: the program built with pkg-config against it; the Python
# package in the site-packages folder Meson chose, imported from there without
# LD_LIBRARY_PATH (it must load the prefix's library) and allocating; and with
# -Dpython=disabled, no package. Prints one "PASS: ..." or "FAIL: ..." line per
# check (run.sh counts them) and exits non-zero if any check failed.
set -uo pipefail
build=${1:-build}
cc=${CC:-cc}
source=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

passed=0 failed=0
pass() { echo "PASS: install: $*"; passed=$((passed + 1)); }
fail() { echo "FAIL: install: $*"; failed=$((failed + 1)); }
finish() {
    echo "install check: $passed passed, $failed failed"
    [ "$failed" -eq 0 ]
    exit
}
# Runs a command for check $1; shows its output (indented) when it fails, or
# always when SHOW=1.
check_cmd() {
    local what=$1 out
    shift
    if out=$("$@" 2>&1); then
        pass "$what"
        [ "${SHOW:-0}" = 1 ] && printf '%s\n' "$out" | sed 's/^/    /'
        return 0
    fi
    fail "$what"
    printf '%s\n' "$out" | tail -n 30 | sed 's/^/    /'
    return 1
}

# The destinations of the Python files build folder $1 installs, one a line
# (Meson's own account: where the package goes is asked, not assumed).
installed_py() {
    meson introspect "$1" --installed | python3 -c '
import json, sys
for dest in json.load(sys.stdin).values():
    if dest.endswith(".py"):
        print(dest)'
}

check_cmd "meson install -C $build --destdir STAGE" \
    meson install -C "$build" --destdir "$stage" || finish

prefix=$(meson introspect "$build" --buildoptions | python3 -c '
import json, sys
print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "prefix"))')
root="$stage$prefix"

# ---------------------------------------------------------------- files --
if [ -f "$root/include/gpumem.h" ]; then
    pass "include/gpumem.h"
else
    fail "include/gpumem.h is not installed"
fi

if [ -x "$root/bin/gpumem-smi" ]; then
    check_cmd "bin/gpumem-smi --help runs" "$root/bin/gpumem-smi" --help
else
    fail "bin/gpumem-smi is not installed"
fi

so=$(find "$root" -name 'libgpumem.so.1.*' -type f | head -n 1)
if [ -n "$so" ] && [ -L "$(dirname "$so")/libgpumem.so.1" ] &&
    [ -L "$(dirname "$so")/libgpumem.so" ]; then
    pass "${so#"$root"/} with the links libgpumem.so.1 and libgpumem.so"
else
    fail "libgpumem.so.1.* with its links libgpumem.so.1 and libgpumem.so under $prefix"
fi

if [ -n "$so" ]; then
    if command -v readelf >/dev/null; then
        soname=$(readelf -d "$so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
    else
        soname=$(objdump -p "$so" | awk '$1 == "SONAME" {print $2}')
    fi
    if [ "$soname" = libgpumem.so.1 ]; then
        pass "soname libgpumem.so.1"
    else
        fail "the soname is '$soname', not libgpumem.so.1"
    fi
fi

archive=$(find "$root" -name libgpumem.a | head -n 1)
if [ -n "$archive" ]; then
    pass "${archive#"$root"/}"
else
    fail "libgpumem.a is not installed"
fi

pc=$(find "$root" -name gpumem.pc | head -n 1)
if [ -n "$pc" ]; then
    pass "${pc#"$root"/}"
else
    fail "pkgconfig/gpumem.pc is not installed"
    finish
fi

# -------------------------------------------- a program built against it --
cat >"$stage/hello.c" <<'C'
/* Lists the GPUs of the simulated backend, then allocates, writes and frees. */
#include <gpumem.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
    gpumem_physical_device gpus[8] = {GPUMEM_STRUCT_INIT(gpumem_physical_device)};
    size_t n = 0;
    void *p = NULL;
    if (gpumem_list_physical_devices(NULL, gpus, 8, &n) != GPUMEM_OK || n != 2) {
        fprintf(stderr, "hello: expected 2 GPUs: %s\n", gpumem_last_error());
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        printf("hello: %s %s, %llu MiB\n", gpus[i].name, gpus[i].model,
               (unsigned long long)(gpus[i].total_bytes >> 20));
    if (gpumem_malloc(NULL, 1, 1 << 20, &p) != GPUMEM_OK) {
        fprintf(stderr, "hello: gpumem_malloc: %s\n", gpumem_last_error());
        return 1;
    }
    memset(p, 0x5a, 1 << 20);
    if (gpumem_free(NULL, p) != GPUMEM_OK) {
        fprintf(stderr, "hello: gpumem_free: %s\n", gpumem_last_error());
        return 1;
    }
    printf("hello: gpumem %u: 1 MiB on /device:GPU:1 allocated, written and freed\n",
           gpumem_version());
    return gpumem_version() == GPUMEM_VERSION_NUMBER ? 0 : 1;
}
C
run_env=(env GPUMEM_BACKEND=sim "GPUMEM_SIM_DEVICES=Staged GPU A:1GiB,Staged GPU B:2GiB:7.5")

# pkg-config writes a path with a space as `pre\ fix`, to be read as a shell
# reads a command line (eval, make), not split at every blank as an unquoted
# $(...) is. Reads flags $2 into the array named $1 so: a backslash keeps the
# next character, unescaped blanks separate words.
split_flags() {
    # shellcheck disable=SC2162 # the backslashes are the point
    read -a "$1" <<<"$2"
}

# A program built with `pkg-config --cflags --libs gpumem` (pkg-config's search
# path and sysroot as the caller set them), checked and run with the library
# folder $2 on LD_LIBRARY_PATH. $1 names where the gpumem is.
program_against() {
    local where=$1 libdir=$2 flags out=$stage/hello-$RANDOM
    local -a args
    if ! flags=$(pkg-config --cflags --libs gpumem 2>&1); then
        fail "pkg-config --cflags --libs gpumem ($where): $flags"
        return 1
    fi
    flags=${flags% } # pkgconf ends with a space
    pass "pkg-config --cflags --libs gpumem ($where): $flags"
    split_flags args "$flags"
    check_cmd "cc hello.c \$(pkg-config --cflags --libs gpumem) ($where)" \
        "$cc" -std=c11 -Wall -Werror "$stage/hello.c" -o "$out" "${args[@]}" || return 1
    if readelf -d "$out" 2>/dev/null | grep -q 'NEEDED.*\[libgpumem\.so\.1\]'; then
        pass "the program needs libgpumem.so.1 ($where)"
    else
        fail "the program does not record NEEDED libgpumem.so.1 ($where)"
    fi
    SHOW=1 check_cmd "the program runs (libgpumem.so.1 of $where)" \
        "${run_env[@]}" LD_LIBRARY_PATH="$libdir" "$out"
}

# The .pc file names the final prefix; PKG_CONFIG_SYSROOT_DIR prepends the stage
# to its -I and -L paths. (The stage has no space in its name: pkgconf 1.8
# prepends a sysroot with a space twice, once unescaped. A prefix with a space
# is checked below, without a sysroot.)
export PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR="$stage"
PKG_CONFIG_PATH=$(dirname "$pc")
program_against "the staged copy" "$(dirname "$so")"

# The same program with libgpumem.a linked in (the C library stays shared: a
# fully static glibc cannot dlopen the CUDA driver reliably).
if static_flags=$(pkg-config --static --cflags --libs gpumem 2>&1); then
    static_args=() static_libs=()
    split_flags static_args "${static_flags% }"
    for arg in "${static_args[@]}"; do
        if [ "$arg" = -lgpumem ]; then
            static_libs+=('-Wl,-Bstatic' -lgpumem '-Wl,-Bdynamic')
        else
            static_libs+=("$arg")
        fi
    done
    if check_cmd "cc hello.c with libgpumem.a (pkg-config --static)" \
        "$cc" -std=c11 -Wall -Werror "$stage/hello.c" -o "$stage/hello-static" \
        "${static_libs[@]}"; then
        if readelf -d "$stage/hello-static" 2>/dev/null | grep -q 'NEEDED.*libgpumem'; then
            fail "the statically linked program still needs libgpumem.so"
        else
            pass "the statically linked program does not need libgpumem.so"
        fi
        check_cmd "the statically linked program runs" "${run_env[@]}" "$stage/hello-static"
    fi
else
    fail "pkg-config --static --cflags --libs gpumem: $static_flags"
fi
unset PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR

# As another project's Meson subproject (forced: the staged gpumem.pc would
# serve the dependency otherwise): the library builds and links into the
# parent's program, and none of gpumem's tests lands in the parent's `meson test`.
parent="$stage/parent"
mkdir -p "$parent/subprojects"
ln -s "$source" "$parent/subprojects/gpumem"
cp "$stage/hello.c" "$parent/hello.c"
cat >"$parent/meson.build" <<'EOF_PARENT'
project('parent', 'c')
executable('hello', 'hello.c',
  dependencies: dependency('gpumem', fallback: ['gpumem', 'gpumem_dep']))
EOF_PARENT
if check_cmd "a parent project builds gpumem as its subproject" \
    bash -c 'meson setup --force-fallback-for=gpumem "$1/b" "$1" && ninja -C "$1/b"' \
    _ "$parent"; then
    check_cmd "the parent's program runs" "${run_env[@]}" "$parent/b/hello"
    listed=$(meson test -C "$parent/b" --list 2>/dev/null | grep -c '^gpumem:' || true)
    if [ "$listed" -eq 0 ]; then
        pass "the parent's meson test lists none of gpumem's tests"
    else
        fail "the parent's meson test lists $listed of gpumem's tests"
    fi
    # The parent's install has gpumem's library, not its Python package, unless
    # the parent asks for it.
    listed=$(installed_py "$parent/b" | grep -c '/gpumem/__init__\.py$' || true)
    if [ "$listed" -eq 0 ]; then
        pass "the parent's meson install leaves gpumem's Python package out"
    else
        fail "the parent's meson install has gpumem's Python package (-Dpython=auto)"
    fi
    # (Both folders named: with the build folder alone, Meson takes the current
    # folder for the source, which may be gpumem's.)
    meson setup --reconfigure -Dgpumem:python=enabled "$parent/b" "$parent" >/dev/null 2>&1
    listed=$(installed_py "$parent/b" | grep -c '/gpumem/__init__\.py$' || true)
    if [ "$listed" -eq 1 ]; then
        pass "with -Dgpumem:python=enabled the parent installs the Python package"
    else
        fail "with -Dgpumem:python=enabled the parent does not install the Python package"
    fi
fi

# ------------------------------------------------ a prefix with a space --
# gpumem configured for a prefix whose name has a space, and installed there
# (no staging: what the installed files name must hold as they are).
prefix="$stage/pre fix"
pbuild="$stage/build prefix"
check_cmd "meson install into a prefix with a space ('pre fix')" \
    bash -c 'meson setup "$1" "$2" --prefix "$3" -Ddefault_library=shared \
        -Dtests=false -Dexamples=false -Dbench=false &&
        ninja -C "$1" && meson install -C "$1"' _ "$pbuild" "$source" "$prefix" || finish
pc=$(find "$prefix" -name gpumem.pc | head -n 1)
so=$(find "$prefix" -name 'libgpumem.so.1' | head -n 1)
if [ -n "$pc" ] && [ -n "$so" ]; then
    PKG_CONFIG_PATH=$(dirname "$pc") program_against "'pre fix'" "$(dirname "$so")"
else
    fail "gpumem.pc and libgpumem.so.1 under 'pre fix'"
fi

# The Python package (-Dpython=auto, python3 is here): every module of
# python/gpumem in the site-packages folder Meson chose under the prefix.
site=$(installed_py "$pbuild" | sed -n 's|/gpumem/__init__\.py$||p' | head -n 1)
if [ -n "$site" ] && [ "${site#"$prefix"/}" != "$site" ] && [ -f "$site/gpumem/__init__.py" ]; then
    pass "the Python package is in ${site#"$prefix"/}/gpumem"
else
    fail "no gpumem/__init__.py installed under 'pre fix' (meson chose '${site:-nothing}')"
    finish
fi
py_modules() { (cd "$1" && find gpumem -name '*.py' ! -name _installed.py | sort); }
if missing=$(diff <(py_modules "$source/python") <(py_modules "$site")); then
    pass "every module of python/gpumem is installed"
else
    fail "the installed package differs from python/gpumem (python/meson.build lists the modules):"
    printf '%s\n' "$missing" | sed 's/^/    /'
fi

# Imported from there with no LD_LIBRARY_PATH (nor GPUMEM_LIBRARY), outside the
# source tree: it must load the library of its own install (gpumem/_installed.py)
# and allocate on a simulated GPU.
cat >"$stage/installed.py" <<'PY'
import ctypes
import os
import sys

prefix, site = (os.path.realpath(p) for p in sys.argv[1:3])
import gpumem

print("package", gpumem.__file__)
print("library", gpumem.library_path, gpumem.library_version)
if not os.path.realpath(gpumem.__file__).startswith(site + os.sep):
    sys.exit("the package imported is not the one installed in %s" % site)
if not os.path.realpath(gpumem.library_path).startswith(prefix + os.sep):
    sys.exit("the library loaded is not the one installed under %s" % prefix)
with gpumem.malloc(1 << 20, "GPU:1") as buf:
    ctypes.memset(buf.ptr, 0x5A, len(buf))
    used = gpumem.config.experimental.get_memory_info("GPU:1")["current"]
print("1 MiB on GPU:1 allocated, written and freed (%d bytes in use meanwhile)" % used)
PY
SHOW=1 check_cmd "import gpumem from 'pre fix' loads its libgpumem.so.1 (no LD_LIBRARY_PATH) and allocates" \
    bash -c 'cd "$1" && exec env -u LD_LIBRARY_PATH -u GPUMEM_LIBRARY PYTHONPATH="$2" \
        PYTHONDONTWRITEBYTECODE=1 "${@:4}" python3 "$1/installed.py" "$3" "$2"' \
    _ "$stage" "$site" "$prefix" "${run_env[@]:1}"

# -Dpython=disabled: the same build installed into another prefix has no Python
# package (and still the library).
noprefix="$stage/no python"
if check_cmd "meson install with -Dpython=disabled" \
    bash -c 'meson configure "$1" -Dpython=disabled -Dprefix="$2" && meson install -C "$1"' \
    _ "$pbuild" "$noprefix"; then
    found=$( (installed_py "$pbuild"; find "$noprefix" -name '*.py') | head -n 3)
    if [ -z "$found" ] && [ ! -e "$noprefix/${site#"$prefix"/}" ] &&
        [ -n "$(find "$noprefix" -name libgpumem.so.1)" ]; then
        pass "-Dpython=disabled installs the library and no Python package"
    else
        fail "-Dpython=disabled still installs Python files: ${found:-$noprefix/${site#"$prefix"/}}"
    fi
fi
finish
