"""Detection samples: boxes that follow the image's geometry, against torchvision.transforms.v2
on the demo photographs, read from a COCO annotation file and from WebDataset shards."""

import io
import json
import os
import shutil
import tarfile

import numpy as np
import pytest
import torch

import nostall

v2 = pytest.importorskip("torchvision.transforms.v2")
tv_tensors = pytest.importorskip("torchvision.tv_tensors")
from PIL import Image  # noqa: E402

#: Magenta, painted on the photographs of the test that follows the pixels.
PAINT = (255, 0, 255)


def _photographs(photos):
    return sorted(os.path.join(d, f) for d, _, names in os.walk(photos) for f in names if f.endswith(".jpg"))


def _boxes(width, height, i):
    """Each image's annotations (COCO's x, y, w, h; category; crowd): one inside, one on
    the left edge, one reaching past the right edge, one half a pixel wide, one crowd."""
    return [
        ([0.3 * width, 0.25 * height, 0.4 * width, 0.5 * height], 3, 0),
        ([0.0, 0.1 * height, 0.12 * width, 0.8 * height], 7, 0),
        ([0.7 * width + i, 0.6 * height, 0.4 * width, 0.2 * height], 1, 0),
        ([0.5 * width, 0.5 * height, 0.5, 0.3 * height], 3, 0),
        ([0.1 * width, 0.1 * height, 0.2 * width, 0.2 * height], 7, 1),
    ]


def write_coco(photos, root, count=12, paint=False):
    """A COCO layout of ``count`` demo photographs (``annotations/instances_val.json``,
    ``val/``); with ``paint``, each a PNG whose first box is painted magenta."""
    os.makedirs(root / "annotations")
    os.makedirs(root / "val")
    images, annotations = [], []
    for i, path in enumerate(_photographs(photos)[:count]):
        image = Image.open(path).convert("RGB")
        width, height = image.size
        boxes = _boxes(width, height, i)
        name = f"{i:04d}.png" if paint else f"{i:04d}.jpg"
        if paint:
            pixels = np.array(image)
            x, y, w, h = (round(v) for v in boxes[0][0])
            boxes[0] = ([float(x), float(y), float(w), float(h)], *boxes[0][1:])
            pixels[y:y + h, x:x + w] = PAINT
            Image.fromarray(pixels).save(root / "val" / name)
        else:
            shutil.copy(path, root / "val" / name)
        images.append({"id": i + 1, "file_name": name, "width": width, "height": height})
        for k, (bbox, category, crowd) in enumerate(boxes):
            annotations.append({"id": 10 * i + k + 1, "image_id": i + 1, "category_id": category,
                                "bbox": bbox, "iscrowd": crowd})
    categories = [{"id": c, "name": str(c)} for c in (1, 3, 7)]
    path = root / "annotations" / "instances_val.json"
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))
    return path, images, annotations


FIELDS = {"image": "image", "target": nostall.Field("coco", kind="boxes")}


def painted_boxes_match(batches):
    """For each sample showing the painted box (magenta), that its box (the first of label
    3: the half-pixel one is sanitised away or lies inside it) bounds the paint within 1.5
    pixels; how many samples showed it, and how many had fewer than 3 boxes (cropped)."""
    checked = cropped = 0
    for batch in batches:
        for image, target in zip(batch["image"], batch["target"]):
            # Without a crop, every box but the half-pixel one and the crowd is kept.
            cropped += len(target["labels"]) < 3
            painted = (image[0] > 200) & (image[1] < 70) & (image[2] > 200)
            first = [k for k, label in enumerate(target["labels"].tolist()) if label == 3]
            if not first or not painted.any():
                continue
            rows, cols = torch.nonzero(painted, as_tuple=True)
            seen = [cols.min().item(), rows.min().item(), cols.max().item() + 1, rows.max().item() + 1]
            box = target["boxes"][first[0]].tolist()
            assert np.allclose(box, seen, atol=1.5), (box, seen)
            checked += 1
    return checked, cropped


def reference(root, images, annotations, recipe):
    """What v2 gives each image's boxes and labels (crowds left out, as torchvision's
    detection references do), the recipe ending in SanitizeBoundingBoxes."""
    out = []
    for image in images:
        decoded = np.array(Image.open(root / "val" / image["file_name"]).convert("RGB"))
        pixels = torch.from_numpy(decoded).permute(2, 0, 1)
        mine = [a for a in annotations if a["image_id"] == image["id"] and not a["iscrowd"]]
        xyxy = [[x, y, x + w, y + h] for x, y, w, h in (a["bbox"] for a in mine)]
        sample = {
            "image": tv_tensors.Image(pixels),
            "boxes": tv_tensors.BoundingBoxes(xyxy, format="XYXY", canvas_size=pixels.shape[-2:]),
            "labels": torch.tensor([a["category_id"] for a in mine]),
        }
        done = v2.Compose([*recipe, v2.SanitizeBoundingBoxes()])(sample)
        out.append((done["boxes"].as_subclass(torch.Tensor), done["labels"]))
    return out


@pytest.mark.parametrize("recipe", [
    [v2.Resize(96), v2.CenterCrop(80), v2.RandomHorizontalFlip(p=1.0)],
    [v2.Resize((120, 90))],
    [v2.CenterCrop(150), v2.Resize((64, 64))],
    [v2.RandomHorizontalFlip(p=1.0), v2.Resize(72), v2.CenterCrop((60, 70))],
    [v2.Pad([5, 10, 15, 20]), v2.Resize((120, 90))],
    [v2.CenterCrop(150), v2.Pad(7), v2.RandomHorizontalFlip(p=1.0), v2.Resize((64, 64))],
], ids=["resize-crop-flip", "resize", "crop-resize", "flip-resize-crop", "pad-resize", "crop-pad-flip-resize"])
def test_boxes_follow_the_geometry_as_v2_moves_them(photos, tmp_path, recipe):
    path, images, annotations = write_coco(photos, tmp_path)
    loader = nostall.Loader(str(path), pipeline=v2.Compose([*recipe, v2.SanitizeBoundingBoxes()]),
                            fields=FIELDS, batch_size=4, shuffle=False)
    got = [target for batch in loader for target in batch["target"]]
    expected = reference(tmp_path, images, annotations, recipe)
    assert len(got) == len(expected) == len(images)
    for i, (target, (boxes, labels)) in enumerate(zip(got, expected)):
        assert torch.equal(target["labels"], labels), i
        torch.testing.assert_close(target["boxes"], boxes, atol=2e-3, rtol=0, msg=f"image {i}")
    # Some boxes were clamped, and some were dropped, on the way.
    assert sum(len(t["boxes"]) for t in got) < 4 * len(images)


def test_boxes_follow_the_pixels_under_random_crops_and_flips(photos, tmp_path):
    path, _, _ = write_coco(photos, tmp_path, count=16, paint=True)
    recipe = [v2.RandomResizedCrop(64, scale=(0.3, 1.0)), v2.RandomHorizontalFlip()]
    loader = nostall.Loader(str(path), pipeline=recipe, dtype="uint8", fields=FIELDS, batch_size=4,
                            seed=3, shuffle=False)
    checked, _ = painted_boxes_match(batch for _ in range(3) for batch in loader)
    assert checked >= 24


def test_ssdlite_recipe_crops_against_the_boxes_and_they_follow_the_pixels(photos, tmp_path):
    path, _, _ = write_coco(photos, tmp_path, count=16, paint=True)
    recipe = v2.Compose([v2.RandomIoUCrop(), v2.RandomHorizontalFlip(), v2.Resize((96, 96)),
                         v2.SanitizeBoundingBoxes()])
    loader = nostall.Loader(str(path), pipeline=recipe, dtype="uint8", fields=FIELDS, batch_size=4, seed=7,
                            shuffle=False)
    checked, cropped = painted_boxes_match(batch for _ in range(4) for batch in loader)
    assert checked >= 24 and cropped >= 8, (checked, cropped)
    with pytest.raises(nostall.ConfigError, match="draws its window against the sample's boxes"):
        nostall.Loader(str(photos), pipeline=[v2.RandomIoUCrop(), v2.Resize((96, 96))])
    with pytest.raises(nostall.ConfigError, match="options other than"):
        nostall.Loader(str(path), pipeline=[v2.RandomIoUCrop(sampler_options=[0.5]), v2.Resize((96, 96))],
                       fields=FIELDS)


def test_ssd_recipe_zooms_out_crops_and_distorts_and_the_boxes_follow(photos, tmp_path):
    path, _, _ = write_coco(photos, tmp_path, count=12, paint=True)
    # The SSD reference's recipe; the canvas green, so that the painted box stays the only
    # magenta; RandomPhotometricDistort off, to keep the paint's colour.
    recipe = v2.Compose([v2.RandomPhotometricDistort(p=0.0), v2.RandomZoomOut(fill=(0, 255, 0)),
                         v2.RandomIoUCrop(), v2.RandomHorizontalFlip(), v2.Resize((96, 96)),
                         v2.SanitizeBoundingBoxes()])
    loader = nostall.Loader(str(path), pipeline=recipe, dtype="uint8", fields=FIELDS, batch_size=4, seed=11,
                            shuffle=False)
    checked, _ = painted_boxes_match(batch for _ in range(4) for batch in loader)
    assert checked >= 16, checked
    # A canvas three times the image's side: eight ninths of it is the fill.
    zoomed = nostall.Loader(str(path), pipeline=[v2.RandomZoomOut(fill=(0, 255, 0), side_range=(3.0, 3.0), p=1.0),
                                                 v2.Resize((96, 96))], dtype="uint8", fields=FIELDS, batch_size=4)
    for batch in zoomed:
        green = (batch["image"][:, 0] < 10) & (batch["image"][:, 1] > 245) & (batch["image"][:, 2] < 10)
        assert green.float().mean(dim=(1, 2)).min() > 0.8
        assert (batch["target"][0]["boxes"][:, 2:] <= 96).all()


def test_boxes_are_the_same_for_any_thread_count_and_after_resume(photos, tmp_path):
    path, _, _ = write_coco(photos, tmp_path)
    kwargs = dict(pipeline=[v2.RandomPhotometricDistort(), v2.RandomZoomOut(), v2.RandomIoUCrop(),
                            v2.RandomHorizontalFlip(), v2.Resize((48, 48))], seed=5, batch_size=3,
                  fields={"image": "image", "target": nostall.Field("coco", kind="boxes", padded=True,
                                                                    max_boxes=8)})

    def digest(batch):
        t = batch["target"]
        return (batch["image"].numpy().tobytes(), t["boxes"].numpy().tobytes(), t["labels"].tolist(),
                t["count"].tolist())

    one = [digest(b) for b in nostall.Loader(str(path), threads=1, **kwargs)]
    for threads in (2, 4):
        assert [digest(b) for b in nostall.Loader(str(path), threads=threads, **kwargs)] == one
    assert [digest(b) for b in nostall.Loader(str(path), threads=1, **{**kwargs, "seed": 6})] != one
    # Padded: 3 samples of 8 boxes of four float32 each.
    assert all(len(boxes) == 3 * 8 * 4 * 4 for _, boxes, _, _ in one)
    loader = nostall.Loader(str(path), threads=2, **kwargs)
    it = iter(loader)
    next(it)
    resumed = nostall.Loader(str(path), threads=1, **kwargs)
    resumed.load_state_dict(loader.state_dict())
    assert [digest(b) for b in resumed] == one[1:]


def test_formats_and_padding(photos, tmp_path):
    path, images, annotations = write_coco(photos, tmp_path, count=4)
    recipe = [v2.Resize((50, 60))]
    expected = reference(tmp_path, images, annotations, recipe)
    field = nostall.Field("coco", kind="boxes", box_format="cxcywh", padded=True, max_boxes=6)
    batch = next(iter(nostall.Loader(str(path), pipeline=recipe, fields={"image": "image", "t": field},
                                     batch_size=4, shuffle=False)))
    t = batch["t"]
    assert t["boxes"].shape == (4, 6, 4) and t["labels"].shape == (4, 6) and t["count"].dtype == torch.int64
    for i, (boxes, labels) in enumerate(expected):
        k = len(boxes)
        assert t["count"][i] == k
        cxcywh = v2.functional.convert_bounding_box_format(boxes, old_format=tv_tensors.BoundingBoxFormat.XYXY,
                                                           new_format=tv_tensors.BoundingBoxFormat.CXCYWH)
        torch.testing.assert_close(t["boxes"][i, :k], cxcywh, atol=2e-3, rtol=0)
        assert torch.equal(t["labels"][i, :k], labels)
        assert not t["boxes"][i, k:].any() and not t["labels"][i, k:].any()
    assert t["size"].tolist() == [[50, 60]] * 4
    # DETR's: cxcywh divided by the image's width and height.
    field = nostall.Field("coco", kind="boxes", box_format="cxcywh", normalized=True)
    detr = next(iter(nostall.Loader(str(path), pipeline=recipe, fields={"image": "image", "t": field},
                                    batch_size=4, shuffle=False)))["t"]
    for i, target in enumerate(detr):
        k = int(t["count"][i])
        torch.testing.assert_close(target["boxes"], t["boxes"][i, :k] / torch.tensor([60, 50, 60, 50]))


def test_webdataset_json_members_are_boxes_too(photos, tmp_path):
    shards = tmp_path / "shards"
    shards.mkdir()
    photo = _photographs(photos)[0]
    width, height = Image.open(photo).size
    with tarfile.open(shards / "000000.tar", "w") as tar:
        for key, target in [("a", {"boxes": [[10, 20, 110, 90]], "labels": [5]}),
                            ("b", {"annotations": [{"bbox": [10, 20, 100, 70], "category_id": 5}]})]:
            for ext, data in [("jpg", open(photo, "rb").read()), ("json", json.dumps(target).encode())]:
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    recipe = [v2.Resize((height // 2, width // 2))]
    batch = next(iter(nostall.Loader(str(shards), pipeline=recipe, batch_size=2, shuffle=False,
                                     fields={"image": "jpg", "t": nostall.Field("json", kind="boxes")})))
    sx, sy = (width // 2) / width, (height // 2) / height
    expected = torch.tensor([[10 * sx, 20 * sy, 110 * sx, 90 * sy]])
    for target in batch["t"]:
        torch.testing.assert_close(target["boxes"], expected, atol=1e-3, rtol=0)
        assert target["labels"].tolist() == [5]


def test_bad_annotations_and_recipes_are_refused_naming_them(photos, tmp_path):
    path, images, annotations = write_coco(photos, tmp_path, count=4)
    # An image whose annotations were made for another size: skipped, naming the field.
    images[1]["width"] += 1
    # An annotation naming no category: its image is skipped, naming the annotation.
    annotations[12]["category_id"] = 99
    data = json.loads(path.read_text())
    data["images"], data["annotations"] = images, annotations
    path.write_text(json.dumps(data))
    loader = nostall.Loader(str(path), pipeline=[v2.Resize((40, 40))], fields=FIELDS, batch_size=2,
                            shuffle=False, on_error="skip")
    assert sum(len(b["target"]) for b in loader) == 2
    details = sorted(s["detail"] for s in loader.skipped())
    assert [s["cause"] for s in loader.skipped()] == ["bad-targets"] * 2
    assert "field \"coco\"" in details[0] and "annotation 23 of image 3: category 99" in details[0]
    assert "field \"target\"" in details[1] and "made for" in details[1]
    with pytest.raises(nostall.ConfigError, match="RandAugment moves pixels"):
        nostall.Loader(str(path), pipeline=[v2.Resize((40, 40)), v2.RandAugment()], fields=FIELDS)
    with pytest.raises(nostall.ConfigError, match="boxes and masks do not follow a mix"):
        nostall.Loader(str(path), pipeline=[v2.Resize((40, 40))], fields=FIELDS,
                       mix=nostall.Mixup(mixup_alpha=0.2, num_classes=4))
    with pytest.raises(nostall.ConfigError, match="read it with fields"):
        nostall.Loader(str(path), pipeline=[v2.Resize((40, 40))])
    with pytest.raises(nostall.ConfigError, match="min_size=2"):
        nostall.Loader(str(path), pipeline=[v2.Resize((40, 40)), v2.SanitizeBoundingBoxes(min_size=2)],
                       fields=FIELDS)
