#!/usr/bin/env python3
"""Makes docs/status-page.png: a demo job of two ranks on a small synthetic dataset for
about 90 s (first paced like a training step, then as fast as the server serves, then
rank 1 stops taking batches), and headless chromium's screenshot of the status page
while rank 1 is flagged stalled.

    SHARDCAST_BUILD_DIR=build /usr/bin/python3 tools/status_page_demo.py [OUT.png]
"""

import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "python"))
from server_process import (  # noqa: E402
    ServerProcess,
    build_dir,
    pack_synthetic,
    use_source_package,
)

BUILD = build_dir()
use_source_package(BUILD)
import shardcast  # noqa: E402

PACED_S, FAST_S = 45, 35  # the two phases of the job
JOB = "resnet18-demo"


def rank_loop(server: ServerProcess, rank: int, stop: threading.Event, hold: threading.Event):
    start = time.monotonic()
    with shardcast.Loader(
        server.address,
        job_id=JOB,
        rank=rank,
        world_size=2,
        batch_size=16,
        prefetch=2,
        check_ranks=False,
    ) as loader:
        while not stop.is_set():
            for _ in loader:
                while hold.is_set() and not stop.is_set():
                    time.sleep(0.1)
                if stop.is_set():
                    return
                if time.monotonic() - start < PACED_S:
                    time.sleep(0.05)  # a "training step": the server waits for the client


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "status-page.png"
    with tempfile.TemporaryDirectory() as tmp:
        shards = pack_synthetic(BUILD, Path(tmp) / "shards", 2400, 200, "96x96", 10)
        server = ServerProcess(
            BUILD,
            shards,
            [
                "--resize",
                "64",
                "--crop",
                "64",
                "--decode-threads",
                "2",
                "--stall-warn",
                "3s",
                "--metrics-listen",
                "127.0.0.1:0",
            ],
        )
        server.start()
        stop, hold_rank1 = threading.Event(), threading.Event()
        holds = {0: threading.Event(), 1: hold_rank1}
        threads = [
            threading.Thread(target=rank_loop, args=(server, r, stop, holds[r])) for r in (0, 1)
        ]
        try:
            for t in threads:
                t.start()
            time.sleep(PACED_S + FAST_S)
            hold_rank1.set()  # rank 1 stops taking batches: flagged after --stall-warn
            time.sleep(8)
            subprocess.run(
                [
                    shutil.which("chromium"),
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--hide-scrollbars",
                    f"--screenshot={out}",
                    "--window-size=1200,900",
                    f"http://127.0.0.1:{server.metrics_port}/",
                ],
                check=True,
                timeout=60,
                capture_output=True,
            )
            print(f"wrote {out} ({out.stat().st_size} bytes)")
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=30)
            server.kill()


if __name__ == "__main__":
    main()
