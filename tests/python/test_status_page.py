"""The status page (GET / on --metrics-listen) as a browser shows it: Debian's headless
chromium renders the page during a job of two ranks, one of them stalled, and what the
rendered DOM shows (job, each rank's epoch and position, batches per epoch, the stalled
rank highlighted) must be what GetStatus (shardcast-ctl status --json) says.

Needs `chromium` (tools/setup-deps.sh installs it as a test dependency); the test fails,
never skips, without it."""

import json
import shutil
import subprocess
import time
from html.parser import HTMLParser
from typing import Dict, List, Tuple

import shardcast

from conftest import BUILD, CTL_BIN, SERVER_FLAGS
from server_process import ServerProcess

JOB = "page-<job>&co"  # escaped on the page, the same id in the DOM's text and attributes
# 1.2 MB batches: more than the HTTP/2 buffers hold, so a rank that takes nothing stays
# behind on the server. 240 samples / 2 ranks / 8 = 15 batches per epoch.
BIG = dict(resize=224, crop=224, batch_size=8, world_size=2, prefetch=1, check_ranks=False)


class RenderedPage(HTMLParser):
    """The jobs and ranks of a rendered status page, from its data-* attributes and the
    classes the page highlights with."""

    def __init__(self) -> None:
        super().__init__()
        self.jobs: Dict[str, dict] = {}
        self.stalled_total = None
        self._job = None
        self._in_stalled_total = False

    def handle_starttag(self, tag: str, attrs: List[Tuple[str, str]]) -> None:
        a = dict(attrs)
        if tag == "section" and "data-job-id" in a:
            self._job = {"batches_per_epoch": int(a["data-batches-per-epoch"]), "ranks": {}}
            self.jobs[a["data-job-id"]] = self._job
        elif tag == "tr" and "data-rank" in a and self._job is not None:
            self._job["ranks"][int(a["data-rank"])] = {
                "epoch": int(a["data-epoch"]),
                "next_batch": int(a["data-next-batch"]),
                "stalled": "stalled" in a.get("class", "").split(),
            }
        elif tag == "span" and a.get("id") == "stalled":
            self._in_stalled_total = True

    def handle_data(self, data: str) -> None:
        if self._in_stalled_total:
            self.stalled_total = int(data.split()[0])
            self._in_stalled_total = False


def ctl_status(address: str) -> dict:
    run = subprocess.run(
        [str(CTL_BIN), "status", "--server", address, "--json"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def ranks_of(status: dict) -> Dict[int, dict]:
    """The job's ranks as GetStatus's JSON has them (zeros and false are left out)."""
    job = next(j for j in status.get("jobs", []) if j["jobId"] == JOB)
    return {
        int(r.get("rank", 0)): {
            "epoch": int(r.get("epoch", 0)),
            "next_batch": int(r.get("nextBatch", 0)),
            "stalled": bool(r.get("stalled", False)),
        }
        for r in job.get("ranks", [])
    }


def chromium_dom(url: str) -> str:
    browser = shutil.which("chromium")
    assert browser, "chromium is not installed (tools/setup-deps.sh installs it)"
    run = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_the_browser_shows_what_get_status_says(shards):
    server = ServerProcess(
        BUILD, shards, SERVER_FLAGS + ["--stall-warn", "1s", "--metrics-listen", "127.0.0.1:0"]
    )
    server.start()
    try:
        with shardcast.Loader(server.address, job_id=JOB, rank=0, **BIG) as ahead, shardcast.Loader(
            server.address, job_id=JOB, rank=1, **BIG
        ) as behind:
            it_behind = iter(behind)
            next(it_behind)  # rank 1 takes one batch and then nothing
            it_ahead = iter(ahead)
            for _ in range(12):
                next(it_ahead)
            deadline = time.monotonic() + 20
            while not ranks_of(ctl_status(server.address))[1]["stalled"]:
                assert time.monotonic() < deadline, ctl_status(server.address)
                time.sleep(0.2)
            # Both ranks stand still now; a status taken before and after the page
            # that agree are what the page must show.
            for _ in range(3):
                before = ctl_status(server.address)
                dom = chromium_dom(f"http://127.0.0.1:{server.metrics_port}/")
                after = ctl_status(server.address)
                if ranks_of(before) == ranks_of(after):
                    break
            page = RenderedPage()
            page.feed(dom)
            assert JOB in page.jobs, dom
            job = next(j for j in after["jobs"] if j["jobId"] == JOB)
            assert page.jobs[JOB]["batches_per_epoch"] == int(job["batchesPerEpoch"]) == 15
            assert page.jobs[JOB]["ranks"] == ranks_of(after), dom
            assert page.jobs[JOB]["ranks"][1]["stalled"]
            assert not page.jobs[JOB]["ranks"][0]["stalled"]
            assert page.stalled_total == after.get("stalledRanks", 0) == 1
            # The id is text on the page, never markup; the page refreshes itself.
            assert "page-&lt;job&gt;&amp;co" in dom
            assert '<meta http-equiv="refresh" content="5">' in dom
            assert "STALLED: no batch for" in dom
    finally:
        server.kill()
