"""The native stream's encoded-delivery bindings against a server on loopback that sends
what encoded delivery sends (a real JPEG with a center crop, and a corrupt one):
decode "none" hands each sample's image over as an EncodedImage named as the proto's
fields, without pixels; decode "cpu" hands out pixels (the corrupt image as the
substitute, counted) and no EncodedImage; StreamOptions.decode takes only its names."""

import io

import pytest
from PIL import Image

import hostile_server
from shardcast import _native
from shardcast._proto import pb

C = 8  # output size: an 8 x 8 square of a 32 x 32 image resized to 16 x 16


def jpeg() -> bytes:
    image = Image.new("RGB", (32, 32))
    image.putdata([(x * 8, y * 8, (x + y) * 4) for y in range(32) for x in range(32)])
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=90)
    return out.getvalue()


def encoded(data: bytes) -> pb.EncodedImage:
    return pb.EncodedImage(
        data=data,
        source_width=32,
        source_height=32,
        left=4,
        top=4,
        width=C,
        height=C,
        resize_width=16,
        resize_height=16,
        output_size=C,
    )


IMAGES = [jpeg(), b"\xff\xd8 not a jpeg"]


def register(request, context):
    response = hostile_server.registration(
        request, batches_per_epoch=1, batch_size=2, image_shape=(3, C, C)
    )
    response.image = True
    response.delivery = request.delivery
    response.transform.mode = pb.TRANSFORM_MODE_CENTER
    return response


def stream(request, context):
    batch = pb.Batch(epoch=request.epoch, index=0, labels=[0, 1], shape=[2, 3, C, C])
    for i, data in enumerate(IMAGES):
        batch.samples.append(
            pb.SampleInfo(key=f"k{i}", shard=0, index_in_shard=i, valid=True, encoded=encoded(data))
        )
    yield batch.SerializeToString()


def only_batch(address: str, decode: str):
    options = _native.StreamOptions()
    options.server = address
    options.decode = decode
    options.decode_threads = 2
    options.reconnect_deadline = 3
    options.join_images = True  # as the Loader streams for next()
    job = pb.RegisterRequest(job_id=f"encoded-{decode}", rank=0, world_size=1)
    native = _native.Stream(job.SerializeToString(), options, _native.client_security())
    native.start_epoch(0)
    return native, native.next()


def test_decode_none_hands_over_each_image_named_as_the_proto():
    with hostile_server.HostileServer(register, stream) as server:
        native, batch = only_batch(server.address, "none")
        assert native.delivery == "encoded" and native.dct_scaling is False
        assert batch.pixels is None and batch.shape == (2, 3, C, C)
        with pytest.raises(ValueError, match='decode="none"'):
            native.next_into(0, 2 * 3 * C * C)
        for image, sent in zip(batch.encoded, IMAGES):
            want = encoded(sent)
            assert image.data == sent
            for name in (
                "source_width",
                "source_height",
                "left",
                "top",
                "width",
                "height",
                "resize_width",
                "resize_height",
                "flip",
                "output_size",
                "cut_left",
                "cut_top",
                "cut_width",
                "cut_height",
            ):
                assert getattr(image, name) == getattr(want, name), name
        assert native.client_substituted == 0
        native.close()


def test_decode_cpu_hands_out_pixels_and_the_substitute():
    with hostile_server.HostileServer(register, stream) as server:
        native, batch = only_batch(server.address, "cpu")
        pixels = bytes(memoryview(batch.pixels))
        assert len(pixels) == 2 * 3 * C * C
        assert pixels[3 * C * C :] == bytes([128]) * (3 * C * C)
        assert batch.encoded == [None, None]
        assert [s[4] for s in batch.samples] == [False, True]  # substituted
        assert native.client_substituted == 1
        native.close()


def test_decode_takes_only_its_names():
    options = _native.StreamOptions()
    assert options.decode == "server" and options.decode_threads == 0
    assert options.max_decode_memory == 4 << 30
    with pytest.raises(ValueError, match="'gpu' is not one of server, cpu, none"):
        options.decode = "gpu"
