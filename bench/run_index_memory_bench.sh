#!/bin/bash
# Where the index lives (issue 46): resident memory per sample after indexing and after
# a start from the index cache under --index-memory 8MiB, and time to SERVING from the
# cache for 100k vs 1M samples at equal shard count (bench/index_memory_bench.py;
# figures in docs/BENCHMARKS.md).
#   bench/run_index_memory_bench.sh [--sizes 100000,1000000] [--shards 100] ...
# BUILD_DIR (default build) is a CMake build directory; only the targets used are built
# (SKIP_BUILD=1: none).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
if [[ -z "${SKIP_BUILD:-}" ]]; then
  cmake -S "$root" -B "$build" -G Ninja >/dev/null
  cmake --build "$build" -j "${JOBS:-$(nproc)}" --target shardcast-server shardcast_native >/dev/null
fi
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
exec /usr/bin/python3 "$root/bench/index_memory_bench.py" --build-dir "$build" "$@"
