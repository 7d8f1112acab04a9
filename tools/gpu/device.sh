#!/usr/bin/env bash
# Run THERE (the GPU machine; see README "Building with CUDA"), from the repository
# root, with .gpu/ carried (tools/gpu/prepare.sh made it here):
#
#   tools/gpu/device.sh probe       one minute: compiler, CUDA, LibTorch (version, ABI,
#                                   C++ standard its headers need, NCCL), what is missing
#   tools/gpu/device.sh all         unpack, build, then every check below; one command
#   tools/gpu/device.sh build       unpack .gpu/debs into a prefix and build
#   tools/gpu/device.sh checks      the checks, on an existing build
#   tools/gpu/device.sh feed        the feed benchmark (bench/feed_bench.py) on an
#                                   existing build: the model's ceiling, the seed's
#                                   webdataset pipeline, shardcast + Loader (the server
#                                   decoding; encoded + decode cpu; encoded + decode
#                                   cuda), shardcast-train
#
# Results go to $OUT (the device tool's folder; default /tmp/shardcast-gpu-out):
# summary.txt (the figures), log.txt, probe.txt, runs.tar.gz (each run's output).
#
# REHEARSE=1 runs the same steps on the development machine with Debian's CPU LibTorch
# standing in (--device cpu everywhere, the prefix still built from the .debs), so the
# GPU run holds no surprise but the GPU itself.
#
# Nothing is installed into /: the packages go to $PREFIX, and only the shared libraries
# this machine lacks go on LD_LIBRARY_PATH, for shardcast's own processes only.
set -uo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
OUT="${OUT:-/tmp/shardcast-gpu-out}"
PREFIX="${PREFIX:-/tmp/shardcast-prefix}"
BUILD="${BUILD:-/tmp/shardcast-gpu-build}"
WORK="${WORK:-/tmp/shardcast-gpu-work}"
REHEARSE="${REHEARSE:-0}"
PYTHON="${PYTHON:-python3}"
JOBS="${JOBS:-$(nproc)}"
# The device tool brings back at most 8 files from $OUT: summary.txt, log.txt,
# probe.txt, and runs.tar.gz (every run's output and metrics, from $RUNS).
RUNS="$WORK/runs"
mkdir -p "$OUT" "$WORK" "$RUNS"
summary="$OUT/summary.txt"

log() { echo "[gpu $(date +%T)] $*" | tee -a "$summary"; }
section() { echo; echo "=== $* ==="; }

if [[ "$REHEARSE" == 1 ]]; then
  DEVICE=cpu
  PYTHON=/usr/bin/python3
  # A 2-core machine: the ResNet-18 runs stop after a few steps.
  RESNET_LIMIT=(--max-steps 6)
else
  DEVICE=cuda
  RESNET_LIMIT=()
fi

# ---- probe ---------------------------------------------------------------------------

torch_info() {
  "$PYTHON" - <<'PY'
import torch, torch.utils
print("torch", torch.__version__, "cuda", torch.version.cuda,
      "cuda available", torch.cuda.is_available(),
      "devices", torch.cuda.device_count())
print("cxx11 abi", torch._C._GLIBCXX_USE_CXX11_ABI)
print("cmake_prefix_path", torch.utils.cmake_prefix_path)
try:
    print("nccl", torch.cuda.nccl.version())
except Exception as e:
    print("nccl: none", e)
print("distributed gloo", torch.distributed.is_gloo_available(),
      "nccl", torch.distributed.is_nccl_available())
PY
}

# The folder holding Python.h for $PYTHON, if it exists (the extension needs it).
python_headers() {
  local d
  d="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null)"
  [[ -f "$d/Python.h" ]] && echo "$d"
}

torch_cmake_dir() { "$PYTHON" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)'; }
torch_root() { "$PYTHON" -c 'import os, torch; print(os.path.dirname(torch.__file__))'; }

# nccl.h: the wheel keeps it in its own pip package (nvidia/nccl/include).
nccl_include_dir() {
  local site h
  site="$("$PYTHON" -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)"
  for d in $site; do
    h="$(find "$d/nvidia" -name nccl.h -path '*include*' 2>/dev/null | head -1)"
    if [[ -n "$h" ]]; then dirname "$h"; return; fi
  done
  h="$(find /usr/include /usr/local/cuda/include -maxdepth 1 -name nccl.h 2>/dev/null | head -1)"
  [[ -n "$h" ]] && dirname "$h"
}

# Compiles and runs one LibTorch TU (torch.h, c10d's Gloo and NCCL headers) with the
# given C++ standard: the compile flags the real build needs, found in seconds.
probe_torch_tu() {
  local std="$1" dir="$WORK/probe-$1"
  rm -rf "$dir"; mkdir -p "$dir"
  cat >"$dir/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.18)
project(probe CXX)
set(CMAKE_CXX_STANDARD $std)
find_package(Torch REQUIRED)
message(STATUS "TORCH_CXX_FLAGS=\${TORCH_CXX_FLAGS}")
if(TARGET torch_cuda)
  get_target_property(defs torch_cuda INTERFACE_COMPILE_DEFINITIONS)
  message(STATUS "torch_cuda definitions: \${defs}")
endif()
add_executable(probe probe.cc)
target_link_libraries(probe \${TORCH_LIBRARIES})
if(NCCL_DIR)
  target_include_directories(probe SYSTEM PRIVATE \${NCCL_DIR})
  target_compile_definitions(probe PRIVATE USE_C10D_NCCL)
endif()
EOF
  cat >"$dir/probe.cc" <<'EOF'
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#include <cstdio>
int main() {
  std::printf("probe: __cplusplus %ld, cuda available %d, devices %d\n", __cplusplus,
              int(torch::cuda::is_available()), int(torch::cuda::device_count()));
  if (torch::cuda::is_available()) {
    auto x = torch::ones({1024}, torch::Device(torch::kCUDA));
    std::printf("probe: sum on the GPU %.0f\n", x.sum().item<float>());
  }
  return 0;
}
EOF
  cmake -S "$dir" -B "$dir/build" -G Ninja -DCMAKE_PREFIX_PATH="$(torch_cmake_dir)" \
    -DCMAKE_EXE_LINKER_FLAGS=-Wl,--no-as-needed \
    -DNCCL_DIR="$([[ "$REHEARSE" == 1 ]] || nccl_include_dir)" &&
    cmake --build "$dir/build" && "$dir/build/probe"
}

probe() {
  section "machine"
  uname -a; nproc; free -g | head -2
  nvidia-smi -L 2>&1; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
  cat /etc/os-release 2>/dev/null | head -3
  section "tools"
  for t in g++ c++ nvcc cmake ninja dpkg-deb ar pkg-config "$PYTHON"; do
    printf '%-10s %s\n' "$t" "$(command -v "$t" || echo MISSING)"
  done
  g++ --version | head -1; nvcc --version | tail -2; cmake --version | head -1
  ldd --version | head -1
  section "torch"
  torch_info
  local troot; troot="$(torch_root)"
  echo "gloo headers: $(ls -d "$troot"/include/gloo 2>/dev/null || echo MISSING)"
  echo "nccl.h: $(nccl_include_dir || true)"
  grep -rl USE_C10D_NCCL "$troot/share/cmake" 2>/dev/null | head -3
  # Does libtorch export protobuf symbols that Debian's libprotobuf would collide with?
  echo "protobuf symbols exported by libtorch_cpu: $(nm -D --defined-only "$troot/lib/libtorch_cpu.so" 2>/dev/null | grep -c '_ZN6google8protobuf')"
  section "python packages"
  "$PYTHON" -c 'import grpc, google.protobuf as p; print("grpcio", grpc.__version__, "protobuf", p.__version__)' 2>&1
  "$PYTHON" -c 'import lightning; print("lightning", lightning.__version__)' 2>&1 | tail -1
  echo "Python.h for the extension: $(python_headers || echo MISSING)"
  echo "pybind11 cmake dir: $("$PYTHON" -m pybind11 --cmakedir 2>/dev/null || echo MISSING)"
  section "Debian libraries this machine lacks (sonames from .gpu/debs)"
  unpack_debs >/dev/null && missing_libs
  section "LibTorch TU, C++17"
  probe_torch_tu 17 2>&1 | tail -15 || true
  section "LibTorch TU, C++20"
  probe_torch_tu 20 2>&1 | tail -5 || true
}

# ---- build ---------------------------------------------------------------------------

extract_deb() {  # dpkg-deb where there is one, else ar + tar
  if command -v dpkg-deb >/dev/null; then dpkg-deb -x "$1" "$PREFIX"; return; fi
  local t; t="$(mktemp -d)"
  (cd "$t" && ar x "$1" && tar -xf data.tar.* -C "$PREFIX")
  rm -rf "$t"
}

unpack_debs() {
  [[ -f "$PREFIX/.unpacked" ]] && return 0
  ls .gpu/debs/*.deb >/dev/null 2>&1 || { echo "no .gpu/debs: run tools/gpu/prepare.sh here and carry .gpu" >&2; return 1; }
  rm -rf "$PREFIX"; mkdir -p "$PREFIX"
  for f in .gpu/debs/*.deb; do extract_deb "$(realpath "$f")" || return 1; done
  # Absolute symlinks (/usr/lib/...) would point into the machine's /: re-aim them.
  find "$PREFIX" -type l | while read -r link; do
    target="$(readlink "$link")"
    if [[ "$target" == /* && -e "$PREFIX$target" ]]; then ln -sfn "$PREFIX$target" "$link"; fi
  done
  # pkg-config files name prefix=/usr.
  sed -i "s|^prefix=/usr|prefix=$PREFIX/usr|; s|=/usr/|=$PREFIX/usr/|" \
    "$PREFIX"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc 2>/dev/null
  touch "$PREFIX/.unpacked"
}

# The prefix's shared libraries whose soname the machine's loader does not know, linked
# into $PREFIX/missing-libs: what goes on LD_LIBRARY_PATH. The machine's own copies of
# the rest (libssl, libzstd, ...) stay in use. REHEARSE: everything from the prefix, so
# the rehearsal shows the prefix alone is enough.
missing_libs() {
  local dir="$PREFIX/missing-libs" soname
  rm -rf "$dir"; mkdir -p "$dir"
  for lib in "$PREFIX"/usr/lib/x86_64-linux-gnu/*.so.* "$PREFIX"/lib/x86_64-linux-gnu/*.so.*; do
    [[ -e "$lib" ]] || continue
    soname="$(basename "$lib")"
    # Only the soname itself (libfoo.so.1), not the versioned file it points to.
    [[ -L "$lib" || "$soname" =~ \.so\.[0-9]+$ ]] || continue
    if [[ "$REHEARSE" == 1 ]] || ! ldconfig -p | grep -q " $soname "; then
      ln -sfn "$lib" "$dir/$soname"
    fi
  done
  echo "missing on this machine, served from the prefix: $(ls "$dir" | tr '\n' ' ')"
}

build_env() {
  export LD_LIBRARY_PATH="$PREFIX/missing-libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PATH="$PREFIX/usr/bin:$PATH"
  export PKG_CONFIG_PATH="$PREFIX/usr/lib/x86_64-linux-gnu/pkgconfig:$PREFIX/usr/share/pkgconfig"
}

build() {
  unpack_debs || return 1
  missing_libs
  build_env
  local torch_cmake std nccl
  if [[ "$REHEARSE" == 1 ]]; then
    torch_cmake=""
  else
    torch_cmake="$(torch_cmake_dir)"
  fi
  nccl="$(nccl_include_dir || true)"
  # The standard LibTorch's headers need: 17 unless the probe's C++17 TU fails.
  std="${CXX_STANDARD:-17}"
  log "build: LibTorch ${torch_cmake:-Debian system}, C++$std, nccl.h in ${nccl:-(none)}"
  # Debian keeps some headers in the multiarch folder (OpenSSL's opensslconf.h, curl's,
  # jconfig.h), which the compiler searches under /usr only: name the prefix's, or a
  # machine with its own libssl-dev mixes its headers with the prefix's (and one without
  # fails; tools/gpu/rehearse-prefix.sh found it).
  local multiarch="-isystem $PREFIX/usr/include/x86_64-linux-gnu"
  cmake -S "$root" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_STANDARD="$std" \
    -DCMAKE_CXX_FLAGS="$multiarch" -DCMAKE_C_FLAGS="$multiarch" \
    -DCMAKE_PREFIX_PATH="$PREFIX/usr;$torch_cmake" \
    -DCMAKE_FIND_ROOT_PATH="$PREFIX" \
    -DProtobuf_PROTOC_EXECUTABLE="$PREFIX/usr/bin/protoc" \
    -DOPENSSL_ROOT_DIR="$PREFIX/usr" \
    -DSHARDCAST_NCCL_INCLUDE_DIR="$nccl" \
    -DSHARDCAST_BUILD_TESTS=OFF -DSHARDCAST_BUILD_BENCH=OFF \
    -DSHARDCAST_BUILD_PYTHON="$([[ -n "$(python_headers)" ]] && echo ON || echo OFF)" \
    -DPython_EXECUTABLE="$(command -v "$PYTHON")" \
    -Dpybind11_DIR="$("$PYTHON" -m pybind11 --cmakedir 2>/dev/null)" \
    -DCMAKE_EXE_LINKER_FLAGS="-Wl,--no-as-needed -Wl,--disable-new-dtags" \
    -DCMAKE_MODULE_LINKER_FLAGS="-Wl,--disable-new-dtags" \
    -DCMAKE_SHARED_LINKER_FLAGS="-Wl,--disable-new-dtags" \
    -DCMAKE_BUILD_RPATH="$PREFIX/missing-libs" || return 1
  local start=$SECONDS
  cmake --build "$BUILD" -j "$JOBS" \
    --target shardcast-server shardcast-train shardcast-ctl shardcast-pack || return 1
  log "build: $((SECONDS - start)) s with $JOBS jobs"
  # The Python Loader's native client, for this machine's Python (pip's pybind11).
  if [[ -n "$(python_headers)" ]]; then
    cmake --build "$BUILD" -j "$JOBS" --target shardcast_native || return 1
    log "build: shardcast._native for $("$PYTHON" --version 2>&1): $(ls "$BUILD"/python/shardcast/_native*.so)"
  else
    log "build: no Python.h for $PYTHON: shardcast._native not built, the Loader's checks are skipped"
  fi
  # The binaries (and the extension, which Python loads) must start without device.sh's
  # environment. The prefix's libraries are found through an RPATH (--disable-new-dtags:
  # DT_RPATH, which the loader also applies to the libraries' own dependencies, such as
  # libgrpc's libupb and abseil; a RUNPATH serves the object's direct ones only).
  local bin missing
  for bin in server/shardcast-server client/shardcast-train client/shardcast-ctl \
    "$(cd "$BUILD" && ls python/shardcast/_native*.so 2>/dev/null)"; do
    [[ -n "$bin" ]] || continue
    missing="$(env -u LD_LIBRARY_PATH ldd "$BUILD/$bin" | grep 'not found')"
    if [[ -n "$missing" ]] || { [[ "$bin" != *.so ]] &&
      ! env -u LD_LIBRARY_PATH "$BUILD/$bin" --help >/dev/null 2>&1; }; then
      log "build: $bin does not start without LD_LIBRARY_PATH: ${missing:-(see --help)}"
      return 1
    fi
  done
  log "build: every binary and the extension start without LD_LIBRARY_PATH"
  # Where each binary's gRPC, protobuf and torch come from.
  ldd "$BUILD/client/shardcast-train" | grep -E 'grpc\.|protobuf|torch_cuda|libarchive|nccl' | tee -a "$OUT/log.txt"
}

# ---- checks --------------------------------------------------------------------------

server_pid=""
start_server() {
  "$BUILD/server/shardcast-server" --shards "$WORK/data" --listen 127.0.0.1:0 \
    --decode-threads "$JOBS" >"$WORK/server.out" 2>"$RUNS/server.log" &
  server_pid=$!
  for _ in $(seq 100); do
    port="$(sed -n 's/.*listening on .*:\([0-9]*\)$/\1/p' "$WORK/server.out")"
    [[ -n "$port" ]] && "$BUILD/client/shardcast-ctl" health --server "127.0.0.1:$port" >/dev/null 2>&1 && break
    sleep 0.2
  done
  SERVER="127.0.0.1:$port"
  log "server up at $SERVER (pid $server_pid)"
}
stop_server() { [[ -n "$server_pid" ]] && kill -TERM "$server_pid" && wait "$server_pid"; }

# Per-epoch and overall figures from a metrics file: batches per epoch, mean loss per
# epoch, images/s, share of step time spent waiting for input.
metrics_summary() {
  "$PYTHON" - "$1" <<'PY'
import json, sys
steps, epochs, start = [], [], None
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e.get("event") == "step": steps.append(e)
    if e.get("event") == "epoch": epochs.append(e)
    if e.get("event") == "start": start = e
for ep in epochs:
    print("  epoch", {k: v for k, v in ep.items() if k not in ("event", "time", "rank")})
if steps:
    s = steps[len(steps) // 5:]  # past warm-up
    step_s = sum(x["step_s"] for x in s); wait_s = sum(x["wait_s"] for x in s)
    ips = sum(x["images_per_s"] for x in s) / len(s)
    print(f"  steps {len(steps)}, mean images/s {ips:.0f}, waiting for input {100 * wait_s / max(step_s, 1e-9):.1f}% of step time")
if start: print("  start", {k: start[k] for k in start if k in ("backend", "device", "world_size")})
PY
}

compare_weights() {
  "$PYTHON" - "$1" "$2" <<'PY'
import sys, torch
# --save files load under torch.load's safe mode (the default since torch 2.6).
a, b = (torch.load(p, map_location="cpu", weights_only=True) for p in sys.argv[1:3])
worst, worst_rel = 0.0, 0.0
for k in a:
    if not a[k].is_floating_point(): continue
    d = (a[k] - b[k]).abs().max().item()
    worst = max(worst, d)
    worst_rel = max(worst_rel, d / max(b[k].abs().max().item(), 1e-12))
print(f"  weights GPU vs CPU: {len(a)} tensors, max abs diff {worst:.3g}, max rel diff {worst_rel:.3g}")
sys.exit(0 if worst_rel < 1e-3 else 1)
PY
}

train() {  # train NAME [flags...]: one shardcast-train run, its metrics summarized
  local name="$1"; shift
  local start=$SECONDS
  "$BUILD/client/shardcast-train" --server "$SERVER" --no-progress \
    --metrics "$RUNS/$name.rank{rank}.jsonl" "$@" >"$RUNS/$name.out" 2>&1
  local rc=$?
  log "$name: exit $rc in $((SECONDS - start)) s ($*)"
  tail -3 "$RUNS/$name.out" | sed 's/^/  | /' | tee -a "$summary"
  [[ -f "$RUNS/$name.rank0.jsonl" ]] && metrics_summary "$RUNS/$name.rank0.jsonl" | tee -a "$summary"
  return $rc
}

checks() {
  build_env
  rm -rf "$WORK/data"
  "$BUILD/tools/shardcast-pack" --synthetic 4096 --classes 10 --per-shard 512 \
    "$WORK/data" >/dev/null || { log "pack failed"; return 1; }
  start_server
  local failed=0 other=cpu
  # 1. ResNet-18 on the device, world size 1, 2 epochs: exact n, loss falling, images/s,
  #    input wait. The same on the CPU for the side-by-side figures (a bounded number of
  #    steps: the CPU is far slower).
  train resnet18-$DEVICE --device $DEVICE --epochs 2 -b 64 --lr 0.001 --split sample \
    "${RESNET_LIMIT[@]}" || failed=1
  train resnet18-cpu --device cpu --epochs 1 --max-steps "${RESNET_LIMIT[1]:-20}" -b 64 \
    --lr 0.001 --split sample || failed=1
  # 2. Same small run on the device and on the CPU: final weights agree within float
  #    tolerance (small-cnn: no BatchNorm, SGD, few steps).
  local same=(--arch small-cnn --optimizer sgd --lr 0.01 --epochs 1 --max-steps 20 -b 32
              --split sample --seed 7)
  train weights-$DEVICE --device $DEVICE "${same[@]}" --save "$RUNS/weights-$DEVICE.pt" || failed=1
  train weights-$other --device $other "${same[@]}" --save "$RUNS/weights-$other.pt" || failed=1
  compare_weights "$RUNS/weights-$DEVICE.pt" "$RUNS/weights-$other.pt" | tee -a "$summary" || failed=1
  # 3. The NCCL process group itself (world size 1: NCCL refuses two ranks on one GPU,
  #    tried below), and 2 CPU ranks over Gloo for comparison.
  SHARDCAST_FORCE_PROCESS_GROUP=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29561 \
    train forced-group-$DEVICE --device $DEVICE "${same[@]}" --save "$RUNS/forced-$DEVICE.pt" || failed=1
  grep -ho '"backend":"[a-z]*"' "$RUNS/forced-group-$DEVICE.rank0.jsonl" | head -1 | tee -a "$summary"
  compare_weights "$RUNS/forced-$DEVICE.pt" "$RUNS/weights-$other.pt" | tee -a "$summary" || failed=1
  if [[ "$DEVICE" == cuda ]]; then
    train two-ranks-one-gpu --nproc-per-node 2 --device cuda:0 "${same[@]}" ||
      log "two NCCL ranks on one GPU: refused (expected; see two-ranks-one-gpu.out)"
  fi
  train gloo-2-ranks --nproc-per-node 2 --device cpu "${same[@]}" || failed=1
  # 4. The Python client under Lightning DDP on the device (the seed's own stack).
  if [[ -z "$(ls "$BUILD"/python/shardcast/_native*.so 2>/dev/null)" ]]; then
    log "lightning: shardcast._native not built, skipped"
  elif "$PYTHON" -c 'import lightning' 2>/dev/null; then
    "$PYTHON" python/generate_stubs.py "$WORK/python" >/dev/null &&
      PYTHONPATH="$root/python:$WORK/python:$BUILD/python" "$PYTHON" examples/train_lightning.py \
        --server "$SERVER" --n_epochs 2 -b 64 -lr 0.001 --accelerator "$( [[ $DEVICE == cuda ]] && echo gpu || echo cpu)" \
        >"$RUNS/lightning.out" 2>&1
    log "lightning: exit $?"; grep -E '^epoch|batches' "$RUNS/lightning.out" | tail -4 | tee -a "$summary"
  else
    log "lightning: not installed here, skipped"
  fi
  # 5. Encoded delivery decoded on the device (Loader(decode="cuda"): torchvision's
  #    decode_jpeg, nvJPEG) against server delivery's bytes: the tolerance measured,
  #    printed; and decode="cpu" byte for byte (tests/python/test_gpu_decode.py,
  #    test_loader_decode.py; their CUDA cases run only here).
  if [[ -z "$(ls "$BUILD"/python/shardcast/_native*.so 2>/dev/null)" ]]; then
    log "gpu decode: shardcast._native not built, skipped"
  elif ! "$PYTHON" -c 'import pytest, torchvision, PIL' 2>/dev/null; then
    log "gpu decode: pytest, torchvision or PIL missing here, skipped"
  else
    SHARDCAST_BUILD_DIR="$BUILD" "$PYTHON" -m pytest -s -q tests/python/test_gpu_decode.py \
      tests/python/test_loader_decode.py >"$RUNS/gpu-decode.out" 2>&1 || failed=1
    log "gpu decode: $(tail -1 "$RUNS/gpu-decode.out")"
    grep -E 'against server delivery' "$RUNS/gpu-decode.out" | tee -a "$summary"
  fi
  stop_server
  log "checks: $([[ $failed == 0 ]] && echo PASSED || echo FAILED)"
  tar -czf "$OUT/runs.tar.gz" -C "$WORK" runs
  return $failed
}

# The feed benchmark (bench/feed_bench.py): the same model fed six ways, side by side,
# from the real photos prepare.sh made (.gpu/photos). webdataset is the copy in
# bench/third_party; its braceexpand comes from the prefix (python3-braceexpand).
feed() {
  build_env
  local photos=(--photos "$root/.gpu/photos" --copies 24) timing=() rows=()
  if [[ -z "$(ls "$BUILD"/python/shardcast/_native*.so 2>/dev/null)" ]]; then
    rows=(--rows ceiling,seed,train)
    log "feed: shardcast._native not built: no Loader row"
  fi
  [[ -d "$root/.gpu/photos" ]] || photos=()
  if [[ "$REHEARSE" == 1 ]]; then
    # Two cores and no GPU: small images and a few steps, to prove the step works.
    photos=(--synthetic 512); timing=(--crop 64 --resize 72 --batch 16 --warmup 2 --seconds 3
                                     --workers 2 --decode-threads 2)
  fi
  PYTHONPATH="$PREFIX/usr/lib/python3/dist-packages${PYTHONPATH:+:$PYTHONPATH}" \
    "$PYTHON" bench/feed_bench.py --build-dir "$BUILD" --device "$DEVICE" "${photos[@]}" \
    "${timing[@]}" "${rows[@]}" --json "$RUNS/feed.json" >"$RUNS/feed.out" 2>&1
  local rc=$?
  log "feed benchmark: exit $rc"
  if [[ $rc == 0 ]]; then grep -E '^feed_bench|^\|' "$RUNS/feed.out" | tee -a "$summary"
  else tail -15 "$RUNS/feed.out" | sed 's/^/  | /' | tee -a "$summary"; fi
  tar -czf "$OUT/runs.tar.gz" -C "$WORK" runs
  return $rc
}

# One step of `all`: its output also goes to $WORK/step-NAME.log; a failure is written to
# summary.txt with the step's name, exit status, time and last lines, and ends the run.
step() {
  local name="$1" start=$SECONDS rc
  shift
  "$@" 2>&1 | tee "$WORK/step-$name.log"
  rc=${PIPESTATUS[0]}
  if [[ $rc != 0 ]]; then
    log "step $name: FAILED (exit $rc after $((SECONDS - start)) s); its last lines:"
    tail -15 "$WORK/step-$name.log" | sed 's/^/  | /' | tee -a "$summary"
  fi
  return "$rc"
}

case "${1:-}" in
  probe) probe 2>&1 | tee "$OUT/probe.txt" ;;
  build) build 2>&1 | tee -a "$OUT/log.txt" ;;
  checks) checks 2>&1 | tee -a "$OUT/log.txt" ;;
  feed) feed 2>&1 | tee -a "$OUT/log.txt" ;;
  all) { step build build && step checks checks && step feed feed; } 2>&1 | tee -a "$OUT/log.txt" ;;
  *) sed -n '2,20p' "$0"; exit 2 ;;
esac
exit "${PIPESTATUS[0]}"
