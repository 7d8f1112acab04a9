"""The Loader's keyword arguments as one table: each row names an argument, what it
accepts (type and range), its default, where it goes and its documentation line.

Every argument is checked here where it is given, before anything connects: None means
"the server's default" (or the native client's), any other value is used as given or
refused with a TypeError (a wrong type) or ValueError (out of range) naming the argument,
the value and what it accepts. The integer ranges are the C++ client's and the server's
own constants, bound into Python as `_native.option_limits()` (python/native/
option_bindings.cc), so Python and C++ cannot drift. help(Loader) and docs/python.md's
table of arguments are rendered from this table (python/generate_options_doc.py).
A new option is one row here (and its C++ range, if it has one).
"""

import math
import operator
import textwrap
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch

from shardcast import _native
from shardcast._proto import enum_names, enum_value, pb

# The C++ ranges: {name: (lowest, highest)} (option_bindings.cc).
LIMITS: Dict[str, Tuple[int, int]] = {
    name: (int(low), int(high)) for name, (low, high) in _native.option_limits().items()
}

# The Loader's decode= as the native client's StreamOptions.decode (client/base/
# stream_settings.h ClientDecode): the one place the two spellings meet. "cuda" hands the
# encoded images over undecoded ("none"); gpu_decode decodes them on the device. The
# native client names the wire's delivery from it (rank_stream.cc).
NATIVE_DECODE = {None: "server", "cpu": "cpu", "cuda": "none"}

# What shuffle=True asks of split "shard" when shuffle_buffer is not given: webdataset's
# customary .shuffle(1000).
SHUFFLE_BUFFER_FOR_SHUFFLE = 1000


class Option(NamedTuple):
    """One keyword argument of the Loader."""

    name: str
    # "int" (an integer in `limit`'s range), "seconds" (a finite number >= 0), "bool",
    # "choice" (one of `choices`), "enum" (a name of the proto enum `enum`), "str",
    # "fields" (a tuple of field specs), "group" (a torch.distributed process group),
    # "mix" (a mixture: weights by dataset name, or a schedule of them)
    kind: str
    default: Any  # None: the server's (or the native client's) default
    # Where the value goes: "job.<field>[.<field>]" (the RegisterRequest), "stream.<attr>"
    # (_native.StreamOptions), "security" (_native.client_security), "loader" (kept by
    # the Loader), "mapped" (turned into other options first).
    target: str
    doc: str  # Markdown: docs/python.md's table and help(Loader)
    limit: Optional[str] = None  # "int": the key of its range in LIMITS
    choices: Tuple[Any, ...] = ()  # "choice": the accepted values
    enum: Any = None  # "enum": the proto enum
    default_doc: str = ""  # what None means, where the table says more than "the server's"

    def accepts(self) -> str:
        """What the argument accepts, in words (for messages and the docs)."""
        if self.kind == "int":
            low, high = self.range()
            return f"an int in [{low}, {high}]"
        if self.kind == "seconds":
            return "a finite number of seconds >= 0"
        if self.kind == "bool":
            return "True or False"
        if self.kind == "choice":
            return " or ".join(repr(c) for c in self.choices)
        if self.kind == "enum":
            return " or ".join(repr(n) for n in enum_names(self.enum))
        if self.kind == "fields":
            return "a tuple of field specs (str)"
        if self.kind == "group":
            return "a torch.distributed process group"
        if self.kind == "mix":
            return "a dict of weights by dataset name, or a list of (step, dict)"
        if self.limit is not None:
            low, high = self.range()
            return f"a str of {low} to {high} bytes"
        return "a str"

    def range(self) -> Tuple[int, int]:
        """An "int" option's (lowest, highest), or a "str" one's length in bytes."""
        return LIMITS[self.limit] if self.limit in LIMITS else _LOCAL_LIMITS[self.limit]

    def described_default(self) -> str:
        if self.default_doc:
            return self.default_doc
        if self.default is None:
            return "None: the server's default"
        return repr(self.default)


# Python-side ranges of the arguments the server never sees (DataLoader's rule).
_LOCAL_LIMITS = {"num_workers": (0, (1 << 31) - 1)}

_J, _S = "job.", "stream."
OPTIONS: Tuple[Option, ...] = (
    Option(
        "server",
        "str",
        None,
        "stream.server",
        '`"host:port"`, `"[v6]:port"`, '
        '`"unix:PATH"` or several comma-separated replicas. What cannot be an address (a '
        "scheme such as `http://`, no port, a port outside 1-65535, IPv6 without brackets) "
        "is a `ValueError` at once saying what to write; a server that does not answer yet "
        "is waited for up to `reconnect_deadline` with one warning on the `shardcast` logger "
        "(address, error, how long), and the final `ServerUnavailableError` says to start "
        "`shardcast-server --shards DIR --listen ADDRESS` or check the address",
        default_doc="required (the only positional argument)",
    ),
    Option("batch_size", "int", None, _J + "batch_size", "per-rank batch size", "batch_size"),
    Option(
        "dataset",
        "str",
        None,
        _J + "dataset",
        "which of the server's datasets " '(`--dataset NAME=DIR`) the job reads, e.g. `"val"`',
        default_doc='None: the server\'s `"default"`, i.e. its `--shards`, or its only ' "dataset",
    ),
    Option(
        "mix",
        "mix",
        None,
        _J + "mix",
        "a mixture of the server's datasets instead of `dataset`: weights by name, "
        '`{"laion": 0.7, "coco": 0.3}` (normalised to sum 1), or a schedule of '
        "`[(step, {...}), ...]` interpolated linearly between its steps (batches a rank "
        "has taken since the start of training) and held after the last; the proportions "
        "hold at every prefix of the job's sequence within one sample, and each dataset "
        'is read in whole passes (see "Mixtures" below)',
        default_doc="None: one dataset",
    ),
    Option(
        "samples_per_epoch",
        "int",
        None,
        _J + "samples_per_epoch",
        "with `mix`: the length of an epoch in samples",
        "samples_per_epoch",
        default_doc="None: the mixed datasets' usable samples together",
    ),
    Option(
        "job_id",
        "str",
        None,
        "loader",
        "job name shared by all ranks, at most " "256 bytes",
        "job_id_length",
        default_doc="None: a new job per run, named by "
        "rank 0 and shared through the torch.distributed process group (one rank needs "
        "none; several ranks without a group must pass one)",
    ),
    Option(
        "rank",
        "int",
        None,
        "loader",
        "this process's rank, below `world_size`",
        "rank",
        default_doc="None: `torch.distributed`'s when a process group exists, else `RANK` "
        "from the environment (torchrun), else 0",
    ),
    Option(
        "world_size",
        "int",
        None,
        "loader",
        "the job's ranks",
        "world_size",
        default_doc="None: `torch.distributed`'s when a process group exists, else "
        "`WORLD_SIZE` from the environment (torchrun), else 1",
    ),
    Option(
        "split",
        "enum",
        None,
        _J + "split",
        '`"shard"` (the seed\'s webdataset '
        '`split_by_node` + repeat/slice semantics) or `"sample"` (exactly once per epoch)',
        enum=pb.Split,
    ),
    Option(
        "remainder",
        "enum",
        None,
        _J + "remainder",
        '`"drop"` or `"pad"` (padding: ' "label -1, `info.valid` False)",
        enum=pb.Remainder,
    ),
    Option(
        "workers",
        "int",
        None,
        _J + "workers",
        "virtual DataLoader workers per rank " "(split shard), as the seed's `num_workers`",
        "workers",
    ),
    Option("seed", "int", None, _J + "seed", "the shuffles' seed (see docs/design.md)", "seed"),
    Option(
        "shuffle_shards",
        "bool",
        None,
        _J + "shuffle_shards",
        "shuffle the shards each " "epoch (see docs/design.md)",
    ),
    Option(
        "shuffle_buffer",
        "int",
        None,
        _J + "shuffle_buffer",
        "samples in the shuffle " "buffer, 0: none (see docs/design.md)",
        "shuffle_buffer",
    ),
    Option(
        "block_size",
        "int",
        None,
        _J + "block_size",
        "samples read in a row before the " "plan moves on (see docs/design.md)",
        "block_size",
    ),
    Option(
        "transform",
        "enum",
        None,
        _J + "transform.mode",
        '`"center"` (Resize + ' 'CenterCrop) or `"random"` (RandomResizedCrop + flip)',
        enum=pb.TransformMode,
    ),
    Option(
        "resize",
        "int",
        None,
        _J + "transform.resize",
        "the short side before the " "center crop",
        "resize",
    ),
    Option(
        "crop",
        "int",
        None,
        _J + "transform.crop",
        "the images' side: they are " "3 x crop x crop",
        "crop",
    ),
    Option(
        "fields",
        "fields",
        None,
        _J + "fields",
        "the sample members each batch carries "
        'beside the image, by extension as webdataset names them: `("txt", "json?")`, '
        '`("seg.png",)`, `("jpg;png;webp",)` (`;`: the first of these the sample has; a '
        "trailing `?`: the member may be missing). A sample without a required field is "
        "left out of the job's plan (`loader.registration.left_out` counts them by reason; "
        '`num_samples` counts the samples served). A bare str (`fields="txt"`) is a '
        "`TypeError` saying to pass a tuple",
        default_doc="None: the server's default " "(none)",
    ),
    Option(
        "image",
        "bool",
        None,
        _J + "image",
        "`False`: the fields alone, no image "
        "(nothing is decoded; `images` is None, `fields` must not be empty): text, audio or "
        "token shards with the same exactly-once epochs, resume and elastic resume",
        default_doc="None: the server's default (images)",
    ),
    Option(
        "prefetch",
        "int",
        4,
        _S + "prefetch",
        "batches received ahead of the training " "loop, on the native client's thread",
        "prefetch",
    ),
    Option(
        "reconnect_deadline",
        "seconds",
        120.0,
        _S + "reconnect_deadline",
        "seconds of " "failure in a row before giving up",
    ),
    Option(
        "stream_timeout",
        "seconds",
        120.0,
        _S + "stream_timeout",
        "progress deadline in "
        "seconds (0 = off): a stream that delivers no batch for that long (counted from the "
        "request, or from when the next batch was asked for; time the training loop leaves "
        "the prefetch queue full never counts) is cancelled by a watchdog and handled as "
        "broken; if reconnecting brings no batch within another `stream_timeout`, "
        "`StreamTimeoutError` (as `shardcast-train --stream-timeout`)",
    ),
    Option(
        "tls",
        "bool",
        False,
        "security",
        "TLS trusting the system's roots (False: "
        "plaintext unless a TLS file is given). Before the native client the Loader took "
        "`credentials=` (a grpcio `ChannelCredentials`); such an object cannot cross into "
        "C++, so `tls`, `tls_ca`, `tls_cert` and `tls_key` say the same with files",
    ),
    Option(
        "tls_ca",
        "str",
        None,
        "security",
        "path of a PEM CA: TLS trusting the server "
        "certificate it signed (the C++ clients' `--tls-ca`)",
        default_doc="None",
    ),
    Option(
        "tls_cert",
        "str",
        None,
        "security",
        "path of this client's PEM certificate, for "
        "a server that requires client certificates (mTLS; `--tls-cert`); with `tls_key`",
        default_doc="None",
    ),
    Option(
        "tls_key",
        "str",
        None,
        "security",
        "path of this client's PEM key (mTLS; " "`--tls-key`); with `tls_cert`",
        default_doc="None",
    ),
    Option(
        "token",
        "str",
        None,
        "security",
        "bearer token for a server with "
        "`--auth-token-file`, sent as `authorization: Bearer` metadata. `tls`, `tls_ca`, "
        "`tls_cert`, `tls_key` and `token` go through the C++ clients' own rule "
        "(`client/rpc/client_security.h`, `_native.client_security`), so Python and "
        "the flags cannot drift",
        default_doc="None: `$SHARDCAST_TOKEN`, which must hold "
        "one token of visible ASCII or nothing, as for `shardcast-train` (`ValueError` "
        "otherwise)",
    ),
    Option(
        "pin_memory",
        "bool",
        False,
        "loader",
        "True: each batch's pixels are copied "
        "once, without the GIL, from the received buffers into page-locked memory "
        "(`images.to(cuda, non_blocking=True)` is then a DMA; without CUDA: a warning, and "
        "batches stay unpinned, as DataLoader does); False: `images` is a view of the "
        "received bytes",
    ),
    Option(
        "on_substitute",
        "choice",
        "mask",
        "loader",
        '`"mask"`: a sample the server '
        "could not decode (sent as a grey substitute, `info[i].substituted`) gets label -1, "
        "as padding, so `CrossEntropyLoss(ignore_index=-1)` leaves it out; "
        '`loader.substituted` counts them in the epoch. `"fail"`: iteration raises '
        "`ShardcastError` naming the sample",
        choices=("mask", "fail"),
    ),
    Option(
        "process_group",
        "group",
        None,
        "loader",
        "the group of the job's ranks that "
        "compare their jobs before the first batch (see `check_ranks`)",
        default_doc="None: `torch.distributed`'s default group, when one is initialized "
        "with `world_size` ranks",
    ),
    Option(
        "check_ranks",
        "bool",
        True,
        "loader",
        "before the first batch (the first "
        "`iter()`) the ranks compare their jobs: every rank's job fingerprint, `len()`, batch "
        "size, world size and job id are all-gathered (one `all_gather_object` of about 200 "
        "bytes per rank, once per loader) and any difference raises `JobChangedError` on "
        "every rank, naming each rank's values: ranks registered at replicas with other "
        "data or other byte-changing settings never train on mixed batches or hang in DDP at "
        "an epoch's end. Every rank must call `iter()` (as DDP does); False turns the check "
        "off. With NCCL, set the CUDA device first (`all_gather_object`'s rule)",
    ),
    Option(
        "shuffle",
        "bool",
        None,
        "mapped",
        "DataLoader's spelling: True is "
        "`shuffle_shards=True` with a shuffle buffer of 1000 samples unless `shuffle_buffer` "
        "is given (split shard; split sample always deals a seeded permutation per epoch), "
        "False neither. Given with the job's own spelling they must agree, else "
        "`ValueError`",
    ),
    Option(
        "drop_last",
        "bool",
        None,
        "mapped",
        "DataLoader's spelling: True is remainder "
        '`"drop"`, False remainder `"pad"` (every sample once). Given with `remainder` '
        "they must agree, else `ValueError`",
    ),
    Option(
        "num_workers",
        "int",
        None,
        "loader",
        "accepted and ignored with a warning: the "
        "server decodes, the Loader needs no worker processes (`workers` is the job's "
        "virtual DataLoader workers on the server)",
        "num_workers",
    ),
    Option(
        "decode",
        "choice",
        None,
        "mapped",
        'where images are decoded (see "Decoding on '
        'the trainer" below): None the server; `"cpu"` this process, with the server\'s '
        'code on native threads (the same bytes); `"cuda"` the current CUDA device (nvJPEG '
        'through torchvision), `images` on the device. `"cuda"` without CUDA is a '
        "`ValueError` at once",
        choices=(None, "cpu", "cuda"),
        default_doc="None: the server decodes",
    ),
    Option(
        "decode_threads",
        "int",
        None,
        _S + "decode_threads",
        'with `decode="cpu"`: the '
        'native client\'s decode threads; with `"cuda"`: the CPU threads of its fallbacks',
        "decode_threads",
        default_doc="None: the native client's default (the hardware's "
        "threads, at most 8), resp. up to 4",
    ),
)

BY_NAME: Dict[str, Option] = {option.name: option for option in OPTIONS}


def _refuse(option: Option, value: Any, error: type, why: str) -> None:
    none = ", or None" if option.default is None and option.name != "server" else ""
    raise error(f"{option.name}={value!r}: {why}; {option.name} takes {option.accepts()}{none}")


def _check_int(option: Option, value: Any) -> int:
    if isinstance(value, bool):
        _refuse(option, value, TypeError, "a bool is not a number here")
    try:
        number = operator.index(value)  # int, numpy and torch integers; never a float
    except TypeError:
        _refuse(option, value, TypeError, f"a {type(value).__name__} is not an int")
    low, high = option.range()
    if not low <= number <= high:
        raise ValueError(
            f"{option.name} must be >= {low} and <= {high}, got {value!r}"
            f"{'' if option.default is not None else ' (None: the default)'}"
        )
    return number


def _check_seconds(option: Option, value: Any) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        and not hasattr(value, "__float__")
    ):
        _refuse(option, value, TypeError, f"a {type(value).__name__} is not a number")
    seconds = float(value)
    if not (seconds >= 0 and math.isfinite(seconds)):
        raise ValueError(f"{option.name} must be >= 0 and finite (seconds), got {value!r}")
    return seconds


def check(option: Option, value: Any) -> Any:
    """`value` as the option takes it; TypeError or ValueError naming the argument, the
    value and what it accepts. None passes for every option whose default is None."""
    if value is None and option.name != "server":
        return option.default  # None: the default, whichever side's it is
    kind = option.kind
    if kind == "int":
        return _check_int(option, value)
    if kind == "seconds":
        return _check_seconds(option, value)
    if kind == "bool":
        if not isinstance(value, bool):
            # image=: the message's first words are the ones the Loader always said.
            raise TypeError(
                f"{option.name} must be True, False"
                f"{' or None' if option.default is None else ''}, got {value!r}"
            )
        return value
    if kind == "enum":
        enum_value(option.enum, value, option.name)  # TypeError / ValueError naming them
        return value
    if kind == "choice":
        if not isinstance(value, str):
            _refuse(option, value, TypeError, f"a {type(value).__name__} is not a str")
        if value not in option.choices or not (value is None or isinstance(value, str)):
            raise ValueError(f"{option.name} must be {option.accepts()}, got {value!r}")
        return value
    if kind == "fields":
        return tuple(field_specs(value))
    if kind == "group":
        return _check_group(option, value)
    if kind == "mix":
        return mix_points(value)
    if not isinstance(value, str):
        _refuse(option, value, TypeError, f"a {type(value).__name__} is not a str")
    if option.limit is not None:  # a length in bytes, as the server counts it (job_id)
        low, high = option.range()
        if not low <= len(value.encode()) <= high:
            raise ValueError(
                f"{option.name} must be {low} to {high} bytes long (UTF-8), "
                f"got {len(value.encode())}: {value[:40]!r}..."
            )
    return value


def _mix_weights(where: str, weights: Any) -> Dict[str, float]:
    if not isinstance(weights, dict) or not weights:
        raise TypeError(
            f"mix: {where} is a dict of weights by dataset name, e.g. "
            f'{{"laion": 0.7, "coco": 0.3}}, got {weights!r}'
        )
    out = {}
    for name, weight in weights.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"mix: {where}: a dataset name is a non-empty str, got {name!r}")
        if isinstance(weight, bool) or not isinstance(weight, (int, float)):
            raise TypeError(f"mix: {where}: the weight of {name!r} is a number, got {weight!r}")
        if not (math.isfinite(weight) and weight >= 0):
            raise ValueError(
                f"mix: {where}: the weight of {name!r} is {weight!r}; weights are finite "
                "numbers >= 0"
            )
        out[name] = float(weight)
    if len(out) > LIMITS["mix_datasets"][1]:
        raise ValueError(
            f"mix: {where} names {len(out)} datasets; at most "
            f"{LIMITS['mix_datasets'][1]} may be mixed"
        )
    if not any(w > 0 for w in out.values()):
        raise ValueError(f"mix: {where}: the weights are all 0; they must sum to > 0")
    return out


def mix_points(mix: Any) -> List[Tuple[int, Dict[str, float]]]:
    """The `mix` keyword as a schedule [(step, {name: weight})]: a dict is one point at
    step 0. TypeError or ValueError naming what is wrong; the server checks the rest
    (names it serves, steps increasing, the same names at every point)."""
    if isinstance(mix, dict):
        return [(0, _mix_weights("the weights", mix))]
    if isinstance(mix, (str, bytes)) or not isinstance(mix, (list, tuple)) or not mix:
        raise TypeError(
            f"mix={mix!r}: mix takes a dict of weights by dataset name or a non-empty list "
            "of (step, dict) points"
        )
    points = []
    for point in mix:
        if not isinstance(point, (list, tuple)) or len(point) != 2:
            raise TypeError(f"mix: a schedule point is (step, {{name: weight}}), got {point!r}")
        step, weights = point
        if isinstance(step, bool) or not isinstance(step, int):
            raise TypeError(f"mix: a schedule point's step is an int, got {step!r}")
        low, high = LIMITS["mix_step"]
        if not low <= step <= high:
            raise ValueError(f"mix: step {step} is outside [{low}, {high}]")
        points.append((step, _mix_weights(f"the point at step {step}", weights)))
    for (a, _), (b, _) in zip(points, points[1:]):
        if b <= a:
            raise ValueError(f"mix: the schedule's steps must increase, got {a} then {b}")
    return points


def _check_group(option: Option, value: Any) -> Any:
    dist = torch.distributed
    group_type = getattr(dist, "ProcessGroup", None) if dist.is_available() else None
    if group_type is None or not isinstance(value, group_type):
        _refuse(option, value, TypeError, f"a {type(value).__name__} is not a process group")
    return value


def field_specs(fields: Optional[Sequence[str]]) -> list:
    """The `fields` keyword as the wire's list of specs; TypeError for a str (fields="txt"
    would ask for the fields "t", "x" and "t") or an element that is not one; ValueError for
    a spec the server would refuse (the server's own parser names what is wrong)."""
    if fields is None:
        return []
    if isinstance(fields, (str, bytes)):
        raise TypeError(
            f"fields must be a tuple of field specs, e.g. fields=({fields!r},), not a "
            f"{type(fields).__name__}: a string would be read as its letters"
        )
    try:
        specs = list(fields)
    except TypeError:
        raise TypeError(
            f"fields={fields!r}: fields must be a tuple of field specs, e.g. "
            "fields=('txt',), or None"
        ) from None
    for spec in specs:
        if not isinstance(spec, str):
            raise TypeError(
                f"fields: each field spec is a str (e.g. 'txt', 'json?', "
                f"'jpg;png'), got {spec!r}"
            )
    _native.check_field_specs(specs)
    return specs


def bind(server: Any, keywords: Dict[str, Any]) -> Dict[str, Any]:
    """Every option's value from the Loader's call: the given ones checked (in the
    table's order, so the first bad one is named), the others their defaults; then the
    checks between options. TypeError for a keyword the Loader does not take."""
    unknown = sorted(set(keywords) - set(BY_NAME) | ({"server"} & set(keywords)))
    if unknown:
        raise TypeError(f"Loader() got an unexpected keyword argument {unknown[0]!r}")
    values = {"server": check(BY_NAME["server"], server)}
    for option in OPTIONS[1:]:
        values[option.name] = check(option, keywords.get(option.name, option.default))
    _check_together(values)
    return values


def _check_together(values: Dict[str, Any]) -> None:
    """The rules between options, before anything connects."""
    _map_dataloader_keywords(values)
    if values["mix"] is not None:
        if values["dataset"] is not None:
            raise ValueError(
                f"dataset={values['dataset']!r} and mix: a job reads one dataset or a "
                "mixture; pass one of them"
            )
        if values["split"] == "shard":
            raise ValueError(
                "split='shard' with mix: a mixture is dealt as split='sample' "
                "(exactly-once within each dataset's pass); leave split unset"
            )
    elif values["samples_per_epoch"] is not None:
        raise ValueError(
            f"samples_per_epoch={values['samples_per_epoch']!r} is a mixture's epoch "
            "length: give it with mix"
        )
    decode, threads = values["decode"], values["decode_threads"]
    if threads is not None and decode is None:
        raise ValueError(
            f"decode_threads={threads!r}: give it with decode='cpu' or 'cuda' "
            "(decode=None: the server decodes)"
        )
    if values["image"] is False:
        if not values["fields"]:
            raise ValueError(
                "image=False asks for the fields alone, and fields is empty: "
                "name at least one field, e.g. fields=('txt',) (the server's "
                "rule: a job without images asks for at least one field)"
            )
        if decode is not None:
            raise ValueError(
                f"decode={decode!r} says where images are decoded, and "
                "image=False asks for none: leave decode unset"
            )
    if decode == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            "decode='cuda' but CUDA is not available to torch: use "
            "decode='cpu' (the same bytes as the server's) or decode=None"
        )
    resize, crop = values["resize"], values["crop"]
    if (
        values["transform"] == "center"
        and resize is not None
        and crop is not None
        and resize < crop
    ):
        raise ValueError(
            f"resize={resize} is smaller than crop={crop}: transform 'center' "
            "resizes the short side, then crops"
        )


def _map_dataloader_keywords(values: Dict[str, Any]) -> None:
    """DataLoader's shuffle= and drop_last= as the job's remainder, shuffle_shards and
    shuffle_buffer; ValueError when both spellings are given and disagree."""
    shuffle, drop_last = values["shuffle"], values["drop_last"]
    if drop_last is not None:
        meant = "drop" if drop_last else "pad"
        if values["remainder"] is not None and values["remainder"] != meant:
            raise ValueError(
                f"drop_last={drop_last} means remainder={meant!r}, but "
                f"remainder={values['remainder']!r} was given: pass one of them"
            )
        values["remainder"] = meant
    if shuffle is not None:
        shards, buffer = values["shuffle_shards"], values["shuffle_buffer"]
        if shards is not None and shards != shuffle:
            raise ValueError(
                f"shuffle={shuffle} and shuffle_shards={shards} disagree: " "pass one of them"
            )
        if buffer is not None and (buffer > 0) != shuffle:
            raise ValueError(
                f"shuffle={shuffle} and shuffle_buffer={buffer} disagree: " "pass one of them"
            )
        values["shuffle_shards"] = shuffle
        if buffer is None:
            values["shuffle_buffer"] = SHUFFLE_BUFFER_FOR_SHUFFLE if shuffle else 0


def check_rank(rank: int, world_size: int) -> None:
    """The rank within the world, once both are known (given or from torch.distributed)."""
    check(BY_NAME["rank"], rank)
    check(BY_NAME["world_size"], world_size)
    if rank >= world_size:
        raise ValueError(
            f"rank={rank} is not below world_size={world_size}: rank takes an "
            f"int in [0, {world_size - 1}]"
        )


def _set_path(message: Any, path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    for name in parents:
        message = getattr(message, name)
    field = getattr(message, leaf)
    if hasattr(field, "extend"):
        field.extend(value)
    else:
        setattr(message, leaf, value)


def job_request(
    values: Dict[str, Any], job_id: str, rank: int, world_size: int
) -> "pb.RegisterRequest":
    """The RegisterRequest of the options whose target is the job: each given value as
    given, the others unset (the server's defaults). The delivery is the native client's
    to name (rank_stream.cc, from StreamOptions.decode)."""
    job = pb.RegisterRequest(job_id=job_id, rank=rank, world_size=world_size)
    for option in OPTIONS:
        value = values[option.name]
        if value is None or not option.target.startswith(_J):
            continue
        if option.kind == "enum":
            value = enum_value(option.enum, value, option.name)
        if option.kind == "mix":
            value = [
                pb.MixPoint(
                    step=step,
                    weights=[pb.MixWeight(dataset=n, weight=w) for n, w in weights.items()],
                )
                for step, weights in value
            ]
        _set_path(job, option.target[len(_J) :], value)
    return job


def stream_options(values: Dict[str, Any]) -> "_native.StreamOptions":
    """The native client's StreamOptions of the options whose target is the stream; those
    left None keep StreamOptions' own defaults (stream_settings.h)."""
    options = _native.StreamOptions()
    for option in OPTIONS:
        value = values[option.name]
        if value is not None and option.target.startswith(_S):
            setattr(options, option.target[len(_S) :], value)
    options.decode = NATIVE_DECODE[values["decode"]]
    # The receiving thread joins the pixels into one block for the tensor; pinned
    # batches are copied from the received pieces into the pinned memory instead.
    options.join_images = not values["pin_memory"]
    return options


def security(values: Dict[str, Any]) -> "_native.Security":
    """TLS and the token by the C++ clients' one rule (client/rpc/client_security.h):
    TLS when tls, tls_ca or tls_cert is given (tls_ca: default the system's roots), files
    read as they read them, the token given or else $SHARDCAST_TOKEN's."""
    return _native.client_security(
        **{o.name: values[o.name] for o in OPTIONS if o.target == "security"}
    )


# docs/python.md's table of arguments lies between these lines (generate_options_doc.py).
DOC_TABLE_BEGIN = (
    "<!-- The Loader's arguments: rendered from python/shardcast/options.py by "
    "python/generate_options_doc.py; edit the table there. -->"
)
DOC_TABLE_END = "<!-- end of the Loader's arguments -->"


def _doc_type(option: Option) -> str:
    return option.accepts().replace("|", "\\|")


def markdown_table() -> str:
    """docs/python.md's table of the Loader's arguments."""
    lines = ["| argument | accepts | default | meaning |", "|---|---|---|---|"]
    for option in OPTIONS:
        lines.append(
            f"| `{option.name}` | {_doc_type(option)} | "
            f"{option.described_default()} | {option.doc} |"
        )
    return "\n".join(lines) + "\n"


def docstring_section() -> str:
    """help(Loader)'s list of arguments."""
    lines = ["Arguments (shardcast.options.OPTIONS; None: the default named):", ""]
    for option in OPTIONS:
        head = f"{option.name}: {option.accepts()}; default {option.described_default()}."
        lines += textwrap.wrap(head, 84, initial_indent="    ", subsequent_indent="        ")
        lines += textwrap.wrap(
            option.doc, 84, initial_indent="        ", subsequent_indent="        "
        )
    return "\n".join(lines) + "\n"
