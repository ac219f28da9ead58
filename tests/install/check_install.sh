#!/usr/bin/env bash
# Installs build dir $1 into a staging folder with `meson install --destdir`,
# checks that the header, both libraries (soname libgpumem.so.0) and gpumem.pc
# are there, then builds a program with `pkg-config --cflags --libs gpumem`
# against the staged copy, runs it, and links it statically too.
set -euo pipefail
build=${1:-build}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
meson install -C "$build" --destdir "$stage" --quiet >/dev/null

prefix=$(meson introspect "$build" --buildoptions |
    python3 -c 'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"]=="prefix"))')
root="$stage$prefix"
fail() { echo "install check: $*" >&2; exit 1; }

[ -f "$root/include/gpumem.h" ] || fail "include/gpumem.h not installed"
so=$(find "$root" -name 'libgpumem.so.0.*' | head -1)
[ -n "$so" ] || fail "libgpumem.so.0.* not installed"
[ -e "$(dirname "$so")/libgpumem.so" ] || fail "the libgpumem.so development link is missing"
[ -n "$(find "$root" -name libgpumem.a)" ] || fail "libgpumem.a not installed"
pc=$(find "$root" -name gpumem.pc | head -1)
[ -n "$pc" ] || fail "gpumem.pc not installed"
soname=$(readelf -d "$so" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
[ "$soname" = libgpumem.so.0 ] || fail "soname is '$soname', not libgpumem.so.0"

cat >"$stage/hello.c" <<'C'
#include <gpumem.h>
#include <stdio.h>
int main(void)
{
    size_t n = 0;
    void *p = NULL;
    if (gpumem_list_physical_devices(NULL, NULL, 0, &n) != GPUMEM_OK || n == 0 ||
        gpumem_malloc(NULL, 0, 1 << 20, &p) != GPUMEM_OK ||
        gpumem_free(NULL, p) != GPUMEM_OK) {
        fprintf(stderr, "hello: %s\n", gpumem_last_error());
        return 1;
    }
    printf("hello: gpumem %u sees %zu GPU(s); 1 MiB allocated and freed\n",
           gpumem_version(), n);
    return 0;
}
C
# The .pc names the final prefix; PKG_CONFIG_SYSROOT_DIR points its -I/-L into the stage.
export PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR="$stage"
PKG_CONFIG_PATH=$(dirname "$pc")
cc -std=c11 "$stage/hello.c" -o "$stage/hello" $(pkg-config --cflags --libs gpumem)
GPUMEM_BACKEND=sim GPUMEM_SIM_DEVICES=1GiB LD_LIBRARY_PATH="$(dirname "$so")" "$stage/hello"
cc -std=c11 -static "$stage/hello.c" -o "$stage/hello-static" \
    $(pkg-config --cflags --libs --static gpumem)
GPUMEM_BACKEND=sim GPUMEM_SIM_DEVICES=1GiB "$stage/hello-static"
echo "install check: header, libgpumem.so.0, libgpumem.a and gpumem.pc installed; pkg-config build runs (shared and static)"
