#!/usr/bin/env bash
# CODE_STYLE.md's layering rule for every crate: runs scripts/import-graph.py on each
# crate's `src` and on each module directory (a `mod.rs`) under it, and fails naming every
# one whose files import each other in a cycle.
set -euo pipefail
cd "$(dirname "$0")/.."
bad=0
check() {
  local dir="$1" prefix="${2:-}" out
  out=$(python3 scripts/import-graph.py "$dir" ${prefix:+"$prefix"} | tail -1)
  if [ "$out" != "CYCLES: []" ]; then
    echo "$dir: $out (python3 scripts/import-graph.py $dir $prefix)"
    bad=1
  fi
}
for src in libs/*/src services/*/src; do
  check "$src"
  while IFS= read -r m; do
    dir=$(dirname "$m")
    rel=${dir#"$src"/}
    check "$dir" "${rel//\//::}"
  done < <(find "$src" -mindepth 2 -name mod.rs | sort)
done
if [ "$bad" -ne 0 ]; then
  echo "import cycles: see CODE_STYLE.md (a leaf imports no sibling; the facade sits on top)" >&2
  exit 1
fi
echo "no import cycles"
