"""Loader(decode=...) end to end against a real shardcast-server: decode="cpu" (encoded
delivery, decoded by the native client with the server's code) hands out the batches
decode=None (server delivery) does, byte for byte: 2 ranks x 2 epochs, center and random
crops, JPEG, PNG and WebP, after a resume, and a corrupt or truncated JPEG is the same
substitute. The two are different jobs (fingerprints). decode="cuda" (on a CUDA machine):
the same samples and crops within the tolerance of test_gpu_decode.py."""

import io
import signal
import tarfile
from typing import Dict, List, Tuple

import pytest
import torch
from PIL import Image

import shardcast
from conftest import BUILD
from server_process import ServerProcess
from test_gpu_decode import NVJPEG_MAX, NVJPEG_MEAN, photo_like

SIZES = [(97, 61), (61, 97), (200, 151), (64, 64), (333, 250), (50, 41), (129, 255)]
RESIZE, CROP = 72, 64
WORLD = 2
BATCH = 4


def _encoded(kind: str, w: int, h: int, seed: int) -> bytes:
    out = io.BytesIO()
    image = Image.fromarray(photo_like(w, h, seed))
    if kind == "jpg":
        image.save(out, "JPEG", quality=90)
    elif kind == "png":
        image.save(out, "PNG")
    else:
        image.save(out, "WEBP", quality=80)
    return out.getvalue()


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


@pytest.fixture(scope="module")
def decode_shards(tmp_path_factory):
    """Two shards of JPEG, PNG and WebP samples of every size, a corrupt JPEG and a
    truncated one. Returns (directory, keys of the two damaged samples)."""
    out = tmp_path_factory.mktemp("decode") / "shards"
    out.mkdir()
    files: Dict[str, Tuple[str, bytes]] = {}
    for k, kind in enumerate(("jpg", "png", "webp")):
        for s, (w, h) in enumerate(SIZES):
            files[f"{kind}-{w}x{h}"] = (kind, _encoded(kind, w, h, 10 * k + s))
    whole = _encoded("jpg", 160, 120, 99)
    files["jpg-truncated"] = ("jpg", whole[: len(whole) // 2])
    files["jpg-corrupt"] = ("jpg", b"x" * 500)
    keys = sorted(files)
    for shard, part in enumerate([keys[0::2], keys[1::2]]):
        with tarfile.open(out / f"mixed-{shard:06d}.tar", "w", format=tarfile.GNU_FORMAT) as tar:
            for n, key in enumerate(part):
                kind, data = files[key]
                _add(tar, f"{key}.{kind}", data)
                _add(tar, f"{key}.cls", str(n % 3).encode())
    return out, {"jpg-truncated", "jpg-corrupt"}


@pytest.fixture(scope="module")
def decode_server(decode_shards):
    s = ServerProcess(
        BUILD, decode_shards[0], ["--decode-threads", "2", "--max-unstreamed-jobs-per-peer", "0"]
    )
    s.start()
    yield s
    s.kill(signal.SIGTERM)


def _loader(
    server: ServerProcess, job_id: str, rank: int, transform: str, **kwargs
) -> shardcast.Loader:
    return shardcast.Loader(
        server.address,
        job_id=job_id,
        rank=rank,
        world_size=WORLD,
        batch_size=BATCH,
        split="sample",
        remainder="pad",
        seed=7,
        transform=transform,
        resize=RESIZE,
        crop=CROP,
        **kwargs,
    )


Batches = List[Tuple[torch.Tensor, torch.Tensor, List[shardcast.SampleInfo]]]


def _epochs(loader: shardcast.Loader, epochs: int) -> Batches:
    got = []
    for _ in range(epochs):
        for images, labels, info in loader:
            got.append((images.cpu().clone(), labels.clone(), info))
    return got


def _assert_same(want: Batches, got: Batches) -> None:
    assert len(want) == len(got)
    for (wi, wl, winfo), (gi, gl, ginfo) in zip(want, got):
        assert winfo == ginfo
        assert torch.equal(wl, gl)
        assert torch.equal(wi, gi)


@pytest.mark.parametrize("transform", ["center", "random"])
def test_decode_cpu_equals_server_delivery(decode_server, decode_shards, transform):
    damaged = decode_shards[1]
    for rank in range(WORLD):
        with _loader(
            decode_server, f"py-decode-none-{transform}", rank, transform
        ) as server, _loader(
            decode_server,
            f"py-decode-cpu-{transform}",
            rank,
            transform,
            decode="cpu",
            decode_threads=2,
        ) as client:
            want = _epochs(server, 2)
            got = _epochs(client, 2)
            _assert_same(want, got)
            substituted = {s.key for _, _, info in got for s in info if s.substituted}
            assert substituted == damaged & {s.key for _, _, info in got for s in info}
            for images, _, info in got:
                for i, sample in enumerate(info):
                    if sample.substituted:
                        assert (images[i] == 128).all()


def test_decode_cpu_resumes_to_the_same_bytes(decode_server):
    with _loader(decode_server, "py-decode-resume-none", 0, "random") as server:
        want = _epochs(server, 2)[len(server) + 2 :]
    with _loader(decode_server, "py-decode-resume-cpu", 0, "random", decode="cpu") as first:
        first.set_epoch(1)
        batches = iter(first)
        next(batches), next(batches)
        state = first.state_dict()
    with _loader(decode_server, "py-decode-resume-cpu", 0, "random", decode="cpu") as resumed:
        resumed.load_state_dict(state)
        got = _epochs(resumed, 1)
    _assert_same(want, got)


def test_the_delivery_is_part_of_the_job(decode_server):
    with _loader(decode_server, "py-decode-print-none", 0, "center") as server, _loader(
        decode_server, "py-decode-print-cpu", 0, "center", decode="cpu"
    ) as client:
        assert server.job_fingerprint != client.job_fingerprint
        with pytest.raises(shardcast.JobChangedError):
            client.load_state_dict(server.state_dict())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="decode='cuda' needs a CUDA device")
@pytest.mark.parametrize("transform", ["center", "random"])
def test_decode_cuda_is_within_the_tolerance(decode_server, transform):
    with _loader(
        decode_server, f"py-decode-none-cuda-{transform}", 0, transform
    ) as server, _loader(
        decode_server, f"py-decode-cuda-{transform}", 0, transform, decode="cuda"
    ) as device:
        want = _epochs(server, 1)
        got = _epochs(device, 1)
        assert device.decode_fallbacks > 0  # the PNG, WebP and damaged samples
    worst, total, count = 0, 0, 0
    for (wi, wl, winfo), (gi, gl, ginfo) in zip(want, got):
        assert winfo == ginfo and torch.equal(wl, gl)
        diff = (wi.int() - gi.int()).abs().numpy()
        worst, total, count = (
            max(worst, int(diff.max())),
            total + int(diff.sum()),
            count + diff.size,
        )
    print(f"decode='cuda' against server delivery: max {worst}, mean {total / count:.4f}")
    assert worst <= NVJPEG_MAX and total / count <= NVJPEG_MEAN


def test_decode_arguments_are_checked_before_connecting():
    with pytest.raises(ValueError, match="decode must be"):
        shardcast.Loader("127.0.0.1:1", decode="gpu")
    with pytest.raises(ValueError, match="decode_threads"):
        shardcast.Loader("127.0.0.1:1", decode_threads=2)
    with pytest.raises(ValueError, match="decode_threads"):
        shardcast.Loader("127.0.0.1:1", decode="cpu", decode_threads=0)
    # A thread count no process can start is refused where it is given, with the native
    # client's bound (kMaxDecodeThreads), not a crash and not a refusal after connecting.
    with pytest.raises(ValueError, match=r"decode_threads must be >= 1 and <= 1024, got 1000000"):
        shardcast.Loader("127.0.0.1:1", decode="cpu", decode_threads=10**6)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            shardcast.Loader("127.0.0.1:1", decode="cuda")
