#!/bin/bash
# Feed benchmark: the model's ceiling, the seed's webdataset pipeline, shardcast-server +
# shardcast.Loader (the server decoding; encoded + decode cpu; encoded + decode cuda,
# skipped without CUDA) and shardcast-server + shardcast-train feeding the same model,
# side by side in one run, with images/s, host CPU and wire bytes per image
# (bench/feed_bench.py; figures in docs/BENCHMARKS.md).
#   bench/run_feed_bench.sh [--photos DIR --copies K] [--device cuda] [--crop 224] ...
# BUILD_DIR (default build) is a CMake build directory with the trainer; only the
# targets used are built. webdataset comes from bench/third_party (its braceexpand from
# Debian's python3-braceexpand, or the prefix tools/gpu/device.sh unpacks).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
PYTHON="${PYTHON:-/usr/bin/python3}"
if [[ -z "${SKIP_BUILD:-}" ]]; then
  cmake --build "$build" -j "${JOBS:-$(nproc)}" \
    --target shardcast-server shardcast-ctl shardcast-pack shardcast-train >/dev/null
fi
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
exec "$PYTHON" "$root/bench/feed_bench.py" --build-dir "$build" "$@"
