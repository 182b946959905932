"""SSD's training targets made in the loader (`Field(kind="boxes", anchors=...)`): for the
boxes each sample delivers, the anchors' classes and offsets equal what torchvision's own
default boxes, matcher and box coder make of them (as `SSD.forward` and `compute_loss`)."""

import json
import os

import numpy as np
import pytest
import torch

import nostall

v2 = pytest.importorskip("torchvision.transforms.v2")
tv_tensors = pytest.importorskip("torchvision.tv_tensors")
from PIL import Image  # noqa: E402
from torchvision.models.detection._utils import BoxCoder, SSDMatcher  # noqa: E402
from torchvision.models.detection.anchor_utils import DefaultBoxGenerator  # noqa: E402
from torchvision.models.detection.image_list import ImageList  # noqa: E402
from torchvision.ops import box_iou  # noqa: E402

#: The models' generators and the feature maps their backbones give at their sizes.
MODELS = {
    "ssd300": (DefaultBoxGenerator([[2], [2, 3], [2, 3], [2, 3], [2], [2]],
                                   scales=[0.07, 0.15, 0.33, 0.51, 0.69, 0.87, 1.05], steps=[8, 16, 32, 64, 100, 300]),
               [38, 19, 10, 5, 3, 1], 300),
    "ssdlite320": (DefaultBoxGenerator([[2, 3] for _ in range(6)], min_ratio=0.2, max_ratio=0.95),
                   [20, 10, 5, 3, 2, 1], 320),
}


def _anchors(name):
    generator, grids, side = MODELS[name]
    images = ImageList(torch.zeros(1, 3, side, side), [(side, side)])
    return generator(images, [torch.zeros(1, 1, g, g) for g in grids])[0]


@pytest.fixture(scope="module")
def coco(photos, tmp_path_factory):
    """Eight photographs with a few boxes each, of several sizes."""
    root = tmp_path_factory.mktemp("anchors")
    (root / "annotations").mkdir()
    (root / "val").mkdir()
    paths = sorted(os.path.join(d, f) for d, _, names in os.walk(photos) for f in names if f.endswith(".jpg"))
    rng = np.random.default_rng(1)
    images, annotations = [], []
    for i, path in enumerate(paths[:8]):
        Image.open(path).convert("RGB").resize((480, 360)).save(root / "val" / f"{i:04d}.png")
        images.append({"id": i + 1, "file_name": f"{i:04d}.png", "width": 480, "height": 360})
        for k in range(2 + i % 4):
            w, h = rng.integers(12, 240), rng.integers(12, 180)
            x, y = rng.integers(0, 480 - w), rng.integers(0, 360 - h)
            annotations.append({"id": 10 * i + k + 1, "image_id": i + 1, "category_id": int(1 + k % 3),
                                "bbox": [int(x), int(y), int(w), int(h)], "iscrowd": 0})
    categories = [{"id": c, "name": str(c)} for c in (1, 2, 3)]
    path = root / "annotations" / "instances_val.json"
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))
    return path


def _expected(anchors, boxes, labels):
    """torchvision's SSD targets of one image: `SSD.forward`'s matching, `compute_loss`'s
    encoding; background 0 and zero offsets."""
    classes = torch.zeros(len(anchors), dtype=torch.int64)
    offsets = torch.zeros(len(anchors), 4)
    if len(boxes) == 0:
        return classes, offsets
    matched = SSDMatcher(0.5)(box_iou(boxes, anchors))
    foreground = matched >= 0
    classes[foreground] = labels[matched[foreground]]
    coder = BoxCoder(weights=(10.0, 10.0, 5.0, 5.0))
    offsets[foreground] = coder.encode_single(boxes[matched[foreground]], anchors[foreground])
    return classes, offsets


@pytest.mark.parametrize("name", ["ssd300", "ssdlite320"])
def test_anchor_targets_are_torchvisions_for_the_boxes_delivered(coco, name):
    side = MODELS[name][2]
    recipe = [v2.RandomPhotometricDistort(), v2.RandomZoomOut(fill=(123, 117, 104)), v2.RandomIoUCrop(),
              v2.RandomHorizontalFlip(), v2.Resize((side, side))]
    fields = {"image": "image", "target": nostall.Field("coco", kind="boxes", anchors=name)}
    loader = nostall.Loader(str(coco), pipeline=v2.Compose(recipe), dtype="uint8", fields=fields, batch_size=4,
                            shuffle=False, seed=2)
    anchors = _anchors(name)
    foreground = 0
    for epoch in range(2):
        loader.set_epoch(epoch)
        for batch in loader:
            for target in batch["target"]:
                assert target["anchor_labels"].shape == (len(anchors),)
                assert target["anchor_boxes"].shape == (len(anchors), 4)
                classes, offsets = _expected(anchors, target["boxes"], target["labels"])
                assert torch.equal(target["anchor_labels"], classes)
                torch.testing.assert_close(target["anchor_boxes"], offsets, atol=1e-4, rtol=0)
                foreground += int((classes > 0).sum())
    assert foreground >= 50


def test_padded_targets_and_refusals(coco):
    fields = {"image": "image", "target": nostall.Field("coco", kind="boxes", anchors="ssd300", padded=True)}
    batch = next(iter(nostall.Loader(str(coco), pipeline=[v2.Resize((300, 300))], dtype="uint8", fields=fields,
                                     batch_size=4, shuffle=False)))
    target = batch["target"]
    assert target["anchor_labels"].shape == (4, 8732) and target["anchor_boxes"].shape == (4, 8732, 4)
    assert target["boxes"].shape == (4, 128, 4)
    for field, recipe, says in [
        (nostall.Field("coco", kind="boxes", anchors="ssd300"), [v2.Resize((320, 320))], r"300x300.*Resize\(\(300, 300\)\)"),
        (nostall.Field("coco", kind="boxes", anchors="yolo"), [v2.Resize((300, 300))], "not a preset"),
    ]:
        with pytest.raises(nostall.ConfigError, match=says):
            nostall.Loader(str(coco), pipeline=recipe, fields={"image": "image", "target": field})
