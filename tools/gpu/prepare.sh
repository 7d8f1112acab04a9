#!/usr/bin/env bash
# Run HERE (the Debian 12 development machine): fetches what the GPU machine lacks to
# build shardcast, as Debian packages, into .gpu/debs (ignored by git; carried to the
# device with `carry: [".gpu"]`). The GPU machine has CUDA, CMake, ninja, a C++
# compiler and PyTorch's LibTorch, but no package registry and no network.
#
#   tools/gpu/prepare.sh            # -> .gpu/debs/*.deb, .gpu/MANIFEST
#
# The set follows the build (tools/gpu/packages.sh): every name CMakeLists.txt finds is
# mapped to its Debian -dev package or listed as one the GPU machine brings (a name in
# neither fails here), and what is carried is their dependency closure on Debian 12 minus
# what a GPU machine has (the base system, the compiler, pkg-config, Python): gRPC +
# protobuf (with protoc and the gRPC plugins, so proto/ generates its code there as it
# does here), abseil, libarchive, TurboJPEG and libjpeg, libpng, libwebp, OpenSSL's
# headers, libcurl and the libraries they link, plus Gloo's headers and braceexpand.
# device.sh puts them in a prefix, never into /, and links the binaries with an RPATH to
# the libraries the machine lacks. tools/gpu/rehearse-prefix.sh proves the set enough:
# it builds from the prefix alone, in a container holding only a base Debian system.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="$root/.gpu/debs"
# shellcheck source=tools/gpu/packages.sh
source "$root/tools/gpu/packages.sh"

mapfile -t packages < <(gpu_carried_packages "$root")
((${#packages[@]})) || exit 1

rm -rf "$out"
mkdir -p "$out"
(cd "$out" && apt-get download -q "${packages[@]}")
{
  echo "# Debian packages for the GPU build, fetched $(date -u +%FT%TZ) by tools/gpu/prepare.sh"
  for f in "$out"/*.deb; do basename "$f"; done
} >"$root/.gpu/MANIFEST"
du -sh "$out"
# The feed benchmark's real photos (bench/make_photo_corpus.py: 640 crops of Debian's
# wallpaper photographs, ~30 KB each; device.sh packs each 24 times). PHOTOS=0: none.
if [[ "${PHOTOS:-1}" != 0 ]]; then
  if [[ ! -d /usr/share/wallpapers/Autumn ]]; then
    apt-get install -y -q --no-install-recommends plasma-workspace-wallpapers >/dev/null
  fi
  rm -rf "$root/.gpu/photos"
  /usr/bin/python3 "$root/bench/make_photo_corpus.py" --out "$root/.gpu/photos" --count 640
  du -sh "$root/.gpu/photos"
fi
echo "prepare: ${#packages[@]} packages in $out; carry \".gpu\" to the device"
