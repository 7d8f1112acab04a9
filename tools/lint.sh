#!/usr/bin/env bash
# Runs clang-tidy-14 with the checks of .clang-tidy (bugprone-*, performance-*, less the
# noisy ones) over the production code: server/, client/, common/, the hand-written
# files of proto/, tools/pack and python/native. Not tests/, bench/ or fuzz/: their
# shortcuts (fixed sizes, ignored results, copies for clarity) are deliberate, and the
# checks would make them noisier to read. Generated code (*.pb.cc, *.pb.h) is skipped.
# Fails, naming each finding once, when the tree is not clean; a false positive gets a
# `// NOLINT(check): reason` on its line.
#   tools/lint.sh [FILE_REGEX]     e.g. tools/lint.sh server/serving to lint a subset
# It needs the compile database of a configured build tree (CMakeLists.txt exports
# compile_commands.json) whose generated protobuf headers exist: BUILD_DIR (default
# build/), built at least up to the proto targets. Not part of the test command
# (tools/test.sh): too slow for 2 cores. The whole tree (114 files; each LibTorch file
# of client/train takes a minute or two) took 14 min 51 s of wall time, 19 min 45 s of
# CPU, on 2 cores with a build beside it.
# JOBS (default 2) clang-tidy processes run at once.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build_dir=$(realpath "${BUILD_DIR:-build}")
jobs=${JOBS:-2}
filter=${1:-.}
command -v clang-tidy-14 >/dev/null || { echo "lint: clang-tidy-14 not found" >&2; exit 2; }
[[ -f "$build_dir/compile_commands.json" ]] || {
  echo "lint: no $build_dir/compile_commands.json: configure the tree first (tools/build.sh)" >&2
  exit 2
}
if ! find "$build_dir/proto" -name shardcast.pb.h 2>/dev/null | grep -q .; then
  echo "lint: generated protobuf headers missing: cmake --build $build_dir --target shardcast_proto" >&2
  exit 2
fi

mapfile -t files < <(/usr/bin/python3 - "$build_dir/compile_commands.json" "$root" "$filter" <<'EOF'
import json, re, sys
database, root, pattern = sys.argv[1], sys.argv[2] + "/", re.compile(sys.argv[3])
production = re.compile(r"^(server|client|common|tools/pack|python/native)/|^proto/[^/]+\.cc$")
for entry in json.load(open(database)):
    path = entry["file"]
    if path.startswith(root):
        relative = path[len(root):]
        if production.search(relative) and pattern.search(relative):
            print(relative)
EOF
)
((${#files[@]} > 0)) || { echo "lint: no production file matches '$filter'" >&2; exit 2; }

# Headers of the production folders only: the generated ones under the build tree and
# third-party ones stay out of the report.
header_filter="^$root/(server|client|common|tools/pack|python/native)/|^$root/proto/[^/]+\\.h$"
# GCC's flags in the database that clang does not know would be errors in every file.
extra_args=(--extra-arg=-Wno-unknown-warning-option --extra-arg=-Wno-unused-command-line-argument)

log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "lint: clang-tidy-14 over ${#files[@]} files, $jobs at a time"
printf '%s\n' "${files[@]}" |
  xargs -P "$jobs" -I{} clang-tidy-14 -p "$build_dir" --quiet --header-filter="$header_filter" \
    "${extra_args[@]}" {} >"$log" 2>/dev/null || true

# A header's finding is reported by every file that includes it: count each once.
findings=$(grep -E '^/.*: (warning|error): .*\[[a-z0-9.,-]+\]$' "$log" | sort -u || true)
if [[ -z "$findings" ]]; then
  echo "lint: clean"
  exit 0
fi
echo "$findings" | sed "s|^$root/||"
echo
echo "lint: findings per check:"
echo "$findings" | grep -oE '\[[a-z0-9.,-]+\]$' | sort | uniq -c | sort -rn
exit 1
