#!/usr/bin/env bash
# Configures the clang-14 tree with ASan + UBSan (-DSHARDCAST_FUZZ=ON) that serves both the
# libFuzzer harnesses (tools/fuzz.sh) and the sanitizer run of the tests (tools/sanitize.sh),
# so common/ is compiled once for both. Usage: tools/clang-tree.sh DIR
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:?usage: tools/clang-tree.sh BUILD_DIR}
if ! command -v clang++-14 >/dev/null || ! ls /usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  echo "clang-tree.sh: needs clang-14 and libclang-rt-14-dev (tools/setup-deps.sh installs them)" >&2
  exit 1
fi
# -O1 -gline-tables-only: OSS-Fuzz's flags for sanitizer builds; line tables are all a
# sanitizer report needs, and the cold tree builds in 8 minutes on 2 cores
# (docs/testing.md, "Cost"). Given on every call, so an older tree is switched too.
cmake -S . -B "$dir" -G Ninja -DSHARDCAST_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
  -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_C_COMPILER=clang-14 >/dev/null
