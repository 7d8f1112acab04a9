"""Parsing a received Batch without copying its pixels, and the checks every batch passes.

gRPC hands the client each message as one `bytes` object. Parsing it with protobuf
would copy the image bytes into the message, and reading `Batch.images` would copy them
again; instead the small fields are parsed alone and the pixels stay a view of the
received bytes. shardcast-server writes `images` (field 15) last, as its own slice, so
the message is `fields || tag(15) || length || pixels`.
"""

from typing import Sequence, Tuple

from google.protobuf.message import DecodeError

from shardcast._proto import pb
from shardcast.errors import BatchCheckError

_IMAGES_FIELD = pb.Batch.DESCRIPTOR.fields_by_name["images"].number
_LENGTH_DELIMITED = 2


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


_IMAGES_TAG = _varint((_IMAGES_FIELD << 3) | _LENGTH_DELIMITED)


def split_batch(raw: bytes, image_bytes: int) -> Tuple[pb.Batch, memoryview]:
    """Parses `raw` into (the Batch without its pixels, a view of the pixels).

    `image_bytes` is the expected pixel count B*3*C*C. When `raw` ends with field 15 of
    exactly that length and the bytes before it parse as a complete message, the two
    together are the message (protobuf parses fields left to right, and a singular field
    seen twice keeps its last value), so the view is exact. Anything else (another
    field order, another size) is parsed in full, with one copy of the pixels; the
    checks then judge it. Raises BatchCheckError when the bytes do not parse.
    """
    view = memoryview(raw)
    start = len(raw) - image_bytes
    header = _IMAGES_TAG + _varint(image_bytes)
    cut = start - len(header)
    if image_bytes > 0 and cut >= 0 and view[cut:start] == header:
        try:
            return pb.Batch.FromString(view[:cut]), view[start:]
        except DecodeError:
            pass  # the tail only looked like field 15: parse the whole message
    try:
        message = pb.Batch.FromString(raw)
    except DecodeError as e:
        raise BatchCheckError(f"undecodable Batch message of {len(raw)} bytes: {e}") from e
    return message, memoryview(message.images)


def check_batch(
    meta: pb.Batch,
    pixels: int,
    epoch: int,
    index: int,
    image_shape: Sequence[int],
    where: str,
) -> None:
    """Raises BatchCheckError unless the batch is (epoch, index) with shape [B, *image_shape],
    B labels, B samples and `pixels` == B*3*C*C image bytes."""
    if meta.epoch != epoch or meta.index != index:
        raise BatchCheckError(
            f"{where}: server sent (epoch {meta.epoch}, index {meta.index}) instead; "
            "the stream is out of sequence"
        )
    shape = list(meta.shape)
    if len(shape) != 4 or shape[1:] != list(image_shape) or shape[0] <= 0:
        raise BatchCheckError(
            f"{where}: batch shape {shape} does not match registered image shape "
            f"{list(image_shape)}"
        )
    b = shape[0]
    want = b * shape[1] * shape[2] * shape[3]
    if pixels != want or len(meta.labels) != b or len(meta.samples) != b:
        raise BatchCheckError(
            f"{where}: {pixels} image bytes, {len(meta.labels)} labels, "
            f"{len(meta.samples)} samples for shape {shape} (want {want}, {b}, {b})"
        )
