#!/usr/bin/env bash
# Generates the shardcast Python package's stubs for use without installing it:
#   tools/python-stubs.sh [OUT_DIR]      (default build/python)
#   PYTHONPATH=python:build/python /usr/bin/python3 -c 'import shardcast'
# (pip install ./python generates them itself; see docs/python.md.)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
exec /usr/bin/python3 "$root/python/generate_stubs.py" "${1:-$root/build/python}"
