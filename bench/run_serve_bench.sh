#!/bin/bash
# Serving benchmark: in-process pipeline vs shardcast-server over loopback for 1/2/4
# ranks, wire throughput without decode, server peak RSS — one run, one table.
#   bench/run_serve_bench.sh [--data DIR | --images N] [--batches B] [--rounds R]
#                            [--threads T] [--prefetch K] [--wire-seconds S]
# BUILD_DIR (default build) is the CMake build directory.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
if [[ ! -x "$build/bench/serve_bench" || ! -x "$build/server/shardcast-server" ]]; then
  cmake -S "$root" -B "$build" -G Ninja >/dev/null
  ninja -C "$build" -j2 serve_bench shardcast-server
fi
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
exec "$build/bench/serve_bench" "$@"
