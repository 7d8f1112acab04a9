"""Makes the wheel self-contained, the way auditwheel repairs a wheel: the shared
libraries the bundled ELF files need (the DT_NEEDED closure, as `ldd` resolves it) are
copied into shardcast/lib/, and every ELF file in the package gets a RUNPATH relative to
$ORIGIN (Debian's `patchelf`), so the binaries and the extension find them wherever the
wheel is installed, with LD_LIBRARY_PATH empty.

Left to the host (never copied): glibc's libraries (libc, libm, libdl, librt, libpthread,
libresolv, libutil, libanl, the dynamic loader) and the C++ runtime (libstdc++,
libgcc_s): a process that imports torch has loaded them already, and a second copy of
glibc cannot be loaded beside the first. Everything else is copied under its own soname
(not renamed, unlike auditwheel): in a Python process that already loaded a library of
that soname (Debian's torch loads libprotobuf.so.32) the dynamic loader reuses it, the
same library the source install links, instead of a second copy whose symbols would be
interposed by the first; elsewhere the bundled one is loaded.

Used by setup.py (build_ext); `python3 bundle.py DIR` prints the report of a package
folder that is already bundled (its glibc and libstdc++ symbol versions).
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterable, List, Tuple

# Sonames the host must provide (the manylinux policies' core, less what the wheel can
# carry itself).
HOST_LIBRARIES = re.compile(
    r"^(linux-vdso|linux-gate|ld-linux[-.\w]*|libc|libm|libdl|librt|libpthread|libresolv|"
    r"libutil|libanl|libmvec|libnsl|libBrokenLocale|libnss_\w+|libstdc\+\+|libgcc_s)"
    r"\.so(\.\d+)*$"
)

_LDD_LINE = re.compile(r"^\s*(\S+)\s+=>\s+(.*?)\s*(\(0x[0-9a-f]+\))?$")


def _run(args: List[str], **kwargs) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True, **kwargs).stdout


def host_env() -> Dict[str, str]:
    """The environment without LD_LIBRARY_PATH / LD_PRELOAD: the closure must not depend
    on what the builder's shell happened to export."""
    return {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}


def needed_closure(elf_files: Iterable[Path]) -> Dict[str, Path]:
    """soname -> resolved path of every library the files need, transitively (ldd), less
    the host's. A library ldd cannot find is an error here, not at the user's."""
    found: Dict[str, Path] = {}
    for elf in elf_files:
        out = _run(["ldd", str(elf)], env=host_env())
        for line in out.splitlines():
            m = _LDD_LINE.match(line)
            if not m:
                continue  # the vdso, the loader by path, "statically linked"
            soname, where = m.group(1), m.group(2)
            if HOST_LIBRARIES.match(soname):
                continue
            if where == "not found":
                raise RuntimeError(f"{elf} needs {soname}, which ldd does not find")
            found.setdefault(soname, Path(where))
    return found


def is_elf(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def set_runpath(elf: Path, runpath: str) -> None:
    _run(["patchelf", "--set-rpath", runpath, str(elf)])


def bundle(package: Path, binaries: List[Path], extensions: List[Path]) -> List[str]:
    """Copies the closure of `binaries` (in package/bin) and `extensions` (in package)
    into package/lib and points every RUNPATH there. Returns the bundled sonames."""
    if shutil.which("patchelf") is None:
        raise RuntimeError(
            "patchelf not found: the wheel's binaries find their bundled libraries through "
            "an $ORIGIN RUNPATH that patchelf writes (Debian: apt-get install patchelf; "
            "tools/setup-deps.sh installs it)"
        )
    lib_dir = package / "lib"
    if lib_dir.exists():
        shutil.rmtree(lib_dir)
    lib_dir.mkdir(parents=True)
    libraries = needed_closure(binaries + extensions)
    for soname, source in sorted(libraries.items()):
        target = lib_dir / soname
        shutil.copyfile(os.path.realpath(source), target)
        os.chmod(target, 0o755)
        set_runpath(target, "$ORIGIN")
    for binary in binaries:
        set_runpath(binary, "$ORIGIN/../lib")
    for ext in extensions:
        set_runpath(ext, os.path.join("$ORIGIN", os.path.relpath(lib_dir, ext.parent)))
    return sorted(libraries)


def symbol_versions(files: Iterable[Path]) -> Dict[str, Tuple[int, ...]]:
    """The highest GLIBC_, GLIBCXX_ and CXXABI_ version any of the files needs."""
    highest: Dict[str, Tuple[int, ...]] = {}
    pattern = re.compile(r"\b(GLIBC|GLIBCXX|CXXABI)_([0-9.]+)\b")
    for path in files:
        for prefix, version in pattern.findall(_run(["objdump", "-T", str(path)])):
            parsed = tuple(int(x) for x in version.split(".") if x)
            if parsed > highest.get(prefix, ()):
                highest[prefix] = parsed
    return highest


def elf_files(package: Path) -> List[Path]:
    return sorted(p for p in package.rglob("*") if p.is_file() and is_elf(p))


def report(package: Path) -> str:
    files = elf_files(package)
    versions = symbol_versions(files)
    size = sum(p.stat().st_size for p in files)
    text = ", ".join(f"{k}_{'.'.join(map(str, v))}" for k, v in sorted(versions.items()))
    return (
        f"{len(files)} ELF files ({len(list((package / 'lib').glob('*')))} bundled "
        f"libraries), {size / 2**20:.1f} MiB; highest symbol versions needed: {text}"
    )


if __name__ == "__main__":
    print(report(Path(sys.argv[1])))
