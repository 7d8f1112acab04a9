"""normalize(): uint8 images to normalized float32 on the training device.

The float work (4 bytes per pixel) happens on the device, after copying the 1-byte
pixels there: on a GPU that moves a quarter of the bytes over PCIe and leaves the CPU
free, as the C++ BatchStream does. On the CPU each byte value is looked up in a table
of what the float formula gives for it, in one pass without the GIL (shardcast._native),
as BatchStream does too: the same values as torch's three passes over the floats.
"""

import functools
from typing import Optional, Sequence, Tuple, Union

import torch

from shardcast import _native

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@functools.lru_cache(maxsize=16)
def _constants(
    device: torch.device, mean: Tuple[float, ...], std: Tuple[float, ...]
) -> Tuple[torch.Tensor, torch.Tensor]:
    # Cached: building two small tensors on a GPU every step would cost two host syncs.
    # mean/255 and std*255 fold the division by 255 into the two operations.
    m = torch.tensor(mean, dtype=torch.float32).mul_(255.0).view(1, -1, 1, 1).to(device)
    s = torch.tensor(std, dtype=torch.float32).mul_(255.0).view(1, -1, 1, 1).to(device)
    return m, s


@functools.lru_cache(maxsize=16)
def _table(mean: Tuple[float, ...], std: Tuple[float, ...]) -> torch.Tensor:
    """[C, 256] float32: every byte value of every channel through the formula below."""
    values = torch.arange(256, dtype=torch.uint8).view(1, 1, 1, 256).expand(1, len(mean), 1, 256)
    m, s = _constants(torch.device("cpu"), mean, std)
    return values.to(torch.float32).sub_(m).div_(s).reshape(len(mean), 256).contiguous()


def normalize(
    images: Optional[torch.Tensor],
    device: Union[str, torch.device] = "cpu",
    mean: Sequence[float] = IMAGENET_MEAN,
    std: Sequence[float] = IMAGENET_STD,
) -> Optional[torch.Tensor]:
    """(images / 255 - mean) / std per channel, as float32 on `device`.

    `images` is a [B, C, H, W] uint8 tensor (a Loader batch). On the CPU and bound for
    a CUDA device, it is staged in pinned memory and copied asynchronously
    (non_blocking) on the current stream; already on the device (Lightning moves
    batches itself), it is used as it is. Returns a new tensor; `images` is not
    modified. None (the images of a job without images, image=False) is returned as
    it is, so a loop written for images runs unchanged.
    """
    if images is None:
        return None
    if images.dtype != torch.uint8 or images.dim() != 4:
        raise ValueError(
            f"normalize wants [B, C, H, W] uint8 images, got {images.dtype} of shape "
            f"{list(images.shape)}"
        )
    if len(mean) != images.shape[1] or len(std) != images.shape[1]:
        raise ValueError(
            f"mean and std need {images.shape[1]} values (one per channel), got "
            f"{len(mean)} and {len(std)}"
        )
    if any(not s > 0 for s in std):
        raise ValueError(f"std must be > 0, got {list(std)}")
    device = torch.device(device)
    if device.type == "cpu" and images.device.type == "cpu" and images.is_contiguous():
        table = _table(tuple(float(x) for x in mean), tuple(float(x) for x in std))
        out = torch.empty(images.shape, dtype=torch.float32)
        b, c = images.shape[0], images.shape[1]
        _native.normalize_with_table(
            images.data_ptr(),
            out.data_ptr(),
            b,
            c,
            images.shape[2] * images.shape[3],
            table.numpy(),
        )
        return out
    if device.type == "cuda" and images.device.type == "cpu":
        images = images.pin_memory().to(device, non_blocking=True)
    else:
        images = images.to(device)
    m, s = _constants(device, tuple(float(x) for x in mean), tuple(float(x) for x in std))
    return images.to(torch.float32).sub_(m).div_(s)
