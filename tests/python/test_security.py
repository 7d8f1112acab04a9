"""TLS and bearer tokens from Python: the Loader's tls_ca / token / SHARDCAST_TOKEN
against the real shardcast-server with --tls-cert and --auth-token-file, certificates
made here by Debian's openssl CLI (as tests/server/security_test.cc does for C++)."""

import os
import signal
import subprocess
import time
from pathlib import Path

import grpc
import pytest

import shardcast
from conftest import BUILD, SERVER_FLAGS
from server_process import ServerProcess

TOKEN = "python-test-token"


def _openssl(cwd: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _ca(cwd: Path, name: str) -> None:
    _openssl(
        cwd,
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        f"{name}.key",
        "-out",
        f"{name}.pem",
        "-days",
        "2",
        "-subj",
        f"/CN={name}",
    )


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("certs")
    _ca(d, "ca")
    _ca(d, "other_ca")
    _openssl(
        d,
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    )
    (d / "server.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    _openssl(
        d,
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "server.ext",
    )
    _openssl(
        d,
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        "client.key",
        "-out",
        "client.csr",
        "-subj",
        "/CN=trainer",
    )
    _openssl(
        d,
        "x509",
        "-req",
        "-in",
        "client.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "client.pem",
        "-days",
        "2",
    )
    (d / "tokens").write_text(f"# test\n{TOKEN}\n")
    return d


def _tls_server(shards, certs, *flags: str):
    """The server with TLS (its certificate names localhost) and `flags`, while in use."""
    s = ServerProcess(
        BUILD,
        shards,
        SERVER_FLAGS
        + ["--tls-cert", str(certs / "server.pem"), "--tls-key", str(certs / "server.key"), *flags],
    )
    s.start()
    yield s
    s.kill(signal.SIGTERM)


@pytest.fixture(scope="module")
def secure_server(shards, certs):
    yield from _tls_server(shards, certs, "--auth-token-file", str(certs / "tokens"))


def _address(server) -> str:
    return f"localhost:{server.port}"  # the name the certificate carries


def test_tls_and_token_stream_a_batch(secure_server, certs):
    with shardcast.Loader(
        _address(secure_server),
        batch_size=8,
        world_size=1,
        rank=0,
        tls_ca=str(certs / "ca.pem"),
        token=TOKEN,
    ) as loader:
        images, labels, _ = next(iter(loader))
        assert images.shape[0] == 8 and labels.shape[0] == 8


def test_token_from_the_environment(secure_server, certs, monkeypatch):
    monkeypatch.setenv("SHARDCAST_TOKEN", TOKEN)
    with shardcast.Loader(
        _address(secure_server), batch_size=8, world_size=1, rank=0, tls_ca=str(certs / "ca.pem")
    ) as loader:
        assert len(loader) > 0


@pytest.mark.parametrize("token", [None, "wrong-token"])
def test_no_or_wrong_token_is_refused_at_once(secure_server, certs, monkeypatch, token):
    monkeypatch.delenv("SHARDCAST_TOKEN", raising=False)
    with pytest.raises(shardcast.JobRefusedError, match="SHARDCAST_TOKEN") as e:
        shardcast.Loader(
            _address(secure_server),
            batch_size=8,
            world_size=1,
            rank=0,
            tls_ca=str(certs / "ca.pem"),
            token=token,
            reconnect_deadline=300,
        )
    assert e.value.code == grpc.StatusCode.UNAUTHENTICATED


def test_a_wrong_ca_is_a_handshake_failure_not_retried(secure_server, certs):
    # With a 300 s deadline, a retried handshake would end as "unreachable for 300.0 s".
    with pytest.raises(shardcast.ServerUnavailableError, match="TLS handshake failed") as e:
        shardcast.Loader(
            _address(secure_server),
            batch_size=8,
            world_size=1,
            rank=0,
            tls_ca=str(certs / "other_ca.pem"),
            token=TOKEN,
            reconnect_deadline=300,
        )
    assert "unreachable for" not in str(e.value)


def test_plaintext_to_a_tls_server_is_reported_not_retried_to_the_deadline(secure_server):
    # The server closes a plaintext connection during the handshake; after the
    # handshake_refusal period (10 s) the loader says so instead of retrying for 300 s.
    with pytest.raises(
        shardcast.ServerUnavailableError, match="closed it during the handshake"
    ) as e:
        shardcast.Loader(
            _address(secure_server),
            batch_size=8,
            world_size=1,
            rank=0,
            token=TOKEN,
            reconnect_deadline=300,
        )
    assert "tls_ca" in str(e.value)


@pytest.fixture(scope="module")
def mtls_server(shards, certs):
    yield from _tls_server(shards, certs, "--tls-client-ca", str(certs / "ca.pem"))


def test_a_client_certificate_streams_from_an_mtls_server(mtls_server, certs):
    with shardcast.Loader(
        _address(mtls_server),
        batch_size=8,
        world_size=1,
        rank=0,
        tls_ca=str(certs / "ca.pem"),
        tls_cert=str(certs / "client.pem"),
        tls_key=str(certs / "client.key"),
    ) as loader:
        images, labels, _ = next(iter(loader))
        assert images.shape[0] == 8


def test_without_a_client_certificate_an_mtls_server_is_refused_not_retried(mtls_server, certs):
    start = time.monotonic()
    with pytest.raises(shardcast.ServerUnavailableError, match="tls_cert"):
        shardcast.Loader(
            _address(mtls_server),
            batch_size=8,
            world_size=1,
            rank=0,
            tls_ca=str(certs / "ca.pem"),
            reconnect_deadline=300,
        )
    assert time.monotonic() - start < 60


def test_a_certificate_without_its_key_is_a_value_error(certs):
    with pytest.raises(ValueError, match="tls_cert and tls_key"):
        shardcast.Loader("localhost:1", tls_cert=str(certs / "client.pem"))


def test_a_fifo_as_tls_file_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "ca.pem"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="not a regular file"):
        shardcast.Loader("localhost:1", tls_ca=str(fifo))


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "tls_ca '.*': empty"),
        (b"\xff\xfe not text, no PEM block", "tls_ca '.*': not a PEM file"),
        (b"-----BEGIN " + b"A" * (2 << 20), "more than the 1048576 this file may hold"),
    ],
    ids=["empty", "not-pem", "over-1MiB"],
)
def test_a_tls_file_that_is_no_pem_file_is_refused_naming_it(tmp_path, content, message):
    path = tmp_path / "ca.pem"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=message):
        shardcast.Loader("localhost:1", tls_ca=str(path))


# Python builds its channel security with the C++ clients' one function (LoadClientSecurity
# through _native.client_security): $SHARDCAST_TOKEN is checked as shardcast-train and
# shardcast-ctl check it (one token of visible ASCII, or empty for none), before anything
# connects. Python used to send whatever the variable held.
@pytest.mark.parametrize("value", ["two tokens", "tab\tinside"])
def test_an_environment_token_that_is_not_one_token_is_a_value_error(monkeypatch, value):
    monkeypatch.setenv("SHARDCAST_TOKEN", value)
    with pytest.raises(ValueError, match="SHARDCAST_TOKEN: one token"):
        shardcast.Loader("localhost:1", batch_size=8, reconnect_deadline=300)


def test_a_token_given_is_sent_whatever_the_environment_holds(secure_server, certs, monkeypatch):
    monkeypatch.setenv("SHARDCAST_TOKEN", "two tokens")  # not read: token= wins
    with shardcast.Loader(
        _address(secure_server),
        batch_size=8,
        world_size=1,
        rank=0,
        tls_ca=str(certs / "ca.pem"),
        token=TOKEN,
    ) as loader:
        assert next(iter(loader))[0].shape[0] == 8
