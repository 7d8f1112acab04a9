#!/usr/bin/env bash
# Builds the server and trainer images from deploy/Dockerfile with podman and runs them
# for real: the server container on a generated dataset (written by the server image's
# own shardcast-pack), health and status with shardcast-ctl, one epoch of DDP with two
# trainer containers, a /metrics scrape, SIGTERM -> exit 0; then deploy/docker-compose.yml
# with podman-compose (Debian's /usr/bin/python3 with python3-prometheus-client parses
# the scrape). Not part of CI: each image build compiles the project (tens of
# minutes on 2 cores). Recipe: the shared containers.md (podman + runc + a debootstrap
# debian:bookworm base, host network).
#
#   tools/container-check.sh prepare   # packages + base image only (no compiling)
#   tools/container-check.sh           # everything; a summary at the end
#   SKIP_BUILD=1 tools/container-check.sh   # run the images built before
# (Any change under tools/, this script included, invalidates the images' build cache.)
#
# Every step prints "== [HH:MM:SS] step" so a log shows how far a run got.
# WORK (default /var/tmp/shardcast-containers) holds the data; ports: SERVER_PORT
# (50051, the port of the image's HEALTHCHECK), METRICS_PORT (9464), MASTER_PORT (29531).
set -euo pipefail
cd "$(dirname "$0")/.."

WORK=${WORK:-/var/tmp/shardcast-containers}
SERVER_PORT=${SERVER_PORT:-50051}
METRICS_PORT=${METRICS_PORT:-9464}
MASTER_PORT=${MASTER_PORT:-29531}
P=(podman --runtime runc --cgroup-manager cgroupfs)
step() { echo "== [$(date -u +%H:%M:%S)] $*"; }
fail() { echo "FAILED: $*" >&2; exit 1; }

prepare() {
  step "packages (podman, runc, debootstrap, podman-compose, netavark, iptables)"
  local missing=()
  for p in podman runc debootstrap podman-compose netavark aardvark-dns iptables; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
  # podman's default ulimits and crun do not work in this sandbox (containers.md); the
  # same settings as engine defaults, so that podman-compose's plain `podman` calls get
  # them too. Compose's project network needs a network backend: netavark (+
  # aardvark-dns for the service names), since Debian's podman otherwise picks CNI
  # without its plugins.
  if ! grep -q netavark /etc/containers/containers.conf 2>/dev/null; then
    mkdir -p /etc/containers
    printf '%s\n' '[containers]' 'default_ulimits = []' '[engine]' 'runtime = "runc"' \
      'cgroup_manager = "cgroupfs"' 'events_logger = "file"' '[network]' \
      'network_backend = "netavark"' > /etc/containers/containers.conf
  fi
  step "base image debian:bookworm (debootstrap)"
  if ! "${P[@]}" image exists docker.io/library/debian:bookworm; then
    local mirror rootfs=/var/tmp/rootfs-bookworm
    mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources)
    rm -rf "$rootfs"
    debootstrap --variant=minbase bookworm "$rootfs" "$mirror" > "$WORK/debootstrap.log" 2>&1
    tar -C "$rootfs" -c . | "${P[@]}" import - docker.io/library/debian:bookworm
    rm -rf "$rootfs"
  fi
  "${P[@]}" tag docker.io/library/debian:bookworm docker.io/library/debian:bookworm-slim
}

build_images() {
  for target in server trainer; do
    step "build image shardcast-$target (--format docker keeps the HEALTHCHECK)"
    local start=$SECONDS
    "${P[@]}" build --format docker --network host --pull=never \
      --ignorefile deploy/Dockerfile.dockerignore \
      -f deploy/Dockerfile --target "$target" -t "shardcast-$target" . \
      > "$WORK/build-$target.log" 2>&1 || { tail -30 "$WORK/build-$target.log"; fail "build $target"; }
    echo "built in $((SECONDS - start)) s; size $("${P[@]}" image inspect "shardcast-$target" --format '{{.Size}}') bytes"
  done
  step "image checks"
  local hc
  hc=$("${P[@]}" image inspect shardcast-server --format '{{json .HealthCheck}}')
  echo "server HEALTHCHECK: $hc"
  [[ $hc == *shardcast-ctl* ]] || fail "the server image has no HEALTHCHECK"
  for target in server trainer; do
    # No package cache in the final image (lists and .debs were cleaned in each layer).
    local left
    left=$("${P[@]}" run --rm --network host --entrypoint /bin/sh "shardcast-$target" -c \
      'ls /var/lib/apt/lists | grep -vc "^lock$\|^partial$\|^auxfiles$"; ls /var/cache/apt/archives/*.deb 2>/dev/null | wc -l' \
      2>&1 || true)
    echo "shardcast-$target: apt list files, cached .debs: $(echo $left)"
  done
}

run_server_and_trainers() {
  local data=$WORK/data name=shardcast-check-server
  "${P[@]}" rm -f "$name" >/dev/null 2>&1 || true
  rm -rf "$data"
  step "bind mount owned by root: shardcast-pack as uid 10001 must fail"
  install -d -o root -g root -m 0755 "$data"
  if "${P[@]}" run --rm --network host -v "$data:/out" shardcast-server \
      shardcast-pack --synthetic 16 --quiet /out/shards > "$WORK/pack-root.log" 2>&1; then
    fail "writing into a root-owned bind mount worked"
  fi
  echo "refused as documented: $(tail -1 "$WORK/pack-root.log")"
  step "dataset: the server image's shardcast-pack (dispatch, no --entrypoint) into a dir owned by 10001"
  chown 10001:10001 "$data"
  "${P[@]}" run --rm --network host -v "$data:/out" shardcast-server \
    shardcast-pack --synthetic 1024 --classes 10 --size 64x64 --per-shard 128 --quiet /out/shards
  ls "$data/shards" | head -3

  step "server container (--network host, shards read-only)"
  "${P[@]}" run -d --name "$name" --network host -v "$data:/data:ro" shardcast-server \
    --shards /data/shards --listen "127.0.0.1:$SERVER_PORT" --metrics-listen "127.0.0.1:$METRICS_PORT" \
    --batch-size 32 --split sample --resize 72 --crop 64 --decode-threads 1 --stall-warn 30s \
    > /dev/null
  if [[ $SERVER_PORT != 50051 ]]; then
    echo "note: SERVER_PORT=$SERVER_PORT, the image's HEALTHCHECK probes 50051 and fails"
  fi
  step "health with shardcast-ctl (podman exec) until SERVING"
  local i
  for i in $(seq 1 60); do
    if "${P[@]}" exec "$name" shardcast-ctl health --server "127.0.0.1:$SERVER_PORT" --rpc-timeout 3s; then
      break
    fi
    sleep 2
  done
  "${P[@]}" exec "$name" shardcast-ctl health --server "127.0.0.1:$SERVER_PORT" --rpc-timeout 3s \
    || fail "server not SERVING"
  step "the image's HEALTHCHECK (podman healthcheck run)"
  "${P[@]}" healthcheck run "$name" && echo "healthy" || echo "healthcheck run failed (exit $?)"

  step "one epoch of DDP: two trainer containers (ranks 0, 1; Gloo over the host network)"
  local start=$SECONDS r
  for r in 0 1; do
    "${P[@]}" rm -f "shardcast-check-rank$r" >/dev/null 2>&1 || true
    "${P[@]}" run -d --name "shardcast-check-rank$r" --network host shardcast-trainer \
      --server "127.0.0.1:$SERVER_PORT" --job-id container-check --rank "$r" --world-size 2 \
      --master-addr 127.0.0.1 --master-port "$MASTER_PORT" -b 32 --epochs 1 \
      --device cpu --threads 1 --no-progress > /dev/null
  done
  "${P[@]}" run --rm --network host shardcast-trainer \
    shardcast-ctl status --server "127.0.0.1:$SERVER_PORT" | sed -n '1,40p' || true
  for r in 0 1; do
    local code
    code=$("${P[@]}" wait "shardcast-check-rank$r")
    echo "rank $r exit $code; last lines:"
    "${P[@]}" logs "shardcast-check-rank$r" 2>&1 | tail -3
    [[ $code == 0 ]] || fail "rank $r exited $code"
  done
  echo "trained one epoch in $((SECONDS - start)) s"
  step "metrics scrape from the host"
  /usr/bin/python3 - "$METRICS_PORT" <<'EOF'
import sys, urllib.request
from prometheus_client.parser import text_string_to_metric_families
text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=10).read().decode()
values = {s.name + str(sorted(s.labels.items())): s.value
          for f in text_string_to_metric_families(text) for s in f.samples}
for key in sorted(values):
    if any(k in key for k in ("images_served_total", "decode_duration_seconds_count",
                              "wait_for", "position_batches", "stalled_ranks", "index_state")):
        print(f"  {key} = {values[key]:g}")
EOF
  step "status after training"
  "${P[@]}" exec "$name" shardcast-ctl status --server "127.0.0.1:$SERVER_PORT" | sed -n '1,22p'
  step "SIGTERM (podman stop -t 30): drain, exit 0"
  "${P[@]}" stop -t 30 "$name" > /dev/null
  local exit_code
  exit_code=$("${P[@]}" inspect "$name" --format '{{.State.ExitCode}}')
  "${P[@]}" logs "$name" 2>&1 | tail -4
  echo "server exit code: $exit_code"
  [[ $exit_code == 0 ]] || fail "server exit $exit_code"
  "${P[@]}" rm -f "$name" shardcast-check-rank0 shardcast-check-rank1 > /dev/null
}

compose_check() {
  local compose=(podman-compose -p shardcast -f deploy/docker-compose.yml)
  step "podman-compose $(dpkg-query -W -f='${Version}' podman-compose)"
  "${compose[@]}" down -v > /dev/null 2>&1 || true
  # podman-compose 1.0.3 ignores depends_on conditions (and --no-deps), and `up SERVICE`
  # would start an exited data job again: everything starts at once; the server waits
  # for the data's info.json (SHARDCAST_WAIT_FOR) and the trainers retry registration.
  step "compose: up -d (data, server, trainer0, trainer1)"
  local start=$SECONDS
  "${compose[@]}" up -d > "$WORK/compose-up.log" 2>&1 || {
    tail -20 "$WORK/compose-up.log"; fail "podman-compose up"; }
  local data_exit
  data_exit=$("${P[@]}" wait shardcast_data_1)
  echo "data job exit $data_exit after $((SECONDS - start)) s"
  [[ $data_exit == 0 ]] || { "${P[@]}" logs shardcast_data_1 2>&1 | tail; fail "compose data job"; }
  local i
  for i in $(seq 1 60); do
    "${P[@]}" exec shardcast_server_1 shardcast-ctl health --server 127.0.0.1:50051 \
      --rpc-timeout 3s > /dev/null 2>&1 && break
    sleep 2
  done
  "${P[@]}" exec shardcast_server_1 shardcast-ctl health --server 127.0.0.1:50051 --rpc-timeout 3s \
    || { "${P[@]}" logs shardcast_server_1 2>&1 | tail; fail "compose server not healthy"; }
  step "compose: server SERVING; its HEALTHCHECK as podman-compose wrote it"
  "${P[@]}" healthcheck run shardcast_server_1 && echo "healthy" \
    || echo "podman healthcheck run: exit $? (see docs/deploy.md)"
  "${P[@]}" logs shardcast_server_1 2>&1 | grep -m3 "entrypoint\|index:" || true
  step "compose: trainer0 + trainer1 (2 epochs)"
  local r code
  for r in 0 1; do
    code=$("${P[@]}" wait "shardcast_trainer${r}_1")
    echo "trainer$r exit $code; last lines:"
    "${P[@]}" logs "shardcast_trainer${r}_1" 2>&1 | tail -3
    [[ $code == 0 ]] || fail "compose trainer$r exited $code"
  done
  echo "compose trainers done in $((SECONDS - start)) s"
  "${P[@]}" exec shardcast_server_1 shardcast-ctl status --server 127.0.0.1:50051 | sed -n '1,8p'
  step "compose: down"
  "${compose[@]}" down -v > /dev/null 2>&1
}

mkdir -p "$WORK"
prepare
[[ ${1:-all} == prepare ]] && exit 0
if [[ -n ${SKIP_BUILD:-} ]]; then
  step "SKIP_BUILD: using the images built before"
  "${P[@]}" image inspect shardcast-server shardcast-trainer --format '{{.Id}} {{.Created}}'
else
  build_images
fi
run_server_and_trainers
compose_check
step "all container checks passed"
