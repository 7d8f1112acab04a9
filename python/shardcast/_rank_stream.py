"""One rank's view of a shardcast job over the wire: the protocol of the C++ RankStream
(client/protocol/rank_stream.cc), which every client follows.

Registers (retrying while the server is unreachable), streams an epoch's batches from
any start batch on a prefetch thread, checks each batch against the registration, and
after a broken stream re-registers and resumes at the first batch not yet received,
refusing to resume when the job changed (job fingerprint, world size, batch size or n).
A stream that delivers nothing for `stream_timeout` seconds is cut by a watchdog and
handled as a broken one.
"""

import collections
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Deque, Generic, Optional, TypeVar

import grpc

from shardcast._proto import REGISTER_METHOD, STREAM_BATCHES_METHOD, pb
from shardcast._receive_memory import keep_receive_buffers_warm
from shardcast._wire import check_batch, split_batch
from shardcast.errors import (
    BatchCheckError,
    JobChangedError,
    JobRefusedError,
    ServerUnavailableError,
    ShardcastError,
    StreamTimeoutError,
)

# Statuses a reconnect cannot fix: the request itself is wrong, the job conflicts with
# what other ranks registered, or this is not a shardcast server. Everything else
# (UNAVAILABLE above all: server killed, restarting, network) is retried.
_PERMANENT = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNAUTHENTICATED,
    }
)

# The environment variable a token is taken from when none is given (as the C++ clients).
TOKEN_ENV = "SHARDCAST_TOKEN"
# How long one connection attempt (TCP, TLS, the server's HTTP/2 SETTINGS) may take.
CONNECT_TIMEOUT_MS = 20_000


def is_handshake_failure(code: grpc.StatusCode, message: str) -> bool:
    """A failed TLS handshake or a plaintext/TLS mismatch (gRPC reports both as
    UNAVAILABLE): a retry cannot fix a wrong CA or a missing client certificate, so it is
    not retried like an outage (client/protocol/channel.cc IsHandshakeFailure)."""
    if code != grpc.StatusCode.UNAVAILABLE:
        return False
    lower = message.lower()
    # Not "handshaker shutdown": gRPC's TCP handshaker says that when the peer closed the
    # connection (closed_during_connect).
    markers = (
        "ssl handshake",
        "handshake failed",
        "handshake read failed",
        "handshake write failed",
        "ssl_error",
        "certificate",
        "http1.x",
    )
    return any(m in lower for m in markers)


def closed_during_connect(code: grpc.StatusCode, message: str) -> bool:
    """The peer accepted the connection and closed it before HTTP/2 was set up: a TLS
    server this client speaks plaintext to, or one requiring a client certificate, but
    also a proxy whose server is still starting; given up on after it persisted for
    StreamOptions.handshake_refusal (channel.h IsClosedDuringConnect)."""
    lower = message.lower()
    return (
        code == grpc.StatusCode.UNAVAILABLE
        and "failed to connect" in lower
        and any(m in lower for m in ("socket closed", "connection reset", "handshaker shutdown"))
    )


def _hint(code: grpc.StatusCode, message: str) -> str:
    if code == grpc.StatusCode.UNAUTHENTICATED:
        if TOKEN_ENV in message:  # shardcast-server's refusals already say what to pass
            return ""
        return (
            " (hint: the server refused this client's bearer token or got none: pass "
            f"token=... or set {TOKEN_ENV} to a token of the server's --auth-token-file)"
        )
    if is_handshake_failure(code, message):
        return (
            " (hint: the TLS handshake failed: check that client and server both use TLS or "
            "both plaintext, that tls_ca signed the server's certificate and the certificate "
            "names the host dialed, and whether the server requires a client certificate)"
        )
    if closed_during_connect(code, message):
        return (
            " (hint: the server closed the connection before answering: if it serves TLS, pass "
            "tls_ca; if it requires client certificates, credentials with one; a proxy in front "
            "of a server that is not up yet does the same)"
        )
    return ""


# A restarted server has forgotten the job: a stream opened before re-registering
# fails with one of these, and is answered by re-registering at once.
_UNKNOWN_JOB = frozenset({grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION})

T = TypeVar("T")


@dataclass(frozen=True)
class StreamOptions:
    """What RankStream needs: where, which job, how much to buffer, how long to retry."""

    server: str  # gRPC target, "host:port"
    job: pb.RegisterRequest  # job_id, rank, world_size, batch size, split, ...
    credentials: Optional[grpc.ChannelCredentials] = None  # None = plaintext
    # Sent as "authorization: Bearer <token>" metadata on every call (works on plaintext
    # channels too, where gRPC refuses call credentials). None = none.
    token: Optional[str] = None
    prefetch: int = 4  # batches buffered ahead of the consumer (>= 1)
    # Exponential backoff initial..max seconds, for at most `reconnect_deadline` seconds
    # of failures in a row before giving up on a dead server.
    reconnect_initial: float = 0.1
    reconnect_max: float = 2.0
    reconnect_deadline: float = 120.0
    # A peer that keeps closing the connection during the handshake for this long is
    # reported (ServerUnavailableError naming the likely cause) instead of retried on.
    handshake_refusal: float = 10.0
    # Progress deadline, 0 = off: a stream that delivers no batch for this long (counted
    # from the request, or from when the next message was asked for; time the consumer
    # leaves the prefetch queue full never counts) is cancelled and handled as broken;
    # if reconnecting brings no batch within another such period, StreamTimeoutError.
    stream_timeout: float = 120.0


def make_channel(options: StreamOptions) -> grpc.Channel:
    """The one place the client opens channels (the settings of client/protocol/channel.cc)."""
    initial_ms = max(1, int(options.reconnect_initial * 1000))
    max_ms = max(initial_ms, int(options.reconnect_max * 1000))
    channel_options = [
        # Batches are tens of MB; gRPC's 4 MB default would refuse them.
        ("grpc.max_receive_message_length", -1),
        # gRPC's own backoff (1 s growing to 120 s) would keep the channel failing long
        # after a restarted server is back.
        ("grpc.initial_reconnect_backoff_ms", initial_ms),
        # gRPC's time for one connection attempt, despite the name (client/protocol/
        # channel.h, connect_timeout): the backoff's 0.1 s cut slow handshakes short.
        ("grpc.min_reconnect_backoff_ms", CONNECT_TIMEOUT_MS),
        ("grpc.max_reconnect_backoff_ms", max_ms),
        # A server host that vanishes without closing the connection would leave a read
        # blocked forever; 5 min is the least interval a gRPC server accepts by default.
        ("grpc.keepalive_time_ms", 5 * 60 * 1000),
        ("grpc.keepalive_timeout_ms", 20 * 1000),
    ]
    if options.credentials is None:
        return grpc.insecure_channel(options.server, options=channel_options)
    return grpc.secure_channel(options.server, options.credentials, options=channel_options)


class _Failure(Exception):
    """An RPC failure inside the prefetch loop, for the retry logic: the status, and how
    many batches the broken stream delivered before it."""

    def __init__(
        self, code: grpc.StatusCode, message: str, received: int = 0, stalled: bool = False
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.received = received
        self.stalled = stalled  # the watchdog cut the stream (stream timeout)


class _Stopped(Exception):
    """The consumer stopped the prefetch thread (new epoch, close)."""


def batches_from_offset(
    num_samples: int, batch_size: int, world_size: int, remainder: int, sample_offset: int
) -> int:
    """Batches per rank of an epoch dealt from global position `sample_offset` (an elastic
    resume, split sample): the rule of common/epoch_plan.cc's BatchesFromOffset, which the
    server applies to the same request. Raises ValueError for a position outside the epoch."""
    if not 0 <= sample_offset <= num_samples:
        raise ValueError(
            f"sample offset {sample_offset} is outside the epoch's [0, {num_samples}] positions"
        )
    per_step = batch_size * world_size
    left = num_samples - sample_offset
    if remainder == pb.REMAINDER_PAD:
        return (left + per_step - 1) // per_step
    return left // per_step


def _describe(code: grpc.StatusCode, message: str) -> str:
    return f"{code.name}: {message}" if message else code.name


class RankStream(Generic[T]):
    """Registers on construction; then start_epoch() / next() per epoch.

    `convert` runs on the prefetch thread on every checked batch, as
    convert(meta, pixels) with `meta` the Batch without its images and `pixels` a
    memoryview of them; next() returns what it made. Not thread-safe: one consumer.
    """

    def __init__(self, options: StreamOptions, convert: Callable[[pb.Batch, memoryview], T]):
        if options.prefetch < 1:
            raise ValueError(f"prefetch must be >= 1, got {options.prefetch}")
        if options.reconnect_deadline < 0:
            raise ValueError(f"reconnect_deadline must be >= 0, got {options.reconnect_deadline}")
        if not options.stream_timeout >= 0:
            raise ValueError(f"stream_timeout must be >= 0, got {options.stream_timeout}")
        self._options = options
        self._convert = convert
        self._job = options.job
        self._metadata = (("authorization", f"Bearer {options.token}"),) if options.token else None
        self._channel = make_channel(options)
        # Batches arrive in blocks malloc hands out; keep them warm from batch to batch.
        keep_receive_buffers_warm()
        self._register = self._channel.unary_unary(
            REGISTER_METHOD,
            request_serializer=pb.RegisterRequest.SerializeToString,
            response_deserializer=pb.RegisterResponse.FromString,
        )
        # No deserializer: each message arrives as the received bytes (see _wire).
        self._stream = self._channel.unary_stream(
            STREAM_BATCHES_METHOD, request_serializer=pb.StreamBatchesRequest.SerializeToString
        )
        self._lock = threading.Condition()
        # Guarded by _lock: checked batches not yet handed out, then at most one error.
        self._queue: Deque[Any] = collections.deque()
        self._stop = False  # tells the prefetch thread to stop
        self._producer_done = True  # the prefetch thread has exited
        self._active_call: Optional[Any] = None  # the RPC in flight, for cancel()
        self._sticky_error: Optional[BaseException] = None  # raised again until start_epoch
        self._reconnects = 0
        self._epoch = 0
        self._epoch_batches = 0  # batches of _epoch: n, or fewer from a sample offset
        self._handed_out = 0  # batches of _epoch handed out (counting skipped ones)
        self._started = False
        self._thread: Optional[threading.Thread] = None
        self._watchdog: Optional[threading.Thread] = None
        # Guarded by _lock: when the message the prefetch thread waits for is overdue
        # (time.monotonic(); None: it is not waiting on the server), and whether the
        # watchdog cancelled the stream for it.
        self._read_deadline: Optional[float] = None
        self._stalled = False
        try:
            self.registration = self._initial_register()
        except BaseException:
            self._channel.close()
            raise
        shape = list(self.registration.image_shape)
        self.image_shape = shape
        self._image_bytes = self.registration.batch_size * shape[0] * shape[1] * shape[2]

    # ---- consumer side -------------------------------------------------------------

    @property
    def batches_per_epoch(self) -> int:
        return self.registration.batches_per_epoch

    @property
    def reconnects(self) -> int:
        """Reconnects made so far (tests, metrics)."""
        with self._lock:
            return self._reconnects

    @property
    def batches_in_epoch(self) -> int:
        """Batches of the epoch last started: n, or fewer from a sample offset."""
        return self._epoch_batches

    def start_epoch(self, epoch: int, start_batch: int = 0, sample_offset: int = 0) -> None:
        """Streams `epoch` from `start_batch`, cancelling any stream in progress.
        `sample_offset` > 0: an elastic resume, the epoch dealt from that global position
        (split sample only; batches_in_epoch() batches, start_batch counts from there)."""
        n = self.batches_per_epoch
        if sample_offset != 0:
            reg = self.registration
            if reg.split != pb.SPLIT_SAMPLE:
                raise ValueError(
                    f"job '{self._job.job_id}' epoch {epoch}: an elastic resume from sample "
                    f"offset {sample_offset} needs split sample (with split shard the ranks' "
                    "shards and the repeat/slice depend on the world size); resume with the "
                    "same world size and batch size, or start the next epoch"
                )
            n = batches_from_offset(
                reg.num_samples, reg.batch_size, reg.world_size, reg.remainder, sample_offset
            )
        if epoch < 0 or not 0 <= start_batch <= n:
            raise ValueError(
                f"start_epoch(epoch={epoch}, start_batch={start_batch}): need epoch >= 0 and "
                f"0 <= start_batch <= {n} (batches of this epoch of job '{self._job.job_id}')"
            )
        self._stop_prefetch()
        with self._lock:
            self._queue.clear()
            self._stop = False
            self._started = True
            self._epoch = epoch
            self._epoch_batches = n
            self._handed_out = start_batch
            self._producer_done = start_batch == n
        if start_batch < n:
            self._thread = threading.Thread(
                target=self._prefetch_loop,
                args=(epoch, start_batch, n, sample_offset),
                name=f"shardcast-prefetch-rank{self._job.rank}",
                daemon=True,
            )
            self._thread.start()
            if self._options.stream_timeout > 0:
                self._watchdog = threading.Thread(
                    target=self._watch_loop,
                    name=f"shardcast-watchdog-rank{self._job.rank}",
                    daemon=True,
                )
                self._watchdog.start()

    def next(self) -> Optional[T]:
        """The next batch of the epoch, or None once all n were handed out.

        Raises the ShardcastError that ended the stream (again on every later call until
        the next start_epoch).
        """
        with self._lock:
            if not self._started:
                raise RuntimeError("next() before start_epoch()")
            if self._handed_out >= self._epoch_batches:
                return None
            if self._sticky_error is not None:
                raise self._sticky_error
            self._lock.wait_for(lambda: self._queue or self._producer_done)
            if not self._queue:
                raise RuntimeError(
                    f"epoch {self._epoch} of job '{self._job.job_id}': prefetch ended at batch "
                    f"{self._handed_out} of {self._epoch_batches} without an error"
                )
            item = self._queue.popleft()
            self._lock.notify_all()
            if isinstance(item, BaseException):
                self._sticky_error = item
                raise item
            self._handed_out += 1
            return item

    def close(self) -> None:
        """Stops the prefetch thread, cancels the open stream, closes the channel."""
        self._stop_prefetch()
        self._channel.close()

    # ---- registration ------------------------------------------------------------

    def _where(self) -> str:
        return f"rank {self._job.rank} of job '{self._job.job_id}' at {self._options.server}"

    def _register_once(self, give_up: float) -> pb.RegisterResponse:
        """One Register call, failing fast when the channel cannot connect (the callers
        retry with backoff until `give_up`, time.monotonic()), so a failed TLS handshake
        shows as itself rather than as a deadline; cancellable by _stop_prefetch. Raises
        _Failure or _Stopped."""
        future = self._register.future(
            self._job,
            timeout=max(0.0, give_up - time.monotonic()),
            wait_for_ready=False,
            metadata=self._metadata,
        )
        with self._lock:
            if self._stop:
                future.cancel()
                raise _Stopped()
            self._active_call = future
        try:
            return future.result()
        except grpc.FutureCancelledError as e:
            raise _Stopped() from e
        except grpc.RpcError as e:
            raise _Failure(e.code(), e.details() or "") from e
        finally:
            with self._lock:
                self._active_call = None

    def _initial_register(self) -> pb.RegisterResponse:
        opts = self._options
        give_up = time.monotonic() + opts.reconnect_deadline
        backoff = opts.reconnect_initial
        attempts = 0
        closed_since: Optional[float] = None  # start of a run of closed-during-connect
        last: Optional[_Failure] = None  # the most telling failure so far
        while True:
            attempts += 1
            try:
                response = self._register_once(give_up)
            except _Failure as f:
                if not closed_during_connect(f.code, f.message):
                    closed_since = None
                elif closed_since is None:
                    closed_since = time.monotonic()
                elif time.monotonic() - closed_since >= opts.handshake_refusal:
                    raise ServerUnavailableError(
                        f"register {self._where()}: the server accepted every connection for "
                        f"{opts.handshake_refusal:.1f} s but closed it during the handshake "
                        f"({f.message}){_hint(f.code, f.message)}",
                        f.code,
                    ) from None
                if is_handshake_failure(f.code, f.message):
                    raise ServerUnavailableError(
                        f"register {self._where()}: {_describe(f.code, f.message)}"
                        f"{_hint(f.code, f.message)}",
                        f.code,
                    ) from None
                if f.code in _PERMANENT or f.code == grpc.StatusCode.CANCELLED:
                    raise JobRefusedError(
                        f"register {self._where()}: {_describe(f.code, f.message)}"
                        f"{_hint(f.code, f.message)}",
                        f.code,
                    ) from None
                # The attempt that starts at the deadline ends at once with
                # DEADLINE_EXCEEDED; the error of the attempt before says more.
                if f.code != grpc.StatusCode.DEADLINE_EXCEEDED or last is None:
                    last = f
                now = time.monotonic()
                if now >= give_up:
                    raise ServerUnavailableError(
                        f"register {self._where()}: server unreachable for "
                        f"{opts.reconnect_deadline:.1f} s ({attempts} attempts); last error: "
                        f"{_describe(last.code, last.message)}",
                        last.code,
                    ) from None
                # Attempts fail fast, so the loop itself waits out the whole deadline.
                time.sleep(min(backoff, give_up - now))
                backoff = min(backoff * 2, opts.reconnect_max)
                continue
            if response.batches_per_epoch <= 0 or len(response.image_shape) != 3:
                raise ShardcastError(
                    f"register {self._where()}: server accepted the job but replied "
                    f"batches_per_epoch={response.batches_per_epoch} and an image_shape of "
                    f"{len(response.image_shape)} dims"
                )
            return response

    def _same_job(self, now: pb.RegisterResponse, epoch: int, next_batch: int) -> None:
        """Raises JobChangedError unless the re-registration serves the job this rank
        started with: same data and settings, world size, batch size and n."""
        was = self.registration
        if now.job_fingerprint != was.job_fingerprint:
            changed = (
                f"job fingerprint {now.job_fingerprint} (was {was.job_fingerprint}: the data "
                "or the job config changed)"
            )
        elif now.world_size != was.world_size or now.batch_size != was.batch_size:
            changed = (
                f"world size {now.world_size} and batch size {now.batch_size} (were "
                f"{was.world_size} and {was.batch_size})"
            )
        elif now.batches_per_epoch != was.batches_per_epoch:
            changed = f"{now.batches_per_epoch} batches per epoch (was {was.batches_per_epoch})"
        else:
            return
        raise JobChangedError(
            f"job '{self._job.job_id}' rank {self._job.rank}: after reconnecting, server "
            f"{self._options.server} has {changed}; cannot resume epoch {epoch} at batch "
            f"{next_batch}",
            grpc.StatusCode.FAILED_PRECONDITION,
        )

    # ---- the prefetch thread -----------------------------------------------------

    def _deliver(self, item: Any) -> None:
        """Queues a batch (waiting for space) or an error; raises _Stopped on stop."""
        with self._lock:
            if not isinstance(item, BaseException):
                self._lock.wait_for(
                    lambda: self._stop or len(self._queue) < self._options.prefetch
                )
            if self._stop:
                raise _Stopped()
            self._queue.append(item)
            self._lock.notify_all()

    def _sleep_unless_stopped(self, seconds: float) -> None:
        with self._lock:
            if self._lock.wait_for(lambda: self._stop, timeout=seconds):
                raise _Stopped()

    def _watch(self, deadline: Optional[float]) -> None:
        """Arms the watchdog for the message about to be awaited (None: disarmed)."""
        with self._lock:
            self._read_deadline = deadline
            self._lock.notify_all()

    def _watch_loop(self) -> None:
        """The watchdog thread (stream_timeout > 0): cancels the stream in flight once
        the message the prefetch thread waits for is overdue. A call timeout would also
        cut a healthy long epoch; a blocked iterator has no timeout of its own."""
        with self._lock:
            while not self._stop and not self._producer_done:
                deadline = self._read_deadline
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    self._stalled = True
                    self._read_deadline = None
                    if self._active_call is not None:
                        self._active_call.cancel()
                    continue
                self._lock.wait(None if deadline is None else deadline - now)

    def _receive(
        self, epoch: int, start: int, n: int, offset: int, not_after: Optional[float] = None
    ) -> int:
        """Streams `epoch` (n batches, dealt from sample `offset`) from `start` into the
        queue; returns the batches received. Raises _Failure (with the batches received
        before the break) when it breaks. The first message is overdue after the stream
        timeout, or at `not_after`."""
        timeout = self._options.stream_timeout

        def overdue(cap: Optional[float] = None) -> Optional[float]:
            if timeout <= 0:
                return None
            deadline = time.monotonic() + timeout
            return deadline if cap is None else min(deadline, cap)

        request = pb.StreamBatchesRequest(
            job_id=self._job.job_id,
            rank=self._job.rank,
            epoch=epoch,
            start_batch=start,
            job_fingerprint=self.registration.job_fingerprint,
            sample_offset=offset,
        )
        call = self._stream(request, metadata=self._metadata)
        with self._lock:
            if self._stop:
                call.cancel()
                raise _Stopped()
            self._active_call = call
        index = start
        self._watch(overdue(not_after))  # the first batch counts from the request
        try:
            for raw in call:
                self._watch(None)  # waiting for queue space is the consumer's time
                where = (
                    f"job '{self._job.job_id}' rank {self._job.rank} epoch {epoch} batch {index}"
                )
                meta, pixels = split_batch(raw, self._image_bytes)
                if index >= n:
                    raise BatchCheckError(
                        f"{where}: server sent batch {meta.index} past the last one ({n - 1})"
                    )
                check_batch(meta, len(pixels), epoch, index, self.image_shape, where)
                self._deliver(self._convert(meta, pixels))
                index += 1
                self._watch(overdue())
        except grpc.RpcError as e:
            if self._stop:
                raise _Stopped() from None
            with self._lock:
                stalled = self._stalled
            if stalled:
                raise _Failure(
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    f"no batch for {timeout:g} s (stream timeout); stream cancelled after "
                    f"batch {index}",
                    index - start,
                    stalled=True,
                ) from None
            raise _Failure(e.code(), e.details() or "", index - start) from None
        finally:
            call.cancel()  # a no-op once the stream ended; stops it after an error
            with self._lock:
                self._active_call = None
                self._read_deadline = None
                self._stalled = False
        if index < n:
            raise _Failure(
                grpc.StatusCode.UNAVAILABLE,
                f"stream ended after batch {index} of {n}",
                index - start,
            )
        return index - start

    def _prefetch_loop(self, epoch: int, start: int, n: int, offset: int) -> None:
        try:
            self._prefetch(epoch, start, n, offset)
        except _Stopped:
            pass
        except BaseException as e:  # delivered to the consumer instead of dying unseen
            with self._lock:
                self._queue.append(e)
        finally:
            with self._lock:
                self._producer_done = True
                self._lock.notify_all()

    def _prefetch(self, epoch: int, start: int, n: int, offset: int) -> None:
        opts = self._options
        next_batch = start  # first batch not yet received
        backoff = opts.reconnect_initial
        failing_since: Optional[float] = None  # start of the current run of failures
        # When the watchdog first cut a stream since the last batch: reconnecting then
        # gets one more stream timeout to bring a batch.
        stalled_since: Optional[float] = None
        need_register = False  # the server may have forgotten the job
        registered_here = False  # a Register succeeded since the last batch
        attempts = 0
        while next_batch < n:
            try:
                give_up = None
                if need_register:
                    assert failing_since is not None
                    give_up = failing_since + opts.reconnect_deadline
                    if stalled_since is not None:
                        give_up = min(give_up, stalled_since + opts.stream_timeout)
                    response = self._register_once(give_up)
                    registered_here = True
                    self._same_job(response, epoch, next_batch)
                next_batch += self._receive(
                    epoch, next_batch, n, offset, give_up if stalled_since is not None else None
                )
                return
            except _Failure as f:
                failure = f
            next_batch += failure.received
            if failure.received > 0:
                failing_since = None
                stalled_since = None
                backoff = opts.reconnect_initial
                registered_here = False
                need_register = False
                attempts = 0
            code = failure.code
            unknown_job = code in _UNKNOWN_JOB and not registered_here and not need_register
            where = f"job '{self._job.job_id}' rank {self._job.rank} epoch {epoch}"
            if is_handshake_failure(code, failure.message):
                raise ServerUnavailableError(
                    f"{where} batch {next_batch}: {_describe(code, failure.message)}"
                    f"{_hint(code, failure.message)}",
                    code,
                )
            if code in _PERMANENT and not unknown_job:
                raise JobRefusedError(
                    f"{where} batch {next_batch}: {_describe(code, failure.message)}"
                    f"{_hint(code, failure.message)}",
                    code,
                )
            now = time.monotonic()
            if failing_since is None:
                failing_since = now
            # The first stall since the last batch starts the stall clock; later stalls
            # and other failures while reconnecting do not restart it.
            if failure.stalled and stalled_since is None:
                stalled_since = now
            attempts += 1
            give_up = failing_since + opts.reconnect_deadline
            if stalled_since is not None:
                give_up = min(give_up, stalled_since + opts.stream_timeout)
                if now >= give_up:
                    raise StreamTimeoutError(
                        f"{where}: no batch from server {opts.server} for "
                        f"{opts.stream_timeout:g} s (the stream timeout) at batch {next_batch} "
                        f"of {n}, and reconnecting brought none within another "
                        f"{opts.stream_timeout:g} s ({attempts} attempts); last error: "
                        f"{_describe(code, failure.message)}",
                        grpc.StatusCode.DEADLINE_EXCEEDED,
                    )
            if now >= give_up:
                raise ServerUnavailableError(
                    f"{where}: stream broken at batch {next_batch} of {n} and server "
                    f"{opts.server} not back within {opts.reconnect_deadline:.1f} s "
                    f"({attempts} attempts); last error: {_describe(code, failure.message)}",
                    code,
                )
            if not unknown_job:
                self._sleep_unless_stopped(min(backoff, give_up - now))
                backoff = min(backoff * 2, opts.reconnect_max)
            need_register = True
            with self._lock:
                self._reconnects += 1

    def _stop_prefetch(self) -> None:
        with self._lock:
            self._stop = True
            if self._active_call is not None:
                self._active_call.cancel()
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._watchdog is not None:
            self._watchdog.join()
            self._watchdog = None
        with self._lock:
            self._active_call = None
            self._sticky_error = None
