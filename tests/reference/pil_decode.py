#!/usr/bin/python3
"""Reference decode for shardcast's image tests: PIL Image.open(path).convert("RGB"),
written as raw interleaved RGB, with "W H" printed. Run with /usr/bin/python3.

Usage: pil_decode.py IN_IMAGE OUT_RAW
"""
import sys

from PIL import Image

with Image.open(sys.argv[1]) as im:
    mode = im.mode
    rgb = im.convert("RGB")
with open(sys.argv[2], "wb") as f:
    f.write(rgb.tobytes())
print(rgb.width, rgb.height, mode)
