#!/usr/bin/env bash
# Fails when a C++ or .proto file under version control drifts from .clang-format (Google
# style, 100 columns; the vendored protos of proto/third_party are left as their authors
# wrote them), naming the files and showing the first lines of the diff. The test
# command runs it first, so drift is caught before minutes of building.
#   tools/check-format.sh          check
#   tools/check-format.sh --fix    rewrite the drifted files in place
# clang-format's output changes between major versions: the check pins version 14,
# Debian 12's (tools/setup-deps.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
clang_format="${CLANG_FORMAT:-clang-format-14}"
command -v "$clang_format" >/dev/null || { echo "check-format: $clang_format not found" >&2; exit 2; }

# The files checked: every C++ source and our own protos.
tracked() { git ls-files "$@" '*.cc' '*.h' '*.proto' ':!:proto/third_party/*'; }

drifted=()
while IFS= read -r -d '' file; do
  if ! "$clang_format" --dry-run -Werror "$file" >/dev/null 2>&1; then drifted+=("$file"); fi
done < <(tracked -z)

if ((${#drifted[@]} == 0)); then
  echo "check-format: $(tracked | wc -l) files match .clang-format"
  exit 0
fi
if [[ "${1:-}" == "--fix" ]]; then
  "$clang_format" -i "${drifted[@]}"
  echo "check-format: reformatted ${#drifted[@]} files: ${drifted[*]}"
  exit 0
fi
for file in "${drifted[@]}"; do
  echo "check-format: $file drifts from .clang-format:"
  "$clang_format" "$file" | diff -u "$file" - | head -20 || true
done
echo "check-format: ${#drifted[@]} files drift; tools/check-format.sh --fix rewrites them" >&2
exit 1
