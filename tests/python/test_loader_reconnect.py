"""A killed server costs nothing but time: the loader reconnects to the restarted
server and resumes at the first batch it did not receive. A server that comes back
with another job, or does not come back, ends the epoch with a clear error."""

import pytest

import shardcast

# 1.2 MB batches (30 per epoch): more than the server's window and the HTTP/2 buffers
# hold, so a kill right after the first batch always breaks the stream mid-epoch.
BIG = dict(resize=224, crop=224, batch_size=8, world_size=1, rank=0, prefetch=1)


def keys(batches):
    return [[s.key for s in info] for _, _, info in batches]


def test_resumes_after_a_server_restart_on_the_same_port(own_server):
    job = dict(BIG, job_id="restart", split="sample", seed=4)
    with shardcast.Loader(own_server.address, **job) as reference:
        want = keys(reference)
    with shardcast.Loader(own_server.address, **job) as loader:
        it = iter(loader)
        got = keys([next(it), next(it)])
        own_server.restart()  # SIGKILL, then a new process on the same port
        got += keys(it)
        assert loader.reconnects >= 1
    assert got == want  # n batches, none twice, none missing


def test_a_server_back_with_another_job_is_refused(own_server):
    # The job leaves the seed to the server; a server restarted with another default
    # seed plans other samples, so its job fingerprint differs.
    with shardcast.Loader(own_server.address, job_id="changed", split="sample", **BIG) as loader:
        it = iter(loader)
        next(it)
        own_server.restart(["--seed", "1"])
        with pytest.raises(shardcast.JobChangedError, match="job fingerprint"):
            for _ in it:
                pass


def test_a_server_that_stays_away_ends_the_epoch_after_the_deadline(own_server):
    with shardcast.Loader(
        own_server.address, job_id="gone", reconnect_deadline=1.5, **BIG
    ) as loader:
        it = iter(loader)
        next(it)
        own_server.kill()
        with pytest.raises(shardcast.ServerUnavailableError, match="not back within 1.5 s"):
            for _ in it:
                pass


def test_a_killed_replica_hands_its_rank_to_the_next_with_the_same_batches(shards, own_server):
    # Two replicas on the same shards (issue 26): the loader is given both, starts at the
    # first (rank 0), and when that one dies resumes on the second at its next batch.
    from conftest import BUILD, SERVER_FLAGS
    from server_process import ServerProcess

    other = ServerProcess(BUILD, shards, SERVER_FLAGS)
    other.start()
    try:
        job = dict(BIG, job_id="replicas", split="sample", seed=4)
        with shardcast.Loader(own_server.address, **job) as reference:
            want = keys(reference)
        with shardcast.Loader(f"{own_server.address},{other.address}", **job) as loader:
            it = iter(loader)
            got = keys([next(it), next(it)])
            own_server.kill()
            got += keys(it)
            assert loader.reconnects >= 1
        assert got == want
    finally:
        other.kill()
