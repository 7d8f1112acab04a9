#!/usr/bin/env bash
# The habits of the C++ tree for the Python one: fails when a Python file under version
# control drifts from black's format (100 columns, as .clang-format's) or has a flake8
# finding (.flake8), naming them. The test command runs it beside tools/check-format.sh.
#   tools/check-python.sh          check
#   tools/check-python.sh --fix    rewrite the drifted files with black (flake8's
#                                  findings are fixed by hand)
# Both pinned to Debian 12's packages (black 23.1, flake8 5.0; tools/setup-deps.sh),
# whose output is what the tree is checked against. bench/third_party (webdataset as
# published) is left as its authors wrote it.
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in black flake8; do
  command -v "$tool" >/dev/null || { echo "check-python: $tool not found" >&2; exit 2; }
done
mapfile -t files < <(git ls-files '*.py' ':!:bench/third_party/*')
black_args=(--quiet --line-length 100 --target-version py39)
if [[ "${1:-}" == "--fix" ]]; then
  black "${black_args[@]}" "${files[@]}"
fi
status=0
if ! black "${black_args[@]}" --check "${files[@]}"; then
  black "${black_args[@]}" --diff "${files[@]}" 2>/dev/null | head -40
  echo "check-python: files drift from black's format; tools/check-python.sh --fix rewrites them" >&2
  status=1
fi
if ! flake8 "${files[@]}"; then
  echo "check-python: flake8 findings above" >&2
  status=1
fi
if ((status == 0)); then echo "check-python: ${#files[@]} files match black and flake8"; fi
exit $status
