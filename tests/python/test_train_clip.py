"""examples/train_clip.py with two ranks over Gloo on shardcast-pack's captioned shards
(--captions --no-labels: jpg + txt + json, no label): every epoch sees exactly ranks x
batches x batch size image-caption pairs, none twice, and the contrastive loss falls."""

import re
import signal
import subprocess
import sys

import pytest

from conftest import BUILD, SERVER_FLAGS
from server_process import REPO, ServerProcess, python_env

PAIRS = 1024


@pytest.fixture(scope="module")
def captioned_server(tmp_path_factory):
    shards = tmp_path_factory.mktemp("captioned") / "shards"
    subprocess.run(
        [
            str(BUILD / "tools" / "shardcast-pack"),
            "--synthetic",
            str(PAIRS),
            "--size",
            "32x32",
            "--captions",
            "--no-labels",
            "--per-shard",
            "256",
            "--quiet",
            str(shards),
        ],
        check=True,
    )
    server = ServerProcess(BUILD, shards, SERVER_FLAGS)
    server.start()
    yield server
    server.kill(signal.SIGTERM)


def test_two_ranks_learn_captions_and_count_every_pair_once(captioned_server):
    out = subprocess.run(
        [
            sys.executable,
            str(REPO / "examples" / "train_clip.py"),
            "--server",
            captioned_server.address,
            "--nproc-per-node",
            "2",
            "-b",
            "32",
            "--n_epochs",
            "2",
            "--resize",
            "32",
            "--crop",
            "32",
            "--threads",
            "1",
        ],
        env=python_env(BUILD),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "2 ranks (gloo), 16 batches of 32 pairs per rank and epoch: 1024 pairs" in out.stdout
    epochs = re.findall(
        r"^epoch (\d+): loss ([0-9.]+), .*, (\d+) pairs, each once "
        r"\(2 ranks x 16 batches x 32\)",
        out.stdout,
        re.M,
    )
    assert [(int(e), int(n)) for e, _, n in epochs] == [(0, PAIRS), (1, PAIRS)], out.stdout
    losses = [float(loss) for _, loss, _ in epochs]
    assert losses[1] < losses[0], out.stdout
