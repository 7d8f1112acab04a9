#!/bin/bash
# Server peak RSS against --max-decode-memory: 64 PNGs of 12000x14900 (536 MB each decoded)
# served by a real shardcast-server on 8 decode threads, once per budget; one table.
#   bench/run_decode_memory_bench.sh [--threads T] [--budget-images 1.5,2.5,4.5,0] [--images N]
# BUILD_DIR (default build) is the CMake build directory.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
cmake -S "$root" -B "$build" -G Ninja >/dev/null
ninja -C "$build" -j "${JOBS:-1}" decode_memory_bench shardcast-server >/dev/null
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
exec "$build/bench/decode_memory_bench" "$@"
