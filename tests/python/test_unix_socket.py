"""A server on --listen unix:PATH serves the Python client and shardcast-ctl the same as
on TCP: the same batches for the same job, health SERVING, over a socket file."""

import signal
import stat
import subprocess

import shardcast
from conftest import BUILD, CTL_BIN, SERVER_FLAGS
from server_process import ServerProcess

JOB = dict(rank=0, world_size=2, batch_size=8, split="sample", seed=9)


def epoch_of(address, job_id):
    with shardcast.Loader(address, job_id=job_id, **JOB) as loader:
        return [
            (images.clone(), labels.clone(), [(s.shard, s.index_in_shard) for s in info])
            for images, labels, info in loader
        ]


def test_loader_and_ctl_over_a_unix_socket(server, shards, tmp_path):
    path = tmp_path / "s.sock"
    local = ServerProcess(BUILD, shards, SERVER_FLAGS, unix_socket=path)
    local.start()
    try:
        assert local.address == f"unix:{path}"
        assert stat.S_ISSOCK(path.stat().st_mode)
        assert stat.S_IMODE(path.stat().st_mode) == 0o660
        health = subprocess.run(
            [str(CTL_BIN), "health", "--server", local.address],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert health.returncode == 0, health.stderr
        assert "SERVING" in health.stdout
        over_unix = epoch_of(local.address, "unix-socket")
        over_tcp = epoch_of(server.address, "unix-socket-tcp")
        assert len(over_unix) == len(over_tcp) > 0
        for (images, labels, samples), (want_images, want_labels, want_samples) in zip(
            over_unix, over_tcp
        ):
            assert samples == want_samples
            assert labels.equal(want_labels)
            assert images.equal(want_images)
    finally:
        local.kill(signal.SIGTERM)
    assert not path.exists(), "the socket file outlived the server"
