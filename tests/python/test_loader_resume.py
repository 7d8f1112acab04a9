"""state_dict() after k batches + a new Loader with load_state_dict() yields the rest of
the epoch, the same samples and the same bytes; a state of another job is refused."""

import signal

import pytest
import torch

import shardcast

JOB = dict(batch_size=8, world_size=2, rank=1, split="sample", transform="random", seed=11)


def contents(batches):
    return [
        ([s.key for s in info], labels.tolist(), images.clone()) for images, labels, info in batches
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


def test_iterating_again_after_an_error_resumes_where_it_stopped(own_server):
    """A StreamTimeoutError mid-epoch (the server stopped), then iter() again once the
    server is back: the rest of the same epoch, so the batches of both iterations are the
    epoch's, each once. Before, the second iter() started epoch 1 and the rest of epoch 0
    was lost while state_dict() still said epoch 0."""
    # 1.2 MB batches, one buffered: the stream is open when the server stops.
    job = dict(JOB, world_size=1, rank=0, resize=224, crop=224, prefetch=1)
    with shardcast.Loader(own_server.address, job_id="again-reference", **job) as reference:
        want = [[s.key for s in info] for _, _, info in reference]
    with shardcast.Loader(own_server.address, job_id="again", stream_timeout=1, **job) as loader:
        got = []
        it = iter(loader)
        got.append([s.key for s in next(it)[2]])
        own_server.proc.send_signal(signal.SIGSTOP)
        try:
            with pytest.raises(shardcast.StreamTimeoutError):
                for _, _, info in it:
                    got.append([s.key for s in info])
        finally:
            own_server.proc.send_signal(signal.SIGCONT)
        state = loader.state_dict()
        assert (state["epoch"], state["batches_done"]) == (0, len(got))
        assert len(got) < len(loader)
        got += [[s.key for s in info] for _, _, info in loader]  # iter() again
        assert loader.state_dict()["batches_done"] == len(loader)
        assert loader.epoch == 0
    assert got == want
