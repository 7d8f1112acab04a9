"""Every rank gets exactly n batches per epoch, and each sample is the one
`shardcast-ctl plan` plans for it: the loader hands out the server's plan unchanged,
epoch after epoch."""

import pytest
import torch

import shardcast
from conftest import CLASSES, SIZE, ctl_plan

CONFIGS = {
    # The seed's webdataset split (split_by_node + repeat/slice), 2 workers, shuffled
    # shards and a shuffle buffer, so every epoch's plan differs.
    "shard": dict(
        loader=dict(split="shard", workers=2, shuffle_shards=True, shuffle_buffer=16, seed=3),
        plan=[
            "--split",
            "shard",
            "--workers",
            "2",
            "--shuffle-shards",
            "--shuffle-buffer",
            "16",
            "--seed",
            "3",
        ],
        world=2,
        batch=8,
    ),
    # Exactly once per epoch, with padding: the last batches hold samples of shard -1.
    "sample-pad": dict(
        loader=dict(split="sample", remainder="pad", seed=5),
        plan=["--split", "sample", "--remainder", "pad", "--seed", "5"],
        world=3,
        batch=16,
    ),
}


def received_plan(loader, epochs):
    """(epoch, rank, batch) -> [(shard, index)] over `epochs` consecutive iter() calls."""
    got = {}
    for _ in range(epochs):
        batches = list(loader)
        assert len(batches) == len(loader)
        for b, (images, labels, info) in enumerate(batches):
            assert images.dtype == torch.uint8
            assert tuple(images.shape) == (loader.batch_size, 3, SIZE, SIZE)
            assert labels.dtype == torch.int64 and labels.shape == (loader.batch_size,)
            for label, sample in zip(labels.tolist(), info):
                assert sample.valid == (sample.shard >= 0)
                assert (label == -1) if not sample.valid else (0 <= label < CLASSES)
                assert not sample.substituted
            got[(loader.epoch, loader.rank, b)] = [(s.shard, s.index_in_shard) for s in info]
    return got


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_rank_gets_the_planned_batches(server, shards, name):
    config = CONFIGS[name]
    world, batch = config["world"], config["batch"]
    plan_args = config["plan"] + ["--world-size", str(world), "--batch-size", str(batch)]
    want = {}
    for epoch in (0, 1):
        want.update(ctl_plan(shards, plan_args + ["--epoch", str(epoch)]))
    got = {}
    for rank in range(world):
        with shardcast.Loader(
            server.address,
            job_id=f"plan-{name}",
            rank=rank,
            world_size=world,
            batch_size=batch,
            **config["loader"],
        ) as loader:
            n = len(loader)
            got.update(received_plan(loader, epochs=2))  # epochs 0, then 1 by itself
    assert n > 0 and len(want) == 2 * world * n
    assert got == want


def test_set_epoch_chooses_the_epoch(server, shards):
    plan_args = ["--world-size", "1", "--batch-size", "32", "--split", "sample", "--seed", "9"]
    with shardcast.Loader(
        server.address,
        job_id="set-epoch",
        batch_size=32,
        split="sample",
        seed=9,
        world_size=1,
        rank=0,
    ) as loader:
        loader.set_epoch(5)
        assert received_plan(loader, 1) == ctl_plan(shards, plan_args + ["--epoch", "5"])
        assert loader.epoch == 5
        # Without set_epoch, the next iter() moves on to epoch 6 (Lightning never calls it).
        assert received_plan(loader, 1) == ctl_plan(shards, plan_args + ["--epoch", "6"])


def test_rank_and_world_default_to_the_environment(server, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with shardcast.Loader(server.address, job_id="env-rank", batch_size=8) as loader:
        assert (loader.rank, loader.world_size) == (1, 2)
        assert loader.registration.world_size == 2


def test_registration_reports_the_effective_job(server):
    with shardcast.Loader(
        server.address, job_id="effective", batch_size=8, world_size=1, rank=0
    ) as loader:
        # Unset fields took the server's defaults (its flags).
        assert loader.split == "shard"
        assert loader.image_shape == (3, SIZE, SIZE)
        assert loader.num_classes == CLASSES
        assert loader.class_names == [f"class_{i:03d}" for i in range(CLASSES)]
        assert len(loader) == 240 // 8


def test_an_older_iterator_stops_when_a_new_one_starts(server):
    with shardcast.Loader(
        server.address, job_id="superseded", batch_size=8, world_size=1, rank=0
    ) as loader:
        first = iter(loader)
        next(first)
        second = iter(loader)
        with pytest.raises(RuntimeError, match="superseded"):
            next(first)
        assert loader.epoch == 1
        assert len(list(second)) == len(loader)


def test_without_a_job_id_each_run_is_its_own_job(server):
    """A rerun with another batch size is a new job, not a refusal by the old one."""
    with shardcast.Loader(server.address, batch_size=8, world_size=1, rank=0) as first:
        assert first.job_id.startswith("run-")
        assert len(first) > 0
    with shardcast.Loader(server.address, batch_size=4, world_size=1, rank=0) as second:
        assert second.job_id != first.job_id
        assert len(second) == 2 * len(first)


def test_several_ranks_without_a_process_group_need_a_job_id(server):
    with pytest.raises(ValueError, match="pass the same job_id on every rank"):
        shardcast.Loader(server.address, batch_size=8, world_size=2, rank=0)
