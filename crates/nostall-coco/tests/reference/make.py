"""Makes masks.json, the masks pycocotools makes, for tests/reference.rs.

The fixture is itself a COCO annotation file (images, one category, annotations) with
two more keys the test reads: `expected`, for each annotation the mask pycocotools'
`COCO.annToMask` makes of it (as pycocotools' compressed RLE string of that mask, and its
area), and `rles`, masks encoded by pycocotools (`mask.encode`, `mask.area`) with their
uncompressed counts and, when small, the mask itself row by row.

Run from the repository root (see README.md):
    python crates/nostall-coco/tests/reference/make.py
Deterministic: fixed seeds, no time or platform in the output.
"""

import contextlib
import io
import json
import math
import os
import random
from importlib.metadata import version

import numpy as np
from pycocotools import mask as mask_utils
from pycocotools.coco import COCO

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "masks.json")
PYCOCOTOOLS = version("pycocotools")

# (height, width): odd sizes, thin ones, and one of COCO's.
SIZES = [
    (1, 1), (1, 9), (9, 1), (2, 3), (5, 7), (13, 11), (31, 17), (33, 65),
    (97, 101), (127, 255), (211, 333), (301, 199), (427, 640),
]

rng = random.Random(20240611)


def r2(v):
    """Two decimals, as COCO writes coordinates."""
    return round(v, 2)


def snap(v, step):
    return round(round(v / step) * step, 10)


def regular(cx, cy, rx, ry, n, phase=0.0):
    return [c for k in range(n)
            for c in (cx + rx * math.cos(phase + 2 * math.pi * k / n),
                      cy + ry * math.sin(phase + 2 * math.pi * k / n))]


def convex(h, w):
    n = rng.randint(3, 24)
    angles = sorted(rng.uniform(0, 2 * math.pi) for _ in range(n))
    cx, cy = rng.uniform(0, w), rng.uniform(0, h)
    rx, ry = rng.uniform(0.5, w / 2 + 1), rng.uniform(0.5, h / 2 + 1)
    return [r2(c) for a in angles for c in (cx + rx * math.cos(a), cy + ry * math.sin(a))]


def star(h, w):
    n = rng.randint(3, 12)
    cx, cy = rng.uniform(0, w), rng.uniform(0, h)
    outer = rng.uniform(1, max(h, w) / 2 + 2)
    inner = outer * rng.uniform(0.1, 0.7)
    pts = []
    for k in range(2 * n):
        r = outer if k % 2 == 0 else inner
        a = math.pi * k / n
        pts += [r2(cx + r * math.cos(a)), r2(cy + r * math.sin(a))]
    return pts


def scribble(h, w):
    """Random points in random order: self-intersecting."""
    n = rng.randint(3, 16)
    return [r2(c) for _ in range(n) for c in (rng.uniform(-1, w + 1), rng.uniform(-1, h + 1))]


def touching(h, w):
    """Self-touching shapes: a bow tie, a figure eight sharing a vertex, a vertex on an
    edge, a slit (an edge walked there and back)."""
    kind = rng.randrange(4)
    x0, y0 = rng.uniform(0, w / 2), rng.uniform(0, h / 2)
    x1, y1 = rng.uniform(w / 2, w), rng.uniform(h / 2, h)
    xm, ym = (x0 + x1) / 2, (y0 + y1) / 2
    if kind == 0:
        pts = [x0, y0, x1, y1, x1, y0, x0, y1]
    elif kind == 1:
        pts = [xm, ym, x0, y0, x0, ym, xm, ym, x1, y1, x1, ym]
    elif kind == 2:
        pts = [x0, y0, x1, y0, xm, y0, xm, y1]
    else:
        pts = [x0, y0, x1, y0, x1, y1, xm, y1, xm, ym, xm, y1, x0, y1]
    return [r2(c) for c in pts]


def tiny(h, w):
    """Sub-pixel triangles, some placed on half-pixel boundaries."""
    x, y = rng.uniform(0, w), rng.uniform(0, h)
    if rng.random() < 0.5:
        x, y = math.floor(x) + 0.5, math.floor(y) + 0.5
    s = rng.uniform(0.01, 0.9)
    return [r2(c) for c in (x, y, x + s, y, x, y + s * rng.uniform(0.2, 1.5))]


def outside(h, w):
    """Partly (sometimes wholly) outside the image, negative coordinates included."""
    cx = rng.choice([rng.uniform(-w, 0), rng.uniform(w, 2 * w), rng.uniform(0, w)])
    cy = rng.choice([rng.uniform(-h, 0), rng.uniform(h, 2 * h), rng.uniform(0, h)])
    r = rng.uniform(1, max(h, w))
    return [r2(c) for c in regular(cx, cy, r, r * rng.uniform(0.3, 1.5), rng.randint(3, 9),
                                   rng.uniform(0, 6))]


def huge(h, w):
    """Vertices up to 2e6 pixels away (pycocotools walks every fifth of a pixel)."""
    far = rng.choice([1e3, 1e4, 1e5, 2e6])
    pts = []
    for _ in range(rng.randint(3, 6)):
        if rng.random() < 0.5:
            pts += [rng.uniform(-far, far), rng.uniform(-far, far)]
        else:
            pts += [rng.uniform(0, w), rng.uniform(0, h)]
    return [r2(c) for c in pts]


def grid(h, w):
    """Coordinates on grids of 0.1, 0.2 and 0.5 pixel: (int)(5x + .5) and the downsampling
    meet their rounding boundaries there."""
    step = rng.choice([0.1, 0.2, 0.5, 1.0])
    n = rng.randint(3, 10)
    return [snap(c, step) for _ in range(n)
            for c in (rng.uniform(-1, w + 1), rng.uniform(-1, h + 1))]


def precise(h, w):
    """Full-precision doubles (not hundredths: stored as f64 by the index)."""
    angles = sorted(rng.uniform(0, 2 * math.pi) for _ in range(rng.randint(3, 12)))
    cx, cy = rng.uniform(0, w), rng.uniform(0, h)
    r = rng.uniform(0.3, max(h, w) / 2)
    return [c for a in angles for c in (cx + r * math.cos(a), cy + r * math.sin(a))]


def degenerate(h, w):
    """Repeated vertices, the first vertex repeated at the end, collinear points, a
    polygon of zero area."""
    base = convex(h, w)
    kind = rng.randrange(4)
    if kind == 0:
        k = 2 * rng.randrange(len(base) // 2)
        return base[:k + 2] + base[k:k + 2] + base[k + 2:]
    if kind == 1:
        return base + base[:2]
    if kind == 2:
        x0, y0, x1, y1 = (rng.uniform(0, w), rng.uniform(0, h), rng.uniform(0, w),
                          rng.uniform(0, h))
        return [r2(c) for t in (0, 0.25, 0.5, 1) for c in (x0 + t * (x1 - x0), y0 + t * (y1 - y0))]
    x0, y0 = rng.uniform(0, w), rng.uniform(0, h)
    return [r2(c) for c in (x0, y0, x0 + 3, y0, x0 + 3, y0, x0, y0)]


def rectangle(h, w):
    x0, x1 = sorted(snap(rng.uniform(-1, w + 1), 0.5) for _ in range(2))
    y0, y1 = sorted(snap(rng.uniform(-1, h + 1), 0.5) for _ in range(2))
    return [x0, y0, x1, y0, x1, y1, x0, y1]


SHAPES = [convex, star, scribble, touching, tiny, outside, huge, grid, precise, degenerate,
          rectangle]


def blob(h, w, nprng):
    """A mask of a few filled ellipses, or noise for small sizes."""
    if h * w <= 400 and nprng.random_sample() < 0.5:
        return (nprng.random_sample((h, w)) < 0.4).astype(np.uint8)
    yy, xx = np.mgrid[0:h, 0:w]
    m = np.zeros((h, w), np.uint8)
    for _ in range(nprng.randint(1, 4)):
        cy, cx = nprng.uniform(0, h), nprng.uniform(0, w)
        ry, rx = nprng.uniform(0.5, h / 2 + 1), nprng.uniform(0.5, w / 2 + 1)
        m |= (((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1).astype(np.uint8)
    return m


def runs(m):
    """Uncompressed COCO counts of a mask: runs over the column-major pixels, 0s first."""
    flat = np.asfortranarray(m).flatten(order="F")
    counts, value, run = [], 0, 0
    for v in flat:
        if v != value:
            counts.append(run)
            value, run = v, 0
        run += 1
    counts.append(run)
    return [int(c) for c in counts]


def encode(m):
    rle = mask_utils.encode(np.asfortranarray(m.astype(np.uint8)))
    return rle["counts"].decode("ascii"), int(mask_utils.area(rle))


def main():
    nprng = np.random.RandomState(7)
    images, annotations = [], []
    ann_id = 0
    for i, (h, w) in enumerate(SIZES):
        images.append({"id": i + 1, "file_name": f"{h}x{w}.jpg", "height": h, "width": w})
        # Polygons: every shape on every size, more on the larger sizes.
        per_shape = 1 if h * w < 100 else 3
        for shape in SHAPES:
            for _ in range(per_shape):
                polys = [shape(h, w)]
                if rng.random() < 0.2:
                    polys.append(rng.choice(SHAPES)(h, w))
                ann_id += 1
                annotations.append({"id": ann_id, "image_id": i + 1, "category_id": 1,
                                    "bbox": [0, 0, w, h], "iscrowd": 0, "segmentation": polys})
        # Crowd RLEs, compressed and uncompressed.
        for compressed in (True, False):
            m = blob(h, w, nprng)
            counts = encode(m)[0] if compressed else runs(m)
            ann_id += 1
            annotations.append({"id": ann_id, "image_id": i + 1, "category_id": 1,
                                "bbox": [0, 0, w, h], "iscrowd": 1,
                                "segmentation": {"size": [h, w], "counts": counts}})
    dataset = {"images": images, "annotations": annotations,
               "categories": [{"id": 1, "name": "shape"}]}
    coco = COCO()
    coco.dataset = json.loads(json.dumps(dataset))
    with contextlib.redirect_stdout(io.StringIO()):
        coco.createIndex()
    expected = []
    for ann in annotations:
        counts, area = encode(coco.annToMask(coco.anns[ann["id"]]))
        expected.append({"id": ann["id"], "counts": counts, "area": area})

    # Standalone RLEs: noise, blobs, empty, full, corner pixels, and big images whose
    # counts take five or six characters (and negative differences).
    rles = []
    cases = [(h, w, blob(h, w, nprng)) for h, w in SIZES]
    cases += [(h, w, (nprng.random_sample((h, w)) < p).astype(np.uint8))
              for h, w, p in [(3, 4, 0.5), (8, 8, 0.1), (11, 7, 0.9), (12, 12, 0.5)]]
    cases += [(5, 6, np.zeros((5, 6), np.uint8)), (5, 6, np.ones((5, 6), np.uint8))]
    for h, w, (y, x) in [(4, 5, (0, 0)), (4, 5, (3, 4)), (4, 5, (0, 4)), (4, 5, (3, 0))]:
        m = np.zeros((h, w), np.uint8)
        m[y, x] = 1
        cases.append((h, w, m))
    for h, w in [(4500, 4000), (1000, 2049)]:
        m = np.zeros((h, w), np.uint8)
        m[h // 2:h // 2 + 3, w - 5:w - 2] = 1
        m[0, 0] = 1
        m[h - 7:, 3] = 1
        cases.append((h, w, m))
    for h, w, m in cases:
        counts, area = encode(m)
        case = {"size": [h, w], "counts": counts, "uncompressed": runs(m), "area": area}
        if h * w <= 144:
            case["rows"] = ["".join(str(int(v)) for v in row) for row in m]
        rles.append(case)

    lines = ["{", f'"pycocotools": "{PYCOCOTOOLS}",']
    for key, items in [("images", images), ("categories", dataset["categories"]),
                       ("annotations", annotations), ("expected", expected), ("rles", rles)]:
        body = ",\n".join(json.dumps(item, separators=(",", ":")) for item in items)
        lines.append(f'"{key}": [\n{body}\n]' + ("," if key != "rles" else ""))
    lines.append("}")
    with open(OUT, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{OUT}: {len(annotations)} annotations, {len(rles)} RLEs, "
          f"{os.path.getsize(OUT)} bytes, pycocotools {PYCOCOTOOLS}")


if __name__ == "__main__":
    main()
