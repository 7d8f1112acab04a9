#!/usr/bin/python3
"""Makes a corpus of ImageNet-like JPEGs from real photographs, for the decode benchmarks.

The photographs are Debian's plasma-workspace-wallpapers (KDE's wallpapers, 2560x1600 to
5120x2880; `apt-get install --no-install-recommends plasma-workspace-wallpapers`). Each
output image is a crop of one of them (aspect 3/4..4/3, 30-100 % of the short side),
resized (Lanczos) to a short side of 250-500 px and saved as a baseline JPEG, quality
75-95, 4:2:0: ImageNet's shapes and file sizes from real camera content, where generated
images (bench/decode_bench --generate) have synthetic texture. Deterministic: the same
--seed and --count give the same bytes. The images are not committed; make them with

  /usr/bin/python3 bench/make_photo_corpus.py --out /tmp/photos [--count 400] [--seed 1]
"""
import argparse
import os
import random
import sys

from PIL import Image

WALLPAPERS = "/usr/share/wallpapers"
# The package's photographs; Flow, Honeywave and PastelHills are renders/illustrations,
# and the PNG wallpapers are artwork, so neither is used.
PHOTOS = [
    "Autumn/contents/images/2560x1600.jpg",
    "BytheWater/contents/images/2560x1600.jpg",
    "ColdRipple/contents/images/2560x1600.jpg",
    "ColorfulCups/contents/images/2560x1600.jpg",
    "DarkestHour/contents/images/2560x1600.jpg",
    "EveningGlow/contents/images/2560x1600.jpg",
    "FallenLeaf/contents/images/2560x1600.jpg",
    "Grey/contents/images/2560x1600.jpg",
    "Kite/contents/images/2560x1600.jpg",
    "OneStandsOut/contents/images/2560x1600.jpg",
    "Path/contents/images/2560x1600.jpg",
    "SafeLanding/contents/images/5120x2880.jpg",
    "Shell/contents/images/5120x2880.jpg",
    "Volna/contents/images/5120x2880.jpg",
    "summer_1am/contents/images/2560x1600.jpg",
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="directory to write photo_NNNNN.jpg into")
    ap.add_argument("--count", type=int, default=400)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--wallpapers", default=WALLPAPERS)
    args = ap.parse_args()
    sources = []
    for rel in PHOTOS:
        path = os.path.join(args.wallpapers, rel)
        if not os.path.exists(path):
            sys.exit(
                f"{path} is missing: apt-get install --no-install-recommends "
                "plasma-workspace-wallpapers"
            )
        sources.append(Image.open(path).convert("RGB"))
    os.makedirs(args.out, exist_ok=True)
    total = 0
    for i in range(args.count):
        rng = random.Random(args.seed * 1_000_003 + i)
        src = sources[i % len(sources)]
        sw, sh = src.size
        aspect = rng.uniform(3 / 4, 4 / 3)  # crop width / height
        side = rng.uniform(0.3, 1.0) * min(sw, sh)
        cw = min(sw, int(side * aspect**0.5))
        ch = min(sh, int(side / aspect**0.5))
        left, top = rng.randrange(sw - cw + 1), rng.randrange(sh - ch + 1)
        short = rng.randint(250, 500)
        if cw <= ch:
            size = (short, max(1, round(ch * short / cw)))
        else:
            size = (max(1, round(cw * short / ch)), short)
        img = src.crop((left, top, left + cw, top + ch)).resize(size, Image.LANCZOS)
        path = os.path.join(args.out, f"photo_{i:05d}.jpg")
        img.save(
            path,
            "JPEG",
            quality=rng.randint(75, 95),
            subsampling="4:2:0",
            progressive=False,
            optimize=False,
        )
        total += os.path.getsize(path)
    print(f"{args.count} JPEGs in {args.out}, mean {total / args.count / 1024:.1f} KB")


if __name__ == "__main__":
    main()
