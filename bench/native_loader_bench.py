#!/usr/bin/python3
"""The Python Loader on the native client against the C++ readers and against the Loader
before it, side by side in one run on the same servers and data (docs/BENCHMARKS.md, "One
protocol client"). Part (a), a real decoding server:

  cpp_wire      the C++ WireBatch reader (bench/stream_consumer_bench --mode wire):
                receive, header parse, no checks, no tensors: what the wire costs C++
  loader        shardcast.Loader on shardcast._native: every batch received, checked and
                wrapped as tensors (images, labels, info), one value read
  loader_before the Loader as it was before the native client (grpcio and the Python
                protocol: python/ at --before, default the parent of the commit that
                added python/native), the same work
  spin_beside   a pure-Python thread counting alone in its process while the C++ wire
                reader drains the same server in another: its pace on a machine as busy
  spin_loader   the same thread while the Loader drains the server in its process: its
                pace against spin_beside is what the Loader leaves of the GIL (on 2
                cores the server's decoding competes for the cores in both)

Part (b), client-bound: the wire-only server (--bench-only-resend-first-batch, which
stamps each re-sent batch with its index), where the client's receive path is the
bottleneck: the C++ BatchStream (the trainer's input: float tensors, normalized) against
the Loader + normalize on the CPU, now and before.

Each row is its own process (client CPU = that process's user+system time, all threads);
rows run interleaved in rounds, figures are medians over rounds and ratios are taken per
round. In (a) on 2 cores the server is the bottleneck, so images/s are the server's; CPU
per image is the client's own cost either way.

    bench/run_native_loader_bench.sh [--sizes 224,64] [--rounds 3] [--epochs 2]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Dict, List

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests" / "python"))
from server_process import ServerProcess, pack_synthetic, python_env  # noqa: E402

# A child that drains `epochs` epochs through a Loader and prints one JSON line; with
# "spin", a Python thread counts meanwhile and its pace is printed too.
LOADER_CHILD = textwrap.dedent(
    """
    import json, resource, sys, threading, time
    import shardcast
    address, job, batch, size, epochs, spin, normalize = sys.argv[1:8]
    epochs, spin, normalize = int(epochs), spin == "1", normalize == "1"
    count, stop = 0, threading.Event()
    def spinner():
        global count
        while not stop.is_set():
            count += 1
    loader = shardcast.Loader(address, job_id=job, batch_size=int(batch), world_size=1,
                              rank=0, split="sample", transform="center", resize=int(size),
                              crop=int(size))
    thread = threading.Thread(target=spinner)
    if spin:
        thread.start()
    r0, t0, images, check = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter(), 0, 0
    c0 = count
    for _ in range(epochs):
        for x, y, info in loader:
            if normalize:
                check += float(shardcast.normalize(x, "cpu")[0, 0, 0, 0])
            else:
                check += int(x[0, 0, 0, 0]) + len(info)
            images += y.shape[0]
    wall = time.perf_counter() - t0
    spun = count - c0
    stop.set()
    if spin:
        thread.join()
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
    loader.close()
    print(json.dumps({"images": images, "images_per_s": images / wall,
                      "cpu_us_per_image": 1e6 * cpu / images, "spins_per_s": spun / wall}))
"""
)

# The same counting thread alone in its process, until its stdin closes.
SPIN_CHILD = textwrap.dedent(
    """
    import json, sys, threading, time
    count, stop = 0, threading.Event()
    def spinner():
        global count
        while not stop.is_set():
            count += 1
    thread = threading.Thread(target=spinner)
    start = time.perf_counter()
    thread.start()
    sys.stdin.read()
    stop.set()
    thread.join()
    print(json.dumps({"spins_per_s": count / (time.perf_counter() - start)}))
"""
)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build-dir", type=Path, default=Path(os.environ.get("BUILD_DIR", "build")))
    p.add_argument("--sizes", default="224,64", help="image sizes (crop = resize), comma-separated")
    p.add_argument("--samples", type=int, default=512)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--before",
        default="",
        help="git revision whose python/ is the 'before' Loader (default: the "
        "parent of the commit that added python/native)",
    )
    return p.parse_args()


def run_json(cmd: List[str], env: Dict[str, str]) -> dict:
    run = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if run.returncode != 0:
        sys.exit(
            f"native_loader_bench: {cmd[:3]} ... exited {run.returncode}:\n" f"{run.stderr[-3000:]}"
        )
    return json.loads(run.stdout.strip().splitlines()[-1])


def before_tree(rev: str, scratch: Path) -> Dict[str, str]:
    """python/ as of `rev` with its stubs, and the environment that imports it."""
    if not rev:
        added = subprocess.run(
            [
                "git",
                "-C",
                str(REPO),
                "log",
                "--diff-filter=A",
                "--format=%H",
                "--",
                "python/native/native_module.cc",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        if not added:
            sys.exit("native_loader_bench: python/native is not committed; pass --before REV")
        rev = added[-1] + "^"
    tree = scratch / "before"
    tree.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev, "python", "proto"], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    subprocess.run(
        [sys.executable, str(tree / "python" / "generate_stubs.py"), str(tree / "stubs")],
        check=True,
        capture_output=True,
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{tree / 'python'}:{tree / 'stubs'}"
    return env


def spin_beside_row(a, consumer: Path, address: str, size: int, env):
    """SPIN_CHILD for as long as a C++ wire reader drains `address` in another process."""

    def run(job: str) -> dict:
        spin = subprocess.Popen(
            [sys.executable, "-c", SPIN_CHILD],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        reader = consumer_row(a, consumer, address, "wire", size, env)(job)
        out, _ = spin.communicate("")
        return {
            **json.loads(out.strip().splitlines()[-1]),
            "reader_images_per_s": reader["images_per_s"],
        }

    return run


def consumer_row(a, consumer: Path, address: str, mode: str, size: int, env):
    return lambda job: run_json(
        [
            str(consumer),
            "--server",
            address,
            "--job-id",
            job,
            "--mode",
            mode,
            "--batch",
            str(a.batch),
            "--resize",
            str(size),
            "--crop",
            str(size),
            "--epochs",
            str(a.epochs),
            "--threads",
            "1",
        ],
        env,
    )


def loader_row(a, address: str, size: int, env, spin: bool, normalize: bool):
    return lambda job: run_json(
        [
            sys.executable,
            "-c",
            LOADER_CHILD,
            address,
            job,
            str(a.batch),
            str(size),
            str(a.epochs),
            "1" if spin else "0",
            "1" if normalize else "0",
        ],
        env,
    )


def run_rounds(rows, a: argparse.Namespace, label: str) -> Dict[str, List[dict]]:
    per_row: Dict[str, List[dict]] = {name: [] for name in rows}
    for r in range(a.rounds):
        for name, run in rows.items():
            per_row[name].append(run(f"{label}-{name}-{r}"))
            print(f"  {label} round {r} {name}: {per_row[name][-1]}", flush=True)
    return per_row


def main() -> None:
    a = parse_args()
    build = a.build_dir.resolve()
    consumer = build / "bench" / "stream_consumer_bench"
    from server_process import use_source_package

    use_source_package(build)  # generates the stubs into build/python
    now = python_env(build)
    sizes = [int(s) for s in a.sizes.split(",")]
    part_a: Dict[int, Dict[str, List[dict]]] = {}
    part_b: Dict[int, Dict[str, List[dict]]] = {}
    with tempfile.TemporaryDirectory(prefix="native_loader_bench_") as tmp:
        scratch = Path(tmp)
        before = before_tree(a.before, scratch)
        shards = pack_synthetic(build, scratch / "shards", a.samples, 64, "256x256", 10)
        flags = ["--decode-threads", str(os.cpu_count())]
        real = ServerProcess(build, shards, flags)
        wire = ServerProcess(build, shards, flags + ["--bench-only-resend-first-batch"])
        real.start(timeout=300)
        wire.start(timeout=300)
        try:
            for size in sizes:
                part_a[size] = run_rounds(
                    {
                        "cpp_wire": consumer_row(a, consumer, real.address, "wire", size, now),
                        "loader": loader_row(a, real.address, size, now, False, False),
                        "loader_before": loader_row(a, real.address, size, before, False, False),
                        "spin_beside": spin_beside_row(a, consumer, real.address, size, now),
                        "spin_loader": loader_row(a, real.address, size, now, True, False),
                    },
                    a,
                    f"a-{size}",
                )
                part_b[size] = run_rounds(
                    {
                        "batch_stream": consumer_row(
                            a, consumer, wire.address, "batch_stream", size, now
                        ),
                        "loader": loader_row(a, wire.address, size, now, False, True),
                        "loader_before": loader_row(a, wire.address, size, before, False, True),
                    },
                    a,
                    f"b-{size}",
                )
        finally:
            real.kill()
            wire.kill()
    print_table(part_a, part_b, a)


def median(rows: List[dict], field: str) -> float:
    return statistics.median(r[field] for r in rows)


def ratio(a_rows: List[dict], b_rows: List[dict], field: str) -> float:
    return statistics.median(x[field] / y[field] for x, y in zip(a_rows, b_rows))


def print_rows(part, names, base: str, field: str, last_column: str, suffix: str) -> None:
    """One table: each row's medians, and its ratio to the `base` row in `field`."""
    print(f"\n| size | reader | images/s | client CPU us/image | {last_column} |")
    print("|---:|---|---:|---:|---:|")
    for size, rows in part.items():
        for name in names:
            print(
                f"| {size} | {name} | {median(rows[name], 'images_per_s'):,.0f} | "
                f"{median(rows[name], 'cpu_us_per_image'):.1f} | "
                f"{ratio(rows[name], rows[base], field):.2f}{suffix} |"
            )


def print_table(part_a, part_b, a: argparse.Namespace) -> None:
    print(
        f"\nbatch {a.batch}, {a.samples} samples x {a.epochs} epochs per row, {a.rounds} "
        "rounds, medians; ratios per round, then the median"
    )
    print("\n(a) real server: client CPU per image")
    print_rows(
        part_a,
        ("cpp_wire", "loader", "loader_before"),
        "cpp_wire",
        "cpu_us_per_image",
        "of the C++ wire reader's",
        "x",
    )
    print(
        "\n| size | a Python thread's pace beside the Loader, of its pace beside the C++ "
        "reader in another process |"
    )
    print("|---:|---:|")
    for size, rows in part_a.items():
        print(f"| {size} | {ratio(rows['spin_loader'], rows['spin_beside'], 'spins_per_s'):.2f} |")
    print("\n(b) client-bound (wire-only server), normalized float batches on the CPU")
    print_rows(
        part_b,
        ("batch_stream", "loader", "loader_before"),
        "batch_stream",
        "images_per_s",
        "images/s of BatchStream's",
        "",
    )


if __name__ == "__main__":
    main()
