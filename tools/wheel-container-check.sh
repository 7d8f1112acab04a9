#!/usr/bin/env bash
# The wheel on a machine that has only Python and torch: builds the wheel on this host
# from a build tree (SHARDCAST_BUILD_DIR, default build/: shardcast-server, shardcast-ctl,
# shardcast-pack and shardcast_native built there), makes a bare Debian 12 image with
# only python3, python3-venv, python3-torch, python3-numpy, python3-grpcio and
# python3-protobuf (no -dev package, no compiler, no gRPC C++ library), and in a
# container without network: installs the wheel into a venv (--no-index), packs a small
# synthetic dataset with the wheel's shardcast-pack, starts the wheel's
# shardcast-server, trains two optimizer steps of a small CNN through shardcast.Loader,
# and stops the server with SIGTERM (exit 0). Prints the time of each step, and from
# `pip install` to the first batch. Not part of CI: the image's apt step downloads torch
# and its libraries (minutes; podman caches the layer for the next run).
# Recipe: tools/container-check.sh prepare (podman + runc + a debootstrap bookworm
# base, the shared containers.md).
#
#   tools/wheel-container-check.sh                   # build the wheel, then the check
#   WHEEL=dist/shardcast-...whl tools/wheel-container-check.sh   # a wheel built before
#
# Every step prints "== [HH:MM:SS] step". WORK (default /var/tmp/shardcast-wheel-check)
# holds the wheel and the logs.
set -euo pipefail
cd "$(dirname "$0")/.."

WORK=${WORK:-/var/tmp/shardcast-wheel-check}
BUILD=$(realpath "${SHARDCAST_BUILD_DIR:-build}")
IMAGE=shardcast-wheel-runtime
P=(podman --runtime runc --cgroup-manager cgroupfs)
step() { echo "== [$(date -u +%H:%M:%S)] $*"; }
fail() { echo "FAILED: $*" >&2; exit 1; }

mkdir -p "$WORK"
step "podman and the debootstrap base image (tools/container-check.sh prepare)"
tools/container-check.sh prepare > "$WORK/prepare.log" 2>&1 || { tail -20 "$WORK/prepare.log"; fail prepare; }

if [[ -n ${WHEEL:-} ]]; then
  step "the wheel given: $WHEEL"
  cp "$WHEEL" "$WORK/given.whl.tmp"
  rm -rf "$WORK/wheel"
  mkdir -p "$WORK/wheel"
  mv "$WORK/given.whl.tmp" "$WORK/wheel/$(basename "$WHEEL")"
else
  rm -rf "$WORK/wheel"
  mkdir -p "$WORK/wheel"
  step "pip wheel ./python from the build tree $BUILD (SHARDCAST_BUILD_DIR: no compiling)"
  start=$SECONDS
  rm -rf "$WORK/src" "$WORK/venv-build"
  mkdir -p "$WORK/src"
  cp -r python proto "$WORK/src/"
  rm -rf "$WORK/src/python/build" "$WORK/src/python/"*.egg-info
  /usr/bin/python3 -m venv --system-site-packages "$WORK/venv-build"
  SHARDCAST_BUILD_DIR=$BUILD PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    "$WORK/venv-build/bin/pip" wheel -q --no-build-isolation --no-deps -w "$WORK/wheel" \
    "$WORK/src/python" > "$WORK/wheel.log" 2>&1 || { tail -30 "$WORK/wheel.log"; fail "pip wheel"; }
  echo "built in $((SECONDS - start)) s"
fi
ls -l "$WORK/wheel"

step "image $IMAGE: Debian 12 + python3, python3-venv, python3-torch, python3-numpy, python3-grpcio, python3-protobuf"
start=$SECONDS
"${P[@]}" build --network host --pull=never -t "$IMAGE" -f - "$WORK" > "$WORK/image.log" 2>&1 <<'EOF' || { tail -30 "$WORK/image.log"; fail "image build"; }
FROM docker.io/library/debian:bookworm
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      python3 python3-venv python3-torch python3-numpy python3-grpcio python3-protobuf \
 && rm -rf /var/lib/apt/lists/*
EOF
echo "image ready in $((SECONDS - start)) s (podman's layer cache: seconds after the first run)"

step "in a container without network: install, pack, serve, train two steps"
"${P[@]}" run --rm --network none -v "$WORK/wheel:/wheel:ro" "$IMAGE" bash -euo pipefail -c '
export LD_LIBRARY_PATH=
now() { date +%s.%N; }
since() { python3 -c "import sys; print(f\"{float(sys.argv[2]) - float(sys.argv[1]):.1f} s\")" "$1" "$(now)"; }
echo "host: $(. /etc/os-release; echo $PRETTY_NAME), $(ldd --version | head -1)"
echo "-dev packages installed: $(dpkg-query -W -f="\${Package}\n" | grep -c -- "-dev$" || true)" \
     "($(dpkg-query -W -f="\${Package}\n" | grep -- "-dev$" | tr "\n" " "))"
for tool in gcc g++ cc cmake protoc; do command -v $tool >/dev/null && echo "unexpected: $tool" || true; done
t0=$(now)
python3 -m venv --system-site-packages /opt/venv
/opt/venv/bin/pip install -q --no-index --disable-pip-version-check /wheel/*.whl
echo "venv + pip install of the wheel: $(since $t0)"
export PATH=/opt/venv/bin:$PATH
echo "on PATH: $(command -v shardcast-server) $(command -v shardcast-ctl) $(command -v shardcast-pack)"
lib=$(python3 -c "import shardcast, os; print(os.path.dirname(shardcast.__file__))")
# Which of the bundled libraries this system lacks (torch pulls many in: libprotobuf,
# libpng, libjpeg, libarchive...): only the wheel provides those.
ldconfig -p > /tmp/ldconfig.txt
absent=$(cd $lib/lib && for so in *; do grep -q "^\s*$so " /tmp/ldconfig.txt || echo $so; done)
echo "bundled libraries absent from this system: $(echo $absent | wc -w) of $(ls $lib/lib | wc -l): $(echo $absent)"
for b in shardcast-server shardcast-ctl shardcast-pack; do
  echo "ldd $b: $(ldd $lib/bin/$b | grep -c "shardcast/bin/../lib/") bundled," \
       "$(ldd $lib/bin/$b | grep -c "not found") not found"
done
t1=$(now)
shardcast-pack --synthetic 512 --classes 10 --size 64x64 --per-shard 128 --quiet /data/shards
echo "shardcast-pack --synthetic 512 (64x64, 4 shards): $(since $t1) ($(ls /data/shards | tr "\n" " "))"
t2=$(now)
shardcast-server --shards /data/shards --listen 127.0.0.1:50051 --resize 36 --crop 32 \
  --log-level warning > /tmp/server.out 2> /tmp/server.err &
server=$!
for i in $(seq 1 120); do
  shardcast-ctl health --server 127.0.0.1:50051 --rpc-timeout 2s >/dev/null 2>&1 && break
  sleep 0.5
done
echo "shardcast-server up (pid $server, $(head -1 /tmp/server.out)), SERVING after $(since $t2)"
python3 - "$t0" <<PY
import sys, time
t0 = float(sys.argv[1])
start = time.time()
import torch, shardcast
from torch import nn
print(f"import torch {torch.__version__}, shardcast from {shardcast.__file__}: {time.time() - start:.1f} s")
loader = shardcast.Loader("127.0.0.1:50051", batch_size=32, split="sample", world_size=1, rank=0)
print(f"Loader: {len(loader)} batches per epoch, batch size {loader.batch_size}, "
      f"{loader.num_classes} classes, images {loader.image_shape}")
torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                      nn.Flatten(), nn.Linear(32, loader.num_classes))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
loss_fn = nn.CrossEntropyLoss(ignore_index=-1)
for step, (images, labels, info) in enumerate(loader):
    if step == 0:
        print(f"first batch {tuple(images.shape)} {images.dtype}: {time.time() - t0:.1f} s after pip install began")
    loss = loss_fn(model(shardcast.normalize(images)), labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.4f}")
    if step == 1:
        break
loader.close()
print(f"two optimizer steps done: {time.time() - t0:.1f} s after pip install began")
PY
shardcast-ctl status --server 127.0.0.1:50051 | head -4
kill -TERM $server
code=0; wait $server || code=$?
echo "shardcast-server after SIGTERM: exit $code"
[[ $code == 0 ]]
echo "total from pip install: $(since $t0)"
' 2>&1 | tee "$WORK/run.log"

# Debian's torch brings most of the bundled libraries' sonames along (above): the
# binaries once more on the debootstrap base alone (no Python, no torch, none of those
# libraries), from the wheel unpacked on this host.
step "the binaries on the bare base image (debootstrap minbase: no python3, no torch)"
rm -rf "$WORK/unpacked"
/usr/bin/python3 -m zipfile -e "$WORK"/wheel/*.whl "$WORK/unpacked"
chmod +x "$WORK"/unpacked/shardcast/bin/*
"${P[@]}" run --rm --network none -v "$WORK/unpacked:/wheel:ro" docker.io/library/debian:bookworm bash -euo pipefail -c '
export LD_LIBRARY_PATH=
command -v python3 || echo "no python3 here"
echo "libraries of the system: $(ls /usr/lib/x86_64-linux-gnu/*.so.* /lib/x86_64-linux-gnu/*.so.* 2>/dev/null | wc -l) files"
for b in shardcast-server shardcast-ctl shardcast-pack; do
  echo "ldd $b: $(ldd /wheel/shardcast/bin/$b | grep -c "/wheel/shardcast/bin/../lib/") bundled," \
       "$(ldd /wheel/shardcast/bin/$b | grep -c "not found") not found"
done
/wheel/shardcast/bin/shardcast-server --version
/wheel/shardcast/bin/shardcast-pack --synthetic 64 --size 32x32 --per-shard 32 --quiet /tmp/shards
ls /tmp/shards | tr "\n" " "; echo
/wheel/shardcast/bin/shardcast-ctl --help | head -1
' 2>&1 | tee -a "$WORK/run.log"
step "wheel container check passed"
