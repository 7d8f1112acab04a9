#!/usr/bin/env bash
# Builds the libFuzzer harnesses (fuzz/, -DSHARDCAST_FUZZ=ON) in the separate clang tree,
# replays every seed corpus (fuzz/corpus/<harness>/), then runs each harness for
# FUZZ_SECONDS (default 20). New inputs go to a scratch dir, not into the repo; a crash
# leaves its input in $FUZZ_BUILD_DIR/artifacts/ and fails the script.
#   FUZZ_SECONDS=3600 tools/fuzz.sh          a longer campaign (docs/fuzzing.md)
#   FUZZ_HARNESSES="json_fields_fuzzer" ...   only some harnesses
#   FUZZ_SEED=1 ...                           fixed mutation sequence (tools/test.sh: CI)
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZ_BUILD_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
FUZZ_SECONDS=${FUZZ_SECONDS:-20}
JOBS=${JOBS:-$(nproc)}
HARNESSES=${FUZZ_HARNESSES:-$(cd fuzz && ls ./*_fuzzer.cc | sed 's|^\./||; s|\.cc$||')}

tools/clang-tree.sh "$FUZZ_BUILD_DIR"  # shared with tools/sanitize.sh; only the harnesses built here
# shellcheck disable=SC2086
cmake --build "$FUZZ_BUILD_DIR" -j "$JOBS" --target $HARNESSES

artifacts="$FUZZ_BUILD_DIR/artifacts"
scratch="$FUZZ_BUILD_DIR/new-inputs"
mkdir -p "$artifacts"
# libFuzzer: -rss_limit_mb bounds each harness (the image harness admits at most 64 MiB
# of decode buffers, see fuzz/image_transform_fuzzer.cc); -timeout flags a slow input.
common=(-rss_limit_mb=2048 -timeout=25 -artifact_prefix="$artifacts/" -print_final_stats=1)
# A fixed seed makes a short run try the same mutations every time (a prefix of them on
# a slower machine), so a CI verdict does not depend on luck; finding new bugs is the
# long campaign's job, with a random seed.
if [[ -n "${FUZZ_SEED:-}" ]]; then common+=(-seed="$FUZZ_SEED"); fi
run() {  # run HARNESS LOG ARGS...: fails the script with the log's tail on a finding
  local h=$1 log=$2
  shift 2
  if ! "$FUZZ_BUILD_DIR/fuzz/$h" "${common[@]}" "$@" >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "fuzz.sh: $h failed; the input is kept in $artifacts (log: $log)" >&2
    exit 1
  fi
  grep -E "^(Done|stat::number_of_executed_units|stat::peak_rss_mb)" "$log" | tr '\n' ' '
  echo
}
for h in $HARNESSES; do
  corpus="fuzz/corpus/$h"
  echo "== $h: replaying $(find "$corpus" -type f | wc -l) corpus inputs"
  run "$h" "$FUZZ_BUILD_DIR/$h.replay.log" -runs=0 "$corpus"
  if ((FUZZ_SECONDS > 0)); then
    echo "== $h: fuzzing for ${FUZZ_SECONDS}s"
    rm -rf "${scratch:?}/$h"
    mkdir -p "$scratch/$h"
    run "$h" "$FUZZ_BUILD_DIR/$h.fuzz.log" -max_total_time="$FUZZ_SECONDS" "$scratch/$h" "$corpus"
  fi
done
echo "fuzz.sh: all harnesses clean"
