"""The native client under the Loader (shardcast._native): pixels reach torch without a
copy, next_into fills the caller's memory with the same bytes, and a wait for the server
does not hold the GIL."""

import signal
import threading
import time

import pytest
import torch

import shardcast
from conftest import BUILD, SERVER_FLAGS
from server_process import ServerProcess

JOB = dict(batch_size=8, world_size=1, rank=0)


def test_pixels_are_wrapped_not_copied(server):
    with shardcast.Loader(server.address, job_id="native-view", **JOB) as loader:
        it = iter(loader)
        next(it)
        native = loader._stream.next()
        first = torch.frombuffer(native.pixels, dtype=torch.uint8)
        again = torch.frombuffer(native.pixels, dtype=torch.uint8)
        # Both tensors are views of the one block the batch holds.
        assert first.data_ptr() == again.data_ptr()
        first[0] = 255 - int(first[0])
        assert int(again[0]) == int(first[0])
        labels = torch.frombuffer(native.labels, dtype=torch.int64)
        assert labels.shape == (8,)
        assert native.shape == (8, 3, 32, 32)


def test_next_into_fills_the_callers_memory_with_the_same_bytes(server):
    with shardcast.Loader(server.address, job_id="native-plain", **JOB) as plain, shardcast.Loader(
        server.address, job_id="native-into", **JOB
    ) as into:
        expected = [images.clone() for images, _, _ in plain]
        into._stream.start_epoch(0)
        for want in expected:
            out = torch.zeros(want.shape, dtype=torch.uint8)
            native = into._stream.next_into(out.data_ptr(), out.numel())
            assert native.pixels is None
            assert torch.equal(out, want)
        out = torch.zeros(expected[0].shape, dtype=torch.uint8)
        assert into._stream.next_into(out.data_ptr(), out.numel()) is None  # epoch over


def test_next_into_refuses_a_destination_of_another_size(server):
    with shardcast.Loader(server.address, job_id="native-size", **JOB) as loader:
        loader._stream.start_epoch(0)
        out = torch.zeros(100, dtype=torch.uint8)
        with pytest.raises(ValueError, match="holds 100 bytes, the batch's pixels are 24576"):
            loader._stream.next_into(out.data_ptr(), out.numel())
        # Refused before a batch was taken: the epoch still starts at batch 0.
        assert loader._stream.next().index == 0


def test_waiting_for_the_server_does_not_hold_the_gil(own_server):
    """A Python thread keeps running at its own pace while the training thread waits in
    next() on a stopped server (about 4 s: the stream timeout, then the reconnect's)."""
    count = 0
    stop = threading.Event()

    def spin():
        nonlocal count
        while not stop.is_set():
            count += 1

    big = dict(resize=224, crop=224, batch_size=8, world_size=1, rank=0, prefetch=1)
    spinner = threading.Thread(target=spin)
    with shardcast.Loader(
        own_server.address, job_id="native-gil", stream_timeout=2, **big
    ) as loader:
        it = iter(loader)
        next(it)
        spinner.start()
        try:
            # Its pace while this thread sleeps (time.sleep releases the GIL).
            start, before = time.monotonic(), count
            time.sleep(0.5)
            solo = (count - before) / (time.monotonic() - start)
            own_server.proc.send_signal(signal.SIGSTOP)
            start, before = time.monotonic(), count
            with pytest.raises(shardcast.StreamTimeoutError):
                while True:  # the buffered batches, then the wait
                    next(it)
            waited = time.monotonic() - start
            during = (count - before) / waited
        finally:
            own_server.proc.send_signal(signal.SIGCONT)
            stop.set()
            spinner.join()
    assert waited > 2
    # Had next() held the GIL, the spinner would have stood still for the whole wait.
    assert during > 0.3 * solo, (during, solo)


def test_the_wire_only_server_stamps_each_resent_batch_so_the_loader_drains_it(shards):
    """--bench-only-resend-first-batch re-sends batch 0 with each batch's index, so the
    clients' sequence checks take it (bench/native_loader_bench.py measures them
    client-bound against it)."""
    wire = ServerProcess(BUILD, shards, SERVER_FLAGS + ["--bench-only-resend-first-batch"])
    wire.start()
    try:
        with shardcast.Loader(wire.address, job_id="wire-only", **JOB) as loader:
            batches = [(images.clone(), labels.clone()) for images, labels, _ in loader]
            assert len(batches) == len(loader) > 1
            for images, labels in batches:
                assert torch.equal(images, batches[0][0]) and torch.equal(labels, batches[0][1])
    finally:
        wire.kill(signal.SIGTERM)
