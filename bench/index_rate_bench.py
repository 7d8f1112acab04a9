#!/usr/bin/python3
"""Serving rate with the index in tables against the index in memory (issue 46):
members-only samples/s and images/s of a server with the default --index-memory (the
samples read from the index cache's compact tables through the bounded table cache)
against --index-memory 0 (every sample's SampleEntry in memory), side by side.

Two datasets of 100 shards (default):
  - members-only: tiny samples (one KEY.txt of 16 bytes; index_memory_bench.py's
    dataset, reused when there), drained with fields=("txt",), image=False, batch 1024;
  - images: small synthetic JPEGs (shardcast-pack --synthetic), decoded and cropped on
    the server, batch 256.
Each dataset is indexed once into its own --index-cache-dir; then both servers start
from that warm cache and stay up, and each is drained once untimed (tables read, page
cache warm). Rounds alternate which server goes first (AB, BA, ...), one epoch each on
one Python rank, with the job's shuffle (default: shuffle=True, DataLoader's keyword:
shards shuffled and a buffer of 1000 samples, so a batch looks samples up out of
order within a shard; "sample": split "sample", a permutation of the whole dataset;
"none": the server's default, in order). A ratio is taken per round (tables / in
memory, adjacent runs), then the median; also the best of each side, and the server's
CPU time per sample (utime + stime from /proc), which the machine's other load
disturbs less than the wall clock.

    bench/run_index_rate_bench.sh [--rounds 6] [--members 1000000] [--images 20000]
                                  [--shuffle buffer|sample|none] [--only members|images]
"""

import argparse
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Dict, List, NamedTuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "python"))
sys.path.insert(0, str(HERE))
from index_memory_bench import make_dataset, start_until_serving  # noqa: E402
from server_process import ServerProcess, pack_synthetic, use_source_package  # noqa: E402


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build-dir", type=Path, default=Path("build"))
    p.add_argument("--work", type=Path, default=Path("/tmp/shardcast_index_memory_bench"))
    p.add_argument("--rounds", type=int, default=6, help="pairs of runs per dataset")
    p.add_argument("--shards", type=int, default=100)
    p.add_argument("--members", type=int, default=1000000, help="members-only samples")
    p.add_argument("--images", type=int, default=20000, help="JPEGs")
    p.add_argument("--image-size", default="96x96")
    p.add_argument("--crop", type=int, default=64)
    p.add_argument("--shuffle", choices=("buffer", "sample", "none"), default="buffer")
    p.add_argument("--only", choices=("members", "images"), default=None)
    p.add_argument(
        "--index-memory",
        default=None,
        help="the tables' server's --index-memory (default: its own)",
    )
    return p.parse_args()


class Run(NamedTuple):
    samples: int
    seconds: float
    server_cpu: float  # seconds of the server's CPU over the run
    load: float  # 1-minute load average at the end

    @property
    def rate(self) -> float:
        return self.samples / max(self.seconds, 1e-9)

    @property
    def cpu_us(self) -> float:
        return 1e6 * self.server_cpu / max(self.samples, 1)


def process_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def shuffle_kwargs(shuffle: str) -> Dict[str, object]:
    if shuffle == "buffer":
        return dict(shuffle=True)
    if shuffle == "sample":
        return dict(split="sample")
    return {}


def drain(server: ServerProcess, kind: str, a: argparse.Namespace) -> Run:
    """One epoch of a new job on one rank."""
    import shardcast

    if kind == "members":
        content = dict(batch_size=1024, image=False, fields=("txt",))
    else:
        content = dict(batch_size=256, transform="center", resize=a.crop, crop=a.crop)
    cpu0 = process_cpu(server.proc.pid)
    start = time.monotonic()
    samples = 0
    with shardcast.Loader(
        server.address,
        job_id=f"rate-{uuid.uuid4().hex}",
        world_size=1,
        rank=0,
        **content,
        **shuffle_kwargs(a.shuffle),
    ) as loader:
        for _, labels, _ in loader:
            samples += len(labels)
    seconds = time.monotonic() - start
    return Run(samples, seconds, process_cpu(server.proc.pid) - cpu0, os.getloadavg()[0])


def measure(build: Path, kind: str, data: Path, a: argparse.Namespace) -> Dict[str, List[Run]]:
    cache = a.work / f"rate-cache-{data.name}"
    flags = ["--index-cache-dir", str(cache)]
    if not (cache.exists() and any(cache.iterdir())):
        server, seconds = start_until_serving(build, data, flags)  # indexes, writes the cache
        server.kill()
        print(f"  indexed into {cache} in {seconds:.1f} s", flush=True)
    tables_flags = flags + (["--index-memory", a.index_memory] if a.index_memory else [])
    servers = {
        "tables": start_until_serving(build, data, tables_flags)[0],
        "memory": start_until_serving(build, data, flags + ["--index-memory", "0"])[0],
    }
    try:
        for server in servers.values():
            drain(server, kind, a)  # warm-up: tables read, page cache warm
        runs: Dict[str, List[Run]] = {name: [] for name in servers}
        for r in range(a.rounds):
            order = ["tables", "memory"] if r % 2 == 0 else ["memory", "tables"]
            for name in order:
                runs[name].append(drain(servers[name], kind, a))
            t, m = runs["tables"][-1], runs["memory"][-1]
            print(
                f"  round {r}: tables {t.rate:,.0f}/s ({t.cpu_us:.2f} us CPU), "
                f"in memory {m.rate:,.0f}/s ({m.cpu_us:.2f} us CPU), "
                f"ratio {t.rate / m.rate:.3f}, load {t.load:.2f}",
                flush=True,
            )
        return runs
    finally:
        for server in servers.values():
            server.kill()


def summary(kind: str, runs: Dict[str, List[Run]]) -> str:
    t, m = runs["tables"], runs["memory"]
    ratios = [x.rate / y.rate for x, y in zip(t, m)]
    cpu_ratios = [y.cpu_us / x.cpu_us for x, y in zip(t, m)]  # > 1: tables cheaper
    best_t, best_m = max(x.rate for x in t), max(y.rate for y in m)
    loads = [x.load for x in t + m]
    return (
        f"| {kind} | {len(ratios)} | {statistics.median(x.rate for x in t):,.0f} "
        f"| {statistics.median(y.rate for y in m):,.0f} "
        f"| **{statistics.median(ratios):.3f}** ({min(ratios):.2f}-{max(ratios):.2f}) "
        f"| {best_t:,.0f} / {best_m:,.0f} = {best_t / best_m:.3f} "
        f"| {statistics.median(x.cpu_us for x in t):.2f}, "
        f"{statistics.median(y.cpu_us for y in m):.2f} "
        f"({statistics.median(cpu_ratios):.3f}) "
        f"| {min(loads):.1f}-{max(loads):.1f} |"
    )


def main() -> None:
    a = parse_args()
    build = a.build_dir.resolve()
    use_source_package(build)
    a.work.mkdir(parents=True, exist_ok=True)
    print(f"shuffle: {a.shuffle}; {a.rounds} rounds; load {os.getloadavg()[0]:.2f}", flush=True)
    rows = []
    if a.only in (None, "members"):
        data = a.work / f"data-{a.members}"
        make_dataset(data, a.members, a.shards)
        print(
            f"members-only: {a.members} samples of one 16-byte txt, {a.shards} shards", flush=True
        )
        rows.append(summary("members-only samples/s", measure(build, "members", data, a)))
    if a.only in (None, "images"):
        data = a.work / f"images-{a.images}-{a.image_size}"
        if not (data / "done").exists():
            pack_synthetic(build, data, a.images, a.images // a.shards, a.image_size, 10)
            (data / "done").write_text("")
        print(
            f"images: {a.images} synthetic {a.image_size} JPEGs, {a.shards} shards, "
            f"center crop {a.crop}, decoded on the server",
            flush=True,
        )
        rows.append(summary("images/s", measure(build, "images", data, a)))
    print()
    print(
        "| served | pairs | tables, median | in memory, median | ratio, median (range) "
        "| best of each | server CPU us/sample: tables, in memory (median of in memory / tables) "
        "| load |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(row)


if __name__ == "__main__":
    main()
