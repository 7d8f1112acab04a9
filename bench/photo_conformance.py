#!/usr/bin/python3
"""Conformance from JPEG bytes: shardcast's DecodeAndTransform (region decoding, DCT
scaling on and off) against PIL's decode + torchvision on the same files.

  build/bench/decode_bench --dir DIR --dump-transforms OUT
  /usr/bin/python3 bench/photo_conformance.py OUT/jobs.json

For each (transform, DCT scaling) prints the mean absolute difference over all bytes,
the largest per-image mean, and the largest single difference, in levels of 255.
"""
import collections
import importlib.util
import json
import os
import sys

import numpy as np
import torch
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location(
    "torchvision_transform",
    os.path.join(HERE, "..", "tests", "reference", "torchvision_transform.py"),
)
reference = importlib.util.module_from_spec(spec)
spec.loader.exec_module(reference)


def main():
    torch.set_num_threads(1)
    with open(sys.argv[1]) as f:
        jobs = json.load(f)
    decoded = {}
    stats = collections.defaultdict(
        lambda: {"sum": 0.0, "n": 0, "worst_mean": 0.0, "max": 0, "images": 0}
    )
    for job in jobs:
        if job["jpeg"] not in decoded:
            decoded.clear()  # one file at a time: jobs come grouped by file
            pixels = np.asarray(Image.open(job["jpeg"]).convert("RGB"))
            decoded[job["jpeg"]] = torch.from_numpy(pixels.copy()).permute(2, 0, 1).contiguous()
        theirs = reference.transform(decoded[job["jpeg"]], job).numpy().astype(np.int32)
        with open(job["output"], "rb") as f:
            ours = np.frombuffer(f.read(), dtype=np.uint8).reshape(theirs.shape).astype(np.int32)
        diff = np.abs(ours - theirs)
        s = stats[(job["op"], job["dct"])]
        s["sum"] += float(diff.sum())
        s["n"] += diff.size
        s["worst_mean"] = max(s["worst_mean"], float(diff.mean()))
        s["max"] = max(s["max"], int(diff.max()))
        s["images"] += 1
    print(
        f"{'transform':<34} {'DCT':>4} {'images':>7} {'mean':>8} {'worst image mean':>17} "
        f"{'max':>4}"
    )
    for (op, dct), s in sorted(stats.items()):
        name = "Resize(256)+CenterCrop(224)" if op == "center" else "RandomResizedCrop(224)+flip"
        print(
            f"{name:<34} {'on' if dct else 'off':>4} {s['images']:>7} "
            f"{s['sum'] / s['n']:>8.4f} {s['worst_mean']:>17.4f} {s['max']:>4}"
        )


if __name__ == "__main__":
    main()
