#!/usr/bin/python3
"""How long a rank waits for a restarted server: the server is SIGKILLed mid-epoch and
started again on the same port after an outage of --outages seconds; printed is the time
from its "listening" line to the first batch the Loader hands out after it (that batch
was not buffered before the kill: the kill comes after the Loader took batches past its
prefetch). Rows, side by side in one run, each trial its own process: the Loader now (the
C++ client, shardcast._native) and the Loader before it (grpcio, python/ from git, as
native_loader_bench.py takes it). Figures in docs/BENCHMARKS.md ("Reconnecting").

    bench/run_reconnect_bench.sh [--outages 1,3] [--trials 3]
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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "python"))
sys.path.insert(0, str(HERE))
from native_loader_bench import before_tree  # noqa: E402
from server_process import pack_synthetic, python_env, use_source_package  # noqa: E402

# One trial: a server of its own, a Loader that drains 3 batches (prefetch 1, so more than
# what was buffered), the kill, the outage, the restart, then the time to the next batch.
TRIAL = textwrap.dedent(
    """
    import json, sys, time
    sys.path.insert(0, sys.argv[1])
    from pathlib import Path
    from server_process import ServerProcess
    import shardcast
    build, shards, outage = Path(sys.argv[2]), Path(sys.argv[3]), float(sys.argv[4])
    server = ServerProcess(build, shards, ["--decode-threads", "2"])
    server.start()
    try:
        loader = shardcast.Loader(server.address, job_id="reconnect", batch_size=8,
                                  world_size=1, rank=0, split="sample", resize=224, crop=224,
                                  prefetch=1)
        it = iter(loader)
        for _ in range(3):
            next(it)
        server.kill()
        # What the client had buffered when the server died comes first.
        time.sleep(outage)
        server.start()
        listening = time.monotonic()
        waits = []
        last = listening
        for _ in it:
            now = time.monotonic()
            waits.append(now - last)
            last = now
        print(json.dumps({"resumed_s": max(waits), "reconnects": loader.reconnects}))
    finally:
        server.kill()
"""
)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build-dir", type=Path, default=Path(os.environ.get("BUILD_DIR", "build")))
    p.add_argument("--outages", default="1,3", help="seconds the server stays down")
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--before", default="")
    a = p.parse_args()
    build = a.build_dir.resolve()
    use_source_package(build)
    rows = {"Loader (C++ client)": python_env(build)}
    results = {}
    with tempfile.TemporaryDirectory(prefix="reconnect_bench_") as tmp:
        rows["Loader before (grpcio)"] = before_tree(a.before, Path(tmp))
        shards = pack_synthetic(build, Path(tmp) / "shards", 240, 60, "256x256", 4)
        for outage in [float(x) for x in a.outages.split(",")]:
            for trial in range(a.trials):
                for name, env in rows.items():
                    run = subprocess.run(
                        [
                            sys.executable,
                            "-c",
                            TRIAL,
                            str(HERE.parent / "tests" / "python"),
                            str(build),
                            str(shards),
                            str(outage),
                        ],
                        capture_output=True,
                        text=True,
                        env=env,
                    )
                    if run.returncode != 0:
                        sys.exit(f"reconnect_bench: {name} failed:\n{run.stderr[-3000:]}")
                    got = json.loads(run.stdout.strip().splitlines()[-1])
                    results.setdefault((outage, name), []).append(got["resumed_s"])
                    print(f"  outage {outage:g} s, trial {trial}, {name}: {got}", flush=True)
    print(
        "\n| outage | client | seconds from the server listening to the next batch: "
        "median (min..max) |"
    )
    print("|---:|---|---|")
    for (outage, name), values in results.items():
        print(
            f"| {outage:g} s | {name} | {statistics.median(values):.2f} "
            f"({min(values):.2f}..{max(values):.2f}) |"
        )


if __name__ == "__main__":
    main()
