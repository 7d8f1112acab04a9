"""The package installs offline on Debian 12 as docs/python.md says: a venv that sees
the system's torch, grpcio and protobuf, and pip without build isolation (which would
download setuptools). The installed copy, stubs generated and the native client
compiled (CMake, against the system's gRPC) at build time, then trains nothing but
reads a batch from the server."""

import os
import shutil
import subprocess

from server_process import REPO, read_batch_with_installed_package


def test_offline_venv_install_without_build_isolation(server, tmp_path):
    # A copy of the source tree (the native client is built from its C++), so the build
    # leaves no files in it; git's list of files, so no build folder comes along.
    src = tmp_path / "src"
    files = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-co", "--exclude-standard"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split("\n")
    for name in filter(None, files):
        if name.startswith("bench/third_party/") or not (REPO / name).is_file():
            continue
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, src / name)
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PIP_NO_INDEX"] = "1"  # any download attempt fails the install
    # The native module alone: compiling the three binaries here too would be 95 compiles
    # instead of 26 (minutes with a cold cache); test_wheel.py bundles and starts them.
    env["SHARDCAST_CLIENT_ONLY"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    subprocess.run(
        ["/usr/bin/python3", "-m", "venv", "--system-site-packages", str(venv)], check=True
    )
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", "--no-build-isolation", str(src / "python")],
        check=True,
        env=env,
    )
    assert (
        read_batch_with_installed_package(
            venv / "bin" / "python", server.address, "installed", env, tmp_path
        )
        == "(4, 3, 32, 32) 4"
    )
    # Without its binaries, a console script says so (and imports no torch to say it).
    ctl = subprocess.run(
        [str(venv / "bin" / "shardcast-ctl"), "--help"], env=env, capture_output=True, text=True
    )
    assert ctl.returncode != 0 and "installed without its binaries" in ctl.stderr, ctl
