"""Generate the photos embedded in the ``nostall demo`` command.

Writes 32 JPEGs (500x375 or 375x500, baseline, quality 90, 4:2:0) into
``crates/nostall-demo/assets/demo/<class>/<name>.jpg``, 8 per class, plus a
README.md with the provenance and license of every source photo.  The crops
are hand-picked regions of 9 GPL-2+ photographs from the Debian package
``mate-backgrounds`` (see ``photo_sources.py``), chosen so that the class
name honestly describes each picture:

* flowers -- FreshFlower, Garden, YellowFlower, LadyBird (forget-me-nots)
* leaves  -- Blinds, RainDrops
* grass   -- GreenMeadow, Dune
* water   -- Aqua (water drop splash)

Crops are fixed (no randomness), never upscaled, and resized with Pillow
LANCZOS, so the output is reproducible from the same package version.

Usage (Pillow required; use the bench venv):
    .venv-bench/bin/python bench/make_demo_assets.py [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys

from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import photo_sources  # noqa: E402

REPO = os.path.dirname(photo_sources.BENCH_DIR)
DEFAULT_OUT = os.path.join(REPO, "crates", "nostall-cli", "assets", "demo")
JPEG_OPTS = dict(format="JPEG", quality=90, subsampling=2, optimize=False, progressive=False)
MAX_TOTAL_BYTES = 2_500_000

# (class, source photo, orientation L=500x375 / P=375x500,
#  crop centre x, centre y as fractions of the source, crop width as a
#  fraction of the source width; height follows from the 4:3 / 3:4 aspect).
CROPS = [
    ("flowers", "FreshFlower.jpg", "L", 0.45, 0.55, 0.60),
    ("flowers", "FreshFlower.jpg", "P", 0.25, 0.55, 0.40),
    ("flowers", "Garden.jpg", "L", 0.65, 0.55, 0.55),
    ("flowers", "Garden.jpg", "P", 0.80, 0.50, 0.30),
    ("flowers", "YellowFlower.jpg", "L", 0.70, 0.60, 0.55),
    ("flowers", "YellowFlower.jpg", "L", 0.85, 0.80, 0.30),
    ("flowers", "LadyBird.jpg", "L", 0.15, 0.20, 0.30),
    ("flowers", "LadyBird.jpg", "L", 0.70, 0.80, 0.30),
    ("leaves", "Blinds.jpg", "L", 0.30, 0.50, 0.50),
    ("leaves", "Blinds.jpg", "P", 0.70, 0.50, 0.30),
    ("leaves", "Blinds.jpg", "L", 0.50, 0.40, 0.30),
    ("leaves", "Blinds.jpg", "L", 0.15, 0.75, 0.30),
    ("leaves", "RainDrops.jpg", "L", 0.40, 0.60, 0.45),
    ("leaves", "RainDrops.jpg", "L", 0.30, 0.30, 0.35),
    ("leaves", "RainDrops.jpg", "L", 0.55, 0.30, 0.30),
    ("leaves", "RainDrops.jpg", "L", 0.25, 0.75, 0.30),
    ("grass", "GreenMeadow.jpg", "L", 0.50, 0.50, 0.80),
    ("grass", "GreenMeadow.jpg", "L", 0.30, 0.60, 0.45),
    ("grass", "GreenMeadow.jpg", "P", 0.75, 0.50, 0.35),
    ("grass", "GreenMeadow.jpg", "L", 0.60, 0.35, 0.45),
    ("grass", "Dune.jpg", "L", 0.50, 0.70, 0.50),
    ("grass", "Dune.jpg", "L", 0.50, 0.50, 0.80),
    ("grass", "Dune.jpg", "P", 0.30, 0.60, 0.30),
    ("grass", "Dune.jpg", "L", 0.80, 0.75, 0.35),
    ("water", "Aqua.jpg", "L", 0.68, 0.62, 0.30),
    ("water", "Aqua.jpg", "L", 0.65, 0.55, 0.55),
    ("water", "Aqua.jpg", "P", 0.68, 0.60, 0.22),
    ("water", "Aqua.jpg", "L", 0.75, 0.40, 0.30),
    ("water", "Aqua.jpg", "L", 0.50, 0.50, 0.80),
    ("water", "Aqua.jpg", "L", 0.62, 0.80, 0.30),
    ("water", "Aqua.jpg", "L", 0.75, 0.50, 0.40),
    ("water", "Aqua.jpg", "P", 0.85, 0.55, 0.20),
]


def crop_box(size, orient, cx, cy, wfrac):
    w, h = size
    out = (500, 375) if orient == "L" else (375, 500)
    bw = wfrac * w
    bh = bw * out[1] / out[0]
    if bw < out[0] or bh > h:
        raise ValueError(f"crop {bw:.0f}x{bh:.0f} does not fit {w}x{h} without upscaling")
    x0 = min(max(cx * w - bw / 2, 0.0), w - bw)
    y0 = min(max(cy * h - bh / 2, 0.0), h - bh)
    return out, (x0, y0, x0 + bw, y0 + bh)


def readme(used: dict[str, list[str]]) -> str:
    lines = [
        "# Demo photos",
        "",
        "32 photographs (500x375 or 375x500 JPEG, quality 90) embedded in `nostall demo`,",
        "in 4 classes named by content. They are crops of photographs from the Debian",
        f"package `{photo_sources.PACKAGE}` (version {photo_sources.PACKAGE_VERSION}, Debian 12 "
        "\"bookworm\"), licensed GPL-2+.",
        "Copyright holders are as listed in that package's",
        "`/usr/share/doc/mate-backgrounds/copyright` (which refers to the upstream AUTHORS",
        "file); upstream source: https://git.mate-desktop.org/mate-backgrounds/.",
        "",
        "Regenerate with `.venv-bench/bin/python bench/make_demo_assets.py` (crops are listed",
        "in that script).",
        "",
        "| Source photo | Debian package | File path | Copyright | License | Demo images |",
        "|---|---|---|---|---|---|",
    ]
    for name in sorted(used):
        _, holders, _ = photo_sources.PHOTOS[name]
        path = f"/{photo_sources.NATURE_DIR}/{name}"
        imgs = ", ".join(f"`{p}`" for p in used[name])
        lines.append(f"| {name} | {photo_sources.PACKAGE} {photo_sources.PACKAGE_VERSION} | "
                     f"`{path}` | {holders} | {photo_sources.LICENSE} | {imgs} |")
    lines += [
        "",
        "Modifications: each image is a crop of the source photo, resized (Pillow LANCZOS)",
        "and re-encoded as JPEG. The unmodified originals (the preferred form for",
        "modification) are in the Debian source and binary packages and upstream.",
        "",
        "License (GPL-2+, as stated in the package's copyright file):",
        "these images are free software; you can redistribute them and/or modify them",
        "under the terms of the GNU General Public License as published by the Free",
        "Software Foundation; either version 2 of the License, or (at your option) any",
        "later version. They are distributed in the hope that they will be useful, but",
        "WITHOUT ANY WARRANTY; without even the implied warranty of MERCHANTABILITY or",
        "FITNESS FOR A PARTICULAR PURPOSE. See the GNU General Public License for more",
        "details: <https://www.gnu.org/licenses/>; on Debian systems the complete text",
        "of version 2 is in `/usr/share/common-licenses/GPL-2`.",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--cache", default=photo_sources.DEFAULT_CACHE)
    args = ap.parse_args()

    paths = photo_sources.fetch_sources(args.cache)
    for cls in sorted({c[0] for c in CROPS}):
        shutil.rmtree(os.path.join(args.out, cls), ignore_errors=True)
    decoded: dict[str, Image.Image] = {}
    used: dict[str, list[str]] = {}
    counters: dict[tuple[str, str], int] = {}
    total = 0
    for cls, src, orient, cx, cy, wfrac in CROPS:
        if src not in decoded:
            decoded[src] = Image.open(paths[src]).convert("RGB")
        out, box = crop_box(decoded[src].size, orient, cx, cy, wfrac)
        img = decoded[src].resize(out, Image.Resampling.LANCZOS, box=box)
        k = counters[(cls, src)] = counters.get((cls, src), 0) + 1
        rel = f"{cls}/{src[:-4].lower()}_{k}.jpg"
        dst = os.path.join(args.out, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        img.save(dst, **JPEG_OPTS)
        total += os.path.getsize(dst)
        used.setdefault(src, []).append(rel)
    with open(os.path.join(args.out, "README.md"), "w") as f:
        f.write(readme(used))
    print(f"{args.out}: {len(CROPS)} images from {len(used)} photos, {total / 1e6:.2f} MB")
    if total > MAX_TOTAL_BYTES:
        print(f"ERROR: over the {MAX_TOTAL_BYTES / 1e6} MB budget", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
