#!/bin/bash
# Encoded delivery at the image library (bench/encoded_bench.cc): the server's CPU per
# image, server delivery against encoded (with and without the lossless cut), wire bytes
# per image, and the client's decode of the whole image against the cut.
#   bench/run_encoded_bench.sh --dir DIR_OF_JPEGS [--seconds S] [--rounds R] [--resize 256] [--crop 224] [--dct-scaling]
# Real photographs: /usr/bin/python3 bench/make_photo_corpus.py --out DIR first (docs/BENCHMARKS.md).
# BUILD_DIR (default build) is the CMake build directory.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
if [[ ! -x "$build/bench/encoded_bench" ]]; then
  cmake -S "$root" -B "$build" -G Ninja >/dev/null
  ninja -C "$build" -j2 encoded_bench
fi
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
exec "$build/bench/encoded_bench" "$@"
