#!/bin/bash
# How long a rank waits for a restarted server, the Loader now against the Loader before
# it (bench/reconnect_bench.py; figures in docs/BENCHMARKS.md, "Reconnecting").
#   bench/run_reconnect_bench.sh [--outages 1,3] [--trials 3]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
cmake --build "$build" -j "${JOBS:-$(nproc)}" \
  --target shardcast-server shardcast-pack shardcast_native >/dev/null
exec /usr/bin/python3 "$root/bench/reconnect_bench.py" --build-dir "$build" "$@"
