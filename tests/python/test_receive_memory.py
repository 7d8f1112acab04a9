"""keep_receive_buffers_warm: blocks a stream of received batches frees are reused warm,
as the C++ client's test (tests/client/decode/receive_memory_test.cc) checks there.

Run in a child interpreter so the thresholds it sets start from glibc's defaults and
leave this process's alone."""

import subprocess
import sys
import textwrap

from conftest import BUILD
from server_process import python_env

# The C++ test's pattern: batches of 64 KB .. 4 MB blocks, `window` held, oldest freed.
CHILD = textwrap.dedent(
    """
    import ctypes, resource, sys
    from shardcast._native import keep_receive_buffers_warm

    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    BATCH, WARMUP, MEASURED = 4816896, 50, 200

    def faults():
        return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt

    def faults_per_stream(window):
        held, random, start = [], 1, 0
        for b in range(WARMUP + MEASURED):
            if b == WARMUP:
                start = faults()
            batch, total = [], 0
            while total < BATCH:
                random = (random * 1664525 + 1013904223) % 2**32
                size = (64 << 10) << ((random >> 16) % 7)
                p = libc.malloc(size)
                ctypes.memset(p, b & 0xFF, size)
                batch.append(p)
                total += size
            held.append(batch)
            if len(held) > window:
                for p in held.pop(0):
                    libc.free(p)
        measured = faults() - start
        for batch in held:
            for p in batch:
                libc.free(p)
        return measured

    applied = keep_receive_buffers_warm()
    print(applied, keep_receive_buffers_warm(), faults_per_stream(2), faults_per_stream(4))
    """
)


def test_a_stream_of_batches_reuses_warm_pages() -> None:
    out = subprocess.run(
        [sys.executable, "-c", CHILD],
        env=python_env(BUILD),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out[:2] == ["True", "True"], out
    # Untuned, glibc faults 30-38 thousand pages over the measured batches; warm, about
    # 2 thousand. The bound: a twentieth of the pages those batches wrote.
    bound = 200 * (4816896 // 4096) // 20
    assert int(out[2]) < bound, f"window 2: {out[2]} page faults"
    assert int(out[3]) < bound, f"window 4: {out[3]} page faults"
