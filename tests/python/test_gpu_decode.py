"""shardcast.gpu_decode (Loader(decode="cuda")) on the CPU: the same torch code a CUDA
device runs, compared with the server's C++ code bound in _native.

- crop_and_resize against the C++ transform (ApplyCrop) given the same decoded pixels,
  center and random crops with and without flips, many sizes and seeds: measured max 1,
  mean 0.002 levels (float32 resampling against 16-bit fixed point);
- the whole batch path (torchvision's decode_jpeg on the CPU, libjpeg where a device has
  nvJPEG) against _native.decode_encoded (server delivery's bytes) on real JPEG, PNG,
  WebP, CMYK and grayscale JPEG, corrupt and truncated files: measured max 1, mean 0.002;
  what is not a plain JPEG goes to the CPU decode (counted) and is exact; a file the
  server would substitute is the same substitute (every byte 128).
"""

import io
import types
from typing import Any, Dict

import numpy as np
import pytest
import torch
from PIL import Image

from shardcast import _native
from shardcast.gpu_decode import SUBSTITUTE_VALUE, BatchDecoder, crop_and_resize

SIZES = [
    (97, 61),
    (61, 97),
    (300, 200),
    (64, 64),
    (333, 250),
    (50, 41),
    (129, 255),
    (640, 480),
    (73, 300),
]
RESIZE, CROP = 72, 64

# The measured bounds (levels of 0..255): float32 torch resampling against the server's
# 16-bit fixed point, and libjpeg through torchvision against the server's libjpeg-turbo.
TRANSFORM_MAX, TRANSFORM_MEAN = 1, 0.01
BATCH_MAX, BATCH_MEAN = 1, 0.01
# On a CUDA device (nvJPEG): provisional, not yet measured (nvJPEG's IDCT is not
# libjpeg's); `pytest -s` prints the figure a lent device measures.
NVJPEG_MAX, NVJPEG_MEAN = 8, 0.5
# The devices the batch path runs on here, with their bounds (max, mean).
DEVICES = {"cpu": (BATCH_MAX, BATCH_MEAN)}
if torch.cuda.is_available():
    DEVICES["cuda"] = (NVJPEG_MAX, NVJPEG_MEAN)


def photo_like(w: int, h: int, seed: int, channels: int = 3) -> np.ndarray:
    """Smooth gradients, an edge and noise: what a lossy encoder and a resampler meet."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    planes = [
        128 + 90 * np.sin(seed + c + 3.0 * x / w + 2.0 * y / h) + 40 * ((x + y) % 37 < 9)
        for c in range(channels)
    ]
    pixels = np.stack(planes, axis=-1) + rng.normal(0, 6, (h, w, channels))
    return np.clip(np.rint(pixels), 0, 255).astype(np.uint8)


def encode(pixels: np.ndarray, fmt: str, mode: str = "RGB", **options: Any) -> bytes:
    image = Image.fromarray(pixels[..., 0] if mode == "L" else pixels)
    if mode not in ("RGB", "L"):
        image = image.convert(mode)
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()


def jpeg(w: int, h: int, seed: int, **options: Any) -> bytes:
    return encode(photo_like(w, h, seed), "JPEG", quality=90, **options)


def planned(data: bytes, mode: str, seed: int, plan_of: bytes = b"") -> types.SimpleNamespace:
    """An EncodedImage as the server sends it: `data` with the crop the server plans for
    `plan_of` (default `data`) and `seed`."""
    plan: Dict[str, Any] = _native.plan_encoded_sample(plan_of or data, mode, RESIZE, CROP, seed)
    del plan["decode_bytes"]
    return types.SimpleNamespace(data=data, **plan)


def decoded_tensor(data: bytes) -> torch.Tensor:
    """The server's full-size decode as uint8 [3, H, W]."""
    height, width, hwc = _native.decode_image(data)
    return (
        torch.frombuffer(bytearray(hwc), dtype=torch.uint8).view(height, width, 3).permute(2, 0, 1)
    )


def server_bytes(encoded: Any) -> np.ndarray:
    return np.frombuffer(_native.decode_encoded(encoded, False), dtype=np.uint8)


def differences(got: torch.Tensor, want: np.ndarray) -> np.ndarray:
    return np.abs(got.cpu().numpy().reshape(-1).astype(np.int32) - want.astype(np.int32))


def test_crop_and_resize_matches_the_cpp_transform():
    worst, total, count, flips = 0, 0, 0, 0
    for seed in range(60):
        w, h = SIZES[seed % len(SIZES)]
        data = jpeg(w, h, seed)
        height, width, hwc = _native.decode_image(data)
        image = decoded_tensor(data)
        for mode in ("center", "random"):
            encoded = planned(data, mode, seed * 7919 + 1)
            flips += encoded.flip
            want = np.frombuffer(_native.apply_crop(hwc, width, height, encoded), np.uint8)
            diff = differences(crop_and_resize(image, encoded), want)
            worst, total, count = (
                max(worst, int(diff.max())),
                total + int(diff.sum()),
                count + diff.size,
            )
    assert flips > 10, "the seeds drew too few flips to test them"
    assert worst <= TRANSFORM_MAX
    assert total / count <= TRANSFORM_MEAN


def test_crop_and_resize_counts_a_cuts_window_from_the_cut():
    """With a cut, `data` decodes to the cut and left/top count from it: the same pixels
    as the stored image's crop at left/top + cut_left/cut_top."""
    data = jpeg(333, 250, 4)
    height, width, hwc = _native.decode_image(data)
    image = decoded_tensor(data)
    for seed in range(20):
        whole = planned(data, "random", seed)
        cut_left, cut_top = (whole.left // 16) * 16, (whole.top // 16) * 16
        cut = types.SimpleNamespace(**vars(whole))
        cut.left, cut.top = whole.left - cut_left, whole.top - cut_top
        cut.cut_left, cut.cut_top = cut_left, cut_top
        cut.cut_width, cut.cut_height = width - cut_left, height - cut_top
        got = crop_and_resize(image[:, cut_top:, cut_left:], cut)
        want = np.frombuffer(_native.apply_crop(hwc, width, height, whole), np.uint8)
        assert differences(got, want).max() <= TRANSFORM_MAX


def test_crop_and_resize_refuses_a_window_outside_the_image():
    image = decoded_tensor(jpeg(64, 48, 1))
    encoded = planned(jpeg(64, 48, 1), "random", 3)
    encoded.left = 64 - encoded.width + 1
    with pytest.raises(ValueError, match="outside"):
        crop_and_resize(image, encoded)
    center = planned(jpeg(64, 48, 1), "center", 3)
    center.top = center.resize_height
    with pytest.raises(ValueError, match="does not fit"):
        crop_and_resize(image, center)


@pytest.fixture(scope="module")
def mixed_batch():
    """(samples, kinds): a batch of every kind the decoder meets, in one order."""
    samples, kinds = [], []

    def add(kind: str, encoded: Any) -> None:
        samples.append(encoded)
        kinds.append(kind)

    for seed in range(12):
        w, h = SIZES[seed % len(SIZES)]
        add("jpeg", planned(jpeg(w, h, seed), ("center", "random")[seed % 2], seed))
    add("jpeg", planned(jpeg(200, 150, 40, progressive=True), "random", 40))
    add("jpeg", planned(jpeg(199, 151, 41, subsampling=0), "center", 41))  # 4:4:4
    add("png", planned(encode(photo_like(97, 61, 50), "PNG"), "center", 50))
    add("webp", planned(encode(photo_like(120, 90, 51), "WEBP", quality=80), "random", 51))
    add("cmyk", planned(encode(photo_like(100, 80, 52), "JPEG", "CMYK", quality=90), "center", 52))
    add("gray", planned(encode(photo_like(90, 100, 53), "JPEG", "L", quality=90), "random", 53))
    whole = jpeg(160, 120, 54)
    add("truncated", planned(whole[: len(whole) * 2 // 3], "random", 54))
    add(
        "corrupt",
        planned(
            b"\xff\xd8\xff\xe0 not a jpeg at all" + b"\x00" * 200 + b"\xff\xd9",
            "center",
            55,
            plan_of=whole,
        ),
    )
    add(
        "server-substitute",
        types.SimpleNamespace(**{**vars(planned(whole, "center", 56)), "data": b""}),
    )
    add("padding", None)
    return samples, kinds


@pytest.mark.parametrize("device", sorted(DEVICES))
def test_a_batch_matches_server_delivery(mixed_batch, device):
    samples, kinds = mixed_batch
    decoder = BatchDecoder(torch.device(device))
    try:
        out = decoder.decode(samples, CROP)
    finally:
        decoder.close()
    assert out.images.shape == (len(samples), 3, CROP, CROP)
    assert out.images.dtype == torch.uint8
    cpu_kinds = ("png", "webp", "cmyk", "gray", "truncated", "corrupt")
    assert decoder.fallbacks == sum(k in cpu_kinds for k in kinds)
    failed = {i for i, k in enumerate(kinds) if k in ("truncated", "corrupt")}
    assert set(out.failures) == failed and decoder.substituted == len(failed)
    worst, total, count = 0, 0, 0
    for i, (kind, encoded) in enumerate(zip(kinds, samples)):
        image = out.images[i]
        if kind == "padding":
            assert (image == 0).all()
        elif kind in ("truncated", "corrupt"):
            with pytest.raises(ValueError):  # the server substitutes these too
                _native.decode_encoded(encoded, False)
            assert (image == SUBSTITUTE_VALUE).all(), kind
            assert out.failures[i]
        elif kind == "server-substitute":
            assert (image == SUBSTITUTE_VALUE).all()
        elif kind == "jpeg":
            diff = differences(image, server_bytes(encoded))
            worst, total, count = (
                max(worst, int(diff.max())),
                total + int(diff.sum()),
                count + diff.size,
            )
        else:  # the CPU decode: the server's bytes
            assert (image.cpu().numpy().reshape(-1) == server_bytes(encoded)).all(), kind
    print(f"{device}: JPEGs against server delivery: max {worst}, mean {total / count:.4f}")
    assert worst <= DEVICES[device][0]
    assert total / count <= DEVICES[device][1]


def test_a_decode_over_max_decode_memory_is_a_substitute():
    """A client bounds its decode from the header before allocating: an image whose
    decode needs more than max_decode_memory is refused by both paths, as the server
    substitutes it."""
    small = planned(jpeg(64, 64, 1), "center", 1)
    big = planned(jpeg(640, 480, 2), "center", 2)
    decoder = BatchDecoder(torch.device("cpu"), max_decode_memory=200_000)
    try:
        out = decoder.decode([small, big], CROP)
    finally:
        decoder.close()
    assert list(out.failures) == [1] and "max_decode_memory" in out.failures[1]
    assert (out.images[1] == SUBSTITUTE_VALUE).all()
    assert differences(out.images[0], server_bytes(small)).max() <= BATCH_MAX


def test_an_image_whose_float_copies_exceed_the_bound_is_decoded_on_the_cpu():
    """The device's float32 copies count against max_decode_memory: an image whose decode
    fits but whose copies do not is the CPU decode's (the server's bytes), not refused."""
    encoded = planned(jpeg(640, 480, 5), "center", 5)
    decode_bytes = _native.image_info(encoded.data)["decode_bytes"]
    decoder = BatchDecoder(torch.device("cpu"), max_decode_memory=2 * decode_bytes)
    try:
        out = decoder.decode([encoded], CROP)
    finally:
        decoder.close()
    assert decoder.fallbacks == 1 and not out.failures
    assert (out.images[0].numpy().reshape(-1) == server_bytes(encoded)).all()


def test_a_crop_that_does_not_fit_its_image_is_a_substitute():
    """Untrusted parameters: a window outside the image, a source size that is not the
    header's or an output size that is not the batch's is neither decoded on the device
    nor read out of bounds."""
    outside = planned(jpeg(100, 80, 3), "random", 3)
    outside.left = 100
    wrong_size = planned(jpeg(100, 80, 4), "center", 4)
    wrong_size.source_width = 120
    wrong_output = planned(jpeg(100, 80, 5), "random", 5)
    wrong_output.output_size = CROP // 2
    decoder = BatchDecoder(torch.device("cpu"))
    try:
        out = decoder.decode([outside, wrong_size, wrong_output], CROP)
    finally:
        decoder.close()
    assert sorted(out.failures) == [0, 1, 2]
    assert (out.images == SUBSTITUTE_VALUE).all()


def test_decode_encoded_takes_any_object_and_names_the_error():
    data = jpeg(97, 61, 9)
    encoded = planned(data, "random", 9)
    assert len(_native.decode_encoded(encoded, False)) == 3 * CROP * CROP
    assert len(_native.decode_encoded(encoded, True)) == 3 * CROP * CROP
    encoded.data = data[:10]
    with pytest.raises(ValueError):
        _native.decode_encoded(encoded, False)
    with pytest.raises(AttributeError):
        _native.decode_encoded(types.SimpleNamespace(data=data), False)


def test_image_info_reads_the_header_only():
    info = _native.image_info(encode(photo_like(90, 100, 1), "JPEG", "CMYK"))
    assert (info["format"], info["width"], info["height"], info["cmyk"]) == ("jpeg", 90, 100, True)
    assert _native.image_info(encode(photo_like(30, 20, 2), "PNG"))["format"] == "png"
    with pytest.raises(ValueError):
        _native.image_info(b"not an image")


def test_the_batched_decode_call_gives_the_per_image_results(mixed_batch):
    """torchvision 0.19+ decodes a list in one call (one nvJPEG batch); the torchvision
    here has the per-image call only, so the list call is the per-image one in a loop:
    this checks the decoder's use of the list form, not torchvision."""
    samples, _ = mixed_batch
    single = BatchDecoder(torch.device("cpu"))
    batched = BatchDecoder(torch.device("cpu"))
    per_image = batched._decode_jpeg
    batched._batched = True
    batched._decode_jpeg = lambda data, mode, device: [
        per_image(d, mode=mode, device=device) for d in data
    ]
    try:
        want, got = single.decode(samples, CROP), batched.decode(samples, CROP)
    finally:
        single.close()
        batched.close()
    assert torch.equal(want.images, got.images) and want.failures == got.failures
    assert single.fallbacks == batched.fallbacks
