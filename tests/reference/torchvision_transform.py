#!/usr/bin/python3
"""Reference for shardcast's image transforms: runs torchvision on the SAME decoded
pixels the C++ test hands over (raw interleaved RGB files) and writes raw planar
uint8 results back. Run by tests/common/image_transform_test.cc with Debian's
/usr/bin/python3 (torch 1.13, torchvision 0.14).

Usage: torchvision_transform.py JOBS.json
JOBS.json: a list of jobs, each
  {"op": "center", "input": raw RGB HWC path, "width": W, "height": H,
   "resize": S, "crop": C, "output": path}
  {"op": "resized_crop", ..., "top": i, "left": j, "crop_height": h, "crop_width": w,
   "crop": C, "flip": bool, "output": path}
Output: C*C*3 bytes, CHW uint8, as torchvision returns for a uint8 tensor.
Exit status 3 when torchvision is missing (the test skips then).
"""
import json
import sys

try:
    import torch
    import torchvision.transforms as T
    import torchvision.transforms.functional as F
except ImportError as e:  # pragma: no cover
    print(f"torchvision unavailable: {e}")
    sys.exit(3)


def load(job):
    with open(job["input"], "rb") as f:
        data = f.read()
    h, w = job["height"], job["width"]
    t = torch.frombuffer(bytearray(data), dtype=torch.uint8).reshape(h, w, 3)
    return t.permute(2, 0, 1).contiguous()  # CHW uint8, as decode_image gives


def transform(img, job):
    """torchvision's result for `job` on `img` (CHW uint8 tensor); also used by
    bench/photo_conformance.py."""
    if job["op"] == "center":
        tf = T.Compose([T.Resize(job["resize"], antialias=True), T.CenterCrop(job["crop"])])
        out = tf(img)
    elif job["op"] == "resized_crop":
        out = F.resized_crop(
            img,
            job["top"],
            job["left"],
            job["crop_height"],
            job["crop_width"],
            [job["crop"], job["crop"]],
            antialias=True,
        )
        if job["flip"]:
            out = F.hflip(out)
    else:
        raise ValueError(job["op"])
    assert out.dtype == torch.uint8 and out.shape == (3, job["crop"], job["crop"]), out.shape
    return out


def main():
    torch.set_num_threads(1)
    with open(sys.argv[1]) as f:
        jobs = json.load(f)
    for job in jobs:
        out = transform(load(job), job)
        with open(job["output"], "wb") as f:
            f.write(out.contiguous().numpy().tobytes())
    print(f"{len(jobs)} jobs done")


if __name__ == "__main__":
    main()
