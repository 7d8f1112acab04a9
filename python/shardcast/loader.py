"""shardcast.Loader: a rank's batches from shardcast-server as torch tensors, for a
PyTorch (or Lightning) training loop in place of a DataLoader.

Every rank gets exactly len(loader) batches per epoch, whatever the data; the server
decodes and transforms (or, decode="cpu" | "cuda", sends the images as stored with their
crops, and this process decodes them: the native client, or gpu_decode on the device).
The protocol is the C++ client's (shardcast._native, built from client/protocol): it
registers, receives, checks and reconnects on its own thread,
without the GIL, and the loader wraps the received pixels as a uint8 tensor without
copying them (or copies them once into pinned memory, pin_memory=True).
"""

import logging
import os
import secrets
import socket
import warnings
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import torch

from shardcast._proto import enum_name, enum_value, pb
from shardcast.errors import ForkedProcessError, JobChangedError, ShardcastError
from shardcast.gpu_decode import BatchDecoder

try:
    from shardcast import _native
except ImportError as e:
    raise ImportError(
        "shardcast's native client (shardcast._native) is missing: install the package with "
        "pip, which builds it, or build the CMake target shardcast_native and put build/python "
        f"on PYTHONPATH next to python/ (docs/python.md): {e}"
    ) from e

# The environment variable a token is taken from when none is given (as the C++ clients).
TOKEN_ENV = "SHARDCAST_TOKEN"

_log = logging.getLogger("shardcast")

# Loader's decode=: None, the server decodes; else where the trainer does.
DECODE_PLACES = ("cpu", "cuda")


class SampleInfo(NamedTuple):
    """Where a sample of a batch came from."""

    key: str  # the sample's key in its shard ("" for padding)
    shard: int  # position in the server's sorted shard list; -1 for padding
    index_in_shard: int  # sample position in its shard; -1 for padding
    valid: bool  # False for padding (remainder "pad"; its label is -1)
    substituted: bool  # the image could not be decoded; a mid-gray substitute was sent
    # The members the job asked for (Loader's `fields`), by the field's name ("txt",
    # "jpg;png"): the member's bytes as stored in the tar, None where an optional one is
    # missing and for padding. Empty for a job without fields.
    fields: Dict[str, Optional[bytes]]


class Batch(NamedTuple):
    """One batch: unpack it as `images, labels, info = batch`."""

    # [B, 3, C, C] uint8 NCHW on the CPU, a view of the received bytes; None for a job
    # without images (image=False)
    images: Optional[torch.Tensor]
    labels: torch.Tensor  # [B] int64 (-1 for padding and for a dataset without labels)
    info: List[SampleInfo]


def _to_batch(native: "_native.Batch", images: Optional[torch.Tensor] = None) -> Batch:
    """Wraps a received batch: its pixels (or `images`, which next_into filled; None for
    a job without images) and its labels without a copy."""
    pixels = native.pixels
    if images is None and pixels is not None:
        images = torch.frombuffer(pixels, dtype=torch.uint8).view(native.shape)
    labels = torch.frombuffer(native.labels, dtype=torch.int64)
    info = [SampleInfo._make(s) for s in native.samples]
    return Batch(images, labels, info)


def _encoded_images(native: "_native.Batch") -> List[Optional[Any]]:
    """decode "none": each sample's _native.EncodedImage, in the samples' order (None for
    padding)."""
    return list(native.encoded)


def _check_decode(decode: Optional[str], decode_threads: Optional[int]) -> None:
    """ValueError for a decode= or decode_threads= that cannot be; decode="cuda" without
    CUDA is one (the batches would have nowhere to be decoded)."""
    if decode is not None and decode not in DECODE_PLACES:
        raise ValueError(f"decode must be None (the server decodes), 'cpu' or 'cuda', "
                         f"got {decode!r}")
    if decode_threads is not None and (decode is None or decode_threads < 1):
        raise ValueError(f"decode_threads={decode_threads!r}: give it with decode='cpu' or "
                         "'cuda', and at least 1")
    if decode == "cuda" and not torch.cuda.is_available():
        raise ValueError("decode='cuda' but CUDA is not available to torch: use "
                         "decode='cpu' (the same bytes as the server's) or decode=None")


def _default_rank_and_world() -> Tuple[int, int]:
    """torch.distributed's when a process group exists, else torchrun's RANK and
    WORLD_SIZE, else a single process."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def _resolve_job_id(job_id: Optional[str], world_size: int) -> str:
    """The given id, else a new job per run: rank 0 names it and the torch.distributed
    process group hands the name to the other ranks, so a rerun with other settings
    never collides with the job an earlier run left on the server (as shardcast-train
    does through its rendezvous store)."""
    if job_id is not None:
        return job_id
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        name = [_new_job_id() if torch.distributed.get_rank() == 0 else None]
        torch.distributed.broadcast_object_list(name, src=0)
        return str(name[0])
    if world_size == 1:
        return _new_job_id()
    raise ValueError(
        "job_id: with several ranks and no torch.distributed process group the ranks "
        "cannot agree on a generated name; pass the same job_id on every rank"
    )


def _saved_position(epoch: int, done: int, offset: int, world_size: int,
                    batch_size: int) -> "_native.SavedPosition":
    saved = _native.SavedPosition()
    saved.epoch, saved.next_batch, saved.sample_offset = epoch, done, offset
    saved.world_size, saved.batch_size = world_size, batch_size
    return saved


# What shuffle=True asks of split "shard" when shuffle_buffer is not given: webdataset's
# customary .shuffle(1000).
_SHUFFLE_BUFFER_FOR_SHUFFLE = 1000


def _dataloader_keywords(shuffle: Optional[bool], drop_last: Optional[bool],
                         remainder: Optional[str], shuffle_shards: Optional[bool],
                         shuffle_buffer: Optional[int]) -> Tuple[Optional[str], Optional[bool],
                                                                 Optional[int]]:
    """DataLoader's shuffle= and drop_last= as the job config's remainder, shuffle_shards and
    shuffle_buffer; ValueError when both spellings are given and disagree."""
    if drop_last is not None:
        meant = "drop" if drop_last else "pad"
        if remainder is not None and remainder != meant:
            raise ValueError(f"drop_last={drop_last} means remainder={meant!r}, but "
                             f"remainder={remainder!r} was given: pass one of them")
        remainder = meant
    if shuffle is not None:
        buffer_meant = _SHUFFLE_BUFFER_FOR_SHUFFLE if shuffle else 0
        if shuffle_shards is not None and shuffle_shards != shuffle:
            raise ValueError(f"shuffle={shuffle} and shuffle_shards={shuffle_shards} disagree: "
                             "pass one of them")
        if shuffle_buffer is not None and (shuffle_buffer > 0) != shuffle:
            raise ValueError(f"shuffle={shuffle} and shuffle_buffer={shuffle_buffer} disagree: "
                             "pass one of them")
        shuffle_shards = shuffle
        shuffle_buffer = buffer_meant if shuffle_buffer is None else shuffle_buffer
    return remainder, shuffle_shards, shuffle_buffer


def _field_specs(fields: Optional[Sequence[str]]) -> List[str]:
    """The `fields` keyword as the wire's list of specs; TypeError for a str (fields="txt"
    would ask for the fields "t", "x" and "t") or an element that is not one; ValueError for
    a spec the server would refuse (the server's own parser names what is wrong)."""
    if fields is None:
        return []
    if isinstance(fields, (str, bytes)):
        raise TypeError(
            f"fields must be a tuple of field specs, e.g. fields=({fields!r},), not a "
            f"{type(fields).__name__}: a string would be read as its letters")
    specs = list(fields)
    for spec in specs:
        if not isinstance(spec, str):
            raise TypeError(f"fields: each field spec is a str (e.g. 'txt', 'json?', "
                            f"'jpg;png'), got {spec!r}")
    _native.check_field_specs(specs)
    return specs


def _new_job_id() -> str:
    """run-<host>-<pid>-<random>: shardcast-train's rule (client/protocol/run_rules.h)."""
    return _native.new_job_id()


class Loader:
    """Registers this rank's job with the server on construction and iterates its batches.

    `server` is "HOST:PORT", "unix:PATH", or several replicas of the server:
    "HOST:PORT,HOST:PORT" or a name that resolves to several addresses. The rank uses
    a replica on its own host first, the others spread by rank, and moves to the next
    one (resuming at its next batch, same bytes) when its replica dies or drains.

    Job settings left as None take the server's defaults, its flags: for a server started
    without job flags, batch_size 32, split "shard", remainder "drop", workers 1, seed 0,
    no shuffle (shuffle_shards False, shuffle_buffer 0), block_size 0, transform "center"
    with resize 256 and crop 224 (a small crop, e.g. crop=64, makes a CPU trial fast).
    repr(loader) and loader.registration show the effective settings after registration.
    Every rank of a job must ask for the same. Without `job_id` every run is a new job (rank 0 names it
    and shares the name through the torch.distributed process group; a single rank
    needs no group); with several ranks and no process group, pass `job_id`. Names (split, remainder, transform) are the proto's:
    split "shard" | "sample", remainder "drop" | "pad", transform "center" | "random".
    `dataset` names one of the server's datasets (its --dataset NAME=DIR; None: the
    server's "default", or its only one), e.g. a validation set beside the training set.

    Members beside the image: `fields=("txt", "json?")` asks for each sample's members by
    extension, as webdataset names them ("jpg;png": the first of these the sample has;
    a trailing "?": it may be missing). Each batch's `info[i].fields` maps a field's name
    ("txt", "json", "jpg;png") to the member's bytes as stored in the tar (None where an
    optional one is missing, and for padding); a sample without a required field is left
    out of the job's plan (loader.registration.left_out counts them). A tuple, never a
    bare str. `image=False` asks for the fields alone: nothing is decoded and `images`
    is None (None: the server's default, images). Both are part of the job: every rank
    asks for the same, and a state_dict resumes only the same job.

    DataLoader's keywords: `shuffle=True` is shuffle_shards=True and a shuffle buffer of
    1000 samples (split "shard"; webdataset's customary .shuffle(1000)), `shuffle=False`
    neither (split "sample" always deals a seeded permutation per epoch); `drop_last=True`
    is remainder "drop", `drop_last=False` remainder "pad" (every sample once, the last
    batch padded with label -1); `num_workers` is ignored with a warning (the server
    decodes); `pin_memory=True` without CUDA warns and goes on unpinned.

    Epochs: each iter() streams the next epoch (0, 1, 2, ...), unless set_epoch() or
    load_state_dict() chose the position first, or an error (or Ctrl-C) raised by the
    iteration ended it mid-epoch: the next iter() then resumes that epoch at the first
    batch not handed out, as load_state_dict(state_dict()) would. A peek does not use an
    epoch up: after an iterator that handed out no batch, or one batch and was dropped
    (`next(iter(loader))`), the next iter() streams the same epoch from its start. Each
    epoch yields
    exactly len(loader) batches (fewer when resumed mid-epoch: batches_in_epoch).
    load_state_dict() also
    takes a state of another world size or batch size (split sample): the epoch goes on
    from the samples all ranks consumed, dealt over the new ranks (docs/python.md).

    Security (docs/deploy.md, "TLS and tokens"): `tls_ca` (a PEM file) connects with TLS
    trusting that CA (`tls=True`: TLS trusting the system's roots), `tls_cert` and
    `tls_key` add a client certificate (mTLS); `token` is sent as "authorization: Bearer
    <token>", default $SHARDCAST_TOKEN.

    A sample whose image the server could not decode arrives as a grey substitute
    (`info[i].substituted`): with `on_substitute="mask"` (default) its label is -1, as
    padding's, so `cross_entropy(..., ignore_index=-1)` leaves it out (`loader.substituted`
    counts them in the epoch); `"fail"` raises ShardcastError naming it.

    Where images are decoded (docs/python.md, "Decoding on the trainer"): `decode=None`
    (default) the server decodes and sends pixels; `decode="cpu"` the server sends each
    image as stored with the crop it would have made, and this process decodes it with
    the server's own code on `decode_threads` native threads without the GIL: the same
    bytes as decode=None; `decode="cuda"` decodes each batch's JPEGs on the current CUDA
    device (torchvision's decode_jpeg, nvJPEG) and crops, resizes and flips there: the
    same samples and crops, pixels within a few levels of decode=None's (docs/python.md
    has the measured tolerance), `images` on the device (PNG, WebP, CMYK or grayscale
    JPEG, a damaged file: the CPU decode, `decode_fallbacks`). A sample whose image cannot be decoded here is the server's
    substitute, as it would have been with decode=None. The delivery is part of the job's
    fingerprint: a state_dict of decode=None resumes no decode="cpu"|"cuda" job (those
    two resume each other). decode="cuda" without CUDA is a ValueError.

    `pin_memory=True` (for a CUDA device): each batch's pixels are copied once, without
    the GIL, from the buffers they were received in into page-locked memory, so that
    `images.to(device, non_blocking=True)` (and normalize) is a DMA. Otherwise `images` is
    a view of the received bytes.

    Ranks agree before the first batch: on the first iter(), with torch.distributed
    initialized (its default group, when its size is world_size) or a `process_group`
    given, every rank's job fingerprint, batches per epoch, batch size and world size are
    all-gathered (one small all_gather_object, once) and a difference raises
    JobChangedError on every rank, naming each rank's values: ranks registered at
    replicas with other data or settings never train on mixed batches or hang at an
    epoch's end. `check_ranks=False` turns this off.

    Raises ServerUnavailableError when the server cannot be reached within
    `reconnect_deadline` seconds (at once for a failed TLS handshake; StreamTimeoutError,
    a kind of it, when a stream delivers nothing for `stream_timeout` seconds and
    reconnecting brings nothing within another `stream_timeout`; 0 = never),
    JobRefusedError when it refuses the job (the message is the server's and names the
    field; code UNAUTHENTICATED for a missing or wrong token), ValueError for a bad
    argument. Every wait (registering, next()) ends at once on Ctrl-C
    (KeyboardInterrupt) and on close() from another thread (LoaderClosedError). A Loader
    belongs to the process that created it: in a forked child every call raises
    ForkedProcessError.
    """

    # An error raised by the iteration ended the epoch early: the next iter() resumes it
    # (and keeps counting its substitutes).
    _resume_after_error = False
    # decode="cuda"'s decoder of the encoded images.
    _decoder: Optional[BatchDecoder] = None

    def __init__(
        self,
        server: str,
        *,
        batch_size: Optional[int] = None,
        dataset: Optional[str] = None,
        job_id: Optional[str] = None,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        split: Optional[str] = None,
        remainder: Optional[str] = None,
        workers: Optional[int] = None,
        seed: Optional[int] = None,
        shuffle_shards: Optional[bool] = None,
        shuffle_buffer: Optional[int] = None,
        block_size: Optional[int] = None,
        transform: Optional[str] = None,
        resize: Optional[int] = None,
        crop: Optional[int] = None,
        fields: Optional[Sequence[str]] = None,
        image: Optional[bool] = None,
        prefetch: int = 4,
        reconnect_deadline: float = 120.0,
        stream_timeout: float = 120.0,
        tls: bool = False,
        tls_ca: Optional[str] = None,
        tls_cert: Optional[str] = None,
        tls_key: Optional[str] = None,
        token: Optional[str] = None,
        pin_memory: bool = False,
        on_substitute: str = "mask",
        process_group: Optional[Any] = None,
        check_ranks: bool = True,
        shuffle: Optional[bool] = None,
        drop_last: Optional[bool] = None,
        num_workers: Optional[int] = None,
        decode: Optional[str] = None,
        decode_threads: Optional[int] = None,
    ) -> None:
        # Checked before anything connects, with the argument's Python name.
        remainder, shuffle_shards, shuffle_buffer = _dataloader_keywords(
            shuffle, drop_last, remainder, shuffle_shards, shuffle_buffer)
        if num_workers is not None:
            warnings.warn(
                f"shardcast.Loader: num_workers={num_workers} is ignored: the server decodes, "
                "so the Loader needs no worker processes (workers= sets this job's virtual "
                "DataLoader workers on the server, split 'shard')", stacklevel=2)
        if pin_memory and not torch.cuda.is_available():
            warnings.warn(
                "shardcast.Loader: pin_memory=True but CUDA is not available: batches stay in "
                "ordinary memory (as DataLoader does)", stacklevel=2)
            pin_memory = False
        if prefetch < 1:
            raise ValueError(f"prefetch must be >= 1, got {prefetch}")
        if not reconnect_deadline >= 0:
            raise ValueError(f"reconnect_deadline must be >= 0, got {reconnect_deadline}")
        if not stream_timeout >= 0:
            raise ValueError(f"stream_timeout must be >= 0, got {stream_timeout}")
        if on_substitute not in ("mask", "fail"):
            raise ValueError(f"on_substitute must be 'mask' or 'fail', got {on_substitute!r}")
        _check_decode(decode, decode_threads)
        if decode == "cuda":
            pin_memory = False  # the batch is made on the device
        field_specs = _field_specs(fields)
        if image is not None and not isinstance(image, bool):
            raise TypeError(f"image must be True, False or None, got {image!r}")
        options = _native.StreamOptions()
        options.server = server  # ValueError at once for what cannot be an address
        default_rank, default_world = _default_rank_and_world()
        rank = default_rank if rank is None else rank
        world_size = default_world if world_size is None else world_size
        job_id = _resolve_job_id(job_id, world_size)
        job = pb.RegisterRequest(
            job_id=job_id,
            rank=rank,
            world_size=world_size,
            batch_size=batch_size or 0,
            split=enum_value(pb.Split, split, "split"),
            remainder=enum_value(pb.Remainder, remainder, "remainder"),
            workers=workers or 0,
            dataset=dataset or "",
            transform=pb.Transform(
                mode=enum_value(pb.TransformMode, transform, "transform"),
                resize=resize or 0,
                crop=crop or 0,
            ),
        )
        # Optional fields: unset means "server default", so only set what was given.
        if seed is not None:
            job.seed = seed
        if shuffle_shards is not None:
            job.shuffle_shards = shuffle_shards
        if shuffle_buffer is not None:
            job.shuffle_buffer = shuffle_buffer
        if block_size is not None:
            job.block_size = block_size
        job.fields.extend(field_specs)
        if image is not None:
            job.image = image
        job.delivery = pb.IMAGE_DELIVERY_SERVER if decode is None else pb.IMAGE_DELIVERY_ENCODED
        # TLS and the token by the C++ clients' one rule (client/protocol/client_security.h):
        # TLS when tls, tls_ca or tls_cert is given (tls_ca: default the system's roots),
        # files read as they read them, the token given or else $SHARDCAST_TOKEN's.
        security = _native.client_security(tls=tls, tls_ca=tls_ca, tls_cert=tls_cert,
                                           tls_key=tls_key, token=token)
        options.prefetch = prefetch
        options.reconnect_deadline = reconnect_deadline
        options.stream_timeout = stream_timeout
        # The receiving thread joins the pixels into one block for the tensor; pinned
        # batches are copied from the received pieces into the pinned memory instead.
        options.join_images = not pin_memory
        if decode is not None:
            # "cpu": the native client decodes (the server's code, byte for byte);
            # "cuda": it hands over the encoded images, decoded here (gpu_decode).
            options.decode = "cpu" if decode == "cpu" else "none"
            if decode_threads is not None:
                options.decode_threads = decode_threads
        self._stream = _native.Stream(job.SerializeToString(), options, security)
        self._registration = pb.RegisterResponse.FromString(self._stream.registration)
        if decode == "cuda" and self._stream.has_images:
            self._decoder = BatchDecoder(
                torch.device("cuda", torch.cuda.current_device()),
                dct_scaling=self._registration.transform.dct_scaling,
                max_decode_memory=options.max_decode_memory, cpu_threads=decode_threads)
        # Pinned memory holds pixels: a job without images has none to pin.
        self._pin_memory = pin_memory and self._stream.has_images
        self._on_substitute = on_substitute
        # Substitutes masked in the epoch being iterated.
        self.substituted = 0
        self._offset_batches = 0  # batches of the epoch dealt from _offset, when not 0
        self._closed = False
        self._reconnects = 0  # the stream's count, kept when it closes
        self._server = server
        self.job_id = job_id
        self.rank = rank
        self.world_size = world_size
        # The position: the next batch handed out is batch `_done` of epoch `_epoch`,
        # which was dealt from global sample position `_offset` (0 but after an elastic
        # resume). `_pinned`: set_epoch/load_state_dict (or construction) chose it for
        # the next iter(); otherwise iter() moves on to the next epoch.
        self._epoch = 0
        self._done = 0
        self._offset = 0
        self._pinned = True
        self._iteration = 0  # bumped by each iter(), so an older iterator stops
        # Batches the current iter() handed out: an iterator that handed out none (or was
        # dropped after a peek) leaves its unfinished epoch to the next iter().
        self._handed_out = 0
        # The ranks' agreement on the job, on the first iter() (_agree_on_job).
        self._process_group = process_group
        self._check_ranks = check_ranks
        self._ranks_agreed = False

    # ---- what the server said ------------------------------------------------------

    @property
    def registration(self) -> pb.RegisterResponse:
        """The server's RegisterResponse: the effective job config, defaults filled in."""
        return self._registration

    @property
    def dataset(self) -> str:
        """The dataset this job reads, as the server resolved it (e.g. "default")."""
        return self.registration.dataset

    @property
    def batch_size(self) -> int:
        return self.registration.batch_size

    @property
    def num_classes(self) -> int:
        return self.registration.num_classes

    @property
    def class_names(self) -> List[str]:
        return list(self.registration.class_names)

    @property
    def image_shape(self) -> Optional[Tuple[int, int, int]]:
        """(3, C, C): the shape of one image; None for a job without images."""
        if not self.has_images:
            return None
        c, h, w = self.registration.image_shape
        return (c, h, w)

    @property
    def has_images(self) -> bool:
        """Whether batches carry images (False: image=False, `images` is None)."""
        return self._stream.has_images

    @property
    def fields(self) -> Tuple[str, ...]:
        """The fields each sample carries, as the server registered them ("txt", "json?");
        info[i].fields is keyed by their names (without "?")."""
        return tuple(self.registration.fields)

    @property
    def split(self) -> str:
        return enum_name(pb.Split, self.registration.split)

    @property
    def job_fingerprint(self) -> str:
        return self.registration.job_fingerprint

    @property
    def epoch(self) -> int:
        """The epoch being iterated (or the one the next iter() streams, before it)."""
        return self._epoch

    @property
    def reconnects(self) -> int:
        """How often the stream broke and was resumed so far."""
        if not self._closed:
            self._reconnects = self._stream.reconnects
        return self._reconnects

    def __len__(self) -> int:
        """n: the batches every rank gets per epoch."""
        return self._registration.batches_per_epoch

    @property
    def batches_in_epoch(self) -> int:
        """Batches of the epoch being iterated (or next to be): len(loader), or fewer for
        an epoch resumed elastically from a sample offset."""
        return len(self) if self._offset == 0 else self._offset_batches

    def __repr__(self) -> str:
        """The effective settings: the server's answer to this rank's registration."""
        reg = self.registration
        transform = reg.transform
        return (
            f"shardcast.Loader(server={self._server!r}, dataset={reg.dataset!r}, "
            f"job_id={self.job_id!r}, rank={self.rank}, world_size={reg.world_size}, "
            f"batch_size={reg.batch_size}, batches_per_epoch={reg.batches_per_epoch}, "
            f"split={self.split!r}, remainder={enum_name(pb.Remainder, reg.remainder)!r}, "
            f"shuffle_shards={reg.shuffle_shards}, shuffle_buffer={reg.shuffle_buffer}, "
            f"seed={reg.seed}, transform={enum_name(pb.TransformMode, transform.mode)!r}, "
            f"resize={transform.resize}, crop={transform.crop}, "
            f"image={self.has_images}, fields={self.fields!r}, "
            f"delivery={enum_name(pb.ImageDelivery, reg.delivery)!r}, epoch={self._epoch}"
            f"{', closed' if self._closed else ''})"
        )

    # ---- position --------------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """The next iter() streams `epoch` from its first batch."""
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        self._epoch, self._done, self._offset, self._pinned = epoch, 0, 0, True
        self._resume_after_error = False

    def state_dict(self) -> Dict[str, Any]:
        """The position (the next batch to hand out is batch `batches_done` of `epoch`,
        which has `batches_in_epoch` batches dealt from global position `sample_offset`;
        all ranks together consumed `samples_consumed` samples of it) and the job it
        belongs to. Take it after a training step; load_state_dict of a new Loader then
        yields the rest of the epoch, the same samples and bytes."""
        reg = self.registration
        return {
            "epoch": self._epoch,
            "batches_done": self._done,
            "batches_in_epoch": self.batches_in_epoch,
            "sample_offset": self._offset,
            "samples_consumed": _saved_position(
                self._epoch, self._done, self._offset, reg.world_size, reg.batch_size
            ).samples_consumed,
            "job_id": self.job_id,
            "rank": self.rank,
            "world_size": reg.world_size,
            "batch_size": reg.batch_size,
            "batches_per_epoch": reg.batches_per_epoch,
            "job_fingerprint": reg.job_fingerprint,
        }

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continues where `state` (from state_dict) was taken: the next iter() streams the
        rest of that epoch, or the next epoch when it was finished.

        With the same world size and batch size the rest is the same batches. With another
        world size or batch size (an elastic resume, split sample only) the epoch goes on
        from the `samples_consumed` all ranks took, dealt over this job's ranks: no sample
        of the epoch twice across the change, and with remainder "pad" every one exactly
        once (the rule of docs/training.md, "Elastic resume"). Every rank of the new job
        loads the same state (any old rank's: the position is global).

        Raises JobChangedError when `state` belongs to another job (other data or config:
        job fingerprint), or when an elastic resume mid-epoch meets split shard.
        """
        reg = self.registration
        where = (
            f"load_state_dict: cannot resume epoch {state['epoch']} at batch "
            f"{state['batches_done']}"
        )
        if state["job_fingerprint"] != reg.job_fingerprint:
            raise JobChangedError(
                f"{where}: the state is of a job with job_fingerprint "
                f"{state['job_fingerprint']!r}, this loader's job '{self.job_id}' has "
                f"{reg.job_fingerprint!r} (other data or settings)"
            )
        epoch, done = int(state["epoch"]), int(state["batches_done"])
        offset = int(state.get("sample_offset", 0))  # absent from states before elastic resume
        epoch_batches = int(state.get("batches_in_epoch", state["batches_per_epoch"]))
        if epoch < 0 or not 0 <= done <= epoch_batches or not 0 <= offset <= reg.num_samples:
            raise ValueError(
                f"bad position in state: epoch {epoch}, batches_done {done} of "
                f"{epoch_batches}, sample_offset {offset}"
            )
        if done == epoch_batches:  # the epoch was finished: any world size goes on from here
            epoch, done, offset = epoch + 1, 0, 0
        elif state["world_size"] != reg.world_size or state["batch_size"] != reg.batch_size:
            # Where the epoch goes on: shardcast-train's rule (client/protocol/run_rules.h).
            saved = _saved_position(epoch, done, offset, int(state["world_size"]),
                                    int(state["batch_size"]))
            at = _native.resume_at(saved, reg.world_size, reg.batch_size, reg.num_samples)
            if at.elastic and reg.split != pb.SPLIT_SAMPLE:
                raise JobChangedError(
                    f"{where}: the state has world size {state['world_size']} and batch size "
                    f"{state['batch_size']}, this loader's job '{self.job_id}' "
                    f"{reg.world_size} and {reg.batch_size}; an elastic resume mid-epoch needs "
                    "split sample (with split shard the ranks' shards and the repeat/slice "
                    "depend on the world size): resume with the same world size and batch "
                    "size, or from a state taken at the end of an epoch"
                )
            done, offset = at.batch, at.sample_offset
        elif state["batches_per_epoch"] != reg.batches_per_epoch:
            raise JobChangedError(
                f"{where}: the state is of a job with batches_per_epoch "
                f"{state['batches_per_epoch']!r}, this loader's job '{self.job_id}' has "
                f"{reg.batches_per_epoch!r}"
            )
        if offset != 0:
            # The server's rule, asked while the stream is open (a closed loader still
            # answers state_dict()).
            self._offset_batches = self._stream.batches_from_offset(offset)
        self._epoch, self._done, self._offset, self._pinned = epoch, done, offset, True
        self._resume_after_error = False

    # ---- iteration -------------------------------------------------------------------

    def __iter__(self) -> Iterator[Batch]:
        self._agree_on_job()
        epoch, done, offset = self._epoch, self._done, self._offset
        if not self._pinned and (self._handed_out > 0 or done >= self.batches_in_epoch):
            epoch, done, offset = epoch + 1, 0, 0
        # else the last iterator handed out nothing of an unfinished epoch: that epoch is
        # streamed again from the start (a peek at one batch put the position back there
        # already: _batches).
        self._handed_out = 0
        # The position moves only once the stream took it: a refused start changes nothing.
        self._stream.start_epoch(epoch, done, offset)
        self._epoch, self._done, self._offset, self._pinned = epoch, done, offset, False
        self._iteration += 1
        if not self._resume_after_error:
            self.substituted = 0
        self._resume_after_error = False
        return self._batches(self._iteration)

    # ---- the ranks' agreement on the job -------------------------------------------

    def _agree_on_job(self) -> None:
        """Before the first batch, once: every rank's job as its server registered it
        (job fingerprint, batches per epoch, batch size, world size, job id) is
        all-gathered through the process group (`process_group`, else torch.distributed's
        default group when one is initialized with this loader's world size) and must
        be the same on every rank. Ranks registered at replicas that serve other bytes
        or other settings would otherwise train on mixed batches, or hang in DDP at the
        end of an epoch whose batch counts differ. Every rank sees the same table, so
        every rank raises the same JobChangedError, naming each rank's values. Costs one
        all_gather_object of about 200 bytes per rank, once per loader; check_ranks=False
        turns it off (e.g. for ranks that do not call iter() together)."""
        if self._ranks_agreed or not self._check_ranks or self.world_size <= 1:
            return
        dist = torch.distributed
        group = self._process_group
        if group is None:
            if not (dist.is_available() and dist.is_initialized()):
                return  # no process group: nothing to compare through
            if dist.get_world_size() != self.world_size:
                return  # the default group is not this job's ranks
        elif dist.get_world_size(group) != self.world_size:
            raise ValueError(
                f"process_group has {dist.get_world_size(group)} ranks, the loader's job "
                f"'{self.job_id}' {self.world_size}: pass the group of the job's ranks"
            )
        reg = self.registration
        mine = {"rank": self.rank, "job_id": self.job_id, "world_size": self.world_size,
                "job_fingerprint": reg.job_fingerprint,
                "batches_per_epoch": reg.batches_per_epoch, "batch_size": reg.batch_size}
        everyone: List[Any] = [None] * self.world_size
        dist.all_gather_object(everyone, mine, group=group)
        differences = []
        for field in ("job_fingerprint", "batches_per_epoch", "batch_size", "world_size",
                      "job_id"):
            if any(e[field] != everyone[0][field] for e in everyone):
                differences.append(f"{field}: " + ", ".join(
                    f"rank {e['rank']} has {e[field]!r}" for e in everyone))
        if sorted(e["rank"] for e in everyone) != list(range(self.world_size)):
            differences.append("rank: the group's ranks have ranks " + ", ".join(
                str(e["rank"]) for e in everyone))
        if differences:
            raise JobChangedError(
                f"job '{self.job_id}': the ranks disagree before the first batch: "
                + "; ".join(differences) + ". Their servers (replicas) serve other data or "
                "other byte-changing settings (each server logs its job fingerprint and "
                "settings), or the ranks asked for other jobs: training on would mix batches "
                "or hang at the epoch's end. Give every replica the same shards and flags"
            )
        self._ranks_agreed = True

    def _batches(self, iteration: int) -> Iterator[Batch]:
        try:
            yield from self._receive(iteration)
        except GeneratorExit:
            # The caller dropped the iterator. After one batch at most, that was a peek
            # (`next(iter(loader))`, e.g. for the shapes): it does not use the epoch up, the
            # next iter() streams it again from its first batch, as a DataLoader's next
            # pass yields what the peek saw. After more, the next iter() moves on (a loop
            # that stops early, e.g. Lightning's limit_train_batches).
            if iteration == self._iteration and self._handed_out <= 1:
                self._done, self._handed_out = self._done - self._handed_out, 0
            raise
        except BaseException:
            # The stream failed (or Ctrl-C) before the epoch's end: the position stays
            # at the first batch not handed out, and the next iter() resumes there, so
            # no batch is lost and state_dict() stays true. An error that persists
            # (another job, a closed loader) is raised again by that iteration.
            if iteration == self._iteration:
                self._pinned = self._resume_after_error = True
            raise

    def _receive(self, iteration: int) -> Iterator[Batch]:
        reg = self.registration
        shape = (reg.batch_size, *reg.image_shape)  # used with images only (pin_memory)
        while True:
            if iteration != self._iteration:
                raise RuntimeError(
                    "this iterator of the shardcast Loader was superseded by a newer iter()"
                )
            images = None
            if self._pin_memory:
                images = torch.empty(shape, dtype=torch.uint8, pin_memory=True)
                native = self._stream.next_into(images.data_ptr(), images.numel())
            else:
                native = self._stream.next()
            if native is None:
                return
            batch = self._decoded(native) if self._decoder else _to_batch(native, images)
            if any(sample.substituted for sample in batch.info):
                self._check_substitutes(batch)
            self._done += 1
            self._handed_out += 1
            yield batch

    def _decoded(self, native: "_native.Batch") -> Batch:
        """decode="cuda": the batch's encoded images decoded on the device. A sample that
        neither the device nor the CPU decode could make is the server's substitute
        (every byte 128), marked substituted and logged, as the server does."""
        batch = _to_batch(native)
        decoded = self._decoder.decode(_encoded_images(native), self.image_shape[-1])
        info = list(batch.info)
        for i, error in decoded.failures.items():
            sample = info[i]
            _log.warning("shardcast: job %s rank %d epoch %d batch %d: sample %r (shard %d, "
                         "sample %d in it) could not be decoded, a substitute is used: %s",
                         self.job_id, self.rank, self._epoch, self._done, sample.key,
                         sample.shard, sample.index_in_shard, error)
            info[i] = sample._replace(substituted=True)
        return Batch(decoded.images, batch.labels, info)

    @property
    def decode_fallbacks(self) -> int:
        """decode="cuda": the images decoded on the CPU so far (PNG, WebP, CMYK or
        grayscale JPEG, damaged ones); 0 otherwise."""
        return self._decoder.fallbacks if self._decoder else 0

    @property
    def decode_substituted(self) -> int:
        """decode="cpu" | "cuda": the images this process could not decode so far (each
        replaced by the server's substitute and marked `substituted`); 0 with decode=None."""
        if self._decoder:
            return self._decoder.substituted
        return self._stream.client_substituted

    def _check_substitutes(self, batch: Batch) -> None:
        """Samples whose image the server could not decode (sent as grey substitutes):
        their label becomes -1, as padding's (on_substitute="mask"), or iteration stops
        with ShardcastError naming the sample ("fail")."""
        for i, sample in enumerate(batch.info):
            if not sample.substituted:
                continue
            if self._on_substitute == "fail":
                raise ShardcastError(
                    f"job '{self.job_id}' rank {self.rank} epoch {self._epoch} batch "
                    f"{self._done}: sample {sample.key!r} (shard {sample.shard}, sample "
                    f"{sample.index_in_shard} in it) could not be decoded and the server sent "
                    "a substitute (on_substitute=\"fail\"; the server's log and status name "
                    "the reason)"
                )
            batch.labels[i] = -1  # the batch's own memory: nothing else sees it
            self.substituted += 1

    def close(self) -> None:
        """Stops the prefetch thread, cancels the open stream and closes the connection.
        A loader dropped without close() does the same when Python frees it (its
        iterators hold it too): use `with` or close() to say when. From another thread,
        it ends a next() waiting there with LoaderClosedError. In a process forked from
        the one that created the loader, it only lets go of it (the stream is the
        parent's)."""
        try:
            self._reconnects = self.reconnects
        except ForkedProcessError:
            pass  # the count is the parent's; this process never streamed
        self._closed = True
        self._stream.close()
        if self._decoder:
            self._decoder.close()

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
