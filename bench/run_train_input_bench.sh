#!/bin/bash
# Trainer input benchmark: BatchStream vs raw gRPC consumption of the real server, and
# ResNet-18 step time with data from the server vs in memory — one run, two tables.
#   bench/run_train_input_bench.sh [--samples N] [--size S] [--resize R] [--crop C]
#                                  [--batch B] [--epochs E] [--rounds R] [--steps K]
#                                  [--decode-threads T]
# BUILD_DIR (default build) is the CMake build directory.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
cmake -S "$root" -B "$build" -G Ninja >/dev/null
ninja -C "$build" -j2 train_input_bench shardcast-server >/dev/null
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
exec "$build/bench/train_input_bench" "$@"
