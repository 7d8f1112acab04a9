"""Fixtures of the Python client's tests: the built binaries, a synthetic dataset, and
the real shardcast-server on a free loopback port (server_process.py).

The package is imported from python/ with its stubs generated into the build folder
(the PYTHONPATH route of docs/python.md); test_install.py checks the pip route.
Binaries: $SHARDCAST_BUILD_DIR (default build/) must hold shardcast-server,
shardcast-ctl and shardcast-pack; a missing one fails the tests, it never skips them.
"""

import signal
import subprocess
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from server_process import ServerProcess, build_dir, pack_synthetic, use_source_package

BUILD = build_dir()
use_source_package(BUILD)
CTL_BIN = BUILD / "client" / "shardcast-ctl"

# The dataset every test uses: small, so 2 cores serve it quickly.
SAMPLES = 240
PER_SHARD = 50  # 5 shards: 50, 50, 50, 50, 40
CLASSES = 4
SIZE = 32
# The server's job defaults in these tests: images stay 32x32. The session's server takes
# every test's jobs from this one host, some never streaming (refusals, len() checks): the
# per-peer limit on such jobs would make the tests depend on their order.
SERVER_FLAGS = [
    "--resize",
    str(SIZE),
    "--crop",
    str(SIZE),
    "--decode-threads",
    "2",
    "--max-unstreamed-jobs-per-peer",
    "0",
]


@pytest.fixture(scope="session")
def shards(tmp_path_factory) -> Path:
    binaries = [BUILD / "server" / "shardcast-server", CTL_BIN, BUILD / "tools" / "shardcast-pack"]
    missing = [str(p) for p in binaries if not p.is_file()]
    if missing:
        pytest.fail(
            f"not built: {', '.join(missing)} (cmake --build {BUILD} --target shardcast-server "
            "shardcast-ctl shardcast-pack)"
        )
    out = tmp_path_factory.mktemp("data") / "shards"
    return pack_synthetic(BUILD, out, SAMPLES, PER_SHARD, f"{SIZE}x{SIZE}", CLASSES)


@pytest.fixture(scope="session")
def server(shards):
    """One server for the tests that do not stop it (each uses its own job ids)."""
    s = ServerProcess(BUILD, shards, SERVER_FLAGS)
    s.start()
    yield s
    s.kill(signal.SIGTERM)


@pytest.fixture
def own_server(shards):
    """A server a test may kill and restart."""
    s = ServerProcess(BUILD, shards, SERVER_FLAGS)
    s.start()
    yield s
    s.kill()


def ctl_plan(shards: Path, args: List[str]) -> Dict[Tuple[int, int, int], List[Tuple[int, int]]]:
    """`shardcast-ctl plan` for the config in `args`: (epoch, rank, batch) -> the
    (shard, index in shard) of each sample."""
    run = subprocess.run(
        [str(CTL_BIN), "plan", "--shards", str(shards)] + args, capture_output=True, text=True
    )
    if run.returncode != 0:
        pytest.fail(f"shardcast-ctl plan {' '.join(args)} failed: {run.stderr.strip()}")
    plan = {}
    for line in run.stdout.splitlines():
        epoch, rank, batch, samples = line.split()
        plan[(int(epoch), int(rank), int(batch))] = [
            tuple(int(x) for x in s.split(":")) for s in samples.split(",")
        ]
    return plan
