"""A sample whose image the server could not decode arrives as a grey substitute; the
Loader does not hand it out with its real label: masked to -1 like padding (counted), or
iteration stops naming it (on_substitute="fail")."""

import signal
import tarfile

import pytest

import shardcast
from conftest import BUILD, SERVER_FLAGS
from server_process import ServerProcess, pack_synthetic


@pytest.fixture(scope="module")
def corrupt_server(tmp_path_factory):
    shards = pack_synthetic(
        BUILD, tmp_path_factory.mktemp("corrupt") / "shards", 40, 20, "32x32", 4
    )
    first = sorted(shards.glob("*.tar"))[0]
    with tarfile.open(first) as tar:
        image = next(m for m in tar.getmembers() if m.name.endswith(".jpg"))
    with open(first, "r+b") as f:  # the JPEG's bytes become bytes no decoder takes
        f.seek(image.offset_data)
        f.write(b"x" * image.size)
    server = ServerProcess(BUILD, shards, SERVER_FLAGS)
    server.start()
    yield server, image.name.rsplit(".", 1)[0]
    server.kill(signal.SIGTERM)


JOB = dict(batch_size=8, world_size=1, rank=0, split="sample")


def test_a_substitute_is_masked_and_counted(corrupt_server):
    server, key = corrupt_server
    with shardcast.Loader(server.address, job_id="mask", **JOB) as loader:
        seen = []
        for _, labels, info in loader:
            for label, sample in zip(labels.tolist(), info):
                seen.append(sample.key)
                assert (label == -1) == sample.substituted
                assert sample.substituted == (sample.key == key)
        assert loader.substituted == 1 and key in seen and len(seen) == 40


def test_on_substitute_fail_names_the_sample(corrupt_server):
    server, key = corrupt_server
    with shardcast.Loader(server.address, job_id="fail", on_substitute="fail", **JOB) as loader:
        with pytest.raises(shardcast.ShardcastError, match=f"sample '{key}'"):
            for _ in loader:
                pass


def test_on_substitute_takes_mask_or_fail():
    with pytest.raises(ValueError, match="on_substitute must be 'mask' or 'fail'"):
        shardcast.Loader("127.0.0.1:1", on_substitute="keep")
