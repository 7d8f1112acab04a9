#!/usr/bin/python3
"""shardcast-ctl inspect and index in memory that grows with shards (issue 46): the
peak resident memory (the child's ru_maxrss) of

  - `shardcast-ctl inspect DIR`                    (the report),
  - `shardcast-ctl inspect DIR --json --samples`   (every sample, to /dev/null),
  - `shardcast-ctl index DIR -o FILE`              (the dataset index file),

over members-only datasets of tiny samples (bench/index_memory_bench.py's, made when
missing) at equal shard count, beyond the same command over one shard of 100 samples,
divided by the samples; optionally beside another build's shardcast-ctl (--before) on
the same data, run in turn.

    /usr/bin/python3 bench/ctl_memory_bench.py --build-dir build \\
        [--sizes 100000,1000000] [--shards 100] [--before /path/to/old/shardcast-ctl]
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Tuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from index_memory_bench import make_dataset  # noqa: E402


def peak_rss(cmd: List[str]) -> Tuple[int, float]:
    """The command's peak RSS in bytes and its wall seconds; raises when it fails."""
    start = time.monotonic()
    with open(os.devnull, "wb") as devnull:
        proc = subprocess.Popen(cmd, stdout=devnull, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        err = proc.stderr.read().decode(errors="replace")
        proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {err}")
    return usage.ru_maxrss * 1024, time.monotonic() - start


def commands(ctl: str, data: Path, out: Path) -> List[Tuple[str, List[str]]]:
    return [
        ("inspect", [ctl, "inspect", str(data)]),
        ("inspect --json --samples", [ctl, "inspect", str(data), "--json", "--samples"]),
        ("index", [ctl, "index", str(data), "-o", str(out)]),
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build-dir", type=Path, default=Path("build"))
    p.add_argument("--sizes", default="100000,1000000")
    p.add_argument("--shards", type=int, default=100)
    p.add_argument("--work", type=Path, default=Path("/tmp/shardcast_index_memory_bench"))
    p.add_argument("--before", help="another shardcast-ctl to measure beside this one")
    args = p.parse_args()
    builds = [("this", str(args.build_dir.resolve() / "client" / "shardcast-ctl"))]
    if args.before:
        builds.append(("before", args.before))
    args.work.mkdir(parents=True, exist_ok=True)
    tiny = args.work / "tiny"
    if not tiny.exists():
        make_dataset(tiny, 100, 1)
    out = Path(tempfile.mkdtemp()) / "index.bin"
    base = {}
    for name, ctl in builds:
        for what, cmd in commands(ctl, tiny, out):
            base[name, what] = peak_rss(cmd)[0]
    rows = []
    for n in [int(s) for s in args.sizes.split(",")]:
        data = args.work / f"data-{n}"
        if not data.exists():
            make_dataset(data, n, args.shards)
        for name, ctl in builds:
            for what, cmd in commands(ctl, data, out):
                rss, secs = peak_rss(cmd)
                per = (rss - base[name, what]) / n
                rows.append((n, name, what, rss, per, secs))
                print(
                    f"{n:>9,} {name:>6} {what:<26} peak RSS {rss / 2**20:7.1f} MiB, "
                    f"{per:7.1f} B/sample beyond {base[name, what] / 2**20:.1f} MiB, {secs:.2f} s",
                    flush=True,
                )
    print()
    print("| samples | build | command | peak RSS | B/sample beyond the baseline | seconds |")
    print("|---:|---|---|---:|---:|---:|")
    for n, name, what, rss, per, secs in rows:
        print(f"| {n:,} | {name} | `{what}` | {rss / 2**20:.1f} MiB | {per:.1f} | {secs:.2f} |")


if __name__ == "__main__":
    main()
