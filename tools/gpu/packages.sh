# shellcheck shell=bash
# Sourced by tools/gpu/prepare.sh and tools/gpu/rehearse-prefix.sh: which Debian 12
# packages the GPU machine needs carried, derived from what the build finds.
#
# The build names its dependencies in CMake (find_package, pkg_check_modules). Each name
# is either mapped here to the Debian -dev package(s) providing it, or listed as one the
# GPU machine brings itself; a name in neither fails, so a dependency added to the build
# is added here before it can reach a device. The packages carried are the dependency
# closure of those -dev packages (and the few extras below) minus what a GPU machine
# has: the Debian base system (Priority required/important) and the compiler and
# Python, with their closures. CMake and ninja are the machine's own builds there, so
# their Debian dependencies (libcurl4, libarchive13, ...) are not counted as present.

# CMake name (find_package's package, pkg_check_modules' module) -> Debian packages.
declare -A GPU_DEV_PACKAGES=(
  [absl]=libabsl-dev
  [LibArchive]=libarchive-dev
  [ZLIB]=zlib1g-dev
  [libturbojpeg]=libturbojpeg0-dev
  [libjpeg]=libjpeg62-turbo-dev
  [PNG]=libpng-dev
  [libwebp]=libwebp-dev
  # protoc and the gRPC plugin: proto/ generates its code on the machine as it does here.
  [Protobuf]="libprotobuf-dev protobuf-compiler"
  [gRPC]="libgrpc++-dev protobuf-compiler-grpc"
  [OpenSSL]=libssl-dev
  [CURL]=libcurl4-openssl-dev
  # The /metrics and status page listener (server/status/metrics_http.cc).
  [libmicrohttpd]=libmicrohttpd-dev
)

# Names the build finds that the GPU machine brings: its compiler's threads, pkg-config,
# PyTorch's LibTorch and pybind11, its Python; GTest only for the tests, which are not
# built there.
GPU_MACHINE_PROVIDES=(Threads PkgConfig Torch pybind11 Python GTest)

# Carried though no find_package names them.
GPU_EXTRA_PACKAGES=(
  # Gloo's headers: c10d's ProcessGroupGloo.hpp includes them and the pip wheel ships
  # none (its Gloo is linked into libtorch_cpu). Headers only: nothing of it is linked.
  libgloo-dev
  # webdataset's brace expansion, for the feed benchmark's seed row (pure Python; the GPU
  # machine's pip has no registry to fetch it from).
  python3-braceexpand
)

# What a GPU machine has besides the base system (and so what the container of
# rehearse-prefix.sh may hold without hiding a missing package).
GPU_MACHINE_TOOLCHAIN=(g++ pkg-config python3)

# The names every CMakeLists.txt under $1 finds, one a line (third-party trees and
# build folders excepted).
gpu_build_dependency_names() {
  local files
  files="$(find "$1" \( -name build -o -name 'build-*' -o -name third_party -o -name .git \
    -o -name .gpu \) -prune -o \( -name CMakeLists.txt -o -name '*.cmake' \) -print)"
  # shellcheck disable=SC2086
  {
    grep -ohP 'find_package\(\s*\K[A-Za-z0-9_]+' $files
    grep -ohP 'pkg_check_modules\(\s*\w+\s+(REQUIRED\s+)?(IMPORTED_TARGET\s+)?\K[^\s)]+' $files
  } | sort -u
}

# The -dev packages for the names the build finds; fails naming any name not mapped.
gpu_dev_packages() {
  local name unknown=()
  for name in $(gpu_build_dependency_names "$1"); do
    if [[ -n "${GPU_DEV_PACKAGES[$name]:-}" ]]; then
      echo "${GPU_DEV_PACKAGES[$name]}" | tr ' ' '\n'
    elif ! printf '%s\n' "${GPU_MACHINE_PROVIDES[@]}" | grep -qxF "$name"; then
      unknown+=("$name")
    fi
  done
  if ((${#unknown[@]})); then
    echo "tools/gpu/packages.sh: the build finds ${unknown[*]}, which GPU_DEV_PACKAGES does" \
      "not map to a Debian package (nor GPU_MACHINE_PROVIDES list): add it" >&2
    return 1
  fi
}

# The closure of the given packages (Depends and Pre-Depends), real packages only.
gpu_closure() {
  apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
    --no-replaces --no-enhances "$@" | grep -v '^[ <]' | sort -u
}

# What a GPU machine has: the base system and the toolchain, with their closures.
gpu_machine_packages() {
  local base
  mapfile -t base < <(apt-cache dumpavail |
    awk '/^Package: /{p=$2} /^Priority: (required|important)$/{print p}' | sort -u)
  gpu_closure "${base[@]}" "${GPU_MACHINE_TOOLCHAIN[@]}"
}

# The libraries the given -dev packages link to (their direct dependencies that ship
# shared libraries). Carried even where the machine has them: otherwise the prefix's
# libfoo.so link dangles and the build takes the static archive instead (libssl-dev's
# libcrypto.so: a second OpenSSL beside the one gRPC loads) or the machine's copy.
gpu_linked_libraries() {
  apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks \
    --no-replaces --no-enhances "$@" | awk '/^  (Pre)?Depends: [^<]/{print $2}' |
    grep -E '^(lib|zlib)' | grep -v -- '-dev$' | sort -u
}

# The packages to carry, one a line.
gpu_carried_packages() {
  local dev lacking
  dev="$(gpu_dev_packages "$1")" || return 1
  # shellcheck disable=SC2086
  lacking="$(comm -23 <(gpu_closure $dev "${GPU_EXTRA_PACKAGES[@]}") <(gpu_machine_packages))"
  # shellcheck disable=SC2046
  { echo "$lacking"; gpu_linked_libraries $(grep -- '-dev$' <<<"$lacking"); } | sort -u
}
