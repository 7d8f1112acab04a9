"""shardcast.Loader: a rank's batches from shardcast-server as torch tensors, for a
PyTorch (or Lightning) training loop in place of a DataLoader.

Every rank gets exactly len(loader) batches per epoch, whatever the data; the server
decodes and transforms (or, decode="cpu" | "cuda", sends the images as stored with their
crops, and this process decodes them: the native client, or gpu_decode on the device).
The protocol is the C++ client's (shardcast._native, built from client/stream): it
registers, receives, checks and reconnects on its own thread,
without the GIL, and the loader wraps the received pixels as a uint8 tensor without
copying them (or copies them once into pinned memory, pin_memory=True). Its keyword
arguments are one table (shardcast/options.py): checked, mapped and documented there.
"""

import inspect
import logging
import warnings
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch

from shardcast._proto import enum_name, pb
from shardcast.batch import Batch, SampleInfo, encoded_images, to_batch
from shardcast.errors import ForkedProcessError, ShardcastError
from shardcast.gpu_decode import BatchDecoder

try:
    from shardcast import _native
except ImportError as e:
    raise ImportError(
        "shardcast's native client (shardcast._native) is missing: install the package with "
        "pip, which builds it, or build the CMake target shardcast_native and put build/python "
        f"on PYTHONPATH next to python/ (docs/python.md): {e}"
    ) from e

from shardcast import mix_resume, options, ranks  # noqa: E402  (they need _native)
from shardcast.loader_doc import LOADER_DOC  # noqa: E402
from shardcast.position import resume_position, saved_position  # noqa: E402

# The environment variable a token is taken from when none is given (as the C++ clients).
TOKEN_ENV = "SHARDCAST_TOKEN"

_log = logging.getLogger("shardcast")

__all__ = ["Batch", "Loader", "SampleInfo"]


def _warn_about(values: Dict[str, Any]) -> None:
    """The keywords that are accepted but do less than asked: a warning each."""
    if values["num_workers"] is not None:
        warnings.warn(
            f"shardcast.Loader: num_workers={values['num_workers']} is ignored: the server "
            "decodes, so the Loader needs no worker processes (workers= sets this job's "
            "virtual DataLoader workers on the server, split 'shard')",
            stacklevel=3,
        )
    if values["pin_memory"] and not torch.cuda.is_available():
        warnings.warn(
            "shardcast.Loader: pin_memory=True but CUDA is not available: batches stay in "
            "ordinary memory (as DataLoader does)",
            stacklevel=3,
        )
        values["pin_memory"] = False
    if values["decode"] == "cuda":
        values["pin_memory"] = False  # the batch is made on the device


class Loader:
    __doc__ = LOADER_DOC

    # An error raised by the iteration ended the epoch early: the next iter() resumes it
    # (and keeps counting its substitutes).
    _resume_after_error = False
    # decode="cuda"'s decoder of the encoded images.
    _decoder: Optional[BatchDecoder] = None

    def __init__(self, server: str, **keywords: Any) -> None:
        # Every argument checked, with its Python name, before anything connects.
        values = options.bind(server, keywords)
        _warn_about(values)
        stream_options = options.stream_options(values)  # ValueError for a bad address
        default_rank, default_world = ranks.default_rank_and_world()
        rank = default_rank if values["rank"] is None else values["rank"]
        world_size = default_world if values["world_size"] is None else values["world_size"]
        options.check_rank(rank, world_size)
        job_id = ranks.resolve_job_id(values["job_id"], world_size)
        job = options.job_request(values, job_id, rank, world_size)
        self._mix = values["mix"] or []  # the schedule as given, for state_dict
        security = options.security(values)
        self._stream = _native.Stream(job.SerializeToString(), stream_options, security)
        self._registration = pb.RegisterResponse.FromString(self._stream.registration)
        if values["decode"] == "cuda" and self._stream.has_images:
            self._decoder = BatchDecoder(
                torch.device("cuda", torch.cuda.current_device()),
                dct_scaling=self._registration.transform.dct_scaling,
                max_decode_memory=stream_options.max_decode_memory,
                cpu_threads=values["decode_threads"],
            )
        # Pinned memory holds pixels: a job without images has none to pin.
        self._pin_memory = values["pin_memory"] and self._stream.has_images
        self._on_substitute = values["on_substitute"]
        self._server = server
        self.job_id, self.rank, self.world_size = job_id, rank, world_size
        self._start_state(values["process_group"], values["check_ranks"])

    def _start_state(self, process_group: Optional[Any], check_ranks: bool) -> None:
        """The loader's state before its first iter()."""
        # Substitutes masked in the epoch being iterated.
        self.substituted = 0
        self._offset_batches = 0  # batches of the epoch dealt from _offset, when not 0
        # A mixed job: how this run draws its sequence (mix_resume.py): the serialized
        # MixtureResume every stream sends (b"": none), the run's segments and the
        # schedule each drew under.
        self._mix_resume = b""
        reg = self._registration
        self._mix_segments = [(0, 0, reg.world_size * reg.batch_size)]
        self._mix_segment_schedules = [list(self._mix)]
        self._closed = False
        self._reconnects = 0  # the stream's count, kept when it closes
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
        """The dataset this job reads, as the server resolved it (e.g. "default"); "" for a
        mixture (`mix`)."""
        return self.registration.dataset

    @property
    def mix(self) -> List[Tuple[int, Dict[str, float]]]:
        """A mixed job's schedule as the server resolved it: [(step, {dataset: weight})],
        weights normalised to sum 1 (one point for constant weights); [] for one dataset."""
        return [
            (point.step, {w.dataset: w.weight for w in point.weights})
            for point in self.registration.mix
        ]

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
            "samples_consumed": saved_position(
                self._epoch, self._done, self._offset, reg.world_size, reg.batch_size
            ).samples_consumed,
            "job_id": self.job_id,
            "rank": self.rank,
            "world_size": reg.world_size,
            "batch_size": reg.batch_size,
            "batches_per_epoch": reg.batches_per_epoch,
            "job_fingerprint": reg.job_fingerprint,
            **(
                mix_resume.state_fields(
                    reg, self._mix_segments, self._mix_segment_schedules, self._mix
                )
                if reg.mix
                else {}
            ),
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
        where = f"load_state_dict: cannot resume epoch {state['epoch']} at batch "
        mixed = mix_resume.resumed_from(state, self.registration, pb, where, self._mix)
        if mixed is not None:
            # Another run of this mixture: the server replays how it drew the sequence.
            epoch, offset, self._mix_resume, self._mix_segments = mixed[:4]
            self._mix_segment_schedules = mixed[4]
            done = 0
        else:
            epoch, done, offset = resume_position(state, self.registration, self.job_id)
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
        self._stream.start_epoch(epoch, done, offset, self._mix_resume)
        self._epoch, self._done, self._offset, self._pinned = epoch, done, offset, False
        self._iteration += 1
        if not self._resume_after_error:
            self.substituted = 0
        self._resume_after_error = False
        return self._batches(self._iteration)

    # ---- the ranks' agreement on the job -------------------------------------------

    def _agree_on_job(self) -> None:
        """Before the first batch, once: every rank's job as its server registered it must
        be the same on every rank (ranks.agree_on_job), compared through the process
        group (`process_group`, else torch.distributed's default group when one is
        initialized with this loader's world size); check_ranks=False turns it off (e.g.
        for ranks that do not call iter() together)."""
        if self._ranks_agreed or not self._check_ranks or self.world_size <= 1:
            return
        can, group = ranks.agreement_group(self._process_group, self.world_size, self.job_id)
        if not can:
            return
        reg = self.registration
        mine = {
            "rank": self.rank,
            "job_id": self.job_id,
            "world_size": self.world_size,
            "job_fingerprint": reg.job_fingerprint,
            "batches_per_epoch": reg.batches_per_epoch,
            "batch_size": reg.batch_size,
        }
        ranks.agree_on_job(mine, self.world_size, group)
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
            batch = self._decoded(native) if self._decoder else to_batch(native, images)
            if any(sample.substituted for sample in batch.info):
                self._check_substitutes(batch)
            self._done += 1
            self._handed_out += 1
            yield batch

    def _decoded(self, native: "_native.Batch") -> Batch:
        """decode="cuda": the batch's encoded images decoded on the device. A sample that
        neither the device nor the CPU decode could make is the server's substitute
        (every byte 128), marked substituted and logged, as the server does."""
        batch = to_batch(native)
        decoded = self._decoder.decode(encoded_images(native), self.image_shape[-1])
        info = list(batch.info)
        for i, error in decoded.failures.items():
            sample = info[i]
            _log.warning(
                "shardcast: job %s rank %d epoch %d batch %d: sample %r (shard %d, "
                "sample %d in it) could not be decoded, a substitute is used: %s",
                self.job_id,
                self.rank,
                self._epoch,
                self._done,
                sample.key,
                sample.shard,
                sample.index_in_shard,
                error,
            )
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
                    'a substitute (on_substitute="fail"; the server\'s log and status name '
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


# help(Loader) and IDEs show the keywords of the table (options.OPTIONS), in its order,
# with their defaults: the signature is the table's, so a new option is one row there.
Loader.__init__.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [
        inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        inspect.Parameter("server", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=str),
    ]
    + [
        inspect.Parameter(o.name, inspect.Parameter.KEYWORD_ONLY, default=o.default)
        for o in options.OPTIONS[1:]
    ],
    return_annotation=None,
)
