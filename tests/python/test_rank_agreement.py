"""Issue 35: the ranks of one job agree on the job before the first batch. Two real
shardcast-server processes (replicas) over the same shards and two ranks in a real Gloo
process group (separate processes, DDP on a tiny model): rank 0 registers at the first
replica, rank 1 at the second (the server list's order by rank). Replicas run with other
settings (another default batch size: other batch counts per epoch, the DDP hang at the
epoch's end; another --max-member-bytes: other bytes under the same batch counts) make
both ranks fail at their first iter() with JobChangedError naming each rank's values,
promptly; replicas run alike train."""

import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import List

import pytest

from conftest import BUILD, SERVER_FLAGS
from server_process import ServerProcess, python_env

# One rank: joins the Gloo group, reads the job's epoch through DDP on a tiny model (an
# all-reduce per batch, as a real trainer's), prints how many batches it trained on.
# Exit 3 for JobChangedError (its message on stderr).
RANK = textwrap.dedent(
    """
    import datetime, sys
    import torch, torch.distributed as dist
    import shardcast
    from shardcast.errors import JobChangedError

    rank, port, servers, check = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2, timeout=datetime.timedelta(seconds=40))
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3 * 32 * 32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = shardcast.Loader(servers, job_id="agree", reconnect_deadline=20,
                              check_ranks=check == "check")
    batches = 0
    try:
        for batch in loader:
            x = batch.images.float().flatten(1) / 255
            loss = torch.nn.functional.cross_entropy(model(x), batch.labels, ignore_index=-1)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            batches += 1
    except JobChangedError as e:
        print(f"JobChangedError after {batches} batches: {e}", file=sys.stderr)
        sys.exit(3)
    print(f"trained {batches} of {len(loader)} batches", flush=True)
    dist.destroy_process_group()
"""
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(
    servers: str, check: str = "check", timeout: float = 90
) -> List[subprocess.CompletedProcess]:
    """Both ranks as processes; a rank still running after `timeout` s is killed and
    reported as a hang."""
    port = str(free_port())
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RANK, str(rank), port, servers, check],
            env=python_env(BUILD),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(2)
    ]
    results = []
    for rank, proc in enumerate(procs):
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            pytest.fail(f"rank {rank} hung for {timeout} s (servers {servers})")
        results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return results


class Replicas:
    """Replicas over the session's shards, each with its own extra flags: calling it
    starts them and returns the server list "A,B"; kill(i) kills the i-th."""

    def __init__(self, shards: Path) -> None:
        self.shards = shards
        self.started: List[ServerProcess] = []

    def __call__(self, *extra: List[str]) -> str:
        for flags in extra:
            s = ServerProcess(BUILD, self.shards, SERVER_FLAGS + flags)
            s.start()
            self.started.append(s)
        return ",".join(s.address for s in self.started[-len(extra) :])

    def kill(self, i: int) -> None:
        self.started[i].kill()


@pytest.fixture
def replicas(shards):
    r = Replicas(shards)
    yield r
    for s in r.started:
        s.kill()


@pytest.mark.parametrize(
    "other",
    [["--batch-size", "12"], ["--max-member-bytes", "100"]],
    ids=["batch-size", "max-member-bytes"],
)
def test_ranks_at_replicas_with_other_settings_both_fail_before_the_first_batch(replicas, other):
    servers = replicas(
        ["--batch-size", "8"],
        other if other[0] == "--batch-size" else ["--batch-size", "8"] + other,
    )
    ranks = run_ranks(servers)
    for rank, result in enumerate(ranks):
        assert result.returncode == 3, f"rank {rank}: {result.stdout} {result.stderr}"
        assert "JobChangedError after 0 batches" in result.stderr, result.stderr
        assert "the ranks disagree before the first batch" in result.stderr
        assert "rank 0 has" in result.stderr and "rank 1 has" in result.stderr
        if other[0] == "--batch-size":
            # 240 samples over 2 ranks: 15 batches of 8, 10 of 12.
            assert "batches_per_epoch: rank 0 has 15, rank 1 has 10" in result.stderr
        else:
            assert "job_fingerprint: rank 0 has" in result.stderr
    # Both ranks say the same.
    assert ranks[0].stderr.split("disagree")[1] == ranks[1].stderr.split("disagree")[1]


def test_ranks_at_replicas_run_alike_train(replicas):
    servers = replicas(["--batch-size", "8"], ["--batch-size", "8"])
    for rank, result in enumerate(run_ranks(servers)):
        assert result.returncode == 0, f"rank {rank}: {result.stderr}"
        assert "trained 15 of 15 batches" in result.stdout, result.stdout


def test_a_rank_failing_over_to_a_replica_with_other_settings_is_refused(replicas):
    # The Loader's failover is the C++ client's (python/native): a rank moving from A
    # to a replica run with another --max-member-bytes (every image a substitute) is
    # refused naming both replicas and both job fingerprints, not resumed on B's bytes.
    import shardcast

    servers = replicas([], ["--max-member-bytes", "100"])
    a, b = servers.split(",")
    # 1.2 MB batches: more than the windows hold, so a kill after two breaks the stream.
    job = dict(
        resize=224, crop=224, batch_size=8, world_size=1, rank=0, prefetch=1, split="sample", seed=4
    )
    with shardcast.Loader(a, job_id="probe", **job) as on_a, shardcast.Loader(
        b, job_id="probe", **job
    ) as on_b:
        fp_a, fp_b = on_a.job_fingerprint, on_b.job_fingerprint
    assert fp_a != fp_b
    with shardcast.Loader(servers, job_id="moves", **job) as loader:
        it = iter(loader)
        next(it)
        next(it)
        replicas.kill(0)
        with pytest.raises(shardcast.JobChangedError) as refused:
            for _ in it:
                pass
    for what in (a, b, fp_a, fp_b):
        assert what in str(refused.value)


def test_check_ranks_false_turns_the_agreement_off(replicas):
    # The documented opt-out: the ranks are not compared (and here train on other bytes).
    servers = replicas(["--batch-size", "8"], ["--batch-size", "8", "--max-member-bytes", "100"])
    for rank, result in enumerate(run_ranks(servers, check="off")):
        assert result.returncode == 0, f"rank {rank}: {result.stderr}"
        assert "trained 15 of 15 batches" in result.stdout, result.stdout
