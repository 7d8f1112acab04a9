"""The real shardcast-server as a child process, the synthetic shards it serves, and
the source-tree package, for the Python client's tests and for
bench/python_loader_bench.py (what tests/support/server_process.h is to the C++ ones).
"""

import os
import select
import signal
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

REPO = Path(__file__).resolve().parents[2]


def build_dir() -> Path:
    """$SHARDCAST_BUILD_DIR, default build/: where the binaries are."""
    return Path(os.environ.get("SHARDCAST_BUILD_DIR", REPO / "build")).resolve()


def use_source_package(build: Path) -> None:
    """Makes `import shardcast` load python/ with its stubs generated into
    build/python: the PYTHONPATH route of docs/python.md, stubs always fresh."""
    sys.path.insert(0, str(REPO / "python"))
    from generate_stubs import generate

    generate(build / "python")
    sys.path.insert(1, str(build / "python"))


def python_env(build: Path) -> Dict[str, str]:
    """The environment a child Python needs to import the package the same way."""
    env = dict(os.environ)
    paths = [str(REPO / "python"), str(build / "python")]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def pack_synthetic(
    build: Path, out: Path, samples: int, per_shard: int, size: str, classes: int
) -> Path:
    """shardcast-pack --synthetic: `samples` learnable JPEGs of `size` ("WxH")."""
    subprocess.run(
        [
            str(build / "tools" / "shardcast-pack"),
            "--synthetic",
            str(samples),
            "--per-shard",
            str(per_shard),
            "--size",
            size,
            "--classes",
            str(classes),
            "--quiet",
            str(out),
        ],
        check=True,
    )
    return out


class ServerProcess:
    """shardcast-server over `shards`; start() returns once it listens (its first stdout
    line names the port). restart() reuses the port, as a restarted daemon would."""

    def __init__(
        self,
        build: Path,
        shards: Path,
        flags: List[str],
        log: Optional[Path] = None,
        unix_socket: Optional[Path] = None,
    ) -> None:
        self.binary = build / "server" / "shardcast-server"
        self.shards = shards
        self.flags = flags
        self.log = log  # its stderr goes there (appended) when set
        self.unix_socket = unix_socket  # set: --listen unix:PATH instead of loopback TCP
        self.port = 0
        self.metrics_port = 0  # with --metrics-listen: the port of /metrics
        self.proc: Optional[subprocess.Popen] = None

    @property
    def address(self) -> str:
        if self.unix_socket is not None:
            return f"unix:{self.unix_socket}"
        return f"127.0.0.1:{self.port}"

    def start(self, extra_flags: Optional[List[str]] = None, timeout: float = 60.0) -> None:
        args = [str(self.binary), "--shards", str(self.shards), "--listen", self.address]
        args += ["--log-level", "warning"] + self.flags + (extra_flags or [])
        stderr = open(self.log, "a") if self.log is not None else None
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=stderr, text=True)
        if stderr is not None:
            stderr.close()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline().strip() if ready else ""
        if not line.startswith("shardcast-server listening on "):
            self.kill()
            raise RuntimeError(f"shardcast-server did not start: first line {line!r}")
        if self.unix_socket is None:
            self.port = int(line.rsplit(":", 1)[1])
        elif line != f"shardcast-server listening on {self.address}":
            self.kill()
            raise RuntimeError(f"not listening on {self.address}: {line!r}")
        if any(a.startswith("--metrics-listen") for a in args):
            # The second line: "shardcast-server metrics on http://HOST:PORT/metrics".
            line = self.proc.stdout.readline().strip()
            if not line.startswith("shardcast-server metrics on http://"):
                self.kill()
                raise RuntimeError(f"no metrics line: {line!r}")
            self.metrics_port = int(line.rsplit(":", 1)[1].split("/")[0])

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(sig)
                self.proc.wait(timeout=30)
            self.proc.stdout.close()
        self.proc = None

    def restart(self, extra_flags: Optional[List[str]] = None) -> None:
        self.kill()
        self.start(extra_flags)


# Reads one batch through the shardcast a venv installed (not python/ of the tree) and
# prints its shape and sample count; torch is imported first when asked, as a training
# script does.
_INSTALLED_LOADER_SCRIPT = """
import sys{torch}, shardcast
assert shardcast.__file__.startswith(sys.prefix), shardcast.__file__
with shardcast.Loader(sys.argv[1], job_id=sys.argv[2], batch_size=4, world_size=1,
                      rank=0) as loader:
    images, labels, info = next(iter(loader))
print(tuple(images.shape), len(info))
"""


def read_batch_with_installed_package(
    python: Path,
    address: str,
    job_id: str,
    env: Dict[str, str],
    cwd: Path,
    torch_first: bool = False,
) -> str:
    """The first line the venv's `python` prints: "(4, 3, 32, 32) 4" for this suite's data."""
    script = _INSTALLED_LOADER_SCRIPT.format(torch=", torch" if torch_first else "")
    out = subprocess.run(
        [str(python), "-c", script, address, job_id],
        check=True,
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
    )
    return out.stdout.split("\n")[0]
