"""A server's answer never crashes the client: every field that sizes or indexes memory
(batch size, image shape, the bytes a shape needs against the bytes received, labels and
samples per batch, a length a field announces) is checked before it is used, and a
wrong one ends the Loader with BatchCheckError naming the field, at registration when
the registration is wrong. Before, a batch size of 0 (image shape [3, 0, 0]) killed the
Python process with SIGSEGV.

The answers are tried by a child Python (a crash there fails the test, naming the
answer, instead of killing pytest), each against its own hostile server
(hostile_server.py) in this process.
"""

import subprocess
import sys
import textwrap
from typing import Dict

import pytest

import hostile_server
from conftest import BUILD
from server_process import python_env

# The child: a Loader over the whole epoch of each server named; one line per server,
# saying where it stopped and how.
CHILD = textwrap.dedent(
    """
    import sys
    import shardcast
    for address in sys.argv[1:]:
        stage = "register"
        try:
            with shardcast.Loader(address, job_id="hostile", batch_size=2, world_size=1,
                                  rank=0, reconnect_deadline=3, stream_timeout=3) as loader:
                stage = "iterate"
                for images, labels, info in loader:
                    images.sum(), labels.sum()  # touch every byte handed out
            print("no error", flush=True)
        except shardcast.ShardcastError as e:
            print(f"{stage}: {type(e).__name__}: {e}", flush=True)
"""
)


def run_child(servers: Dict[str, hostile_server.HostileServer]) -> Dict[str, str]:
    """What the child made of each server (name -> its line). One child for them all
    (a Python with torch takes seconds to start); should one answer crash it, the test
    fails naming that one."""
    names = list(servers)
    child = subprocess.run(
        [sys.executable, "-c", CHILD] + [servers[n].address for n in names],
        env=python_env(BUILD),
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = child.stdout.splitlines()
    if child.returncode != 0:
        pytest.fail(
            f"the client died (exit {child.returncode}) on the answer of "
            f"{names[len(lines)]!r}: {child.stderr[-2000:]}"
        )
    return dict(zip(names, lines))


def registering_with(fields):
    """A server whose registration has `fields`, and whose batches have the shape and
    bytes that registration says, however absurd."""
    said = []

    def register(request, context):
        said.append(hostile_server.registration(request, **fields))
        return said[-1]

    def stream(request, context):
        reg = said[-1]
        shape = [reg.batch_size, *reg.image_shape]
        size = 1
        for extent in shape:
            size *= extent
        images = bytes(size) if 0 <= size <= 1 << 20 else b""
        for index in range(request.start_batch, reg.batches_per_epoch):
            yield hostile_server.batch(request.epoch, index, shape, images=images)

    return hostile_server.HostileServer(register, stream)


# name -> (registration fields, what the error must name)
BAD_REGISTRATIONS = {
    "zero batch size": (dict(batch_size=0, image_shape=(3, 0, 0)), "batch size 0"),
    "zero image size": (dict(image_shape=(3, 0, 0)), "image shape [3,0,0]"),
    "negative image size": (dict(image_shape=(3, -4, -4)), "image shape [3,-4,-4]"),
    "two channels": (dict(image_shape=(2, 4, 4)), "image shape [2,4,4]"),
    # 2 * 3 * 2^32 * 2^32 wraps to 0 in 64 bits: a batch of no bytes.
    "a shape whose size overflows": (
        dict(image_shape=(3, 1 << 32, 1 << 32)),
        "image shape [3,4294967296,4294967296]",
    ),
    # 6 TB per batch: no protobuf message holds it, and a pinned buffer of it would be
    # allocated before the first batch.
    "a huge image shape": (
        dict(image_shape=(3, 1 << 20, 1 << 20)),
        "image shape [3,1048576,1048576]",
    ),
    "no batches": (dict(batches_per_epoch=0), "batches_per_epoch 0"),
}


def test_a_registration_that_sizes_memory_wrongly_is_refused():
    servers = {name: registering_with(fields) for name, (fields, _) in BAD_REGISTRATIONS.items()}
    try:
        out = run_child(servers)
    finally:
        for server in servers.values():
            server.stop()
    for name, (_, named) in BAD_REGISTRATIONS.items():
        line = out[name]
        assert line.startswith("register: BatchCheckError: "), (name, line)
        assert named in line and servers[name].address in line, (name, line)


def header_only(epoch, index):
    whole = hostile_server.batch(epoch, index, [2, 3, 4, 4], images=b"")
    return whole[: -len(hostile_server.images_field(b""))]


# name -> (the bad batch 1 (batch 0 is good) of the registered shape [2, 3, 4, 4], what
# the error must name)
BAD_BATCHES = {
    "fewer image bytes than the shape": (
        lambda e, i: hostile_server.batch(e, i, [2, 3, 4, 4], images=bytes(95)),
        "95 image bytes",
    ),
    "more image bytes than the shape": (
        lambda e, i: hostile_server.batch(e, i, [2, 3, 4, 4], images=bytes(97)),
        "97 image bytes",
    ),
    "a zero shape with no bytes": (
        lambda e, i: hostile_server.batch(e, i, [0, 3, 0, 0], images=b""),
        "batch shape [0,3,0,0]",
    ),
    "a labels list of another length": (
        lambda e, i: hostile_server.batch(e, i, [2, 3, 4, 4], labels=1),
        "1 labels",
    ),
    "a samples list of another length": (
        lambda e, i: hostile_server.batch(e, i, [2, 3, 4, 4], samples=5),
        "5 samples",
    ),
    # The images field announces 1 GiB; the message holds 96 bytes. Before, the stream
    # took it for its end and hung in Finish() for ever.
    "an images field longer than the message": (
        lambda e, i: header_only(e, i) + hostile_server.images_field(bytes(96), claimed=1 << 30),
        "malformed Batch message",
    ),
}


def sending_as_batch_1(bad):
    def stream(request, context):
        for index in range(request.start_batch, 4):
            yield (
                hostile_server.batch(request.epoch, index, [2, 3, 4, 4])
                if index != 1
                else bad(request.epoch, index)
            )

    return hostile_server.HostileServer(stream=stream)


def test_a_batch_that_disagrees_with_its_bytes_ends_the_stream():
    servers = {name: sending_as_batch_1(bad) for name, (bad, _) in BAD_BATCHES.items()}
    try:
        out = run_child(servers)
    finally:
        for server in servers.values():
            server.stop()
    for name, (_, named) in BAD_BATCHES.items():
        line = out[name]
        assert line.startswith("iterate: BatchCheckError: "), (name, line)
        assert named in line and "job 'hostile' rank 0 epoch 0 batch 1" in line, (name, line)
