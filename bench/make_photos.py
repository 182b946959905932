"""Build an ImageNet-like dataset of real photographs for loader benchmarks.

Source: the 12 GPL-2+ nature photographs of the Debian package
``mate-backgrounds`` (see ``photo_sources.py``; fetched with
``apt-get download`` and unpacked with ``dpkg -x`` into
``bench/data/.debs``, nothing is installed).

Each output image is a deterministic crop (``random.Random(seed)``):
a random source photo, a random box of aspect 4:3 (landscape, ~80%) or 3:4
(portrait, ~20%) covering a random fraction of the largest such box
(never smaller than the output, so nothing is upscaled), resized with
Pillow LANCZOS to 500x375 or 375x500 and saved as a baseline JPEG, quality
90, 4:2:0 chroma subsampling -- about the size and encoding of an average
ImageNet training image.

Layout is torchvision ImageFolder: ``OUT/class_XX/img_NNNNN.jpg`` with 10
classes (class = crc32 of the index mod 10).  The run is idempotent: a
complete dataset with the same parameters is left alone; a partial one is
completed (only missing files are written).

``--scale 2`` makes the same crops at 1000x750 / 750x1000 (a high-resolution set, about
four times the decoding work per image); ``--scale 0.5`` at 250x188 / 188x250 (a set of
small photographs, where what a loader spends per sample weighs most).

Usage (Pillow required; use the bench venv):
    .venv-bench/bin/python bench/make_photos.py --out bench/data/photos --count 2000 --seed 0
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import zlib

from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import photo_sources  # noqa: E402

FORMAT_VERSION = 1
NUM_CLASSES = 10
LANDSCAPE = (500, 375)
PORTRAIT = (375, 500)
PORTRAIT_FRACTION = 0.2
MIN_AREA_FRACTION = 0.1
JPEG_OPTS = dict(format="JPEG", quality=90, subsampling=2, optimize=False, progressive=False)


def crop_box(rng: random.Random, size: tuple[int, int], out: tuple[int, int]):
    """Random box with the aspect of `out`, at least `out` in size, inside `size`."""
    w, h = size
    aspect = out[0] / out[1]
    if w / h > aspect:
        max_w, max_h = h * aspect, float(h)
    else:
        max_w, max_h = float(w), w / aspect
    min_area = max(MIN_AREA_FRACTION, (out[0] / max_w) ** 2)
    side = math.sqrt(rng.uniform(min(min_area, 1.0), 1.0))
    bw, bh = max_w * side, max_h * side
    x0 = rng.uniform(0.0, w - bw)
    y0 = rng.uniform(0.0, h - bh)
    return (x0, y0, x0 + bw, y0 + bh)


def plan(count: int, seed: int, sizes: dict[str, tuple[int, int]], scale: float = 1):
    """Yield (index, class, source name, box, output size); depends only on args."""
    rng = random.Random(seed)
    names = sorted(sizes)
    for i in range(count):
        name = rng.choice(names)
        out = PORTRAIT if rng.random() < PORTRAIT_FRACTION else LANDSCAPE
        out = (round(out[0] * scale), round(out[1] * scale))
        box = crop_box(rng, sizes[name], out)
        cls = zlib.crc32(str(i).encode()) % NUM_CLASSES
        yield i, cls, name, box, out


def rel_path(i: int, cls: int) -> str:
    return os.path.join(f"class_{cls:02d}", f"img_{i:05d}.jpg")


def dataset_stats(out_dir: str) -> tuple[int, int]:
    n = total = 0
    for dp, _, files in os.walk(out_dir):
        for f in files:
            if f.endswith(".jpg"):
                n += 1
                total += os.path.getsize(os.path.join(dp, f))
    return n, total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(photo_sources.BENCH_DIR, "data", "photos"))
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scale", type=float, default=1,
                    help="output sides times this (2: 1000x750, a high-resolution set; 0.5: 250x188)")
    ap.add_argument("--cache", default=photo_sources.DEFAULT_CACHE,
                    help="where the .deb is downloaded and unpacked")
    args = ap.parse_args()

    params = {"count": args.count, "seed": args.seed, "version": FORMAT_VERSION}
    if args.scale != 1:
        params["scale"] = args.scale
    marker = os.path.join(args.out, ".complete.json")
    if os.path.isfile(marker):
        with open(marker) as f:
            done = json.load(f)
        if done == params:
            n, total = dataset_stats(args.out)
            if n == args.count:
                print(f"{args.out}: already complete: {n} images, {total / 1e6:.1f} MB "
                      f"({total / n / 1e3:.1f} KB/image)")
                return 0
        os.remove(marker)

    paths = photo_sources.fetch_sources(args.cache)
    sizes = {}
    for name, p in paths.items():
        with Image.open(p) as im:
            sizes[name] = im.size
    decoded: dict[str, Image.Image] = {}
    expected = set()
    written = 0
    for i, cls, name, box, out in plan(args.count, args.seed, sizes, args.scale):
        rel = rel_path(i, cls)
        expected.add(rel)
        dst = os.path.join(args.out, rel)
        if os.path.isfile(dst):
            continue
        if name not in decoded:
            decoded[name] = Image.open(paths[name]).convert("RGB")
        img = decoded[name].resize(out, Image.Resampling.LANCZOS, box=box)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        tmp = dst + ".tmp"
        img.save(tmp, **JPEG_OPTS)
        os.replace(tmp, dst)
        written += 1
        if written % 500 == 0:
            print(f"  {written} written", file=sys.stderr)

    # Remove leftovers of a previous run with other parameters.
    for dp, _, files in os.walk(args.out):
        for f in files:
            rel = os.path.relpath(os.path.join(dp, f), args.out)
            if (f.endswith(".jpg") or f.endswith(".tmp")) and rel not in expected:
                os.remove(os.path.join(dp, f))

    with open(marker, "w") as f:
        json.dump(params, f)
    n, total = dataset_stats(args.out)
    print(f"{args.out}: {n} images ({written} new), {total / 1e6:.1f} MB "
          f"({total / n / 1e3:.1f} KB/image)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
