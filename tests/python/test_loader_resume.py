"""state_dict() after k batches + a new Loader with load_state_dict() yields the rest of
the epoch, the same samples and the same bytes; a state of another job is refused."""

import pytest
import torch

import shardcast

JOB = dict(batch_size=8, world_size=2, rank=1, split="sample", transform="random", seed=11)


def contents(batches):
    return [
        ([s.key for s in info], labels.tolist(), images.clone())
        for images, labels, info in batches
    ]


def assert_same(a, b):
    assert len(a) == len(b)
    for (keys_a, labels_a, images_a), (keys_b, labels_b, images_b) in zip(a, b):
        assert keys_a == keys_b and labels_a == labels_b
        assert torch.equal(images_a, images_b)


def test_a_new_loader_resumes_mid_epoch_with_the_same_samples_and_bytes(server):
    k = 3
    with shardcast.Loader(server.address, job_id="resume", **JOB) as first:
        first.set_epoch(2)
        it = iter(first)
        head = [next(it) for _ in range(k)]
        state = first.state_dict()
        assert (state["epoch"], state["batches_done"]) == (2, k)
        rest = contents(it)
        assert len(head) + len(rest) == len(first)
    # RandomResizedCrop draws are part of the plan, so the resumed bytes are the same.
    with shardcast.Loader(server.address, job_id="resume", **JOB) as second:
        second.load_state_dict(state)
        assert_same(contents(second), rest)


def test_a_state_taken_at_the_end_of_an_epoch_resumes_with_the_next(server):
    with shardcast.Loader(server.address, job_id="resume-end", **JOB) as first:
        for _ in first:
            pass
        state = first.state_dict()
        assert (state["epoch"], state["batches_done"]) == (0, len(first))
        next_epoch = contents(first)  # iter() moved on to epoch 1
    with shardcast.Loader(server.address, job_id="resume-end", **JOB) as second:
        second.load_state_dict(state)
        assert_same(contents(second), next_epoch)
        assert second.epoch == 1


def test_a_state_of_another_job_is_refused(server):
    with shardcast.Loader(server.address, job_id="resume-a", **JOB) as a:
        state = a.state_dict()
    other = dict(JOB, seed=12)  # another seed: other samples, another job fingerprint
    with shardcast.Loader(server.address, job_id="resume-b", **other) as b:
        with pytest.raises(shardcast.JobChangedError, match="job_fingerprint"):
            b.load_state_dict(state)
    # Another batch size is an elastic resume (test_loader_elastic.py) with split sample;
    # with split shard it is refused mid-epoch.
    shard = dict(JOB, split="shard")
    with shardcast.Loader(server.address, job_id="resume-c", **shard) as c:
        it = iter(c)
        next(it)
        state = c.state_dict()
    with shardcast.Loader(server.address, job_id="resume-d", **dict(shard, batch_size=16)) as d:
        with pytest.raises(shardcast.JobChangedError, match="batch size 8"):
            d.load_state_dict(state)
