"""The datasets of bench/gpu_train.py, made on the GPU machine from the 12 source
photographs (bench/photo_sources.py) with every core, so that only 7 MB of photographs
travel to it.

- ``photos``: the benchmark photographs of bench/make_photos.py (the same crops, 500x375
  and 375x500, JPEG quality 90, 4:2:0), ``--count`` of them.
- ``mp1`` and ``mp2``: ``--sized-count`` images each of 1-2 and 2-4 megapixels, made as
  ``large`` is: the sizes between, where the decoders' crossover is measured.
- ``large``: ``--large-count`` images of 4-12 megapixels (uniform in megapixels; 3:2, a
  fifth portrait), JPEG quality 90, 4:2:0, baseline: the size of the originals behind web
  and medical datasets. The sources have 1.3-4 megapixels, and a photograph enlarged 2-3x
  is smoother than a camera's (its file, and so its entropy decoding, shrinks with it), so
  each is a 2 x 2 mosaic of crops of the photographs at 1-1.3x their own scale: a
  camera's detail per pixel. Megabytes per image are printed.

Usage: python3 bench/gpu_data.py SOURCES OUT [--count 4000] [--large-count 768]
SOURCES is a folder holding the 12 photographs (as photo_sources.fetch_sources unpacks
them); OUT gets ``photos/``, ``large/``, ``mp1/`` and ``mp2/`` as ImageFolders of 10 classes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
from multiprocessing import Pool

from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_photos  # noqa: E402
import photo_sources  # noqa: E402

_SOURCES: dict[str, Image.Image] = {}


def _source(folder: str, name: str) -> Image.Image:
    if name not in _SOURCES:
        _SOURCES[name] = Image.open(os.path.join(folder, name)).convert("RGB")
    return _SOURCES[name]


Tile = tuple[str, tuple[float, float, float, float], tuple[int, int]]


def _write(job: tuple[str, str, list[Tile], tuple[int, int]]) -> int:
    folder, dst, tiles, out = job
    image = Image.new("RGB", out)
    for i, (name, box, size) in enumerate(tiles):
        tile = _source(folder, name).resize(size, Image.Resampling.BICUBIC, box=box)
        image.paste(tile, ((i % 2) * (out[0] // 2), (i // 2) * (out[1] // 2)))
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    image.save(dst, **make_photos.JPEG_OPTS)
    return os.path.getsize(dst)


def _box(rng: random.Random, size: tuple[int, int], out: tuple[int, int],
         scale: float) -> tuple[float, float, float, float]:
    """A box of `out` / `scale` source pixels (as much as fits, at out's aspect)."""
    w, h = size
    bw, bh = out[0] / scale, out[1] / scale
    shrink = min(1.0, w / bw, h / bh)
    bw, bh = bw * shrink, bh * shrink
    x0, y0 = rng.uniform(0.0, w - bw), rng.uniform(0.0, h - bh)
    return (x0, y0, x0 + bw, y0 + bh)


def large_plan(count: int, seed: int, sizes: dict[str, tuple[int, int]],
               megapixels: tuple[float, float] = (4.0, 12.0)):
    """(index, class, tiles, output size) of a set of mosaics, uniform in `megapixels`."""
    rng = random.Random(seed)
    names = sorted(sizes)
    for i in range(count):
        megapixels_now = rng.uniform(*megapixels)
        long_side = round(math.sqrt(megapixels_now * 1e6 * 1.5)) // 2 * 2
        short_side = round(long_side / 1.5) // 2 * 2
        out = (short_side, long_side) if rng.random() < 0.2 else (long_side, short_side)
        tile = (out[0] // 2, out[1] // 2)
        tiles = []
        for _ in range(4):
            name = rng.choice(names)
            tiles.append((name, _box(rng, sizes[name], tile, rng.uniform(1.0, 1.3)), tile))
        yield i, i % make_photos.NUM_CLASSES, tiles, out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("sources")
    p.add_argument("out")
    p.add_argument("--count", type=int, default=4000)
    p.add_argument("--large-count", type=int, default=768)
    p.add_argument("--sized-count", type=int, default=384,
                   help="images in each of the sets between the two (mp1: 1-2 megapixels, "
                        "mp2: 2-4), where the decoders' crossover is measured")
    args = p.parse_args()
    sizes = {}
    for name in photo_sources.PHOTOS:
        with Image.open(os.path.join(args.sources, name)) as im:
            sizes[name] = im.size
    summary = {}
    photos = ((i, cls, [(name, box, out)], out)
              for i, cls, name, box, out in make_photos.plan(args.count, 0, sizes))
    sets = [("photos", photos), ("large", large_plan(args.large_count, 1, sizes)),
            ("mp1", large_plan(args.sized_count, 2, sizes, (1.0, 2.0))),
            ("mp2", large_plan(args.sized_count, 3, sizes, (2.0, 4.0)))]
    for kind, plan in sets:
        jobs = [(args.sources, os.path.join(args.out, kind, make_photos.rel_path(i, cls)), tiles,
                 out) for i, cls, tiles, out in plan]
        with Pool(os.cpu_count()) as pool:
            total = sum(pool.imap_unordered(_write, jobs, chunksize=4))
        summary[kind] = {"images": len(jobs), "mb": round(total / 1e6, 1),
                         "kb_per_image": round(total / len(jobs) / 1e3, 1)}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
