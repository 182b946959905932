"""The random detection operators against torchvision.transforms.v2 with their draws fixed:
`RandomZoomOut`, SSD's `RandomZoomOut` then `RandomIoUCrop`, and large-scale jitter's
`FixedSizeCrop` where it crops (after a `ScaleJitter` of fixed scale).

nostall draws from its own generator and does not expose its draws, but the boxes move
with the image, so each sample's output gives them back. Every image carries a grid of
108 small "probe" boxes, each of its own category. A probe that the output does not clamp
along an axis (both its edges strictly inside the output) has moved by the sample's
affine map alone, ``out = a * x + c``; two such along x tell a mirrored sample (their
order turns). From ``a`` and ``c`` come the integers v2 draws (the zoomed canvas and the
image's place on it; the IoU crop's window; the fixed-size crop's offset), asserted to
be integers within 0.01 and drawn as v2 draws them; then v2's functionals (`pad` with
the fill, `crop`, `resize` bilinear with antialias, `horizontal_flip`, then
`SanitizeBoundingBoxes`) run with exactly those numbers on the same source sample: the
image, `BoundingBoxes`, `Mask` and `KeyPoints`. A sample whose map cannot be read (the
IoU window clamps every probe along an axis) is left out; each test asserts that enough
were compared. The source masks are nostall's at the image's size (an identity
`Resize`): what is tested is how they move.

Compared, with the worst measured over the file's samples (torchvision 0.29):

- every box (probes, and the real annotations: a whole-image box that the crops clamp,
  polygons, people): the same kept, in order, within BOX_TOL (0.01 px; measured 5e-5);
- the instance masks, moved as v2 moves a `Mask`: each at least 99.5% equal (measured:
  all equal);
- the keypoints: within KEYPOINT_TOL (0.01 px; measured 5e-5) of v2's `KeyPoints` where
  labelled, visibility 0 where v2's point left the output;
- the pixels (uint8), bounded per sample by PIXELS: mean absolute difference <= 0.3
  (measured <= 0.2), 99.9th percentile <= 2 levels (measured 1) inside the outermost
  rows and columns, and over the whole output. nostall resizes once from the source
  where v2 pads or crops and then resizes (or resizes then crops), on the same sampling
  grid, its filter bounded by the crop's window as v2's stops at the crop's edge, so
  they differ by rounding, even where the zoom-out's fill meets the image.

Boxes at the far edge: a box clamped at a crop's right or bottom edge and then resized
lands on the output's edge, ``window * (side / window)``, which v2 computes in float32,
and a hair past the output is sanitised away (299 to 300: 300.00003, dropped). nostall
computes a crop then a resize as v2 does, in float32
(`test_a_box_clamped_at_a_crops_far_edge_is_kept_as_v2_keeps_it`); where its one map
composes other orders (a flip before the resize), the rounding may differ, so a box
within TOUCH of the far edge may be kept by one side only: the SSD test counts them and
asserts that they are rare.

Each test also shows that the comparison can fail: the references made with the image or
the window moved by one pixel do not pass.
"""

import json
import os

import numpy as np
import pytest
import torch

import nostall
from nostall import ops

v2 = pytest.importorskip("torchvision.transforms.v2")
tv_tensors = pytest.importorskip("torchvision.tv_tensors")
if not hasattr(tv_tensors, "KeyPoints"):
    pytest.skip("torchvision has no KeyPoints (0.23 added them)", allow_module_level=True)
from PIL import Image  # noqa: E402
from torchvision.transforms.v2 import functional as F  # noqa: E402

#: Every photograph resized to this size and saved as PNG, so that the pixels are exact.
WIDTH, HEIGHT = 480, 360
#: Distinct photographs, and the COCO image entries naming them (each entry its own sample,
#: with its own draws).
PHOTOGRAPHS, ENTRIES = 12, 24
#: The canvas's fill: v2's dict form, as SSD writes it, and the colour.
FILL_COLOUR = (123, 117, 104)
FILL = {tv_tensors.Image: FILL_COLOUR, "others": 0}

#: COCO's person keypoints.
NAMES = ["nose", "left_eye", "right_eye", "left_ear", "right_ear", "left_shoulder", "right_shoulder",
         "left_elbow", "right_elbow", "left_wrist", "right_wrist", "left_hip", "right_hip", "left_knee",
         "right_knee", "left_ankle", "right_ankle"]
K = len(NAMES)

#: Categories: a person (with keypoints), a rectangle, a triangle, the whole-image box.
PERSON, RECTANGLE, TRIANGLE, WHOLE = 1, 3, 7, 90
#: The probes: 16 x 16 boxes every 40 pixels, categories PROBE, PROBE + 1, ...
PROBE = 100
PROBES = [[12.0 + 40 * i, 12.0 + 40 * j, 28.0 + 40 * i, 28.0 + 40 * j] for j in range(9) for i in range(12)]

#: Tolerances (module doc; each test prints what it measured, `pytest -s`).
BOX_TOL = 0.01
KEYPOINT_TOL = 0.01
MASK_AGREEMENT = 0.995


def _polygon_ellipse(cx, cy, rx, ry, n=24):
    angles = np.linspace(0, 2 * np.pi, n, endpoint=False)
    return np.stack([cx + rx * np.cos(angles), cy + ry * np.sin(angles)], axis=1).round(2).reshape(-1).tolist()


def _annotations(i, rng):
    """Image entry i's real annotations (bbox, category, segmentation or None, keypoints or
    None), then the probes."""
    out = [([0, 0, WIDTH, HEIGHT], WHOLE, None, None)]
    x = 60 + 7 * (i % 12)
    out.append(([x, 40, 150, 100], RECTANGLE, [[x, 40, x + 150, 40, x + 150, 140, x, 140]], None))
    out.append(([10, 160, 200, 190], TRIANGLE, [[10, 160, 210, 350, 10, 350]], None))
    for k, (bx, by, bw, bh) in enumerate([(250, 40 + 5 * (i % 12), 200, 260), (0, 30, 180 + 9 * (i % 12), 330)]):
        xs = rng.integers(bx, bx + bw, size=K).astype(float) + 0.25
        ys = rng.integers(by, by + bh, size=K).astype(float) + 0.75
        vis = rng.choice([0, 1, 2], size=K, p=[0.2, 0.3, 0.5])
        if k == 1:
            # On the image's first column and last row.
            xs[3], ys[4], vis[3], vis[4] = 0, HEIGHT - 1, 2, 2
        xs[vis == 0] = ys[vis == 0] = 0
        points = np.stack([xs, ys, vis], axis=1).reshape(-1).tolist()
        segmentation = [_polygon_ellipse(bx + bw / 2, by + bh / 2, bw / 2 - 1, bh / 2 - 1)]
        out.append(([bx, by, bw, bh], PERSON, segmentation, points))
    for k, (x0, y0, x1, y1) in enumerate(PROBES):
        out.append(([x0, y0, x1 - x0, y1 - y0], PROBE + k, None, None))
    return out


def write_coco(photos, root):
    """A COCO layout of ENTRIES image entries over PHOTOGRAPHS PNGs, with masks, keypoints
    and the probes. Returns the annotation file's path and the image entries."""
    os.makedirs(root / "annotations")
    os.makedirs(root / "val")
    photographs = sorted(os.path.join(d, f) for d, _, names in os.walk(photos) for f in names if f.endswith(".jpg"))
    for i, path in enumerate(photographs[:PHOTOGRAPHS]):
        Image.open(path).convert("RGB").resize((WIDTH, HEIGHT), Image.BILINEAR).save(root / "val" / f"{i:04d}.png")
    rng = np.random.default_rng(0)
    images, annotations = [], []
    for i in range(ENTRIES):
        images.append({"id": i + 1, "file_name": f"{i % PHOTOGRAPHS:04d}.png", "width": WIDTH, "height": HEIGHT})
        for k, (bbox, category, segmentation, points) in enumerate(_annotations(i, rng)):
            a = {"id": 1000 * i + k + 1, "image_id": i + 1, "category_id": category, "bbox": bbox, "iscrowd": 0}
            if segmentation is not None:
                a["segmentation"] = segmentation
            if points is not None:
                a["keypoints"], a["num_keypoints"] = points, int(sum(v > 0 for v in points[2::3]))
            annotations.append(a)
    categories = [{"id": PERSON, "name": "person", "keypoints": NAMES, "skeleton": []},
                  {"id": RECTANGLE, "name": "rectangle"}, {"id": TRIANGLE, "name": "triangle"},
                  {"id": WHOLE, "name": "whole"}]
    categories += [{"id": PROBE + k, "name": f"probe{k}"} for k in range(len(PROBES))]
    path = root / "annotations" / "person_keypoints_val.json"
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))
    return path, images


def _loader(path, recipe, seed=0):
    fields = {"image": "image", "target": nostall.Field("coco", kind="boxes", masks=True, keypoints=K, max_boxes=256)}
    return nostall.Loader(str(path), pipeline=v2.Compose(recipe), dtype="uint8", fields=fields, batch_size=4,
                          shuffle=False, seed=seed)


def _samples(loader):
    """(image, target) for every sample, the masks of the probes left out (asserted empty:
    they have no segmentation)."""
    out = []
    for batch in loader:
        for image, target in zip(batch["image"], batch["target"]):
            real = target["labels"] < PROBE
            assert not target["masks"][~real].any()
            out.append((image.clone(), {"boxes": target["boxes"].clone(), "labels": target["labels"].clone(),
                                        "keypoints": target["keypoints"].clone(),
                                        "masks": target["masks"][real].clone()}))
    return out


@pytest.fixture(scope="module")
def coco(photos, tmp_path_factory):
    """The annotation file and, for each image entry, the source sample: pixels, every
    box, label and keypoint, and the real annotations' masks as nostall makes them at the
    image's size (an identity Resize)."""
    root = tmp_path_factory.mktemp("fixed")
    path, images = write_coco(photos, root)
    sources = []
    for image, (_, target) in zip(images, _samples(_loader(path, [v2.Resize((HEIGHT, WIDTH))]))):
        pixels = torch.from_numpy(np.array(Image.open(root / "val" / image["file_name"]))).permute(2, 0, 1)
        n = len(target["labels"])
        assert n == 5 + len(PROBES)
        sources.append({"image": pixels, **target})
    return path, sources


# --- reading the draws back -----------------------------------------------------------------

def _axis(source, out, size, eps=0.05):
    """``(a, c)`` with ``out = a * source + c`` along one axis, from the probes left whole
    along it (``source``, ``out``: [n, 2] edges); None where fewer than two are."""
    whole = (out[:, 0] > eps) & (out[:, 1] < size - eps)
    source, out = source[whole], out[whole]
    centres_in, centres_out = source.mean(1), out.mean(1)
    if len(source) < 2 or centres_in.max() == centres_in.min():
        return None
    first, last = centres_in.argmin(), centres_in.argmax()
    sign = 1.0 if centres_out[last] > centres_out[first] else -1.0
    a = sign * ((out[:, 1] - out[:, 0]) / (source[:, 1] - source[:, 0])).mean()
    c = (centres_out - a * centres_in).mean()
    return float(a), float(c)


def affine(target, out_size):
    """The sample's map from source to output pixels, ``((ax, cx), (ay, cy))``, from its
    probes; None where the output clamps too many of them."""
    labels = target["labels"]
    probes = labels >= PROBE
    source = torch.tensor(PROBES, dtype=torch.float64)[labels[probes] - PROBE]
    out = target["boxes"][probes].double()
    x = _axis(source[:, 0::2], out[:, 0::2], out_size[0])
    y = _axis(source[:, 1::2], out[:, 1::2], out_size[1])
    return None if x is None or y is None else (x, y)


def integer(value, what):
    """``value`` rounded, asserted to be an integer within 0.01."""
    assert abs(value - round(value)) < 0.01, f"{what}: {value} is not a whole number of pixels"
    return int(round(value))


# --- v2 with the draws fixed ----------------------------------------------------------------

#: A box edge this close to the output's right or bottom edge "touches" it (module doc:
#: boxes at the far edge).
TOUCH = 1e-3


def reference(source, steps):
    """v2's functionals on ``source`` (pixels, every box, label and keypoint, the real
    annotations' masks), step by step, then `SanitizeBoundingBoxes`. Steps: ``("pad",
    [left, top, right, bottom])`` (with FILL), ``("crop", top, left, height, width,
    iou)`` (with ``iou``, boxes whose centre the window leaves out are zeroed, as
    `RandomIoUCrop` marks them), ``("resize", (height, width))``, ``("flip",)``,
    ``("jitter", op)`` (a `ScaleJitter` of fixed scale).

    Returns the image and the candidates, in order: each annotation that v2 keeps, and
    each that touches the output's far edge and would be kept but for the canvas bound
    (module doc: boxes at the far edge), as ``(label, box, keypoints [K, 2], visibility
    [K], mask or None, optional, kept by v2)``, ``optional`` for the latter and for those
    touching the edge that v2 keeps."""
    canvas = tuple(source["image"].shape[-2:])
    sample = {
        "image": tv_tensors.Image(source["image"]),
        "boxes": tv_tensors.BoundingBoxes(source["boxes"].clone(), format="XYXY", canvas_size=canvas),
        "keypoints": tv_tensors.KeyPoints(source["keypoints"][..., :2].clone(), canvas_size=canvas),
        "masks": tv_tensors.Mask(source["masks"].clone()),
    }
    for step in steps:
        kind = step[0]
        if kind == "pad":
            sample = {k: F.pad(v, step[1], fill=list(FILL_COLOUR) if k == "image" else 0) for k, v in sample.items()}
        elif kind == "crop":
            _, top, left, height, width, iou = step
            boxes = sample["boxes"].as_subclass(torch.Tensor)
            cx, cy = 0.5 * (boxes[:, 0] + boxes[:, 2]), 0.5 * (boxes[:, 1] + boxes[:, 3])
            inside = (left < cx) & (cx < left + width) & (top < cy) & (cy < top + height)
            sample = {k: F.crop(v, top, left, height, width) for k, v in sample.items()}
            if iou:
                sample["boxes"][~inside] = 0
        elif kind == "resize":
            sample = {k: F.resize(v, list(step[1]), antialias=True) for k, v in sample.items()}
        elif kind == "flip":
            sample = {k: F.horizontal_flip(v) for k, v in sample.items()}
        elif kind == "jitter":
            sample = step[1](sample)
        else:
            raise AssertionError(kind)
    boxes = sample["boxes"]
    height, width = boxes.canvas_size
    n = len(boxes)

    def kept(boxes):
        done = v2.SanitizeBoundingBoxes(labels_getter=lambda s: s["index"])({"boxes": boxes, "index": torch.arange(n)})
        return set(done["index"].tolist())

    plain = boxes.as_subclass(torch.Tensor)
    bound = torch.tensor([width, height, width, height], dtype=plain.dtype)
    touches = ((plain[:, 2:] - bound[2:]).abs() <= TOUCH).any(1)
    keep = kept(boxes)
    keep_within = kept(tv_tensors.wrap(torch.minimum(plain, bound), like=boxes))
    real = (source["labels"] < PROBE).tolist()
    rank = (torch.cumsum(torch.tensor(real).long(), 0) - 1).tolist()
    masks = sample["masks"].as_subclass(torch.Tensor)
    points = sample["keypoints"].as_subclass(torch.Tensor)
    candidates = []
    for i in range(n):
        optional = bool(touches[i]) and i in keep_within
        if i in keep or optional:
            candidates.append((int(source["labels"][i]), torch.minimum(plain[i], bound), points[i],
                               source["keypoints"][i, :, 2], masks[rank[i]] if real[i] else None, optional,
                               i in keep))
    return sample["image"].as_subclass(torch.Tensor), candidates


# --- comparing ------------------------------------------------------------------------------

#: Per test: the most a sample's pixels may differ from v2's, in levels of 255: the mean
#: absolute difference, the 99.9th percentile of the absolute differences over the whole
#: output, and that percentile within it (its outermost rows and columns left out).
PIXELS = {"zoom-out": (0.3, 2, 2), "ssd": (0.3, 2, 2), "fixed-size-crop": (0.3, 2, 2)}


def differences(image, target, expected, pair_tol=0.5):
    """How nostall's sample (``image``, ``target``) differs from v2's (``expected``, from
    `reference`): a dict of the boxes' and keypoints' largest differences, the masks'
    least agreement, the pixels' differences (PIXELS), what was compared, and the boxes at
    the far edge kept by one side only; None where the boxes kept differ otherwise (or a
    keypoint's visibility does).

    The boxes are paired in order: each of nostall's with the next candidate of the same
    label within ``pair_tol`` pixels; an optional candidate may be left unpaired."""
    expected_image, candidates = expected
    labels, boxes = target["labels"].tolist(), target["boxes"]
    pairs, left_out, i = [], [], 0
    for candidate in candidates:
        label, box, *_, optional, _ = candidate
        if i < len(labels) and labels[i] == label and (boxes[i] - box).abs().max() <= pair_tol:
            pairs.append((i, candidate))
            i += 1
        elif optional:
            left_out.append(candidate)
        else:
            return None
    if i != len(labels):
        return None
    height, width = image.shape[-2:]
    out = {"box": 0.0, "keypoint": 0.0, "mask": 1.0, "boxes": len(pairs), "points": 0, "masks": 0,
           # At the far edge: left out by nostall where v2 keeps it, kept where v2 drops it.
           "edge_ours": sum(1 for c in left_out if c[-1]), "edge_v2": sum(1 for _, c in pairs if not c[-1])}
    real_rank = torch.cumsum((target["labels"] < PROBE).long(), 0) - 1
    for i, (_, box, xy, vis, mask, *_) in pairs:
        out["box"] = max(out["box"], (boxes[i] - box).abs().max().item())
        for (x, y, v), (ex, ey), ev in zip(target["keypoints"][i].tolist(), xy.tolist(), vis.tolist()):
            if ev == 0:
                if (x, y, v) != (0, 0, 0):
                    return None
                continue
            out["keypoint"] = max(out["keypoint"], abs(x - ex), abs(y - ey))
            inside = 0 <= ex <= width and 0 <= ey <= height
            # On an edge, the float arithmetic may put the point either side of it.
            edge = min(abs(ex), abs(ex - width), abs(ey), abs(ey - height)) < 0.01
            if not (v == (ev if inside else 0) or edge and v in (0, ev)):
                return None
            out["points"] += 1
        if mask is not None:
            out["mask"] = min(out["mask"], (target["masks"][real_rank[i]] == mask).double().mean().item())
            out["masks"] += 1
    return {**out, **_pixels(image, expected_image)}


def _pixels(image, expected):
    diff = (image.int() - expected.int()).abs().double()
    return {"mean": diff.mean().item(), "p999": torch.quantile(diff.flatten(), 0.999).item(),
            "inner_p999": torch.quantile(diff[:, 1:-1, 1:-1].flatten(), 0.999).item()}


def failures(image, target, expected, test):
    """What of the comparison fails: a set of "kept", "boxes", "keypoints", "masks",
    "pixels"."""
    mean, p999, inner = PIXELS[test]
    pixels = _pixels(image, expected[0])
    out = {"pixels"} if pixels["mean"] > mean or pixels["p999"] > p999 or pixels["inner_p999"] > inner else set()
    got = differences(image, target, expected, pair_tol=float("inf"))
    if got is None:
        return out | {"kept"}
    return out | ({"boxes"} if got["box"] > BOX_TOL else set()) \
        | ({"keypoints"} if got["keypoint"] > KEYPOINT_TOL else set()) \
        | ({"masks"} if got["mask"] < MASK_AGREEMENT else set())


class Measured:
    """The worst of each difference over the samples compared, and the counts."""

    def __init__(self, test):
        self.test = test
        self.worst = {"box": 0.0, "keypoint": 0.0, "mask": 1.0, "mean": 0.0, "p999": 0.0, "inner_p999": 0.0}
        self.counts = {"samples": 0, "boxes": 0, "points": 0, "masks": 0, "edge_ours": 0, "edge_v2": 0}

    def check(self, image, target, expected, what):
        """Compares one sample, asserting every bound."""
        got = differences(image, target, expected)
        assert got is not None, (what, "kept", target["labels"].tolist(), [c[0] for c in expected[1]])
        for key in self.worst:
            self.worst[key] = (min if key == "mask" else max)(self.worst[key], got[key])
        self.counts["samples"] += 1
        for key in ("boxes", "points", "masks", "edge_ours", "edge_v2"):
            self.counts[key] += got[key]
        mean, p999, inner = PIXELS[self.test]
        assert got["box"] <= BOX_TOL, (what, got)
        assert got["keypoint"] <= KEYPOINT_TOL, (what, got)
        assert got["mask"] >= MASK_AGREEMENT, (what, got)
        assert got["mean"] <= mean and got["p999"] <= p999 and got["inner_p999"] <= inner, (what, got)

    def __repr__(self):
        w, c = self.worst, self.counts
        return (f"{self.test}: {c['samples']} samples; {c['boxes']} boxes within {w['box']:.2g} px; {c['points']} "
                f"keypoints within {w['keypoint']:.2g} px; {c['masks']} masks, each >= {w['mask']:.4f} equal; "
                f"pixels: mean |diff| <= {w['mean']:.3f}, 99.9th percentile <= {w['p999']:.0f} "
                f"({w['inner_p999']:.0f} inside the outermost rows and columns); boxes at the far edge "
                f"dropped by nostall only: {c['edge_ours']}, by v2 only: {c['edge_v2']}")


def _one_draw(first, first_range, second, second_range):
    """Whether one number r in [0, 1) gives both ``int(range * r)`` (ranges of 0 say
    nothing)."""
    lo, hi = 0.0, 1.0
    for value, span in [(first, first_range), (second, second_range)]:
        if span > 0:
            lo, hi = max(lo, value / span), min(hi, (value + 1) / span)
    return lo < hi + 1e-6


# --- the tests ------------------------------------------------------------------------------

SIDE = 300


def test_random_zoom_out_is_v2s_pad_at_the_drawn_place(coco):
    """`RandomZoomOut` (SSD's fill, first in the recipe) then a flip and `Resize((300,
    300))`: the probes give the canvas's size and the image's place on it (and whether the
    sample was mirrored), and v2's `pad` with them, `horizontal_flip` and `resize` give
    the same boxes, masks, keypoints and pixels. The image moved by one canvas pixel
    moves v2's boxes by 300 / canvas width (0.16 px or more), which fails."""
    path, sources = coco
    recipe = [v2.RandomZoomOut(fill=FILL, side_range=(1.0, 4.0)), v2.RandomHorizontalFlip(), v2.Resize((SIDE, SIDE)),
              v2.SanitizeBoundingBoxes()]
    measured, zoomed, mirrored = Measured("zoom-out"), 0, 0
    for source, (image, target) in zip(sources, _samples(_loader(path, recipe, seed=7))):
        # Without a crop every probe stays whole.
        (ax, cx), (ay, cy) = affine(target, (SIDE, SIDE))
        flip = ax < 0
        width, height = integer(SIDE / abs(ax), "canvas width"), integer(SIDE / ay, "canvas height")
        left = integer((SIDE - cx if flip else cx) / abs(ax), "left")
        top = integer(cy / ay, "top")
        # Drawn as v2 draws them: one side factor r for both sides (int(480 r), int(360 r)),
        # the image within the canvas.
        assert WIDTH <= width <= 4 * WIDTH and HEIGHT <= height <= 4 * HEIGHT
        assert max(width / WIDTH, height / HEIGHT) < min((width + 1) / WIDTH, (height + 1) / HEIGHT)
        assert 0 <= left <= width - WIDTH and 0 <= top <= height - HEIGHT

        def steps(left):
            return ([("pad", [left, top, width - WIDTH - left, height - HEIGHT - top])] + [("flip",)] * flip
                    + [("resize", (SIDE, SIDE))])

        measured.check(image, target, reference(source, steps(left)), f"zoom-out {width}x{height}+{left}+{top}")
        mirrored += flip
        if width > WIDTH:
            zoomed += 1
            moved = left + 1 if left < width - WIDTH else left - 1
            assert "boxes" in failures(image, target, reference(source, steps(moved)), "zoom-out"), (left, moved)
    print(measured)
    assert measured.counts["samples"] == ENTRIES and zoomed >= 6 and 4 <= mirrored <= ENTRIES - 4, measured
    assert measured.counts["masks"] >= 3 * ENTRIES and measured.counts["points"] >= 10 * ENTRIES, measured


def test_ssd_zoom_out_then_iou_crop_is_v2s_pad_and_crop_at_the_drawn_window(coco):
    """SSD's geometry: `RandomZoomOut`, `RandomIoUCrop`, a flip, `Resize((300, 300))`. The
    probes left whole give the window's size and the image's place in it; v2's `pad`
    (what of the canvas the window covers), `crop` (boxes whose centre it leaves out
    dropped, as `RandomIoUCrop` marks them), `horizontal_flip` and `resize` give the same
    output. Samples whose window clamps every probe along an axis are left out (about
    one in 200). v2 crops, then resizes the crop alone, so its filter stops at the
    window's edge; so does nostall's, bounded by the window."""
    path, sources = coco
    recipe = [v2.RandomZoomOut(fill=FILL, side_range=(1.0, 4.0)), v2.RandomIoUCrop(), v2.RandomHorizontalFlip(),
              v2.Resize((SIDE, SIDE)), v2.SanitizeBoundingBoxes()]
    measured, mirrored, outside, shifted = Measured("ssd"), 0, 0, 0
    for seed in (5, 6):
        for source, (image, target) in zip(sources, _samples(_loader(path, recipe, seed=seed))):
            found = affine(target, (SIDE, SIDE))
            if found is None:
                continue
            (ax, cx), (ay, cy) = found
            flip = ax < 0
            width, height = integer(SIDE / abs(ax), "window width"), integer(SIDE / ay, "window height")
            # The image's place in the window (negative where the window starts inside it).
            dx = integer((SIDE - cx if flip else cx) / abs(ax), "image left")
            dy = integer(cy / ay, "image top")

            def steps(dx, dy):
                pad = [max(0, dx), max(0, dy), max(0, width - dx - WIDTH), max(0, height - dy - HEIGHT)]
                return ([("pad", pad), ("crop", max(0, -dy), max(0, -dx), height, width, True)] + [("flip",)] * flip
                        + [("resize", (SIDE, SIDE))])

            measured.check(image, target, reference(source, steps(dx, dy)),
                           f"ssd: window {width}x{height}, the image at {dx},{dy} in it")
            mirrored += flip
            outside += dx > 0 or dy > 0 or width - dx > WIDTH or height - dy > HEIGHT
            if shifted < 8:
                assert failures(image, target, reference(source, steps(dx + 1, dy)), "ssd")
                shifted += 1
    print(measured)
    samples = measured.counts["samples"]
    assert samples >= 40 and 4 <= mirrored <= samples - 4 and 4 <= outside <= samples - 4, measured
    assert measured.counts["masks"] >= samples and measured.counts["points"] >= 4 * samples, measured
    # Boxes at the far edge kept by one side only (module doc): rare.
    assert measured.counts["edge_ours"] + measured.counts["edge_v2"] <= measured.counts["boxes"] // 100, measured


CROP = 256


@pytest.mark.parametrize("scale", [2.0, 1.2], ids=["crops-both", "crops-width-pads-height"])
def test_fixed_size_crop_is_v2s_crop_at_the_drawn_offset(coco, scale):
    """Large-scale jitter where it crops: `ScaleJitter((256, 256), scale_range=(s, s))`
    (a fixed size: 512 x 384, or 307 x 230, cropped to 256 wide and padded to 256 high),
    `FixedSizeCrop(256)`, a flip. The probes give the crop's offset (one draw along both
    axes, as the detection references draw it) and v2's `ScaleJitter`, `crop`, `pad` at the
    right and the bottom with the fill, and `horizontal_flip` give the same output. An
    offset moved by one pixel fails on the boxes and on the pixels alike."""
    path, sources = coco
    jitter = v2.ScaleJitter((CROP, CROP), scale_range=(scale, scale))
    recipe = [jitter, ops.FixedSizeCrop(CROP, fill=FILL_COLOUR), v2.RandomHorizontalFlip(), v2.SanitizeBoundingBoxes()]
    resized = jitter({"image": tv_tensors.Image(sources[0]["image"])})["image"].shape[-2:]
    new_h, new_w = int(resized[0]), int(resized[1])
    crop_h, crop_w = min(new_h, CROP), min(new_w, CROP)
    assert new_w > CROP
    measured, mirrored, offsets = Measured("fixed-size-crop"), 0, set()
    for source, (image, target) in zip(sources, _samples(_loader(path, recipe, seed=9))):
        (ax, cx), (ay, cy) = affine(target, (CROP, CROP))
        flip = ax < 0
        assert abs(abs(ax) - new_w / WIDTH) < 1e-5 and abs(ay - new_h / HEIGHT) < 1e-5, (ax, ay)
        left = integer(cx - CROP if flip else -cx, "left")
        top = integer(-cy, "top")
        assert 0 <= left <= new_w - crop_w and 0 <= top <= new_h - crop_h
        assert _one_draw(left, new_w - CROP, top, new_h - CROP), (left, top)

        def steps(left):
            out = [("jitter", jitter), ("crop", top, left, crop_h, crop_w, False)]
            if (crop_h, crop_w) != (CROP, CROP):
                out.append(("pad", [0, 0, CROP - crop_w, CROP - crop_h]))
            return out + [("flip",)] * flip

        measured.check(image, target, reference(source, steps(left)),
                       f"fixed-size crop at {left},{top} of {new_w}x{new_h}")
        mirrored += flip
        offsets.add((left, top))
        moved = left + 1 if left < new_w - crop_w else left - 1
        failed = failures(image, target, reference(source, steps(moved)), "fixed-size-crop")
        assert "pixels" in failed and failed & {"boxes", "kept"}, failed
    print(measured)
    assert measured.counts["samples"] == ENTRIES and 4 <= mirrored <= ENTRIES - 4 and len(offsets) >= ENTRIES // 2
    assert measured.counts["masks"] >= 2 * ENTRIES and measured.counts["points"] >= 10 * ENTRIES, measured


def test_a_box_clamped_at_a_crops_far_edge_is_kept_as_v2_keeps_it(tmp_path):
    """A box clamped at a crop's bottom edge, then resized to 300: v2 computes that edge
    in float32 (299 · f32(300 / 299) = 300.00003: dropped; 292 · f32(300 / 292) = 300:
    kept), and so does nostall (in float64 it would drop the 292 one:
    300.00000000000006)."""
    path = tmp_path / "annotations" / "instances_val.json"
    (tmp_path / "annotations").mkdir()
    (tmp_path / "val").mkdir()
    Image.fromarray(np.full((HEIGHT, WIDTH, 3), 128, np.uint8)).save(tmp_path / "val" / "a.png")
    path.write_text(json.dumps({
        "images": [{"id": 1, "file_name": "a.png", "width": WIDTH, "height": HEIGHT}],
        "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [100, 100, 100, 260], "iscrowd": 0}],
        "categories": [{"id": 1, "name": "a"}]}))
    for side in (292, 298, 299, 300):
        recipe = [v2.CenterCrop((side, side)), v2.Resize((SIDE, SIDE)), v2.SanitizeBoundingBoxes()]
        loader = nostall.Loader(str(path), pipeline=v2.Compose(recipe), dtype="uint8", batch_size=1, shuffle=False,
                                fields={"image": "image", "target": nostall.Field("coco", kind="boxes")})
        ours = next(iter(loader))["target"][0]["boxes"]
        boxes = tv_tensors.BoundingBoxes([[100.0, 100.0, 200.0, 360.0]], format="XYXY", canvas_size=(HEIGHT, WIDTH))
        theirs = v2.Compose(recipe)({"image": tv_tensors.Image(torch.zeros(3, HEIGHT, WIDTH, dtype=torch.uint8)),
                                     "boxes": boxes, "labels": torch.tensor([1])})["boxes"]
        assert len(ours) == len(theirs), (side, ours.tolist(), theirs.tolist())
