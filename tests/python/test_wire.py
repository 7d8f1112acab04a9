"""The pixels of a received Batch are a view of the received bytes, not a copy; a
message in another field order still parses (with a copy); garbage is a clear error."""

import pytest

import shardcast
from shardcast._proto import pb
from shardcast._wire import split_batch


def batch(images: bytes) -> pb.Batch:
    b = pb.Batch(epoch=1, index=2, labels=[3, 4], shape=[2, 3, 1, 1])
    b.samples.add(key="a", shard=0, index_in_shard=0, valid=True)
    b.samples.add(key="b", shard=0, index_in_shard=1, valid=True)
    b.images = images
    return b


def test_images_last_are_a_view_of_the_received_bytes():
    raw = batch(bytes(range(6))).SerializeToString()  # protobuf writes field 15 last
    meta, pixels = split_batch(raw, 6)
    assert pixels.obj is raw and bytes(pixels) == bytes(range(6))
    assert meta.images == b"" and list(meta.labels) == [3, 4] and meta.samples[1].key == "b"


def test_another_field_order_parses_in_full():
    images_first = pb.Batch(images=bytes(range(6))).SerializeToString()
    raw = images_first + batch(b"").SerializeToString()
    meta, pixels = split_batch(raw, 6)
    assert bytes(pixels) == bytes(range(6)) and list(meta.labels) == [3, 4]


def test_a_tail_that_only_looks_like_images_parses_in_full():
    # The last sample's key ends with what a 2-byte images field would look like.
    b = batch(bytes(6))
    b.samples[1].key = "x\x7a\x02ab"
    raw = b.SerializeToString()[: -8]  # drop the real images field (tag, length, 6 bytes)
    meta, pixels = split_batch(raw, 2)
    assert meta.samples[1].key == "x\x7a\x02ab" and len(pixels) == 0


def test_undecodable_bytes_are_a_batch_check_error():
    with pytest.raises(shardcast.BatchCheckError, match="undecodable Batch message"):
        split_batch(b"\xff\xff\xff", 1)
