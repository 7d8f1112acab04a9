"""shardcast: train from a shardcast-server in Python.

    loader = shardcast.Loader("host:50051", batch_size=64, split="sample")
    for images, labels, info in loader:       # one epoch: len(loader) batches
        x = shardcast.normalize(images, device)

See docs/python.md for the whole API and its guarantees.
"""

import pkgutil

# The generated stubs (shardcast.v1) may live in another sys.path entry than this
# folder: tools/python-stubs.sh writes them to build/python/shardcast/v1 for the
# PYTHONPATH route, so the package spans both folders.
__path__ = pkgutil.extend_path(__path__, __name__)

from shardcast.errors import (  # noqa: E402
    BatchCheckError,
    ForkedProcessError,
    JobChangedError,
    JobRefusedError,
    LoaderClosedError,
    ServerUnavailableError,
    StreamTimeoutError,
    ShardcastError,
)
from shardcast.loader import Batch, Loader, SampleInfo  # noqa: E402
from shardcast.normalize import IMAGENET_MEAN, IMAGENET_STD, normalize  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "BatchCheckError",
    "Batch",
    "ForkedProcessError",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "JobChangedError",
    "JobRefusedError",
    "Loader",
    "LoaderClosedError",
    "SampleInfo",
    "ServerUnavailableError",
    "StreamTimeoutError",
    "ShardcastError",
    "normalize",
]
