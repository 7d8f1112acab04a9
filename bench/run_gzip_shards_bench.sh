#!/bin/bash
# Split sample over .tar.gz vs .tar (gzip seek index vs plain pread vs the whole-shard
# inflate it replaced), one run, one table:
#   bench/run_gzip_shards_bench.sh [--images N] [--per-shard P] [--size S] [--threads T]
#                                  [--baseline-samples K]
# BUILD_DIR (default build) is the CMake build directory.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
if [[ ! -x "$build/bench/gzip_shards_bench" ]]; then
  cmake -S "$root" -B "$build" -G Ninja >/dev/null
  ninja -C "$build" -j2 gzip_shards_bench
fi
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
exec "$build/bench/gzip_shards_bench" "$@"
