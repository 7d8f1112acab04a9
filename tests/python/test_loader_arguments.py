"""Every argument of the Loader is checked where it is given (issue 44), through one table
(issue 45): None means the default, any other value is used as given or refused at
construction, before any connection, with TypeError (a wrong type) or ValueError (out of
range) naming the argument. The ranges below are written out by hand from the C++
constants (common/plan/job_config.h, client/base/stream_settings.h), so a change to
either side shows here.

Refusals are made against a listening socket that never accepts: a refusal that came
after dialling would leave a connection in its backlog (and would take the reconnect
deadline, not a moment). Values that are accepted are checked as the request and stream
options they become, and a few at the edges end to end against the real server.
"""

import inspect
import math
import re
import socket
import warnings
from pathlib import Path

import pytest

import shardcast
from shardcast import _native, options

# The values every argument is walked with (issue 44), and a few more at the edges.
WALK = [0, -1, 2**31, 2**63, 1.5, math.nan, "string", None, 1, True]

INT32_MAX = 2**31 - 1
# Each integer argument's accepted range, written out from the C++ constants.
INT_RANGES = {
    "batch_size": (1, 65536),
    "rank": (0, 65535),
    "world_size": (1, 65536),
    "workers": (1, 1024),
    "seed": (0, 2**64 - 1),
    "shuffle_buffer": (0, 1 << 24),
    "block_size": (0, INT32_MAX),
    "resize": (1, 16384),
    "crop": (1, 8192),
    "prefetch": (1, INT32_MAX),
    "decode_threads": (1, 1024),
    "num_workers": (0, INT32_MAX),
    "samples_per_epoch": (1, 1 << 48),
}
SECONDS = {"reconnect_deadline", "stream_timeout"}
BOOLS = {"shuffle_shards", "image", "tls", "pin_memory", "check_ranks", "shuffle", "drop_last"}
CHOICES = {
    "split": ("shard", "sample"),
    "remainder": ("drop", "pad"),
    "transform": ("center", "random"),
    "on_substitute": ("mask", "fail"),
    "decode": ("cpu", "cuda"),
}
# str arguments, and what "string" does for each (a file that is not there is a
# ValueError naming the argument; a word is no address).
STRINGS = {
    "dataset": None,
    "job_id": None,
    "token": None,
    "tls_ca": ValueError,
    "tls_cert": ValueError,
    "tls_key": ValueError,
}
OTHERS = {"fields", "process_group", "mix"}


def expected(name, value):
    """The outcome the rule promises: None (accepted), TypeError or ValueError."""
    if value is None:
        return None
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if name in INT_RANGES:
        if not is_int:
            return TypeError
        low, high = INT_RANGES[name]
        if not low <= value <= high:
            return ValueError
        if name == "rank":
            return None if value < 1 else ValueError  # world_size defaults to 1
        if name == "decode_threads":
            return ValueError  # without decode=: nothing decodes here
        if name == "samples_per_epoch":
            return ValueError  # without mix=: a mixture's epoch length

        return None
    if name in SECONDS:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return TypeError
        return None if value >= 0 and math.isfinite(value) else ValueError
    if name in BOOLS:
        if not isinstance(value, bool):
            return TypeError
        return ValueError if name == "image" and value is False else None
    if name in CHOICES:
        if not isinstance(value, str):
            return TypeError
        return None if value in CHOICES[name] else ValueError
    if name in STRINGS:
        return STRINGS[name] if isinstance(value, str) else TypeError
    return TypeError  # fields (a bare str too), process_group and mix take neither of these


def test_the_walk_covers_every_argument_the_loader_takes():
    covered = set(INT_RANGES) | SECONDS | BOOLS | set(CHOICES) | set(STRINGS) | OTHERS
    names = [o.name for o in options.OPTIONS if o.name != "server"]
    assert set(names) == covered
    # The signature help(Loader) shows is the table's.
    assert list(inspect.signature(shardcast.Loader).parameters) == ["server"] + names


@pytest.fixture
def listener():
    """A listening socket that never accepts: where a refused Loader must never dial."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        sock.setblocking(False)
        yield sock


def assert_never_dialled(sock):
    with pytest.raises(BlockingIOError):
        conn, _ = sock.accept()
        conn.close()


@pytest.mark.parametrize(
    "name", sorted(set(INT_RANGES) | SECONDS | BOOLS | set(CHOICES) | set(STRINGS) | OTHERS)
)
def test_every_argument_with_every_kind_of_value(name, listener, monkeypatch):
    monkeypatch.delenv("SHARDCAST_TOKEN", raising=False)
    address = "127.0.0.1:%d" % listener.getsockname()[1]
    for value in WALK:
        want = expected(name, value)
        keywords = {name: value}
        if want is None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # num_workers, pin_memory without CUDA
                values = options.bind(address, keywords)
            assert_lands_as_given(name, value, values)
            continue
        with pytest.raises(want) as raised:
            shardcast.Loader(
                address, reconnect_deadline=0.5, **keywords
            ) if name != "reconnect_deadline" else shardcast.Loader(address, **keywords)
        message = str(raised.value)
        assert name in message, (name, value, message)
        if "go together" not in message:  # tls_cert without tls_key: the pair is the fault
            assert repr(value) in message or str(value) in message, (name, value, message)
        low, high = INT_RANGES.get(name, (0, 0))
        if want is ValueError and name in INT_RANGES and not low <= value <= high:
            assert f"{low}" in str(raised.value) and f"{high}" in str(raised.value), str(
                raised.value
            )
    assert_never_dialled(listener)


def assert_lands_as_given(name, value, values):
    """An accepted value reaches the request or the stream options as given; None
    leaves the request's field unset (the server's default) or the option's own."""
    option = options.BY_NAME[name]
    job = options.job_request(values, "j", values["rank"] or 0, values["world_size"] or 1)
    stream = options.stream_options(values)
    if option.target.startswith("job."):
        *parents, leaf = option.target[len("job.") :].split(".")
        message = job
        for part in parents:
            message = getattr(message, part)
        got = getattr(message, leaf)
        if value is None:
            assert not got, (name, got)  # unset: the server's default
        elif option.kind == "enum":
            assert got == options.enum_value(option.enum, value, name), (name, got)
        else:
            assert got == value, (name, got, value)
    elif option.target.startswith("stream."):
        got = getattr(stream, option.target[len("stream.") :])
        if value is not None:
            assert got == value, (name, got, value)
    else:
        want = option.default if value is None else value
        assert values[name] == want or name == "pin_memory", (name, values[name])


def test_the_reproductions_of_issue_44_are_refused_before_connecting(listener):
    address = "127.0.0.1:%d" % listener.getsockname()[1]
    cases = [
        (dict(batch_size=0), ValueError, "batch_size must be >= 1 and <= 65536, got 0"),
        (dict(resize=0), ValueError, "resize must be >= 1 and <= 16384, got 0"),
        (dict(crop=0), ValueError, "crop must be >= 1 and <= 8192, got 0"),
        (dict(workers=0), ValueError, "workers must be >= 1 and <= 1024, got 0"),
        (dict(batch_size=256 // 512), ValueError, "batch_size must be >= 1"),  # global // world
        (
            dict(decode="cpu", decode_threads=1025),
            ValueError,
            "decode_threads must be >= 1 and <= 1024, got 1025",
        ),
        (dict(decode="cpu", decode_threads=2**31), ValueError, "decode_threads must be"),
        (dict(batch_size=2**31), ValueError, "batch_size must be >= 1 and <= 65536"),
        (dict(image=False), ValueError, "image=False asks for the fields alone"),
        (dict(image=False, fields=("txt",), decode="cpu"), ValueError, "leave decode unset"),
        (dict(rank=2, world_size=2, job_id="j"), ValueError, "rank=2 is not below world_size=2"),
        (dict(job_id="x" * 257), ValueError, "job_id"),
        (dict(batch_size=8.0), TypeError, "batch_size=8.0"),
        (dict(prefetch=None, stream_timeout=math.nan), ValueError, "stream_timeout must be"),
        (dict(bogus=1), TypeError, "unexpected keyword argument 'bogus'"),
    ]
    for keywords, error, says in cases:
        with pytest.raises(error, match=re.escape(says)):
            shardcast.Loader(address, **keywords)
    assert_never_dialled(listener)


def test_values_at_the_edges_are_used_as_given_by_the_server(server):
    # Accepted values travel as given: the server's registration says what it serves.
    with shardcast.Loader(
        server.address,
        job_id="edges",
        rank=0,
        world_size=1,
        batch_size=1,
        workers=1,
        seed=2**64 - 1,
        shuffle_buffer=0,
        block_size=0,
        resize=1,
        crop=1,
        transform="center",
        prefetch=1,
    ) as loader:
        reg = loader.registration
        assert (reg.batch_size, reg.workers, reg.seed, reg.shuffle_buffer) == (1, 1, 2**64 - 1, 0)
        assert (reg.transform.resize, reg.transform.crop) == (1, 1)
        assert next(iter(loader)).images.shape == (1, 3, 1, 1)
    # None is the server's default, as documented (32 here: its built-in default).
    with shardcast.Loader(
        server.address, job_id="defaults", rank=0, world_size=1, batch_size=None, prefetch=None
    ) as loader:
        assert loader.registration.batch_size == 32


def test_python_md_table_is_the_one_the_options_table_renders():
    text = (Path(__file__).resolve().parents[2] / "docs" / "python.md").read_text()
    begin, end = options.DOC_TABLE_BEGIN, options.DOC_TABLE_END
    assert begin in text and end in text, "docs/python.md lost its generated-table markers"
    table = text.split(begin, 1)[1].split(end, 1)[0].strip("\n") + "\n"  # as written there
    assert table == options.markdown_table(), (
        "docs/python.md's table of Loader arguments differs from shardcast/options.py's "
        "table: run /usr/bin/python3 python/generate_options_doc.py"
    )


def test_help_lists_every_argument_with_what_it_accepts():
    text = shardcast.Loader.__doc__
    for option in options.OPTIONS:
        assert f"    {option.name}: {option.accepts()}" in text, option.name


def test_the_limits_are_the_native_constants():
    limits = _native.option_limits()
    for name, (low, high) in INT_RANGES.items():
        if name in limits:
            assert tuple(limits[name]) == (low, high), name
