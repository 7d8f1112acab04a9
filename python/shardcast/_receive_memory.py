"""Keeps the memory received batches arrive in warm (client/protocol/receive_memory.h).

gRPC reads each batch (~5 MB) into blocks it mallocs and frees once the batch is
consumed, and the batch's bytes object is another such block. glibc's default tuning
maps those blocks afresh or trims them from the heap, so every batch lands in pages
faulted in again, which on virtual machines costs more than the copy itself. Raising
glibc's mmap and trim thresholds, as the C++ client does, keeps freed blocks for the
next batch. Process-wide, once; without glibc it does nothing.
"""

import ctypes
import threading
from typing import Optional

# The C++ client's values (kHeapBlockLimitBytes, kHeapTrimThresholdBytes).
HEAP_BLOCK_LIMIT_BYTES = 32 << 20
HEAP_TRIM_THRESHOLD_BYTES = 128 << 20
# <malloc.h>
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

_lock = threading.Lock()
_applied: Optional[bool] = None


def keep_receive_buffers_warm() -> bool:
    """Sets glibc's thresholds once per process; returns whether glibc took them."""
    global _applied
    with _lock:
        if _applied is None:
            _applied = _set_thresholds()
        return _applied


def _set_thresholds() -> bool:
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # glibc's; other libcs' mallopt take other options
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return (
        mallopt(_M_MMAP_THRESHOLD, HEAP_BLOCK_LIMIT_BYTES) == 1
        and mallopt(_M_TRIM_THRESHOLD, HEAP_TRIM_THRESHOLD_BYTES) == 1
    )
