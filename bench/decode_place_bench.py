#!/usr/bin/python3
"""Where decoding costs what: the whole input pipeline's CPU per image, server and
client, for server delivery (the server decodes) against encoded delivery decoded on
the trainer's CPU (shardcast.Loader(decode="cpu")), side by side on the same server and
photos (docs/BENCHMARKS.md, "Encoded delivery").

Each row is a fresh client process that drains `--epochs` epochs through the Loader
(batches as tensors, one value of each read, no model), so the client's CPU is the
Loader's own: receive, checks and, for decode="cpu", the decode on its threads. The
server's CPU is its process's over the row (/proc), its wire bytes `bytes_served` over
`images_served`. Rows run interleaved in rounds; figures are medians over rounds, ratios
per round.

    bench/run_decode_place_bench.sh --photos DIR [--copies 2] [--rounds 3]
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Dict

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "python"))
from server_process import ServerProcess, python_env, use_source_package  # noqa: E402

import feed_bench  # noqa: E402  (its packer, /proc CPU reader and status counters)

ROWS = {"server": None, "encoded-cpu": "cpu"}

# The client: one Loader, every batch taken, its own CPU (all threads) and wall time.
CLIENT = textwrap.dedent(
    """
    import json, time
    import shardcast
    decode = {decode!r}
    kwargs = {{}} if decode is None else {{"decode": decode, "decode_threads": {threads}}}
    loader = shardcast.Loader({address!r}, job_id={job!r}, batch_size={batch},
                              transform={transform!r}, resize={resize}, crop={crop}, **kwargs)
    start_cpu, start = time.process_time(), time.monotonic()
    images = 0
    for epoch in range({epochs}):
        loader.set_epoch(epoch)
        for batch, _, _ in loader:
            images += batch.shape[0]
            int(batch[0, 0, 0, 0])
    print(json.dumps({{"images": images, "seconds": time.monotonic() - start,
                      "client_cpu": time.process_time() - start_cpu,
                      "substituted": loader.decode_substituted}}))
    loader.close()
"""
)


def run_row(a: argparse.Namespace, server: ServerProcess, row: str, job: str) -> Dict[str, float]:
    before_cpu = feed_bench.process_tree_cpu_seconds(server.proc.pid)
    before = feed_bench.server_counters(a, server.address)
    code = CLIENT.format(
        decode=ROWS[row],
        threads=a.decode_threads,
        address=server.address,
        job=job,
        batch=a.batch,
        transform=a.transform,
        resize=a.resize,
        crop=a.crop,
        epochs=a.epochs,
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=python_env(a.build_dir), capture_output=True, text=True
    )
    if out.returncode != 0:
        sys.exit(f"decode_place_bench: row {row} failed:\n{out.stderr}")
    client = json.loads(out.stdout.strip().splitlines()[-1])
    after = feed_bench.server_counters(a, server.address)
    server_cpu = feed_bench.process_tree_cpu_seconds(server.proc.pid) - before_cpu
    n = client["images"]
    return {
        "images_per_s": n / client["seconds"],
        "server_us": 1e6 * server_cpu / n,
        "client_us": 1e6 * client["client_cpu"] / n,
        "total_us": 1e6 * (server_cpu + client["client_cpu"]) / n,
        "wire_bytes": (after["bytes_served"] - before["bytes_served"])
        / max(1.0, after["images_served"] - before["images_served"]),
        "substituted": client["substituted"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build-dir", type=Path, default=Path(os.environ.get("BUILD_DIR", "build")))
    p.add_argument("--photos", type=Path, required=True, help="a folder of JPEGs")
    p.add_argument("--copies", type=int, default=1)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--per-shard", type=int, default=100)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--transform", choices=["center", "random"], default="center")
    p.add_argument("--resize", type=int, default=256)
    p.add_argument("--crop", type=int, default=224)
    p.add_argument("--server-threads", type=int, default=2, help="the server's --decode-threads")
    p.add_argument("--decode-threads", type=int, default=2, help="the Loader's decode_threads")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    a.synthetic = 0
    use_source_package(a.build_dir)  # generates the stubs the children import
    with tempfile.TemporaryDirectory(prefix="decode-place-") as tmp:
        shards = Path(tmp) / "shards"
        samples = feed_bench.pack(a, shards)
        server = ServerProcess(a.build_dir, shards, ["--decode-threads", str(a.server_threads)])
        server.start()
        try:
            results: Dict[str, list] = {row: [] for row in ROWS}
            for r in range(a.rounds):
                for row in ROWS:
                    results[row].append(run_row(a, server, row, f"{row}-{r}"))
        finally:
            server.kill(signal.SIGTERM)
    print(
        f"{samples} photos, {a.transform} {a.resize}/{a.crop}, batch {a.batch}, "
        f"server --decode-threads {a.server_threads}, Loader decode_threads "
        f"{a.decode_threads}, {a.epochs} epochs a row, {a.rounds} rounds (medians)"
    )
    print(
        f"{'row':<12} {'images/s':>9} {'server us':>10} {'client us':>10} {'total us':>9} "
        f"{'wire B/img':>11}"
    )
    for row, runs in results.items():
        med = {k: statistics.median(run[k] for run in runs) for k in runs[0]}
        print(
            f"{row:<12} {med['images_per_s']:>9.0f} {med['server_us']:>10.1f} "
            f"{med['client_us']:>10.1f} {med['total_us']:>9.1f} {med['wire_bytes']:>11.0f}"
        )
    for k in ("server_us", "client_us", "total_us", "wire_bytes"):
        ratios = [e[k] / s[k] for s, e in zip(results["server"], results["encoded-cpu"])]
        print(
            f"encoded-cpu / server, {k}: {statistics.median(ratios):.3f} "
            f"({min(ratios):.3f}..{max(ratios):.3f})"
        )


if __name__ == "__main__":
    main()
