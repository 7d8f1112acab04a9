#!/usr/bin/python3
"""Python client benchmark, side by side in one run on the same servers and data:

(a) images/s and client CPU time per image of shardcast.Loader (+ normalize on the
    CPU) against the C++ BatchStream (bench/stream_consumer_bench), both feeding a no-op
    model:
    - server-bound: a decoding server (real serving) with one decode thread pinned to
      the first core, the clients on the other cores (--no-pin: all on all cores);
    - client-bound: the wire-only server (--bench-only-resend-first-batch), where the
      client's receive path is the bottleneck, all on all cores: the raw rows (receive +
      full protobuf parse, no tensors; grpcio for Python) show what the wire alone
      allows each language. The Loader and BatchStream themselves against that server
      (which stamps each re-sent batch with its index) are bench/native_loader_bench.py's.
(b) the seed article's webdataset-style pipeline (tar reading with tarfile, PIL decode,
    torchvision Resize(256) + CenterCrop(224), batches made in DataLoader worker
    processes), twice: as the article writes it (decode("torchrgb") to a float tensor,
    the transform, /255 and Normalize on floats in the workers) and a cheaper uint8
    variant (PILToTensor, normalize in the training process); against
    shardcast-server + Loader, shardcast-server + the C++ BatchStream (both normalizing
    on the CPU), and shardcast-server + a C++ WireBatch reader that only receives (a
    CUDA trainer normalizes on the GPU), on the same cores and ImageNet-sized JPEGs
    (generated, or real photographs with --seed-photos).

Rows run interleaved in rounds (the machine may be shared); each row's figure is the
median over rounds, and a ratio is taken per round (adjacent runs), then the median.
CPU time per image counts the consumer process (all threads) and, in (b), its
DataLoader workers or the server, so it compares cost independently of the machine's
other load.

    bench/run_python_loader_bench.sh [--rounds R] [--epochs E] [--seed-images N] ...
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, Iterator, List, NamedTuple, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))
from server_process import ServerProcess, pack_synthetic, use_source_package  # noqa: E402

import grpc  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torchvision.transforms as T  # noqa: E402
from PIL import Image  # noqa: E402


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--build-dir",
        type=Path,
        default=Path("build-bench"),
        help="a build with the trainer (torch) enabled: shardcast-server, "
        "shardcast-pack and bench/stream_consumer_bench",
    )
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--epochs", type=int, default=3, help="epochs per row, part (a)")
    p.add_argument("--samples", type=int, default=2048, help="part (a) dataset size")
    p.add_argument("--size", type=int, default=96, help="part (a) image size (square)")
    p.add_argument("--resize", type=int, default=72)
    p.add_argument("--crop", type=int, default=64)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument(
        "--wire-epochs", type=int, default=30, help="epochs per row on the wire-only server"
    )
    p.add_argument(
        "--seed-images", type=int, default=1024, help="part (b): 500x375 JPEGs (ImageNet-sized)"
    )
    p.add_argument("--seed-epochs", type=int, default=1)
    p.add_argument(
        "--seed-photos",
        type=Path,
        help="part (b): a directory of JPEGs (bench/make_photo_corpus.py) packed "
        "into shards of 64 instead of --seed-images generated ones",
    )
    p.add_argument("--skip-a", action="store_true", help="run part (b) only")
    p.add_argument(
        "--no-pin",
        dest="pin",
        action="store_false",
        help="part (a): do not pin the decoding server to the first core and "
        "its clients to the others",
    )
    p.add_argument(
        "--cores",
        type=int,
        default=os.cpu_count() or 1,
        help="part (b): DataLoader workers and server decode threads",
    )
    return p.parse_args()


class Measure(NamedTuple):
    images_per_s: float
    cpu_us_per_image: float  # the consumer's CPU (all its threads and worker processes)
    images: int = 0


class Timer:
    """Wall time and this process's CPU time, plus that of `extra_cpu()` (a server's,
    reaped DataLoader workers'), over a timed section."""

    def __init__(self, extra_cpu: Callable[[], float] = lambda: 0.0) -> None:
        self.extra_cpu = extra_cpu
        self.wall = time.perf_counter()
        self.cpu = time.process_time() + extra_cpu()

    def measure(self, images: int) -> Measure:
        wall = time.perf_counter() - self.wall
        cpu = time.process_time() + self.extra_cpu() - self.cpu
        return Measure(images / wall, 1e6 * cpu / images, images)


def wait_until_serving(server: ServerProcess) -> None:
    """Registers a throwaway job, which the Loader retries while the server indexes
    (UNAVAILABLE), so that no measured row starts before the server serves."""
    import shardcast

    shardcast.Loader(
        server.address,
        job_id="bench-warm-up",
        batch_size=1,
        world_size=1,
        rank=0,
        reconnect_deadline=300,
    ).close()


def set_affinity(cpus: List[int]) -> None:
    """Pins every thread of this process (gRPC's own included) to `cpus`; children
    started afterwards inherit it."""
    for tid in os.listdir("/proc/self/task"):
        os.sched_setaffinity(int(tid), cpus)


def children_cpu() -> float:
    """CPU seconds of this process's reaped children (DataLoader workers)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def process_cpu(pid: int) -> float:
    """CPU seconds of a running process, all threads (/proc/PID/stat utime + stime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ---- part (a): Python against C++ ----------------------------------------------------


def cpp_rate(
    binary: Path, address: str, job_id: str, mode: str, a: argparse.Namespace, epochs: int
) -> Measure:
    out = subprocess.run(
        [
            str(binary),
            "--server",
            address,
            "--job-id",
            job_id,
            "--mode",
            mode,
            "--batch",
            str(a.batch),
            "--resize",
            str(a.resize),
            "--crop",
            str(a.crop),
            "--epochs",
            str(epochs),
            "--threads",
            "1",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result = json.loads(out.strip().splitlines()[-1])
    return Measure(result["images_per_s"], result["cpu_us_per_image"], result["images"])


def loader_rate(address: str, job_id: str, a: argparse.Namespace, epochs: int) -> Measure:
    """shardcast.Loader + normalize on the CPU, a no-op model reading one value."""
    import shardcast

    with shardcast.Loader(
        address,
        job_id=job_id,
        batch_size=a.batch,
        world_size=1,
        rank=0,
        split="sample",
        transform="center",
        resize=a.resize,
        crop=a.crop,
    ) as loader:
        images_seen = 0
        checksum = 0.0
        timer = Timer()
        for _ in range(epochs):
            for images, labels, info in loader:
                x = shardcast.normalize(images, "cpu")
                checksum += float(x[0, 0, 0, 0])
                images_seen += labels.shape[0]
        return timer.measure(images_seen)


def python_raw_rate(address: str, job_id: str, a: argparse.Namespace, epochs: int) -> Measure:
    """A plain grpcio stream reader, each message fully parsed by protobuf (the C++ raw
    row's work)."""
    from shardcast._proto import REGISTER_METHOD, STREAM_BATCHES_METHOD, pb

    job = pb.RegisterRequest(
        job_id=job_id,
        rank=0,
        world_size=1,
        batch_size=a.batch,
        split=pb.SPLIT_SAMPLE,
        transform=pb.Transform(mode=pb.TRANSFORM_MODE_CENTER, resize=a.resize, crop=a.crop),
    )
    channel = grpc.insecure_channel(address, options=[("grpc.max_receive_message_length", -1)])
    register = channel.unary_unary(
        REGISTER_METHOD,
        request_serializer=pb.RegisterRequest.SerializeToString,
        response_deserializer=pb.RegisterResponse.FromString,
    )
    stream = channel.unary_stream(
        STREAM_BATCHES_METHOD, request_serializer=pb.StreamBatchesRequest.SerializeToString
    )
    reg = register(job, timeout=60, wait_for_ready=True)
    images_seen = 0
    timer = Timer()
    for epoch in range(epochs):
        request = pb.StreamBatchesRequest(
            job_id=job_id, rank=0, epoch=epoch, job_fingerprint=reg.job_fingerprint
        )
        for raw in stream(request):
            images_seen += len(pb.Batch.FromString(raw).labels)
    result = timer.measure(images_seen)
    channel.close()
    return result


# ---- part (b): the seed's pipeline -----------------------------------------------------


IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]


class ArticleDecode:
    """The article's per-image work: webdataset's decode("torchrgb") (PIL decode, RGB,
    float32 / 255, CHW tensor), then its get_transform(): Resize(256), CenterCrop(224),
    x / 255. (as written: the article takes the tensor for uint8), Normalize."""

    def __init__(self) -> None:
        self.transform = T.Compose(
            [
                T.Resize(256),
                T.CenterCrop(224),
                T.Lambda(lambda x: x / 255.0),
                T.Normalize(mean=IMAGENET_MEAN, std=IMAGENET_STD),
            ]
        )

    def __call__(self, im: Image.Image) -> torch.Tensor:
        rgb = np.asarray(im.convert("RGB")).astype(np.float32) / 255.0
        return self.transform(torch.tensor(rgb.transpose(2, 0, 1)))


class SeedPipeline(torch.utils.data.IterableDataset):
    """What the seed's `wds.WebDataset(urls, nodesplitter=split_by_node)` + decode +
    map_tuple(transform) + batched(B, partial=False) does for one rank, without the
    webdataset package (not in Debian): shards split over DataLoader workers, members
    grouped by key, PIL decode, Resize(256) + CenterCrop(224). `article`: float batches
    as the article makes them (ArticleDecode); otherwise uint8 batches (PILToTensor),
    normalized later in the training process."""

    def __init__(self, shards: List[Path], batch_size: int, article: bool) -> None:
        self.shards = shards
        self.batch_size = batch_size
        self.transform = (
            ArticleDecode()
            if article
            else T.Compose(
                [
                    T.Lambda(lambda im: im.convert("RGB")),
                    T.Resize(256),
                    T.CenterCrop(224),
                    T.PILToTensor(),
                ]
            )
        )

    def samples(self, shard: Path) -> Iterator[Tuple[torch.Tensor, int]]:
        with tarfile.open(shard) as tar:
            image, label, key = None, None, None
            for member in tar:
                stem, _, ext = member.name.partition(".")
                if stem != key:
                    image, label, key = None, None, stem
                if ext == "jpg":
                    with Image.open(tar.extractfile(member)) as im:
                        image = self.transform(im)
                elif ext == "cls":
                    label = int(tar.extractfile(member).read())
                if image is not None and label is not None:
                    yield image, label
                    image, label = None, None

    def __iter__(self) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
        info = torch.utils.data.get_worker_info()
        mine = self.shards[info.id :: info.num_workers] if info else self.shards
        images, labels = [], []
        for shard in mine:
            for image, label in self.samples(shard):
                images.append(image)
                labels.append(label)
                if len(images) == self.batch_size:
                    yield torch.stack(images), torch.tensor(labels)
                    images, labels = [], []


def seed_rate(shards: Path, a: argparse.Namespace, article: bool) -> Measure:
    """The seed's pipeline; CPU counts the main process and its DataLoader workers
    (reaped when each epoch's iterator ends)."""
    import shardcast

    dataset = SeedPipeline(sorted(shards.glob("*.tar")), a.batch, article)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=a.cores)
    images_seen = 0
    timer = Timer(children_cpu)
    for _ in range(a.seed_epochs):
        for images, labels in loader:
            if not article:  # the article's batches arrive normalized
                shardcast.normalize(images, "cpu")
            images_seen += labels.shape[0]
    return timer.measure(images_seen)


def served_rate(server: ServerProcess, job_id: str, a: argparse.Namespace) -> Measure:
    """shardcast-server + Loader; CPU counts this process and the server."""
    import shardcast

    with shardcast.Loader(
        server.address,
        job_id=job_id,
        batch_size=a.batch,
        world_size=1,
        rank=0,
        split="shard",
        transform="center",
        resize=256,
        crop=224,
    ) as loader:
        images_seen = 0
        timer = Timer(lambda: process_cpu(server.proc.pid))
        for _ in range(a.seed_epochs):
            for images, labels, _ in loader:
                shardcast.normalize(images, "cpu")
                images_seen += labels.shape[0]
        return timer.measure(images_seen)


def served_cpp_rate(
    binary: Path,
    server: ServerProcess,
    job_id: str,
    a: argparse.Namespace,
    mode: str = "batch_stream",
) -> Measure:
    """shardcast-server + a C++ consumer (bench/stream_consumer_bench, split sample):
    `batch_stream` is the trainer's BatchStream normalizing on the CPU; `wire` receives
    the uint8 batches as WireBatch and stops there, as a CUDA trainer's host side does
    but for its one pinned copy (it normalizes on the GPU). images/s as the consumer
    times it, CPU = consumer + server."""
    before = process_cpu(server.proc.pid)
    m = cpp_rate(
        binary,
        server.address,
        job_id,
        mode,
        argparse.Namespace(**{**vars(a), "resize": 256, "crop": 224}),
        a.seed_epochs,
    )
    server_us = 1e6 * (process_cpu(server.proc.pid) - before)
    return Measure(m.images_per_s, m.cpu_us_per_image + server_us / m.images, m.images)


def pack_photos(build: Path, photos: Path, out: Path, classes: int = 10) -> Tuple[Path, int]:
    """shardcast-pack of a flat directory of JPEGs, dealt round-robin into `classes`
    ImageFolder classes (symlinks), 64 samples per shard. Returns (dir, samples)."""
    files = sorted(p for p in photos.iterdir() if p.suffix.lower() in (".jpg", ".jpeg"))
    tree = out.with_name(out.name + "-tree")
    for i, f in enumerate(files):
        d = tree / f"class_{i % classes:03d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f.name).symlink_to(f.resolve())
    subprocess.run(
        [
            str(build / "tools" / "shardcast-pack"),
            "--per-shard",
            "64",
            "--quiet",
            str(tree),
            str(out),
        ],
        check=True,
    )
    return out, len(files)


# ---- the run ----------------------------------------------------------------------------


def run_rounds(rows: Dict[str, Callable[[str], Measure]], rounds: int) -> Dict[str, List[Measure]]:
    """Every row once per round, in order; the job id is unique per row and round."""
    results: Dict[str, List[Measure]] = {name: [] for name in rows}
    for r in range(rounds):
        for i, (name, run) in enumerate(rows.items()):
            m = run(f"r{r}-{i}")
            results[name].append(m)
            print(
                f"  round {r}: {name}: {m.images_per_s:,.0f} images/s, "
                f"{m.cpu_us_per_image:.1f} CPU us/image",
                flush=True,
            )
    return results


def median(values: List[Measure], field: str) -> float:
    return statistics.median(getattr(m, field) for m in values)


def ratio(new: List[Measure], base: List[Measure], field: str) -> str:
    """new / base per round: median (min..max)."""
    per_round = [getattr(n, field) / getattr(b, field) for n, b in zip(new, base)]
    return f"{statistics.median(per_round):.2f} " f"({min(per_round):.2f}..{max(per_round):.2f})"


def main() -> int:
    a = parse_args()
    build = a.build_dir.resolve()
    consumer = build / "bench" / "stream_consumer_bench"
    if not consumer.is_file():
        print(f"{consumer} missing: run bench/run_python_loader_bench.sh", file=sys.stderr)
        return 1
    use_source_package(build)
    torch.set_num_threads(1)  # as the C++ consumer: the no-op model's normalize on 1 thread
    servers: List[ServerProcess] = []
    with tempfile.TemporaryDirectory(prefix="python_loader_bench.") as tmp:
        try:
            print(
                f"machine: {os.cpu_count()} cores, load average "
                f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}; torch {torch.__version__}, "
                f"grpcio {grpc.__version__}",
                flush=True,
            )
            part_a: Dict[str, List[Measure]] = {}
            if not a.skip_a:
                data = pack_synthetic(
                    build, Path(tmp) / "a", a.samples, 256, f"{a.size}x{a.size}", 10
                )
                cores = sorted(os.sched_getaffinity(0))
                pin = a.pin and len(cores) >= 2
                client_cores = cores[1:] if pin else cores
                if pin:  # the decoding server inherits the first core
                    set_affinity(cores[:1])
                decoding = ServerProcess(build, data, ["--decode-threads", "1" if pin else "0"])
                servers.append(decoding)
                decoding.start()
                set_affinity(cores)
                wire = ServerProcess(build, data, ["--bench-only-resend-first-batch"])
                servers.append(wire)
                wire.start()
                wait_until_serving(decoding)
                wait_until_serving(wire)
                print(
                    f"(a) {a.samples} synthetic {a.size}x{a.size} JPEGs, center resize "
                    f"{a.resize} crop {a.crop}, B={a.batch}, {a.epochs} epochs per row "
                    f"({a.wire_epochs} on the wire-only server); decoding server "
                    + (
                        f"on core {cores[0]} (1 decode thread), its clients on cores "
                        f"{client_cores}"
                        if pin
                        else "and clients on all cores"
                    )
                    + "; wire-only server and clients on all cores",
                    flush=True,
                )
                d, w, e, we = decoding.address, wire.address, a.epochs, a.wire_epochs

                def on(cpus: List[int], row: Callable[[str], Measure]) -> Callable[[str], Measure]:
                    return lambda job_id: (set_affinity(cpus), row(job_id))[1]

                part_a = run_rounds(
                    {
                        "decode: C++ BatchStream": on(
                            client_cores, lambda j: cpp_rate(consumer, d, j, "batch_stream", a, e)
                        ),
                        "decode: Python Loader": on(
                            client_cores, lambda j: loader_rate(d, j, a, e)
                        ),
                        "decode: C++ raw": on(
                            client_cores, lambda j: cpp_rate(consumer, d, j, "raw", a, e)
                        ),
                        "decode: Python raw": on(
                            client_cores, lambda j: python_raw_rate(d, j, a, e)
                        ),
                        "wire: C++ raw": on(
                            cores, lambda j: cpp_rate(consumer, w, j, "raw", a, we)
                        ),
                        "wire: C++ WireBatch": on(
                            cores, lambda j: cpp_rate(consumer, w, j, "wire", a, we)
                        ),
                        "wire: Python raw": on(cores, lambda j: python_raw_rate(w, j, a, we)),
                    },
                    a.rounds,
                )
                set_affinity(cores)
                decoding.kill()
                wire.kill()

            if a.seed_photos:
                seed_data, a.seed_samples = pack_photos(build, a.seed_photos, Path(tmp) / "b")
                what = f"{a.seed_samples} photographs from {a.seed_photos}"
            else:
                seed_data = pack_synthetic(build, Path(tmp) / "b", a.seed_images, 64, "500x375", 10)
                a.seed_samples = a.seed_images
                what = f"{a.seed_images} synthetic 500x375 JPEGs"
            server = ServerProcess(build, seed_data, ["--decode-threads", str(a.cores)])
            servers.append(server)
            server.start()
            wait_until_serving(server)
            print(
                f"(b) {what}, Resize(256)+CenterCrop(224), B={a.batch}, {a.cores} "
                "DataLoader workers / server decode threads",
                flush=True,
            )
            part_b = run_rounds(
                {
                    "seed pipeline as the article writes it (decode torchrgb, float transform "
                    "+ Normalize in DataLoader workers)": lambda j: seed_rate(seed_data, a, True),
                    "seed pipeline, uint8 variant (PILToTensor in workers, normalize in the "
                    "training process)": lambda j: seed_rate(seed_data, a, False),
                    "shardcast-server + Python Loader (+ normalize)": lambda j: served_rate(
                        server, j, a
                    ),
                    "shardcast-server + C++ BatchStream (+ normalize)": lambda j: served_cpp_rate(
                        consumer, server, j, a
                    ),
                    "shardcast-server + C++ WireBatch reader (uint8; normalize left to a "
                    "GPU)": lambda j: served_cpp_rate(consumer, server, j, a, "wire"),
                },
                a.rounds,
            )
        finally:
            for s in servers:
                s.kill()

    mb = 3 * a.crop * a.crop / 1e6
    if part_a:
        print_part_a(part_a, a, mb)
    print_part_b(part_b, a)
    return 0


def print_part_a(part_a: Dict[str, List[Measure]], a: argparse.Namespace, mb: float) -> None:
    print(f"\n(a) median of {a.rounds} rounds; Python / C++ per round: median (min..max)")
    print(
        "| case | C++ images/s | Python images/s | Python / C++ | C++ CPU us/image "
        "| Python CPU us/image | Python / C++ CPU |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, cpp, py in [
        (
            "server-bound: BatchStream vs Loader (+ normalize)",
            "decode: C++ BatchStream",
            "decode: Python Loader",
        ),
        ("server-bound: raw reader (parse only)", "decode: C++ raw", "decode: Python raw"),
        ("wire only: raw reader (parse only)", "wire: C++ raw", "wire: Python raw"),
    ]:
        c, p = part_a[cpp], part_a[py]
        print(
            f"| {label} | {median(c, 'images_per_s'):,.0f} | {median(p, 'images_per_s'):,.0f} "
            f"| {ratio(p, c, 'images_per_s')} | {median(c, 'cpu_us_per_image'):.1f} "
            f"| {median(p, 'cpu_us_per_image'):.1f} | {ratio(p, c, 'cpu_us_per_image')} |"
        )
    print(
        f"(wire only, C++ raw: {median(part_a['wire: C++ raw'], 'images_per_s') * mb:,.0f} "
        "MB/s of pixels)"
    )
    raw, wire = part_a["wire: C++ raw"], part_a["wire: C++ WireBatch"]
    print(
        "\n(a) wire only, C++: the parse copy WireBatch avoids (header parsed, pixels left "
        "in the receive slices) against a full parse; WireBatch / parsed per round"
    )
    print("| reader | images/s | MB/s of pixels | CPU us/image |")
    print("|---|---:|---:|---:|")
    for label, values in [("generated stub, full parse", raw), ("WireBatch", wire)]:
        print(
            f"| {label} | {median(values, 'images_per_s'):,.0f} "
            f"| {median(values, 'images_per_s') * mb:,.0f} "
            f"| {median(values, 'cpu_us_per_image'):.1f} |"
        )
    print(
        f"| WireBatch / parsed | {ratio(wire, raw, 'images_per_s')} | "
        f"| {ratio(wire, raw, 'cpu_us_per_image')} |"
    )


def print_part_b(part_b: Dict[str, List[Measure]], a: argparse.Namespace) -> None:
    seed = next(iter(part_b.values()))
    print(f"\n(b) median of {a.rounds} rounds; x seed per round: median (min..max)")
    print("| pipeline | images/s | x seed | CPU ms/image (all processes) | x seed |")
    print("|---|---:|---:|---:|---:|")
    for name, values in part_b.items():
        print(
            f"| {name} | {median(values, 'images_per_s'):,.1f} "
            f"| {ratio(values, seed, 'images_per_s')} "
            f"| {median(values, 'cpu_us_per_image') / 1000:.2f} "
            f"| {ratio(values, seed, 'cpu_us_per_image')} |"
        )


if __name__ == "__main__":
    sys.exit(main())
