#!/usr/bin/env bash
# The main job: set up, build, make a synthetic dataset, serve it, train 2 CPU ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup-deps.sh
tools/build.sh
echo "demo: the trainer (shardcast-train) is not built yet; nothing to run." >&2
exit 1
