#!/usr/bin/env bash
# The shared library ($1, libgpumem.so) exports the public gpumem_* API and
# nothing else: no helper without the prefix, no gpumem__ internal, and at
# least DESIGN.md's core API.
set -euo pipefail
lib=${1:?usage: check_symbols.sh path/to/libgpumem.so}
syms=$(nm -D --defined-only "$lib" | awk 'NF >= 3 {print $3}' | sort -u)
status=0

bad=$(printf '%s\n' "$syms" | grep -v '^gpumem_' || true)
if [ -n "$bad" ]; then
    echo "symbols outside the gpumem_ namespace are exported:" >&2
    printf '%s\n' "$bad" | sed 's/^/  /' >&2
    status=1
fi
internal=$(printf '%s\n' "$syms" | grep '^gpumem__' || true)
if [ -n "$internal" ]; then
    echo "internal gpumem__ symbols are exported (they should be hidden):" >&2
    printf '%s\n' "$internal" | sed 's/^/  /' >&2
    status=1
fi

for f in runtime_create runtime_destroy list_physical_devices set_visible_devices \
    set_memory_growth get_memory_growth set_memory_fraction \
    set_logical_device_configuration get_logical_device_configuration initialize \
    list_logical_devices malloc free get_memory_info reset_memory_stats release_unused \
    status_string last_error; do
    if ! grep -qx "gpumem_$f" <<<"$syms"; then
        echo "gpumem_$f (DESIGN.md core API) is not exported" >&2
        status=1
    fi
done
[ "$status" -eq 0 ] && echo "$(printf '%s\n' "$syms" | wc -l) symbols, all public gpumem_*"
exit "$status"
