#!/bin/bash
# Decode + transform benchmark: raw TurboJPEG vs shardcast vs the Python reference
# (PIL + torchvision, /usr/bin/python3), one thread each, same files, one run.
#   bench/run_decode_bench.sh [--dir DIR_OF_JPEGS | --generate N [--size WxH]] [--seconds S] [--rounds R]
# Real photographs: /usr/bin/python3 bench/make_photo_corpus.py --out DIR first (docs/BENCHMARKS.md).
# BUILD_DIR (default build) is the CMake build directory.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
if [[ ! -x "$build/bench/decode_bench" ]]; then
  cmake -S "$root" -B "$build" -G Ninja >/dev/null
  ninja -C "$build" -j2 decode_bench
fi
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
exec "$build/bench/decode_bench" --python /usr/bin/python3 \
  --script "$root/bench/python_reference_decode.py" "$@"
