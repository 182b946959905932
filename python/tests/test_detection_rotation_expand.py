"""`RandomRotation(expand=True)`: each image turned onto its own grown size (v2's
`rotate(expand=True)`), at the top left of a canvas as large as the largest the degrees
allow, its `size` given with its boxes; boxes, instance masks and keypoints moved as v2
moves them, on the demo photographs."""

import pytest
import torch

import nostall
from nostall import ops

v2 = pytest.importorskip("torchvision.transforms.v2")
F = pytest.importorskip("torchvision.transforms.v2.functional")
tv_tensors = pytest.importorskip("torchvision.tv_tensors")

import test_detection as boxes_case  # noqa: E402
import test_detection_keypoints as keypoints_case  # noqa: E402
import test_detection_masks as masks_case  # noqa: E402

#: The geometry before the rotation: an exact size, wider than tall.
BEFORE = [v2.Resize((90, 120))]


def _turn(angle, **kwargs):
    return v2.RandomRotation(degrees=(angle, angle), expand=True, **kwargs)


def _samples(path, recipe, **kwargs):
    loader = nostall.Loader(str(path), pipeline=v2.Compose(recipe), dtype="uint8", fields=boxes_case.FIELDS,
                            batch_size=4, shuffle=False, **kwargs)
    return [(image, target) for batch in loader for image, target in zip(batch["image"], batch["target"])]


@pytest.fixture(scope="module")
def coco(photos, tmp_path_factory):
    root = tmp_path_factory.mktemp("expand")
    path, images, annotations = boxes_case.write_coco(photos, root)
    return root, path, images, annotations


@pytest.mark.parametrize("fill", [0, (10, 20, 30)], ids=repr)
@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
@pytest.mark.parametrize("angle", [90, 180, 0, 30, -37.5])
def test_each_image_is_v2s_grown_rotation_at_the_canvas_top_left(coco, angle, interpolation, fill):
    _, path, images, _ = coco
    before = _samples(path, BEFORE)
    got = _samples(path, [*BEFORE, _turn(angle, interpolation=interpolation, fill=fill)])
    assert len(got) == len(before) == len(images)
    colour = torch.tensor(fill if isinstance(fill, tuple) else (fill,) * 3, dtype=torch.uint8)[:, None, None]
    for (image, target), (unturned, _) in zip(got, before):
        theirs = F.rotate(unturned, angle, interpolation=v2.InterpolationMode(interpolation), expand=True,
                          fill=list(fill) if isinstance(fill, tuple) else fill)
        height, width = theirs.shape[-2:]
        # One angle: the canvas is that angle's size.
        assert image.shape == (3, height, width)
        assert target["size"].tolist() == [height, width]
        ours = image[:, :height, :width]
        diff = (ours.int() - theirs.int()).abs()
        if interpolation == "nearest" or angle % 90 == 0:
            assert torch.equal(ours, theirs), (angle, diff.max())
        else:
            # As test_affine.py: torch's bmm sums the grid in its own order, so a weighted
            # sum may fall on the other side of a half.
            assert diff.max() <= 1 and (diff > 0).float().mean() <= 1e-4, (angle, diff.max())
        assert (image[:, height:] == colour).all() and (image[:, :, width:] == colour).all()


def test_a_range_of_angles_puts_each_image_on_the_largest_canvas(coco):
    _, path, images, _ = coco
    got = _samples(path, [*BEFORE, v2.RandomRotation(degrees=(-30, 30), expand=True)], seed=3)
    # v2's largest size over (-30, 30) for 120 x 90 (the extents peak at the range's ends).
    largest = F.rotate(torch.zeros(1, 90, 120), 30, expand=True).shape[-2:]
    sizes = set()
    for image, target in got:
        assert image.shape[-2:] == largest
        height, width = target["size"].tolist()
        assert height <= largest[0] and width <= largest[1]
        assert (image[:, height:] == 0).all() and (image[:, :, width:] == 0).all()
        sizes.add((height, width))
    assert len(sizes) >= 4, sizes


@pytest.mark.parametrize("angle", [30, -37.5, 90, 180])
def test_boxes_follow_the_grown_rotation_as_v2_moves_them(coco, angle):
    root, path, images, annotations = coco
    recipe = [*BEFORE, _turn(angle)]
    got = _samples(path, [*recipe, v2.SanitizeBoundingBoxes()])
    expected = boxes_case.reference(root, images, annotations, recipe)
    kept = 0
    for i, ((_, target), (boxes, labels)) in enumerate(zip(got, expected)):
        assert torch.equal(target["labels"], labels), i
        torch.testing.assert_close(target["boxes"], boxes, atol=0.5, rtol=0, msg=f"image {i}")
        kept += len(boxes)
    assert kept >= len(images)


@pytest.fixture(scope="module")
def masks_coco(photos, tmp_path_factory):
    root = tmp_path_factory.mktemp("expand-masks")
    path, images, annotations = masks_case.write_coco(photos, root)
    unmoved = masks_case._targets(masks_case._loader(path, [v2.Resize((masks_case.HEIGHT, masks_case.WIDTH))]))
    return path, images, annotations, unmoved


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("angle", [30, 90, -37.5])
def test_instance_masks_follow_the_grown_rotation_as_v2_moves_them(masks_coco, angle, packed):
    recipe = [v2.Resize((180, 240)), _turn(angle)]
    loader = masks_case._loader(masks_coco[0], [*recipe, v2.SanitizeBoundingBoxes()],
                                masks="bits" if packed else True)
    got = [(image, target) for batch in loader for image, target in zip(batch["image"], batch["target"])]
    expected = masks_case.reference(masks_coco, recipe)
    compared = 0
    for i, ((image, target), (boxes, labels, masks)) in enumerate(zip(got, expected)):
        assert torch.equal(target["labels"], labels), i
        torch.testing.assert_close(target["boxes"], boxes, atol=0.5, rtol=0, msg=f"image {i}")
        height, width = masks.shape[-2:]
        assert target["size"].tolist() == [height, width]
        ours = target["masks"]
        if packed:
            bits = torch.from_numpy(__import__("numpy").unpackbits(ours.numpy(), axis=-1))
            ours = bits[..., : image.shape[-1]]
        assert ours.shape == (len(labels), *image.shape[-2:]), i
        # Nothing of a mask past its image.
        assert ours[:, height:].sum() == 0 and ours[:, :, width:].sum() == 0
        for k, (mine, theirs) in enumerate(zip(ours[:, :height, :width], masks)):
            assert (mine == theirs).float().mean().item() >= 0.995, (i, k)
            compared += int(theirs.sum() > 0)
    assert compared >= 2 * len(got)


@pytest.mark.parametrize("angle", [30, 90, -37.5])
def test_keypoints_follow_the_grown_rotation_as_v2_moves_them(photos, tmp_path, angle):
    coco = keypoints_case.write_coco(photos, tmp_path)
    recipe = [v2.Resize((180, 240)), _turn(angle)]
    got = keypoints_case._targets(keypoints_case._loader(coco[0], recipe))
    checked = 0
    for image, ours in zip(coco[1], got):
        theirs = keypoints_case._sanitize(v2.Compose(recipe)(keypoints_case._sample(coco, image)))
        assert torch.equal(ours["labels"], theirs["labels"])
        torch.testing.assert_close(ours["boxes"], theirs["boxes"].as_subclass(torch.Tensor), atol=0.5, rtol=0)
        size = theirs["image"].shape[-1], theirs["image"].shape[-2]
        assert ours["size"].tolist() == [size[1], size[0]]
        checked += keypoints_case._compare(ours, theirs, size)
    assert checked >= 20


def test_the_same_bytes_for_any_thread_count_and_the_draws_of_expand_false(coco):
    _, path, _, _ = coco
    grown = [*BEFORE, v2.RandomRotation(degrees=45, expand=True, interpolation=v2.InterpolationMode.BILINEAR)]
    one = _samples(path, grown, seed=5, threads=1)
    for threads in (2, 4):
        other = _samples(path, grown, seed=5, threads=threads)
        assert len(other) == len(one)
        for (a, s), (b, t) in zip(one, other):
            assert torch.equal(a, b) and torch.equal(s["boxes"], t["boxes"]) and torch.equal(s["size"], t["size"])
    # The same angles as without expand: a turn moves a box, the grown canvas only shifts
    # it, so a box inside both outputs keeps its width and height.
    kept = [*BEFORE, v2.RandomRotation(degrees=45)]
    same = 0
    for (_, grown_target), (_, kept_target) in zip(one, _samples(path, kept, seed=5, threads=1)):
        for g, k in zip(grown_target["boxes"].tolist(), kept_target["boxes"].tolist()):
            inside = k[0] > 0 and k[1] > 0 and k[2] < 120 and k[3] < 90
            if inside:
                assert abs((g[2] - g[0]) - (k[2] - k[0])) < 1e-3 and abs((g[3] - g[1]) - (k[3] - k[1])) < 1e-3
                same += 1
    assert same >= 5


@pytest.mark.parametrize("recipe, says", [
    ([v2.Resize((90, 120)), _turn(30), v2.RandomVerticalFlip(p=1.0)], "RandomVerticalFlip follows RandomRotation"),
    ([v2.Resize((90, 120)), _turn(30), _turn(10)], "RandomRotation follows RandomRotation"),
    ([_turn(30), v2.Resize((90, 120))], "RandomRotation with expand=True is written before"),
    ([v2.Resize((90, 120)), v2.RandomApply([_turn(30)], p=0.5)], "RandomApply: transforms holds RandomRotation"),
    ([v2.RandomResize(60, 100), _turn(30)], "the output size varies"),
    ([v2.Resize((8000, 8000)), v2.RandomRotation(45, expand=True)], "narrow degrees"),
])
def test_what_cannot_hold_a_grown_image_is_a_config_error(coco, recipe, says):
    _, path, _, _ = coco
    with pytest.raises(nostall.ConfigError, match=says):
        _samples(path, recipe)


def test_colour_and_normalize_may_follow_it(coco):
    _, path, _, _ = coco
    recipe = [*BEFORE, _turn(30), v2.ColorJitter(brightness=(1.5, 1.5))]
    got = _samples(path, recipe)
    base = _samples(path, [*BEFORE, _turn(30)])
    for (image, target), (plain, _) in zip(got, base):
        height, width = target["size"].tolist()
        theirs = v2.ColorJitter(brightness=(1.5, 1.5))(plain[:, :height, :width])
        assert torch.equal(image[:, :height, :width], theirs)
    assert ops.RandomRotation(5, expand=True).expand is True
