"""DETR's training recipe (facebookresearch/detr, `datasets/coco.py`'s
`make_coco_transforms('train')`) with nostall's operators: `RandomChoice` between two
choices that size the image (`DetrRandomResize` to a batch canvas, or a `Compose` of a
resize, `RandomSizeCrop` and a resize to the canvas), boxes in normalised cxcywh.

DETR's code is not pip-installable: its transforms are transcribed below as its
`datasets/transforms.py` writes them (PIL images, torch boxes), taking their random
parameters as arguments. nostall draws from its own generator, so each sample's window
is read back from its boxes (the boxes' x depends only on the window's left, their y only
on its top) and DETR's transforms run with it; every other draw is pinned (one size
each, a choice of weight 1, a flip of probability 0 or 1). The draws themselves are
compared in distribution over 10 000 samples, as `test_detection_draws.py` does for v2's."""

import json
import math
import os
import pathlib
import random

import numpy as np
import pytest
import torch

import nostall
from nostall import ops
from parity import assert_homogeneous, assert_same_distribution

T = pytest.importorskip("torchvision.transforms")
F = pytest.importorskip("torchvision.transforms.functional")
v2 = pytest.importorskip("torchvision.transforms.v2")
from PIL import Image  # noqa: E402

#: DETR's scales.
SCALES = [480, 512, 544, 576, 608, 640, 672, 704, 736, 768, 800]
#: Sources of two shapes, so that both the shorter side and max_size act.
SIZES = [(480, 360), (300, 420)]
#: Small boxes every GRID pixels: some lie inside any window, so the window can be read back.
GRID = 60


# DETR's datasets/transforms.py, transcribed (its random draws passed in).

def detr_crop(image, target, region):
    cropped_image = F.crop(image, *region)
    target = target.copy()
    i, j, h, w = region
    target["size"] = torch.tensor([h, w])
    boxes = target["boxes"]
    max_size = torch.as_tensor([w, h], dtype=torch.float32)
    cropped_boxes = boxes - torch.as_tensor([j, i, j, i])
    cropped_boxes = torch.min(cropped_boxes.reshape(-1, 2, 2), max_size)
    cropped_boxes = cropped_boxes.clamp(min=0)
    target["boxes"] = cropped_boxes.reshape(-1, 4)
    fields = ["labels", "boxes"]
    if "masks" in target:
        target["masks"] = target["masks"][:, i:i + h, j:j + w]
        fields.append("masks")
    keep = torch.all(cropped_boxes[:, 1, :] > cropped_boxes[:, 0, :], dim=1)
    for field in fields:
        target[field] = target[field][keep]
    return cropped_image, target


def detr_hflip(image, target):
    flipped_image = F.hflip(image)
    w, h = image.size
    target = target.copy()
    boxes = target["boxes"]
    target["boxes"] = boxes[:, [2, 1, 0, 3]] * torch.as_tensor([-1, 1, -1, 1]) + torch.as_tensor([w, 0, w, 0])
    if "masks" in target:
        target["masks"] = target["masks"].flip(-1)
    return flipped_image, target


def get_size_with_aspect_ratio(image_size, size, max_size=None):
    w, h = image_size
    if max_size is not None:
        min_original_size = float(min((w, h)))
        max_original_size = float(max((w, h)))
        if max_original_size / min_original_size * size > max_size:
            size = int(round(max_size * min_original_size / max_original_size))
    if (w <= h and w == size) or (h <= w and h == size):
        return (h, w)
    if w < h:
        ow = size
        oh = int(size * h / w)
    else:
        oh = size
        ow = int(size * w / h)
    return (oh, ow)


def detr_resize(image, target, size, max_size=None):
    size = get_size_with_aspect_ratio(image.size, size, max_size)
    rescaled_image = F.resize(image, size)
    ratio_width, ratio_height = (float(s) / float(s_orig) for s, s_orig in zip(rescaled_image.size, image.size))
    target = target.copy()
    target["boxes"] = target["boxes"] * torch.as_tensor([ratio_width, ratio_height, ratio_width, ratio_height])
    h, w = size
    target["size"] = torch.tensor([h, w])
    if "masks" in target:
        target["masks"] = torch.nn.functional.interpolate(target["masks"][:, None].float(), size,
                                                          mode="nearest")[:, 0] > 0.5
    return rescaled_image, target


def detr_normalized(boxes, size):
    """DETR's `Normalize` on the boxes: cxcywh, divided by the image's width and height."""
    x0, y0, x1, y1 = boxes.unbind(-1)
    cxcywh = torch.stack([(x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0], dim=-1)
    h, w = size
    return cxcywh / torch.tensor([w, h, w, h], dtype=torch.float32)


def detr_random_size_crop(img, min_size, max_size):
    """DETR's `RandomSizeCrop.__call__`'s draws: the region (top, left, height, width)."""
    w = random.randint(min_size, min(img.width, max_size))
    h = random.randint(min_size, min(img.height, max_size))
    return T.RandomCrop.get_params(img, [h, w])


@pytest.fixture(scope="module")
def coco(photos, tmp_path_factory):
    """Twelve photographs (landscape and portrait), each with two large boxes and a grid
    of 8-pixel ones, every box its own label."""
    root = tmp_path_factory.mktemp("detr")
    (root / "annotations").mkdir()
    (root / "val").mkdir()
    paths = sorted(os.path.join(d, f) for d, _, names in os.walk(photos) for f in names if f.endswith(".jpg"))
    images, annotations = [], []
    for i, path in enumerate(paths[:12]):
        width, height = SIZES[i % 2]
        Image.open(path).convert("RGB").resize((width, height)).save(root / "val" / f"{i:04d}.png")
        images.append({"id": i + 1, "file_name": f"{i:04d}.png", "width": width, "height": height})
        boxes = [(20 + 5 * i, 30, 120, 90), (width - 150, height - 100, 100, 70)]
        boxes += [(x, y, 8, 8) for y in range(10, height - 8, GRID) for x in range(10, width - 8, GRID)]
        for k, box in enumerate(boxes):
            x, y, w, h = box
            # A triangle in the box: its mask is no box, so a crop or a flip that moved it
            # wrongly would show.
            polygon = [x, y, x + w, y + h / 2, x, y + h]
            annotations.append({"id": 1000 * i + k + 1, "image_id": i + 1, "category_id": k + 1, "bbox": box,
                                "iscrowd": 0, "segmentation": [polygon]})
    count = max(sum(a["image_id"] == image["id"] for a in annotations) for image in images)
    categories = [{"id": c, "name": str(c)} for c in range(1, count + 1)]
    path = root / "annotations" / "instances_val.json"
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))
    return path, images, annotations


def _samples(path, recipe, threads=2, seed=0, dtype="uint8", **field):
    loader = nostall.Loader(str(path), pipeline=recipe, dtype=dtype, batch_size=4, shuffle=False,
                            threads=threads, seed=seed,
                            fields={"image": "image", "target": nostall.Field("coco", kind="boxes", **field)})
    return [(image, target) for batch in loader for image, target in zip(batch["image"], batch["target"])]


def _source(path, meta, annotations, masks=False):
    """The PNG as DETR opens it, and its target as DETR's `ConvertCocoPolysToMask` makes it
    (its masks too, with `masks`)."""
    image = Image.open(path.parent.parent / "val" / meta["file_name"]).convert("RGB")
    mine = [a for a in annotations if a["image_id"] == meta["id"]]
    boxes = torch.tensor([[x, y, x + w, y + h] for x, y, w, h in (a["bbox"] for a in mine)], dtype=torch.float32)
    target = {"boxes": boxes, "labels": torch.tensor([a["category_id"] for a in mine])}
    if masks:
        from pycocotools import mask as coco_mask

        height, width = meta["height"], meta["width"]
        decoded = [coco_mask.decode(coco_mask.frPyObjects(a["segmentation"], height, width)).any(axis=2)
                   for a in mine]
        target["masks"] = torch.as_tensor(np.stack(decoded), dtype=torch.uint8)
    return image, target


def _window_back(ours, before, crop, axis):
    """The offset along `axis` (0: left, 1: top) of the `crop`-pixel window that takes the
    boxes `before` (DETR's target before its crop) to `ours` (nostall's boxes and labels,
    after the crop and the last resize): every offset tried, the one whose boxes' edges
    along the axis lie closest to nostall's."""
    boxes, labels = ours
    height, width = before["size"].tolist()
    best = None
    for offset in range(width - crop + 1 if axis == 0 else height - crop + 1):
        # Along the other axis the window is whole: only this one's edges move.
        region = (0, offset, height, crop) if axis == 0 else (offset, 0, crop, width)
        theirs = _cropped(before, region, labels)
        err = (theirs[:, [axis, axis + 2]] - boxes[:, [axis, axis + 2]]).abs().max().item()
        if best is None or err < best[0]:
            best = (err, offset)
    return best[1]


def _cropped(before, region, labels):
    """DETR's crop of `region` of `before`'s boxes (shifted and clamped, none dropped),
    those of `labels`, in their order."""
    i, j, h, w = region
    shifted = before["boxes"] - torch.as_tensor([j, i, j, i])
    shifted = torch.min(shifted.reshape(-1, 2, 2), torch.as_tensor([w, h], dtype=torch.float32)).clamp(min=0)
    at = {int(label): k for k, label in enumerate(before["labels"])}
    return shifted.reshape(-1, 4)[[at[int(label)] for label in labels]]


@pytest.mark.parametrize("flip", [0.0, 1.0])
def test_the_first_choice_is_detrs_resize_to_the_canvas(coco, flip):
    """`RandomChoice` drawing its first choice: DETR's `RandomResize(scales, max_size)`.
    The longer side is bounded where the shorter would take it past max_size (480 × 360
    at 800 would be 1066 wide: 1000 × 750)."""
    path, images, annotations = coco
    recipe = [ops.RandomHorizontalFlip(p=flip),
              ops.RandomChoice([ops.DetrRandomResize([800], max_size=1000),
                                ops.Compose([ops.DetrRandomResize([400]), ops.RandomSizeCrop(384, 600),
                                             ops.DetrRandomResize([800], max_size=1000)])], p=[1.0, 0.0])]
    got = _samples(path, recipe)
    assert len(got) == len(images)
    for (image, target), meta in zip(got, images):
        assert image.shape == (3, 1000, 1000)
        pil, theirs = _source(path, meta, annotations)
        if flip:
            pil, theirs = detr_hflip(pil, theirs)
        pil, theirs = detr_resize(pil, theirs, 800, max_size=1000)
        height, width = theirs["size"].tolist()
        assert target["size"].tolist() == [height, width]
        assert torch.equal(target["labels"], theirs["labels"])
        torch.testing.assert_close(target["boxes"], theirs["boxes"], atol=2e-3, rtol=0)
        reference = torch.from_numpy(np.array(pil)).permute(2, 0, 1)
        diff = (image[:, :height, :width].int() - reference.int()).abs()
        assert diff.max() <= 2 and diff.float().mean() < 0.3, (diff.max(), diff.float().mean())
        assert not image[:, height:].any() and not image[:, :, width:].any()


def _second_choice(flip):
    """DETR's choices, the second drawn always, after a flip of probability `flip`."""
    return [ops.RandomHorizontalFlip(p=flip),
            ops.RandomChoice([ops.DetrRandomResize([800], max_size=1000),
                              ops.Compose([ops.DetrRandomResize([400]), ops.RandomSizeCrop(384, 384),
                                           ops.DetrRandomResize([800], max_size=1000)])], p=[0.0, 1.0])]


def _detrs_second_choice(path, meta, annotations, target, flip, masks=False):
    """DETR's transforms of the second choice on the source of nostall's `target`, its
    window read back from nostall's boxes: the image and DETR's target, and the window's
    (top, left)."""
    pil, theirs = _source(path, meta, annotations, masks)
    if flip:
        pil, theirs = detr_hflip(pil, theirs)
    pil, before = detr_resize(pil, theirs, 400)
    height, width = before["size"].tolist()
    # The last resize's ratio, from the window's 384 pixels to the size nostall gives.
    out_h, out_w = target["size"].tolist()
    ratio = torch.tensor([out_w / 384, out_h / 384] * 2)
    ours = (target["boxes"] / ratio, target["labels"])
    left = _window_back(ours, before, 384, 0) if width > 384 else 0
    top = _window_back(ours, before, 384, 1) if height > 384 else 0
    pil, theirs = detr_crop(pil, before, (top, left, 384, 384))
    pil, theirs = detr_resize(pil, theirs, 800, max_size=1000)
    assert theirs["size"].tolist() == [out_h, out_w]
    # nostall's boxes field drops what is under a pixel wide at the end (v2's
    # SanitizeBoundingBoxes); DETR's crop drops only what it leaves empty.
    wide = ((theirs["boxes"][:, 2:] - theirs["boxes"][:, :2]) >= 1).all(1)
    theirs = {key: value[wide] if key in ("boxes", "labels", "masks") else value for key, value in theirs.items()}
    return pil, theirs, (top, left)


@pytest.mark.parametrize("flip", [0.0, 1.0])
def test_the_second_choice_is_detrs_resize_crop_and_resize(coco, flip):
    """`RandomChoice` drawing its second choice, DETR's `Compose([RandomResize([400]),
    RandomSizeCrop(384, 384), RandomResize([800], max_size=1000)])`: a 384-pixel window
    at a place drawn. Read back from the boxes, the window gives DETR's transforms the
    same boxes (within 0.002 px, the same kept) and pixels close to DETR's (which
    resamples twice, where nostall resizes the window once)."""
    path, images, annotations = coco
    offsets = set()
    for (image, target), meta in zip(_samples(path, _second_choice(flip)), images):
        pil, theirs, offset = _detrs_second_choice(path, meta, annotations, target, flip)
        offsets.add(offset)
        assert torch.equal(target["labels"], theirs["labels"])
        torch.testing.assert_close(target["boxes"], theirs["boxes"], atol=2e-3, rtol=0)
        out_h, out_w = target["size"].tolist()
        reference = torch.from_numpy(np.array(pil)).permute(2, 0, 1)
        diff = (image[:, :out_h, :out_w].int() - reference.int()).abs().float()
        assert diff.mean() < 1.5, diff.mean()
        assert not image[:, out_h:].any() and not image[:, :, out_w:].any()
    # The windows are drawn: not all at one place.
    assert len(offsets) > 1


@pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")  # pycocotools under NumPy 2
def test_instance_masks_follow_the_second_choice_as_detrs(coco, flip=1.0):
    """The instance masks through DETR's second choice: DETR's (`ConvertCocoPolysToMask`'s
    polygons, flipped, resized by nearest `interpolate`, sliced by the crop, resized
    again) against nostall's (each read once through the composed window): at least 99.5%
    of their pixels equal, image by image, and nothing on the canvas past the image."""
    path, images, annotations = coco
    got = _samples(path, _second_choice(flip), masks=True)
    assert len(got) == len(images)
    for (image, target), meta in zip(got, images):
        _, theirs, _ = _detrs_second_choice(path, meta, annotations, target, flip, masks=True)
        out_h, out_w = target["size"].tolist()
        masks = target["masks"]
        assert masks.shape == (len(target["labels"]), 1000, 1000)
        assert not masks[:, out_h:].any() and not masks[:, :, out_w:].any()
        ours, expected = masks[:, :out_h, :out_w].bool(), theirs["masks"]
        assert ours.shape == expected.shape
        equal = (ours == expected).float().mean().item()
        assert equal >= 0.995, (meta["file_name"], equal)
        # DETR rounds at each of its two resizes, nostall once: a pixel of the 400 image
        # is about two of the output, so their edges may lie apart by that much, no more.
        reach = math.ceil(max(out_h, out_w) / 384) + 1
        apart = _apart_from_an_edge(ours, expected, reach)
        assert apart <= 4, (meta["file_name"], apart)
        # Every mask DETR keeps is there, and not empty where DETR's is not.
        assert torch.equal(ours.flatten(1).any(1), expected.flatten(1).any(1))


def _apart_from_an_edge(ours, expected, reach):
    """How many pixels where `ours` and `expected` differ lie farther than `reach` pixels
    (in a square) from an edge of `expected`: from a pixel set and one unset there."""
    n, y, x = torch.nonzero(ours != expected, as_tuple=True)
    height, width = expected.shape[1:]
    set_near = torch.zeros_like(n, dtype=torch.bool)
    unset_near = torch.zeros_like(n, dtype=torch.bool)
    for dy in range(-reach, reach + 1):
        for dx in range(-reach, reach + 1):
            seen = expected[n, (y + dy).clamp(0, height - 1), (x + dx).clamp(0, width - 1)]
            set_near |= seen
            unset_near |= ~seen
    return int((~(set_near & unset_near)).sum())


def test_detrs_recipe_runs_as_written_with_normalised_cxcywh_boxes(coco):
    """The whole recipe, `Normalize` included: each image on a 1333 square canvas, its
    boxes DETR's `Normalize` of the pixel boxes (cxcywh over the image's size), the same
    for 1, 2 and 4 threads."""
    path, images, _ = coco
    normalize = ops.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    recipe = [ops.RandomHorizontalFlip(),
              ops.RandomChoice([ops.DetrRandomResize(SCALES, max_size=1333),
                                ops.Compose([ops.DetrRandomResize([400, 500, 600]), ops.RandomSizeCrop(384, 600),
                                             ops.DetrRandomResize(SCALES, max_size=1333)])])]
    runs = [_samples(path, [*recipe, normalize], threads=threads, seed=7, dtype="float32", box_format="cxcywh",
                     normalized=True)
            for threads in (1, 2)]
    four = _samples(path, [*recipe, normalize], threads=4, seed=7, dtype="float32", box_format="cxcywh",
                    normalized=True)
    for (one, a), (other, b) in zip(runs[0], four):
        assert torch.equal(one, other)
        for key in ("boxes", "labels", "size"):
            assert torch.equal(a[key], b[key])
    pixels = _samples(path, recipe, seed=7)
    for (one, a), (two, b), (image, t) in zip(*runs, pixels):
        assert one.dtype == torch.float32 and one.shape == (3, 1333, 1333)
        assert torch.equal(one, two)
        for key in ("boxes", "labels", "size"):
            assert torch.equal(a[key], b[key])
        height, width = t["size"].tolist()
        assert a["size"].tolist() == [height, width] and max(height, width) <= 1333
        assert torch.equal(a["labels"], t["labels"])
        torch.testing.assert_close(a["boxes"], detr_normalized(t["boxes"], (height, width)), atol=1e-6, rtol=0)
        assert ((a["boxes"] >= 0) & (a["boxes"] <= 1)).all()
        # The normalised pixels are the uint8 run's.
        mean = torch.tensor([0.485, 0.456, 0.406])[:, None, None]
        std = torch.tensor([0.229, 0.224, 0.225])[:, None, None]
        torch.testing.assert_close(one[:, :height, :width], (image[:, :height, :width] / 255 - mean) / std,
                                   atol=1e-4, rtol=0)
    # Both choices drawn: some images cropped (a shorter side under 480) and some not.
    shorter = [min(t["size"].tolist()) for _, t in pixels]
    assert len(set(shorter)) > 1


def test_v2s_random_choice_with_a_compose_is_one_choice(coco):
    """v2's `RandomChoice([RandomShortestSize(scales, 1333), Compose([...])])` (the
    references' spelling of DETR's choice): the `Compose` is one choice, nostall's
    `Compose`, not three."""
    path, images, _ = coco
    choice = v2.RandomChoice([v2.RandomShortestSize(SCALES, max_size=1333),
                              v2.Compose([v2.RandomShortestSize([400, 500, 600]), v2.RandomCrop(384),
                                          v2.RandomShortestSize(SCALES, max_size=1333)])], p=[0.0, 1.0])
    (op,) = nostall.ops.from_torchvision(choice)
    assert repr(op).startswith("RandomChoice(") and repr(op).count("Compose(") == 1, repr(op)
    for image, target in _samples(path, [v2.RandomHorizontalFlip(), choice]):
        height, width = target["size"].tolist()
        # The 384 crop's square resized to a scale (v2 truncates: a pixel under it).
        assert image.shape == (3, 1333, 1333) and height == width and 479 <= height <= 800


def test_what_a_batch_cannot_hold_is_refused(coco):
    path = coco[0]
    canvas = ops.DetrRandomResize(SCALES, max_size=1333)
    with pytest.raises(nostall.ConfigError, match="RandomChoice.*transforms.*canvas in some draws"):
        ops.RandomChoice([canvas, ops.Resize((300, 300))])
    with pytest.raises(nostall.ConfigError, match="RandomApply.*transforms.*canvas in some draws"):
        ops.RandomApply([canvas])
    with pytest.raises(nostall.ConfigError, match="Compose.*RandomSizeCrop after DetrRandomResize"):
        ops.Compose([canvas, ops.RandomSizeCrop(384, 600)])
    with pytest.raises(nostall.ConfigError, match="RandomOrder.*sizes the image"):
        ops.RandomOrder([ops.RandomSizeCrop(384, 600), ops.RandomHorizontalFlip()])
    with pytest.raises(nostall.ConfigError, match="max_size"):
        ops.RandomSizeCrop(600, 384)
    # A size that varies by the draw, with nothing after to fix it.
    with pytest.raises(nostall.ConfigError, match="output size varies"):
        _samples(path, [ops.RandomChoice([ops.Resize((300, 300)), ops.RandomSizeCrop(100, 200)])])
    # Fixed after, it batches.
    _samples(path, [ops.RandomChoice([ops.Resize(300), ops.RandomSizeCrop(100, 200)]), ops.CenterCrop(96)])
    # The canvases of the choices differ: the larger holds either.
    got = _samples(path, [ops.RandomChoice([ops.DetrRandomResize([200], max_size=300), canvas])])
    assert {image.shape for image, _ in got} == {(3, 1333, 1333)}
    # After the batch canvas an operator on pixels would see the padding.
    with pytest.raises(nostall.ConfigError, match="GaussianBlur follows RandomChoice, whose canvas"):
        _samples(path, [ops.RandomChoice([canvas]), ops.GaussianBlur(3)])


DRAWS = 10_000
#: The draws' photograph: small, so that 10 000 samples take a second.
WIDTH, HEIGHT = 64, 48


#: The edges the draws' boxes end at: every STEP pixels, so that any window of 20
#: pixels or more holds at least one inside along each axis.
STEP = 8


@pytest.fixture(scope="module")
def edges(photos, tmp_path_factory):
    """10 000 entries naming one WIDTH × HEIGHT photograph, each with boxes from its top
    left corner to a right edge every STEP pixels (labels 1 to 8; the last the whole
    width) and to a bottom edge likewise (labels 9 on): after a crop, an edge inside the
    window gives its left or top back, the whole-image boxes its width and height."""
    root = tmp_path_factory.mktemp("detr-draws")
    (root / "annotations").mkdir()
    (root / "val").mkdir()
    photo = sorted(pathlib.Path(photos).rglob("*.jpg"))[0]
    with Image.open(photo) as image:
        image.convert("RGB").resize((WIDTH, HEIGHT), Image.BILINEAR).save(root / "val" / "photo.png")
    boxes = [[0, 0, x, HEIGHT] for x in range(STEP, WIDTH + 1, STEP)]
    boxes += [[0, 0, WIDTH, y] for y in range(STEP, HEIGHT + 1, STEP)]
    images = [{"id": i + 1, "file_name": "photo.png", "width": WIDTH, "height": HEIGHT} for i in range(DRAWS)]
    annotations = [{"id": len(boxes) * i + k + 1, "image_id": i + 1, "category_id": k + 1, "bbox": box,
                    "iscrowd": 0} for i in range(DRAWS) for k, box in enumerate(boxes)]
    categories = [{"id": k + 1, "name": str(k + 1)} for k in range(len(boxes))]
    path = root / "annotations" / "instances_val.json"
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))
    return path


def _window(boxes, labels):
    """The window (width, height, left, top) a sample's edge boxes give back."""
    columns = WIDTH // STEP
    found = {}
    for axis, first, count in [(0, 1, columns), (1, columns + 1, HEIGHT // STEP)]:
        at = {int(label) - first + 1: box for box, label in zip(boxes.tolist(), labels)
              if first <= label < first + count}
        side = at[count][axis + 2]
        # An edge inside the window: the window starts that far before it.
        inside = [STEP * k - box[axis + 2] for k, box in at.items() if 0 < box[axis + 2] < side]
        assert inside and len(set(inside)) == 1, (at, side)
        found[axis] = (side, inside[0])
    return found[0][0], found[1][0], found[0][1], found[1][1]


def _targets(path, pipeline, seed):
    loader = nostall.Loader(str(path), pipeline=pipeline, batch_size=500, shuffle=False, threads=2, dtype="uint8",
                            seed=seed, fields={"image": "image", "target": nostall.Field("coco", kind="boxes")})
    # Copies: each target is a view that would keep its whole batch alive.
    out = [(t["boxes"].clone(), t["labels"].clone(), t["size"].clone()) for batch in loader for t in batch["target"]]
    assert len(out) == DRAWS
    return out


def test_random_size_crop_draws_its_window_as_detr(edges):
    """The window's width, height, left and top over 10 000 samples, against DETR's
    `RandomSizeCrop(20, 40)` (`random.randint`, then `T.RandomCrop.get_params`) on the
    same size. A `FixedSizeCrop` canvas after it batches the windows unscaled."""
    ours = [_window(boxes, labels.tolist())
            for boxes, labels, _ in _targets(edges, [ops.RandomSizeCrop(20, 40), ops.FixedSizeCrop(WIDTH)], seed=3)]
    random.seed(3)
    torch.manual_seed(3)
    blank = Image.new("RGB", (WIDTH, HEIGHT))
    theirs = []
    for _ in range(DRAWS):
        top, left, h, w = detr_random_size_crop(blank, 20, 40)
        theirs.append((w, h, left, top))
    for k, what in enumerate(["width", "height"]):
        assert_homogeneous([o[k] for o in ours], [t[k] for t in theirs], f"RandomSizeCrop: the {what} drawn")
    for k, what in [(2, "left"), (3, "top")]:
        assert_same_distribution(np.array([o[k] for o in ours], dtype=float),
                                 np.array([t[k] for t in theirs], dtype=float), f"RandomSizeCrop: the {what}")


def test_detr_random_resize_draws_its_size_as_detr(edges):
    """The output's size over 10 000 samples against DETR's `RandomResize(sizes,
    max_size)` (`random.choice`, then its rounding): 64 × 48 at a shorter side of 18
    would be 24 wide, past 22, so it is bounded to `round(22 × 48 / 64)`, `round(16.5)`,
    16 (half to even), as 16 is: five sizes."""
    sizes = [8, 10, 12, 14, 16, 18]
    ours = [tuple(size.tolist()) for _, _, size in _targets(edges, [ops.DetrRandomResize(sizes, max_size=22)], seed=5)]
    random.seed(5)
    theirs = [get_size_with_aspect_ratio((WIDTH, HEIGHT), random.choice(sizes), 22) for _ in range(DRAWS)]
    assert_homogeneous(ours, theirs, "DetrRandomResize: the size drawn")
    assert len(set(ours)) == 5
