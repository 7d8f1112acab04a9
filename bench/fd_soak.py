#!/usr/bin/python3
"""Soak at the descriptor limit: shardcast-server under `prlimit --nofile=LIMIT:LIMIT`
with its default --max-connections, while, for --minutes,
  - a flood opens --flood plain TCP connections (beyond the connection limit), holds them
    --hold seconds and closes them, over and over;
  - after each wave, a new client (`shardcast-ctl health`, its own connection) is timed
    until the server answers SERVING again (the listener must never be lost);
  - a training rank (shardcast.Loader) reads epoch after epoch through it all, each epoch
    checked to be exactly len(loader) batches;
  - /metrics is scraped every second: descriptors open, connections refused, the
    listener probe's verdict.
Printed: one table of what was measured. Results in docs/testing.md ("Soak at the
descriptor limit").

    bench/run_fd_soak.sh [--minutes 3] [--limit 1024] [--flood 700] [--hold 1]
                         [--server-flags '--max-connections 0']
"""

import argparse
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "python"))
from server_process import ServerProcess, pack_synthetic, use_source_package  # noqa: E402


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise KeyError(name)


class Soak:
    def __init__(self, args, build: Path, server: ServerProcess):
        self.args = args
        self.ctl = build / "client" / "shardcast-ctl"
        self.server = server
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.waves = 0
        self.connects = 0
        self.connect_failures = 0
        self.recoveries = []  # seconds from the wave's close to SERVING on a new client
        self.not_recovered = 0
        self.epochs = 0
        self.exact_epochs = 0
        self.trainer_error = ""
        self.scrapes = 0
        self.scrape_failures = 0
        self.max_descriptors = 0
        self.min_accepting = 1
        self.refused = 0
        self.max_connections = 0
        self.max_per_peer = 0

    def healthy(self) -> bool:
        result = subprocess.run(
            [str(self.ctl), "health", "--server", self.server.address, "--rpc-timeout", "2s"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return result.returncode == 0

    def flood(self) -> None:
        while not self.stop.is_set():
            held = []
            for _ in range(self.args.flood):
                try:
                    # From 127.0.0.2: another peer than the trainer's 127.0.0.1, as a
                    # flooding host would be.
                    held.append(
                        socket.create_connection(
                            ("127.0.0.1", self.server.port), 1, source_address=("127.0.0.2", 0)
                        )
                    )
                except OSError:
                    with self.lock:
                        self.connect_failures += 1
            time.sleep(self.args.hold)
            for s in held:
                s.close()
            closed = time.monotonic()
            recovered = False
            while time.monotonic() - closed < 30 and not self.stop.is_set():
                if self.healthy():
                    recovered = True
                    break
            if not recovered and self.stop.is_set():
                break  # the soak ended during this wave's wait: not a finding
            with self.lock:
                self.waves += 1
                self.connects += len(held)
                if recovered:
                    self.recoveries.append(time.monotonic() - closed)
                else:
                    self.not_recovered += 1

    def train(self) -> None:
        import shardcast

        try:
            loader = shardcast.Loader(
                self.server.address,
                batch_size=32,
                job_id="soak",
                rank=0,
                world_size=1,
                resize=64,
                crop=56,
                reconnect_deadline=60,
            )
            epoch = 0
            while not self.stop.is_set():
                loader.set_epoch(epoch)
                batches = sum(1 for _ in loader)
                with self.lock:
                    self.epochs += 1
                    self.exact_epochs += batches == len(loader)
                epoch += 1
        except Exception as e:  # reported in the table, not raised: the soak goes on
            self.trainer_error = f"{type(e).__name__}: {e}"

    def scrape(self) -> None:
        url = f"http://127.0.0.1:{self.server.metrics_port}/metrics"
        while not self.stop.wait(1.0):
            try:
                text = urllib.request.urlopen(url, timeout=5).read().decode()
            except OSError:
                with self.lock:
                    self.scrape_failures += 1
                continue
            with self.lock:
                self.scrapes += 1
                self.max_descriptors = max(
                    self.max_descriptors, int(metric(text, "shardcast_open_descriptors"))
                )
                self.min_accepting = min(
                    self.min_accepting, int(metric(text, "shardcast_listener_accepting"))
                )
                self.refused = int(metric(text, "shardcast_connections_refused_total"))
                self.max_connections = int(metric(text, "shardcast_max_connections"))
                self.max_per_peer = int(metric(text, "shardcast_max_connections_per_peer"))

    def run(self) -> None:
        threads = [threading.Thread(target=f) for f in (self.flood, self.train, self.scrape)]
        for t in threads:
            t.start()
        time.sleep(self.args.minutes * 60)
        self.stop.set()
        for t in threads:
            t.join()

    def table(self) -> str:
        r = sorted(self.recoveries)
        rows = [
            ("minutes", f"{self.args.minutes:g}"),
            ("descriptor limit (soft = hard)", str(self.args.limit)),
            ("--max-connections (default)", str(self.max_connections)),
            ("--max-connections-per-peer (default)", str(self.max_per_peer)),
            ("flood waves", str(self.waves)),
            ("flood connections opened", str(self.connects)),
            ("flood connects that failed", str(self.connect_failures)),
            ("connections refused by the server", str(self.refused)),
            ("most descriptors open (scraped)", str(self.max_descriptors)),
            ("listener accepting, lowest seen", str(self.min_accepting)),
            ("waves after which a new client got SERVING", f"{len(r)} of {self.waves}"),
            (
                "  time to SERVING after a wave, median / max",
                f"{statistics.median(r):.2f} s / {r[-1]:.2f} s" if r else "-",
            ),
            ("trainer epochs read / of exactly n batches", f"{self.epochs} / {self.exact_epochs}"),
            ("trainer error", self.trainer_error or "none"),
            ("/metrics scrapes answered / failed", f"{self.scrapes} / {self.scrape_failures}"),
        ]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build-dir", type=Path, required=True)
    parser.add_argument("--minutes", type=float, default=3)
    parser.add_argument("--limit", type=int, default=1024)
    parser.add_argument("--flood", type=int, default=700)
    parser.add_argument("--hold", type=float, default=1.0)
    parser.add_argument(
        "--server-flags",
        default="",
        help="more server flags, e.g. '--max-connections 0' for the run "
        "without a connection limit",
    )
    args = parser.parse_args()
    build = args.build_dir.resolve()
    use_source_package(build)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        shards = pack_synthetic(build, tmp / "shards", 2000, 250, "64x64", 10)
        # The server is started under prlimit: soft and hard lowered before it runs, so
        # its own raise to the hard limit keeps it at --limit.
        wrapper = tmp / "shardcast-server"
        wrapper.write_text(
            f"#!/bin/sh\nexec /usr/bin/prlimit --nofile={args.limit}:{args.limit}"
            f" -- {build / 'server' / 'shardcast-server'} \"$@\"\n"
        )
        wrapper.chmod(0o755)
        log = tmp / "server.log"
        server = ServerProcess(
            build,
            shards,
            ["--metrics-listen", "127.0.0.1:0", "--decode-threads", "2"]
            + args.server_flags.split(),
            log=log,
        )
        server.binary = wrapper
        server.start()
        try:
            soak = Soak(args, build, server)
            soak.run()
            alive = server.proc.poll() is None
        finally:
            server.kill()
        print(soak.table())
        print(f"{'server alive at the end':<44}  {'yes' if alive else 'NO'}")
        errors = [
            line
            for line in log.read_text(errors="replace").splitlines()
            if "Failed accept4" in line or "accepts no connections" in line
        ]
        print(f"{'listener lost (log lines)':<44}  {len(errors)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
