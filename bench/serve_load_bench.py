"""Load test of one real shardcast-server on loopback (issue 10): well-behaved ranks over
several jobs, plus clients that never read and clients that disconnect at random and
reconnect. Passes when nothing hangs, every well-behaved rank gets exactly n batches in
every epoch (and each job's ranks together get every sample at most once: split sample),
every flaky client ends each epoch with exactly batches 0..n-1, and the server's peak
RSS (VmHWM) stays within --max-batch-memory + --max-decode-memory + its own baseline.

The well-behaved ranks are the Python client (shardcast.Loader, one channel each), one
thread per rank; the bad clients speak the protocol by hand:
- a non-reader registers its own job, opens a stream and never reads; every 8 s (past
  the server's --stream-idle-timeout of 3 s) it drops it and opens another;
- a flaky client is rank 0 of its own job; it reads a random number of batches (0-3),
  then cancels the stream or closes its whole channel, waits 0-200 ms, and resumes at
  the first batch it did not receive, until it has every epoch.
The baseline is the server's VmHWM once it has indexed and every job is registered,
before any stream. Prints one table (docs/BENCHMARKS.md, "Load test").

    bench/run_serve_load_bench.sh [--ranks 64] [--jobs 2] [--non-readers 16] [--flaky 16]
"""

import argparse
import random
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))
from server_process import ServerProcess, pack_synthetic, use_source_package  # noqa: E402

import grpc  # noqa: E402

MiB = 1 << 20


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--build-dir",
        type=Path,
        default=Path("build"),
        help="shardcast-server and shardcast-pack are taken from here",
    )
    p.add_argument("--ranks", type=int, default=64, help="well-behaved ranks in all")
    p.add_argument("--jobs", type=int, default=2, help="jobs the ranks are split over")
    p.add_argument("--non-readers", type=int, default=16)
    p.add_argument("--flaky", type=int, default=16, help="clients that disconnect at random")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--samples", type=int, default=8192)
    p.add_argument("--size", default="96x96", help="image size of the synthetic data")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--crop", type=int, default=64)
    p.add_argument("--max-batch-memory", default="32MiB")
    p.add_argument("--max-decode-memory", default="64MiB")
    p.add_argument("--decode-threads", type=int, default=2)
    p.add_argument("--prefetch", type=int, default=4)
    p.add_argument("--idle-timeout", default="3s", help="the server's --stream-idle-timeout")
    p.add_argument(
        "--reopen-seconds",
        type=float,
        default=8.0,
        help="a non-reader opens a new stream this often",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=900.0,
        help="seconds: a run still going then is a hang, and fails",
    )
    p.add_argument("--seed", type=int, default=1, help="of the flaky clients' choices")
    p.add_argument("--work-dir", type=Path, default=Path("/tmp/shardcast-load-bench"))
    return p.parse_args()


def parse_size(text: str) -> int:
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    for unit, factor in units.items():
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * factor)
    return int(text)


def proc_status_bytes(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


class Shared:
    """What the threads report, under one lock; `stop` ends the bad clients."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.errors: List[str] = []
        self.counts: Dict[str, List[int]] = {}  # rank name -> batches per epoch
        self.keys: Dict[tuple, List[str]] = {}  # (job, epoch) -> keys received
        self.non_reader_streams = 0  # streams opened by non-readers
        self.non_reader_refused = 0  # RESOURCE_EXHAUSTED at open
        self.flaky_disconnects = 0
        self.flaky_done = 0

    def error(self, text: str) -> None:
        with self.lock:
            self.errors.append(text)


def well_behaved_rank(
    shardcast, address: str, args, job: str, rank: int, world: int, shared: Shared
) -> None:
    name = f"{job}/{rank}"
    try:
        loader = shardcast.Loader(
            address,
            batch_size=args.batch_size,
            job_id=job,
            rank=rank,
            world_size=world,
            split="sample",
            transform="center",
            resize=args.crop,
            crop=args.crop,
            prefetch=args.prefetch,
            stream_timeout=120.0,
        )
        counts = []
        for epoch in range(args.epochs):
            got = 0
            keys = []
            for _, _, info in loader:
                got += 1
                keys.extend(s.key for s in info)
            counts.append(got)
            if got != len(loader):
                shared.error(f"{name}: epoch {epoch}: {got} batches, n = {len(loader)}")
            with shared.lock:
                shared.keys.setdefault((job, epoch), []).extend(keys)
        loader.close()
        with shared.lock:
            shared.counts[name] = counts
    except Exception as e:  # noqa: BLE001 - reported, the run fails
        shared.error(f"{name}: {type(e).__name__}: {e}")


def register(pb, channel, args, job: str, world: int):
    call = channel.unary_unary(
        "/shardcast.v1.Shardcast/Register",
        request_serializer=pb.RegisterRequest.SerializeToString,
        response_deserializer=pb.RegisterResponse.FromString,
    )
    request = pb.RegisterRequest(
        job_id=job, rank=0, world_size=world, batch_size=args.batch_size, split=pb.SPLIT_SAMPLE
    )
    request.transform.mode = pb.TRANSFORM_MODE_CENTER
    request.transform.resize = args.crop
    request.transform.crop = args.crop
    return call(request, timeout=60)


def stream_method(pb, channel):
    return channel.unary_stream(
        "/shardcast.v1.Shardcast/StreamBatches",
        request_serializer=pb.StreamBatchesRequest.SerializeToString,
        response_deserializer=pb.Batch.FromString,
    )


def non_reader(pb, address: str, args, index: int, shared: Shared) -> None:
    job = f"idle-{index}"
    channel = grpc.insecure_channel(address, options=[("grpc.max_receive_message_length", -1)])
    try:
        register(pb, channel, args, job, 1)
        stream = stream_method(pb, channel)
        while not shared.stop.is_set():
            call = stream(pb.StreamBatchesRequest(job_id=job, rank=0, epoch=0))
            with shared.lock:
                shared.non_reader_streams += 1
            # Never read. The server cancels the stream after --stream-idle-timeout (a
            # client that never reads does not see that end: the unread batches come
            # first), so the attacker opens a new stream every --reopen-seconds.
            shared.stop.wait(args.reopen_seconds)
            if call.done() and call.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                with shared.lock:
                    shared.non_reader_refused += 1
            call.cancel()
    except Exception as e:  # noqa: BLE001
        shared.error(f"{job}: {type(e).__name__}: {e}")
    finally:
        channel.close()


def flaky(pb, address: str, args, index: int, world: int, shared: Shared) -> None:
    job = f"flaky-{index}"
    rng = random.Random(args.seed * 1000 + index)
    options = [("grpc.max_receive_message_length", -1)]
    channel = grpc.insecure_channel(address, options=options)
    try:
        n = register(pb, channel, args, job, world).batches_per_epoch
        for epoch in range(args.epochs):
            received: List[int] = []
            while len(received) < n:
                if shared.stop.is_set():
                    raise RuntimeError(f"stopped in epoch {epoch} at batch {len(received)}")
                call = stream_method(pb, channel)(
                    pb.StreamBatchesRequest(
                        job_id=job, rank=0, epoch=epoch, start_batch=len(received)
                    )
                )
                take = rng.randint(0, 3)
                try:
                    for batch in call:
                        received.append(batch.index)
                        take -= 1
                        if take < 0 or len(received) == n:
                            break
                except grpc.RpcError as e:
                    # A stream the server ended under this client (a replaced one, or
                    # out of memory budget): resume like any other break.
                    if e.code() not in (
                        grpc.StatusCode.CANCELLED,
                        grpc.StatusCode.RESOURCE_EXHAUSTED,
                        grpc.StatusCode.UNAVAILABLE,
                    ):
                        raise
                if len(received) == n:
                    call.cancel()
                    break
                if rng.random() < 0.5:
                    call.cancel()
                else:  # the whole connection goes
                    channel.close()
                    channel = grpc.insecure_channel(address, options=options)
                with shared.lock:
                    shared.flaky_disconnects += 1
                time.sleep(rng.uniform(0.0, 0.2))
            if received != list(range(n)):
                shared.error(f"{job}: epoch {epoch}: batches {received}, want 0..{n - 1}")
        with shared.lock:
            shared.flaky_done += 1
    except Exception as e:  # noqa: BLE001
        shared.error(f"{job}: {type(e).__name__}: {e}")
    finally:
        channel.close()


def status(pb, address: str):
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary(
            "/shardcast.v1.Shardcast/GetStatus",
            request_serializer=pb.GetStatusRequest.SerializeToString,
            response_deserializer=pb.GetStatusResponse.FromString,
        )
        return call(pb.GetStatusRequest(), timeout=30)


def main() -> int:
    args = parse_args()
    build = args.build_dir.resolve()
    use_source_package(build)
    import shardcast
    from shardcast._proto import pb

    if args.ranks % args.jobs:
        sys.exit("--ranks must be a multiple of --jobs")
    world = args.ranks // args.jobs
    args.work_dir.mkdir(parents=True, exist_ok=True)
    data = args.work_dir / f"shards-{args.samples}-{args.size}"
    if not data.exists():
        pack_synthetic(build, data, args.samples, 256, args.size, 10)
    server = ServerProcess(
        build,
        data,
        [
            "--decode-threads",
            str(args.decode_threads),
            "--prefetch",
            str(args.prefetch),
            "--max-batch-memory",
            args.max_batch_memory,
            "--max-decode-memory",
            args.max_decode_memory,
            "--stream-idle-timeout",
            args.idle_timeout,
            "--max-jobs",
            "0",
            # Every simulated client is this one host, many registering at once.
            "--max-unstreamed-jobs-per-peer",
            "0",
        ],
        log=args.work_dir / "server.log",
    )
    server.start()
    pid = server.proc.pid
    try:
        for _ in range(600):
            if status(pb, server.address).serving:
                break
            time.sleep(0.1)
        # Every job registered before any stream opens: the baseline includes them.
        with grpc.insecure_channel(server.address) as channel:
            for j in range(args.jobs):
                register(pb, channel, args, f"load-{j}", world)
            for i in range(args.non_readers):
                register(pb, channel, args, f"idle-{i}", 1)
            for i in range(args.flaky):
                register(pb, channel, args, f"flaky-{i}", world)
        time.sleep(0.5)
        baseline = proc_status_bytes(pid, "VmHWM")

        shared = Shared()
        good = [
            threading.Thread(
                target=well_behaved_rank,
                args=(shardcast, server.address, args, f"load-{j}", r, world, shared),
                daemon=True,
            )
            for j in range(args.jobs)
            for r in range(world)
        ]
        bad = [
            threading.Thread(
                target=non_reader, args=(pb, server.address, args, i, shared), daemon=True
            )
            for i in range(args.non_readers)
        ]
        flakies = [
            threading.Thread(
                target=flaky, args=(pb, server.address, args, i, world, shared), daemon=True
            )
            for i in range(args.flaky)
        ]
        start = time.monotonic()
        for t in bad + flakies + good:
            t.start()
        peak_rss = 0
        deadline = start + args.timeout
        while any(t.is_alive() for t in good + flakies) and time.monotonic() < deadline:
            peak_rss = max(peak_rss, proc_status_bytes(pid, "VmRSS"))
            time.sleep(0.1)
        hung = [t for t in good + flakies if t.is_alive()]
        seconds = time.monotonic() - start
        shared.stop.set()
        for t in bad:
            t.join(timeout=10)
        final = status(pb, server.address)
        hwm = proc_status_bytes(pid, "VmHWM")
    finally:
        server.kill()

    if hung:
        shared.error(f"{len(hung)} clients still running after {args.timeout:.0f} s: a hang")
    n = {}
    for (job, epoch), keys in shared.keys.items():
        if len(set(keys)) != len(keys):
            shared.error(f"{job} epoch {epoch}: {len(keys) - len(set(keys))} samples twice")
        n[job] = len(keys) // (world * args.batch_size)
    counts = [c for cs in shared.counts.values() for c in cs]
    rest = hwm - baseline - final.batch_memory_peak_reserved_bytes - final.decode_memory_peak_bytes
    bound = parse_size(args.max_batch_memory) + parse_size(args.max_decode_memory) + baseline

    print(
        f"load test: {args.ranks} ranks over {args.jobs} jobs (world {world}, batch "
        f"{args.batch_size}, {args.crop}x{args.crop}, split sample, {args.epochs} epochs of "
        f"{args.samples} samples), {args.non_readers} non-readers, {args.flaky} flaky "
        f"clients; --decode-threads {args.decode_threads} --prefetch {args.prefetch} "
        f"--max-batch-memory {args.max_batch_memory} --max-decode-memory "
        f"{args.max_decode_memory} --stream-idle-timeout {args.idle_timeout}"
    )
    print()
    print("| figure | value |")
    print("|---|---|")
    rows = [
        ("wall time (all well-behaved ranks and flaky clients done)", f"{seconds:.1f} s"),
        ("well-behaved ranks that finished", f"{len(shared.counts)} of {args.ranks}"),
        (
            "batches per rank per epoch (min / max; n)",
            f"{min(counts, default=0)} / {max(counts, default=0)}; "
            f"n = {sorted(set(n.values()))}",
        ),
        ("flaky clients with exactly 0..n-1 each epoch", f"{shared.flaky_done} of {args.flaky}"),
        ("flaky disconnects (cancel or channel closed) and resumes", shared.flaky_disconnects),
        (
            "non-reader streams opened / refused at once (RESOURCE_EXHAUSTED)",
            f"{shared.non_reader_streams} / {shared.non_reader_refused}",
        ),
        (
            "server: streams reclaimed idle / refused for memory / replaced",
            f"{final.streams_reclaimed_idle} / {final.streams_refused_memory} / "
            f"{final.streams_replaced}",
        ),
        (
            "server: peak batch memory reserved / limit",
            f"{final.batch_memory_peak_reserved_bytes / MiB:.1f} / "
            f"{final.batch_memory_limit_bytes / MiB:.1f} MiB",
        ),
        (
            "server: peak decode memory / limit",
            f"{final.decode_memory_peak_bytes / MiB:.1f} / "
            f"{final.decode_memory_limit_bytes / MiB:.1f} MiB",
        ),
        (
            "server baseline VmHWM (indexed, jobs registered, no stream)",
            f"{baseline / MiB:.1f} MiB",
        ),
        (
            "server peak RSS: VmHWM (sampled VmRSS max)",
            f"{hwm / MiB:.1f} MiB ({peak_rss / MiB:.1f} MiB)",
        ),
        ("bound: batch + decode budget + baseline", f"{bound / MiB:.1f} MiB"),
        (
            "peak RSS - baseline - peak batch reserved - peak decode (gRPC, threads, ...)",
            f"{rest / MiB:.1f} MiB",
        ),
        ("errors", len(shared.errors)),
    ]
    for name, value in rows:
        print(f"| {name} | {value} |")
    for e in shared.errors[:20]:
        print("error:", e)
    ok = not shared.errors and hwm <= bound and len(shared.counts) == args.ranks
    print("\nverdict:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
