#!/usr/bin/env bash
# ThreadSanitizer run of the server's concurrency tests: streams and resume, backpressure,
# disconnect and cancel, drain on SIGTERM, stream replacement and idle reclaim, and the
# protocol client's reconnect. Builds them in a separate clang tree (-DSHARDCAST_TSAN=ON,
# build-tsan/) and runs them with the suppressions of tools/tsan.supp; a report fails the
# test (docs/testing.md, "ThreadSanitizer"). Not part of tools/test.sh (cost: see there).
#   tools/tsan.sh                              these tests
#   TSAN_TESTS="serve_test" tools/tsan.sh --gtest_filter='*Resume*'   (args go to each test)
set -euo pipefail
cd "$(dirname "$0")/.."
TSAN_BUILD_DIR=${TSAN_BUILD_DIR:-build-tsan}
JOBS=${JOBS:-$(nproc)}
TESTS=${TSAN_TESTS:-batch_window_test memory_budget_test decode_budget_test serve_test stream_lifecycle_test governance_test server_process_test rank_stream_test}
if ! command -v clang++-14 >/dev/null || ! ls /usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.tsan-x86_64.a >/dev/null 2>&1; then
  echo "tsan.sh: needs clang-14 and libclang-rt-14-dev (tools/setup-deps.sh installs them)" >&2
  exit 1
fi
cmake -S . -B "$TSAN_BUILD_DIR" -G Ninja -DSHARDCAST_TSAN=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_C_COMPILER=clang-14 >/dev/null
# shellcheck disable=SC2086
cmake --build "$TSAN_BUILD_DIR" -j "$JOBS" --target shardcast-server $TESTS
# halt_on_error: the first report ends the process, so its test fails. The server child
# processes of server_process_test are built with TSan too and inherit this.
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tools/tsan.supp}
failed=()
for t in $TESTS; do
  echo "== $t"
  if ! "$TSAN_BUILD_DIR/tests/$t" "$@" >"$TSAN_BUILD_DIR/$t.log" 2>&1; then
    grep -E "WARNING: ThreadSanitizer|^SUMMARY|FAILED|^    #" "$TSAN_BUILD_DIR/$t.log" | head -n 60 >&2
    failed+=("$t")
  fi
  grep -E "^\[  (PASSED|FAILED)  \]" "$TSAN_BUILD_DIR/$t.log" || true
done
if ((${#failed[@]} > 0)); then
  echo "tsan.sh: failed: ${failed[*]} (logs: $TSAN_BUILD_DIR/<test>.log)" >&2
  exit 1
fi
echo "tsan.sh: all clean"
