#!/usr/bin/env bash
# Installs the object stores the remote-shard tests run on loopback
# (tests/support/object_servers.h), only what is missing. Idempotent.
#   nginx-light       a directory over HTTP (range reads)        Debian
#   nodejs, npm       to run s3rver (only if node/npm are absent) Debian
#   s3rver@3.7.1      S3 on a local directory                    npm, into
#                     ${SHARDCAST_TEST_TOOLS:-/var/cache/shardcast-test-tools}
# tools/fault_proxy.py needs only Debian's python3 (setup-deps.sh).
set -euo pipefail

tools_dir="${SHARDCAST_TEST_TOOLS:-/var/cache/shardcast-test-tools}"
s3rver_version="3.7.1"

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi

missing=()
if ! dpkg-query -W -f='${Status}' nginx-light 2>/dev/null | grep -q "install ok installed"; then
  missing+=(nginx-light)
fi
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  missing+=(nodejs npm)
fi
if ((${#missing[@]} > 0)); then
  echo "setup-test-servers: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi
# The package's own nginx (started by its postinst) is not what the tests run; they
# start theirs on free ports, so the system one may stay or go.

if [[ ! -x "$tools_dir/node_modules/.bin/s3rver" ]]; then
  echo "setup-test-servers: installing s3rver@$s3rver_version into $tools_dir"
  $SUDO mkdir -p "$tools_dir"
  $SUDO npm install --no-audit --no-fund --loglevel=error --prefix "$tools_dir" \
    "s3rver@$s3rver_version" >/dev/null
fi
echo "setup-test-servers: nginx $(/usr/sbin/nginx -v 2>&1 | sed 's|.*/||'), node $(node --version)," \
  "s3rver $("$tools_dir/node_modules/.bin/s3rver" --version)"
