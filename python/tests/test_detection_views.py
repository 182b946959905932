"""Targets with views (`pipeline=` a list of pipelines with `fields=`): each view's boxes,
instance masks and semantic mask follow that view's geometry, as v2 moves them for that
view's recipe alone; the fields that do not follow the image come once a sample."""

import io
import json
import os
import tarfile

import numpy as np
import pytest
import torch

import nostall

v2 = pytest.importorskip("torchvision.transforms.v2")
tv_tensors = pytest.importorskip("torchvision.tv_tensors")
from PIL import Image, ImageDraw  # noqa: E402

WIDTH, HEIGHT = 480, 360
#: The painted rectangle's class, and its colour (magenta, which the photographs lack).
PAINTED, PAINT = 1, (255, 0, 255)
COUNT = 12


def _add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _png(array, mode=None):
    out = io.BytesIO()
    Image.fromarray(array, mode=mode).save(out, format="PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def shards(photos, tmp_path_factory):
    """A shard of demo photographs at 480x360, a rectangle painted magenta on each: its box (with
    its polygon) and a second box as JSON, its label map (the rectangle class 1, a stripe
    class 20), its class as `cls`."""
    root = tmp_path_factory.mktemp("views")
    paths = sorted(os.path.join(d, f) for d, _, names in os.walk(photos) for f in names if f.endswith(".jpg"))
    samples = []
    with tarfile.open(root / "shard-000000.tar", "w") as tar:
        for i, path in enumerate(paths[:COUNT]):
            image = Image.open(path).convert("RGB").resize((WIDTH, HEIGHT))
            x0, y0, x1, y1 = 40 + 13 * i, 50 + 5 * i, 200 + 13 * i, 170 + 5 * i
            ImageDraw.Draw(image).rectangle([x0, y0, x1 - 1, y1 - 1], fill=PAINT)
            labels = np.zeros((HEIGHT, WIDTH), np.uint8)
            labels[y0:y1, x0:x1] = PAINTED
            labels[HEIGHT - 12:, :] = 20
            annotations = [
                {"bbox": [x0, y0, x1 - x0, y1 - y0], "category_id": PAINTED,
                 "segmentation": [[x0, y0, x1, y0, x1, y1, x0, y1]]},
                {"bbox": [300, 200, 150, 100], "category_id": 2},
            ]
            _add(tar, f"{i:04d}.jpg.png", _png(np.array(image)))
            _add(tar, f"{i:04d}.seg.png", _png(labels, mode="L"))
            _add(tar, f"{i:04d}.json", json.dumps({"annotations": annotations}).encode())
            _add(tar, f"{i:04d}.cls", str(i % 3).encode())
            samples.append((np.array(image), labels, annotations, i % 3))
    return root, samples


FIELDS = {"image": "jpg.png", "label": "cls", "seg": nostall.Field("seg.png", kind="mask"),
          "target": nostall.Field("json", kind="boxes", masks=True)}


def _loader(root, views, **kwargs):
    kwargs = dict(dict(dtype="uint8", batch_size=4, shuffle=False, fields=FIELDS), **kwargs)
    return nostall.Loader(str(root), pipeline=[v2.Compose(v) for v in views], **kwargs)


def _reference(sample, recipe):
    """What v2 gives one sample's image, boxes, labels, instance masks and label map."""
    pixels, labels, annotations, _ = sample
    xyxy = [[x, y, x + w, y + h] for x, y, w, h in (a["bbox"] for a in annotations)]
    instance = np.zeros((len(annotations), HEIGHT, WIDTH), np.uint8)
    x, y, w, h = annotations[0]["bbox"]
    instance[0, y:y + h, x:x + w] = 1
    image = tv_tensors.Image(torch.from_numpy(pixels).permute(2, 0, 1))
    made = {
        "image": image,
        "boxes": tv_tensors.BoundingBoxes(torch.tensor(xyxy, dtype=torch.float32), format="XYXY",
                                          canvas_size=(HEIGHT, WIDTH)),
        "labels": torch.tensor([a["category_id"] for a in annotations]),
        "masks": tv_tensors.Mask(torch.from_numpy(instance)),
    }
    done = v2.Compose([*recipe, v2.SanitizeBoundingBoxes()])(made)
    # The label map apart: SanitizeBoundingBoxes would filter it as a box's mask.
    done["seg"] = v2.Compose(recipe)({"image": image, "seg": tv_tensors.Mask(torch.from_numpy(labels)[None])})["seg"]
    return {key: value.as_subclass(torch.Tensor) for key, value in done.items()}


#: Views without draws (the flip's p 1), for the comparison with v2 sample by sample.
FIXED = [
    [v2.Resize(96), v2.CenterCrop(80), v2.RandomHorizontalFlip(p=1.0)],
    [v2.CenterCrop((300, 240)), v2.Resize((64, 48))],
    [v2.Resize((45, 60)), v2.RandomVerticalFlip(p=1.0)],
]


def test_each_views_targets_are_v2s_for_that_views_recipe(shards):
    root, samples = shards
    batches = list(_loader(root, [[*view, v2.SanitizeBoundingBoxes()] for view in FIXED]))
    assert sum(len(b["label"]) for b in batches) == COUNT
    at = 0
    for batch in batches:
        images, segs, targets = batch["image"], batch["seg"], batch["target"]
        assert isinstance(images, tuple) and len(images) == len(segs) == len(targets) == len(FIXED)
        for k, sample in enumerate(samples[at:at + len(batch["label"])]):
            assert batch["label"][k].item() == sample[3]
            for view, recipe in enumerate(FIXED):
                theirs = _reference(sample, recipe)
                target = targets[view][k]
                assert images[view][k].shape == theirs["image"].shape, view
                assert segs[view][k].shape == theirs["seg"].shape[1:], view
                assert torch.equal(target["labels"], theirs["labels"]), (view, k)
                torch.testing.assert_close(target["boxes"], theirs["boxes"], atol=2e-3, rtol=0)
                assert target["size"].tolist() == list(theirs["image"].shape[1:])
                assert (target["masks"] == theirs["masks"]).float().mean().item() >= 0.995
                assert (segs[view][k] == theirs["seg"][0]).float().mean().item() >= 0.995
        at += len(batch["label"])


#: Random views: a SimCLR-like crop and flip, and a centre crop.
RANDOM = [
    [v2.RandomResizedCrop(64, scale=(0.3, 1.0)), v2.RandomHorizontalFlip(), v2.SanitizeBoundingBoxes()],
    [v2.RandomResizedCrop(48, scale=(0.5, 1.0)), v2.RandomVerticalFlip(), v2.SanitizeBoundingBoxes()],
    [v2.CenterCrop((280, 360)), v2.Resize((56, 72))],
]


def _rows_cols(region):
    rows, cols = np.nonzero(region)
    return [cols.min(), rows.min(), cols.max() + 1, rows.max() + 1]


def test_each_views_targets_follow_that_views_drawn_pixels(shards):
    """The painted rectangle, wherever each view's draws took it: its box and its instance
    mask bound the painted pixels, and the label map's class 1 covers them."""
    root, _ = shards
    checked = [0] * len(RANDOM)
    for batch in (b for _ in range(2) for b in _loader(root, RANDOM, seed=3)):
        for view in range(len(RANDOM)):
            images, segs, targets = batch["image"][view], batch["seg"][view], batch["target"][view]
            for image, seg, target in zip(images, segs, targets):
                image = image.numpy().astype(int)
                paint = (image[0] > 200) & (image[1] < 70) & (image[2] > 200)
                first = [k for k, label in enumerate(target["labels"].tolist()) if label == PAINTED]
                if paint.sum() < 16 or not first:
                    continue
                seen = _rows_cols(paint)
                box = target["boxes"][first[0]].tolist()
                assert np.allclose(box, seen, atol=1.5), (view, box, seen)
                mask = target["masks"][first[0]].numpy()
                assert np.allclose(_rows_cols(mask), seen, atol=1.5), (view, _rows_cols(mask), seen)
                painted = seg.numpy() == PAINTED
                # The paint's edge, blended by the resize, reaches past the map's nearest read.
                assert painted[paint].mean() >= 0.9, view
                assert np.allclose(_rows_cols(painted), seen, atol=1.5), (view, _rows_cols(painted), seen)
                checked[view] += 1
    assert min(checked) >= 6, checked


def test_views_targets_are_the_same_bytes_for_any_thread_count_and_after_resume(shards):
    root, _ = shards
    fields = dict(FIELDS, target=nostall.Field("json", kind="boxes", masks="bits", padded=True, max_boxes=4))

    def digest(batch):
        views = zip(batch["image"], batch["seg"], batch["target"])
        return batch["label"].tolist(), [
            (image.numpy().tobytes(), seg.numpy().tobytes(), target["boxes"].numpy().tobytes(),
             target["masks"].numpy().tobytes(), target["count"].tolist())
            for image, seg, target in views]

    kwargs = dict(seed=7, batch_size=3, shuffle=True, fields=fields)
    one = [digest(b) for b in _loader(root, RANDOM, threads=1, **kwargs)]
    for threads in (2, 4):
        assert [digest(b) for b in _loader(root, RANDOM, threads=threads, **kwargs)] == one
    assert [digest(b) for b in _loader(root, RANDOM, threads=1, **dict(kwargs, seed=8))] != one
    loader = _loader(root, RANDOM, threads=2, **kwargs)
    it = iter(loader)
    next(it)
    resumed = _loader(root, RANDOM, threads=1, **kwargs)
    resumed.load_state_dict(loader.state_dict())
    assert [digest(b) for b in resumed] == one[1:]


def test_what_a_views_targets_cannot_follow_is_refused_naming_the_view(shards):
    root, _ = shards
    views = [[v2.CenterCrop(64)], [v2.RandomResizedCrop(32), v2.AugMix()]]
    with pytest.raises(nostall.ConfigError, match="view 1: AugMix"):
        _loader(root, views)
    # What views of a record cannot be delivered with: the node agent's batches, one
    # stacked tensor of views.
    views = [[v2.CenterCrop(64)], [v2.CenterCrop(64)]]
    with pytest.raises(nostall.ConfigError, match="views with share="):
        _loader(root, views, share="node")
    with pytest.raises(nostall.ConfigError, match="stack_views=True stacks the views of images alone"):
        _loader(root, views, stack_views=True)
