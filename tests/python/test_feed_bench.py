"""The feed benchmark's own logic (bench/feed_bench.py), without training a model: the
CPU it counts for the trainer and the server, the encoded-cuda row skipped with its
reason where there is no CUDA, and the table those rows make. The rows themselves run
end to end in `REHEARSE=1 tools/gpu/device.sh all` and on a GPU machine."""

import argparse
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "feed_bench.py"
spec = importlib.util.spec_from_file_location("feed_bench", BENCH)
feed_bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(feed_bench)

# A child that spends 0.5 s of CPU, then says so and waits to be told to end.
BUSY_CHILD = """
import sys, time
while time.process_time() < 0.5:
    pass
print("busy done", flush=True)
sys.stdin.read()
"""


def test_process_tree_cpu_counts_live_descendants_and_leaves_out_the_excluded():
    before = feed_bench.process_tree_cpu_seconds(os.getpid())
    child = subprocess.Popen(
        [sys.executable, "-c", BUSY_CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline().strip() == "busy done"
        with_child = feed_bench.process_tree_cpu_seconds(os.getpid()) - before
        without_child = feed_bench.process_tree_cpu_seconds(os.getpid(), exclude=child.pid)
        child_alone = feed_bench.process_tree_cpu_seconds(child.pid)
    finally:
        child.communicate("")
    tick = 0.011  # /proc counts in 10 ms ticks
    assert child_alone >= 0.45
    assert with_child >= child_alone - tick
    assert without_child - before < with_child - child_alone + 0.05
    # Reaped, its CPU counts as this process's children's.
    assert feed_bench.process_tree_cpu_seconds(os.getpid()) - before >= child_alone - tick


def test_a_process_gone_counts_nothing():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert feed_bench.process_tree_cpu_seconds(child.pid) == 0.0


def test_the_cuda_row_says_why_it_cannot_run_on_the_cpu():
    reason = feed_bench.cuda_missing(argparse.Namespace(device="cpu"))
    assert reason == "the model runs on cpu, not CUDA"


def test_the_table_has_the_encoded_rows_their_server_figures_and_the_skip(capsys):
    served = {
        "server_cpu_us_per_image": 41.0,
        "wire_bytes_per_image": 30512.0,
        "server_waited_for_batches_s": 0.25,
        "server_waited_for_client_s": 4.0,
    }
    a = argparse.Namespace(
        workers=2,
        rows=["ceiling", "loader", "encoded-cpu", "encoded-cuda"],
        results={
            "ceiling": {"images_per_s": 100.0, "wait_share": 0.0, "client_cpu_us_per_image": 900.0},
            "loader": {
                "images_per_s": 50.0,
                "wait_share": 0.5,
                "client_cpu_us_per_image": 1200.0,
                **served,
                "server_cpu_us_per_image": 2500.0,
                "wire_bytes_per_image": 150540.0,
            },
            "encoded-cpu": {
                "images_per_s": 80.0,
                "wait_share": 0.1,
                "client_cpu_us_per_image": 3100.0,
                **served,
            },
        },
        skipped={"encoded-cuda": "no CUDA device here"},
    )
    feed_bench.print_table(a)
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split(" | ")[0].lstrip("| "): line for line in lines if line.startswith("| ")}
    assert rows["shardcast-server + shardcast.Loader"] == (
        "| shardcast-server + shardcast.Loader | 50 | 0.50 | 50 % | 1,200 us | 2,500 us | "
        "150,540 | 0.2 s / 4.0 s |"
    )
    assert rows['encoded + decode cpu (Loader, decode="cpu")'] == (
        '| encoded + decode cpu (Loader, decode="cpu") | 80 | 0.80 | 10 % | 3,100 us | '
        "41 us | 30,512 | 0.2 s / 4.0 s |"
    )
    assert "skipped: no CUDA device here" in rows['encoded + decode cuda (Loader, decode="cuda")']
    # The ceiling has no server figures.
    assert rows["one batch kept on the device (ceiling)"].endswith("| 900 us |  |  |  |")
