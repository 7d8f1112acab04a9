"""Named datasets from Python: Loader(dataset=...) reads one of the server's datasets
(--dataset NAME=DIR), the default one without it, and an unknown name is refused with
the names the server has."""

import signal

import pytest

import shardcast
from conftest import BUILD, CLASSES, PER_SHARD, SERVER_FLAGS, SIZE
from server_process import ServerProcess, pack_synthetic

VAL_SAMPLES = 23  # no batch size used here divides it


@pytest.fixture(scope="module")
def two_datasets(shards, tmp_path_factory):
    val = pack_synthetic(
        BUILD,
        tmp_path_factory.mktemp("val") / "shards",
        VAL_SAMPLES,
        PER_SHARD,
        f"{SIZE}x{SIZE}",
        CLASSES,
    )
    s = ServerProcess(BUILD, shards, SERVER_FLAGS)
    s.start(["--dataset", f"val={val}"])
    yield s
    s.kill(signal.SIGTERM)


def test_a_named_dataset_is_read_every_sample_once_with_pad(two_datasets):
    loader = shardcast.Loader(
        two_datasets.address,
        dataset="val",
        job_id="py-val",
        batch_size=4,
        split="sample",
        remainder="pad",
        rank=0,
        world_size=1,
    )
    assert loader.dataset == "val"
    assert loader.registration.num_samples == VAL_SAMPLES
    assert len(loader) == 6  # ceil(23 / 4)
    keys = [s.key for _, _, info in loader for s in info if s.valid]
    assert len(keys) == VAL_SAMPLES == len(set(keys))


def test_without_a_name_the_default_dataset_is_read(two_datasets, shards):
    loader = shardcast.Loader(
        two_datasets.address, job_id="py-default", batch_size=8, rank=0, world_size=1
    )
    assert loader.dataset == "default"
    assert loader.registration.num_samples != VAL_SAMPLES


def test_an_unknown_dataset_is_refused_with_the_names(two_datasets):
    with pytest.raises(shardcast.JobRefusedError, match="not served here.*default, val"):
        shardcast.Loader(
            two_datasets.address,
            dataset="test",
            job_id="py-unknown",
            batch_size=4,
            rank=0,
            world_size=1,
        )
