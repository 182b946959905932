"""RandomPerspective against torchvision.transforms.v2: its pixels, and the boxes, keypoints,
instance masks and label maps that follow it after the geometry, on the demo photographs.

v2 draws the corners' destinations (`endpoints`) inside `make_params`, so no argument of
`RandomPerspective` pins them, as a range of one value pins RandomAffine's. nostall's
`_nostall._perspective(endpoints)` is the operator with its draw pinned (the same kernel,
the same motion of the targets); v2's side is `RandomPerspective(p=1)` whose
`make_params` returns the coefficients of those endpoints (`Pinned` here), which is what
its own `make_params` returns for a draw of them. The draw itself is then compared in
distribution, over 10 000 samples on each side (`test_detection_draws.py`'s way)."""

import numpy as np
import pytest
import torch

import nostall
from nostall import _nostall, ops
from parity import COUNT, assert_parity, nostall_images, parity, reference_images

v2 = pytest.importorskip("torchvision.transforms.v2")
tv_tensors = pytest.importorskip("torchvision.tv_tensors")
from torchvision.transforms.functional import _get_perspective_coeffs  # noqa: E402
from torchvision.transforms.v2._utils import query_size  # noqa: E402

import test_detection as boxes_case  # noqa: E402
import test_detection_draws as draws_case  # noqa: E402
import test_detection_masks as masks_case  # noqa: E402
import test_segmentation as maps_case  # noqa: E402
from test_segmentation import shards  # noqa: E402,F401  (the label maps' fixture)

SIZE = 96


def endpoints(fractions, width, height):
    """Corner destinations in pixel indices from fractions of the image's last pixel:
    x then y of the top left, top right, bottom right and bottom left corner."""
    return [round(f * ((width if k % 2 == 0 else height) - 1)) for k, f in enumerate(fractions)]


#: Pinned draws, as fractions of the image: a mild one, a strong one pulling one side in,
#: one tilting the top, and one past what distortion_scale=1 can draw on one corner.
DRAWS = {
    "mild": [0.05, 0.02, 0.97, 0.06, 0.93, 0.96, 0.03, 0.91],
    "strong": [0.4, 0.3, 0.8, 0.05, 0.98, 0.9, 0.1, 0.7],
    "tilt": [0.0, 0.25, 1.0, 0.0, 0.9, 1.0, 0.1, 0.95],
    "corner": [0.45, 0.45, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0],
}


class Pinned(v2.RandomPerspective):
    """v2's RandomPerspective with its draw pinned to `fractions` (`endpoints`)."""

    def __init__(self, fractions, **kwargs):
        super().__init__(p=1.0, **kwargs)
        self.fractions = fractions

    def make_params(self, flat_inputs):
        height, width = query_size(flat_inputs)
        start = [[0, 0], [width - 1, 0], [width - 1, height - 1], [0, height - 1]]
        end = np.array(endpoints(self.fractions, width, height)).reshape(4, 2).tolist()
        return dict(coefficients=_get_perspective_coeffs(start, end))


class Ours:
    """nostall's pinned perspective for images of `size` (width, height)."""

    def __init__(self, fractions, size, interpolation="bilinear", fill=0):
        fill = tuple(fill) if isinstance(fill, (tuple, list)) else (fill,) * 3
        self.op = _nostall._perspective(endpoints(fractions, *size), interpolation, fill)


@pytest.fixture(scope="module")
def pngs(square_pngs):
    return square_pngs(SIZE)


@pytest.mark.parametrize("fill", [0, (10, 20, 30)], ids=repr)
@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
@pytest.mark.parametrize("draw", list(DRAWS))
@pytest.mark.parametrize("crop", [(SIZE, SIZE), (64, SIZE)], ids=["square", "wide"])
def test_pinned_pixels_match_v2s_kernel(pngs, draw, interpolation, fill, crop):
    height, width = crop
    ours = Ours(DRAWS[draw], (width, height), interpolation, fill).op
    got = nostall_images(pngs, ours, crop=crop)
    want = reference_images(pngs, Pinned(DRAWS[draw], interpolation=interpolation, fill=fill), crop=crop)
    assert got.shape == want.shape == (COUNT, 3, height, width)
    assert_parity(got, want, repr(ours))
    within, mean, most = parity(got, want)
    print(f"{draw} {interpolation} {fill} {crop}: {(got != want).sum().item()} of {got.numel()} differ, "
          f"max {most}")
    if interpolation == "nearest":
        assert torch.equal(got, want)
    else:
        # As RandomAffine's bilinear (test_affine.py): a weighted sum may round the other way.
        assert most <= 1 and (got != want).float().mean().item() <= 1e-4


def _coco_loader(path, pipeline, masks=False, keypoints=False, **kwargs):
    extra = {"masks": True} if masks else {"keypoints": 17} if keypoints else {}
    fields = {"image": "image", "target": nostall.Field("coco", kind="boxes", **extra)}
    return nostall.Loader(str(path), pipeline=pipeline, dtype="uint8", fields=fields, batch_size=4,
                          shuffle=False, **kwargs)


def _targets(loader):
    return [target for batch in loader for target in batch["target"]]


#: The geometry before each pinned draw, and the output's (width, height) it makes.
GEOMETRIES = {
    "resize": ([v2.Resize((120, 90))], (90, 120)),
    "crop-flip": ([v2.CenterCrop(300), v2.Resize((64, 80)), v2.RandomHorizontalFlip(p=1.0)], (80, 64)),
    "square": ([v2.Resize((96, 96))], (96, 96)),
}


@pytest.mark.parametrize("draw", list(DRAWS))
@pytest.mark.parametrize("geometry", list(GEOMETRIES))
def test_boxes_follow_the_perspective_as_v2_moves_them(photos, tmp_path, geometry, draw):
    recipe, size = GEOMETRIES[geometry]
    path, images, annotations = boxes_case.write_coco(photos, tmp_path)
    loader = _coco_loader(path, [*recipe, Ours(DRAWS[draw], size).op, v2.SanitizeBoundingBoxes()])
    got = _targets(loader)
    expected = boxes_case.reference(tmp_path, images, annotations, [*recipe, Pinned(DRAWS[draw])])
    assert len(got) == len(expected) == len(images)
    worst = 0.0
    for i, (target, (boxes, labels)) in enumerate(zip(got, expected)):
        assert torch.equal(target["labels"], labels), i
        assert target["boxes"].shape == boxes.shape, i
        if len(boxes):
            worst = max(worst, (target["boxes"] - boxes).abs().max().item())
    print(f"{geometry} {draw}: boxes at most {worst} px from v2's")
    assert worst <= 0.5
    assert sum(len(t["boxes"]) for t in got) >= len(images)


@pytest.fixture(scope="module")
def masks_coco(photos, tmp_path_factory):
    root = tmp_path_factory.mktemp("coco")
    path, images, annotations = masks_case.write_coco(photos, root)
    unmoved = _targets(_coco_loader(path, [v2.Resize((masks_case.HEIGHT, masks_case.WIDTH))], masks=True))
    return path, images, annotations, unmoved


#: Geometries whose masks v2 reads pixel for pixel as nostall does (no resize, or one
#: halving), and one resize that is not.
MASK_GEOMETRIES = {
    "exact": ([v2.CenterCrop((300, 400))], (400, 300)),
    "flip-half": ([v2.RandomHorizontalFlip(p=1.0), v2.Resize((180, 240))], (240, 180)),
    "resize": ([v2.Resize((120, 90))], (90, 120)),
}


@pytest.mark.parametrize("draw", ["mild", "strong", "tilt"])
@pytest.mark.parametrize("geometry", list(MASK_GEOMETRIES))
def test_instance_masks_follow_the_perspective_as_v2_moves_them(masks_coco, geometry, draw):
    recipe, size = MASK_GEOMETRIES[geometry]
    got = _targets(_coco_loader(masks_coco[0], [*recipe, Ours(DRAWS[draw], size).op, v2.SanitizeBoundingBoxes()],
                                masks=True))
    expected = masks_case.reference(masks_coco, [*recipe, Pinned(DRAWS[draw])])
    compared, worst = 0, 1.0
    for i, (target, (boxes, labels, masks)) in enumerate(zip(got, expected)):
        assert torch.equal(target["labels"], labels), i
        assert (target["boxes"] - boxes).abs().max().item() <= 0.5, i
        assert target["masks"].shape == masks.shape, i
        for ours, theirs in zip(target["masks"], masks):
            worst = min(worst, (ours == theirs).float().mean().item())
            compared += int(theirs.sum() > 0)
    print(f"{geometry} {draw}: masks at least {worst:.6%} equal to v2's")
    if geometry != "resize":
        assert worst == 1.0
    assert worst >= 0.995
    assert compared >= 2 * len(got)


@pytest.fixture(scope="module")
def keypoints_coco(photos, tmp_path_factory):
    import test_detection_keypoints as keypoints_case

    return keypoints_case.write_coco(photos, tmp_path_factory.mktemp("keypoints"))


@pytest.mark.parametrize("draw", list(DRAWS))
@pytest.mark.parametrize("geometry", ["resize", "crop-flip"])
def test_keypoints_follow_the_perspective_as_v2_moves_them(keypoints_coco, geometry, draw):
    import test_detection_keypoints as keypoints_case

    recipe, size = GEOMETRIES[geometry]
    got = _targets(_coco_loader(keypoints_coco[0], [*recipe, Ours(DRAWS[draw], size).op], keypoints=True))
    checked, worst = 0, 0.0
    for image, ours in zip(keypoints_coco[1], got):
        sample = keypoints_case._sample(keypoints_coco, image)
        theirs = keypoints_case._sanitize(v2.Compose([*recipe, Pinned(DRAWS[draw])])(sample))
        assert torch.equal(ours["labels"], theirs["labels"])
        assert (ours["boxes"] - theirs["boxes"].as_subclass(torch.Tensor)).abs().max().item() <= 0.5
        points, visibility = theirs["keypoints"].as_subclass(torch.Tensor), theirs["visibility"]
        labelled = visibility > 0
        assert torch.equal(ours["keypoints"][..., 2][~labelled], torch.zeros_like(visibility[~labelled]))
        worst = max(worst, (ours["keypoints"][..., :2][labelled] - points[labelled]).abs().max().item())
        checked += int(labelled.sum())
    print(f"{geometry} {draw}: keypoints at most {worst} px from v2's")
    assert worst <= 0.5
    assert checked >= 20


@pytest.mark.parametrize("fill", [0, 255])
@pytest.mark.parametrize("draw", ["strong", "tilt"])
def test_label_maps_follow_the_perspective_with_their_fill(shards, draw, fill):
    """The field's fill is v2's fill for a `Mask` (`fill={tv_tensors.Image: 0, tv_tensors.Mask: fill}`)."""
    root, samples = shards
    recipe = [v2.CenterCrop((300, 400))]
    field = nostall.Field("seg.png", kind="mask", fill=fill)
    loader = nostall.Loader(str(root), pipeline=[*recipe, Ours(DRAWS[draw], (400, 300)).op], dtype="uint8",
                            batch_size=4, shuffle=False, fields={"image": "jpg.png", "mask": field})
    masks = maps_case._masks(loader)
    theirs_recipe = v2.Compose([*recipe, Pinned(DRAWS[draw], fill={tv_tensors.Image: 0, tv_tensors.Mask: fill})])
    for got, (pixels, labels) in zip(masks, samples):
        sample = {"image": tv_tensors.Image(torch.from_numpy(pixels).permute(2, 0, 1)),
                  "mask": tv_tensors.Mask(torch.from_numpy(labels)[None])}
        theirs = theirs_recipe(sample)["mask"].as_subclass(torch.Tensor)[0]
        assert torch.equal(got, theirs), (got != theirs).sum().item()
    if fill:
        assert (masks == fill).any()


def test_random_draws_give_the_same_images_and_targets_on_any_thread_count(masks_coco):
    recipe = [v2.RandomResizedCrop((64, 80), scale=(0.3, 1.0)), ops.RandomPerspective(0.6, p=0.8),
              v2.SanitizeBoundingBoxes()]
    runs = []
    for threads in (1, 2, 4):
        batches = list(_coco_loader(masks_coco[0], recipe, masks=True, seed=7, threads=threads))
        runs.append(([b["image"] for b in batches], [t for b in batches for t in b["target"]]))
    (images, first), *others = runs
    for other_images, other in others:
        assert len(other_images) == len(images) and len(other) == len(first)
        assert all(torch.equal(a, b) for a, b in zip(images, other_images))
        for a, b in zip(first, other):
            assert torch.equal(a["boxes"], b["boxes"]) and torch.equal(a["masks"], b["masks"])
            assert torch.equal(a["labels"], b["labels"])
    assert sum(len(t["boxes"]) for t in first) > 0
    again = [b["image"] for b in _coco_loader(masks_coco[0], recipe, masks=True, seed=8)]
    assert not all(torch.equal(a, b) for a, b in zip(images, again))


def test_random_draws_are_the_same_pixels_on_any_thread_count(pngs):
    op = ops.RandomPerspective(distortion_scale=0.7, p=0.9, interpolation="nearest", fill=(10, 20, 30))
    one = nostall_images(pngs, op, threads=1)
    for threads in (2, 4):
        assert torch.equal(nostall_images(pngs, op, threads=threads), one)
    assert not torch.equal(nostall_images(pngs, op, seed=1), one)
    assert torch.equal(nostall_images(pngs, ops.RandomPerspective(p=0.0)), nostall_images(pngs))


def _whole_boxes(targets):
    return torch.stack([b[0] for b, _ in targets]).double()


def test_random_perspective_draws_the_corners_as_v2(photos, tmp_path):
    """A whole-image box's edges after the perspective are where the drawn corners took
    the image's: each edge the outermost of two corners (each a `randint`), and unmoved
    where the draw was skipped (`p`) or drew the corners in place."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        path = draws_case.write_coco(photos, tmp_path, draws_case.WHOLE)
        side = draws_case.SIDE
        recipe = [v2.Resize((side, side)), v2.RandomPerspective(distortion_scale=0.6, p=0.7)]
        ours = _whole_boxes(draws_case.nostall_targets(path, recipe, seed=9))
        theirs = _whole_boxes(draws_case.v2_targets(v2.Compose(recipe), draws_case.WHOLE, seed=9))
    finally:
        torch.set_num_threads(before)
    for k, what in enumerate(["left", "top", "right", "bottom"]):
        draws_case.assert_same_values(ours[:, k].numpy(), theirs[:, k].numpy(), f"RandomPerspective: the {what} edge")
    whole = torch.tensor([0.0, 0.0, side, side], dtype=torch.float64)
    unmoved = lambda b: torch.isclose(b, whole, atol=1e-3).all(1).tolist()  # noqa: E731
    draws_case.assert_homogeneous(unmoved(ours), unmoved(theirs), "RandomPerspective: share unmoved")


def test_arguments_translation_and_errors():
    op = ops.RandomPerspective()
    assert (op.distortion_scale, op.p, op.interpolation, op.fill) == (0.5, 0.5, "bilinear", 0.0)
    theirs = v2.RandomPerspective(0.3, p=0.2, interpolation=v2.InterpolationMode.NEAREST, fill=5)
    assert ops.from_torchvision(theirs) == [ops.RandomPerspective(0.3, 0.2, "nearest", 5)]
    with pytest.raises(nostall.ConfigError, match="RandomPerspective: distortion_scale"):
        ops.RandomPerspective(1.5)
    with pytest.raises(ValueError):
        v2.RandomPerspective(1.5)
    with pytest.raises(nostall.ConfigError, match="RandomPerspective: p"):
        ops.RandomPerspective(p=-0.1)
    with pytest.raises(nostall.ConfigError, match="RandomPerspective: interpolation"):
        ops.RandomPerspective(interpolation="bicubic")
    with pytest.raises(nostall.ConfigError, match="RandomPerspective: fill"):
        ops.RandomPerspective(fill=(1, 2))
