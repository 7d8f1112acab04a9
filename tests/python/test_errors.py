"""What a user gets wrong surfaces as a clear Python exception: the class says what to
do about it, the message names the server, job and field."""

import socket
import time

import grpc
import pytest

import shardcast


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_nothing_listening_is_unavailable_after_the_deadline():
    address = f"127.0.0.1:{free_port()}"
    start = time.monotonic()
    with pytest.raises(shardcast.ServerUnavailableError, match=f"at {address}: server unreachable"):
        shardcast.Loader(address, batch_size=8, reconnect_deadline=1.0)
    assert 0.9 < time.monotonic() - start < 10


def test_an_unresolvable_host_is_unavailable():
    with pytest.raises(shardcast.ServerUnavailableError, match="no-such-host.invalid:50051"):
        shardcast.Loader("no-such-host.invalid:50051", batch_size=8, reconnect_deadline=0.5)


def test_tls_to_a_plaintext_server_is_unavailable(server):
    with pytest.raises(shardcast.ServerUnavailableError):
        shardcast.Loader(server.address, batch_size=8, reconnect_deadline=0.5, tls=True)


def test_a_job_the_data_cannot_serve_is_refused_with_the_servers_reason(server):
    with pytest.raises(shardcast.JobRefusedError) as e:
        shardcast.Loader(server.address, job_id="too-big", batch_size=1000, world_size=1, rank=0)
    assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert "fewer than batch size 1000" in str(e.value)


def test_ranks_that_disagree_are_refused_naming_the_field(server):
    with shardcast.Loader(server.address, job_id="disagree", batch_size=8, world_size=2, rank=0):
        with pytest.raises(shardcast.JobRefusedError, match="batch_size: job 'disagree' has 8"):
            shardcast.Loader(server.address, job_id="disagree", batch_size=16, world_size=2, rank=1)


def test_a_rank_outside_the_world_is_refused(server):
    # Refused where it is given (issue 44), naming the rank and its range, before the
    # server could; the server's own refusal of such a request is tested in C++
    # (job_registry_test).
    with pytest.raises(
        ValueError, match=r"rank=2 is not below world_size=2: rank takes an " r"int in \[0, 1\]"
    ):
        shardcast.Loader(server.address, job_id="outside", batch_size=8, world_size=2, rank=2)


def test_names_come_from_the_proto_and_a_wrong_one_lists_them():
    with pytest.raises(ValueError, match="split must be one of shard, sample; got 'node'"):
        shardcast.Loader("127.0.0.1:1", split="node")
    with pytest.raises(ValueError, match="transform must be one of center, random"):
        shardcast.Loader("127.0.0.1:1", transform="flip")


def test_loader_arguments_are_checked_before_connecting():
    with pytest.raises(ValueError, match="prefetch must be >= 1"):
        shardcast.Loader("127.0.0.1:1", prefetch=0)


def test_every_kind_of_native_error_has_its_class():
    """The kinds cross the binding as one C++ enum (_native.ErrorKind), not as strings two
    files must keep equal: each has its class, and a ShardcastError carries the code."""
    from shardcast import _native
    from shardcast.errors import from_native, native_kinds

    assert set(native_kinds()) == set(_native.ErrorKind.__members__.values())
    assert isinstance(from_native(_native.ErrorKind.VALUE, "bad", 0), ValueError)
    error = from_native(
        _native.ErrorKind.CHANGED, "changed", grpc.StatusCode.FAILED_PRECONDITION.value[0]
    )
    assert isinstance(error, shardcast.JobChangedError)
    assert error.code == grpc.StatusCode.FAILED_PRECONDITION
