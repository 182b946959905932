"""Multi-scale training (`RandomShortestSize`, Faster and Mask R-CNN's references): each
image at its own size on a batch canvas, its `size` given with its boxes, against
torchvision.transforms.v2 on the demo photographs."""

import json
import os

import numpy as np
import pytest
import torch

import nostall

v2 = pytest.importorskip("torchvision.transforms.v2")
tv_tensors = pytest.importorskip("torchvision.tv_tensors")
from PIL import Image  # noqa: E402

#: Sources of two shapes, so that both the shorter-side and the max_size bounds act.
SIZES = [(480, 360), (300, 420)]


@pytest.fixture(scope="module")
def coco(photos, tmp_path_factory):
    """Twelve photographs (landscape and portrait) with boxes and polygon masks."""
    root = tmp_path_factory.mktemp("multiscale")
    (root / "annotations").mkdir()
    (root / "val").mkdir()
    paths = sorted(os.path.join(d, f) for d, _, names in os.walk(photos) for f in names if f.endswith(".jpg"))
    images, annotations = [], []
    for i, path in enumerate(paths[:12]):
        width, height = SIZES[i % 2]
        Image.open(path).convert("RGB").resize((width, height)).save(root / "val" / f"{i:04d}.png")
        images.append({"id": i + 1, "file_name": f"{i:04d}.png", "width": width, "height": height})
        for k, (x, y, w, h) in enumerate([(20 + 5 * i, 30, 120, 90), (width - 150, height - 100, 100, 70)]):
            annotations.append({"id": 10 * i + k + 1, "image_id": i + 1, "category_id": k + 1, "bbox": [x, y, w, h],
                                "iscrowd": 0, "segmentation": [[x, y, x + w, y + h / 2, x, y + h]]})
    categories = [{"id": c, "name": str(c)} for c in (1, 2)]
    path = root / "annotations" / "instances_val.json"
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))
    return path, images, annotations


def _loader(path, recipe, **kwargs):
    fields = {"image": "image", "target": nostall.Field("coco", kind="boxes", masks=kwargs.pop("masks", False))}
    return nostall.Loader(str(path), pipeline=v2.Compose(recipe), dtype="uint8", fields=fields, batch_size=4,
                          shuffle=False, **kwargs)


@pytest.mark.parametrize("flip", [0.0, 1.0])
@pytest.mark.parametrize("min_size,max_size", [(200, 1000), (300, 320)], ids=["shorter", "capped"])
def test_each_image_is_v2s_at_its_own_size_on_the_canvas(coco, flip, min_size, max_size):
    path, images, annotations = coco
    recipe = [v2.RandomShortestSize(min_size=min_size, max_size=max_size), v2.RandomHorizontalFlip(p=flip)]
    got = [(image, target) for batch in _loader(path, recipe, masks=True)
           for image, target in zip(batch["image"], batch["target"])]
    assert len(got) == len(images)
    for (image, target), meta in zip(got, images):
        assert image.shape == (3, max_size, max_size)
        pixels = torch.from_numpy(np.array(Image.open(path.parent.parent / "val" / meta["file_name"]))).permute(2, 0, 1)
        mine = [a for a in annotations if a["image_id"] == meta["id"]]
        xyxy = torch.tensor([[x, y, x + w, y + h] for x, y, w, h in (a["bbox"] for a in mine)], dtype=torch.float32)
        masks = target["masks"]
        sample = {"image": tv_tensors.Image(pixels),
                  "boxes": tv_tensors.BoundingBoxes(xyxy, format="XYXY", canvas_size=pixels.shape[-2:]),
                  "labels": torch.tensor([a["category_id"] for a in mine])}
        theirs = v2.Compose([*recipe, v2.SanitizeBoundingBoxes()])(sample)
        height, width = theirs["image"].shape[-2:]
        assert target["size"].tolist() == [height, width]
        diff = (image[:, :height, :width].int() - theirs["image"].int()).abs()
        assert diff.max() <= 1, diff.max()
        # Around the image, the canvas's fill (0).
        assert (image[:, height:] == 0).all() and (image[:, :, width:] == 0).all()
        torch.testing.assert_close(target["boxes"], theirs["boxes"].as_subclass(torch.Tensor), atol=2e-3, rtol=0)
        # The masks too, cut to the image: the polygon's triangle inside its box.
        assert masks.shape == (len(target["labels"]), max_size, max_size)
        assert masks[:, height:].sum() == 0 and masks[:, :, width:].sum() == 0
        for box, mask in zip(target["boxes"].tolist(), masks):
            rows, cols = np.nonzero(mask.numpy())
            assert cols.min() >= box[0] - 1 and cols.max() <= box[2] and rows.min() >= box[1] - 1


def test_the_sizes_are_drawn_with_equal_chances_and_the_same_for_1_2_and_4_threads(coco):
    path, images, _ = coco
    sides = [100, 120, 140, 160]
    recipe = [v2.RandomShortestSize(min_size=sides, max_size=400), v2.RandomHorizontalFlip()]
    runs = []
    for threads in (1, 2, 4):
        loader = _loader(path, recipe, threads=threads, seed=4)
        drawn = []
        for epoch in range(25):
            loader.set_epoch(epoch)
            drawn += [min(t["size"].tolist()) for batch in loader for t in batch["target"]]
        runs.append(drawn)
    assert runs[0] == runs[1] == runs[2]
    counts = np.array([runs[0].count(s) for s in sides])
    assert counts.sum() == 25 * len(images)
    expected = counts.sum() / len(sides)
    chi2 = ((counts - expected) ** 2 / expected).sum()
    # 3 degrees of freedom: 16.3 is the 0.001 critical value.
    assert chi2 < 16.3, counts


def test_the_references_multiscale_recipe_runs_as_written(coco):
    path, images, _ = coco
    recipe = [v2.RandomShortestSize(min_size=(480, 512, 544, 576, 608, 640, 672, 704, 736, 768, 800), max_size=1333),
              v2.RandomHorizontalFlip(p=0.5), v2.PILToTensor(), v2.ToDtype(torch.float, scale=True)]
    fields = {"image": "image", "target": nostall.Field("coco", kind="boxes")}
    loader = nostall.Loader(str(path), pipeline=v2.Compose(recipe), fields=fields, batch_size=4, shuffle=True)
    batch = next(iter(loader))
    assert batch["image"].shape == (4, 3, 1333, 1333) and batch["image"].dtype == torch.float32
    for image, target in zip(batch["image"], batch["target"]):
        height, width = target["size"].tolist()
        assert 480 <= min(height, width) <= 800 and max(height, width) <= 1333
        cut = image[:, :height, :width]
        assert cut.shape == (3, height, width) and cut.abs().sum() > 0


def test_what_cannot_follow_or_bound_it_is_refused(coco):
    path = coco[0]
    # Without max_size, no canvas: the size varies until a crop fixes it.
    with pytest.raises(nostall.ConfigError, match="output size varies"):
        _loader(path, [v2.RandomShortestSize(min_size=200)])
    _loader(path, [v2.RandomShortestSize(min_size=200), v2.CenterCrop(150)])
    with pytest.raises(nostall.ConfigError, match="Resize follows RandomShortestSize"):
        _loader(path, [v2.RandomShortestSize(min_size=200, max_size=300), v2.Resize(100)])
    with pytest.raises(nostall.ConfigError, match="min_size"):
        nostall.ops.RandomShortestSize(min_size=[], max_size=300)
    # After it, an operator on pixels would see the batch's padding; before it, it runs on
    # the whole decoded image.
    with pytest.raises(nostall.ConfigError, match="GaussianBlur follows RandomShortestSize, whose canvas"):
        _loader(path, [v2.RandomShortestSize(min_size=200, max_size=300), v2.GaussianBlur(3)])
    _loader(path, [v2.GaussianBlur(3), v2.RandomShortestSize(min_size=200, max_size=300)])
