"""Issue 37 end to end: img2dataset-style shards written by the real webdataset TarWriter
(bench/third_party) - JPEG, WebP (lossy and lossless) and PNG images, `.txt` captions
with Chinese, emoji and one that is not UTF-8, `.json` metadata on most samples, no
labels - served to the Python Loader with the members beside the image.

Checked: 2 ranks x 2 epochs of split "sample": every sample exactly once per epoch,
every requested member the tar's bytes (an optional one that a sample lacks is None,
padding's are None), the decoded pixels within the JPEG conformance bounds of PIL +
torchvision (tests/reference/torchvision_transform.py: mean <= 1.0, max <= 2 per
image) for WebP as for JPEG and PNG; a job of captions alone (image=False); resume and
elastic resume with fields; and the same shards through HTTP (nginx) and S3 (s3rver).
"""

import collections
import importlib.util
import io
import json
import signal
import sys
from typing import Dict, List, Optional

import numpy as np
import pytest
import torch
from PIL import Image

import shardcast
from conftest import BUILD, SERVER_FLAGS, SIZE
from object_stores import start_nginx, start_s3rver
from server_process import REPO, ServerProcess

SHARDS, PER_SHARD = 3, 20
SAMPLES = SHARDS * PER_SHARD
IMAGE = "jpg;webp;png"  # webdataset's alternatives: whichever the sample holds
FIELDS = (IMAGE, "txt", "json?")
CAPTIONS = [
    "a photo of a red bicycle leaning on a wall",
    "東京の夜景、雨上がりの街 🌃",
    "一只在草地上奔跑的小狗 🐕",
    "sunset over the sea 🌅✨ with two boats",
    "서울의 봄꽃 축제 🌸",
]

spec = importlib.util.spec_from_file_location(
    "torchvision_transform", REPO / "tests" / "reference" / "torchvision_transform.py"
)
reference = importlib.util.module_from_spec(spec)
spec.loader.exec_module(reference)


def render(i: int, width: int, height: int) -> Image.Image:
    """A photo-like image: smooth colour gradients and a little noise."""
    rng = np.random.default_rng(i)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    phase = rng.uniform(0, 2 * np.pi, 3)
    channels = [127 + 100 * np.sin(x / (6 + 3 * c) + y / (9 + c) + phase[c]) for c in range(3)]
    pixels = np.stack(channels, axis=2) + rng.normal(0, 4, (height, width, 3))
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB")


def encode(image: Image.Image, kind: str) -> bytes:
    out = io.BytesIO()
    if kind == "jpg":
        image.save(out, "JPEG", quality=90)
    elif kind == "webp":
        image.save(out, "WEBP", quality=80)
    elif kind == "webp-lossless":
        image.save(out, "WEBP", lossless=True)
    else:
        image.save(out, "PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def captioned(tmp_path_factory):
    """The shards and, by key, what each sample holds: its image's extension and the
    bytes of every member by the name a Loader reports it under (None: not there)."""
    sys.path.insert(0, str(REPO / "bench" / "third_party"))
    import webdataset as wds

    out = tmp_path_factory.mktemp("img2dataset")
    samples: Dict[str, Dict[str, Optional[bytes]]] = {}
    for s in range(SHARDS):
        with wds.TarWriter(str(out / f"{s:05d}.tar")) as sink:
            for j in range(PER_SHARD):
                i = s * PER_SHARD + j
                key = f"{s:05d}{j:04d}"  # img2dataset's keys: shard, then index
                kind = ("jpg", "webp", "png", "jpg", "webp-lossless", "png")[i % 6]
                ext = kind.split("-")[0]
                width, height = 40 + (7 * i) % 33, 34 + (5 * i) % 29
                image = encode(render(i, width, height), kind)
                caption = f"{CAPTIONS[i % len(CAPTIONS)]} #{i}".encode()
                if i == 13:
                    caption = b"caf\xe9 cr\xe8me, latin-1 bytes \xff\xfe"  # not UTF-8
                meta = None
                if i % 10 != 7:  # a few samples without metadata: "json?" is optional
                    meta = json.dumps(
                        {
                            "key": key,
                            "caption": caption.decode(errors="replace"),
                            "width": width,
                            "height": height,
                            "status": "success",
                        },
                        ensure_ascii=False,
                    ).encode()
                sample = {"__key__": key, ext: image, "txt": caption}
                if meta is not None:
                    sample["json"] = meta
                sink.write(sample)
                samples[key] = {"ext": ext, IMAGE: image, "txt": caption, "json": meta}
    return out, samples


@pytest.fixture(scope="module")
def members_server(captioned):
    s = ServerProcess(BUILD, captioned[0], SERVER_FLAGS)
    s.start()
    yield s
    s.kill(signal.SIGTERM)


def loaders(address: str, job: str, world: int, **job_args) -> List[shardcast.Loader]:
    return [
        shardcast.Loader(
            address,
            job_id=job,
            rank=r,
            world_size=world,
            split="sample",
            remainder="pad",
            seed=5,
            reconnect_deadline=120,
            **job_args,
        )
        for r in range(world)
    ]


def check_batch(batch, samples, fields, image: bool, seen: collections.Counter) -> None:
    """Every valid sample's members are the tar's bytes and its pixels conform; counts
    the valid keys in `seen`."""
    images, labels, info = batch
    assert (images is not None) == image
    assert labels.tolist() == [-1] * len(info)  # no labels in the dataset
    names = [spec.rstrip("?") for spec in fields]  # "json?" arrives as "json"
    for i, s in enumerate(info):
        if not s.valid:
            assert s.fields == {name: None for name in names}, s
            continue
        seen[s.key] += 1
        want = samples[s.key]
        assert s.fields == {name: want[name] for name in names}, s.key
        if image:
            check_conformance(want[IMAGE], images[i], s.key)


def check_conformance(encoded: bytes, served: torch.Tensor, key: str) -> None:
    """The served pixels against PIL's decode + torchvision's Resize and CenterCrop of
    the same bytes: the JPEG conformance bounds, for every image kind."""
    pixels = np.asarray(Image.open(io.BytesIO(encoded)).convert("RGB"))
    chw = torch.from_numpy(pixels.copy()).permute(2, 0, 1).contiguous()
    theirs = reference.transform(chw, {"op": "center", "resize": SIZE, "crop": SIZE})
    diff = (served.to(torch.int32) - theirs.to(torch.int32)).abs()
    assert diff.double().mean().item() <= 1.0 and diff.max().item() <= 2, (
        key,
        diff.double().mean().item(),
        diff.max().item(),
    )


def run_epochs(
    address: str, job: str, samples, fields, image: bool, epochs: int, **job_args
) -> None:
    ranks = loaders(address, job, 2, batch_size=8, fields=fields, image=image, **job_args)
    try:
        assert ranks[0].num_classes == 0
        for epoch in range(epochs):
            seen: collections.Counter = collections.Counter()
            for loader in ranks:
                loader.set_epoch(epoch)
                for batch in loader:
                    check_batch(batch, samples, fields, image, seen)
            assert sorted(seen) == sorted(samples) and set(seen.values()) == {1}, epoch
    finally:
        for loader in ranks:
            loader.close()


def test_two_ranks_two_epochs_serve_every_member_once_and_images_conform(members_server, captioned):
    _, samples = captioned
    kinds = collections.Counter(s["ext"] for s in samples.values())
    assert kinds == {"jpg": 20, "webp": 20, "png": 20}
    run_epochs(members_server.address, "members", samples, FIELDS, True, 2)


def test_captions_alone_without_images(members_server, captioned):
    run_epochs(members_server.address, "captions", captioned[1], ("txt",), False, 2)


def take(ranks, k: int, samples, fields, seen: collections.Counter) -> list:
    """The next `k` batches of every rank, checked. Returns the iterators: the caller
    keeps them while it takes the state_dict (an iterator dropped after one batch is a
    peek, which leaves the epoch to start again)."""
    its = [iter(loader) for loader in ranks]
    for _ in range(k):
        for it in its:
            check_batch(next(it), samples, fields, True, seen)
    return its


def test_resume_and_elastic_resume_with_fields(members_server, captioned):
    _, samples = captioned
    address = members_server.address
    fields = ("txt", "json?")
    seen: collections.Counter = collections.Counter()
    first = loaders(address, "members-resume", 2, batch_size=8, fields=fields)
    its = take(first, 1, samples, fields, seen)
    states = [loader.state_dict() for loader in first]
    for loader in first:
        loader.close()

    # The same job resumed where it stopped: one more step.
    again = loaders(address, "members-resume", 2, batch_size=8, fields=fields)
    for loader, state in zip(again, states):
        loader.load_state_dict(state)
    its = take(again, 1, samples, fields, seen)
    states = [loader.state_dict() for loader in again]
    for loader in again:
        loader.close()
    del its
    assert sum(seen.values()) == 2 * 2 * 8

    # Another world size and batch size goes on with the rest of the epoch.
    wider = loaders(address, "members-elastic", 3, batch_size=6, fields=fields)
    try:
        for r, loader in enumerate(wider):
            loader.load_state_dict(states[r % 2])
        for loader in wider:
            for batch in loader:
                check_batch(batch, samples, fields, True, seen)
            assert loader.epoch == 0
    finally:
        for loader in wider:
            loader.close()
    assert sorted(seen) == sorted(samples) and set(seen.values()) == {1}


@pytest.mark.parametrize("store", ["http", "s3"])
def test_through_object_storage(store, captioned, tmp_path, monkeypatch):
    shards, samples = captioned
    scratch = tmp_path / "store"
    scratch.mkdir()
    if store == "http":
        child = start_nginx(shards, scratch)
        url = f"http://127.0.0.1:{child.port}/{{00000..{SHARDS - 1:05d}}}.tar"
        flags = []
    else:
        child = start_s3rver(shards, scratch)  # bucket "bench", the files under shards/
        url = "s3://bench/shards/"
        flags = ["--s3-endpoint", f"http://127.0.0.1:{child.port}"]
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "S3RVER")  # s3rver's fixed credentials
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "S3RVER")
    server = ServerProcess(BUILD, url, SERVER_FLAGS + flags)
    try:
        server.start(timeout=120)
        run_epochs(server.address, f"members-{store}", samples, FIELDS, True, 2)
        run_epochs(server.address, f"captions-{store}", samples, ("txt",), False, 1)
    finally:
        server.kill(signal.SIGTERM)
        child.stop()
