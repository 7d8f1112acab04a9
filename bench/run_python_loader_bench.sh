#!/bin/bash
# Python client benchmark: shardcast.Loader vs the C++ BatchStream on the same server
# (server-bound and wire-only), and the seed's webdataset-style pipeline vs server +
# Loader (bench/python_loader_bench.py; figures in docs/BENCHMARKS.md).
#   bench/run_python_loader_bench.sh [--rounds R] [--epochs E] [--seed-images N] ...
# BUILD_DIR (default build-bench) is a CMake build directory with the trainer (torch)
# enabled, which the C++ consumer needs; only the three targets used are built.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build-bench}"
cmake -S "$root" -B "$build" -G Ninja -DSHARDCAST_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" -j "${JOBS:-$(nproc)}" \
  --target stream_consumer_bench shardcast-server shardcast-pack >/dev/null
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
exec /usr/bin/python3 "$root/bench/python_loader_bench.py" --build-dir "$build" "$@"
