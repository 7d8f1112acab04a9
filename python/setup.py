"""Builds the shardcast package; the one thing pyproject.toml cannot say is the stubs.

build_py writes shardcast/v1/shardcast_pb2{,_grpc}.py into the build tree from
../proto (or $SHARDCAST_PROTO_DIR), so the installed package always matches the
proto it was built from and no generated file is kept in git.
"""

import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generate_stubs import DEFAULT_PROTO_DIR, generate  # noqa: E402


class BuildPyWithStubs(build_py):
    """build_py, then the stubs next to the copied sources."""

    def run(self) -> None:
        super().run()
        proto_dir = Path(os.environ.get("SHARDCAST_PROTO_DIR", DEFAULT_PROTO_DIR))
        generate(Path(self.build_lib), proto_dir)


setup(cmdclass={"build_py": BuildPyWithStubs})
