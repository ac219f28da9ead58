#!/usr/bin/env bash
# README's "What `./run.sh test` runs" against run.sh (meson test 'readme-run'):
# its list of stages, "- **NAME** (`FOLDER`): ...", must be run.sh's stage
# table (stage_table), name for name, folder for folder, in the same order.
# README's count of tests is checked by `./run.sh test` itself, which alone
# knows it (readme_count_check).
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=../run.sh
source "$root/run.sh"
set +e
readme=${1:-$root/README.md}
want=$(stage_table | cut -f1,2)
got=$(awk '/^## What `\.\/run\.sh test` runs/ { on = 1; next }
           on && /^## / { exit }
           on && /^- \*\*[^*]+\*\* \(`[^`]+`\)/ {
               name = $0; sub(/^- \*\*/, "", name); sub(/\*\*.*/, "", name)
               dir = $0; sub(/^[^`]*`/, "", dir); sub(/`.*/, "", dir)
               print name "\t" dir }' "$readme")
if [ "$got" != "$want" ]; then
    echo "FAIL: README's stages (\"- **NAME** (\`FOLDER\`)\" under \"What \`./run.sh test\` runs\") are not run.sh's"
    diff <(printf '%s\n' "$want") <(printf '%s\n' "$got") | sed 's/^</  run.sh:/; s/^>/  README:/'
    exit 1
fi
echo "README lists run.sh's $(printf '%s\n' "$want" | wc -l) stages, in order"
