#!/usr/bin/env bash
# Builds the libFuzzer harnesses (fuzz/, -DSHARDCAST_FUZZ=ON) in the separate clang tree,
# replays every seed corpus (fuzz/corpus/<harness>/), then runs each harness for a fixed
# number of inputs (the table below, each sized to about 20 s on the 2-core development
# machine) or, for a campaign, for FUZZ_SECONDS. New inputs go to a scratch dir, not into
# the repo; a crash leaves its input in $FUZZ_BUILD_DIR/artifacts/ and fails the script.
#   tools/fuzz.sh                             each harness for its fixed number of runs
#   FUZZ_RUNS_SCALE=10 tools/fuzz.sh          ten times as many runs
#   FUZZ_SECONDS=3600 tools/fuzz.sh           a campaign bounded by time (docs/fuzzing.md)
#   FUZZ_HARNESSES="json_fields_fuzzer" ...   only some harnesses
#   FUZZ_SEED=1 ...                           fixed mutation sequence (tools/test.sh: CI)
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZ_BUILD_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
FUZZ_SECONDS=${FUZZ_SECONDS:-0}
FUZZ_RUNS_SCALE=${FUZZ_RUNS_SCALE:-1}
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
# A fixed seed and a fixed number of runs make the short run try the same mutations on
# every machine, fast or slow, so a CI verdict is every machine's verdict (a run bounded
# by time explored as far as the machine was fast: a finding 525,000 inputs in showed
# on one machine and not on another). Finding new bugs is the long campaign's job,
# with a random seed and FUZZ_SECONDS.
if [[ -n "${FUZZ_SEED:-}" ]]; then common+=(-seed="$FUZZ_SEED"); fi
# Inputs per harness: about 15-20 s each on the idle 2-core development machine (the
# rates of docs/fuzzing.md, "CI's fixed runs"); a harness missing here gets the fallback.
declare -A runs_of=(
  [image_transform_fuzzer]=250000
  [index_cache_fuzzer]=1000000
  [compact_shard_table_fuzzer]=550000
  [json_fields_fuzzer]=100000
  [register_request_fuzzer]=400000
  [sample_grouping_fuzzer]=200000
  [sample_label_fuzzer]=150000
  [tar_scan_fuzzer]=15000
)
runs_for() { echo $((${runs_of[$1]:-20000} * FUZZ_RUNS_SCALE)); }
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
  rm -rf "${scratch:?}/$h"
  mkdir -p "$scratch/$h"
  if ((FUZZ_SECONDS > 0)); then
    echo "== $h: fuzzing for ${FUZZ_SECONDS}s"
    run "$h" "$FUZZ_BUILD_DIR/$h.fuzz.log" -max_total_time="$FUZZ_SECONDS" "$scratch/$h" "$corpus"
  else
    echo "== $h: fuzzing $(runs_for "$h") inputs"
    run "$h" "$FUZZ_BUILD_DIR/$h.fuzz.log" -runs="$(runs_for "$h")" "$scratch/$h" "$corpus"
  fi
done
echo "fuzz.sh: all harnesses clean"
