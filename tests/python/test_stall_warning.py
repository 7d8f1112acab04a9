"""The DDP-hang early warning with real trainers: two shardcast-train ranks (Gloo DDP)
on one job, rank 1 stopped with SIGSTOP. Rank 0 then blocks in all-reduce a batch
ahead of it; after --stall-warn the server logs rank 1 once and flags it in GetStatus
(shardcast-ctl status) and in /metrics; after SIGCONT rank 1 takes batches again and
the flag clears."""

import json
import signal
import socket
import subprocess
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from conftest import BUILD, CTL_BIN
from server_process import ServerProcess, pack_synthetic

TRAIN_BIN = BUILD / "client" / "shardcast-train"
JOB = "stall-warn"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ctl_status(address: str) -> dict:
    run = subprocess.run([str(CTL_BIN), "status", "--server", address, "--json"],
                         capture_output=True, text=True, timeout=30, check=True)
    return json.loads(run.stdout)


def ranks_of(status: dict) -> dict:
    jobs = [j for j in status.get("jobs", []) if j["jobId"] == JOB]
    return {int(r.get("rank", 0)): r for r in jobs[0].get("ranks", [])} if jobs else {}


def wait_for(what: str, condition, address: str, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        status = ctl_status(address)
        if condition(status):
            return status
        assert time.monotonic() < deadline, f"{what}: last status {json.dumps(status)}"
        time.sleep(0.2)


def stalled_metric(port: int, rank: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "shardcast_rank_stalled" and \
                    sample.labels == {"job": JOB, "rank": rank}:
                return sample.value
    raise AssertionError(f"no shardcast_rank_stalled for rank {rank}:\n{text}")


def test_a_stopped_rank_is_flagged_and_cleared(tmp_path):
    # 1.2 MB batches (224x224, 8 images) and a trainer prefetch of 1: the transport
    # holds a few batches of a rank, far fewer than the 75 of an epoch, so the stopped
    # rank stays behind its peer on the server, as with real ImageNet batches. Tiny
    # stored images keep decoding cheap.
    shards = pack_synthetic(BUILD, tmp_path / "shards", 1200, 200, "32x32", 4)
    log = tmp_path / "server.log"
    # --stall-warn above the few seconds a healthy rank's takes may pause (the
    # transport grants its window in bursts), below any sensible test timeout.
    server = ServerProcess(BUILD, shards, [
        "--decode-threads", "2", "--stall-warn", "4s", "--metrics-listen", "127.0.0.1:0"],
        log=log)
    server.start()
    master_port = str(free_port())
    ranks = []
    try:
        for rank in (0, 1):
            ranks.append(subprocess.Popen(
                [str(TRAIN_BIN), "--server", server.address, "--job-id", JOB,
                 "--rank", str(rank), "--world-size", "2", "--master-port", master_port,
                 "--arch", "small-cnn", "--resize", "224", "--crop", "224", "-b", "8",
                 "--prefetch", "1", "--epochs", "100000", "--threads", "1", "--device", "cpu",
                 "--no-progress"],
                stdout=subprocess.DEVNULL, stderr=open(tmp_path / f"rank{rank}.err", "w")))
        # Both ranks train (a few batches each) before one is stopped.
        wait_for("both ranks streaming",
                 lambda s: len(ranks_of(s)) == 2 and
                 all(int(r.get("batchesSent", 0)) >= 5 for r in ranks_of(s).values()),
                 server.address, timeout=120)
        for proc in ranks:
            assert proc.poll() is None, (tmp_path / "rank0.err").read_text()

        ranks[1].send_signal(signal.SIGSTOP)
        log_before_stop = len(log.read_text())
        status = wait_for("rank 1 flagged",
                          lambda s: ranks_of(s).get(1, {}).get("stalled", False),
                          server.address)
        assert not ranks_of(status)[0].get("stalled", False)
        assert status["stalledRanks"] == 1
        assert int(ranks_of(status)[1]["lagBatches"]) > 0
        assert status["stallWarnSeconds"] == 4
        assert stalled_metric(server.metrics_port, "1") == 1
        assert stalled_metric(server.metrics_port, "0") == 0
        human = subprocess.run([str(CTL_BIN), "status", "--server", server.address],
                               capture_output=True, text=True, timeout=30).stdout
        assert "1 STALLED RANKS" in human, human
        assert "STALLED (no batch for --stall-warn" in human, human
        # Logged once while it is stopped (however often the server checks).
        warnings = [line for line in log.read_text()[log_before_stop:].splitlines()
                    if f"job '{JOB}' rank 1 has taken no batch for" in line]
        assert len(warnings) == 1, log.read_text()
        assert " W stall: " in warnings[0] and " at epoch " in warnings[0]

        ranks[1].send_signal(signal.SIGCONT)
        status = wait_for("rank 1 cleared",
                          lambda s: not ranks_of(s).get(1, {}).get("stalled", False) and
                          status_moved(s, ranks_of(status)[1]), server.address)
        assert status["stalledRanks"] == 0
        assert stalled_metric(server.metrics_port, "1") == 0
        for proc in ranks:
            assert proc.poll() is None  # both train on
    finally:
        for proc in ranks:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            proc.wait(timeout=30)
        server.kill()


def status_moved(status: dict, before: dict) -> bool:
    """Rank 1 has taken batches since `before` (its status while stopped)."""
    now = ranks_of(status).get(1, {})
    return int(now.get("batchesSent", 0)) > int(before.get("batchesSent", 0))
