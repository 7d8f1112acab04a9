#!/bin/bash
# Shards in object storage: images/s from an HTTP store (nginx) and S3 (s3rver) behind
# tools/delay_proxy.py at 0/5/20/50 ms against local disk, cold and warm cache, and the
# seed's webdataset + pipe:curl beside it (bench/remote_shards_bench.py; results in
# docs/BENCHMARKS.md, "Shards in object storage").
#   bench/run_remote_shards_bench.sh [--samples 4000] [--rtts 0,5,20,50] [--rounds 3] ...
# BUILD_DIR (default build) is a CMake build directory; only the targets used are built.
# nginx and s3rver: tools/setup-test-servers.sh; webdataset from bench/third_party (its
# braceexpand from Debian's python3-braceexpand).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
if [[ -z "${SKIP_BUILD:-}" ]]; then
  cmake --build "$build" -j "${JOBS:-$(nproc)}" \
    --target shardcast-server shardcast-ctl shardcast-pack shardcast_native >/dev/null
fi
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
exec /usr/bin/python3 "$root/bench/remote_shards_bench.py" --build-dir "$build" "$@"
