#!/usr/bin/python3
"""Feed benchmark: how much of the model's speed each input pipeline delivers, side by
side in one run on one machine, the same model, precision, memory format and batch size,
the same shards:

  ceiling     one batch kept on the device: what the model itself takes
  seed        the seed article's pipeline, for real: webdataset (bench/third_party) with
              decode("torchrgb"), Resize(resize) + CenterCrop(crop) + /255 + Normalize in
              N DataLoader workers, split_by_node, batched(partial=False),
              repeat(nbatches=n).slice(n), feeding the Python training loop
  loader      shardcast-server on this machine + shardcast.Loader feeding the same loop
              (uint8 batches, normalize on the device)
  encoded-cpu   the same Loader with decode="cpu": the server sends the stored JPEGs
              and each sample's crop (delivery encoded), the Loader's native client
              decodes them on --decode-threads threads of this process
  encoded-cuda  the same with decode="cuda": the Loader decodes each batch on the GPU
              (nvJPEG through torchvision); skipped, with a line saying so, without CUDA
  train       shardcast-train (the C++ trainer, its built-in ResNet-18) on the same server

The Python rows run torchvision's resnet18, Adam, cross-entropy; shardcast-train builds
the same network (tests/client/resnet_conformance_test.cc). Each row: `--warmup` steps,
then `--seconds` timed. Printed per row: images/s, the share of the ceiling, the share
of the loop's wall time spent waiting for input, the host CPU per image of the trainer
(this process and its DataLoader workers; the ceiling row's figure is the model's own
share) and, for the shardcast rows, of the server, the wire bytes per image (the
server's bytes_served over images_served), and the server's two waiting figures over the
row (stream_wait_for_batch: its streams waited for batches, the clients waiting on
decode; stream_wait_for_client: written batches waited for their client, the server
waiting on the client).

    bench/run_feed_bench.sh [--photos DIR] [--device cuda] [--crop 224] ...

On a GPU machine this is one step of tools/gpu/device.sh. Here (2 cores, CPU) it runs
small: the figures are the method's, not a GPU's.
"""

import argparse
import functools
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, Iterator, Optional, Tuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "python"))
sys.path.insert(0, str(HERE / "third_party"))
from server_process import ServerProcess, pack_synthetic, use_source_package  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import torchvision  # noqa: E402
import torchvision.transforms as T  # noqa: E402

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]
ROWS = ["ceiling", "seed", "loader", "encoded-cpu", "encoded-cuda", "train"]
# The shardcast rows, whose server figures are reported.
SERVED_ROWS = ("loader", "encoded-cpu", "encoded-cuda", "train")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build-dir", type=Path, default=Path(os.environ.get("BUILD_DIR", "build")))
    p.add_argument(
        "--photos",
        type=Path,
        help="a directory of JPEGs (bench/make_photo_corpus.py); default: "
        "--synthetic generated images",
    )
    p.add_argument(
        "--copies",
        type=int,
        default=1,
        help="each photo packed this many times (distinct keys): a bigger epoch",
    )
    p.add_argument("--synthetic", type=int, default=1024, help="generated JPEGs when no --photos")
    p.add_argument("--synthetic-size", default="320x256")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--per-shard", type=int, default=80)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--resize", type=int, default=256)
    p.add_argument("--crop", type=int, default=224)
    p.add_argument(
        "--precision",
        choices=["bf16", "fp32"],
        default=None,
        help="default: bf16 on cuda, fp32 on cpu (shardcast-train's defaults)",
    )
    p.add_argument(
        "--channels-last",
        type=int,
        choices=[0, 1],
        default=None,
        help="default: 1 on cuda, 0 on cpu",
    )
    p.add_argument(
        "--workers", type=int, default=os.cpu_count(), help="the seed's DataLoader workers"
    )
    p.add_argument(
        "--decode-threads",
        type=int,
        default=os.cpu_count(),
        help="the server's decode threads, and the Loader's in the encoded rows",
    )
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--rows", default=",".join(ROWS), help="which rows, in order")
    p.add_argument("--json", type=Path, help="also write the results here")
    a = p.parse_args()
    if a.precision is None:
        a.precision = "bf16" if a.device.startswith("cuda") else "fp32"
    if a.channels_last is None:
        a.channels_last = int(a.device.startswith("cuda"))
    a.rows = [r for r in a.rows.split(",") if r]
    unknown = set(a.rows) - set(ROWS)
    if unknown:
        p.error(f"unknown rows {sorted(unknown)}; rows are {ROWS}")
    return a


# ---- data ----------------------------------------------------------------------------


def pack(a: argparse.Namespace, out: Path) -> int:
    """Shards of --photos (dealt round-robin into classes, each photo --copies times) or
    of generated images. Returns the sample count."""
    if a.photos is None:
        pack_synthetic(a.build_dir, out, a.synthetic, a.per_shard, a.synthetic_size, a.classes)
        return a.synthetic
    files = sorted(p for p in a.photos.iterdir() if p.suffix.lower() in (".jpg", ".jpeg"))
    if not files:
        sys.exit(f"feed_bench: no JPEGs in {a.photos}")
    tree = out.with_name(out.name + "-tree")
    n = 0
    for copy in range(a.copies):
        for i, f in enumerate(files):
            d = tree / f"class_{i % a.classes:03d}"
            d.mkdir(parents=True, exist_ok=True)
            (d / f"{copy:03d}-{f.name}").symlink_to(f.resolve())
            n += 1
    subprocess.run(
        [
            str(a.build_dir / "tools" / "shardcast-pack"),
            "--per-shard",
            str(a.per_shard),
            "--quiet",
            str(tree),
            str(out),
        ],
        check=True,
    )
    return n


# ---- the training loop every Python row shares -----------------------------------------


class Model:
    def __init__(self, a: argparse.Namespace):
        self.device = torch.device(a.device)
        self.autocast = a.precision == "bf16"
        self.memory_format = torch.channels_last if a.channels_last else torch.contiguous_format
        torch.manual_seed(0)
        self.net = torchvision.models.resnet18(num_classes=a.classes).to(self.device)
        self.net = self.net.to(memory_format=self.memory_format)
        self.opt = torch.optim.Adam(self.net.parameters(), lr=1e-4)
        if self.device.type == "cuda":
            torch.backends.cudnn.benchmark = True

    def step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        x = x.contiguous(memory_format=self.memory_format)
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.autocast):
            loss = F.cross_entropy(self.net(x), y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def process_tree_cpu_seconds(pid: int, exclude: Optional[int] = None) -> float:
    """User + system CPU seconds of a process, its reaped children and its live
    descendants (the seed's DataLoader workers) but `exclude`'s tree, from /proc."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    pending = [pid]
    while pending:
        p = pending.pop()
        if p == exclude:
            continue
        try:
            # Fields after the command's closing parenthesis: utime is the 14th field.
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(f) for f in fields[11:15]) / ticks
            for task in Path(f"/proc/{p}/task").iterdir():
                pending += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue  # it ended meanwhile
    return total


def cuda_missing(a: argparse.Namespace) -> Optional[str]:
    """Why a row that decodes on the GPU cannot run here, or None."""
    if not a.device.startswith("cuda"):
        return f"the model runs on {a.device}, not CUDA"
    if not torch.cuda.is_available():
        return "no CUDA device here"
    return None


def run_loop(
    model: Model, batches: Iterator[Tuple[torch.Tensor, torch.Tensor]], a: argparse.Namespace
) -> Dict[str, float]:
    """Warm-up steps, then steps for --seconds: images/s, the share of wall time spent
    in next(batches) (which includes moving the batch to the device) and the trainer's
    CPU per image over the timed steps."""
    for _ in range(a.warmup):
        model.step(*next(batches))
    model.sync()
    images = 0
    waited = 0.0
    cpu_before = a.trainer_cpu()
    start = time.perf_counter()
    while time.perf_counter() - start < a.seconds:
        t = time.perf_counter()
        x, y = next(batches)
        waited += time.perf_counter() - t
        model.step(x, y)
        images += x.shape[0]
    model.sync()
    wall = time.perf_counter() - start
    cpu = a.trainer_cpu() - cpu_before
    return {
        "images_per_s": images / wall,
        "wait_share": waited / wall,
        "images": images,
        "client_cpu_us_per_image": 1e6 * cpu / images,
    }


def forever(make_epoch) -> Iterator:
    for epoch in itertools.count():
        yield from make_epoch(epoch)


# ---- the rows --------------------------------------------------------------------------


def ceiling(a: argparse.Namespace, model: Model, **_) -> Dict[str, float]:
    x = torch.randn(a.batch, 3, a.crop, a.crop, device=model.device)
    y = torch.randint(0, a.classes, (a.batch,), device=model.device)
    return run_loop(model, itertools.repeat((x, y)), a)


def seed(a: argparse.Namespace, model: Model, shards: Path, samples: int, **_) -> Dict[str, float]:
    import webdataset as wds

    # The article's transform, on the float tensor decode("torchrgb") gives.
    transform = T.Compose(
        [
            T.Resize(a.resize),
            T.CenterCrop(a.crop),
            T.Lambda(lambda x: x / 255.0),
            T.Normalize(MEAN, STD),
        ]
    )
    urls = sorted(str(p) for p in shards.glob("*.tar"))
    dataset = (
        wds.WebDataset(urls, nodesplitter=wds.split_by_node, shardshuffle=False)
        .decode("torchrgb")
        .to_tuple("jpg", "cls")
        .map_tuple(transform, int)
        .batched(a.batch, partial=False)
    )
    n = samples // a.batch  # dataset_size // (batch_size * world_size), world size 1
    loader = wds.WebLoader(
        dataset,
        batch_size=None,
        shuffle=False,
        num_workers=a.workers,
        pin_memory=model.device.type == "cuda",
    )
    loader = loader.repeat(nbatches=n).slice(n)
    cuda = model.device.type == "cuda"

    def epoch(_):
        for x, y in loader:
            yield (
                x.to(model.device, non_blocking=cuda),
                torch.as_tensor(y).to(model.device, non_blocking=cuda),
            )

    return run_loop(model, forever(epoch), a)


SERVER_COUNTERS = {
    "wait_for_batch_s": "streamWaitForBatchSeconds",
    "wait_for_client_s": "streamWaitForClientSeconds",
    "images_served": "imagesServed",
    "bytes_served": "bytesServed",
}


def server_counters(a: argparse.Namespace, address: str) -> Dict[str, float]:
    out = subprocess.run(
        [str(a.build_dir / "client" / "shardcast-ctl"), "status", "--server", address, "--json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    status = json.loads(out)
    return {k: float(status.get(v, 0)) for k, v in SERVER_COUNTERS.items()}


def loader(
    a: argparse.Namespace, model: Model, server: ServerProcess, decode: Optional[str] = None, **_
) -> Dict[str, float]:
    """The Loader row; with `decode` ("cpu" or "cuda") the job's delivery is encoded and
    the Loader decodes."""
    import shardcast

    # On CUDA the pixels go from the received buffers into pinned memory (one host copy),
    # and normalize's transfer to the device is a DMA. Decoded on the GPU, the batch is
    # already there.
    decoding = {} if decode is None else {"decode": decode, "decode_threads": a.decode_threads}
    source = shardcast.Loader(
        server.address,
        batch_size=a.batch,
        transform="center",
        resize=a.resize,
        crop=a.crop,
        pin_memory=model.device.type == "cuda" and decode != "cuda",
        **decoding,
    )

    def epoch(e):
        source.set_epoch(e)
        for images, labels, _ in source:
            yield (
                shardcast.normalize(images, model.device),
                labels.to(model.device, non_blocking=model.device.type == "cuda"),
            )

    try:
        return run_loop(model, forever(epoch), a)
    finally:
        source.close()


def train(a: argparse.Namespace, server: ServerProcess, scratch: Path, **_) -> Dict[str, float]:
    """shardcast-train for warm-up + enough steps: its step lines past the warm-up give
    images/s (images over the summed step time) and the share waiting for input."""
    metrics = scratch / "train.jsonl"
    ceiling_hint = a.results.get("ceiling", {}).get("images_per_s", 0)
    steps = a.warmup + max(5, int(a.seconds * ceiling_hint / a.batch) if ceiling_hint else 20)
    cmd = [
        str(a.build_dir / "client" / "shardcast-train"),
        "--server",
        server.address,
        "--device",
        a.device,
        "-b",
        str(a.batch),
        "--resize",
        str(a.resize),
        "--crop",
        str(a.crop),
        "--transform",
        "center",
        "--precision",
        a.precision,
        f"--channels-last={'true' if a.channels_last else 'false'}",
        "--epochs",
        "1000",
        "--max-steps",
        str(steps),
        "--no-progress",
        "--metrics",
        str(metrics),
    ]
    cpu_before = a.trainer_cpu()
    run = subprocess.run(cmd, capture_output=True, text=True)
    cpu = a.trainer_cpu() - cpu_before  # reaped: its CPU counts as this process's children's
    if run.returncode != 0:
        raise RuntimeError(f"shardcast-train exited {run.returncode}: {run.stderr[-2000:]}")
    steps_done = [json.loads(line) for line in open(f"{metrics}.rank0")]
    steps_done = [step for step in steps_done if step.get("event") == "step"]
    # Wall time from the end of the last warm-up step to the end of the last step, as
    # the Python rows measure it.
    timed = steps_done[a.warmup :]
    wall = timed[-1]["time"] - steps_done[a.warmup - 1]["time"]
    images = a.batch * len(timed)
    # Its CPU is measured over the whole run (start-up and warm-up included).
    all_images = a.batch * len(steps_done)
    return {
        "images_per_s": images / wall,
        "wait_share": sum(step["wait_s"] for step in timed) / wall,
        "images": images,
        "client_cpu_us_per_image": 1e6 * cpu / all_images,
    }


# ---- the run ---------------------------------------------------------------------------


def main() -> None:
    a = parse_args()
    a.build_dir = a.build_dir.resolve()
    use_source_package(a.build_dir)
    a.results = {}
    a.skipped = {}
    with tempfile.TemporaryDirectory(prefix="feed_bench_") as tmp:
        scratch = Path(tmp)
        shards = scratch / "shards"
        samples = pack(a, shards)
        server = ServerProcess(
            a.build_dir,
            shards,
            ["--decode-threads", str(a.decode_threads)],
            log=scratch / "server.log",
        )
        server.start(timeout=300)
        server_pid = server.proc.pid
        a.trainer_cpu = lambda: process_tree_cpu_seconds(os.getpid(), exclude=server_pid)
        try:
            print(
                f"feed_bench: {samples} samples in {len(list(shards.glob('*.tar')))} shards "
                f"({'photos from ' + str(a.photos) if a.photos else 'generated'}); "
                f"{a.device}, ResNet-18 at {a.crop} (resize {a.resize}), batch {a.batch}, "
                f"{a.precision}, {'channels_last' if a.channels_last else 'NCHW'}; "
                f"seed workers {a.workers}, server decode threads {a.decode_threads}; "
                f"{a.warmup} warm-up steps, {a.seconds:g} s timed",
                flush=True,
            )
            # The process's first steps are slow (allocator, kernel selection, caches):
            # warm up on a throwaway model so the first row measured is not penalized.
            warm = Model(a)
            for _ in range(a.warmup):
                warm.step(
                    torch.randn(a.batch, 3, a.crop, a.crop, device=warm.device),
                    torch.zeros(a.batch, dtype=torch.int64, device=warm.device),
                )
            del warm
            rows = {
                "ceiling": ceiling,
                "seed": seed,
                "loader": loader,
                "encoded-cpu": functools.partial(loader, decode="cpu"),
                "encoded-cuda": functools.partial(loader, decode="cuda"),
                "train": train,
            }
            for name in a.rows:
                skip = cuda_missing(a) if name == "encoded-cuda" else None
                if skip:
                    a.skipped[name] = skip
                    print(f"  {name}: skipped: {skip}", flush=True)
                    continue
                before = server_counters(a, server.address)
                server_cpu = process_tree_cpu_seconds(server_pid)
                model = Model(a) if name != "train" else None
                result = rows[name](
                    a, model=model, shards=shards, samples=samples, server=server, scratch=scratch
                )
                server_cpu = process_tree_cpu_seconds(server_pid) - server_cpu
                after = server_counters(a, server.address)
                if name in SERVED_ROWS:
                    # Over the whole row, per image the server sent: the server works
                    # ahead of the timed steps.
                    delta = {k: after[k] - before[k] for k in after}
                    served = max(delta["images_served"], 1)
                    result["server_cpu_us_per_image"] = 1e6 * server_cpu / served
                    result["wire_bytes_per_image"] = delta["bytes_served"] / served
                    result["server_waited_for_batches_s"] = delta["wait_for_batch_s"]
                    result["server_waited_for_client_s"] = delta["wait_for_client_s"]
                a.results[name] = result
                print(
                    f"  {name}: {json.dumps({k: round(v, 4) for k, v in result.items()})}",
                    flush=True,
                )
                del model
        finally:
            server.kill()
    print_table(a)
    if a.json:
        a.json.write_text(
            json.dumps(
                {
                    "args": {
                        k: str(v)
                        for k, v in vars(a).items()
                        if k not in ("results", "skipped", "trainer_cpu")
                    },
                    "results": a.results,
                    "skipped": a.skipped,
                },
                indent=1,
            )
        )


def print_table(a: argparse.Namespace) -> None:
    top = a.results.get("ceiling", {}).get("images_per_s")
    names = {
        "ceiling": "one batch kept on the device (ceiling)",
        "seed": f"seed: webdataset + {a.workers} DataLoader workers",
        "loader": "shardcast-server + shardcast.Loader",
        "encoded-cpu": 'encoded + decode cpu (Loader, decode="cpu")',
        "encoded-cuda": 'encoded + decode cuda (Loader, decode="cuda")',
        "train": "shardcast-server + shardcast-train",
    }
    print()
    print(
        "| input | images/s | of the ceiling | waiting for input | trainer CPU / image | "
        "server CPU / image | wire bytes / image | server waited for batches / for the "
        "client |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for name in a.rows:
        if name in a.skipped:
            print(f"| {names[name]} | skipped: {a.skipped[name]} | | | | | | |")
            continue
        r = a.results[name]
        share = f"{r['images_per_s'] / top:.2f}" if top else "-"
        served = "server_waited_for_batches_s" in r
        server_cpu = f"{r['server_cpu_us_per_image']:,.0f} us" if served else ""
        wire = f"{r['wire_bytes_per_image']:,.0f}" if served else ""
        waits = (
            f"{r['server_waited_for_batches_s']:.1f} s / {r['server_waited_for_client_s']:.1f} s"
            if served
            else ""
        )
        print(
            f"| {names[name]} | {r['images_per_s']:,.0f} | {share} | "
            f"{100 * r['wait_share']:.0f} % | {r['client_cpu_us_per_image']:,.0f} us | "
            f"{server_cpu} | {wire} | {waits} |"
        )


if __name__ == "__main__":
    main()
