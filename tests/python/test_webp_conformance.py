"""WebP end to end: shards of .webp images written by PIL (lossy, lossless, lossy with
alpha; odd sizes, smaller and larger than the resize), served by shardcast-server and read
with the Loader, equal PIL's decode + torchvision's Resize + CenterCrop within the bounds
of the JPEG conformance test (tests/common/image_transform_test.cc: mean <= 1, max <= 2
levels). An animated WebP is not decoded: it arrives as a substitute."""

import importlib.util
import io
import signal
import tarfile

import numpy as np
import pytest
import torch
from PIL import Image

import shardcast
from conftest import BUILD
from server_process import REPO, ServerProcess

_spec = importlib.util.spec_from_file_location(
    "torchvision_transform", REPO / "tests" / "reference" / "torchvision_transform.py"
)
reference = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(reference)

RESIZE, CROP = 72, 64
SIZES = [(97, 61), (61, 97), (200, 151), (64, 64), (333, 250), (50, 41), (129, 255)]
# PIL save() options of each kind, and the image mode it encodes.
KINDS = {
    "lossy": ("RGB", {"quality": 85}),
    "lossless": ("RGB", {"lossless": True}),
    "lossy-alpha": ("RGBA", {"quality": 80}),
    "lossless-alpha": ("RGBA", {"lossless": True, "exact": True}),
}


def photo_like(w: int, h: int, channels: int, seed: int) -> np.ndarray:
    """Smooth gradients, an edge and noise: what a lossy encoder and a resampler meet."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    planes = [
        128 + 90 * np.sin(seed + c + 3.0 * x / w + 2.0 * y / h) + 40 * ((x + y) % 37 < 9)
        for c in range(channels)
    ]
    pixels = np.stack(planes, axis=-1) + rng.normal(0, 6, (h, w, channels))
    return np.clip(np.rint(pixels), 0, 255).astype(np.uint8)


def add_member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


@pytest.fixture(scope="module")
def webp_shards(tmp_path_factory):
    """Two shards of every (kind, size) WebP, label = kind index, and one animation.
    Returns (directory, key -> the WebP bytes)."""
    out = tmp_path_factory.mktemp("webp") / "shards"
    out.mkdir()
    files = {}
    for k, (kind, (mode, options)) in enumerate(KINDS.items()):
        for s, (w, h) in enumerate(SIZES):
            buf = io.BytesIO()
            pixels = photo_like(w, h, len(mode), seed=10 * k + s)
            Image.fromarray(pixels, mode).save(buf, "WEBP", **options)
            files[f"{kind}-{w}x{h}"] = (buf.getvalue(), k)
    frames = [Image.fromarray(photo_like(40, 30, 3, seed=90 + i)) for i in range(2)]
    buf = io.BytesIO()
    frames[0].save(buf, "WEBP", save_all=True, append_images=frames[1:], duration=100)
    files["animated"] = (buf.getvalue(), 0)
    keys = sorted(files)
    for shard, part in enumerate([keys[0::2], keys[1::2]]):
        with tarfile.open(out / f"webp-{shard:06d}.tar", "w", format=tarfile.GNU_FORMAT) as tar:
            for key in part:
                add_member(tar, f"{key}.webp", files[key][0])
                add_member(tar, f"{key}.cls", str(files[key][1]).encode())
    return out, {key: data for key, (data, _) in files.items()}


@pytest.fixture(scope="module")
def webp_server(webp_shards):
    s = ServerProcess(
        BUILD, webp_shards[0], ["--decode-threads", "2", "--max-unstreamed-jobs-per-peer", "0"]
    )
    s.start()
    yield s
    s.kill(signal.SIGTERM)


def pil_torchvision(webp: bytes) -> torch.Tensor:
    pixels = np.asarray(Image.open(io.BytesIO(webp)).convert("RGB"))
    chw = torch.from_numpy(pixels.copy()).permute(2, 0, 1).contiguous()
    return reference.transform(chw, {"op": "center", "resize": RESIZE, "crop": CROP})


def test_served_webp_equals_pil_and_torchvision(webp_server, webp_shards):
    files = webp_shards[1]
    loader = shardcast.Loader(
        webp_server.address,
        job_id="py-webp",
        batch_size=5,
        transform="center",
        resize=RESIZE,
        crop=CROP,
        split="sample",
        remainder="pad",
        rank=0,
        world_size=1,
    )
    seen = {}
    for images, labels, info in loader:
        for i, sample in enumerate(info):
            if sample.valid:
                seen[sample.key] = (images[i].clone(), sample.substituted)
    assert sorted(seen) == sorted(files)

    assert seen.pop("animated")[1], "an animated WebP must be substituted, not served"
    worst = {}
    for key, (served, substituted) in seen.items():
        assert not substituted, key
        diff = (served.int() - pil_torchvision(files[key]).int()).abs()
        worst[key] = (diff.float().mean().item(), diff.max().item())
    for key, (mean, largest) in sorted(worst.items()):
        print(f"[ webp conformance ] {key:<24} mean {mean:.4f}  max {largest}")
    assert all(mean <= 1.0 and largest <= 2 for mean, largest in worst.values()), worst
