"""Fixtures of the Python client's tests: the built binaries, a synthetic dataset, and
the real shardcast-server as a child process on a free loopback port.

The package is imported from python/ with its stubs generated into the build folder
(the PYTHONPATH route of docs/python.md); test_install.py checks the pip route.
Binaries: $SHARDCAST_BUILD_DIR (default build/) must hold shardcast-server,
shardcast-ctl and shardcast-pack; a missing one fails the tests, it never skips them.
"""

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("SHARDCAST_BUILD_DIR", REPO / "build")).resolve()
STUBS = BUILD / "python"

sys.path.insert(0, str(REPO / "python"))
from generate_stubs import generate  # noqa: E402

generate(STUBS)
sys.path.insert(1, str(STUBS))

SERVER_BIN = BUILD / "server" / "shardcast-server"
CTL_BIN = BUILD / "client" / "shardcast-ctl"
PACK_BIN = BUILD / "tools" / "shardcast-pack"

# The dataset every test but the benchmarks uses: small, so 2 cores serve it quickly.
SAMPLES = 240
PER_SHARD = 50  # 5 shards: 50, 50, 50, 50, 40
CLASSES = 4
SIZE = 32
# The server's job defaults in these tests: images stay 32x32.
SERVER_FLAGS = ["--resize", str(SIZE), "--crop", str(SIZE), "--decode-threads", "2"]


def pytest_configure(config) -> None:
    # The loader silences torch's warning about wrapping read-only received bytes
    # (shardcast/loader.py says why); pytest's own warning filters would bring it back.
    config.addinivalue_line("filterwarnings", "ignore:The given buffer is not writable")


def python_env() -> Dict[str, str]:
    """The environment a child Python needs to import the package like these tests do."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO / "python"), str(STUBS)] + ([env["PYTHONPATH"]] if "PYTHONPATH" in env else [])
    )
    return env


class ServerProcess:
    """shardcast-server over `shards`; start() returns once it listens (its first stdout
    line names the port). restart() reuses the port, as a restarted daemon would."""

    def __init__(self, shards: Path, flags: List[str]) -> None:
        self.shards = shards
        self.flags = flags
        self.port = 0
        self.proc: Optional[subprocess.Popen] = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, extra_flags: Optional[List[str]] = None, timeout: float = 30.0) -> None:
        args = [str(SERVER_BIN), "--shards", str(self.shards), "--listen", self.address]
        args += ["--log-level", "warning"] + self.flags + (extra_flags or [])
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline().strip() if ready else ""
        prefix = "shardcast-server listening on "
        if not line.startswith(prefix):
            self.kill()
            raise RuntimeError(f"shardcast-server did not start: first line {line!r}")
        self.port = int(line.rsplit(":", 1)[1])

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)
        if self.proc is not None:
            self.proc.stdout.close()
        self.proc = None

    def restart(self, extra_flags: Optional[List[str]] = None) -> None:
        self.kill()
        self.start(extra_flags)


@pytest.fixture(scope="session")
def binaries() -> None:
    missing = [str(p) for p in (SERVER_BIN, CTL_BIN, PACK_BIN) if not p.is_file()]
    if missing:
        pytest.fail(
            f"not built: {', '.join(missing)} (cmake --build {BUILD} --target shardcast-server "
            "shardcast-ctl shardcast-pack)"
        )


@pytest.fixture(scope="session")
def shards(binaries, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("data") / "shards"
    subprocess.run(
        [str(PACK_BIN), "--synthetic", str(SAMPLES), "--per-shard", str(PER_SHARD),
         "--size", f"{SIZE}x{SIZE}", "--classes", str(CLASSES), "--quiet", str(out)],
        check=True,
    )
    return out


@pytest.fixture(scope="session")
def server(shards):
    """One server for the tests that do not stop it (each uses its own job ids)."""
    s = ServerProcess(shards, SERVER_FLAGS)
    s.start()
    yield s
    s.kill(signal.SIGTERM)


@pytest.fixture
def own_server(shards):
    """A server a test may kill and restart."""
    s = ServerProcess(shards, SERVER_FLAGS)
    s.start()
    yield s
    s.kill()


def ctl_plan(shards: Path, args: List[str]) -> Dict[Tuple[int, int, int], List[Tuple[int, int]]]:
    """`shardcast-ctl plan` for the config in `args`: (epoch, rank, batch) -> the
    (shard, index in shard) of each sample."""
    out = subprocess.run(
        [str(CTL_BIN), "plan", "--shards", str(shards)] + args,
        check=True, capture_output=True, text=True,
    ).stdout
    plan = {}
    for line in out.splitlines():
        epoch, rank, batch, samples = line.split()
        plan[(int(epoch), int(rank), int(batch))] = [
            tuple(int(x) for x in s.split(":")) for s in samples.split(",")
        ]
    return plan


def wait_until(predicate, timeout: float = 10.0) -> None:
    until = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > until:
            raise TimeoutError("condition not met in time")
        time.sleep(0.02)
