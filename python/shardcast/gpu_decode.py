"""Encoded delivery decoded on a torch device: a batch's JPEGs by torchvision's
decode_jpeg (nvJPEG on a CUDA device; libjpeg on the CPU, as the tests run it), then
each sample's crop, antialiased bilinear resize and flip as torch ops on that device.

The server sends each image as stored with the transform it would have applied
(proto EncodedImage); this makes the same samples and crops. The pixels are within a
level or two of server delivery's (another IDCT and float resampling; docs/python.md
states the measured tolerance), not byte-identical: Loader(decode="cpu") is.

What nvJPEG should not take goes to the server's own decode on the CPU
(_native.decode_encoded, without the GIL), counted in `fallbacks`: PNG, WebP, CMYK and
grayscale JPEGs, a JPEG whose data does not end with its EOI marker (truncated: the
server substitutes it, and only its decode says so), one that needs more than
max_decode_memory, and one the device decoder refuses. A sample the CPU decode refuses
too is the server's substitute (every byte 128), in `failures` and counted in
`substituted`.
"""

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from shardcast import _native

# What the server sends for an image it could not decode, and a client writes for one
# it could not.
SUBSTITUTE_VALUE = 128
_JPEG_END = b"\xff\xd9"


def _decode_jpeg_api() -> Tuple[Any, Any, bool]:
    """torchvision's decode_jpeg, ImageReadMode, and whether decode_jpeg takes a list
    (one batched nvJPEG call: torchvision 0.19 and later)."""
    try:
        import torchvision
        from torchvision.io import ImageReadMode, decode_jpeg
    except ImportError as e:
        raise ImportError(
            f"shardcast: decoding on a device needs torchvision (torchvision.io.decode_jpeg): {e}"
        ) from e
    major, minor = (int(x) for x in torchvision.__version__.split(".")[:2])
    return decode_jpeg, ImageReadMode, (major, minor) >= (0, 19)


def _source_size(encoded: Any) -> Tuple[int, int]:
    """(width, height) of the image in `data`: the cut's, or the stored image's."""
    if encoded.cut_width > 0:
        return encoded.cut_width, encoded.cut_height
    return encoded.source_width, encoded.source_height


def device_bytes(encoded: Any, width: int, height: int) -> int:
    """The float32 copies crop_and_resize makes of a width x height image: the image (or
    the random crop's window) and, for center, the resized image."""
    if encoded.resize_width > 0:
        pixels = width * height + encoded.resize_width * encoded.resize_height
    else:
        pixels = encoded.width * encoded.height
    return 3 * 4 * pixels


def check_crop(encoded: Any, width: int, height: int) -> None:
    """ValueError unless `encoded`'s transform fits a width x height image (untrusted
    input: the C++ decode checks the same before it reads a pixel)."""
    out = encoded.output_size
    if not 0 < out <= 8192:
        raise ValueError(f"output_size {out} is out of 1..8192")
    if encoded.resize_width > 0:  # center: the output square inside the resized image
        if encoded.cut_width > 0:
            raise ValueError("a center crop with a cut: cuts are for random crops only")
        rw, rh = encoded.resize_width, encoded.resize_height
        if not (
            0 < rw <= 16384
            and 0 < rh <= 16384
            and 0 <= encoded.left <= rw - out
            and 0 <= encoded.top <= rh - out
        ):
            raise ValueError(
                f"center crop {out}x{out} at ({encoded.left}, {encoded.top}) does "
                f"not fit the image resized to {rw}x{rh}"
            )
    elif not (
        encoded.width > 0
        and encoded.height > 0
        and 0 <= encoded.left
        and encoded.left + encoded.width <= width
        and 0 <= encoded.top
        and encoded.top + encoded.height <= height
    ):
        raise ValueError(
            f"crop window {encoded.width}x{encoded.height} at ({encoded.left}, "
            f"{encoded.top}) is outside the {width}x{height} image"
        )


def crop_and_resize(image: torch.Tensor, encoded: Any) -> torch.Tensor:
    """The server's transform of one decoded image, as torch ops on its device.

    `image`: uint8 [3, H, W], the decoded `data` (the cut, if there is one); `encoded`:
    any object with EncodedImage's fields. Returns uint8 [3, C, C]. Center: the image
    resized to resize_height x resize_width, then the C x C square at (left, top);
    random: the window (left, top, width, height) resized to C x C, mirrored if flip.
    The resize is bilinear with antialias (torchvision's Resize on tensors) in float32,
    rounded once at the end."""
    _, height, width = image.shape
    check_crop(encoded, width, height)
    out = encoded.output_size
    if encoded.resize_width > 0:
        resized = F.interpolate(
            image.unsqueeze(0).to(torch.float32),
            size=(encoded.resize_height, encoded.resize_width),
            mode="bilinear",
            align_corners=False,
            antialias=True,
        )
        y = resized[..., encoded.top : encoded.top + out, encoded.left : encoded.left + out]
    else:
        window = image[
            :,
            encoded.top : encoded.top + encoded.height,
            encoded.left : encoded.left + encoded.width,
        ]
        y = F.interpolate(
            window.unsqueeze(0).to(torch.float32),
            size=(out, out),
            mode="bilinear",
            align_corners=False,
            antialias=True,
        )
        if encoded.flip:
            y = y.flip(-1)
    return y.round_().clamp_(0, 255).to(torch.uint8)[0]


class DecodedBatch(NamedTuple):
    images: torch.Tensor  # [B, 3, C, C] uint8 on the decoder's device
    # Sample index -> why its decode failed (its image is the substitute).
    failures: Dict[int, str]


class BatchDecoder:
    """Decodes batches of EncodedImage on `device`. `dct_scaling` is the registration's
    (the CPU fallback follows it, to make the server's bytes); `max_decode_memory` bounds
    one image's decode buffers, read from its header before anything is allocated (0:
    no bound); `cpu_threads` decode the fallbacks."""

    def __init__(
        self,
        device: torch.device,
        dct_scaling: bool = False,
        max_decode_memory: int = 0,
        cpu_threads: Optional[int] = None,
    ) -> None:
        self.device = torch.device(device)
        self._decode_jpeg, read_mode, self._batched = _decode_jpeg_api()
        self._rgb = read_mode.RGB
        self._dct_scaling = dct_scaling
        self._max_decode_memory = max_decode_memory
        self._cpu = ThreadPoolExecutor(
            max_workers=cpu_threads or min(4, os.cpu_count() or 1),
            thread_name_prefix="shardcast-decode",
        )
        self.fallbacks = 0  # images decoded on the CPU
        self.substituted = 0  # images neither decode could make: substitutes

    def close(self) -> None:
        self._cpu.shutdown(wait=True)

    def decode(self, samples: Sequence[Optional[Any]], output_size: int) -> DecodedBatch:
        """`samples`: one EncodedImage per sample, None for padding (a zero image); one
        with empty `data` is the server's substitute (every byte 128)."""
        images = torch.zeros(
            (len(samples), 3, output_size, output_size), dtype=torch.uint8, device=self.device
        )
        on_device: List[int] = []
        on_cpu: List[int] = []
        failures: Dict[int, str] = {}
        for i, encoded in enumerate(samples):
            if encoded is None:
                continue
            if not encoded.data:
                images[i].fill_(SUBSTITUTE_VALUE)
            elif encoded.output_size != output_size:
                images[i].fill_(SUBSTITUTE_VALUE)
                failures[i] = (
                    f"output_size {encoded.output_size} is not the batch's " f"{output_size}"
                )
            elif self._device_takes(encoded):
                on_device.append(i)
            else:
                on_cpu.append(i)
        on_cpu += self._decode_on_device(samples, on_device, images)
        failures.update(self._decode_on_cpu(samples, on_cpu, images))
        self.fallbacks += len(on_cpu)
        self.substituted += len(failures)
        return DecodedBatch(images, failures)

    def _device_takes(self, encoded: Any) -> bool:
        """A JPEG that decode_jpeg makes the server's RGB of, whole (ends with EOI), of the
        size the transform was planned for, whose decode and float copies stay within
        max_decode_memory (else the CPU decode, which needs no float copies, takes it or
        refuses it as the server would)."""
        if not encoded.data.endswith(_JPEG_END):
            return False
        try:
            info = _native.image_info(encoded.data)
        except ValueError:
            return False  # the CPU decode names the error
        if info["format"] != "jpeg" or info["cmyk"] or info["components"] != 3:
            return False
        if (info["width"], info["height"]) != _source_size(encoded):
            return False
        work = info["decode_bytes"] + device_bytes(encoded, info["width"], info["height"])
        return not 0 < self._max_decode_memory < work

    def _decode_on_device(
        self, samples: Sequence[Any], indices: List[int], images: torch.Tensor
    ) -> List[int]:
        """Decodes and transforms `indices` on the device into `images`; returns those it
        could not (for the CPU)."""
        if not indices:
            return []
        data = [torch.frombuffer(bytearray(samples[i].data), dtype=torch.uint8) for i in indices]
        decoded: List[Optional[torch.Tensor]]
        if self._batched:
            try:
                decoded = list(self._decode_jpeg(data, mode=self._rgb, device=self.device))
            except RuntimeError:  # one bad image fails the call: find it one by one
                decoded = [self._decode_one(d) for d in data]
        else:
            decoded = [self._decode_one(d) for d in data]
        rejected = []
        for i, image in zip(indices, decoded):
            try:
                if image is None or tuple(image.shape[1:]) != _source_size(samples[i])[::-1]:
                    raise ValueError("decoded image differs from its header")
                images[i] = crop_and_resize(image, samples[i])
            except ValueError:
                rejected.append(i)
        return rejected

    def _decode_one(self, data: torch.Tensor) -> Optional[torch.Tensor]:
        try:
            return self._decode_jpeg(data, mode=self._rgb, device=self.device)
        except RuntimeError:
            return None

    def _decode_on_cpu(
        self, samples: Sequence[Any], indices: List[int], images: torch.Tensor
    ) -> Dict[int, str]:
        """The server's decode of `indices` into `images`; returns the failures (written
        as substitutes)."""

        def decode(i: int) -> Tuple[int, Optional[bytes], str]:
            try:
                return (
                    i,
                    _native.decode_encoded(samples[i], self._dct_scaling, self._max_decode_memory),
                    "",
                )
            except ValueError as e:
                return i, None, str(e)

        failures = {}
        for i, chw, error in self._cpu.map(decode, indices):
            if chw is None:
                images[i].fill_(SUBSTITUTE_VALUE)
                failures[i] = error
            else:
                images[i] = (
                    torch.frombuffer(bytearray(chw), dtype=torch.uint8)
                    .view(images.shape[1:])
                    .to(self.device)
                )
        return failures
