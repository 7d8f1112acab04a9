#!/usr/bin/env bash
# The main job: install what is missing, build, make a synthetic dataset, serve it with
# shardcast-server and train ResNet-18 on 2 CPU ranks (DDP over Gloo) with shardcast-train,
# evaluating after every epoch on a held-out val set served by the same server.
#
# Environment (all optional): BUILD_DIR (build), DEMO_DIR (demo-data), DEMO_SAMPLES (2048),
# DEMO_VAL_SAMPLES (500), DEMO_EPOCHS (4), DEMO_RESIZE (36), DEMO_CROP (32), DEMO_BATCH
# (32 per rank).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
DEMO_DIR=${DEMO_DIR:-demo-data}
SAMPLES=${DEMO_SAMPLES:-2048}
VAL_SAMPLES=${DEMO_VAL_SAMPLES:-500}
EPOCHS=${DEMO_EPOCHS:-4}
RESIZE=${DEMO_RESIZE:-36}
CROP=${DEMO_CROP:-32}
BATCH=${DEMO_BATCH:-32}
CLASSES=10

say() { printf '\n== demo: %s\n' "$*"; }

say "dependencies"
tools/setup-deps.sh

say "build (server, trainer, pack, ctl) into $BUILD_DIR/"
cmake -S . -B "$BUILD_DIR" -G Ninja >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)" \
  --target shardcast-server shardcast-train shardcast-pack shardcast-ctl
bin_server="$BUILD_DIR/server/shardcast-server"
bin_train="$BUILD_DIR/client/shardcast-train"
bin_pack="$BUILD_DIR/tools/shardcast-pack"
bin_ctl="$BUILD_DIR/client/shardcast-ctl"

shards="$DEMO_DIR/shards"
val="$DEMO_DIR/val"
out="$DEMO_DIR/run"
# pack DIR SAMPLES SEED WHAT: synthetic 64x64 JPEGs unless DIR already holds that many.
pack() {
  if [[ -f "$1/info.json" ]] && grep -q "\"dataset size\": *$2\b" "$1/info.json"; then
    say "$4: $1 already holds $2 samples (delete it to regenerate)"
  else
    say "$4: $2 synthetic 64x64 JPEGs, $CLASSES classes (hue + stripe angle), seed $3 -> $1"
    "$bin_pack" --synthetic "$2" --classes "$CLASSES" --size 64x64 --per-shard 256 --seed "$3" \
      --overwrite "$1"
  fi
}
pack "$shards" "$SAMPLES" 0 "training set"
# Another seed: images the model never sees in training (held out).
pack "$val" "$VAL_SAMPLES" 1 "held-out val set"

rm -rf "$out"
mkdir -p "$out"

say "server: $bin_server --shards $shards --dataset val=$val --listen 127.0.0.1:0 (log: $out/server.log)"
"$bin_server" --shards "$shards" --dataset "val=$val" --listen 127.0.0.1:0 \
  >"$out/server.out" 2>"$out/server.log" &
server_pid=$!
stop_server() {
  if kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true  # drains open streams, then exits 0
    wait "$server_pid" 2>/dev/null || true
  fi
}
trap stop_server EXIT

port=""
for _ in $(seq 1 600); do
  port=$(sed -n 's/.*listening on .*:\([0-9][0-9]*\)$/\1/p' "$out/server.out" | head -n1)
  [[ -n "$port" ]] && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$out/server.log" >&2; exit 1; }
  sleep 0.1
done
[[ -n "$port" ]] || { echo "demo: the server printed no port" >&2; cat "$out/server.log" >&2; exit 1; }
addr="127.0.0.1:$port"
until "$bin_ctl" health --server "$addr" --rpc-timeout 2s >/dev/null; do
  kill -0 "$server_pid" 2>/dev/null || { cat "$out/server.log" >&2; exit 1; }
  sleep 0.2
done
echo "serving on $addr"

say "train: ResNet-18, 2 CPU ranks, $EPOCHS epochs, batch $BATCH per rank, resize $RESIZE crop $CROP, val after each epoch (chance = $((100 / CLASSES))% top-1)"
start=$(date +%s)
set +e
"$bin_train" --server "$addr" --job-id demo --nproc-per-node 2 \
  -b "$BATCH" --n_epochs "$EPOCHS" --split sample --seed 1 \
  --resize "$RESIZE" --crop "$CROP" --lr 1e-3 --val-dataset val \
  --metrics "$out/metrics-{rank}.jsonl" --save "$out/model.pt"
train_rc=$?
set -e
seconds=$(($(date +%s) - start))

say "server status"
"$bin_ctl" status --server "$addr" || true

if ((train_rc != 0)); then
  echo "demo: shardcast-train failed (exit $train_rc); server log: $out/server.log" >&2
  exit "$train_rc"
fi

say "summary (rank 0's epochs, from $out/metrics-0.jsonl)"
grep '"event":"epoch"' "$out/metrics-0.jsonl" |
  sed -E 's/.*"epoch":([0-9]+).*"batches_per_rank":\[([^]]*)\].*"loss":([0-9.e+-]+),"acc":([0-9.e+-]+).*/\1 \2 \3 \4/' |
  awk '{ printf "epoch %d: batches per rank [%s]  mean loss %.4f  top-1 %.1f%%\n", $1 + 1, $2, $3, 100 * $4 }'
say "held-out val set ($VAL_SAMPLES samples, every one counted once over the 2 ranks)"
grep '"event":"eval"' "$out/metrics-0.jsonl" |
  sed -E 's/.*"epoch":([0-9-]+).*"loss":([0-9.e+-]+),"top1":([0-9.e+-]+),"top5":([0-9.e+-]+).*"count":([0-9]+).*/\1 \2 \3 \4 \5/' |
  awk '{ printf "epoch %d: val loss %.4f  top-1 %.1f%%  top-5 %.1f%%  (%d samples)\n", $1 + 1, $2, 100 * $3, 100 * $4, $5 }'
echo "trained in ${seconds} s; model (state_dict, torch.load-able): $out/model.pt;" \
  "best by val top-1: $out/model.best.pt"
