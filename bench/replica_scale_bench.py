#!/usr/bin/python3
"""One job of 8 ranks served by 1, 2 and 4 replicas of shardcast-server on this machine
(issue 26): images/s of the whole job, and what the multi-server client costs per
batch (each rank's CPU time per batch, all its threads).

Every rank is its own process running shardcast.Loader with --server given as the list
of all replicas; ranks spread over them by rank (client/reconnect/server_list.h). The
replicas share this machine's cores, so on 2 cores this measures overhead, not
speed-up: a replica adds decode threads, not cores. Rows run interleaved in rounds;
figures are medians over rounds.

    bench/run_replica_scale_bench.sh [--replicas 1,2,4] [--ranks 8] [--rounds 3]
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests" / "python"))
from server_process import ServerProcess, pack_synthetic, python_env  # noqa: E402

# One rank: drains `epochs` epochs and prints images, wall and CPU seconds.
RANK_CHILD = textwrap.dedent(
    """
    import json, resource, sys, time
    import shardcast
    servers, job, rank, world, batch, size, epochs = sys.argv[1:8]
    loader = shardcast.Loader(servers, job_id=job, batch_size=int(batch), rank=int(rank),
                              world_size=int(world), split="sample", transform="center",
                              resize=int(size), crop=int(size))
    r0, t0, images, batches = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter(), 0, 0
    for _ in range(int(epochs)):
        for x, y, info in loader:
            images += y.shape[0]
            batches += 1
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    print(json.dumps({"images": images, "batches": batches, "wall": wall, "cpu": cpu}))
"""
)


def run_job(build, servers, job, ranks, batch, size, epochs):
    env = python_env(build)
    started = time.perf_counter()
    children = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                RANK_CHILD,
                servers,
                job,
                str(r),
                str(ranks),
                str(batch),
                str(size),
                str(epochs),
            ],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for r in range(ranks)
    ]
    results = []
    for child in children:
        out, _ = child.communicate(timeout=1800)
        if child.returncode != 0:
            raise RuntimeError(f"a rank failed (exit {child.returncode})")
        results.append(json.loads(out.strip().splitlines()[-1]))
    wall = time.perf_counter() - started
    images = sum(r["images"] for r in results)
    batches = sum(r["batches"] for r in results)
    counts = {r["batches"] for r in results}
    return {
        "images_per_s": images / wall,
        "cpu_us_per_batch": 1e6 * sum(r["cpu"] for r in results) / batches,
        "equal_counts": len(counts) == 1,
        "batches_per_rank": max(counts),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build-dir", default=str(REPO / "build"))
    parser.add_argument("--replicas", default="1,2,4")
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--size", type=int, default=32, help="resize = crop, pixels")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--decode-threads", type=int, default=2, help="per replica")
    args = parser.parse_args()
    build = Path(args.build_dir).resolve()
    counts = [int(r) for r in args.replicas.split(",")]
    with tempfile.TemporaryDirectory(prefix="replica-scale-") as tmp:
        shards = pack_synthetic(build, Path(tmp) / "shards", args.samples, 256, "64x64", 10)
        servers = [
            ServerProcess(build, shards, ["--decode-threads", str(args.decode_threads)])
            for _ in range(max(counts))
        ]
        for server in servers:
            server.start()
        rows = {n: [] for n in counts}
        try:
            for round_ in range(args.rounds):
                for n in counts:
                    listed = ",".join(s.address for s in servers[:n])
                    rows[n].append(
                        run_job(
                            build,
                            listed,
                            f"scale-{n}-{round_}",
                            args.ranks,
                            args.batch,
                            args.size,
                            args.epochs,
                        )
                    )
        finally:
            for server in servers:
                server.stop() if hasattr(server, "stop") else server.kill()
    print(
        f"{args.ranks} ranks, batch {args.batch}, {args.size}px, {args.samples} samples, "
        f"{args.epochs} epochs, {args.decode_threads} decode threads per replica, "
        f"medians of {args.rounds} rounds"
    )
    print("| replicas | images/s (job) | vs 1 | client CPU per batch | equal counts |")
    print("|---|---|---|---|---|")
    base = statistics.median(r["images_per_s"] for r in rows[counts[0]])
    for n in counts:
        ips = statistics.median(r["images_per_s"] for r in rows[n])
        cpu = statistics.median(r["cpu_us_per_batch"] for r in rows[n])
        equal = all(r["equal_counts"] for r in rows[n])
        print(
            f"| {n} | {ips:.0f} | {ips / base:.2f} | {cpu:.0f} us | {equal} "
            f"({rows[n][0]['batches_per_rank']} batches per rank) |"
        )


if __name__ == "__main__":
    main()
