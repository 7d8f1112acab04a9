"""examples/train_ddp.py with two ranks over Gloo for a few steps: the loss falls and
both ranks end with the same parameters (DDP kept them in step on the loader's
batches). BatchNorm's running statistics are not compared: DDP broadcasts rank 0's
buffers before each forward, so after the last forward each rank holds its own."""

import json
import re
import subprocess
import sys

import torch
import torchvision

from conftest import BUILD, CLASSES
from server_process import REPO, python_env


def test_two_ranks_over_gloo_learn_and_agree(server, tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            str(REPO / "examples" / "train_ddp.py"),
            "--server",
            server.address,
            "--nproc-per-node",
            "2",
            "-b",
            "16",
            "--n_epochs",
            "2",
            "-lr",
            "1e-3",
            "--device",
            "cpu",
            "--threads",
            "1",
            "--save",
            str(tmp_path / "model.{rank}.pt"),
        ],
        env=python_env(BUILD),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "2 ranks (gloo), 7 batches of 16 per rank" in out.stdout
    losses = [float(x) for x in re.findall(r"^epoch \d+: loss ([0-9.]+)", out.stdout, re.M)]
    assert len(losses) == 2, out.stdout
    assert losses[1] < losses[0], out.stdout

    # No --job-id: rank 0 named a new job and the process group gave the name to rank 1,
    # so the server holds one generated job with both ranks registered.
    status = subprocess.run(
        [str(BUILD / "client" / "shardcast-ctl"), "status", "--server", server.address, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    jobs = [
        job
        for job in json.loads(status.stdout).get("jobs", [])
        if job["jobId"].startswith("run-") and job["batchSize"] == 16
    ]
    assert len(jobs) == 1, status.stdout
    assert len(jobs[0]["ranks"]) == 2, status.stdout

    # The safe mode (torch.load's default since torch 2.6) reads what --save writes.
    rank0 = torch.load(tmp_path / "model.0.pt", weights_only=True)
    rank1 = torch.load(tmp_path / "model.1.pt", weights_only=True)
    assert rank0.keys() == rank1.keys()
    parameters = [
        name for name, _ in torchvision.models.resnet18(num_classes=CLASSES).named_parameters()
    ]
    assert len(parameters) == 62
    for name in parameters:
        assert torch.equal(rank0[name], rank1[name]), name
