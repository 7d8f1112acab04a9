"""The package installs offline on Debian 12 as docs/python.md says: a venv that sees
the system's torch, grpcio and protobuf, and pip without build isolation (which would
download setuptools). The installed copy, stubs generated at build time, then trains
nothing but reads a batch from the server."""

import os
import shutil
import subprocess

from server_process import REPO

SCRIPT = """
import sys, shardcast
assert shardcast.__file__.startswith(sys.prefix), shardcast.__file__
with shardcast.Loader(sys.argv[1], job_id="installed", batch_size=4, world_size=1,
                      rank=0) as loader:
    images, labels, info = next(iter(loader))
print(tuple(images.shape), len(info))
"""


def test_offline_venv_install_without_build_isolation(server, tmp_path):
    # A copy of the source tree's python/ and proto/, so the build leaves no files in it.
    src = tmp_path / "src"
    ignore = shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
    shutil.copytree(REPO / "python", src / "python", ignore=ignore)
    shutil.copytree(REPO / "proto", src / "proto")
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PIP_NO_INDEX"] = "1"  # any download attempt fails the install
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", str(venv)],
                   check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-build-isolation",
                    str(src / "python")], check=True, env=env)
    out = subprocess.run([str(venv / "bin" / "python"), "-c", SCRIPT, server.address],
                         check=True, env=env, cwd=tmp_path, capture_output=True, text=True)
    assert out.stdout.split("\n")[0] == "(4, 3, 32, 32) 4"
