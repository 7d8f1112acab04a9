"""A shardcast server that answers as a hostile or broken one would, for the client's
tests: grpcio on a free loopback port, serving the Shardcast service's Register and
StreamBatches with whatever a test hands it. Batches are sent as raw bytes, so a test
can send what the real server never would: sizes of zero, shapes that disagree with
the bytes, fields that announce more bytes than the message holds; or nothing at all
(a stall that holds the call open until the client gives up or the server stops).
"""

import threading
from concurrent import futures
from typing import Callable, Iterable, Iterator, Optional, Sequence

import grpc

from shardcast._proto import pb

SERVICE = pb.DESCRIPTOR.services_by_name["Shardcast"].full_name

RegisterHandler = Callable[[pb.RegisterRequest, grpc.ServicerContext], pb.RegisterResponse]
StreamHandler = Callable[[pb.StreamBatchesRequest, grpc.ServicerContext], Iterable[bytes]]


def registration(
    request: pb.RegisterRequest,
    batches_per_epoch: int = 4,
    batch_size: int = 2,
    image_shape: Sequence[int] = (3, 4, 4),
) -> pb.RegisterResponse:
    """A registration as the real server gives it, for a tiny dataset."""
    return pb.RegisterResponse(
        batches_per_epoch=batches_per_epoch,
        num_classes=2,
        class_names=["a", "b"],
        num_samples=batches_per_epoch * batch_size * max(request.world_size, 1),
        image_shape=list(image_shape),
        job_fingerprint="hostile-fingerprint",
        batch_size=batch_size,
        split=pb.SPLIT_SAMPLE,
        remainder=pb.REMAINDER_DROP,
        world_size=max(request.world_size, 1),
        dataset="default",
        server_version="hostile",
    )


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def images_field(data: bytes, claimed: Optional[int] = None) -> bytes:
    """Batch.images (field 15, length-delimited) holding `data`, its length announced as
    `claimed` (default: the truth)."""
    length = len(data) if claimed is None else claimed
    return _varint(15 << 3 | 2) + _varint(length) + data


def batch(
    epoch: int,
    index: int,
    shape: Sequence[int],
    images: Optional[bytes] = None,
    labels: Optional[int] = None,
    samples: Optional[int] = None,
) -> bytes:
    """A serialized Batch: `shape` [B, 3, C, C], B labels and samples and B*3*C*C image
    bytes unless told otherwise."""
    b = shape[0] if shape else 0
    header = pb.Batch(
        epoch=epoch,
        index=index,
        labels=[0] * (b if labels is None else labels),
        samples=[
            pb.SampleInfo(key=f"s{index}-{i}", shard=0, index_in_shard=i, valid=True)
            for i in range(b if samples is None else samples)
        ],
        shape=list(shape),
    )
    if images is None:
        size = 1
        for extent in shape:
            size *= extent
        images = bytes(index % 256 for _ in range(size))
    return header.SerializeToString() + images_field(images)


def stall(context: grpc.ServicerContext, stop: threading.Event) -> None:
    """Holds the call open, answering nothing, until the client cancels or the server
    stops."""
    while context.is_active() and not stop.wait(0.05):
        pass


class HostileServer:
    """Serves `register` and `stream` on 127.0.0.1:port (address) until stop()."""

    def __init__(
        self, register: Optional[RegisterHandler] = None, stream: Optional[StreamHandler] = None
    ) -> None:
        self.stopping = threading.Event()
        self.registers = 0
        self.streams = 0
        self._register = register or (lambda request, context: registration(request))
        self._stream = stream or self._stall_stream
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        handlers = {
            "Register": grpc.unary_unary_rpc_method_handler(
                self._on_register,
                request_deserializer=pb.RegisterRequest.FromString,
                response_serializer=lambda m: m.SerializeToString(),
            ),
            "StreamBatches": grpc.unary_stream_rpc_method_handler(
                self._on_stream,
                request_deserializer=pb.StreamBatchesRequest.FromString,
                response_serializer=lambda raw: raw,
            ),
        }
        self._server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE, handlers),)
        )
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stall_register(
        self, request: pb.RegisterRequest, context: grpc.ServicerContext
    ) -> pb.RegisterResponse:
        """A Register handler that never answers."""
        stall(context, self.stopping)
        context.abort(grpc.StatusCode.UNAVAILABLE, "hostile server stopping")

    def _stall_stream(
        self, request: pb.StreamBatchesRequest, context: grpc.ServicerContext
    ) -> Iterator[bytes]:
        stall(context, self.stopping)
        return iter(())

    def _on_register(self, request, context):
        self.registers += 1
        return self._register(request, context)

    def _on_stream(self, request, context):
        self.streams += 1
        yield from self._stream(request, context)

    def stop(self) -> None:
        self.stopping.set()
        self._server.stop(grace=None).wait()

    def __enter__(self) -> "HostileServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
