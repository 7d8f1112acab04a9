"""Builds the shardcast package: what pyproject.toml cannot say.

- The stubs: build_py writes shardcast/v1/shardcast_pb2{,_grpc}.py into the build tree
  from ../proto (or $SHARDCAST_PROTO_DIR), so the installed package always matches the
  proto it was built from and no generated file is kept in git.
- The native client, shardcast._native: build_ext configures the shardcast source tree
  this folder lives in (python/..; or $SHARDCAST_SOURCE_DIR) with CMake, the trainer,
  tests and benchmarks off, and builds the one target shardcast_native against the
  system's gRPC, protobuf and abseil for the Python running this build. Needs what the
  project's build needs (docs/python.md, "Installing"): CMake >= 3.25, a C++17 compiler,
  the -dev packages of gRPC, protobuf, abseil, libarchive, libjpeg-turbo, libpng, and
  pybind11.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

# Without the wheel package, pip's build ends in "invalid command 'bdist_wheel'", which
# does not say what is missing.
try:
    import wheel  # noqa: F401
except ImportError:
    sys.exit("shardcast: building the package needs the 'wheel' package: apt-get install "
             "python3-wheel (Debian, offline) or pip install wheel")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from generate_stubs import DEFAULT_PROTO_DIR, generate  # noqa: E402


class BuildPyWithStubs(build_py):
    """build_py, then the stubs next to the copied sources."""

    def run(self) -> None:
        super().run()
        proto_dir = Path(os.environ.get("SHARDCAST_PROTO_DIR", DEFAULT_PROTO_DIR))
        generate(Path(self.build_lib), proto_dir)


def _pybind11_cmake_dir() -> str:
    """pybind11's CMake package: pip's (python -m pybind11 --cmakedir) or the system's."""
    try:
        import pybind11

        return pybind11.get_cmake_dir()
    except (ImportError, AttributeError):
        return ""


class BuildNativeWithCMake(build_ext):
    """The extension is one CMake target of the whole project (python/native)."""

    def build_extension(self, ext: Extension) -> None:
        source = Path(os.environ.get("SHARDCAST_SOURCE_DIR", HERE.parent)).resolve()
        if not (source / "python" / "native" / "CMakeLists.txt").is_file():
            raise RuntimeError(
                f"{source} is not a shardcast source tree: the native client is built from "
                "it (python/ inside it), or name one with $SHARDCAST_SOURCE_DIR"
            )
        build = Path(self.build_temp).resolve() / "cmake"
        out = build / "python-out"
        args = [
            "-DCMAKE_BUILD_TYPE=Release",
            "-DSHARDCAST_BUILD_TRAINER=OFF",
            "-DSHARDCAST_BUILD_TESTS=OFF",
            "-DSHARDCAST_BUILD_BENCH=OFF",
            "-DSHARDCAST_BUILD_PYTHON=ON",
            f"-DPython_EXECUTABLE={sys.executable}",
            f"-DSHARDCAST_PYTHON_OUTPUT_DIR={out}",
        ]
        if _pybind11_cmake_dir():
            args.append(f"-Dpybind11_DIR={_pybind11_cmake_dir()}")
        if shutil.which("ninja"):
            args += ["-G", "Ninja"]
        env = dict(os.environ)
        # ccache keys on paths; relative to the tree, a rebuild from another copy hits.
        env.setdefault("CCACHE_BASEDIR", str(source))
        env.setdefault("CCACHE_NOHASHDIR", "1")
        subprocess.run(["cmake", "-S", str(source), "-B", str(build)] + args, check=True,
                       env=env)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        subprocess.run(["cmake", "--build", str(build), "--target", "shardcast_native",
                        "-j", jobs], check=True, env=env)
        built = list((out / "shardcast").glob("_native*.so"))
        if len(built) != 1:
            raise RuntimeError(f"expected one _native*.so in {out / 'shardcast'}, got {built}")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built[0], target)


setup(
    ext_modules=[Extension("shardcast._native", sources=[])],
    cmdclass={"build_py": BuildPyWithStubs, "build_ext": BuildNativeWithCMake},
)
