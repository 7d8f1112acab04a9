#!/usr/bin/python3
"""Python reference for bench/decode_bench: the seed's per-sample decode+transform,
single-threaded, on the same JPEG files (read into memory first, as the C++ side).

Usage: /usr/bin/python3 bench/python_reference_decode.py --dir DIR [--seconds S] [--rounds R]
Prints "images_per_s NAME VALUE" lines:
  PIL+torchvision(Resize256,CenterCrop224)->uint8
      PIL decode, torchvision Resize(256)+CenterCrop(224) on the PIL image, PILToTensor:
      the same output as ours (uint8 CHW); the ratio target is against this one.
  seed-torchrgb(float,Resize256,CenterCrop224)
      webdataset .decode("torchrgb") (PIL -> float32/255 CHW tensor), then the seed's
      Resize(256)+CenterCrop(224) on the tensor.
"""
import argparse
import io
import os
import time
import warnings

import numpy as np
import torch
import torchvision.transforms as T
from PIL import Image


def measure_once(files, seconds, fn):
    # Thread CPU time, as the C++ side: the machine is shared and the target is
    # per core. torch.set_num_threads(1) keeps all the work on this thread.
    n, start = 0, time.thread_time()
    while True:
        for b in files:
            fn(b)
        n += len(files)
        elapsed = time.thread_time() - start
        if elapsed >= seconds:
            return n / elapsed


def measure(files, seconds, rounds, fn):
    """Best of `rounds` (contention only slows a round down), after a warm-up pass."""
    for b in files:
        fn(b)
    return max(measure_once(files, seconds, fn) for _ in range(rounds))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    names = sorted(f for f in os.listdir(args.dir) if f.lower().endswith((".jpg", ".jpeg")))
    files = []
    for f in names:
        with open(os.path.join(args.dir, f), "rb") as fh:
            files.append(fh.read())

    pil_pipeline = T.Compose([T.Resize(256), T.CenterCrop(224), T.PILToTensor()])

    def pil(b):
        with Image.open(io.BytesIO(b)) as im:
            out = pil_pipeline(im.convert("RGB"))
        assert out.shape == (3, 224, 224) and out.dtype == torch.uint8

    tensor_pipeline = T.Compose([T.Resize(256), T.CenterCrop(224)])

    def seed_torchrgb(b):
        with Image.open(io.BytesIO(b)) as im:
            a = np.asarray(im.convert("RGB")).astype(np.float32) / 255.0
        t = torch.from_numpy(a.transpose(2, 0, 1).copy())
        out = tensor_pipeline(t)
        assert out.shape == (3, 224, 224)

    print(
        f"images_per_s PIL+torchvision(Resize256,CenterCrop224)->uint8 "
        f"{measure(files, args.seconds, args.rounds, pil):.1f}",
        flush=True,
    )
    print(
        f"images_per_s seed-torchrgb(float,Resize256,CenterCrop224) "
        f"{measure(files, args.seconds, args.rounds, seed_torchrgb):.1f}",
        flush=True,
    )


if __name__ == "__main__":
    main()
