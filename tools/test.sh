#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs every test with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup-deps.sh
tools/build.sh
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j "${TEST_JOBS:-2}" --timeout 900
