#!/usr/bin/env bash
# Run HERE (the Debian 12 development machine): fetches what the GPU machine lacks to
# build shardcast, as Debian packages, into .gpu/debs (ignored by git; carried to the
# device with `carry: [".gpu"]`). The GPU machine has CUDA, CMake, ninja, a C++
# compiler and PyTorch's LibTorch, but no package registry and no network.
#
#   tools/gpu/prepare.sh            # -> .gpu/debs/*.deb, .gpu/MANIFEST
#
# The set is the build and run-time closure of shardcast-server/-train/-ctl/-pack on
# Debian 12 minus what every Linux has (glibc, libstdc++, zlib): gRPC + protobuf (with
# protoc and the gRPC plugins, so proto/ generates its code there as it does here),
# abseil, libarchive (+ the compression and XML libraries it links), TurboJPEG and
# libjpeg-turbo's libjpeg API, libpng, libwebp,
# OpenSSL, c-ares, re2, and Gloo's headers. device.sh puts them in a prefix, never into
# /, and links the binaries with an RPATH to the libraries the machine lacks.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="$root/.gpu/debs"

packages=(
  # gRPC and protobuf: headers, CMake configs, libraries, protoc and its gRPC plugins.
  libgrpc++-dev libgrpc-dev libgrpc++1.51 libgrpc29 protobuf-compiler-grpc
  libprotobuf-dev libprotobuf32 libprotobuf-lite32 libprotoc32 protobuf-compiler libupb-dev
  libc-ares-dev libc-ares2 libre2-dev libre2-9 libssl-dev libssl3 zlib1g-dev
  libabsl-dev libabsl20220623
  # Shards and images.
  libarchive-dev libarchive13 libxml2 libicu72 libnettle8 libzstd1 liblz4-1 libacl1
  libbz2-1.0 liblzma5
  libturbojpeg0-dev libturbojpeg0 libjpeg62-turbo-dev libjpeg62-turbo libpng-dev libpng16-16
  libwebp-dev libwebp7 libwebpdemux2 libwebpmux3
  # Gloo's headers: c10d's ProcessGroupGloo.hpp includes them and the pip wheel ships
  # none (its Gloo is linked into libtorch_cpu). Headers only: nothing of it is linked.
  libgloo-dev
  # webdataset's brace expansion, for the feed benchmark's seed row (pure Python; the GPU
  # machine's pip has no registry to fetch it from).
  python3-braceexpand
)

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
echo "prepare: $(ls "$out" | wc -l) packages in $out; carry \".gpu\" to the device"
