#!/usr/bin/python3
"""Where the index lives (issue 46): the server's resident memory per sample and its
time to SERVING, over members-only datasets of tiny samples (one KEY.txt of 16 bytes
each: a tar of 1 KiB a sample) at equal shard count.

For each dataset size N (default 100k and 1M samples over 100 shards):
  - "indexed": a server over an empty --index-cache-dir (scans every shard, writes the
    cache, then keeps only counts: --index-memory 8MiB): its peak RSS (VmHWM: what
    indexing took) and its RSS once SERVING;
  - "from cache": the same flags again (reads the cache's header alone): time from
    exec to SERVING, RSS once SERVING, and after one members-only epoch
    (fields=("txt",), image=False, batch 1024) drained by one rank;
  - "in memory": --index-memory 0 from the same cache (every sample held, as before
    issue 46): RSS once SERVING and the same epoch's samples/s, for comparison.
Per-sample memory is (RSS - RSS of the same server over one shard of 100 samples) / N.
Time to SERVING is polled on /metrics (shardcast_serving 1) every 5 ms.

    bench/run_index_memory_bench.sh [--sizes 100000,1000000] [--shards 100] [--work DIR]
"""

import argparse
import os
import re
import shutil
import sys
import tarfile
import time
import urllib.request
from io import BytesIO
from multiprocessing import Pool
from pathlib import Path
from typing import Dict, List, Tuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "python"))
from server_process import ServerProcess, use_source_package  # noqa: E402


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build-dir", type=Path, default=Path("build"))
    p.add_argument("--sizes", default="100000,1000000", help="samples per dataset, comma-separated")
    p.add_argument("--shards", type=int, default=100)
    p.add_argument("--work", type=Path, default=Path("/tmp/shardcast_index_memory_bench"))
    p.add_argument("--index-memory", default="8MiB")
    p.add_argument("--no-epoch", action="store_true", help="skip the epoch drained")
    return p.parse_args()


def write_shard(job: Tuple[str, int, int]) -> None:
    """Shard `path` of samples [first, first + count): KEY.txt of 16 bytes each."""
    path, first, count = job
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for i in range(first, first + count):
            data = f"caption {i:08d}\n".encode()
            info = tarfile.TarInfo(f"laion/{i // 10000:05d}/{i:09d}.txt")
            info.size = len(data)
            info.mtime = 1700000000
            tar.addfile(info, BytesIO(data))


def make_dataset(out: Path, n: int, shards: int) -> None:
    if (out / "done").exists():
        return
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    per = (n + shards - 1) // shards
    jobs = [
        (str(out / f"shard-{s:05d}.tar"), s * per, min(per, n - s * per))
        for s in range(shards)
        if s * per < n
    ]
    with Pool(os.cpu_count()) as pool:
        pool.map(write_shard, jobs)
    (out / "done").write_text("")


def rss_bytes(pid: int, field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return -1


def peak_rss_bytes(pid: int) -> int:
    """The process's peak resident memory so far (VmHWM): while indexing, for a server
    that has just indexed."""
    return rss_bytes(pid, "VmHWM")


def metrics(server: ServerProcess) -> Dict[str, float]:
    text = (
        urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=5)
        .read()
        .decode()
    )
    out = {}
    for line in text.splitlines():
        m = re.match(r"^(shardcast_[a-z_]+)(?:\{[^}]*\})? ([-0-9.e+]+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def start_until_serving(build: Path, shards: Path, flags: List[str]) -> Tuple[ServerProcess, float]:
    """A server over `shards`; returns it once SERVING and the seconds from exec."""
    server = ServerProcess(build, shards, flags + ["--metrics-listen", "127.0.0.1:0"])
    start = time.monotonic()
    server.start(timeout=600)
    while True:
        try:
            if metrics(server).get("shardcast_serving", 0) == 1:
                return server, time.monotonic() - start
        except OSError:
            pass
        if server.proc.poll() is not None:
            raise RuntimeError("server exited")
        time.sleep(0.005)


def drain_epoch(server: ServerProcess) -> Tuple[int, float]:
    import shardcast

    start = time.monotonic()
    samples = 0
    with shardcast.Loader(
        server.address,
        job_id="epoch",
        batch_size=1024,
        world_size=1,
        rank=0,
        image=False,
        fields=("txt",),
    ) as loader:
        for _, labels, info in loader:
            samples += len(info)
    return samples, time.monotonic() - start


def main() -> None:
    args = parse_args()
    build = args.build_dir.resolve()
    use_source_package(build)
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    sizes = [int(s) for s in args.sizes.split(",")]
    mem = ["--index-memory", args.index_memory]

    tiny = work / "tiny"
    make_dataset(tiny, 100, 1)
    shutil.rmtree(work / "cache-tiny", ignore_errors=True)
    flags = ["--index-cache-dir", str(work / "cache-tiny")] + mem
    server, _ = start_until_serving(build, tiny, flags)
    server.kill()
    server, _ = start_until_serving(build, tiny, flags)  # from its cache
    base = rss_bytes(server.proc.pid)
    server.kill()
    print(f"baseline: server over 100 samples from its cache: RSS {base / 2**20:.1f} MiB")

    rows = []
    for n in sizes:
        data = work / f"data-{n}"
        t0 = time.monotonic()
        make_dataset(data, n, args.shards)
        size = sum(p.stat().st_size for p in data.glob("*.tar"))
        print(
            f"{n} samples, {args.shards} shards, {size / 2**30:.2f} GiB of tars "
            f"(made in {time.monotonic() - t0:.0f} s)",
            flush=True,
        )
        cache = work / f"cache-{n}"
        shutil.rmtree(cache, ignore_errors=True)
        flags = ["--index-cache-dir", str(cache)]

        server, t_index = start_until_serving(build, data, flags + mem)
        rss_indexed = rss_bytes(server.proc.pid)
        peak_indexed = peak_rss_bytes(server.proc.pid)
        server.kill()
        cache_bytes = sum(p.stat().st_size for p in cache.glob("*"))

        server, t_cache = start_until_serving(build, data, flags + mem)
        rss_cache = rss_bytes(server.proc.pid)
        epoch = (0, 0.0)
        rss_epoch = -1
        m = {}
        if not args.no_epoch:
            epoch = drain_epoch(server)
            rss_epoch = rss_bytes(server.proc.pid)
            m = metrics(server)
        server.kill()

        server, t_mem = start_until_serving(build, data, flags + ["--index-memory", "0"])
        rss_mem = rss_bytes(server.proc.pid)
        epoch_mem = (0, 0.0) if args.no_epoch else drain_epoch(server)
        server.kill()

        per = lambda rss: (rss - base) / n  # noqa: E731
        row = dict(
            n=n,
            cache_bytes=cache_bytes,
            t_index=t_index,
            t_cache=t_cache,
            t_mem=t_mem,
            indexed=per(rss_indexed),
            peak=per(peak_indexed),
            cache=per(rss_cache),
            epoch=per(rss_epoch) if rss_epoch > 0 else float("nan"),
            mem=per(rss_mem),
            served=epoch[0],
            epoch_s=epoch[1],
            epoch_mem_s=epoch_mem[1],
            loads=m.get("shardcast_index_table_loads_total", 0),
            held=m.get("shardcast_index_memory_bytes", 0),
        )
        rows.append(row)
        print(
            f"  cache file {cache_bytes / n:.1f} B/sample; indexed in {t_index:.2f} s, "
            f"SERVING from cache in {t_cache:.3f} s (in memory: {t_mem:.3f} s)"
        )
        print(
            f"  RSS beyond baseline per sample: peak while indexing {row['peak']:.1f} B, "
            f"after indexing {row['indexed']:.1f} B, "
            f"from cache {row['cache']:.1f} B, after an epoch {row['epoch']:.1f} B; "
            f"--index-memory 0: {row['mem']:.1f} B"
        )
        if not args.no_epoch:
            print(
                f"  epoch: {epoch[0]} samples in {epoch[1]:.2f} s "
                f"({epoch[0] / max(epoch[1], 1e-9):.0f}/s), {row['loads']:.0f} table loads, "
                f"{row['held'] / 2**20:.2f} MiB of tables held; --index-memory 0: "
                f"{epoch_mem[0] / max(epoch_mem[1], 1e-9):.0f}/s "
                f"(ratio {epoch_mem[1] / max(epoch[1], 1e-9):.3f})",
                flush=True,
            )

    print()
    print(
        "| samples | shards | cache B/sample | peak RSS B/sample indexing | RSS B/sample indexed "
        "| from cache | after epoch "
        "| `--index-memory 0` | SERVING from cache | indexing |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['n']:,} | {args.shards} | {r['cache_bytes'] / r['n']:.1f} | {r['peak']:.1f} "
            f"| {r['indexed']:.1f} "
            f"| {r['cache']:.1f} | {r['epoch']:.1f} | {r['mem']:.1f} | {r['t_cache']:.3f} s "
            f"| {r['t_index']:.1f} s |"
        )


if __name__ == "__main__":
    main()
