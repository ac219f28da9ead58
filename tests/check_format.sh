#!/bin/sh
# The tree's C, C++ and CUDA sources are as .clang-format makes them
# (`clang-format -i FILE` fixes one). Checked with clang-format 14, the version the
# tree is formatted with (Debian 12's); other versions break some lines
# differently, so with another version, or none, the check is skipped (exit 77).
set -eu
root=${1:?usage: check_format.sh SOURCE_ROOT}
if ! command -v clang-format >/dev/null 2>&1; then
    echo "clang-format not found: format check skipped (apt-get install clang-format, version 14 as in Debian 12, runs it)"
    exit 77
fi
version=$(clang-format --version | sed -n 's/.*version \([0-9][0-9]*\)\..*/\1/p')
if [ "$version" != 14 ]; then
    echo "clang-format ${version:-?} found; the tree follows clang-format 14: skipped (clang-format 14 on PATH runs it)"
    exit 77
fi
cd "$root"
files=$(find include lib cpp tests tools examples bench -type f \
    \( -name '*.c' -o -name '*.h' -o -name '*.cc' -o -name '*.cu' \) | sort)
# shellcheck disable=SC2086
clang-format --dry-run --Werror $files
echo "$(printf '%s\n' $files | wc -l) files formatted as .clang-format says"
