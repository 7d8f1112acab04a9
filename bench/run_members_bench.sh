#!/bin/bash
# Members beside the image (issue 37): image + txt + json against the image alone, and a
# members-only job of 1 KB captions against webdataset reading the same shards for .txt
# (bench/members_bench.py; figures in docs/BENCHMARKS.md).
#   bench/run_members_bench.sh [--rounds 3] [--images 4000] [--captions 50000] ...
# BUILD_DIR (default build) is a CMake build directory; only the targets used are built
# (SKIP_BUILD=1: none). webdataset comes from bench/third_party (its braceexpand from
# Debian's python3-braceexpand).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
if [[ -z "${SKIP_BUILD:-}" ]]; then
  cmake -S "$root" -B "$build" -G Ninja >/dev/null
  cmake --build "$build" -j "${JOBS:-$(nproc)}" \
    --target shardcast-server shardcast-pack shardcast_native >/dev/null
fi
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
exec /usr/bin/python3 "$root/bench/members_bench.py" --build-dir "$build" "$@"
