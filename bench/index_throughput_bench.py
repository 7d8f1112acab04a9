#!/usr/bin/python3
"""Indexing throughput (issue 46): samples/s, MB/s of shards read and CPU seconds of
`shardcast-ctl index SOURCE -o FILE` (the server's indexing: every shard read once,
its MD5 digested, its members grouped into samples, a table per shard written to the
index cache) over LAION-like shards from a local directory, from nginx over HTTP and
from s3rver over S3, beside what reading and digesting the same bytes alone costs
(`cat` of every shard to /dev/null; Python's hashlib MD5 of every shard, one core).

Samples as LAION's: KEY.jpg of --jpg-kb (random bytes: indexing reads no pixels),
KEY.txt of 40-300 bytes, KEY.json of 400-1,500 bytes; --per-shard samples a shard.
Rows run interleaved in --rounds rounds (a shared machine); figures are medians.

    /usr/bin/python3 bench/index_throughput_bench.py --build-dir build \\
        [--samples 40000] [--per-shard 1000] [--jpg-kb 5-30] [--rounds 3] [--rows local,http,s3]
"""

import argparse
import hashlib
import io
import os
import random
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from multiprocessing import Pool
from pathlib import Path
from typing import Callable, Dict, List, Tuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "python"))
from object_stores import start_nginx, start_s3rver  # noqa: E402


def write_shard(job: Tuple[str, int, int, int, int, int]) -> None:
    path, shard, per_shard, jpg_lo, jpg_hi, seed = job
    rng = random.Random(seed * 1_000_003 + shard)
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for j in range(per_shard):
            key = f"{shard:05d}{j:04d}"
            for ext, size in (
                ("jpg", rng.randint(jpg_lo, jpg_hi)),
                ("txt", rng.randint(40, 300)),
                ("json", rng.randint(400, 1500)),
            ):
                data = rng.randbytes(size)
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = size
                info.mtime = 1700000000
                tar.addfile(info, io.BytesIO(data))


def make_dataset(out: Path, a: argparse.Namespace) -> None:
    out.mkdir(parents=True, exist_ok=True)
    lo, hi = (int(x) * 1024 for x in a.jpg_kb.split("-"))
    jobs = [
        (str(out / f"shard-{s:06d}.tar"), s, a.per_shard, lo, hi, 1)
        for s in range(a.samples // a.per_shard)
    ]
    with Pool() as pool:
        pool.map(write_shard, jobs)


def run(cmd: List[str], env: Dict[str, str]) -> Tuple[float, float]:
    """Wall and CPU (user + system) seconds of `cmd`; raises when it fails."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {err}")
    return wall, usage.ru_utime + usage.ru_stime


def md5_all(files: List[Path]) -> Tuple[float, float]:
    start, cpu = time.monotonic(), time.process_time()
    for f in files:
        h = hashlib.md5()
        with open(f, "rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
    return time.monotonic() - start, time.process_time() - cpu


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build-dir", type=Path, default=Path("build"))
    p.add_argument("--samples", type=int, default=40000)
    p.add_argument("--per-shard", type=int, default=1000)
    p.add_argument("--jpg-kb", default="5-30")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rows", default="local,http,s3")
    a = p.parse_args()
    ctl = str(a.build_dir.resolve() / "client" / "shardcast-ctl")
    env = dict(os.environ, AWS_ACCESS_KEY_ID="S3RVER", AWS_SECRET_ACCESS_KEY="S3RVER")
    kinds = a.rows.split(",")
    with tempfile.TemporaryDirectory(prefix="index-throughput-") as tmp:
        scratch = Path(tmp)
        shards = scratch / "shards"
        make_dataset(shards, a)
        files = sorted(shards.glob("*.tar"))
        n = len(files) * a.per_shard
        mb = sum(f.stat().st_size for f in files) / 1e6
        print(f"{n} samples in {len(files)} shards, {mb:.0f} MB; {os.cpu_count()} cores")
        out = str(scratch / "index.bin")
        helpers = []
        rows: List[Tuple[str, Callable[[], Tuple[float, float]]]] = [
            ("read (cat > /dev/null)", lambda: run(["cat", *map(str, files)], env)),
            ("MD5 only (hashlib, one core)", lambda: md5_all(files)),
        ]
        try:
            if "local" in kinds:
                rows.append(
                    (
                        "index, local dir",
                        lambda: run([ctl, "index", str(shards), "-o", out], env),
                    )
                )
            if "http" in kinds:
                nginx = start_nginx(shards, scratch)
                helpers.append(nginx)
                url = f"http://127.0.0.1:{nginx.port}/shard-{{000000..{len(files) - 1:06d}}}.tar"
                rows.append(
                    (
                        "index, HTTP (nginx)",
                        lambda: run([ctl, "index", url, "-o", out], env),
                    )
                )
            if "s3" in kinds:
                s3 = start_s3rver(shards, scratch)
                helpers.append(s3)
                s3_cmd = [
                    ctl,
                    "index",
                    "s3://bench/shards/",
                    "-o",
                    out,
                    "--s3-endpoint",
                    f"http://127.0.0.1:{s3.port}",
                ]
                rows.append(("index, S3 (s3rver)", lambda: run(s3_cmd, env)))
            results: Dict[str, List[Tuple[float, float]]] = {name: [] for name, _ in rows}
            for r in range(a.rounds):
                for name, thunk in rows:
                    results[name].append(thunk())
                    wall, cpu = results[name][-1]
                    print(
                        f"round {r + 1} {name:<30} {wall:7.2f} s wall, {cpu:7.2f} s CPU",
                        flush=True,
                    )
        finally:
            for h in helpers:
                h.stop()
    print()
    print("| row | wall s | samples/s | MB/s | CPU s | CPU us/sample |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, _ in rows:
        wall = statistics.median(x[0] for x in results[name])
        cpu = statistics.median(x[1] for x in results[name])
        print(
            f"| {name} | {wall:.2f} | {n / wall:,.0f} | {mb / wall:,.0f} | {cpu:.2f} "
            f"| {cpu / n * 1e6:.1f} |"
        )


if __name__ == "__main__":
    main()
