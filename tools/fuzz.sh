#!/usr/bin/env bash
# The libFuzzer harnesses (fuzz/): builds them with clang-14 in build-fuzz (ASan + UBSan
# + libFuzzer on every non-torch target), replays each harness's corpus
# (fuzz/corpus/<harness>/) and fuzzes each for FUZZ_SECONDS (default 10). New inputs go
# to a scratch dir; a crash is saved as crash-* in the current directory: move it into
# the corpus with the fix. Needs clang-14 and libclang-rt-14-dev.
#   tools/fuzz.sh [HARNESS...]         FUZZ_SECONDS=3600 tools/fuzz.sh tar_scan_fuzzer
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${FUZZ_BUILD_DIR:-$root/build-fuzz}"
seconds="${FUZZ_SECONDS:-10}"
harnesses=("$@")
if [[ ${#harnesses[@]} -eq 0 ]]; then
  harnesses=(tar_scan_fuzzer sample_grouping_fuzzer index_cache_fuzzer)
fi
CC=clang-14 CXX=clang++-14 cmake -S "$root" -B "$build" -G Ninja -DSHARDCAST_FUZZ=ON \
  -DSHARDCAST_BUILD_TRAINER=OFF -DSHARDCAST_BUILD_TESTS=OFF -DSHARDCAST_BUILD_BENCH=OFF >/dev/null
ninja -C "$build" -j "${JOBS:-$(nproc)}" "${harnesses[@]}"
for h in "${harnesses[@]}"; do
  corpus="$root/fuzz/corpus/$h"
  scratch="$(mktemp -d)"
  echo "== $h: replay $(ls "$corpus" | wc -l) corpus inputs, then fuzz ${seconds}s"
  "$build/fuzz/$h" -runs=0 "$corpus"
  "$build/fuzz/$h" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -close_fd_mask=2 "$scratch" "$corpus" 2>&1 | tail -12
  rm -rf "$scratch"
done
