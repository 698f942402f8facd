#!/usr/bin/env bash
# Every tracked C++ file exactly as clang-format writes it with the checked-in .clang-format (the files under
# tests/fixtures are data). Lists the files that differ and exits 1; fix them with clang-format -i.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "check_format: clang-format not found (scripts/setup.sh installs it)" >&2; exit 2; }
bad=()
while IFS= read -r f; do
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done < <(git ls-files '*.cpp' '*.h' | grep -v '^tests/fixtures/')
if ((${#bad[@]})); then
  echo "check_format: ${#bad[@]} file(s) differ from .clang-format: ${bad[*]}" >&2
  echo "  fix: clang-format -i ${bad[*]}" >&2
  exit 1
fi
echo "check_format: every C++ file as .clang-format writes it"
