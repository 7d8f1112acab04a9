#!/usr/bin/env bash
# Installs the Debian 12 packages shardcast needs, only those missing. Idempotent.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler grpc-proto
  libarchive-dev zlib1g-dev libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev libabsl-dev
  # WebP images (common/image/webp_decode.cc); PIL decodes WebP with the same library.
  libwebp-dev
  libtorch-dev libgloo-dev
  # Shards in object storage: HTTP(S) range reads and S3 SigV4 signing (common/remote).
  libcurl4-openssl-dev
  # The /metrics and status page listener (server/status/metrics_http.cc).
  libmicrohttpd-dev
  libgtest-dev libgmock-dev
  # libcrypto for the server's token check (gRPC's own dependency too); the openssl CLI
  # makes the certificates of tests/server/security_test.cc.
  libssl-dev openssl
  # Test references: torchvision's transforms (conformance), GNU tar / Python tarfile (tar formats).
  python3 python3-torchvision python3-pil python3-numpy tar gzip
  # The Python client (python/): its runtime, its offline install (venv + pip without
  # build isolation) and its tests.
  python3-torch python3-grpcio python3-protobuf python3-venv python3-setuptools python3-wheel
  python3-pytest
  # webdataset's one dependency outside the standard library: tests/python/test_members_e2e.py
  # writes its shards with webdataset's TarWriter (bench/third_party), as the benchmarks read.
  python3-braceexpand
  # The native client under the Python Loader (python/native): pybind11 and the headers
  # of Debian's Python.
  python3-pybind11 pybind11-dev python3-dev
  # The wheel with everything inside (python/bundle.py): the bundled libraries get
  # $ORIGIN-relative RUNPATHs, as auditwheel sets them.
  patchelf
  # libFuzzer: clang and its runtime (which --no-install-recommends leaves out), for the
  # separate fuzz tree of tools/fuzz.sh (docs/fuzzing.md).
  clang-14 libclang-rt-14-dev
  # The format check of the test command (tools/check-format.sh) and the lint script
  # (tools/lint.sh): version 14, as .clang-format's output is pinned to it.
  clang-format-14 clang-tidy-14
  # The Python habits of the test command (tools/check-python.sh): black formats,
  # flake8 lints python/, tests/python, tools, bench, examples and deploy.
  black flake8
  # Parses the server's /metrics exposition in tests/python/test_metrics.py.
  python3-prometheus-client
  # A test dependency: headless chromium renders the status page (GET /) in
  # tests/python/test_status_page.py and makes docs/status-page.png.
  chromium
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "setup-deps: all ${#packages[@]} packages present"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
echo "setup-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
