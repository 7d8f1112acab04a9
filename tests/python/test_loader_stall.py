"""A stalled server (stopped with SIGSTOP: the connection stays open, nothing arrives)
ends the epoch with StreamTimeoutError within a bound instead of blocking the training
loop forever; a pause shorter than `stream_timeout` is no stall."""

import signal
import time

import pytest

import shardcast

# 1.2 MB batches (30 per epoch): more than the HTTP/2 buffers hold, so the stream is
# still open when the server stops.
BIG = dict(resize=224, crop=224, batch_size=8, world_size=1, rank=0, prefetch=1)


def test_a_stalled_server_raises_stream_timeout_error(own_server):
    with shardcast.Loader(own_server.address, job_id="stalled", stream_timeout=2, **BIG) as loader:
        it = iter(loader)
        next(it)
        own_server.proc.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        with pytest.raises(shardcast.StreamTimeoutError) as error:
            # Buffered batches may still come; should the epoch end, the next one's
            # request stalls as well.
            while time.monotonic() - stopped < 60:
                for _ in loader:
                    pass
        own_server.proc.send_signal(signal.SIGCONT)
        assert time.monotonic() - stopped < 30
        message = str(error.value)
        assert "job 'stalled' rank 0 epoch " in message
        assert f"no batch from server {own_server.address} for 2 s (the stream timeout)" in message
        assert isinstance(error.value, shardcast.ServerUnavailableError)


def test_a_pause_shorter_than_the_timeout_is_no_stall(own_server):
    with shardcast.Loader(own_server.address, job_id="paused", stream_timeout=8, **BIG) as loader:
        it = iter(loader)
        batches = [next(it)]
        own_server.proc.send_signal(signal.SIGSTOP)
        time.sleep(1.5)
        own_server.proc.send_signal(signal.SIGCONT)
        batches += list(it)
        assert len(batches) == len(loader)
        assert loader.reconnects == 0


def test_a_negative_stream_timeout_is_refused(server):
    with pytest.raises(ValueError, match="stream_timeout must be >= 0"):
        shardcast.Loader(server.address, job_id="bad-timeout", stream_timeout=-1, **BIG)
