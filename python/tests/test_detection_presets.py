"""torchvision's detection references' training recipes taken as written (their v2
presets end by converting the boxes to XYXY, sanitising them and dropping the tv_tensor
types), and v2's transforms on boxes that a boxes field carries out: the conversion of
their format and their clamping."""

import pytest
import torch

import nostall
from test_detection import FIELDS, painted_boxes_match, reference, write_coco

v2 = pytest.importorskip("torchvision.transforms.v2")
tv_tensors = pytest.importorskip("torchvision.tv_tensors")

MEAN = (123.0, 117.0, 104.0)


def preset(policy, backend="pil", hflip_prob=0.5, size=None):
    """The transforms of the references' ``DetectionPresetTrain(policy, backend=backend,
    use_v2=True)``, in its order ("lsj" left out: its FixedSizeCrop is the references'
    own class, not v2's, and nostall.ops.FixedSizeCrop stands for it). The references'
    models resize each image themselves (``GeneralizedRCNNTransform``), so a batch of
    nostall's needs the images' size bounded: ``size`` adds the ``Resize`` to it after
    the policy's transforms."""
    transforms = {"tv_tensor": [v2.ToImage()], "tensor": [v2.PILToTensor()], "pil": []}[backend]
    transforms += {
        "hflip": [v2.RandomHorizontalFlip(p=hflip_prob)],
        "multiscale": [v2.RandomShortestSize(min_size=(480, 512, 544, 576, 608, 640, 672, 704, 736, 768, 800),
                                             max_size=1333), v2.RandomHorizontalFlip(p=hflip_prob)],
        "ssd": [v2.RandomPhotometricDistort(), v2.RandomZoomOut(fill=_ssd_fill()), v2.RandomIoUCrop(),
                v2.RandomHorizontalFlip(p=hflip_prob)],
        "ssdlite": [v2.RandomIoUCrop(), v2.RandomHorizontalFlip(p=hflip_prob)],
    }[policy]
    if size is not None:
        transforms += [v2.Resize(size)]
    if backend == "pil":
        transforms += [v2.ToImage()]
    transforms += [v2.ToDtype(torch.float, scale=True),
                   v2.ConvertBoundingBoxFormat(tv_tensors.BoundingBoxFormat.XYXY), v2.SanitizeBoundingBoxes(),
                   v2.ToPureTensor()]
    return v2.Compose(transforms)


def _ssd_fill():
    from collections import defaultdict

    return defaultdict(lambda: MEAN, {tv_tensors.Mask: 0})


@pytest.mark.parametrize("backend", ["pil", "tensor", "tv_tensor"])
def test_the_hflip_preset_as_written_gives_v2s_boxes_in_floats(photos, tmp_path, backend):
    path, images, annotations = write_coco(photos, tmp_path, count=6)
    loader = nostall.Loader(str(path), pipeline=preset("hflip", backend, hflip_prob=1.0, size=(120, 90)),
                            fields=FIELDS, batch_size=3, shuffle=False)
    expected = reference(tmp_path, images, annotations, [v2.RandomHorizontalFlip(p=1.0), v2.Resize((120, 90))])
    got = [(image, target) for batch in loader for image, target in zip(batch["image"], batch["target"])]
    assert len(got) == len(expected)
    for (image, target), (boxes, labels) in zip(got, expected):
        assert image.dtype == torch.float32 and 0 <= image.min() and image.max() <= 1
        torch.testing.assert_close(target["boxes"], boxes, atol=2e-3, rtol=0)
        assert torch.equal(target["labels"], labels)


@pytest.mark.parametrize("policy", ["multiscale", "ssd", "ssdlite"])
def test_the_random_presets_as_written_move_the_boxes_with_the_pixels(photos, tmp_path, policy):
    path, _, _ = write_coco(photos, tmp_path, count=8, paint=True)
    recipe = preset(policy, size=None if policy == "multiscale" else (96, 96))
    if policy == "ssd":
        # The paint's colour is what finds the box: the distortion left out, as in
        # test_detection's SSD test; the rest of the preset as written.
        recipe.transforms[0] = v2.RandomPhotometricDistort(p=0.0)
    loader = nostall.Loader(str(path), pipeline=recipe, fields=FIELDS, batch_size=4, seed=5, shuffle=False)
    if policy == "multiscale":
        # Each image on a 1333-pixel square canvas, in floats, its size beside its boxes.
        batch = next(iter(loader))
        assert batch["image"].shape == (4, 3, 1333, 1333) and batch["image"].dtype == torch.float32
        for target in batch["target"]:
            height, width = target["size"].tolist()
            assert min(height, width) >= 480 and max(height, width) <= 1333
            assert (target["boxes"][:, 2] <= width).all() and (target["boxes"][:, 3] <= height).all()
        return
    # The paint found in the floats the preset delivers, as 8-bit levels.
    levels = ({**batch, "image": (batch["image"] * 255).round()} for _ in range(3) for batch in loader)
    checked, _ = painted_boxes_match(levels)
    assert checked >= 8, checked


def test_a_recipes_box_format_is_the_fields(photos, tmp_path):
    path, images, annotations = write_coco(photos, tmp_path, count=4)
    recipe = [v2.Resize((50, 60))]
    expected = reference(tmp_path, images, annotations, recipe)
    converted = nostall.Loader(str(path), pipeline=[*recipe, v2.ConvertBoundingBoxFormat("CXCYWH")],
                               fields=FIELDS, batch_size=4, shuffle=False)
    field = {"image": "image", "target": nostall.Field("coco", kind="boxes", box_format="cxcywh")}
    declared = nostall.Loader(str(path), pipeline=recipe, fields=field, batch_size=4, shuffle=False)
    for mine, theirs, (boxes, _) in zip(next(iter(converted))["target"], next(iter(declared))["target"], expected):
        cxcywh = v2.functional.convert_bounding_box_format(boxes, old_format=tv_tensors.BoundingBoxFormat.XYXY,
                                                           new_format=tv_tensors.BoundingBoxFormat.CXCYWH)
        torch.testing.assert_close(mine["boxes"], cxcywh, atol=2e-3, rtol=0)
        assert torch.equal(mine["boxes"], theirs["boxes"])
    # Only the last conversion counts: v2's kernels move boxes in any format.
    last = nostall.Loader(str(path), pipeline=[v2.ConvertBoundingBoxFormat("XYWH"), *recipe,
                                               v2.ConvertBoundingBoxFormat("XYXY")], fields=FIELDS, batch_size=4,
                          shuffle=False)
    for target, (boxes, _) in zip(next(iter(last))["target"], expected):
        torch.testing.assert_close(target["boxes"], boxes, atol=2e-3, rtol=0)


def test_clamping_changes_nothing_a_field_has_not_clamped(photos, tmp_path):
    path, _, _ = write_coco(photos, tmp_path, count=4)
    recipe = [v2.RandomResizedCrop(64, scale=(0.2, 0.6)), v2.RandomHorizontalFlip()]

    def targets(pipeline):
        loader = nostall.Loader(str(path), pipeline=pipeline, fields=FIELDS, batch_size=4, seed=2, shuffle=False)
        return [t for batch in loader for t in batch["target"]]

    plain, clamped = targets(recipe), targets([*recipe, v2.ClampBoundingBoxes()])
    assert len(plain) == len(clamped) == 4
    for a, b in zip(plain, clamped):
        assert torch.equal(a["boxes"], b["boxes"]) and torch.equal(a["labels"], b["labels"])
        assert (a["boxes"] >= 0).all() and (a["boxes"] <= 64).all()


def test_box_formats_that_cannot_be_kept_are_refused_saying_why(photos, tmp_path):
    path, _, _ = write_coco(photos, tmp_path, count=2)
    # Without a size the preset leaves every image at its own: a batch needs one.
    with pytest.raises(nostall.ConfigError, match="output size varies with the image"):
        nostall.Loader(str(path), pipeline=preset("hflip"), fields=FIELDS)
    field = {"image": "image", "target": nostall.Field("coco", kind="boxes", box_format="xywh")}
    with pytest.raises(nostall.ConfigError, match='box_format="xywh", but the recipe\'s ConvertBoundingBoxFormat '
                                                  'gives "xyxy"'):
        nostall.Loader(str(path), pipeline=preset("hflip"), fields=field)
    with pytest.raises(nostall.ConfigError, match="axis-aligned"):
        nostall.Loader(str(path), pipeline=[v2.ConvertBoundingBoxFormat("CXCYWHR")], fields=FIELDS)
    # Operators carry no format: the recipe translated alone says where the format goes.
    with pytest.raises(nostall.ConfigError, match='box_format="cxcywh"'):
        nostall.ops.from_torchvision([v2.Resize(64), v2.ConvertBoundingBoxFormat("CXCYWH")])
    assert len(nostall.ops.from_torchvision(preset("ssdlite"))) == 2
    # The views of one loader give one boxes field its format.
    with pytest.raises(nostall.ConfigError, match="different formats"):
        nostall.Loader(str(path), pipeline=[[v2.Resize(64), v2.ConvertBoundingBoxFormat("XYWH")],
                                            [v2.Resize(32), v2.ConvertBoundingBoxFormat("XYXY")]], fields=FIELDS)
