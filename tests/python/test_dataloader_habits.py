"""What a DataLoader user does out of habit works as they expect, or says what to do:
addresses that cannot be one, a server that is not there yet, a peek at the first batch,
DataLoader's keywords (shuffle, drop_last, num_workers, pin_memory) and a repr that
shows the effective settings."""

import logging
import socket
import time
import warnings

import pytest
import torch

import shardcast
from conftest import SAMPLES


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    "address, says",
    [
        ("http://127.0.0.1:5055", "no http:// scheme; write HOST:PORT, e.g. '127.0.0.1:5055'"),
        ("127.0.0.1", "no port; write HOST:PORT, e.g. '127.0.0.1:50051'"),
        ("localhost:70000", "port '70000' is not a number from 1 to 65535"),
        ("a:1,,b:2", "an empty entry"),
    ],
)
def test_an_address_that_cannot_be_one_is_a_value_error_at_once(address, says):
    start = time.monotonic()
    with pytest.raises(ValueError, match=f"'{address}'.*{says}" if "," not in address else says):
        shardcast.Loader(address, batch_size=8, reconnect_deadline=60)
    assert time.monotonic() - start < 5  # not the 60 s of the reconnect deadline


def test_waiting_for_a_server_logs_one_line_and_the_error_says_what_to_do(caplog):
    address = f"127.0.0.1:{free_port()}"
    with caplog.at_level(logging.WARNING, logger="shardcast"):
        with pytest.raises(shardcast.ServerUnavailableError) as e:
            shardcast.Loader(address, batch_size=8, reconnect_deadline=1.5)
    notices = [r.getMessage() for r in caplog.records if r.name == "shardcast"]
    assert len(notices) == 1, notices
    assert f"no shardcast-server answers at {address} yet" in notices[0]
    assert "trying again for up to 2 s" in notices[0]  # 1.5 s, rounded
    assert "Start it (shardcast-server --shards DIR --listen ADDRESS) or check the address" in str(
        e.value
    )


def first_keys(batch):
    return [s.key for s in batch.info]


def test_a_peek_does_not_use_the_epoch_up(server):
    with shardcast.Loader(
        server.address, job_id="peek", batch_size=8, world_size=1, rank=0, split="sample", seed=3
    ) as loader:
        peeked = next(iter(loader))  # the iterator is dropped at once
        assert loader.state_dict()["batches_done"] == 0
        epoch = list(loader)
        assert loader.epoch == 0 and len(epoch) == len(loader)
        assert first_keys(epoch[0]) == first_keys(peeked)
        assert torch.equal(epoch[0].images, peeked.images)
        # An iterator that handed out nothing leaves its epoch to the next one too.
        unused = iter(loader)
        assert loader.epoch == 1
        del unused
        assert len(list(loader)) == len(loader) and loader.epoch == 1


def test_a_loop_that_stops_after_two_batches_moves_on(server):
    with shardcast.Loader(
        server.address, job_id="stop-early", batch_size=8, world_size=1, rank=0
    ) as loader:
        for step, _ in enumerate(loader):
            if step == 1:
                break
        assert loader.state_dict()["batches_done"] == 2
        next(iter(loader))
        assert loader.epoch == 1


def test_dataloader_keywords_map_onto_the_job(server):
    with shardcast.Loader(
        server.address,
        job_id="habits",
        batch_size=7,
        world_size=1,
        rank=0,
        split="sample",
        shuffle=True,
        drop_last=False,
    ) as loader:
        reg = loader.registration
        assert (reg.shuffle_shards, reg.shuffle_buffer) == (True, 1000)
        assert len(loader) == -(-SAMPLES // 7)  # remainder pad: every sample once
    with shardcast.Loader(
        server.address,
        job_id="habits-2",
        batch_size=7,
        world_size=1,
        rank=0,
        shuffle=False,
        drop_last=True,
    ) as loader:
        reg = loader.registration
        assert (reg.shuffle_shards, reg.shuffle_buffer) == (False, 0)
        assert len(loader) == SAMPLES // 7


@pytest.mark.parametrize(
    "keywords, says",
    [
        (dict(drop_last=True, remainder="pad"), "drop_last=True means remainder='drop'"),
        (
            dict(shuffle=False, shuffle_shards=True),
            "shuffle=False and shuffle_shards=True disagree",
        ),
        (dict(shuffle=True, shuffle_buffer=0), "shuffle=True and shuffle_buffer=0 disagree"),
    ],
)
def test_keywords_that_disagree_are_a_value_error(keywords, says):
    with pytest.raises(ValueError, match=says):
        shardcast.Loader("127.0.0.1:1", batch_size=8, **keywords)


def test_num_workers_warns_that_the_server_decodes(server):
    with pytest.warns(UserWarning, match="num_workers=8 is ignored: the server decodes"):
        loader = shardcast.Loader(
            server.address, job_id="workers", batch_size=8, world_size=1, rank=0, num_workers=8
        )
    loader.close()


@pytest.mark.skipif(torch.cuda.is_available(), reason="pins memory where CUDA is present")
def test_pin_memory_without_cuda_warns_and_goes_on(server):
    with pytest.warns(UserWarning, match="pin_memory=True but CUDA is not available"):
        loader = shardcast.Loader(
            server.address, job_id="pin", batch_size=8, world_size=1, rank=0, pin_memory=True
        )
    with loader:
        images, labels, _ = next(iter(loader))
        assert images.shape[0] == 8


def test_repr_shows_the_effective_settings(server):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = shardcast.Loader(server.address, job_id="repr", batch_size=8, world_size=1, rank=0)
    with loader:
        shown = repr(loader)
    for part in (
        f"server='{server.address}'",
        "dataset='default'",
        "job_id='repr'",
        "batch_size=8",
        f"batches_per_epoch={SAMPLES // 8}",
        "split='shard'",
        "remainder='drop'",
        "shuffle_shards=False",
        "transform='center'",
        "crop=32",
        "epoch=0",
    ):
        assert part in shown, shown
    assert repr(loader).endswith(", closed)")
