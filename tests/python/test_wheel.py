"""The wheel carries everything (docs/python.md, "Installing"): `pip wheel ./python` with
SHARDCAST_BUILD_DIR takes the binaries and the native module from the build tree the
tests run on (no compiling), bundles the shared libraries they need under
shardcast/lib/ with $ORIGIN RUNPATHs, and is tagged for the glibc it was built against.
Installed into a fresh venv, its console scripts start the bundled binaries with an
empty LD_LIBRARY_PATH, ldd resolves every library but glibc's and the C++ runtime inside
the venv, and `import torch, shardcast` reads a batch. The bare-container run (a Debian
without any -dev package) is tools/wheel-container-check.sh, not CI: it takes minutes."""

import os
import platform
import re
import shutil
import stat
import subprocess
import zipfile

from server_process import REPO, build_dir, read_batch_with_installed_package

BINARIES = ["shardcast-server", "shardcast-ctl", "shardcast-pack"]
# What the host provides (python/bundle.py): glibc's libraries and the C++ runtime.
HOST = re.compile(
    r"^(linux-vdso|ld-linux[-.\w]*|libc|libm|libdl|librt|libpthread|libresolv|"
    r"libutil|libstdc\+\+|libgcc_s)\.so"
)


def _ldd(path, env):
    """soname -> where ldd resolves it."""
    out = subprocess.run(
        ["ldd", str(path)], check=True, capture_output=True, text=True, env=env
    ).stdout
    assert "not found" not in out, out
    return dict(re.findall(r"^\s*(\S+) => (\S+)", out, re.M))


def test_wheel_carries_binaries_and_libraries(server, tmp_path):
    build = build_dir()
    # python/ and proto/ only (the build tree gives the rest): an in-tree pip build writes
    # python/build/ and the egg-info, so a copy keeps the checkout clean.
    src = tmp_path / "src"
    shutil.copytree(
        REPO / "python",
        src / "python",
        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"),
    )
    shutil.copytree(REPO / "proto", src / "proto")
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH")}
    env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", SHARDCAST_BUILD_DIR=str(build))
    subprocess.run(
        ["/usr/bin/python3", "-m", "venv", "--system-site-packages", str(venv)], check=True
    )
    subprocess.run(
        [
            str(venv / "bin" / "pip"),
            "wheel",
            "-q",
            "--no-build-isolation",
            "--no-deps",
            "-w",
            str(tmp_path / "wheels"),
            str(src / "python"),
        ],
        check=True,
        env=env,
    )

    wheels = list((tmp_path / "wheels").glob("*.whl"))
    assert len(wheels) == 1, wheels
    glibc = os.confstr("CS_GNU_LIBC_VERSION").split()[1].split(".")
    tag = f"manylinux_{glibc[0]}_{glibc[1]}_{platform.machine()}"
    assert re.fullmatch(rf"shardcast-[0-9.]+-cp3\d+-cp3\d+-{tag}\.whl", wheels[0].name), wheels[
        0
    ].name
    with zipfile.ZipFile(wheels[0]) as whl:
        modes = {i.filename: i.external_attr >> 16 for i in whl.infolist()}
        entry_points = next(
            whl.read(n).decode() for n in modes if n.endswith(".dist-info/entry_points.txt")
        )
    for name in BINARIES:
        assert modes[f"shardcast/bin/{name}"] & stat.S_IXUSR, name
        assert re.search(rf"^{name} = shardcast_bin:", entry_points, re.M), entry_points
    assert any(re.fullmatch(r"shardcast/_native\..*\.so", n) for n in modes), sorted(modes)
    for lib in [
        "libgrpc++.so.1.51",
        "libprotobuf.so.32",
        "libarchive.so.13",
        "libturbojpeg.so.0",
        "libpng16.so.16",
        "libwebp.so.7",
        "libcurl.so.4",
    ]:
        assert f"shardcast/lib/{lib}" in modes, lib
    assert not [n for n in modes if HOST.match(os.path.basename(n))]

    # A fresh venv: nothing installed in it before. The build tree has no shared
    # libraries; with LD_LIBRARY_PATH empty only the RUNPATHs can find the bundled ones.
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", "--no-deps", str(wheels[0])],
        check=True,
        env=env,
    )
    run_env = dict(env, LD_LIBRARY_PATH="")
    del run_env["SHARDCAST_BUILD_DIR"]
    version = subprocess.run(
        [str(venv / "bin" / "shardcast-server"), "--version"],
        check=True,
        env=run_env,
        capture_output=True,
        text=True,
    )
    assert version.stdout.startswith("shardcast-server "), version.stdout
    for name in ["shardcast-ctl", "shardcast-pack"]:
        out = subprocess.run(
            [str(venv / "bin" / name), "--help"], env=run_env, capture_output=True, text=True
        )
        assert out.returncode == 0 and "usage" in (out.stdout + out.stderr).lower(), out

    # The console scripts import no torch (shardcast_bin is outside the package).
    subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import sys, shardcast_bin; assert 'torch' not in sys.modules",
        ],
        check=True,
        env=run_env,
    )

    package = next((venv / "lib").glob("python3*/site-packages/shardcast"))
    lib_dir = (package / "lib").resolve()
    natives = list(package.glob("_native*.so"))
    assert len(natives) == 1, natives
    for elf in [package / "bin" / n for n in BINARIES] + natives:
        resolved = _ldd(elf, run_env)
        for soname, where in resolved.items():
            if HOST.match(soname):
                assert not where.startswith(str(venv)), (elf, soname, where)
            else:
                assert os.path.dirname(os.path.realpath(where)) == str(lib_dir), (
                    elf,
                    soname,
                    where,
                )
        assert [s for s in resolved if not HOST.match(s)], (elf, resolved)

    # torch first, as a training script does: the native module and its bundled
    # libraries load into a process that has torch's (Debian's torch: its libprotobuf).
    assert (
        read_batch_with_installed_package(
            venv / "bin" / "python", server.address, "wheel", run_env, tmp_path, torch_first=True
        )
        == "(4, 3, 32, 32) 4"
    )
