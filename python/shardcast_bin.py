"""The console scripts of the wheel: shardcast-server, shardcast-ctl, shardcast-pack.

The wheel carries the C++ binaries under shardcast/bin/ and the shared libraries they
need under shardcast/lib/ (found through their $ORIGIN-relative RUNPATH, set when the
wheel was built: python/bundle.py). Each entry point replaces this Python process with
the binary (os.execv), passing argv on, so signals (SIGTERM's drain, Ctrl-C), the exit
code and the process id are the binary's own, as if it had been started directly.

A top-level module beside the package, not shardcast._bin: importing anything inside
the package runs shardcast/__init__.py, which imports torch (3-4 s before every
`shardcast-ctl health`); this module imports nothing but os, sys and pathlib, so a
console script starts its binary in ~50 ms.
"""

import os
import sys
from pathlib import Path

# site-packages/shardcast_bin.py -> site-packages/shardcast/bin/
BIN_DIR = Path(__file__).resolve().parent / "shardcast" / "bin"


def path(name: str) -> Path:
    """The bundled binary `name` (e.g. "shardcast-server")."""
    return BIN_DIR / name


def _exec(name: str) -> None:
    binary = path(name)
    if not os.access(binary, os.X_OK):
        sys.exit(
            f"{name}: {binary} is missing or not executable: this shardcast package was "
            "installed without its binaries (built with SHARDCAST_CLIENT_ONLY=1, or a source "
            "tree on PYTHONPATH); build the wheel with `pip wheel ./python` "
            '(docs/python.md, "Installing")'
        )
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(str(binary), [name] + sys.argv[1:])


def server() -> None:
    _exec("shardcast-server")


def ctl() -> None:
    _exec("shardcast-ctl")


def pack() -> None:
    _exec("shardcast-pack")
