"""Instance masks that follow the image's geometry: COCO polygons and RLEs (both of COCO's
forms) on the demo photographs, against torchvision.transforms.v2 moving a `Mask`."""

import io
import json
import os
import tarfile

import numpy as np
import pytest
import torch

import nostall
from nostall import ops

v2 = pytest.importorskip("torchvision.transforms.v2")
tv_tensors = pytest.importorskip("torchvision.tv_tensors")
from PIL import Image  # noqa: E402

#: Every photograph cropped to this size, so that a loader can show the masks unmoved.
WIDTH, HEIGHT = 480, 360


def _photographs(photos):
    return sorted(os.path.join(d, f) for d, _, names in os.walk(photos) for f in names if f.endswith(".jpg"))


def _ellipse(cx, cy, rx, ry):
    y, x = np.mgrid[:HEIGHT, :WIDTH]
    return (((x - cx) / rx) ** 2 + ((y - cy) / ry) ** 2 <= 1).astype(np.uint8)


def rle_counts(mask):
    """COCO's uncompressed counts of a row-major 0/1 mask: runs over its columns, from 0."""
    flat = mask.T.reshape(-1)
    changes = np.flatnonzero(np.diff(flat)) + 1
    edges = np.concatenate([[0], changes, [flat.size]])
    runs = np.diff(edges).tolist()
    return runs if flat[0] == 0 else [0, *runs]


def rle_string(counts):
    """pycocotools' `rleToString`: each count (after the second, as a difference with the one
    two before) in 5-bit groups with a continuation bit, offset by 48."""
    out = []
    for i, c in enumerate(counts):
        x = c - counts[i - 2] if i > 2 else c
        more = True
        while more:
            ch = x & 0x1F
            x >>= 5
            more = not ((x == 0 and not ch & 0x10) or (x == -1 and ch & 0x10))
            out.append(chr(ch + (0x20 if more else 0) + 48))
    return "".join(out)


def _annotations(i):
    """One image's annotations (bbox, category, segmentation): a polygon rectangle, a
    triangle made of two polygons, an ellipse as an uncompressed RLE, another as a
    compressed one, and a box without a mask."""
    x = 60 + 7 * i
    ellipse = _ellipse(300, 120 + i, 80, 50)
    small = _ellipse(60, 300, 40, 30)
    return [
        ([x, 40, 150, 100], 3, [[x, 40, x + 150, 40, x + 150, 140, x, 140]]),
        ([10, 160, 200, 190], 7, [[10, 160, 210, 350, 10, 350], [15.5, 200.25, 40, 200, 40, 230]]),
        ([220, 70 + i, 161, 101], 1, {"size": [HEIGHT, WIDTH], "counts": rle_counts(ellipse)}),
        ([20, 270, 81, 61], 1, {"size": [HEIGHT, WIDTH], "counts": rle_string(rle_counts(small))}),
        ([400, 10, 60, 60], 3, None),
    ]


def write_coco(photos, root, count=8):
    """A COCO layout of ``count`` photographs cropped to WIDTH x HEIGHT, with masks."""
    os.makedirs(root / "annotations")
    os.makedirs(root / "val")
    images, annotations = [], []
    for i, path in enumerate(_photographs(photos)[:count]):
        image = Image.open(path).convert("RGB")
        image = image.resize((WIDTH, HEIGHT)) if image.size != (WIDTH, HEIGHT) else image
        name = f"{i:04d}.png"
        image.save(root / "val" / name)
        images.append({"id": i + 1, "file_name": name, "width": WIDTH, "height": HEIGHT})
        for k, (bbox, category, segmentation) in enumerate(_annotations(i)):
            a = {"id": 10 * i + k + 1, "image_id": i + 1, "category_id": category, "bbox": bbox, "iscrowd": 0}
            if segmentation is not None:
                a["segmentation"] = segmentation
            annotations.append(a)
    categories = [{"id": c, "name": str(c)} for c in (1, 3, 7)]
    path = root / "annotations" / "instances_val.json"
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))
    return path, images, annotations


def _loader(path, recipe, masks=True, **kwargs):
    fields = {"image": "image", "target": nostall.Field("coco", kind="boxes", masks=masks)}
    return nostall.Loader(str(path), pipeline=v2.Compose(recipe), dtype="uint8", fields=fields, batch_size=4,
                          shuffle=False, **kwargs)


def _targets(loader):
    return [target for batch in loader for target in batch["target"]]


@pytest.fixture(scope="module")
def coco(photos, tmp_path_factory):
    root = tmp_path_factory.mktemp("coco")
    path, images, annotations = write_coco(photos, root)
    # The masks at the image's own size: what each annotation's segmentation makes
    # (polygons rasterised as pycocotools does, which nostall-coco's tests check).
    unmoved = _targets(_loader(path, [v2.Resize((HEIGHT, WIDTH))]))
    return path, images, annotations, unmoved


def test_masks_at_the_images_size_are_the_annotations(coco):
    _, images, annotations, unmoved = coco
    assert len(unmoved) == len(images)
    for i, target in enumerate(unmoved):
        masks = target["masks"].numpy()
        assert masks.shape == (5, HEIGHT, WIDTH) and masks.dtype == np.uint8
        assert set(np.unique(masks)) <= {0, 1}
        x = 60 + 7 * i
        # The rectangle's polygon covers its corners' pixels (pycocotools' rasterisation).
        assert masks[0, 41:139, x + 1:x + 149].all() and masks[0].sum() < 152 * 102
        # The triangle's two polygons: inside, and the second's square.
        assert masks[1, 340, 20] == 1 and masks[1, 170, 200] == 0 and masks[1, 210, 30] == 1
        # Both RLEs give their masks back exactly.
        np.testing.assert_array_equal(masks[2], _ellipse(300, 120 + i, 80, 50))
        np.testing.assert_array_equal(masks[3], _ellipse(60, 300, 40, 30))
        # A box without a segmentation has an empty mask.
        assert masks[4].sum() == 0


def reference(coco, recipe):
    """What v2 gives each image's boxes, labels and masks, from the unmoved masks."""
    path, images, annotations, unmoved = coco
    root = path.parent.parent
    out = []
    for image, target in zip(images, unmoved):
        pixels = torch.from_numpy(np.array(Image.open(root / "val" / image["file_name"]))).permute(2, 0, 1)
        mine = [a for a in annotations if a["image_id"] == image["id"]]
        xyxy = [[x, y, x + w, y + h] for x, y, w, h in (a["bbox"] for a in mine)]
        sample = {
            "image": tv_tensors.Image(pixels),
            "boxes": tv_tensors.BoundingBoxes(torch.tensor(xyxy, dtype=torch.float32), format="XYXY",
                                              canvas_size=(HEIGHT, WIDTH)),
            "masks": tv_tensors.Mask(target["masks"].clone()),
            "labels": torch.tensor([a["category_id"] for a in mine]),
        }
        done = v2.Compose([*recipe, v2.SanitizeBoundingBoxes()])(sample)
        out.append((done["boxes"].as_subclass(torch.Tensor), done["labels"], done["masks"].as_subclass(torch.Tensor)))
    return out


@pytest.mark.parametrize("recipe", [
    [v2.Resize(96), v2.CenterCrop(80), v2.RandomHorizontalFlip(p=1.0)],
    [v2.Resize((120, 90))],
    [v2.CenterCrop((200, 300)), v2.Resize((64, 64))],
    [v2.RandomHorizontalFlip(p=1.0), v2.Resize(72), v2.CenterCrop((60, 70))],
    [v2.CenterCrop((250, 400)), v2.RandomHorizontalFlip(p=1.0), v2.Resize((125, 200))],
], ids=["resize-crop-flip", "resize", "crop-resize", "flip-resize-crop", "crop-flip-half"])
def test_masks_follow_the_geometry_as_v2_moves_them(coco, recipe):
    got = _targets(_loader(coco[0], [*recipe, v2.SanitizeBoundingBoxes()]))
    expected = reference(coco, recipe)
    compared = 0
    for i, (target, (boxes, labels, masks)) in enumerate(zip(got, expected)):
        assert torch.equal(target["labels"], labels), i
        torch.testing.assert_close(target["boxes"], boxes, atol=2e-3, rtol=0, msg=f"image {i}")
        assert target["masks"].shape == masks.shape, i
        for k, (ours, theirs) in enumerate(zip(target["masks"], masks)):
            agree = (ours == theirs).float().mean().item()
            assert agree >= 0.995, (i, k, agree)
            compared += 1
    assert compared >= 2 * len(got)


def test_packed_masks_are_numpys_packbits_of_the_bytes(coco):
    recipe = [v2.RandomResizedCrop((50, 70), scale=(0.3, 1.0)), v2.RandomHorizontalFlip()]
    plain = _targets(_loader(coco[0], recipe, seed=5))
    packed = _targets(_loader(coco[0], recipe, masks="bits", seed=5))
    for a, b in zip(plain, packed):
        assert b["masks"].shape == (len(a["labels"]), 50, 9)
        np.testing.assert_array_equal(np.packbits(a["masks"].numpy(), axis=-1), b["masks"].numpy())


def _mask_box(mask):
    rows, cols = np.nonzero(mask)
    return [cols.min(), rows.min(), cols.max() + 1, rows.max() + 1]


@pytest.mark.parametrize("recipe", [
    [v2.RandomResizedCrop(96, scale=(0.2, 1.0)), v2.RandomHorizontalFlip()],
    [v2.RandomZoomOut(fill={tv_tensors.Image: (123, 117, 104), "others": 0}), v2.RandomIoUCrop(),
     v2.RandomHorizontalFlip(), v2.Resize((120, 120))],
    [v2.ScaleJitter((160, 160)), ops.FixedSizeCrop(160, fill=(124, 116, 104)), v2.RandomHorizontalFlip()],
], ids=["rrc-flip", "ssd", "lsj"])
def test_masks_stay_with_their_boxes_under_random_geometry(coco, recipe):
    """The rectangle's mask (polygon of its box) spans its box, within a pixel and a half,
    whatever was drawn; for 1, 2 and 4 threads alike."""
    runs = [_targets(_loader(coco[0], [*recipe, v2.SanitizeBoundingBoxes()], seed=11, threads=t))
            for t in (1, 2, 4)]
    for other in runs[1:]:
        for a, b in zip(runs[0], other):
            assert torch.equal(a["masks"], b["masks"]) and torch.equal(a["boxes"], b["boxes"])
    checked = 0
    for target in runs[0]:
        for box, label, mask in zip(target["boxes"].tolist(), target["labels"].tolist(), target["masks"].numpy()):
            if label != 3 or mask.sum() == 0 or box[2] - box[0] < 4 or box[3] - box[1] < 4:
                continue
            assert np.allclose(_mask_box(mask), box, atol=1.5), (_mask_box(mask), box)
            checked += 1
    assert checked >= 4


def test_webdataset_json_segmentations_give_the_coco_files_masks(coco, tmp_path):
    path, images, annotations, _ = coco
    root = path.parent.parent
    shard = tmp_path / "shard-000000.tar"
    with tarfile.open(shard, "w") as tar:
        for image in images:
            mine = [a for a in annotations if a["image_id"] == image["id"]]
            for ext, data in [("png", (root / "val" / image["file_name"]).read_bytes()),
                              ("json", json.dumps({"annotations": mine}).encode())]:
                info = tarfile.TarInfo(f"{image['id']:04d}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    recipe = [v2.CenterCrop((300, 400)), v2.Resize((90, 120))]
    fields = {"image": "png", "target": nostall.Field("json", kind="boxes", masks=True)}
    from_json = _targets(nostall.Loader(str(tmp_path), pipeline=v2.Compose(recipe), dtype="uint8", fields=fields,
                                        batch_size=4, shuffle=False))
    from_coco = _targets(_loader(path, recipe))
    assert len(from_json) == len(from_coco) == len(images)
    for a, b in zip(from_json, from_coco):
        assert torch.equal(a["masks"], b["masks"]) and torch.equal(a["labels"], b["labels"])


def test_bad_segmentations_are_the_samples_errors(coco, tmp_path):
    path, images, annotations, _ = coco
    root = path.parent.parent
    shard = tmp_path / "shard-000000.tar"
    bad = [
        {"bbox": [10, 10, 200, 200], "category_id": 1, "segmentation": {"size": [10, 10], "counts": [100]}},
        {"bbox": [10, 10, 200, 200], "category_id": 1, "segmentation": [[1, 2, 3, 4]]},
        {"bbox": [10, 10, 200, 200], "category_id": 1, "segmentation": {"size": [HEIGHT, WIDTH], "counts": [5]}},
        {"bbox": [10, 10, 200, 200], "category_id": 1, "segmentation": "polygon"},
    ]
    with tarfile.open(shard, "w") as tar:
        for k, annotation in enumerate(bad):
            png = (root / "val" / images[0]["file_name"]).read_bytes()
            for ext, data in [("png", png), ("json", json.dumps({"annotations": [annotation]}).encode())]:
                info = tarfile.TarInfo(f"{k:04d}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    fields = {"image": "png", "target": nostall.Field("json", kind="boxes", masks=True)}
    loader = nostall.Loader(str(tmp_path), pipeline=[v2.Resize((36, 48))], dtype="uint8", fields=fields,
                            batch_size=1, shuffle=False, on_error="skip")
    assert sum(len(b["target"]) for b in loader) == 0
    skipped = loader.skipped()
    assert [s["cause"] for s in skipped] == ["bad-targets"] * len(bad)
    assert all('field "target"' in s["detail"] for s in skipped), skipped
    # Raised, it names the field and what is wrong.
    loader = nostall.Loader(str(tmp_path), pipeline=[v2.Resize((36, 48))], dtype="uint8", fields=fields,
                            batch_size=1, shuffle=False)
    with pytest.raises(nostall.SampleError, match="target.*10x10"):
        next(iter(loader))


def _fixed_size_crop_padding(sample, size, fill):
    """The references' `FixedSizeCrop` where the image is smaller than `size`: padded at
    the right and the bottom (image with `fill`, masks with 0), no draw."""
    height, width = sample["image"].shape[-2:]
    padding = [0, 0, size - width, size - height]
    F = v2.functional
    return {**sample, "image": F.pad(sample["image"], padding, fill=list(fill)),
            "boxes": F.pad(sample["boxes"], padding), "masks": F.pad(sample["masks"], padding, fill=0)}


@pytest.mark.parametrize("flip", [0.0, 1.0])
def test_large_scale_jitter_is_v2s_with_the_references_padding(coco, flip):
    """ScaleJitter at a fixed factor, then FixedSizeCrop's padding, then a flip: pixels
    within a level of v2's, boxes and masks equal."""
    path, images, annotations, unmoved = coco
    fill = (1, 2, 3)
    recipe = [v2.ScaleJitter((200, 200), scale_range=(0.5, 0.5)), ops.FixedSizeCrop(200, fill=fill),
              v2.RandomHorizontalFlip(p=flip)]
    batches = list(_loader(path, [*recipe, v2.SanitizeBoundingBoxes()]))
    got_images = torch.cat([b["image"] for b in batches])
    got = [target for b in batches for target in b["target"]]
    root = path.parent.parent
    for k, (image, target) in enumerate(zip(images, unmoved)):
        pixels = torch.from_numpy(np.array(Image.open(root / "val" / image["file_name"]))).permute(2, 0, 1)
        mine = [a for a in annotations if a["image_id"] == image["id"]]
        xyxy = torch.tensor([[x, y, x + w, y + h] for x, y, w, h in (a["bbox"] for a in mine)], dtype=torch.float32)
        sample = {"image": tv_tensors.Image(pixels), "masks": tv_tensors.Mask(target["masks"].clone()),
                  "boxes": tv_tensors.BoundingBoxes(xyxy, format="XYXY", canvas_size=(HEIGHT, WIDTH)),
                  "labels": torch.tensor([a["category_id"] for a in mine])}
        sample = _fixed_size_crop_padding(recipe[0](sample), 200, fill)
        sample = v2.SanitizeBoundingBoxes()(v2.RandomHorizontalFlip(p=flip)(sample))
        assert (got_images[k].int() - sample["image"].int()).abs().max() <= 1, k
        torch.testing.assert_close(got[k]["boxes"], sample["boxes"].as_subclass(torch.Tensor), atol=2e-3, rtol=0)
        assert torch.equal(got[k]["masks"], sample["masks"].as_subclass(torch.Tensor)), k
    # The padding is the fill, on the side the flip put it.
    column = 0 if flip else 199
    assert (got_images[:, :, :, column] == torch.tensor(fill, dtype=torch.uint8)[None, :, None]).all()


def test_only_a_flip_may_follow_the_padding(coco):
    with pytest.raises(nostall.ConfigError, match="Resize follows FixedSizeCrop"):
        _loader(coco[0], [v2.ScaleJitter((100, 100)), ops.FixedSizeCrop(100), v2.Resize(50)])
    with pytest.raises(nostall.ConfigError, match="output size varies"):
        _loader(coco[0], [v2.ScaleJitter((100, 100))])
