#!/usr/bin/python3
"""Reference decode of a directory for shardcast's image tests, in one process:
PIL Image.open(path).convert("RGB") of every file in DIR, written as raw interleaved RGB
to DIR/NAME.rgb, with "NAME W H MODE" printed per file (or "NAME error MESSAGE" when PIL
cannot open it). Run with /usr/bin/python3.

Usage: pil_decode_all.py DIR
"""
import os
import sys
import warnings

from PIL import Image

# PIL warns on palette images with tRNS ("should be converted to RGBA"): not an answer.
warnings.simplefilter("ignore")
directory = sys.argv[1]
for name in sorted(os.listdir(directory)):
    if name.endswith(".rgb"):
        continue
    try:
        with Image.open(os.path.join(directory, name)) as im:
            mode = im.mode
            rgb = im.convert("RGB")
    except Exception as e:  # noqa: BLE001 - any failure is the answer for this file
        print(name, "error", str(e).replace("\n", " "))
        continue
    with open(os.path.join(directory, name + ".rgb"), "wb") as f:
        f.write(rgb.tobytes())
    print(name, rgb.width, rgb.height, mode)
