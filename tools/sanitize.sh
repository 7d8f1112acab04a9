#!/usr/bin/env bash
# Builds every target but the LibTorch trainer (common/, proto/, server/, shardcast-ctl,
# the protocol client, shardcast-pack and their tests) with AddressSanitizer + UBSan in the
# clang tree that tools/fuzz.sh also uses, and runs those tests with ctest (CI does, from
# tools/test.sh). A finding (memory error, leak, undefined behaviour) aborts its process,
# so the test fails, and so does this script (docs/testing.md, "Sanitizers").
#   tools/sanitize.sh                  build, then every test of the tree
#   tools/sanitize.sh -R ServeTest     extra arguments go to ctest
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZ_BUILD_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
JOBS=${JOBS:-$(nproc)}
tools/clang-tree.sh "$FUZZ_BUILD_DIR"
cmake --build "$FUZZ_BUILD_DIR" -j "$JOBS"
# The sanitizers' reports go to stderr, which ctest prints for a failed test. Child
# processes (shardcast-server, shardcast-ctl) are built here too and inherit these.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:strict_init_order=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:suppressions=$PWD/tools/ubsan.supp}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tools/lsan.supp}
# Left out here, and run in the GCC tree only: decode_memory_test's 64 PNGs of 536 MB
# each (tens of GB of pixels through the instrumented resize took over 10 minutes under
# ASan on a loaded 2-core machine); the decode budget it exercises is covered under
# the sanitizers by decode_budget_test, decode_admission_test and its small-budget case.
# And decode_memory_rss_test, which measures the process's resident memory: ASan's
# allocator keeps freed blocks in its quarantine (256 MiB by default) and so holds
# what the test checks the client gives back (+304 MiB there against +9 MiB in the GCC
# tree); the accounting under it is covered here by encoded_batch_decoder_test.
(cd "$FUZZ_BUILD_DIR" && ctest --output-on-failure -j "${TEST_JOBS:-2}" --timeout 900 \
  -E '^(DecodeMemoryTest\.SixtyFourHugePngsOnAllThreadsStayWithinTheBudget|ClientDecodeMemoryRssTest\..*)$' "$@")
