#!/bin/bash
# One job of 8 ranks served by 1, 2 and 4 replicas (bench/replica_scale_bench.py;
# results in docs/BENCHMARKS.md, "Replicas").
#   bench/run_replica_scale_bench.sh [--replicas 1,2,4] [--ranks 8] [--rounds 3]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
cmake --build "$build" -j "${JOBS:-$(nproc)}" \
  --target shardcast-server shardcast-pack shardcast_native >/dev/null
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
exec /usr/bin/python3 "$root/bench/replica_scale_bench.py" --build-dir "$build" "$@"
