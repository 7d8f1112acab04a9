"""A Loader cannot cross fork(): its stream's threads and connection stay in the parent.
A forked child (a DataLoader worker, multiprocessing's fork) that goes on with the
parent's loader gets ForkedProcessError at its first call, promptly (before, its next()
took batches the parent had buffered, then waited forever, stream_timeout or not); the
parent goes on receiving its epoch, untouched by the child."""

import os
import time

import shardcast

JOB = dict(batch_size=8, world_size=1, rank=0, split="sample", prefetch=2)


def wait_for_child(pid: int, timeout: float) -> int:
    """The child's exit code; it is killed (and -9 returned) if it runs past `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return -9


def test_a_forked_child_is_refused_and_the_parent_goes_on(server):
    with shardcast.Loader(server.address, job_id="forked", **JOB) as loader:
        it = iter(loader)
        got = [next(it)]
        time.sleep(0.5)  # the prefetch queue fills: the child would find batches in it
        pid = os.fork()
        if pid == 0:  # the child: every call is refused; exit codes say what happened
            code = 1
            try:
                try:
                    next(it)
                    code = 2  # a batch: the parent's stream was used
                except shardcast.ForkedProcessError as e:
                    code = 0 if f"pid {os.getppid()}" in str(e) else 4
                try:
                    iter(loader)
                    code = 5
                except shardcast.ForkedProcessError:
                    pass
                loader.close()  # leaves the parent's stream alone
            finally:
                os._exit(code)
        assert wait_for_child(pid, timeout=20) == 0
        got += list(it)
        assert len(got) == len(loader)
