"""Elastic resume in the Python Loader (split sample): ranks of one world size stop
mid-epoch, a job of another world size and batch size loads their state_dict and goes on
with the same epoch. Across the change no sample of the epoch comes twice, and with
remainder "pad" every one comes exactly once; every new rank gets the same count."""

import collections

import pytest

import shardcast
from conftest import SAMPLES

OLD = dict(world_size=2, batch_size=8)
NEW = dict(world_size=3, batch_size=6)


def keys_of(batch):
    _, _, info = batch
    return [s.key for s in info if s.valid]


def take(loaders, k):
    """The valid keys of the next `k` batches of every rank (rank order per step)."""
    its = [iter(loader) for loader in loaders]
    keys = []
    for _ in range(k):
        for it in its:
            keys += keys_of(next(it))
    return keys, its


def run_elastic(server, job, remainder, k=5):
    common = dict(split="sample", remainder=remainder, seed=7)
    old = [
        shardcast.Loader(server.address, job_id=f"{job}-old", rank=r, **OLD, **common)
        for r in range(OLD["world_size"])
    ]
    try:
        before, _ = take(old, k)
        states = [loader.state_dict() for loader in old]
    finally:
        for loader in old:
            loader.close()
    consumed = k * OLD["world_size"] * OLD["batch_size"]
    assert {s["samples_consumed"] for s in states} == {consumed}  # global, same on every rank

    new = [
        shardcast.Loader(server.address, job_id=f"{job}-new", rank=r, **NEW, **common)
        for r in range(NEW["world_size"])
    ]
    try:
        for r, loader in enumerate(new):
            loader.load_state_dict(states[r % len(states)])  # any old rank's state
        counts = {loader.batches_in_epoch for loader in new}
        assert len(counts) == 1
        n_rest = counts.pop()
        after = []
        per_rank = []
        for loader in new:
            batches = list(loader)
            per_rank.append(len(batches))
            assert loader.epoch == 0
            for b in batches:
                after += keys_of(b)
        assert per_rank == [n_rest] * NEW["world_size"]
        # The next iter() is an ordinary epoch of the new job.
        assert len(list(new[0])) == len(new[0]) and new[0].epoch == 1
    finally:
        for loader in new:
            loader.close()
    return before, after, n_rest


def test_elastic_resume_with_pad_serves_every_sample_of_the_epoch_exactly_once(server):
    before, after, n_rest = run_elastic(server, "elastic-pad", "pad")
    per_step = NEW["world_size"] * NEW["batch_size"]
    left = SAMPLES - len(before)
    assert n_rest == -(-left // per_step)  # ceil: the padding is masked
    counts = collections.Counter(before + after)
    assert len(counts) == SAMPLES and set(counts.values()) == {1}


def test_elastic_resume_with_drop_serves_no_sample_twice(server):
    before, after, n_rest = run_elastic(server, "elastic-drop", "drop")
    per_step = NEW["world_size"] * NEW["batch_size"]
    left = SAMPLES - len(before)
    assert n_rest == left // per_step
    assert len(after) == n_rest * per_step  # the epoch's remainder (< one step) is dropped
    assert len(set(before + after)) == len(before) + len(after)


def test_a_state_taken_after_an_elastic_resume_resumes_on_the_same_world(server):
    common = dict(split="sample", remainder="pad", seed=9)
    with shardcast.Loader(
        server.address, job_id="elastic-twice-a", rank=0, **OLD, **common
    ) as first:
        it = iter(first)
        for _ in range(3):
            next(it)
        state = first.state_dict()
    with shardcast.Loader(
        server.address, job_id="elastic-twice-b", rank=1, **NEW, **common
    ) as second:
        second.load_state_dict(state)
        it = iter(second)
        for _ in range(2):
            next(it)
        again = second.state_dict()
        rest = [keys_of(b) for b in it]
    # A closed loader still tells its position (its stream is gone).
    closed = second.state_dict()
    assert closed["sample_offset"] == again["sample_offset"] > 0
    assert closed["batches_done"] == closed["batches_in_epoch"] == again["batches_in_epoch"]
    offset = 3 * OLD["world_size"] * OLD["batch_size"]
    assert again["sample_offset"] == offset
    assert again["samples_consumed"] == offset + 2 * NEW["world_size"] * NEW["batch_size"]
    # Same world size and batch size: the same batches follow, from the same offset.
    with shardcast.Loader(
        server.address, job_id="elastic-twice-b", rank=1, **NEW, **common
    ) as third:
        third.load_state_dict(again)
        assert third.batches_in_epoch == again["batches_in_epoch"]
        assert [keys_of(b) for b in third] == rest


def test_split_shard_refuses_an_elastic_resume_mid_epoch_but_not_at_an_epoch_end(server):
    common = dict(split="shard", seed=3)
    with shardcast.Loader(
        server.address, job_id="elastic-shard-a", rank=0, **OLD, **common
    ) as first:
        it = iter(first)
        next(it)
        mid = first.state_dict()
        for _ in it:
            pass
        end = first.state_dict()
    with shardcast.Loader(
        server.address, job_id="elastic-shard-b", rank=0, **NEW, **common
    ) as second:
        with pytest.raises(shardcast.JobChangedError, match="needs split sample"):
            second.load_state_dict(mid)
        second.load_state_dict(end)
        assert len(list(second)) == len(second) and second.epoch == 1


@pytest.mark.parametrize(
    "change",
    [
        {"batches_done": -1},
        {"batches_done": 10**9},
        {"sample_offset": -5},
        {"sample_offset": 10**12},
        {"epoch": -1},
    ],
)
def test_a_state_with_an_impossible_position_is_refused(server, change):
    with shardcast.Loader(
        server.address, job_id="elastic-bad", rank=0, **OLD, split="sample"
    ) as loader:
        state = dict(loader.state_dict(), **change)
        with pytest.raises(ValueError, match="bad position in state"):
            loader.load_state_dict(state)
        # The loader is unharmed: it still streams its first epoch.
        assert len(list(loader)) == len(loader)
