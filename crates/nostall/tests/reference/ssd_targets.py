"""Reference SSD training targets, computed by torchvision itself, for nostall's SSD target
encoding (``crates/nostall/src/fields/kind/boxes/anchors.rs``).

Run with the test environment's Python (CPU is enough; no weights are downloaded)::

    .venv-test/bin/python crates/nostall/tests/reference/ssd_targets.py

It writes ``crates/nostall/src/fields/kind/boxes/ssd_reference.json``, which the Rust unit
tests read with ``include_str!``. The JSON holds:

* ``presets``: for ``ssd300_vgg16`` and ``ssdlite320_mobilenet_v3_large``, the default boxes
  the models' own ``DefaultBoxGenerator`` gives one image, on the feature maps their own
  backbones (``weights=None, weights_backbone=None``) give a zero image of the models'
  fixed size; for two generators of other parameters (``generator``: non-square images,
  steps that do not divide the image, ``clip=False``, given scales that clipping clamps),
  on feature maps of chosen sizes. Each with the image size (height, width), the
  feature-map sizes, the number of boxes, two checksums (the sum of all coordinates, and a
  sum weighted by row and column, which sees rows out of order) and a sample of rows
  ``[index, x0, y0, x1, y1]``.
* ``cases``: fixed sets of ground-truth boxes (xyxy pixels) and labels, and the targets
  ``SSD.forward``/``SSD.compute_loss`` derive from them with the model's own matcher
  (``SSDMatcher(0.5)``) and box coder (``BoxCoder((10, 10, 5, 5))``), or new ones of the
  same parameters for the other generators: the foreground anchors' indices, their class
  targets and their regression targets. Every anchor not listed is background (class 0).

Floats are written as the shortest decimal that reads back as the same float32; input
boxes are multiples of 1/16 px, so they are exact in float32 on both sides.
"""

import json
import pathlib

import numpy as np
import torch
from torchvision.models.detection import ssd300_vgg16, ssdlite320_mobilenet_v3_large
from torchvision.models.detection._utils import BoxCoder, SSDMatcher
from torchvision.models.detection.anchor_utils import DefaultBoxGenerator
from torchvision.models.detection.image_list import ImageList
from torchvision.ops import box_iou

OUT = pathlib.Path(__file__).resolve().parents[2] / "src/fields/kind/boxes/ssd_reference.json"

# Every SAMPLE_STEP-th anchor is stored, with the first and last few and each level's first.
SAMPLE_STEP = 41
EDGE_ROWS = 8


def f32(v):
    """The shortest decimal that reads back as the float32 ``v``, as a JSON number."""
    return float(str(np.float32(v)))


def checksums(anchors):
    a = anchors.double()
    row_weight = (torch.arange(a.shape[0], dtype=torch.float64) % 97 + 1)[:, None]
    col_weight = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    return float(a.sum()), float((a * row_weight * col_weight).sum())


def model_boxes(builder):
    """The model's default boxes for one image, and its generator, matcher, box coder,
    image size and feature-map sizes."""
    model = builder(weights=None, weights_backbone=None).eval()
    size = model.transform.fixed_size
    assert size is not None and size[0] == size[1], size
    assert isinstance(model.anchor_generator, DefaultBoxGenerator)
    assert isinstance(model.proposal_matcher, SSDMatcher)
    assert model.proposal_matcher.high_threshold == 0.5 == model.proposal_matcher.low_threshold
    assert isinstance(model.box_coder, BoxCoder) and model.box_coder.weights == (10.0, 10.0, 5.0, 5.0)
    images = torch.zeros(1, 3, size[0], size[1])
    with torch.no_grad():
        features = list(model.backbone(images).values())
    anchors = model.anchor_generator(ImageList(images, [tuple(size)]), features)[0]
    grids = [list(f.shape[-2:]) for f in features]
    return anchors, model.anchor_generator, model.proposal_matcher, model.box_coder, list(size), grids


def generated_boxes(params, size, grids):
    """A generator's default boxes for one image of ``size`` (height, width) on feature maps
    of ``grids``, with SSD's matcher and box coder."""
    generator = DefaultBoxGenerator(**params)
    images = torch.zeros(1, 3, size[0], size[1])
    features = [torch.zeros(1, 1, h, w) for h, w in grids]
    anchors = generator(ImageList(images, [tuple(size)]), features)[0]
    return anchors, generator, SSDMatcher(0.5), BoxCoder(weights=(10.0, 10.0, 5.0, 5.0)), size, grids


# Generators of other parameters than the two models', for the general constructor.
GENERATED = [
    (
        "steps_not_dividing_unclipped",
        {"aspect_ratios": [[2], [2, 3]], "min_ratio": 0.1, "max_ratio": 0.8, "steps": [7, 30], "clip": False},
        [301, 333],
        [[43, 48], [11, 12]],
    ),
    (
        "given_scales_clipped",
        {"aspect_ratios": [[3]], "scales": [0.7, 1.2], "steps": None, "clip": True},
        [200, 280],
        [[5, 7]],
    ),
]


def targets(matcher, coder, anchors, boxes, labels):
    """What SSD.forward and SSD.compute_loss derive from one image's targets."""
    boxes = torch.tensor(boxes, dtype=torch.float32).reshape(-1, 4)
    labels = torch.tensor(labels, dtype=torch.int64)
    # SSD.forward's check: every box has positive width and height.
    assert not (boxes[:, 2:] <= boxes[:, :2]).any()
    if boxes.numel() == 0:
        matched = torch.full((anchors.size(0),), -1, dtype=torch.int64)
    else:
        matched = matcher(box_iou(boxes, anchors))
    foreground = torch.where(matched >= 0)[0]
    gt = matched[foreground]
    regression = coder.encode_single(boxes[gt], anchors[foreground])
    classes = torch.zeros(anchors.size(0), dtype=torch.int64)
    classes[foreground] = labels[gt]
    return foreground, classes[foreground], regression


def random_boxes(seed, size, count):
    rng = np.random.default_rng(seed)
    height, width = size
    out = []
    while len(out) < count:
        cx, cy = rng.uniform(0, width), rng.uniform(0, height)
        w, h = np.exp(rng.uniform(np.log(2.0), np.log(0.9 * min(size)), 2))
        x0, y0 = max(0.0, cx - w / 2), max(0.0, cy - h / 2)
        x1, y1 = min(float(width), cx + w / 2), min(float(height), cy + h / 2)
        box = [round(v * 16) / 16 for v in (x0, y0, x1, y1)]
        if box[2] - box[0] >= 1 and box[3] - box[1] >= 1:
            out.append(box)
    return out, [int(v) for v in rng.integers(1, 91, count)]


# A box whose IoU with some default boxes is exactly 0.5 (the threshold: foreground), the
# first of them its best.
HALF_IOU_BOX = {300: [1.5, -6.5, 12.0, 14.5], 320: [-8.0, -24.0, 24.0, 40.0]}


def cases(size):
    """(name, boxes, labels) for an image of ``size`` (height, width) px."""
    h, w = float(size[0]), float(size[1])
    rand_boxes, rand_labels = random_boxes(20240611 + size[0] + size[1], size, 50)
    edge_boxes = (
        "edge_boxes",
        [
            [0.0, 0.0, 50.0, 60.0],
            [w - 50.0, h - 60.0, w, h],
            [0.0, 100.0, w, 200.0],
            [0.0, 0.0, w, h],
            [-8.0, h - 30.0, 30.0, h + 10.0],
        ],
        [1, 2, 3, 4, 5],
    )
    if size[0] != size[1]:
        return [edge_boxes, ("random_50", rand_boxes, rand_labels)]
    s = w
    return [
        ("no_boxes", [], []),
        ("one_tiny_box", [[150.0, 150.0, 153.0, 152.0]], [7]),
        # Contained in three default boxes of equal area: three anchors tie for its best.
        ("tied_tiny_box_in_corner", [[0.0, 0.0, 4.0, 2.0]], [3]),
        # A sliver: no default box overlaps it by 0.5, only the forced match holds.
        ("sliver_below_threshold", [[10.0, 140.0, s - 10.0, 152.0]], [5]),
        # The same box twice: above the threshold the first wins (argmax), but the
        # forced best-anchor match of the second is written last.
        ("identical_boxes_compete", [[100.0, 100.0, 160.0, 160.0]] * 2, [1, 2]),
        # Two boxes whose best default box is the same one.
        (
            "shifted_boxes_share_best_anchor",
            [[100.0, 100.0, 160.0, 160.0], [101.0, 100.0, 161.0, 160.0]],
            [4, 9],
        ),
        ("iou_exactly_half", [HALF_IOU_BOX[size[0]]], [6]),
        edge_boxes,
        ("random_50", rand_boxes, rand_labels),
    ]


def main():
    torch.set_num_threads(2)
    doc = {"presets": {}, "cases": []}
    presets = [
        ("ssd300_vgg16", None, lambda: model_boxes(ssd300_vgg16)),
        ("ssdlite320_mobilenet_v3_large", None, lambda: model_boxes(ssdlite320_mobilenet_v3_large)),
    ] + [
        (name, params, lambda p=params, s=size, g=grids: generated_boxes(p, s, g))
        for name, params, size, grids in GENERATED
    ]
    for name, params, make in presets:
        anchors, generator, matcher, coder, size, grids = make()
        n = anchors.shape[0]
        per_level = [g[0] * g[1] * k for g, k in zip(grids, generator.num_anchors_per_location())]
        starts = np.cumsum([0] + per_level[:-1]).tolist()
        rows = sorted(
            set(range(0, n, SAMPLE_STEP)) | set(range(EDGE_ROWS)) | set(range(n - EDGE_ROWS, n)) | set(starts)
        )
        total, weighted = checksums(anchors)
        doc["presets"][name] = {
            **({"generator": params} if params else {}),
            "image_size": size,
            "grid_sizes": grids,
            "count": n,
            "sum": total,
            "weighted_sum": weighted,
            "sample": [[i] + [f32(v) for v in anchors[i].tolist()] for i in rows],
        }
        print(f"{name}: {n} default boxes on grids {grids} at {size}, {len(rows)} sampled")
        for case, boxes, labels in cases(size):
            foreground, classes, regression = targets(matcher, coder, anchors, boxes, labels)
            if boxes:
                iou = box_iou(torch.tensor(boxes, dtype=torch.float32), anchors)
                best = iou.max(dim=1).values
                tied = (iou == best[:, None]).sum(1)
                print(
                    f"  {case}: {len(boxes)} boxes, {foreground.numel()} foreground, "
                    f"best IoU {best.min():.3f}..{best.max():.3f}, boxes with tied best anchors "
                    f"{int((tied > 1).sum())} (most {int(tied.max())})"
                )
            if case == "sliver_below_threshold":
                assert float(iou.max()) < 0.5 and foreground.numel() == 1
            if case == "tied_tiny_box_in_corner":
                assert int(tied[0]) > 1
            if case == "iou_exactly_half":
                half = torch.where(iou[0] == 0.5)[0]
                assert len(half) >= 2 and int(half[0]) == int(iou[0].argmax()), half
                assert all(int(j) in foreground.tolist() for j in half)
            if case == "shifted_boxes_share_best_anchor":
                b = iou.argmax(dim=1)
                assert int(b[0]) == int(b[1]), b
            doc["cases"].append(
                {
                    "preset": name,
                    "name": case,
                    "boxes": boxes,
                    "labels": labels,
                    "foreground": foreground.tolist(),
                    "classes": classes.tolist(),
                    "regression": [[f32(v) for v in row] for row in regression.tolist()],
                }
            )

    # One preset or case a line: small diffs, and a file that stays readable.
    lines = ['{"presets":{']
    presets = [f"{json.dumps(k)}:{json.dumps(v, separators=(',', ':'))}" for k, v in doc["presets"].items()]
    lines.append(",\n".join(presets))
    lines.append('},"cases":[')
    lines.append(",\n".join(json.dumps(c, separators=(",", ":")) for c in doc["cases"]))
    lines.append("]}")
    OUT.write_text("\n".join(lines) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
