#!/bin/bash
# Server memory under non-reading clients: idle RSS and peak RSS of shardcast-server
# while N streams never read, without and with a batch memory budget, one table.
#   bench/run_memory_attack_bench.sh [--streams N] [--budget SIZE] [--idle-timeout D] ...
# BUILD_DIR (default build) is the CMake build directory.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
if [[ ! -x "$build/bench/memory_attack_bench" || ! -x "$build/server/shardcast-server" ]]; then
  cmake -S "$root" -B "$build" -G Ninja >/dev/null
  ninja -C "$build" -j1 memory_attack_bench shardcast-server
fi
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
exec "$build/bench/memory_attack_bench" "$@"
