"""The server's /metrics endpoint, scraped with a real HTTP client while two ranks
stream, and parsed with the Prometheus project's own parser (prometheus_client):
the exposition is valid, counters grow, the per-rank gauges carry job and rank
labels and agree with each other."""

import time
import urllib.error
import urllib.request
from typing import Dict, FrozenSet, Tuple

import pytest
from prometheus_client.parser import text_string_to_metric_families

import shardcast
from conftest import BUILD, SERVER_FLAGS
from server_process import ServerProcess

Series = Dict[Tuple[str, FrozenSet[Tuple[str, str]]], float]

# 1.2 MB batches, 15 per rank and epoch: more than the HTTP/2 buffers hold, so a rank
# that stops reading stays behind on the server.
BIG = dict(resize=224, crop=224, batch_size=8, world_size=2, prefetch=1)


def scrape(port: int, token: str = "") -> Tuple[str, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.headers["Content-Type"], response.read().decode("utf-8")


def parse(text: str) -> Series:
    """Every sample by (name, labels); prometheus_client raises on invalid text."""
    series: Series = {}
    for family in text_string_to_metric_families(text):
        assert family.name.startswith("shardcast_"), family.name
        assert family.documentation, family.name
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in series, f"duplicate series {key}"
            series[key] = sample.value
    return series


def at(series: Series, name: str, **labels: str) -> float:
    return series[(name, frozenset(labels.items()))]


@pytest.fixture
def metrics_server(shards):
    s = ServerProcess(BUILD, shards, SERVER_FLAGS + ["--metrics-listen", "127.0.0.1:0"])
    s.start()
    yield s
    s.kill()


def test_metrics_scraped_during_a_stream(metrics_server):
    port = metrics_server.metrics_port
    content_type, text = scrape(port)
    assert content_type.startswith("text/plain; version=0.0.4")
    idle = parse(text)
    # Right after start the index may still be building: one state or the other is 1.
    deadline = time.monotonic() + 30
    while at(idle, "shardcast_index_state", dataset="default", state="serving") != 1:
        assert at(idle, "shardcast_index_state", dataset="default", state="indexing") == 1
        assert time.monotonic() < deadline, "the index never reached serving"
        time.sleep(0.05)
        idle = parse(scrape(port)[1])
    assert at(idle, "shardcast_index_state", dataset="default", state="indexing") == 0
    assert at(idle, "shardcast_index_state", dataset="default", state="failed") == 0
    assert at(idle, "shardcast_index_samples", dataset="default") == 240
    assert at(idle, "shardcast_open_streams") == 0

    addr = metrics_server.address
    with shardcast.Loader(addr, job_id="scraped", rank=0, **BIG) as rank0, shardcast.Loader(
        addr, job_id="scraped", rank=1, **BIG
    ) as rank1:
        assert len(rank0) == len(rank1) == 15
        it0, it1 = iter(rank0), iter(rank1)
        for _ in range(3):
            next(it0)
        next(it1)
        during = parse(scrape(port)[1])  # both streams open, mid-epoch
        for _ in range(12):
            next(it0)  # rank 0 takes its whole epoch; rank 1 stays at its first batch
        # The client may hold the last batch a moment before the server's write
        # completes (and counts it): scrape until it has.
        deadline = time.monotonic() + 30
        while True:
            after = parse(scrape(port)[1])
            if (
                at(after, "shardcast_rank_batches_sent_total", job="scraped", rank="0") == 15
                or time.monotonic() > deadline
            ):
                break
            time.sleep(0.05)

        assert at(during, "shardcast_open_streams") == 2
        assert at(during, "shardcast_images_served_total") >= 4 * 8
        served = at(after, "shardcast_images_served_total")
        assert served > at(during, "shardcast_images_served_total")
        assert served >= (15 + 1) * 8
        assert at(after, "shardcast_bytes_served_total") > at(
            during, "shardcast_bytes_served_total"
        )
        # Every image sent was decoded (prefetched ones may be decoded, not yet sent).
        assert at(after, "shardcast_decode_duration_seconds_count") >= served
        assert at(after, "shardcast_decode_duration_seconds_bucket", le="+Inf") == at(
            after, "shardcast_decode_duration_seconds_count"
        )
        assert at(after, "shardcast_job_registered_ranks", job="scraped") == 2
        assert at(after, "shardcast_job_batches_per_epoch", job="scraped") == 15
        # Rank 0 is at the end of epoch 0; rank 1 is behind it by exactly the difference
        # of their positions, and the leader lags by nothing.
        p0 = at(after, "shardcast_rank_position_batches", job="scraped", rank="0")
        p1 = at(after, "shardcast_rank_position_batches", job="scraped", rank="1")
        assert p0 == 15
        assert p1 < p0
        assert at(after, "shardcast_rank_lag_batches", job="scraped", rank="0") == 0
        assert at(after, "shardcast_rank_lag_batches", job="scraped", rank="1") == p0 - p1
        assert at(after, "shardcast_rank_batches_sent_total", job="scraped", rank="0") == 15
        for rank in ("0", "1"):
            assert at(after, "shardcast_rank_stalled", job="scraped", rank=rank) == 0
        # Who waits on whom is counted (both sides have waited by now).
        assert at(after, "shardcast_stream_wait_for_client_seconds_total") > 0
        assert ("shardcast_stream_wait_for_batch_seconds_total", frozenset()) in after


def test_metrics_endpoint_refuses_what_it_does_not_serve(metrics_server):
    port = metrics_server.metrics_port
    # "/" is the status page (test_status_page.py); other paths are 404.
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as page:
        assert page.headers["Content-Type"] == "text/html; charset=utf-8"
    for path, code in (("/index.html", 404), ("/metrics/extra", 404)):
        with pytest.raises(urllib.error.HTTPError) as error:
            urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10)
        assert error.value.code == code
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(
            urllib.request.Request(f"http://127.0.0.1:{port}/metrics", data=b"x", method="POST"),
            timeout=10,
        )
    assert error.value.code == 405
    parse(scrape(port)[1])  # still serving


def test_metrics_require_the_servers_bearer_token(shards, tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("scrape-token-1\n")
    s = ServerProcess(
        BUILD,
        shards,
        SERVER_FLAGS + ["--metrics-listen", "127.0.0.1:0", "--auth-token-file", str(tokens)],
    )
    s.start()
    try:
        with pytest.raises(urllib.error.HTTPError) as error:
            scrape(s.metrics_port)
        assert error.value.code == 401
        assert error.value.headers["WWW-Authenticate"] == "Bearer"
        with pytest.raises(urllib.error.HTTPError) as error:
            scrape(s.metrics_port, token="wrong-token")
        assert error.value.code == 401
        assert (
            at(parse(scrape(s.metrics_port, token="scrape-token-1")[1]), "shardcast_uptime_seconds")
            > 0
        )
    finally:
        s.kill()


def test_the_status_page_shows_invisible_characters_of_a_job_id_as_code_points(metrics_server):
    # Issue 44: a U+202E (right-to-left override) in a job id reached the page as is, and
    # reversed how the rest of its row reads. Now it shows as "\u202e".
    job = "evil\u202enur-niart\u200b"
    with shardcast.Loader(metrics_server.address, job_id=job, rank=0, **BIG) as loader:
        next(iter(loader))
        port = metrics_server.metrics_port
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as page:
            html = page.read().decode("utf-8")
    assert "\u202e" not in html and "\u200b" not in html
    assert 'data-job-id="evil\\u202enur-niart\\u200b"' in html
