#!/bin/bash
# Checks (or with --fix, applies) .clang-format on the project's C++ sources.
# Usage: scripts/check-format.sh [CLANG_FORMAT] [--fix]
set -euo pipefail
cd "${MESON_SOURCE_ROOT:-$(dirname "$0")/..}"
CF=${1:-clang-format}
mapfile -t files < <(git ls-files '*.cpp' '*.h' 2>/dev/null || find core gst tests pipelines -name '*.cpp' -o -name '*.h')
if [ "${2:-}" = "--fix" ]; then
  "$CF" -i "${files[@]}"
else
  "$CF" --dry-run --Werror "${files[@]}"
  echo "format-check: ${#files[@]} files clean"
fi
