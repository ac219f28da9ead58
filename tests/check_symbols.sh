#!/usr/bin/env bash
# The shared library exports the public gpumem_* API and nothing else.
set -euo pipefail
lib=$1
syms=$(nm -D --defined-only "$lib" | awk '{print $3}' | sort)
bad=$(printf '%s\n' "$syms" | grep -v '^gpumem_' || true)
if [ -n "$bad" ]; then
    echo "symbols outside the gpumem_ namespace are exported:" >&2
    printf '  %s\n' $bad >&2
    exit 1
fi
for f in runtime_create runtime_destroy list_physical_devices set_visible_devices \
    set_memory_growth get_memory_growth set_memory_fraction \
    set_logical_device_configuration get_logical_device_configuration initialize \
    list_logical_devices malloc free get_memory_info reset_memory_stats release_unused \
    status_string last_error; do
    grep -qx "gpumem_$f" <<<"$syms" || { echo "gpumem_$f is not exported" >&2; exit 1; }
done
echo "$(printf '%s\n' "$syms" | wc -l) symbols, all gpumem_*"
