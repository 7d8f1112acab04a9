"""normalize() is torchvision's ToTensor-style scaling + Normalize, done on the device."""

import pytest
import torch

import shardcast


def test_matches_the_reference_formula():
    images = torch.randint(0, 256, (4, 3, 5, 5), dtype=torch.uint8)
    mean = torch.tensor(shardcast.IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(shardcast.IMAGENET_STD).view(1, 3, 1, 1)
    want = (images.float() / 255 - mean) / std
    got = shardcast.normalize(images, "cpu")
    assert got.dtype == torch.float32 and got.device.type == "cpu"
    assert torch.allclose(got, want, atol=1e-5)
    assert images.dtype == torch.uint8  # the input is left alone


def test_custom_mean_and_std():
    images = torch.full((1, 3, 2, 2), 255, dtype=torch.uint8)
    got = shardcast.normalize(images, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))
    assert torch.allclose(got, torch.ones_like(got))


@pytest.mark.parametrize(
    "images, kwargs, message",
    [
        (torch.zeros(1, 3, 2, 2), {}, "uint8"),
        (torch.zeros(3, 2, 2, dtype=torch.uint8), {}, "uint8 images"),
        (torch.zeros(1, 3, 2, 2, dtype=torch.uint8), {"mean": (0.5,)}, "3 values"),
        (torch.zeros(1, 3, 2, 2, dtype=torch.uint8), {"std": (1, 0, 1)}, "std must be > 0"),
    ],
)
def test_bad_input_is_a_value_error(images, kwargs, message):
    with pytest.raises(ValueError, match=message):
        shardcast.normalize(images, **kwargs)


def test_the_cpu_table_gives_torchs_float_ops_exactly():
    """On the CPU normalize looks each byte up in a table; the values are those of the
    float ops on the device path, bit for bit, for every byte value of every channel."""
    images = torch.arange(256, dtype=torch.uint8).repeat(2, 3, 16, 1)  # [2, 3, 16, 256]
    got = shardcast.normalize(images, "cpu")
    mean = torch.tensor(shardcast.IMAGENET_MEAN).mul(255.0).view(1, 3, 1, 1)
    std = torch.tensor(shardcast.IMAGENET_STD).mul(255.0).view(1, 3, 1, 1)
    assert torch.equal(got, images.to(torch.float32).sub_(mean).div_(std))
    # A view that is not contiguous takes the torch path, with the same values.
    strided = images[:, :, :, ::2]
    assert torch.equal(shardcast.normalize(strided, "cpu"), got[:, :, :, ::2])
