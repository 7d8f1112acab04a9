"""The exceptions the shardcast client raises, one class per thing a caller can act on.

Every error is a ShardcastError; its message names the server, job and rank, and for a
server's refusal carries the server's own text (which names the offending field).
"""

from typing import Any, Dict, Optional

import grpc


class ShardcastError(Exception):
    """Base class. `code` is the gRPC status behind the error, when there was one."""

    def __init__(self, message: str, code: Optional[grpc.StatusCode] = None) -> None:
        super().__init__(message)
        self.code = code


class ServerUnavailableError(ShardcastError):
    """The server stayed unreachable past the reconnect deadline (wrong address, server
    down or still indexing): retrying later may work. Also raised at once, without
    retrying, for a failed TLS handshake (wrong CA, missing client certificate, TLS vs
    plaintext): the message then says so and which setting to check."""


class StreamTimeoutError(ServerUnavailableError):
    """The server kept the connection open but sent no batch for `stream_timeout`
    seconds, and reconnecting brought none within another `stream_timeout` either (a
    stopped, deadlocked or swapping server). A ServerUnavailableError, so code that
    handles an unreachable server handles a stalled one too."""


class JobRefusedError(ShardcastError):
    """The server refused the job or the stream with a status a retry cannot fix
    (INVALID_ARGUMENT, FAILED_PRECONDITION, NOT_FOUND, UNAUTHENTICATED for a missing or
    wrong token, ...): the request must change."""


class JobChangedError(ShardcastError):
    """The job is not the one this rank started with (after a reconnect, or in a state
    given to load_state_dict): its data, config, world size, batch size or batch count
    differ, so resuming would silently hand out other samples or pixels."""


class BatchCheckError(ShardcastError):
    """The server sent a batch that fails the checks (out of sequence, wrong shape or
    byte count, labels or samples of another count, a malformed message), or a
    registration no batch can be received with (a batch size or image shape out of
    bounds): a bug, a hostile server or one speaking another version of the protocol.
    Nothing the server says sizes memory before it passed these checks."""


class LoaderClosedError(ShardcastError):
    """The Loader was closed: by close() on another thread while next() waited (the
    wait ends at once), or before this call."""


class ForkedProcessError(ShardcastError):
    """The Loader was created in another process and this one was forked from it (a
    DataLoader worker, multiprocessing's fork): its stream's thread and connection stay
    in the parent, so every call in the child is refused. Create the Loader in the child,
    or use it in the parent only. close() in the child only lets go of it."""


# The class of each kind of error the native client reports (_native.ErrorKind, bound
# from the one C++ enum), built on first use: only the native client calls from_native.
_native_kinds: Optional[Dict[Any, type]] = None


def native_kinds() -> Dict[Any, type]:
    """_native.ErrorKind -> the exception class of that kind (ValueError for VALUE)."""
    global _native_kinds
    if _native_kinds is None:
        from . import _native

        kind = _native.ErrorKind
        _native_kinds = {
            kind.VALUE: ValueError,
            kind.UNAVAILABLE: ServerUnavailableError,
            kind.TIMEOUT: StreamTimeoutError,
            kind.REFUSED: JobRefusedError,
            kind.CHANGED: JobChangedError,
            kind.CHECK: BatchCheckError,
            kind.CLOSED: LoaderClosedError,
            kind.FORK: ForkedProcessError,
            kind.ERROR: ShardcastError,
        }
    return _native_kinds


_CODES = {code.value[0]: code for code in grpc.StatusCode}


def from_native(kind: Any, message: str, code: int) -> Exception:
    """The exception for an error of the native client: `kind` (_native.ErrorKind) says
    the class, `code` is the status code number (absl's and gRPC's numbering are the
    same; 0: no status behind it)."""
    cls = native_kinds()[kind]
    if cls is ValueError:
        return ValueError(message)
    status = _CODES.get(code, grpc.StatusCode.UNKNOWN) if code != 0 else None
    return cls(message, status)
