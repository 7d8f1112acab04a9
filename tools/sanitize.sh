#!/usr/bin/env bash
# Builds every target but the LibTorch trainer (common/, proto/, server/, shardcast-ctl,
# the protocol client, shardcast-pack and their tests) with AddressSanitizer + UBSan in the
# clang tree that tools/fuzz.sh also uses, and runs those tests with ctest. A finding
# (memory error, leak, undefined behaviour) aborts its process, so the test fails, and so
# does this script (docs/testing.md, "Sanitizers").
#   tools/sanitize.sh                  build, then every test of the tree
#   tools/sanitize.sh -R serve_test    extra arguments go to ctest
#   SANITIZE_SCOPE=unit tools/sanitize.sh
#                                      only the common/ and proto/ unit tests (CI: see
#                                      docs/testing.md for why the rest is run by hand)
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZ_BUILD_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
JOBS=${JOBS:-$(nproc)}
tools/clang-tree.sh "$FUZZ_BUILD_DIR"
if [[ "${SANITIZE_SCOPE:-all}" == unit ]]; then
  units=$(cd tests && ls common/*_test.cc proto/*_test.cc | xargs -n1 basename | sed 's/\.cc$//')
  # shellcheck disable=SC2086
  cmake --build "$FUZZ_BUILD_DIR" -j "$JOBS" --target $units
else
  cmake --build "$FUZZ_BUILD_DIR" -j "$JOBS"
fi
# The sanitizers' reports go to stderr, which ctest prints for a failed test. Child
# processes (shardcast-server, shardcast-ctl) are built here too and inherit these.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:strict_init_order=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tools/lsan.supp}
# Left out here, and run in the GCC tree only: decode_memory_test's 64 PNGs of 536 MB
# each (tens of GB of pixels through the instrumented resize took over 10 minutes under
# ASan on a loaded 2-core machine); the decode budget it exercises is covered under
# the sanitizers by decode_budget_test, decode_admission_test and its small-budget case.
if [[ "${SANITIZE_SCOPE:-all}" == unit ]]; then
  # The test binaries themselves (ctest would also list the targets not built here).
  # EpochPlanProperties (200 random datasets) takes minutes under ASan and exercises
  # the same code as the other plan tests.
  for t in $units; do
    echo "== $t (ASan+UBSan)"
    "$FUZZ_BUILD_DIR/tests/$t" --gtest_brief=1 --gtest_filter='-EpochPlanProperties*'
  done
  exit 0
fi
(cd "$FUZZ_BUILD_DIR" && ctest --output-on-failure -j "${TEST_JOBS:-2}" --timeout 900 \
  -E '^DecodeMemoryTest\.SixtyFourHugePngsOnAllThreadsStayWithinTheBudget$' "$@")
