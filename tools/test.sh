#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs every test: ctest, then the
# Python client's pytest suite (tests/python) against the binaries just built.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup-deps.sh
tools/build.sh
build_dir="$(realpath "${BUILD_DIR:-build}")"
(cd "$build_dir" && ctest --output-on-failure -j "${TEST_JOBS:-2}" --timeout 900)
# pytest exits non-zero when a test fails and 5 when it collected none: both fail here.
SHARDCAST_BUILD_DIR="$build_dir" /usr/bin/python3 -m pytest -q tests/python
