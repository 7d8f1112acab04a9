"""Members beside the image (issue 37) through the Python Loader: `fields=` asks for a
sample's members by extension, `image=False` for the members alone, and each batch's
`info[i].fields` maps a field's name to the member's bytes (None where an optional one
is missing, and for padding; `images` is None without images).

The server here answers in this process exactly as the protocol says
(hostile_server.py's plumbing, serving made-up members), and a few wrong answers the
client must refuse.
"""

import warnings
from typing import List

import pytest

import hostile_server
import shardcast
from shardcast._proto import pb

# ---- the Loader's keywords ---------------------------------------------------------


def test_a_str_for_fields_is_a_type_error_that_says_to_pass_a_tuple():
    # Refused before anything connects: the address is never dialled.
    with pytest.raises(TypeError, match=r"tuple of field specs, e\.g\. fields=\('txt',\)"):
        shardcast.Loader("127.0.0.1:1", fields="txt", job_id="j", rank=0, world_size=1)
    with pytest.raises(TypeError, match="each field spec is a str"):
        shardcast.Loader("127.0.0.1:1", fields=("txt", 3), job_id="j", rank=0, world_size=1)
    with pytest.raises(TypeError, match="image must be True, False or None"):
        shardcast.Loader("127.0.0.1:1", image="no", job_id="j", rank=0, world_size=1)


def test_help_and_the_signature_name_fields_and_image():
    doc = shardcast.Loader.__doc__
    assert "fields=(\"txt\", \"json?\")" in doc and "image=False" in doc
    assert "fields" in shardcast.SampleInfo._fields


# ---- a server that answers as the protocol says, with made-up members ---------------

BATCH = 2
EPOCH_BATCHES = 3


def fields_registration(request: pb.RegisterRequest, image: bool) -> pb.RegisterResponse:
    """The registration of a job with the fields asked for (normalized as the server
    does: lower case), with or without images."""
    r = hostile_server.registration(request, batches_per_epoch=EPOCH_BATCHES,
                                    batch_size=BATCH, image_shape=(3, 4, 4) if image else ())
    r.image = image
    r.num_classes = 0 if not image else r.num_classes
    del r.class_names[:]
    r.fields.extend(f.lower() for f in request.fields)
    return r


def member(index: int, i: int, ext: str) -> bytes:
    """The made-up member `ext` of sample i of batch `index`: non-UTF-8 bytes too."""
    return f"{ext} of {index}-{i} 猫 🐱".encode() + bytes([0xFF, 0x00, index, i])


def fields_batch(index: int, fields: List[str], image: bool, pad_last: bool = False,
                 json_missing_for: int = 1) -> bytes:
    """Batch `index`: sample `json_missing_for` has no json, the last is padding when
    `pad_last`."""
    samples = []
    for i in range(BATCH):
        padding = pad_last and i == BATCH - 1
        sample = pb.SampleInfo(key="" if padding else f"s{index}-{i}", shard=-1 if padding else 0,
                               index_in_shard=-1 if padding else i, valid=not padding)
        if not padding:
            for spec in fields:
                ext = spec.rstrip("?")
                if ext == "json" and i == json_missing_for:
                    sample.fields.add(present=False)
                else:
                    sample.fields.add(present=True, ext=ext, data=member(index, i, ext))
        samples.append(sample)
    header = pb.Batch(epoch=0, index=index, labels=[-1] * BATCH, samples=samples,
                      shape=[BATCH, 3, 4, 4] if image else [])
    raw = header.SerializeToString()
    if image:
        raw += hostile_server.images_field(bytes([index]) * (BATCH * 3 * 4 * 4))
    return raw


def serving_fields(image: bool, spoil=None, pad_last_batch: bool = True):
    """A server of the fields each registration asks for (the last one's), with or
    without images; `spoil(index, raw)` may change each batch sent."""
    asked: List[str] = []

    def register(request, context):
        asked[:] = [f.lower() for f in request.fields]
        return fields_registration(request, image)

    def stream(request, context):
        for index in range(request.start_batch, EPOCH_BATCHES):
            raw = fields_batch(index, asked, image,
                               pad_last=pad_last_batch and index == EPOCH_BATCHES - 1)
            yield spoil(index, raw) if spoil is not None else raw

    return hostile_server.HostileServer(register=register, stream=stream)


def test_a_members_only_job_hands_out_bytes_none_and_no_images():
    with serving_fields(image=False) as server, shardcast.Loader(
            server.address, fields=("TXT", "json?"), image=False, job_id="fields-only",
            rank=0, world_size=1, reconnect_deadline=3, stream_timeout=5) as loader:
        assert loader.fields == ("txt", "json?")
        assert not loader.has_images and loader.image_shape is None
        assert "image=False, fields=('txt', 'json?')" in repr(loader)
        seen = 0
        for index, (images, labels, info) in enumerate(loader):
            assert images is None
            assert shardcast.normalize(images) is None
            assert labels.tolist() == [-1] * BATCH
            for i, sample in enumerate(info):
                assert list(sample.fields) == ["txt", "json"]
                if not sample.valid:  # padding: every field None
                    assert sample.fields == {"txt": None, "json": None}
                    continue
                seen += 1
                assert sample.fields["txt"] == member(index, i, "txt")
                assert isinstance(sample.fields["txt"], bytes)
                expected_json = None if i == 1 else member(index, i, "json")
                assert sample.fields["json"] == expected_json
        assert seen == EPOCH_BATCHES * BATCH - 1


def test_fields_beside_images_and_pinned_memory_without_images():
    with serving_fields(image=True, pad_last_batch=False) as server, shardcast.Loader(
            server.address, fields=("txt",), job_id="fields-images", rank=0, world_size=1,
            reconnect_deadline=3, stream_timeout=5) as loader:
        assert loader.has_images and loader.image_shape == (3, 4, 4)
        images, labels, info = next(iter(loader))
        assert images.shape == (BATCH, 3, 4, 4)
        assert [s.fields for s in info] == [{"txt": member(0, i, "txt")} for i in range(BATCH)]
    # pin_memory has no pixels to pin in a job without images: batches come as without it.
    with serving_fields(image=False) as server, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no CUDA here: pin_memory=True warns and goes on
        loader = shardcast.Loader(server.address, fields=("txt",), image=False,
                                  pin_memory=True, job_id="pinned", rank=0, world_size=1,
                                  reconnect_deadline=3, stream_timeout=5)
        images, _, info = next(iter(loader))
        assert images is None and info[0].fields["txt"] == member(0, 0, "txt")
        loader.close()


def test_a_server_that_ignores_the_fields_is_refused_at_registration():
    # A server older than fields: it answers a job of images alone.
    with hostile_server.HostileServer() as server:
        with pytest.raises(shardcast.JobRefusedError,
                           match=r"registered fields \[\] for the fields \[txt\] asked.*"
                                 r"does not serve the job as asked"):
            shardcast.Loader(server.address, fields=("txt",), job_id="old", rank=0,
                             world_size=1, reconnect_deadline=3)


def drop_field_values(index: int, raw: bytes) -> bytes:
    """Batch 1 with its first sample's field values gone."""
    if index != 1:
        return raw
    batch = pb.Batch.FromString(raw)
    del batch.samples[0].fields[:]
    return batch.SerializeToString()


def padding_with_values(index: int, raw: bytes) -> bytes:
    batch = pb.Batch.FromString(raw)
    batch.samples[1].valid = False
    return batch.SerializeToString()


@pytest.mark.parametrize("spoil, says", [
    (drop_field_values, r"epoch 0 batch 1 sample 0 \(key 's1-0'\): 0 field values for the 2 "
                        r"registered fields \[txt,json\?\]"),
    (padding_with_values, r"batch 0 sample 1 \(key 's0-1'\): padding with 2 field values"),
])
def test_samples_without_their_field_values_are_a_batch_check_error(spoil, says):
    with serving_fields(image=False, spoil=spoil) as server, shardcast.Loader(
            server.address, fields=("txt", "json?"), image=False, job_id="spoilt", rank=0,
            world_size=1, reconnect_deadline=3, stream_timeout=5) as loader:
        with pytest.raises(shardcast.BatchCheckError, match=says):
            for _ in loader:
                pass

