#!/bin/bash
# Serving rate, index in tables vs in memory (issue 46): members-only samples/s and
# images/s of a server with the default --index-memory against --index-memory 0, in
# alternating runs from the same warm index cache (bench/index_rate_bench.py; figures
# in docs/BENCHMARKS.md).
#   bench/run_index_rate_bench.sh [--rounds 6] [--shuffle buffer|sample|none] ...
# BUILD_DIR (default build) is a CMake build directory; only the targets used are built
# (SKIP_BUILD=1: none).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
if [[ -z "${SKIP_BUILD:-}" ]]; then
  cmake -S "$root" -B "$build" -G Ninja >/dev/null
  cmake --build "$build" -j "${JOBS:-$(nproc)}" \
    --target shardcast-server shardcast_native shardcast-pack >/dev/null
fi
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
exec /usr/bin/python3 "$root/bench/index_rate_bench.py" --build-dir "$build" "$@"
