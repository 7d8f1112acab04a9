#!/bin/bash
# Soak at the descriptor limit (bench/fd_soak.py; results in docs/testing.md, "Soak at
# the descriptor limit").
#   bench/run_fd_soak.sh [--minutes 3] [--limit 1024] [--flood 700] [--hold 1]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
cmake --build "$build" -j "${JOBS:-$(nproc)}" \
  --target shardcast-server shardcast-ctl shardcast-pack shardcast_native >/dev/null
exec /usr/bin/python3 "$root/bench/fd_soak.py" --build-dir "$build" "$@"
