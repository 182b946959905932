"""The random detection operators draw as torchvision.transforms.v2 does: RandomZoomOut,
RandomIoUCrop, ScaleJitter, RandomShortestSize, and RandomRotation and RandomAffine with
boxes, over 10 000 draws on each side, compared in distribution
(two-sample Kolmogorov–Smirnov, chi-square of homogeneity: `parity.py`).

nostall draws from its own generator, so no sample matches v2's one for one, and the
draws are not exposed; but the boxes move with the image, so each sample's output boxes
give its draws back: where a whole-image box lands is where the image was put on the
zoomed-out canvas, which boxes survive and where tells the IoU crop's window, and a
whole-image box's size after ScaleJitter is the size drawn. v2 runs the same recipe on
the same canvas size and boxes; both sides are seeded, so the tests cannot flake.

Most of the time is v2's: RandomIoUCrop's Python loop of window trials, a few
milliseconds a sample; nostall's 10 000 samples take about a second.

The dataset is one small PNG of a real photograph named by 10 000 COCO image entries:
each entry is its own sample, with its own draws."""

import json
import pathlib

import numpy as np
import pytest
import torch

import nostall
from nostall import ops
from parity import assert_homogeneous, assert_same_distribution

v2 = pytest.importorskip("torchvision.transforms.v2")
tv_tensors = pytest.importorskip("torchvision.tv_tensors")
from PIL import Image  # noqa: E402

DRAWS = 10_000
#: The photograph's size: small, so that 10 000 samples decode and resize in a second.
WIDTH, HEIGHT = 64, 48
#: The square output of the recipes that end in Resize (nostall needs a fixed size).
SIDE = 32


@pytest.fixture
def one_torch_thread():
    """v2 on tensors this small is all per-call overhead; torch's intra-op threads only
    fight over the cores (several times slower on a busy machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def write_coco(photos, root, boxes, count=DRAWS):
    """A COCO layout (``annotations/instances_val.json``, ``val/``) of ``count`` image
    entries that all name one WIDTH × HEIGHT PNG of a demo photograph, each with
    ``boxes`` (xyxy) labelled 1, 2, …; returns the annotation file's path."""
    (root / "annotations").mkdir(parents=True)
    (root / "val").mkdir()
    photo = sorted(pathlib.Path(photos).rglob("*.jpg"))[0]
    with Image.open(photo) as image:
        image.convert("RGB").resize((WIDTH, HEIGHT), Image.BILINEAR).save(root / "val" / "photo.png")
    images = [{"id": i + 1, "file_name": "photo.png", "width": WIDTH, "height": HEIGHT} for i in range(count)]
    annotations = [{"id": len(boxes) * i + k + 1, "image_id": i + 1, "category_id": k + 1,
                    "bbox": [x0, y0, x1 - x0, y1 - y0], "iscrowd": 0}
                   for i in range(count) for k, (x0, y0, x1, y1) in enumerate(boxes)]
    categories = [{"id": k + 1, "name": str(k + 1)} for k in range(len(boxes))]
    path = root / "annotations" / "instances_val.json"
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))
    return path


def assert_same_values(ours, theirs, what):
    """`assert_same_distribution` once values a float rounding apart are made one. The two
    sides compute in float32 in their own order, so one exact value (an uncropped box's
    corner, shared by a sixth of the samples) lands a few ulps apart; the empirical
    distributions would then step at two places and KS measure the step. Distinct values
    lie further apart (integer windows and canvases of at most 256 pixels, seen on 32:
    at least 32 / (256 × 255) ≈ 5e-4), so joining values closer than 1e-4 joins only
    what is equal."""
    ours, theirs = np.asarray(ours, dtype=float), np.asarray(theirs, dtype=float)
    values = np.unique(np.concatenate([ours, theirs]))
    firsts = values[np.concatenate([[True], np.diff(values) > 1e-4])]
    snap = lambda x: firsts[np.searchsorted(firsts, x, side="right") - 1]  # noqa: E731
    assert_same_distribution(snap(ours), snap(theirs), what)


def nostall_targets(path, pipeline, seed):
    """Every sample's (boxes, labels) out of nostall, in order."""
    loader = nostall.Loader(str(path), pipeline=pipeline, fields={"image": "image", "target": nostall.Field(
        "coco", kind="boxes")}, batch_size=256, shuffle=False, threads=2, dtype="uint8", seed=seed)
    # Copies: each target is a view that would keep its whole batch alive.
    out = [(t["boxes"].clone(), t["labels"].clone()) for batch in loader for t in batch["target"]]
    assert len(out) == DRAWS
    return out


def v2_targets(recipe, boxes, seed, image=False):
    """v2's (boxes, labels) for DRAWS runs of ``recipe`` over ``boxes`` on a WIDTH × HEIGHT
    canvas. The draws depend only on the canvas's size, which the boxes carry, so the
    image is left out unless the recipe asks for one (RandomIoUCrop does); then a blank
    one-channel one, which costs nothing to crop."""
    torch.manual_seed(seed)
    blank = tv_tensors.Image(torch.zeros(1, HEIGHT, WIDTH, dtype=torch.uint8))
    out = []
    # No autograd bookkeeping on v2's many small tensor operations: a quarter faster.
    with torch.inference_mode():
        for _ in range(DRAWS):
            sample = {"boxes": tv_tensors.BoundingBoxes(boxes, format="XYXY", canvas_size=(HEIGHT, WIDTH))}
            # Without an image, v2 would take the labels, a plain tensor, for one.
            if image:
                sample.update(image=blank, labels=torch.arange(1, len(boxes) + 1))
            done = recipe(sample)
            out.append((done["boxes"].as_subclass(torch.Tensor), done.get("labels")))
    return out


WHOLE = [[0.0, 0.0, float(WIDTH), float(HEIGHT)]]


def zoom_out_draws(targets):
    """Each sample's whole-image box as (x0, y0, width, untouched): where the image lies
    on the output, its size there, and whether it fills it (no zoom, or a canvas that
    truncates to the image's size)."""
    boxes = torch.stack([b[0] for b, _ in targets]).double()
    untouched = torch.isclose(boxes, torch.tensor([0.0, 0.0, SIDE, SIDE], dtype=torch.float64), atol=1e-3).all(1)
    return boxes[:, 0].numpy(), boxes[:, 1].numpy(), (boxes[:, 2] - boxes[:, 0]).numpy(), untouched.tolist()


def test_random_zoom_out_draws_the_canvas_and_the_place_as_v2(photos, tmp_path, one_torch_thread):
    path = write_coco(photos, tmp_path, WHOLE)
    recipe = [v2.RandomZoomOut(fill=0, side_range=(1.0, 4.0), p=0.5), v2.Resize((SIDE, SIDE))]
    ours = zoom_out_draws(nostall_targets(path, recipe, seed=1))
    theirs = zoom_out_draws(v2_targets(v2.Compose(recipe), WHOLE, seed=1))
    for k, what in enumerate(["left edge", "top edge", "width"]):
        assert_same_values(ours[k], theirs[k], f"RandomZoomOut: the image's {what} on the output")
    assert_homogeneous(ours[3], theirs[3], "RandomZoomOut: share left unzoomed")


#: RandomIoUCrop's boxes (xyxy on the WIDTH × HEIGHT photograph, labels 1 to 4): a large
#: one that most windows overlap, a medium one, and two small ones near the corners that
#: windows often leave out.
IOU_BOXES = [[4.0, 4.0, 60.0, 44.0], [30.0, 20.0, 50.0, 40.0], [5.0, 30.0, 11.0, 36.0], [40.0, 5.0, 44.0, 9.0]]
#: The box whose place is compared: the medium one, kept in most windows but not all.
FOLLOWED = 2


def iou_crop_draws(targets):
    """(boxes kept, the followed box's xyxy when kept, uncropped) for each sample. A window
    is never the whole image (its side is drawn below 1 and truncated), so a sample is
    uncropped exactly when all its boxes come out as Resize alone puts them."""
    scale = torch.tensor([SIDE / WIDTH, SIDE / HEIGHT] * 2)
    resized = torch.tensor(IOU_BOXES) * scale
    kept, followed, uncropped = [], [], []
    for boxes, labels in targets:
        kept.append(len(boxes))
        followed.extend(boxes[labels == FOLLOWED].double().tolist())
        uncropped.append(len(boxes) == len(IOU_BOXES) and torch.allclose(boxes, resized, atol=1e-3))
    return kept, np.array(followed), uncropped


def test_random_iou_crop_draws_the_iou_and_the_window_as_v2(photos, tmp_path, one_torch_thread):
    path = write_coco(photos, tmp_path, IOU_BOXES)
    recipe = [v2.RandomIoUCrop(), v2.Resize((SIDE, SIDE)), v2.SanitizeBoundingBoxes()]
    ours = iou_crop_draws(nostall_targets(path, recipe, seed=2))
    theirs = iou_crop_draws(v2_targets(v2.Compose(recipe), IOU_BOXES, seed=2, image=True))
    # Never none on either side (a window holds some box's centre, and what it keeps of
    # such a box is over a pixel wide): a sample without boxes fails as a category of its own.
    assert_homogeneous(ours[0], theirs[0], "RandomIoUCrop: boxes kept")
    # Kept in most samples: enough of them for KS to see a window drawn otherwise.
    assert len(ours[1]) > DRAWS // 2 and len(theirs[1]) > DRAWS // 2
    for k, what in enumerate(["x0", "y0", "x1", "y1"]):
        assert_same_values(ours[1][:, k], theirs[1][:, k], f"RandomIoUCrop: the followed box's {what}")
    assert_homogeneous(ours[2], theirs[2], "RandomIoUCrop: share left uncropped")


#: Larger than any size ScaleJitter draws for the photograph here (its scale ≤ 2 times
#: the fit in the target, so at most the photograph's own size), so FixedSizeCrop never
#: crops: it pads.
BIG = 80


# A small square target, so that the images stay small; and one whose two numbers give
# different sizes read as v2 reads them (width first) and the other way round.
@pytest.mark.parametrize("target", [(32, 32), (24, 40)], ids=["square", "width-first"])
def test_scale_jitter_draws_the_size_as_v2(photos, tmp_path, one_torch_thread, target):
    path = write_coco(photos, tmp_path, WHOLE)
    jitter = v2.ScaleJitter(target_size=target, scale_range=(0.1, 2.0))
    ours = torch.stack([b[0] for b, _ in nostall_targets(path, [jitter, ops.FixedSizeCrop(size=BIG)], seed=3)])
    # Padded at the right and the bottom only: the box is the drawn size from the origin.
    assert not ours[:, :2].any() and (ours[:, 2:] < BIG).all()
    theirs = torch.stack([b[0] for b, _ in v2_targets(jitter, WHOLE, seed=3)])
    for k, what in [(2, "width"), (3, "height")]:
        assert_same_values(ours[:, k].numpy(), theirs[:, k].numpy(), f"ScaleJitter {target}: the drawn {what}")


def test_random_shortest_size_draws_the_size_as_v2(photos, tmp_path, one_torch_thread):
    """The whole-image box after `RandomShortestSize` is the size drawn (the image at the
    canvas's top left); some sizes are capped by `max_size` (64 × 48: a shorter side of
    18 would make the longer 24, past 22)."""
    path = write_coco(photos, tmp_path, WHOLE)
    shortest = v2.RandomShortestSize(min_size=[8, 10, 12, 14, 16, 18], max_size=22)
    ours = torch.stack([b[0] for b, _ in nostall_targets(path, [shortest], seed=5)])
    theirs = torch.stack([b[0] for b, _ in v2_targets(shortest, WHOLE, seed=5)])
    sizes = lambda boxes: [(round(w), round(h)) for w, h in (boxes[:, 2:] - boxes[:, :2]).tolist()]  # noqa: E731
    assert not ours[:, :2].any()
    assert_homogeneous(sizes(ours), sizes(theirs), "RandomShortestSize: the size drawn")
    assert len(set(sizes(ours))) == 6


#: A square in the middle of the photograph: after Resize((SIDE, SIDE)), 16 pixels wide at
#: the centre of the output, so no rotation or shift drawn below takes it off the canvas
#: (no clamping: its box gives the draw back whole).
MIDDLE = [[16.0, 12.0, 48.0, 36.0]]


def test_random_rotation_draws_the_angle_as_v2(photos, tmp_path, one_torch_thread):
    """A square turned by θ about its centre has a box `16 (|cos θ| + |sin θ|)` wide: the
    box's width gives |θ| back, and its left edge its place."""
    path = write_coco(photos, tmp_path, MIDDLE)
    recipe = [v2.Resize((SIDE, SIDE)), v2.RandomRotation(degrees=30)]
    ours = torch.stack([b[0] for b, _ in nostall_targets(path, recipe, seed=6)]).double()
    theirs = torch.stack([b[0] for b, _ in v2_targets(v2.Compose(recipe), MIDDLE, seed=6)]).double()
    for boxes in (ours, theirs):
        assert ((boxes[:, 2] - boxes[:, 0]) >= 16 - 1e-3).all()
    for k, what in [(0, "left edge"), (1, "top edge")]:
        assert_same_values(ours[:, k].numpy(), theirs[:, k].numpy(), f"RandomRotation: the box's {what}")
    width = lambda b: (b[:, 2] - b[:, 0]).numpy()  # noqa: E731
    assert_same_values(width(ours), width(theirs), "RandomRotation: the box's width")


def test_random_affine_draws_the_shift_and_the_scale_as_v2(photos, tmp_path, one_torch_thread):
    """Without a turn or a shear the square's box is the square scaled about the centre,
    then shifted: its width gives the scale back, its centre the shift (whole pixels)."""
    path = write_coco(photos, tmp_path, MIDDLE)
    recipe = [v2.Resize((SIDE, SIDE)), v2.RandomAffine(degrees=0, translate=(0.2, 0.2), scale=(0.8, 1.2))]
    ours = torch.stack([b[0] for b, _ in nostall_targets(path, recipe, seed=7)]).double()
    theirs = torch.stack([b[0] for b, _ in v2_targets(v2.Compose(recipe), MIDDLE, seed=7)]).double()
    centre = lambda b, k: ((b[:, k] + b[:, k + 2]) / 2).numpy()  # noqa: E731
    for k, what in [(0, "x"), (1, "y")]:
        assert_homogeneous(np.round(centre(ours, k)).tolist(), np.round(centre(theirs, k)).tolist(),
                           f"RandomAffine: the shift in {what}")
    width = lambda b: (b[:, 2] - b[:, 0]).numpy()  # noqa: E731
    assert_same_values(width(ours), width(theirs), "RandomAffine: the scale (the box's width)")
