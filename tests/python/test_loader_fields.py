"""Members beside the image (issue 37) through the Python Loader: `fields=` asks for a
sample's members by extension, `image=False` for the members alone, and each batch's
`info[i].fields` maps a field's name to the member's bytes (None where an optional one
is missing, and for padding; `images` is None without images).

Two servers: one in this process that answers exactly as the protocol says
(hostile_server.py's plumbing, serving made-up members), and a few wrong answers the
client must refuse; and the real shardcast-server over tars written here, where every
member handed out must equal the tar's bytes and every sample come once per epoch.
"""

import io
import json
import signal
import subprocess
import tarfile
import warnings
from pathlib import Path
from typing import Dict, List

import pytest

import hostile_server
import shardcast
from conftest import BUILD, SERVER_FLAGS
from server_process import ServerProcess
from shardcast import _native
from shardcast._proto import pb

# ---- the Loader's keywords ---------------------------------------------------------


def test_a_str_for_fields_is_a_type_error_that_says_to_pass_a_tuple():
    # Refused before anything connects: the address is never dialled.
    with pytest.raises(TypeError, match=r"tuple of field specs, e\.g\. fields=\('txt',\)"):
        shardcast.Loader("127.0.0.1:1", fields="txt", job_id="j", rank=0, world_size=1)
    with pytest.raises(TypeError, match="each field spec is a str"):
        shardcast.Loader("127.0.0.1:1", fields=("txt", 3), job_id="j", rank=0, world_size=1)
    with pytest.raises(TypeError, match="image must be True, False or None"):
        shardcast.Loader("127.0.0.1:1", image="no", job_id="j", rank=0, world_size=1)


@pytest.mark.parametrize(
    "fields, says",
    [
        (("",), "empty"),
        (("a..b",), "empty component"),
        (("x" * 300,), "longer than 128 characters"),
        (("t\x00t",), "printable ASCII"),
        (("caf\u00e9",), "printable ASCII"),
        (("txt",) * 1000, "1000 asked for, at most 64"),
        (("txt", "txt?"), "asked for twice"),
    ],
)
def test_a_field_spec_the_server_would_refuse_is_a_value_error_before_connecting(fields, says):
    # The server's own parser: the address (nothing listens there) is never dialled.
    with pytest.raises(ValueError, match=says):
        shardcast.Loader("127.0.0.1:1", fields=fields, job_id="j", rank=0, world_size=1)


def test_help_and_the_signature_name_fields_and_image():
    doc = shardcast.Loader.__doc__
    assert 'fields=("txt", "json?")' in doc and "image=False" in doc
    assert "fields" in shardcast.SampleInfo._fields


# ---- a server that answers as the protocol says, with made-up members ---------------

BATCH = 2
EPOCH_BATCHES = 3


def fields_registration(request: pb.RegisterRequest, image: bool) -> pb.RegisterResponse:
    """The registration of a job with the fields asked for (normalized as the server
    does: lower case), with or without images."""
    r = hostile_server.registration(
        request,
        batches_per_epoch=EPOCH_BATCHES,
        batch_size=BATCH,
        image_shape=(3, 4, 4) if image else (),
    )
    r.image = image
    r.num_classes = 0 if not image else r.num_classes
    del r.class_names[:]
    r.fields.extend(f.lower() for f in request.fields)
    return r


def member(index: int, i: int, ext: str) -> bytes:
    """The made-up member `ext` of sample i of batch `index`: non-UTF-8 bytes too."""
    return f"{ext} of {index}-{i} 猫 🐱".encode() + bytes([0xFF, 0x00, index, i])


def fields_batch(
    index: int, fields: List[str], image: bool, pad_last: bool = False, json_missing_for: int = 1
) -> bytes:
    """Batch `index`: sample `json_missing_for` has no json, the last is padding when
    `pad_last`."""
    samples = []
    for i in range(BATCH):
        padding = pad_last and i == BATCH - 1
        sample = pb.SampleInfo(
            key="" if padding else f"s{index}-{i}",
            shard=-1 if padding else 0,
            index_in_shard=-1 if padding else i,
            valid=not padding,
        )
        if not padding:
            for spec in fields:
                ext = spec.rstrip("?")
                if ext == "json" and i == json_missing_for:
                    sample.fields.add(present=False)
                else:
                    sample.fields.add(present=True, ext=ext, data=member(index, i, ext))
        samples.append(sample)
    header = pb.Batch(
        epoch=0,
        index=index,
        labels=[-1] * BATCH,
        samples=samples,
        shape=[BATCH, 3, 4, 4] if image else [],
    )
    raw = header.SerializeToString()
    if image:
        raw += hostile_server.images_field(bytes([index]) * (BATCH * 3 * 4 * 4))
    return raw


def serving_fields(image: bool, spoil=None, pad_last_batch: bool = True):
    """A server of the fields each registration asks for (the last one's), with or
    without images; `spoil(index, raw)` may change each batch sent."""
    asked: List[str] = []

    def register(request, context):
        asked[:] = [f.lower() for f in request.fields]
        return fields_registration(request, image)

    def stream(request, context):
        for index in range(request.start_batch, EPOCH_BATCHES):
            raw = fields_batch(
                index, asked, image, pad_last=pad_last_batch and index == EPOCH_BATCHES - 1
            )
            yield spoil(index, raw) if spoil is not None else raw

    return hostile_server.HostileServer(register=register, stream=stream)


def test_a_members_only_job_hands_out_bytes_none_and_no_images():
    with serving_fields(image=False) as server, shardcast.Loader(
        server.address,
        fields=("TXT", "json?"),
        image=False,
        job_id="fields-only",
        rank=0,
        world_size=1,
        reconnect_deadline=3,
        stream_timeout=5,
    ) as loader:
        assert loader.fields == ("txt", "json?")
        assert not loader.has_images and loader.image_shape is None
        assert "image=False, fields=('txt', 'json?')" in repr(loader)
        seen = 0
        for index, (images, labels, info) in enumerate(loader):
            assert images is None
            assert shardcast.normalize(images) is None
            assert labels.tolist() == [-1] * BATCH
            for i, sample in enumerate(info):
                assert list(sample.fields) == ["txt", "json"]
                if not sample.valid:  # padding: every field None
                    assert sample.fields == {"txt": None, "json": None}
                    continue
                seen += 1
                assert sample.fields["txt"] == member(index, i, "txt")
                assert isinstance(sample.fields["txt"], bytes)
                expected_json = None if i == 1 else member(index, i, "json")
                assert sample.fields["json"] == expected_json
        assert seen == EPOCH_BATCHES * BATCH - 1


def test_fields_beside_images_and_pinned_memory_without_images():
    with serving_fields(image=True, pad_last_batch=False) as server, shardcast.Loader(
        server.address,
        fields=("txt",),
        job_id="fields-images",
        rank=0,
        world_size=1,
        reconnect_deadline=3,
        stream_timeout=5,
    ) as loader:
        assert loader.has_images and loader.image_shape == (3, 4, 4)
        images, labels, info = next(iter(loader))
        assert images.shape == (BATCH, 3, 4, 4)
        assert [s.fields for s in info] == [{"txt": member(0, i, "txt")} for i in range(BATCH)]
    # pin_memory has no pixels to pin in a job without images: batches come as without it.
    with serving_fields(image=False) as server, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no CUDA here: pin_memory=True warns and goes on
        loader = shardcast.Loader(
            server.address,
            fields=("txt",),
            image=False,
            pin_memory=True,
            job_id="pinned",
            rank=0,
            world_size=1,
            reconnect_deadline=3,
            stream_timeout=5,
        )
        images, _, info = next(iter(loader))
        assert images is None and info[0].fields["txt"] == member(0, 0, "txt")
        loader.close()


def test_a_stream_without_images_hands_out_batches_without_joining_pixels():
    # pin_memory=True on a CUDA machine streams with join_images=False, for next_into;
    # a job without images has no pixels to copy, so next() hands out its batches.
    with serving_fields(image=False) as server:
        options = _native.StreamOptions()
        options.server = server.address
        options.join_images = False
        options.reconnect_deadline = 3
        job = pb.RegisterRequest(job_id="pieces", rank=0, world_size=1, fields=["txt"], image=False)
        stream = _native.Stream(job.SerializeToString(), options, _native.client_security())
        assert not stream.has_images
        stream.start_epoch(0)
        batch = stream.next()
        assert batch.pixels is None and batch.samples[0][5] == {"txt": member(0, 0, "txt")}
        with pytest.raises(ValueError, match="this job has no images"):
            stream.next_into(0, 0)
        stream.close()


def test_a_server_that_ignores_the_fields_is_refused_at_registration():
    # A server older than fields: it answers a job of images alone.
    with hostile_server.HostileServer() as server:
        with pytest.raises(
            shardcast.JobRefusedError,
            match=r"registered fields \[\] for the fields \[txt\] asked.*"
            r"does not serve the job as asked",
        ):
            shardcast.Loader(
                server.address,
                fields=("txt",),
                job_id="old",
                rank=0,
                world_size=1,
                reconnect_deadline=3,
            )


def drop_field_values(index: int, raw: bytes) -> bytes:
    """Batch 1 with its first sample's field values gone."""
    if index != 1:
        return raw
    batch = pb.Batch.FromString(raw)
    del batch.samples[0].fields[:]
    return batch.SerializeToString()


def padding_with_values(index: int, raw: bytes) -> bytes:
    batch = pb.Batch.FromString(raw)
    batch.samples[1].valid = False
    return batch.SerializeToString()


@pytest.mark.parametrize(
    "spoil, says",
    [
        (
            drop_field_values,
            r"epoch 0 batch 1 sample 0 \(key 's1-0'\): 0 field values for the 2 "
            r"registered fields \[txt,json\?\]",
        ),
        (padding_with_values, r"batch 0 sample 1 \(key 's0-1'\): padding with 2 field values"),
    ],
)
def test_samples_without_their_field_values_are_a_batch_check_error(spoil, says):
    with serving_fields(image=False, spoil=spoil) as server, shardcast.Loader(
        server.address,
        fields=("txt", "json?"),
        image=False,
        job_id="spoilt",
        rank=0,
        world_size=1,
        reconnect_deadline=3,
        stream_timeout=5,
    ) as loader:
        with pytest.raises(shardcast.BatchCheckError, match=says):
            for _ in loader:
                pass


# ---- the real server over real tars --------------------------------------------------

TRAIN_BIN = BUILD / "client" / "shardcast-train"
SAMPLES = 24  # shards of 10, 10, 4
PER_SHARD = 10
CLASSES = 3


def caption(i: int) -> bytes:
    """Sample i's caption: CJK and emoji, and for every fifth sample bytes that are not
    UTF-8 (served as stored)."""
    text = f"a photo of thing {i}: 猫が座っている 🐈‍⬛".encode()
    return text + (b"\xff\xfe latin-1 caf\xe9" if i % 5 == 0 else b"")


def jpeg(i: int) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (16, 16), (i * 10 % 256, 80, 200 - i)).save(out, format="JPEG")
    return out.getvalue()


def write_shards(out: Path, members_of) -> Dict[str, Dict[str, bytes]]:
    """Shards of SAMPLES samples, PER_SHARD a shard, sample i's members from
    `members_of(i)` ({ext: bytes}); returns {key: {ext: bytes}} as written."""
    out.mkdir(parents=True)
    written = {}
    for first in range(0, SAMPLES, PER_SHARD):
        with tarfile.open(out / f"shard-{first // PER_SHARD:04d}.tar", "w") as tar:
            for i in range(first, min(first + PER_SHARD, SAMPLES)):
                key = f"sample{i:04d}"
                written[key] = members_of(i)
                for ext, data in written[key].items():
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    return written


def captioned_members(i: int) -> Dict[str, bytes]:
    """An image, a label, a caption, and metadata for even samples only."""
    members = {"jpg": jpeg(i), "cls": str(i % CLASSES).encode(), "txt": caption(i)}
    if i % 2 == 0:
        members["json"] = json.dumps({"i": i, "url": f"https://x/{i}"}).encode()
    return members


def text_members(i: int) -> Dict[str, bytes]:
    """No image, no label: a caption and metadata (img2dataset's layout, images dropped)."""
    return {"txt": caption(i), "json": json.dumps({"i": i}).encode()}


def unlabeled_image_members(i: int) -> Dict[str, bytes]:
    return {"jpg": jpeg(i), "txt": caption(i)}


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("fields")
    return {
        "captioned": (root / "captioned", write_shards(root / "captioned", captioned_members)),
        "text": (root / "text", write_shards(root / "text", text_members)),
        "unlabeled": (
            root / "unlabeled",
            write_shards(root / "unlabeled", unlabeled_image_members),
        ),
    }


@pytest.fixture(scope="module")
def fields_server(datasets):
    captioned, _ = datasets["captioned"]
    s = ServerProcess(BUILD, captioned, SERVER_FLAGS)
    s.start(
        [
            "--dataset",
            f"text={datasets['text'][0]}",
            "--dataset",
            f"unlabeled={datasets['unlabeled'][0]}",
        ]
    )
    yield s
    s.kill(signal.SIGTERM)


def epoch_of(loaders, written, names) -> List[str]:
    """One epoch of every loader, batches taken in turn; checks each valid sample's
    fields against the tar's bytes and returns the keys seen."""
    keys = []
    for batches in zip(*(iter(loader) for loader in loaders)):
        for images, labels, info in batches:
            for label, sample in zip(labels.tolist(), info):
                assert list(sample.fields) == names
                if not sample.valid:
                    assert all(v is None for v in sample.fields.values())
                    continue
                keys.append(sample.key)
                tar = written[sample.key]
                for name, data in sample.fields.items():
                    assert data == tar.get(name), (sample.key, name)
                if "cls" in tar:
                    assert label == int(tar["cls"])
                else:
                    assert label == -1
    return keys


def test_txt_and_json_beside_images_equal_the_tar_every_sample_once(fields_server, datasets):
    _, written = datasets["captioned"]
    loaders = [
        shardcast.Loader(
            fields_server.address,
            fields=("txt", "json?"),
            job_id="fields-captioned",
            rank=rank,
            world_size=2,
            batch_size=5,
            split="sample",
            remainder="pad",
        )
        for rank in range(2)
    ]
    assert loaders[0].registration.num_samples == SAMPLES
    assert loaders[0].num_classes == CLASSES and loaders[0].image_shape is not None
    for epoch in range(2):
        keys = epoch_of(loaders, written, ["txt", "json"])
        assert sorted(keys) == sorted(written), f"epoch {epoch}"
    for loader in loaders:
        loader.close()


def test_a_required_field_leaves_out_the_samples_without_it(fields_server, datasets):
    _, written = datasets["captioned"]
    with shardcast.Loader(
        fields_server.address,
        fields=("json",),
        job_id="fields-required",
        rank=0,
        world_size=1,
        batch_size=4,
        split="sample",
        remainder="pad",
    ) as loader:
        assert loader.registration.num_samples == SAMPLES // 2
        left_out = {r.reason: r.count for r in loader.registration.left_out}
        assert left_out == {"missing required field 'json'": SAMPLES // 2}
        keys = epoch_of([loader], written, ["json"])
        assert sorted(keys) == sorted(k for k, m in written.items() if "json" in m)


def test_a_members_only_job_on_a_text_dataset(fields_server, datasets):
    _, written = datasets["text"]
    with shardcast.Loader(
        fields_server.address,
        dataset="text",
        fields=("txt",),
        image=False,
        job_id="fields-text",
        rank=0,
        world_size=1,
        batch_size=5,
        split="sample",
        remainder="pad",
    ) as loader:
        assert not loader.has_images and loader.image_shape is None
        assert loader.num_classes == 0
        batches = list(loader)
        assert len(batches) == len(loader) == 5  # ceil(24 / 5)
        assert all(images is None for images, _, _ in batches)
        keys = epoch_of([loader], written, ["txt"])
        assert sorted(keys) == sorted(written)
    # An image job on a dataset without images is refused, saying what to ask for.
    with pytest.raises(shardcast.JobRefusedError, match="image"):
        shardcast.Loader(
            fields_server.address,
            dataset="text",
            fields=("txt",),
            job_id="fields-text-image",
            rank=0,
            world_size=1,
        )


def rest_of_epoch(address, state, written, **job) -> List[str]:
    with shardcast.Loader(address, **job) as loader:
        loader.load_state_dict(state)
        return epoch_of([loader], written, ["txt", "json"])


def test_resume_and_elastic_resume_with_fields(fields_server, datasets):
    _, written = datasets["captioned"]
    job = dict(fields=("txt", "json?"), batch_size=3, split="sample", remainder="pad", seed=7)
    # Same world size: the rest of the epoch, the same samples and bytes.
    with shardcast.Loader(
        fields_server.address, job_id="fields-resume", rank=0, world_size=1, **job
    ) as loader:
        it = iter(loader)
        first = [s.key for _ in range(3) for s in next(it)[2] if s.valid]
        state = loader.state_dict()
    rest = rest_of_epoch(
        fields_server.address, state, written, job_id="fields-resume-2", rank=0, world_size=1, **job
    )
    assert sorted(first + rest) == sorted(written)

    # Two ranks take two batches each; one rank goes on from what both consumed.
    loaders = [
        shardcast.Loader(
            fields_server.address, job_id="fields-elastic", rank=rank, world_size=2, **job
        )
        for rank in range(2)
    ]
    iterators = [iter(loader) for loader in loaders]
    first = [s.key for _ in range(2) for it in iterators for s in next(it)[2] if s.valid]
    state = loaders[0].state_dict()
    for loader in loaders:
        loader.close()
    rest = rest_of_epoch(
        fields_server.address,
        state,
        written,
        job_id="fields-elastic-2",
        rank=0,
        world_size=1,
        **job,
    )
    assert sorted(first + rest) == sorted(written)

    # The fields are part of the job: a state of a job without them does not resume here.
    with shardcast.Loader(
        fields_server.address,
        job_id="fields-other",
        rank=0,
        world_size=1,
        fields=("txt",),
        batch_size=3,
        split="sample",
        remainder="pad",
        seed=7,
    ) as other:
        with pytest.raises(shardcast.JobChangedError, match="job_fingerprint"):
            other.load_state_dict(state)


def test_the_trainer_refuses_a_dataset_without_labels_and_no_image(fields_server):
    if not TRAIN_BIN.is_file():
        pytest.fail(f"not built: {TRAIN_BIN} (cmake --build {BUILD} --target shardcast-train)")
    run = subprocess.run(
        [
            str(TRAIN_BIN),
            "--server",
            fields_server.address,
            "--dataset",
            "unlabeled",
            "--epochs",
            "1",
            "-b",
            "4",
            "--device",
            "cpu",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode != 0
    assert (
        "dataset 'unlabeled' has no labels (num_classes 0): shardcast-train trains a "
        "classifier; read it with the Loader or RankStream instead"
    ) in run.stderr
    run = subprocess.run(
        [
            str(TRAIN_BIN),
            "--server",
            fields_server.address,
            "--dataset",
            "text",
            "--fields",
            "txt",
            "--no-image",
            "--epochs",
            "1",
            "--device",
            "cpu",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode != 0
    assert "--no-image: shardcast-train trains an image classifier" in run.stderr
