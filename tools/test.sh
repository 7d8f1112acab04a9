#!/usr/bin/env bash
# The test command: installs what is missing (packages, the object stores of the remote
# tests), checks the format, builds, runs every test: ctest, then the Python client's
# pytest suite (tests/python) against the binaries just built, then the non-torch tests again under
# ASan + UBSan (tools/sanitize.sh: a clang tree), then the fuzz harnesses in that same
# tree (tools/fuzz.sh: corpus replay, then a fixed number of inputs each).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup-deps.sh
# Formatting drift fails at once, before minutes of building (.clang-format).
tools/check-format.sh
# The same for the Python of the tree: black's format and flake8 (.flake8).
tools/check-python.sh
# nginx, s3rver and Node for the remote-shard tests (tests/support/object_servers.h).
tools/setup-test-servers.sh
tools/build.sh
build_dir="$(realpath "${BUILD_DIR:-build}")"
(cd "$build_dir" && ctest --output-on-failure -j "${TEST_JOBS:-2}" --timeout 900)
# pytest exits non-zero when a test fails and 5 when it collected none: both fail here.
SHARDCAST_BUILD_DIR="$build_dir" /usr/bin/python3 -m pytest -q tests/python
# Every non-torch target and its tests again, built with clang, ASan and UBSan
# (docs/testing.md, "Sanitizers": 8 min cold build + 2 min of tests on 2 cores).
tools/sanitize.sh
# The harnesses in the same tree (what they link is built already); a fixed seed
# so that the verdict is reproducible (new bugs are the long campaign's to find).
FUZZ_SEED="${FUZZ_SEED:-1}" tools/fuzz.sh
