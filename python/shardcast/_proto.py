"""The generated stubs of proto/shardcast/v1/shardcast.proto, and the job enums by name.

Enum names come from the proto itself (SPLIT_SHARD -> "shard"), so a value added to the
proto is accepted here without a hand-kept list.
"""

from typing import List, Optional

try:
    from shardcast.v1 import shardcast_pb2 as pb
except ImportError as e:
    raise ImportError(
        "shardcast's generated stubs (shardcast.v1.shardcast_pb2) are missing: install the "
        "package with pip (it generates them), or run tools/python-stubs.sh and put "
        "build/python on PYTHONPATH next to python/ (docs/python.md)"
    ) from e

# Full gRPC method paths, from the service descriptor.
_SERVICE = pb.DESCRIPTOR.services_by_name["Shardcast"]
REGISTER_METHOD = f"/{_SERVICE.full_name}/Register"
STREAM_BATCHES_METHOD = f"/{_SERVICE.full_name}/StreamBatches"


def _prefix(enum) -> str:
    # Every job enum's zero value is PREFIX_UNSPECIFIED ("server default").
    return enum.Name(0)[: -len("UNSPECIFIED")]


def enum_names(enum) -> List[str]:
    """The names a caller may use for `enum`: "shard", "sample", ... (no "unspecified")."""
    prefix = _prefix(enum)
    return [name.replace(prefix, "", 1).lower() for name in enum.keys() if enum.Value(name) != 0]


def enum_value(enum, name: Optional[str], field: str) -> int:
    """`name` ("sample", case-insensitive) as the enum's number; None = 0 (server default).

    Raises ValueError naming the field and the accepted names.
    """
    if name is None:
        return 0
    if not isinstance(name, str):
        raise TypeError(
            f"{field} must be one of {', '.join(enum_names(enum))} (a str), " f"got {name!r}"
        )
    full = _prefix(enum) + name.upper()
    if full not in enum.keys() or enum.Value(full) == 0:
        raise ValueError(f"{field} must be one of {', '.join(enum_names(enum))}; got {name!r}")
    return enum.Value(full)


def enum_name(enum, value: int) -> str:
    """The caller-facing name of an enum number ("sample")."""
    return enum.Name(value).replace(_prefix(enum), "", 1).lower()
