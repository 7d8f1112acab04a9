#!/bin/bash
# Whole-pipeline CPU per image, server and client: server delivery against encoded
# delivery decoded by the Loader on the trainer's CPU (bench/decode_place_bench.py;
# figures in docs/BENCHMARKS.md, "Encoded delivery").
#   bench/run_decode_place_bench.sh --photos DIR [--copies 2] [--rounds 3] [--transform random]
# BUILD_DIR (default build) is a CMake build directory; only the targets used are built.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
PYTHON="${PYTHON:-/usr/bin/python3}"
if [[ -z "${SKIP_BUILD:-}" ]]; then
  cmake --build "$build" -j "${JOBS:-$(nproc)}" \
    --target shardcast-server shardcast-ctl shardcast-pack shardcast_native >/dev/null
fi
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
exec "$PYTHON" "$root/bench/decode_place_bench.py" --build-dir "$build" "$@"
