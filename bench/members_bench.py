#!/usr/bin/python3
"""Members beside the image (issue 37), side by side in one run on the same cores:

(a) images/s of a job asking for the image and the sample's `.txt` and `.json`
    members (fields=("txt", "json")) against a job asking for the image alone, on the
    same shards (shardcast-pack --synthetic --captions --no-labels: jpg + txt + json,
    img2dataset's layout) and the same server. Goal: >= 0.97x.
(b) samples/s of a members-only job (image=False, fields=("txt",)) over shards of 1 KB
    captions (and a small .json beside each, as a text corpus keeps them), against
    webdataset (bench/third_party) iterating the same shards for `.txt` alone:
    `wds.WebDataset(urls).to_tuple("txt")`, once in the process and once batched in
    --cores DataLoader workers (WebLoader). Goal: >= 3x the better webdataset row.

Each shardcast row is one rank (world 1, split "sample") draining shardcast.Loader in
this process (images normalized on the CPU in (a), as a CPU trainer does; the caption
bytes touched in (b)); the server decodes on all cores. Beside the rate, each row's CPU
time per sample: this process and the server (shardcast rows), this process and its
DataLoader workers (webdataset rows), which compares cost independently of the
machine's other load. Rows run interleaved in --rounds rounds (the machine may be
shared); each figure is the median over rounds, and a ratio is taken per round
(adjacent runs), then the median (min..max).

    bench/run_members_bench.sh [--rounds 3] [--images 4000] [--captions 50000] ...
"""

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Dict, List

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "python"))
sys.path.insert(0, str(HERE / "third_party"))
from python_loader_bench import Measure, Timer, children_cpu, process_cpu  # noqa: E402
from server_process import ServerProcess, use_source_package  # noqa: E402

import torch  # noqa: E402
import webdataset as wds  # noqa: E402

WORDS = (
    "a photo of the red green blue small large dog cat bicycle on in with under over "
    "sunset river mountain city street night morning house tree flower"
).split()


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--build-dir",
        type=Path,
        default=Path("build"),
        help="a build with shardcast-server and shardcast-pack",
    )
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--epochs", type=int, default=2, help="epochs per row")
    p.add_argument("--images", type=int, default=4000, help="(a): captioned JPEGs")
    p.add_argument("--size", default="160x120", help="(a): their size")
    p.add_argument("--resize", type=int, default=128)
    p.add_argument("--crop", type=int, default=112)
    p.add_argument("--batch", type=int, default=32, help="(a) batch size")
    p.add_argument("--captions", type=int, default=50000, help="(b): 1 KB captions")
    p.add_argument("--caption-batch", type=int, default=256, help="(b) batch size")
    p.add_argument(
        "--cores",
        type=int,
        default=os.cpu_count() or 1,
        help="(b): webdataset's DataLoader workers",
    )
    p.add_argument("--skip-a", action="store_true")
    p.add_argument("--skip-b", action="store_true")
    return p.parse_args()


def wait_until_serving(server: ServerProcess, **job) -> None:
    """A throwaway registration, which the Loader retries while the server indexes."""
    import shardcast

    shardcast.Loader(
        server.address,
        job_id="warm-up",
        batch_size=1,
        world_size=1,
        rank=0,
        reconnect_deadline=300,
        **job,
    ).close()


def drain(server: ServerProcess, job_id: str, epochs: int, **job) -> Measure:
    """One rank draining `epochs` epochs of the job: samples/s, and the CPU time per
    sample of this process and the server together."""
    import shardcast

    with shardcast.Loader(
        server.address, job_id=job_id, world_size=1, rank=0, split="sample", **job
    ) as loader:
        samples, checksum = 0, 0
        timer = Timer(lambda: process_cpu(server.proc.pid))
        for epoch in range(epochs):
            loader.set_epoch(epoch)
            for images, labels, info in loader:
                if images is not None:
                    checksum += float(shardcast.normalize(images, "cpu")[0, 0, 0, 0])
                for s in info:
                    for value in s.fields.values():
                        checksum += len(value)
                samples += labels.shape[0]
        return timer.measure(samples)


def write_captions(out: Path, n: int, per_shard: int = 1000) -> List[str]:
    """Shards of `n` samples, each a 1024-byte caption and a small .json, written by
    webdataset's TarWriter. Returns the shard paths."""
    out.mkdir(parents=True)
    rng = random.Random(37)
    paths = []
    for s in range(0, n, per_shard):
        path = out / f"{s // per_shard:06d}.tar"
        with wds.TarWriter(str(path)) as sink:
            for i in range(s, min(n, s + per_shard)):
                caption = " ".join(rng.choices(WORDS, k=240)).encode()[:1024].ljust(1024)
                sink.write(
                    {
                        "__key__": f"{i:09d}",
                        "txt": caption,
                        "json": b'{"key": "%09d", "status": "success"}' % i,
                    }
                )
        paths.append(str(path))
    return paths


def webdataset_rate(urls: List[str], epochs: int, workers: int, batch: int) -> Measure:
    """Webdataset yielding each sample's .txt bytes, in this process (workers 0) or
    batched in `workers` DataLoader worker processes: samples/s, and the CPU time per
    sample of this process and its workers (reaped at each epoch's end)."""
    dataset = wds.WebDataset(urls, shardshuffle=False, nodesplitter=None).to_tuple("txt")
    if workers:
        dataset = dataset.batched(batch, partial=True)
        loader = wds.WebLoader(dataset, batch_size=None, num_workers=workers)
    samples, checksum = 0, 0
    timer = Timer(children_cpu)
    for _ in range(epochs):
        if workers:
            for (captions,) in loader:
                checksum += sum(len(c) for c in captions)
                samples += len(captions)
        else:
            for (caption,) in dataset:
                checksum += len(caption)
                samples += 1
    return timer.measure(samples)


def run_rounds(rows: Dict[str, Callable[[str], Measure]], rounds: int) -> Dict[str, List[Measure]]:
    results: Dict[str, List[Measure]] = {name: [] for name in rows}
    for r in range(rounds):
        for i, (name, run) in enumerate(rows.items()):
            m = run(f"r{r}-{i}")
            results[name].append(m)
            print(
                f"  round {r}: {name}: {m.images_per_s:,.0f}/s, "
                f"{m.cpu_us_per_image:.1f} CPU us each",
                flush=True,
            )
    return results


def ratio(new: List[Measure], base: List[Measure], field: str) -> str:
    """new / base per round: median (min..max)."""
    per_round = [getattr(n, field) / getattr(b, field) for n, b in zip(new, base)]
    return f"{statistics.median(per_round):.2f} ({min(per_round):.2f}..{max(per_round):.2f})"


def print_table(title: str, unit: str, results: Dict[str, List[Measure]], base: str) -> None:
    """Each row's medians and their ratios to `base`'s, per round."""
    print(
        f"\n{title}\n\n| row | {unit} | vs {base} | CPU us each | vs {base} |\n"
        "|---|---:|---|---:|---|"
    )
    for name, values in results.items():
        rate = ratio(values, results[base], "images_per_s") if name != base else "1.00"
        cpu = ratio(values, results[base], "cpu_us_per_image") if name != base else "1.00"
        print(
            f"| {name} | {statistics.median(m.images_per_s for m in values):,.0f} | {rate} | "
            f"{statistics.median(m.cpu_us_per_image for m in values):.1f} | {cpu} |"
        )


def main() -> int:
    a = parse_args()
    build = a.build_dir.resolve()
    use_source_package(build)
    torch.set_num_threads(1)
    print(
        f"machine: {os.cpu_count()} cores, load average "
        f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}; torch {torch.__version__}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="members_bench.") as tmp:
        if not a.skip_a:
            data = Path(tmp) / "images"
            subprocess.run(
                [
                    str(build / "tools" / "shardcast-pack"),
                    "--synthetic",
                    str(a.images),
                    "--size",
                    a.size,
                    "--captions",
                    "--no-labels",
                    "--per-shard",
                    "100",
                    "--quiet",
                    str(data),
                ],
                check=True,
            )
            server = ServerProcess(build, data, ["--decode-threads", "0"])
            server.start()
            try:
                wait_until_serving(server)
                job = dict(batch_size=a.batch, resize=a.resize, crop=a.crop)
                print(
                    f"(a) {a.images} synthetic {a.size} JPEGs with a caption and a .json "
                    f"each, center resize {a.resize} crop {a.crop}, B={a.batch}, "
                    f"{a.epochs} epochs per row, {a.rounds} rounds",
                    flush=True,
                )
                part_a = run_rounds(
                    {
                        "image alone": lambda j: drain(server, j, a.epochs, **job),
                        "image + txt + json": lambda j: drain(
                            server, j, a.epochs, fields=("txt", "json"), **job
                        ),
                    },
                    a.rounds,
                )
            finally:
                server.kill()
            print_table(
                "(a) served to one rank (medians; ratios per round)",
                "images/s",
                part_a,
                "image alone",
            )
        if not a.skip_b:
            urls = write_captions(Path(tmp) / "captions", a.captions)
            server = ServerProcess(build, Path(tmp) / "captions", ["--decode-threads", "0"])
            server.start()
            try:
                job = dict(batch_size=a.caption_batch, image=False, fields=("txt",))
                wait_until_serving(server, image=False, fields=("txt",))
                print(
                    f"(b) {a.captions} samples of a 1 KB .txt and a .json in "
                    f"{len(urls)} shards, {a.epochs} epochs per row, {a.rounds} rounds; "
                    f"webdataset with {a.cores} workers batches by {a.caption_batch}",
                    flush=True,
                )
                part_b = run_rounds(
                    {
                        "shardcast, image=False, fields=(txt,)": lambda j: drain(
                            server, j, a.epochs, **job
                        ),
                        "webdataset .to_tuple(txt), in process": lambda j: webdataset_rate(
                            urls, a.epochs, 0, a.caption_batch
                        ),
                        f"webdataset .to_tuple(txt), {a.cores} workers": lambda j: webdataset_rate(
                            urls, a.epochs, a.cores, a.caption_batch
                        ),
                    },
                    a.rounds,
                )
            finally:
                server.kill()
            shardcast_row, *webdataset_rows = part_b
            print_table(
                "(b) captions alone (medians; ratios per round)", "samples/s", part_b, shardcast_row
            )
            for name in webdataset_rows:
                print(
                    f"shardcast / {name}: samples/s "
                    f"{ratio(part_b[shardcast_row], part_b[name], 'images_per_s')}, CPU per "
                    f"sample {ratio(part_b[shardcast_row], part_b[name], 'cpu_us_per_image')}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
