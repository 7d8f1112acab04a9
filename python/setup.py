"""Builds the shardcast package: what pyproject.toml cannot say.

- The stubs: build_py writes shardcast/v1/shardcast_pb2{,_grpc}.py into the build tree
  from ../proto (or $SHARDCAST_PROTO_DIR), so the installed package always matches the
  proto it was built from and no generated file is kept in git.
- The native client, shardcast._native, and the binaries shardcast-server,
  shardcast-ctl and shardcast-pack (shardcast/bin/, started by the console scripts of
  shardcast_bin.py): build_ext takes them from $SHARDCAST_BUILD_DIR when it is set (a
  build tree where `cmake --build DIR --target shardcast-server shardcast-ctl
  shardcast-pack shardcast_native` has run: nothing is compiled again), else it
  configures the shardcast source tree this folder lives in (python/..; or
  $SHARDCAST_SOURCE_DIR) with CMake, the trainer, tests and benchmarks off, and builds
  those four targets against the system's gRPC, protobuf and abseil for the Python
  running this build. Needs what the project's build needs (docs/python.md,
  "Installing"): CMake >= 3.25, a C++17 compiler, the -dev packages of gRPC, protobuf,
  abseil, libarchive, libjpeg-turbo, libpng, libwebp, libcurl, and pybind11.
  SHARDCAST_CLIENT_ONLY=1: the native module alone, no binaries.
- The shared libraries: bundle.py copies what those ELF files need (but glibc and the
  C++ runtime) into shardcast/lib/ and sets $ORIGIN RUNPATHs with patchelf, so the wheel
  runs where only Python (and torch) is installed.
- The platform tag: manylinux_X_Y for the glibc the wheel was built against
  (bdist_wheel below), checked against the symbol versions the files need.
"""

import importlib.machinery
import os
import platform
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
    sys.exit(
        "shardcast: building the package needs the 'wheel' package: apt-get install "
        "python3-wheel (Debian, offline) or pip install wheel"
    )

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bundle  # noqa: E402
from generate_stubs import DEFAULT_PROTO_DIR, generate  # noqa: E402

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70 (Debian 12: 66) has it from the wheel package
    from wheel.bdist_wheel import bdist_wheel


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


# The binaries the wheel carries: target name -> folder of the build tree it is written to.
# SHARDCAST_CLIENT_ONLY=1 leaves them out (a trainer-only install: 26 of the 95 compiles
# when built here; the console scripts then say what is missing).
BINARIES = {"shardcast-server": "server", "shardcast-ctl": "client", "shardcast-pack": "tools"}
if os.environ.get("SHARDCAST_CLIENT_ONLY", "") not in ("", "0"):
    BINARIES = {}
TARGETS = list(BINARIES) + ["shardcast_native"]

# Set by build_ext once the package is bundled: the wheel's platform tag.
_PLATFORM = {}


def _cache_value(build: Path, name: str) -> str:
    cache = build / "CMakeCache.txt"
    if cache.is_file():
        for line in cache.read_text(errors="replace").splitlines():
            if line.startswith(name + ":"):
                return line.split("=", 1)[1]
    return ""


def _built_files(build: Path) -> "tuple[Path, dict]":
    """The native module (for this Python) and the binaries in the build tree `build`."""
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    python_out = Path(_cache_value(build, "SHARDCAST_PYTHON_OUTPUT_DIR") or build / "python")
    native = python_out / "shardcast" / f"_native{suffix}"
    binaries = {name: build / folder / name for name, folder in BINARIES.items()}
    missing = [str(p) for p in [native] + list(binaries.values()) if not p.is_file()]
    if missing:
        raise RuntimeError(
            f"the build tree {build} lacks {', '.join(missing)}: build them with `cmake --build "
            f"{build} --target {' '.join(TARGETS)}` (the native module for {sys.executable}: "
            "-DPython_EXECUTABLE= when configuring), or unset SHARDCAST_BUILD_DIR to build here"
        )
    return native, binaries


def _glibc_platform() -> str:
    """manylinux_X_Y_ARCH for the glibc this build runs on (PEP 600)."""
    _, version = os.confstr("CS_GNU_LIBC_VERSION").split()
    major, minor = version.split(".")[:2]
    return f"manylinux_{major}_{minor}_{platform.machine()}"


class BuildNativeWithCMake(build_ext):
    """The extension is one CMake target of the whole project (python/native); the
    binaries are three more. All four, with the libraries they need, go into the package."""

    def build_extension(self, ext: Extension) -> None:
        prebuilt = os.environ.get("SHARDCAST_BUILD_DIR")
        if prebuilt:
            if not os.path.isabs(prebuilt):
                # pip runs this file in python/ (or a copy of it), not where it was called.
                raise RuntimeError(
                    f"SHARDCAST_BUILD_DIR={prebuilt} is relative; pip runs setup.py in another "
                    "folder: give an absolute path (e.g. SHARDCAST_BUILD_DIR=$PWD/build)"
                )
            build = Path(prebuilt).resolve()
            print(f"shardcast: taking the prebuilt targets from {build}")
        else:
            build = self._cmake_build()
        native, binaries = _built_files(build)

        target = Path(self.get_ext_fullpath(ext.name))
        package = target.parent
        package.mkdir(parents=True, exist_ok=True)
        bin_dir = package / "bin"
        if bin_dir.exists():  # pip builds in python/build/, which an earlier build left
            shutil.rmtree(bin_dir)
        if binaries:
            bin_dir.mkdir()
        copies = []
        for source, copy in [(native, target)] + [(p, bin_dir / n) for n, p in binaries.items()]:
            # The build's debug info stays in the build tree (a RelWithDebInfo tree's
            # binaries are several times their stripped size).
            subprocess.run(["strip", "--strip-debug", "-o", str(copy), str(source)], check=True)
            os.chmod(copy, 0o755)
            copies.append(copy)
        bundled = bundle.bundle(package, binaries=copies[1:], extensions=copies[:1])
        print(
            f"shardcast: bundled {len(bundled)} libraries into {package / 'lib'}: "
            + " ".join(bundled)
        )

        platform_tag = os.environ.get("SHARDCAST_WHEEL_PLATFORM") or _glibc_platform()
        needed = bundle.symbol_versions(bundle.elf_files(package))
        host_glibc = tuple(int(x) for x in os.confstr("CS_GNU_LIBC_VERSION").split()[1].split("."))
        if needed.get("GLIBC", ()) > host_glibc:
            platform_tag = f"linux_{platform.machine()}"
        _PLATFORM["tag"] = platform_tag
        print(f"shardcast: platform tag {platform_tag}; " + bundle.report(package))

    def _cmake_build(self) -> Path:
        source = Path(os.environ.get("SHARDCAST_SOURCE_DIR", HERE.parent)).resolve()
        if not (source / "python" / "native" / "CMakeLists.txt").is_file():
            raise RuntimeError(
                f"{source} is not a shardcast source tree: the native client and the binaries "
                "are built from it (python/ inside it); name one with $SHARDCAST_SOURCE_DIR, "
                "or a build tree with $SHARDCAST_BUILD_DIR"
            )
        build = Path(self.build_temp).resolve() / "cmake"
        args = [
            "-DCMAKE_BUILD_TYPE=Release",
            "-DSHARDCAST_BUILD_TRAINER=OFF",
            "-DSHARDCAST_BUILD_TESTS=OFF",
            "-DSHARDCAST_BUILD_BENCH=OFF",
            "-DSHARDCAST_BUILD_PYTHON=ON",
            f"-DPython_EXECUTABLE={sys.executable}",
            f"-DSHARDCAST_PYTHON_OUTPUT_DIR={build / 'python-out'}",
        ]
        if _pybind11_cmake_dir():
            args.append(f"-Dpybind11_DIR={_pybind11_cmake_dir()}")
        if shutil.which("ninja"):
            args += ["-G", "Ninja"]
        env = dict(os.environ)
        # ccache keys on paths; relative to the tree, a rebuild from another copy hits.
        env.setdefault("CCACHE_BASEDIR", str(source))
        env.setdefault("CCACHE_NOHASHDIR", "1")
        subprocess.run(["cmake", "-S", str(source), "-B", str(build)] + args, check=True, env=env)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        subprocess.run(
            ["cmake", "--build", str(build), "--target"] + TARGETS + ["-j", jobs],
            check=True,
            env=env,
        )
        return build


class BdistWheelWithPlatform(bdist_wheel):
    """The platform tag build_ext chose (manylinux_2_36_x86_64 on Debian 12), not
    linux_x86_64: the wheel carries every library but glibc's and the C++ runtime."""

    def get_tag(self):
        python, abi, plat = super().get_tag()
        return python, abi, _PLATFORM.get("tag") or plat


setup(
    ext_modules=[Extension("shardcast._native", sources=[])],
    cmdclass={
        "build_py": BuildPyWithStubs,
        "build_ext": BuildNativeWithCMake,
        "bdist_wheel": BdistWheelWithPlatform,
    },
)
