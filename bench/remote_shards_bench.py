#!/usr/bin/python3
"""Shards in object storage: images/s that shardcast-server serves from an HTTP store
(nginx) and an S3 store (s3rver) against the same shards on local disk, with 0, 5, 20
and 50 ms of added round-trip time, cold and warm disk cache; and the seed's way beside
it: webdataset reading the same URLs with `pipe:curl -s URL` through the same delay.

A benchmark, not a test. One job of `--ranks` ranks (2), each its own process reading
its stream for `--epochs` epochs as fast as it can (shardcast.Loader, normalize on the
CPU, nothing else); images/s is the job's images over the time from the first rank's
start to the last rank's end, after every rank has imported and connected. Rows run
interleaved in `--rounds` rounds (the machine may be shared); figures are medians. Rows:

  local        shardcast-server --shards DIR
  http cold    --shards http://PROXY/shard-{000000..N}.tar, nginx behind
               tools/delay_proxy.py, a fresh server, no --cache-dir
  http warm    the same with --cache-dir: one epoch fills the cache (not timed), then a
               restarted server with the same cache dir serves the timed epochs
  http ra N    cold with --remote-read-ahead N (default 4)
  s3 cold      --shards s3://bench/shards/ --s3-endpoint http://PROXY, s3rver behind
  seed         webdataset (bench/third_party) over `pipe:curl -s URL` (local: the tar
               paths), decode("torchrgb") + Resize + CenterCrop + /255 + Normalize in
               --seed-workers DataLoader workers per rank, batched(partial=False); one
               process per rank (RANK/WORLD_SIZE, split_by_node)

The delay proxy is one Python thread per direction on the same cores as everything
else; 0 ms still goes through it. Server counters (remote requests, bytes, cache and
read-ahead hits, reads fetched on demand) are the difference of GetStatus over the
timed epochs (mean request: the successful requests' mean time); for the seed rows
requests and bytes are what curl fetches (one GET per shard, every byte), not measured.
"vs local" is against the same pipeline's local row.

    bench/run_remote_shards_bench.sh [--samples 4000] [--rtts 0,5,20,50] [--rounds 3]
"""

import argparse
import json
import os
import re
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Dict, List

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests" / "python"))
from object_stores import Child, start_nginx, start_s3rver  # noqa: E402
from server_process import (  # noqa: E402
    ServerProcess,
    pack_synthetic,
    python_env,
    use_source_package,
)

# One shardcast rank: connects, says "ready", waits for "go", drains one epoch.
SHARDCAST_RANK = textwrap.dedent(
    """
    import json, sys, time
    import shardcast
    address, job, rank, world, batch, resize, crop, epochs = sys.argv[1:9]
    loader = shardcast.Loader(address, job_id=job, batch_size=int(batch), rank=int(rank),
                              world_size=int(world), transform="center", resize=int(resize),
                              crop=int(crop), reconnect_deadline=300)
    print("ready", flush=True)
    sys.stdin.readline()
    t0, images = time.time(), 0
    for _ in range(int(epochs)):
        for x, y, info in loader:
            shardcast.normalize(x, "cpu")
            images += y.shape[0]
    print(json.dumps({"images": images, "start": t0, "end": time.time()}), flush=True)
    loader.close()
"""
)

# One seed rank: the seed article's webdataset pipeline (bench/feed_bench.py's).
SEED_RANK = textwrap.dedent(
    """
    import json, os, sys, time
    sys.path.insert(0, sys.argv[1])
    import torch
    import torchvision.transforms as T
    import webdataset as wds
    urls, batch, resize, crop, workers, epochs = sys.argv[2], *map(int, sys.argv[3:8])
    transform = T.Compose([T.Resize(resize), T.CenterCrop(crop), T.Lambda(lambda x: x / 255.),
                           T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    dataset = (wds.WebDataset(urls, nodesplitter=wds.split_by_node, shardshuffle=False)
               .decode("torchrgb").to_tuple("jpg", "cls").map_tuple(transform, int)
               .batched(batch, partial=False))
    loader = wds.WebLoader(dataset, batch_size=None, shuffle=False, num_workers=workers)
    print("ready", flush=True)
    sys.stdin.readline()
    t0, images = time.time(), 0
    for _ in range(epochs):
        for x, y in loader:
            images += len(y)
    print(json.dumps({"images": images, "start": t0, "end": time.time()}), flush=True)
"""
)


def start_proxy(port: int, delay_ms: float, scratch: Path) -> Child:
    child = Child(
        [
            sys.executable,
            "-u",
            str(REPO / "tools" / "delay_proxy.py"),
            "--listen",
            "127.0.0.1:0",
            "--to",
            f"127.0.0.1:{port}",
            "--delay-ms",
            str(delay_ms),
        ],
        scratch / f"proxy-{port}-{delay_ms}.log",
    )
    ready, _, _ = select.select([child.proc.stdout], [], [], 30)
    line = child.proc.stdout.readline().strip() if ready else ""
    if not line.startswith("listening on "):
        child.stop()
        raise RuntimeError(f"delay_proxy did not start: {line!r}")
    child.port = int(line.rsplit(":", 1)[1])
    return child


def brace_url(base: str, shards: Path) -> str:
    """base + "/shard-{000000..000039}.tar" for shardcast-pack's consecutive names."""
    names = sorted(p.name for p in shards.glob("shard-*.tar"))
    first, last = (re.fullmatch(r"shard-(\d+)\.tar", n).group(1) for n in (names[0], names[-1]))
    assert int(last) - int(first) + 1 == len(names), "shard names are not consecutive"
    return f"{base}/shard-{{{first}..{last}}}.tar"


def server_status(build: Path, address: str) -> Dict[str, float]:
    out = subprocess.run(
        [str(build / "client" / "shardcast-ctl"), "status", "--server", address, "--json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    status = json.loads(out)
    keys = {
        "remoteRequests": "requests",
        "remoteBytes": "bytes",
        "cacheHits": "cache_hits",
        "readAheadHits": "ra_hits",
        "remoteDirectReads": "direct",
        "remoteRequestsOk": "ok",
        "remoteFetchSeconds": "fetch_s",
    }
    return {short: float(status.get(key, 0)) for key, short in keys.items()}


def run_ranks(argvs: List[List[str]], envs: List[Dict[str, str]]) -> Dict[str, float]:
    """Starts one process per rank, lets them all go at once, and times the job."""
    children = [
        subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        for argv, env in zip(argvs, envs)
    ]
    try:
        for child in children:
            line = child.stdout.readline().strip()
            if line != "ready":
                raise RuntimeError(f"a rank did not start: {line!r}")
        for child in children:
            child.stdin.write("go\n")
            child.stdin.flush()
        results = []
        for child in children:
            out, _ = child.communicate(timeout=900)
            if child.returncode != 0:
                raise RuntimeError(f"a rank failed (exit {child.returncode})")
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    wall = max(r["end"] for r in results) - min(r["start"] for r in results)
    images = sum(r["images"] for r in results)
    return {"images": images, "wall": wall, "images_per_s": images / wall}


class Bench:
    def __init__(self, a: argparse.Namespace, scratch: Path, shards: Path) -> None:
        self.a = a
        self.scratch = scratch
        self.shards = shards
        self.env = python_env(a.build_dir)
        self.jobs = 0

    def serve_job(self, server: ServerProcess, epochs: int) -> Dict[str, float]:
        """`epochs` timed epochs of a fresh job on `server`, and its counters over them."""
        import shardcast

        self.jobs += 1
        job = f"bench-{self.jobs}"
        # Registering a throwaway job waits out the server's indexing (UNAVAILABLE).
        shardcast.Loader(
            server.address,
            job_id=f"{job}-warm-up",
            batch_size=1,
            world_size=1,
            rank=0,
            reconnect_deadline=300,
        ).close()
        before = server_status(self.a.build_dir, server.address)
        a = self.a
        result = run_ranks(
            [
                [
                    sys.executable,
                    "-c",
                    SHARDCAST_RANK,
                    server.address,
                    job,
                    str(r),
                    str(a.ranks),
                    str(a.batch),
                    str(a.resize),
                    str(a.crop),
                    str(epochs),
                ]
                for r in range(a.ranks)
            ],
            [self.env] * a.ranks,
        )
        after = server_status(self.a.build_dir, server.address)
        result.update({k: after[k] - before[k] for k in after})
        return result

    def shardcast_row(self, shards: str, flags: List[str], warm: bool) -> Dict[str, float]:
        server_flags = ["--decode-threads", str(self.a.decode_threads)] + flags
        cache = None
        if warm:
            cache = Path(tempfile.mkdtemp(prefix="cache-", dir=self.scratch))
            server_flags += ["--cache-dir", str(cache), "--cache-size", "4GiB"]
        server = ServerProcess(
            self.a.build_dir, shards, server_flags, log=self.scratch / "server.log"
        )
        try:
            server.start(timeout=120)
            if warm:
                self.serve_job(server, 1)  # fills the cache; not timed
                server.restart()
            return self.serve_job(server, self.a.epochs)
        finally:
            server.kill()
            if cache is not None:
                shutil.rmtree(cache, ignore_errors=True)

    def seed_row(self, urls: str) -> Dict[str, float]:
        a = self.a
        argvs = [
            [
                sys.executable,
                "-c",
                SEED_RANK,
                str(HERE / "third_party"),
                urls,
                str(a.batch),
                str(a.resize),
                str(a.crop),
                str(a.seed_workers),
                str(a.epochs),
            ]
            for _ in range(a.ranks)
        ]
        envs = [dict(self.env, RANK=str(r), WORLD_SIZE=str(a.ranks)) for r in range(a.ranks)]
        tars = list(self.shards.glob("*.tar"))
        return dict(
            run_ranks(argvs, envs),
            requests=len(tars) * a.epochs,
            bytes=sum(p.stat().st_size for p in tars) * a.epochs,
            cache_hits=float("nan"),
            ra_hits=float("nan"),
            direct=float("nan"),
            ok=float("nan"),
            fetch_s=float("nan"),
        )


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build-dir", type=Path, default=REPO / "build")
    p.add_argument("--samples", type=int, default=4000)
    p.add_argument("--size", default="160x120", help="generated JPEGs, WxH")
    p.add_argument("--per-shard", type=int, default=100)
    p.add_argument("--resize", type=int, default=128)
    p.add_argument("--crop", type=int, default=112)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument(
        "--epochs",
        type=int,
        default=2,
        help="per row, one job (cold: no cache, " "each epoch reads the store again)",
    )
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--decode-threads", type=int, default=0, help="server's; 0 = all cores")
    p.add_argument("--seed-workers", type=int, default=2, help="DataLoader workers per rank")
    p.add_argument("--rtts", default="0,5,20,50", help="added round trip, ms")
    p.add_argument("--s3-rtts", default="0,20")
    p.add_argument(
        "--read-ahead-rtts", default="20,50", help="RTTs with extra --remote-read-ahead rows"
    )
    p.add_argument("--read-aheads", default="8,16")
    p.add_argument("--rows", default="local,http,s3,read-ahead,seed")
    p.add_argument("--rounds", type=int, default=3, help="rows run interleaved; medians")
    return p.parse_args()


def main() -> None:
    a = parse_args()
    a.build_dir = a.build_dir.resolve()
    use_source_package(a.build_dir)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "S3RVER")  # s3rver's fixed credentials
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "S3RVER")
    kinds = set(a.rows.split(","))
    rtts = [int(x) for x in a.rtts.split(",") if x]
    s3_rtts = [int(x) for x in a.s3_rtts.split(",") if x]
    ra_rtts = [int(x) for x in a.read_ahead_rtts.split(",") if x]
    read_aheads = [int(x) for x in a.read_aheads.split(",") if x]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="remote-shards-") as tmp:
        scratch = Path(tmp)
        shards = pack_synthetic(a.build_dir, scratch / "shards", a.samples, a.per_shard, a.size, 10)
        mb = sum(p.stat().st_size for p in shards.glob("*.tar")) / 1e6
        helpers: List[Child] = []
        try:
            nginx = start_nginx(shards, scratch)
            helpers.append(nginx)
            s3 = None
            if "s3" in kinds:
                s3 = start_s3rver(shards, scratch)
                helpers.append(s3)
            proxies: Dict[tuple, Child] = {}

            def proxy(target: Child, rtt: int) -> int:
                if (target.port, rtt) not in proxies:
                    proxies[(target.port, rtt)] = start_proxy(target.port, rtt, scratch)
                    helpers.append(proxies[(target.port, rtt)])
                return proxies[(target.port, rtt)].port

            bench = Bench(a, scratch, shards)
            http = lambda rtt: brace_url(f"http://127.0.0.1:{proxy(nginx, rtt)}", shards)  # noqa
            rows = []  # (pipeline, config, rtt, thunk)
            if "local" in kinds:
                rows.append(
                    (
                        "shardcast",
                        "local dir",
                        None,
                        lambda: bench.shardcast_row(str(shards), [], False),
                    )
                )
            for rtt in rtts:
                if "http" in kinds:
                    rows.append(
                        (
                            "shardcast",
                            "http cold",
                            rtt,
                            lambda rtt=rtt: bench.shardcast_row(http(rtt), [], False),
                        )
                    )
                    rows.append(
                        (
                            "shardcast",
                            "http warm (cache, restarted)",
                            rtt,
                            lambda rtt=rtt: bench.shardcast_row(http(rtt), [], True),
                        )
                    )
                if "read-ahead" in kinds and rtt in ra_rtts:
                    for n in read_aheads:
                        rows.append(
                            (
                                "shardcast",
                                f"http cold, read-ahead {n}",
                                rtt,
                                lambda rtt=rtt, n=n: bench.shardcast_row(
                                    http(rtt), ["--remote-read-ahead", str(n)], False
                                ),
                            )
                        )
            for rtt in s3_rtts if "s3" in kinds else []:
                rows.append(
                    (
                        "shardcast",
                        "s3 cold",
                        rtt,
                        lambda rtt=rtt: bench.shardcast_row(
                            "s3://bench/shards/",
                            ["--s3-endpoint", f"http://127.0.0.1:{proxy(s3, rtt)}"],
                            False,
                        ),
                    )
                )
            if "seed" in kinds:
                local_urls = "::".join(str(p) for p in sorted(shards.glob("*.tar")))
                rows.append(
                    (
                        "seed",
                        "seed: webdataset, local files",
                        None,
                        lambda: bench.seed_row(local_urls),
                    )
                )
                for rtt in rtts:
                    rows.append(
                        (
                            "seed",
                            "seed: webdataset, pipe:curl http",
                            rtt,
                            lambda rtt=rtt: bench.seed_row(f"pipe:curl -s {http(rtt)}"),
                        )
                    )
            results: Dict[int, List[Dict[str, float]]] = {i: [] for i in range(len(rows))}
            for _ in range(a.rounds):
                for i, (_, name, rtt, thunk) in enumerate(rows):
                    t = time.monotonic()
                    try:
                        results[i].append(thunk())
                    except Exception as e:  # a row that fails is reported, the rest go on
                        print(f"row {name} @ {rtt} ms failed: {e}", file=sys.stderr)
                    print(
                        f"  [{time.monotonic() - started:5.0f} s] {name} @ {rtt} ms: "
                        f"{time.monotonic() - t:.1f} s",
                        file=sys.stderr,
                        flush=True,
                    )
        finally:
            for h in reversed(helpers):
                h.stop()
    print_table(a, rows, results, mb)


def print_table(a, rows, results, mb) -> None:
    def med(i: int, key: str) -> float:
        values = [r[key] for r in results[i]]
        return statistics.median(values) if values else float("nan")

    local = {}
    for i, (pipeline, _, rtt, _) in enumerate(rows):
        if rtt is None and results[i]:
            local[pipeline] = med(i, "images_per_s")
    print(
        f"{a.samples} images {a.size} in shards of {a.per_shard} ({mb:.1f} MB), "
        f"{a.ranks} ranks, batch {a.batch}, Resize {a.resize} + CenterCrop {a.crop}, "
        f"server decode threads {a.decode_threads or 'all'}, seed: {a.seed_workers} "
        f"DataLoader workers per rank; {a.epochs} epochs per row (one job), median of "
        f"{a.rounds} round(s)"
    )
    print(
        "| config | RTT | images/s | vs local | remote requests | MB | cache hits "
        "| read-ahead hits | on-demand reads | mean request |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")

    def count(v: float) -> str:
        return "-" if v != v else f"{v:.0f}"

    for i, (pipeline, name, rtt, _) in enumerate(rows):
        if not results[i]:
            print(f"| {name} | {'-' if rtt is None else f'{rtt} ms'} | failed | | | | | | | |")
            continue
        ips = med(i, "images_per_s")
        ratio = ips / local[pipeline] if pipeline in local else float("nan")
        if rtt is None:
            cells = ["-", f"{ips:.0f}", f"{ratio:.2f}", "-", "-"]
        else:
            cells = [
                f"{rtt} ms",
                f"{ips:.0f}",
                f"{ratio:.2f}",
                count(med(i, "requests")),
                f"{med(i, 'bytes') / 1e6:.1f}",
            ]
        cells += [count(med(i, k)) for k in ("cache_hits", "ra_hits", "direct")]
        ok = med(i, "ok")
        cells.append(f"{1000 * med(i, 'fetch_s') / ok:.0f} ms" if ok == ok and ok > 0 else "-")
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
