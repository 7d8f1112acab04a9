"""Every image PIL opens and converts to RGB, end to end: a corpus written by libjpeg,
libpng and libwebp themselves (build/tests/make_image_corpus: every JPEG sampling factor
libjpeg accepts, progressive and restart variants, a zero-length APP0; every PNG bit depth
and colour type, tRNS, Adam7; WebP lossy, lossless, alpha; odd sizes) is served by
shardcast-server and read with the Loader, in server delivery and with decode="cpu"
(encoded delivery, decoded by the client), and each image equals PIL's
Image.open().convert("RGB") + torchvision's Resize + CenterCrop within the bounds of the
JPEG conformance test (mean <= 1, max <= 2 levels). Formats PIL opens and shardcast
does not decode (GIF, BMP, TIFF, animated WebP; docs/server.md) arrive as substitutes."""

import importlib.util
import io
import os
import signal
import subprocess
import tarfile
import urllib.request
from pathlib import Path

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
# SHARDCAST_IMAGE_CORPUS_TOOL: another build's tool (to run this test against an older
# server, as the numbers in the commit were taken).
CORPUS_TOOL = Path(
    os.environ.get("SHARDCAST_IMAGE_CORPUS_TOOL", BUILD / "tests" / "make_image_corpus")
)


def _unsupported() -> dict:
    """Files PIL opens that shardcast does not decode, named as the image member."""
    rng = np.random.default_rng(5)
    frame = Image.fromarray(rng.integers(0, 255, (30, 40, 3), dtype=np.uint8))
    files = {}
    for key, fmt, options in [
        ("gif", "GIF", {}),
        ("bmp", "BMP", {}),
        ("tiff", "TIFF", {}),
        (
            "animated-webp",
            "WEBP",
            {"save_all": True, "append_images": [frame.rotate(90)], "duration": 100},
        ),
    ]:
        out = io.BytesIO()
        frame.save(out, fmt, **options)
        # The extension says PNG or WebP, the content decides (as in ImageNet's PNGs named .JPEG).
        files[f"unsupported-{key}"] = ("webp" if fmt == "WEBP" else "png", out.getvalue())
    return files


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """(shard directory, key -> (extension, bytes)) of the corpus and the unsupported files."""
    if not CORPUS_TOOL.exists():
        pytest.skip(f"not built: {CORPUS_TOOL} (cmake --build {BUILD} --target make_image_corpus)")
    root = tmp_path_factory.mktemp("corpus")
    images = root / "images"
    images.mkdir()
    subprocess.run([str(CORPUS_TOOL), str(images)], check=True, capture_output=True)
    files = {}
    for path in sorted(images.iterdir()):
        files[path.stem] = (path.suffix[1:], path.read_bytes())
    files.update(_unsupported())
    shards = root / "shards"
    shards.mkdir()
    keys = sorted(files)
    for shard, part in enumerate([keys[0::2], keys[1::2]]):
        with tarfile.open(
            shards / f"corpus-{shard:06d}.tar", "w", format=tarfile.GNU_FORMAT
        ) as tar:
            for key in part:
                ext, data = files[key]
                _add(tar, f"{key}.{ext}", data)
                _add(tar, f"{key}.cls", b"0")
    return shards, files


@pytest.fixture(scope="module")
def corpus_server(corpus):
    s = ServerProcess(
        BUILD,
        corpus[0],
        [
            "--decode-threads",
            "2",
            "--max-unstreamed-jobs-per-peer",
            "0",
            "--metrics-listen",
            "127.0.0.1:0",
        ],
    )
    s.start()
    yield s
    s.kill(signal.SIGTERM)


def pil_torchvision(encoded: bytes) -> torch.Tensor:
    pixels = np.asarray(Image.open(io.BytesIO(encoded)).convert("RGB"))
    chw = torch.from_numpy(pixels.copy()).permute(2, 0, 1).contiguous()
    return reference.transform(chw, {"op": "center", "resize": RESIZE, "crop": CROP})


# PIL's advice on palette PNGs with tRNS ("should be converted to RGBA") is not a result.
@pytest.mark.filterwarnings("ignore:Palette images with Transparency")
@pytest.mark.parametrize("decode", [None, "cpu"])
def test_every_image_pil_opens_is_served_as_pil_and_torchvision_make_it(
    corpus_server, corpus, decode
):
    files = corpus[1]
    extra = {"decode": decode, "decode_threads": 2} if decode else {}
    loader = shardcast.Loader(
        corpus_server.address,
        job_id=f"py-corpus-{decode}",
        batch_size=8,
        transform="center",
        resize=RESIZE,
        crop=CROP,
        split="sample",
        remainder="pad",
        rank=0,
        world_size=1,
        **extra,
    )
    seen = {}
    with loader:
        for images, _, info in loader:
            for i, sample in enumerate(info):
                if sample.valid:
                    seen[sample.key] = (images[i].cpu().clone(), sample.substituted)
    assert sorted(seen) == sorted(files)

    substituted = sorted(key for key, (_, sub) in seen.items() if sub)
    worst = {}
    for key, (served, sub) in seen.items():
        if sub:
            continue
        diff = (served.int() - pil_torchvision(files[key][1]).int()).abs()
        worst[key] = (diff.float().mean().item(), diff.max().item())
    for key, (mean, largest) in sorted(worst.items()):
        print(
            f"[ image conformance {decode or 'server'} ] {key:<40} mean {mean:.4f}  "
            f"max {largest}"
        )
    print(f"[ image conformance {decode or 'server'} ] substituted: {', '.join(substituted)}")
    assert substituted == sorted(k for k in files if k.startswith("unsupported-"))
    bad = {k: v for k, v in worst.items() if not (v[0] <= 1.0 and v[1] <= 2)}
    assert not bad, bad


def test_unsupported_formats_are_counted_apart(corpus_server, corpus):
    """After the two deliveries above (one epoch each), /metrics counts the 4 unsupported
    files of each apart from the decode errors they are also part of."""
    loader = shardcast.Loader(
        corpus_server.address,
        job_id="py-corpus-count",
        batch_size=8,
        transform="center",
        resize=RESIZE,
        crop=CROP,
        split="sample",
        remainder="pad",
        rank=0,
        world_size=1,
    )
    with loader:
        for _ in loader:
            pass
    url = f"http://127.0.0.1:{corpus_server.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    figures = dict(
        line.rsplit(" ", 1)
        for line in text.splitlines()
        if line and not line.startswith("#") and " " in line
    )
    unsupported = float(figures["shardcast_images_unsupported_format_total"])
    errors = float(figures["shardcast_decode_errors_total"])
    # 4 files, in every epoch served so far (at least this one), and nothing else.
    assert unsupported >= 4 and unsupported % 4 == 0
    assert errors == unsupported
