#!/bin/bash
# Load test of a real shardcast-server on loopback: 64 well-behaved ranks (the Python
# client) over 2 jobs, plus clients that never read and clients that disconnect at random
# and reconnect; exact batch counts, no hang, server peak RSS within the budgets plus a
# measured baseline (bench/serve_load_bench.py; figures in docs/BENCHMARKS.md).
#   bench/run_serve_load_bench.sh [--ranks 64] [--jobs 2] [--non-readers 16] [--flaky 16] ...
# BUILD_DIR (default build) is the CMake build directory; only the server and
# shardcast-pack are built.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
cmake -S "$root" -B "$build" -G Ninja >/dev/null
ninja -C "$build" -j "${JOBS:-1}" shardcast-server shardcast-pack >/dev/null
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
exec /usr/bin/python3 "$root/bench/serve_load_bench.py" --build-dir "$build" "$@"
