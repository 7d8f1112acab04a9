#!/bin/bash
# The Loader on the native client against the C++ readers and against the Loader before
# it, on one server, side by side (bench/native_loader_bench.py; figures in
# docs/BENCHMARKS.md, "One protocol client").
#   bench/run_native_loader_bench.sh [--sizes 224,64] [--rounds 3] [--epochs 2] ...
# BUILD_DIR (default build) is a CMake build directory with the benchmarks and the Python
# extension; only the targets used are built.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
cmake --build "$build" -j "${JOBS:-$(nproc)}" \
  --target stream_consumer_bench shardcast-server shardcast-pack shardcast_native >/dev/null
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
exec /usr/bin/python3 "$root/bench/native_loader_bench.py" --build-dir "$build" "$@"
