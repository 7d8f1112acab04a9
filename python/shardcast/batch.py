"""A received batch as the Loader hands it out: `Batch(images, labels, info)` over the
native client's buffers (torch.frombuffer: no copy)."""

from typing import Any, Dict, List, NamedTuple, Optional

import torch

from shardcast import _native


class SampleInfo(NamedTuple):
    """Where a sample of a batch came from."""

    key: str  # the sample's key in its shard ("" for padding)
    shard: int  # position in the server's sorted shard list; -1 for padding
    index_in_shard: int  # sample position in its shard; -1 for padding
    valid: bool  # False for padding (remainder "pad"; its label is -1)
    substituted: bool  # the image could not be decoded; a mid-gray substitute was sent
    # The members the job asked for (Loader's `fields`), by the field's name ("txt",
    # "jpg;png"): the member's bytes as stored in the tar, None where an optional one is
    # missing and for padding. Empty for a job without fields.
    fields: Dict[str, Optional[bytes]]
    # The dataset the sample came from: a mixed job's (Loader's `mix`) own dataset, a job
    # of one dataset's name ("default" for --shards); "" for padding.
    dataset: str


class Batch(NamedTuple):
    """One batch: unpack it as `images, labels, info = batch`."""

    # [B, 3, C, C] uint8 NCHW on the CPU, a view of the received bytes; None for a job
    # without images (image=False)
    images: Optional[torch.Tensor]
    labels: torch.Tensor  # [B] int64 (-1 for padding and for a dataset without labels)
    info: List[SampleInfo]


def to_batch(native: "_native.Batch", images: Optional[torch.Tensor] = None) -> Batch:
    """Wraps a received batch: its pixels (or `images`, which next_into filled; None for
    a job without images) and its labels without a copy."""
    pixels = native.pixels
    if images is None and pixels is not None:
        images = torch.frombuffer(pixels, dtype=torch.uint8).view(native.shape)
    labels = torch.frombuffer(native.labels, dtype=torch.int64)
    info = [SampleInfo._make(s) for s in native.samples]
    return Batch(images, labels, info)


def encoded_images(native: "_native.Batch") -> List[Optional[Any]]:
    """decode "none": each sample's _native.EncodedImage, in the samples' order (None for
    padding)."""
    return list(native.encoded)
