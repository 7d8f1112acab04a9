#!/usr/bin/env bash
# Run HERE, after tools/gpu/prepare.sh: proves that .gpu/debs is all the build needs
# beyond what a GPU machine brings, before a device is lent. This machine has every -dev
# package installed, so `REHEARSE=1 tools/gpu/device.sh all` cannot notice a package
# missing from the list; this runs `device.sh build` in a container (podman, no network)
# that holds only a base Debian 12 system, the toolchain a GPU machine has and a
# LibTorch (tools/gpu/rehearsal.Containerfile), with the tree as the device tool carries
# it (git's tracked and unignored files, plus .gpu/debs). Then every library the
# binaries load must come from the prefix or from that base and toolchain: a library the
# container got only as a dependency of its CMake or its LibTorch would hide a package
# missing from the list.
#
#   tools/gpu/prepare.sh && tools/gpu/rehearse-prefix.sh
#
# Not in CI: the first run makes the base image (debootstrap, a few minutes) and the
# toolchain image, and compiles everything; the images and a ccache folder are kept in
# $CACHE (default /var/cache/shardcast-gpu-rehearsal), so a rerun takes about as long as
# unpacking and configuring. Its log: $CACHE/out/rehearse.log (device.sh's own files
# beside it).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
CACHE="${CACHE:-/var/cache/shardcast-gpu-rehearsal}"
base_image=docker.io/library/debian:bookworm
image=localhost/shardcast-gpu-rehearsal
podman=(podman --runtime runc --cgroup-manager cgroupfs)
# device.sh's folders inside the container.
prefix=/tmp/shardcast-prefix
build=/tmp/shardcast-gpu-build

# ---- inside the container --------------------------------------------------------------

# The packages that own the shared libraries $1 loads outside $PREFIX, one a line, as
# "package path".
library_owners() {
  local path owner
  env -u LD_LIBRARY_PATH ldd "$1" | grep -oP '=> \K/\S+' | while read -r path; do
    [[ "$(realpath "$path")" == "$prefix"/* ]] && continue
    owner="$(dpkg -S "$path" 2>/dev/null || dpkg -S "$(realpath "$path")" 2>/dev/null)" ||
      owner="(no package)"
    echo "${owner%%:*} $path"
  done
}

inside() {
  cd /src
  # shellcheck source=tools/gpu/packages.sh
  source tools/gpu/packages.sh
  local carried
  carried="$(find .gpu/debs -name '*.deb' -printf '%f\n' | sed 's/_.*//' | sort -u)"
  # Debian's libtorch-dev depends on libprotobuf-dev (and glog's and gflags' -dev): its
  # -dev packages that the list carries go, so that only the prefix has them. Libraries
  # stay (the container's CMake and LibTorch run on them); the check below sees any
  # binary that loads one.
  local hidden
  hidden="$(comm -12 <(dpkg-query -W -f '${Package}\n' | sort -u) <(echo "$carried") |
    grep -- '-dev$' || true)"
  if [[ -n "$hidden" ]]; then
    echo "rehearse: removing the container's own ${hidden//$'\n'/ }"
    # shellcheck disable=SC2086
    dpkg --purge --force-depends $hidden >/dev/null
  fi
  local start=$SECONDS
  CCACHE_DIR=/ccache REHEARSE=1 PREFIX="$prefix" BUILD="$build" OUT=/out tools/gpu/device.sh build ||
    { echo "rehearse: the build from the prefix FAILED"; return 1; }
  echo "rehearse: device.sh build took $((SECONDS - start)) s"

  local machine torch failed=0 bin link target
  # A -dev package's libfoo.so must reach its library inside the prefix: dangling, the
  # build quietly takes the static archive or this machine's copy.
  while read -r link; do
    target="$(realpath -m "$link")"
    if [[ "$target" != "$prefix"/* || ! -e "$target" ]]; then
      echo "rehearse: ${link#"$prefix"} leads outside the prefix ($(readlink "$link")):" \
        "carry the package of its library (tools/gpu/packages.sh)"
      failed=1
    fi
  done < <(find "$prefix" -type l -name 'lib*.so')
  machine="$(gpu_machine_packages)"
  torch="$(gpu_closure libtorch-dev)"
  for bin in "$build"/server/shardcast-server "$build"/client/shardcast-ctl \
    "$build"/tools/shardcast-pack "$build"/python/shardcast/_native*.so \
    "$build"/client/shardcast-train; do
    local allowed="$machine"
    # Only the trainer may load LibTorch and what it links.
    [[ "$bin" == */shardcast-train ]] && allowed="$machine"$'\n'"$torch"
    while read -r owner path; do
      if ! grep -qxF "$owner" <<<"$allowed"; then
        echo "rehearse: ${bin#"$build"/} loads $path ($owner), which neither the prefix" \
          "nor a GPU machine has: carry its package (tools/gpu/packages.sh)"
        failed=1
      fi
    done < <(library_owners "$bin")
  done
  [[ $failed == 0 ]] &&
    echo "rehearse: every library the binaries load comes from the prefix or the base system"
  return $failed
}

if [[ "${1:-}" == --inside ]]; then
  inside
  exit
fi

# ---- here ------------------------------------------------------------------------------

log="$CACHE/out/rehearse.log"
mkdir -p "$CACHE/ccache" "$CACHE/out" "$CACHE/apt-archives/partial"
: >"$log"
say() { echo "[rehearse $(date +%T)] $*" | tee -a "$log"; }
ls "$root"/.gpu/debs/*.deb >/dev/null 2>&1 || { echo "no .gpu/debs: run tools/gpu/prepare.sh" >&2; exit 1; }
start=$SECONDS

# The base image: a minimal Debian 12 from the archive apt uses (shared/containers.md).
if ! "${podman[@]}" image exists "$base_image"; then
  rootfs="$CACHE/rootfs-bookworm"
  if [[ ! -f "$rootfs/etc/debian_version" ]]; then
    mirror="$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources)"
    say "debootstrap of a minimal Debian 12 into $rootfs"
    debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >>"$log" 2>&1
  fi
  tar -C "$rootfs" -c . | "${podman[@]}" import - "$base_image" >>"$log"
fi

# The toolchain image (podman's layer cache: instant once made). apt's downloads are
# kept in $CACHE, never in this machine's own apt cache.
say "toolchain image"
"${podman[@]}" build --network host --pull=never -v "$CACHE/apt-archives:/var/cache/apt/archives" \
  -f "$root/tools/gpu/rehearsal.Containerfile" -t "$image" "$root/tools/gpu" >>"$log" 2>&1 ||
  { say "FAILED: the toolchain image (see $log)"; exit 1; }
say "toolchain image ready after $((SECONDS - start)) s"

# The tree as the device tool carries it: tracked and unignored files, and .gpu/debs.
tree="$CACHE/tree.tar"
(cd "$root" && git ls-files -z --cached --others --exclude-standard |
  while IFS= read -r -d '' f; do [[ -e "$f" ]] && printf '%s\0' "$f"; done |
  tar --null -T - -cf "$tree" && tar -rf "$tree" .gpu/debs)

say "device.sh build in the container (no network; log: $log)"
build_start=$SECONDS
set +e
"${podman[@]}" run --rm --network none -v "$tree:/carry.tar:ro" -v "$CACHE/ccache:/ccache" \
  -v "$CACHE/out:/out" "$image" \
  bash -c 'mkdir /src && tar -xf /carry.tar -C /src && /src/tools/gpu/rehearse-prefix.sh --inside' \
  2>&1 | tee -a "$log" | grep -E '^rehearse:|^\[gpu|FAILED|Error|error:'
rc=${PIPESTATUS[0]}
set -e
say "container: $((SECONDS - build_start)) s; in all $((SECONDS - start)) s"
if [[ $rc == 0 ]]; then say "PASSED: the carried packages build and run every target device.sh needs"
else say "FAILED (exit $rc): see $log"; fi
exit "$rc"
