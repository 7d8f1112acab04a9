"""Every wait of the Loader wakes on Ctrl-C and on close(): registering with a server that
never answers, and next() on a stream that never delivers, raise KeyboardInterrupt
within a moment of SIGINT (before, only when the native wait ended: up to
`reconnect_deadline` or twice `stream_timeout`, 120 s each by default); close() from
another thread ends a next() blocked in the training thread with LoaderClosedError.

The waits are made by the hostile server (hostile_server.py), which holds the call open
and answers nothing. The bounds below are generous next to those defaults: they tell a
wait that was woken from one that ran out, not how fast waking is.
"""

import select
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import hostile_server
import shardcast
from conftest import BUILD
from server_process import python_env

# Waits of the defaults' length, so that only an interrupt can end them in the test.
LONG = dict(
    job_id="interrupted",
    batch_size=2,
    world_size=1,
    rank=0,
    reconnect_deadline=120,
    stream_timeout=120,
)

# The child restores Python's own SIGINT handler: a process started in the background
# by a non-interactive shell (a CI script's `cmd &`) inherits SIGINT ignored, and Python
# then installs no KeyboardInterrupt handler at all; an interactive user's has one.
CHILD = textwrap.dedent(
    """
    import signal
    import sys
    signal.signal(signal.SIGINT, signal.default_int_handler)
    import shardcast
    print("waiting", flush=True)
    try:
        loader = shardcast.Loader(sys.argv[1], **{LONG!r})
        print("registered", flush=True)
        next(iter(loader))
    except KeyboardInterrupt:
        print("KeyboardInterrupt", flush=True)
        sys.exit(3)
    print("no interrupt", flush=True)
"""
).replace("{LONG!r}", repr(LONG))


def interrupt_child(address: str, wait_for: str) -> None:
    """Runs the child against `address` until it prints `wait_for`, lets it settle into
    its wait, sends SIGINT and checks that it exits with KeyboardInterrupt soon."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, address],
        env=python_env(BUILD),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = []
        while wait_for not in lines:
            ready, _, _ = select.select([child.stdout], [], [], 60)
            assert ready, f"the child printed {lines} and nothing more"
            line = child.stdout.readline()
            assert line, f"the child exited: {lines} {child.stderr.read()[-2000:]}"
            lines.append(line.strip())
        time.sleep(1.0)  # inside the native wait by now
        sent = time.monotonic()
        child.send_signal(signal.SIGINT)
        try:
            rc = child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pytest.fail("SIGINT was not acted on within 10 s: the native wait ignores it")
        woke = time.monotonic() - sent
        out = child.stdout.read()
        assert (rc, out.strip()) == (3, "KeyboardInterrupt"), (rc, out, child.stderr.read())
        assert woke < 10
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()
        child.stderr.close()


def test_ctrl_c_while_registering_raises_keyboard_interrupt():
    with hostile_server.HostileServer() as server:
        server._register = server.stall_register  # Register is never answered
        interrupt_child(server.address, "waiting")
        assert server.registers >= 1


def test_ctrl_c_while_next_waits_raises_keyboard_interrupt():
    with hostile_server.HostileServer() as server:  # StreamBatches never sends a batch
        interrupt_child(server.address, "registered")
        assert server.streams >= 1


def test_close_from_another_thread_wakes_a_blocked_next():
    with hostile_server.HostileServer() as server:
        loader = shardcast.Loader(server.address, **LONG)
        it = iter(loader)
        closer = threading.Timer(1.0, loader.close)
        closer.start()
        start = time.monotonic()
        try:
            with pytest.raises(shardcast.LoaderClosedError, match="closed"):
                next(it)
        finally:
            closer.join()
            loader.close()  # again: nothing happens
        assert time.monotonic() - start < 10
        # The loader stays closed: iterating again says so.
        with pytest.raises(shardcast.LoaderClosedError):
            iter(loader)


# close() from a daemon thread while the main thread's next() waits: next() raises at
# once, the main thread exits while the closer may still be inside close(), and Python
# ends that thread as it finalizes. Before, the process then aborted ("terminate called
# without an active exception", exit status 134): the thread took the GIL back in a
# destructor (issue 44).
CLOSE_CHILD = textwrap.dedent(
    """
    import sys
    import threading
    import time
    import shardcast
    loader = shardcast.Loader(sys.argv[1], **{LONG!r})
    it = iter(loader)
    threading.Thread(target=lambda: (time.sleep(1.0), loader.close()), daemon=True).start()
    try:
        next(it)
    except shardcast.LoaderClosedError:
        print("LoaderClosedError", flush=True)
"""
).replace("{LONG!r}", repr(LONG))


def test_close_from_another_thread_lets_the_process_exit_cleanly():
    with hostile_server.HostileServer() as server:  # StreamBatches never sends a batch
        for _ in range(3):  # the abort came from a race with the exit: try it a few times
            run = subprocess.run(
                [sys.executable, "-c", CLOSE_CHILD, server.address],
                env=python_env(BUILD),
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert (run.returncode, run.stdout.strip()) == (0, "LoaderClosedError"), run
            assert "terminate called" not in run.stderr, run.stderr
