"""Keypoints that follow the image's geometry: COCO person keypoints on the demo
photographs, against torchvision.transforms.v2 moving `KeyPoints`, and the detection
references' left/right swap on a flip."""

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
if not hasattr(tv_tensors, "KeyPoints"):
    pytest.skip("torchvision has no KeyPoints (0.23 added them)", allow_module_level=True)
from PIL import Image  # noqa: E402

#: Every photograph cropped to this size.
WIDTH, HEIGHT = 480, 360

#: COCO's person keypoints, in order.
NAMES = ["nose", "left_eye", "right_eye", "left_ear", "right_ear", "left_shoulder", "right_shoulder",
         "left_elbow", "right_elbow", "left_wrist", "right_wrist", "left_hip", "right_hip", "left_knee",
         "right_knee", "left_ankle", "right_ankle"]

#: The detection references' `flip_inds` (references/detection/transforms.py).
FLIP = [0, 2, 1, 4, 3, 6, 5, 8, 7, 10, 9, 12, 11, 14, 13, 16, 15]


def _flip_coco_person_keypoints(kps, width):
    """The detection references' keypoint flip, as they write it."""
    flipped_data = kps[:, FLIP]
    flipped_data[..., 0] = width - flipped_data[..., 0]
    inds = flipped_data[..., 2] == 0
    flipped_data[inds] = 0
    return flipped_data


def _people(i, rng):
    """Image i's annotations: two people with 17 keypoints each (some unlabelled, some
    hidden, two on the image's first column and last row), and a ball with none."""
    out = []
    for k, (x, y, w, h) in enumerate([(0, 30, 180 + 9 * i, HEIGHT - 30), (260, 60 + 5 * i, 200, 280)]):
        xs = rng.integers(x, x + w, size=17).astype(float)
        ys = rng.integers(y, y + h, size=17).astype(float)
        xs[::5] += 0.5
        vis = rng.choice([0, 1, 2], size=17, p=[0.2, 0.3, 0.5])
        if k == 0:
            xs[3], ys[4], vis[3], vis[4] = 0, HEIGHT - 1, 2, 2
        xs[vis == 0] = ys[vis == 0] = 0
        points = np.stack([xs, ys, vis], axis=1).reshape(-1).tolist()
        out.append(([x, y, w, h], 1, points))
    out.append(([200, 280, 40, 40], 2, None))
    return out


def write_coco(photos, root, count=8):
    """A COCO person-keypoints layout of ``count`` photographs cropped to WIDTH x HEIGHT."""
    os.makedirs(root / "annotations")
    os.makedirs(root / "val")
    photographs = sorted(os.path.join(d, f) for d, _, names in os.walk(photos) for f in names if f.endswith(".jpg"))
    rng = np.random.default_rng(0)
    images, annotations = [], []
    for i, path in enumerate(photographs[:count]):
        image = Image.open(path).convert("RGB").resize((WIDTH, HEIGHT))
        name = f"{i:04d}.png"
        image.save(root / "val" / name)
        images.append({"id": i + 1, "file_name": name, "width": WIDTH, "height": HEIGHT})
        for k, (bbox, category, points) in enumerate(_people(i, rng)):
            a = {"id": 10 * i + k + 1, "image_id": i + 1, "category_id": category, "bbox": bbox, "iscrowd": 0}
            if points is not None:
                a["keypoints"], a["num_keypoints"] = points, int(sum(v > 0 for v in points[2::3]))
            annotations.append(a)
    categories = [{"id": 1, "name": "person", "keypoints": NAMES, "skeleton": []}, {"id": 2, "name": "ball"}]
    path = root / "annotations" / "person_keypoints_val.json"
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))
    return path, images, annotations


def _loader(path, recipe, **kwargs):
    field = {key: kwargs.pop(key) for key in ("keypoint_flip", "padded") if key in kwargs}
    fields = {"image": "image", "target": nostall.Field("coco", kind="boxes", keypoints=17, **field)}
    return nostall.Loader(str(path), pipeline=v2.Compose(recipe), dtype="uint8", fields=fields, batch_size=4,
                          shuffle=False, **kwargs)


def _targets(loader):
    return [target for batch in loader for target in batch["target"]]


@pytest.fixture(scope="module")
def coco(photos, tmp_path_factory):
    return write_coco(photos, tmp_path_factory.mktemp("keypoints"))


def _sample(coco, image):
    path, _, annotations = coco
    pixels = torch.from_numpy(np.array(Image.open(path.parent.parent / "val" / image["file_name"]))).permute(2, 0, 1)
    mine = [a for a in annotations if a["image_id"] == image["id"]]
    points = torch.tensor([a.get("keypoints", [0.0] * 51) for a in mine], dtype=torch.float32).reshape(-1, 17, 3)
    xyxy = torch.tensor([[x, y, x + w, y + h] for x, y, w, h in (a["bbox"] for a in mine)], dtype=torch.float32)
    return {
        "image": tv_tensors.Image(pixels),
        "boxes": tv_tensors.BoundingBoxes(xyxy, format="XYXY", canvas_size=(HEIGHT, WIDTH)),
        "keypoints": tv_tensors.KeyPoints(points[..., :2].clone(), canvas_size=(HEIGHT, WIDTH)),
        "visibility": points[..., 2].clone(),
        "labels": torch.tensor([a["category_id"] for a in mine]),
    }


def _sanitize(sample):
    keep = v2.SanitizeBoundingBoxes(labels_getter=lambda s: (s["labels"], s["keypoints"], s["visibility"]))
    return keep(sample)


def _compare(ours, theirs, size):
    """Our keypoints against v2's moved points and the given visibility: equal within
    0.01 px where labelled, visibility kept within the output's edges and 0 past them, (0, 0, 0)
    where unlabelled. How many labelled points were inside."""
    width, height = size
    points, visibility = theirs["keypoints"].as_subclass(torch.Tensor), theirs["visibility"]
    assert ours["keypoints"].shape == (len(visibility), 17, 3)
    inside_count = 0
    for got, xy, vis in zip(ours["keypoints"], points, visibility):
        for (x, y, v), (ex, ey), ev in zip(got.tolist(), xy.tolist(), vis.tolist()):
            if ev == 0:
                assert (x, y, v) == (0, 0, 0)
                continue
            assert abs(x - ex) <= 0.01 and abs(y - ey) <= 0.01, ((x, y), (ex, ey))
            inside = 0 <= ex <= width and 0 <= ey <= height
            # On an edge, v2's f32 arithmetic may put the point either side of it.
            edge = min(abs(ex), abs(ex - width), abs(ey), abs(ey - height)) < 0.01
            assert v == (ev if inside else 0) or edge and v in (0, ev), (x, y, v, ev)
            inside_count += inside
    return inside_count


@pytest.mark.parametrize("recipe", [
    [v2.Resize((120, 90))],
    [v2.Resize(96), v2.CenterCrop(80), v2.RandomHorizontalFlip(p=1.0)],
    [v2.RandomHorizontalFlip(p=1.0), v2.Resize(72), v2.CenterCrop((60, 70))],
    [v2.CenterCrop((250, 400)), v2.RandomHorizontalFlip(p=1.0), v2.Resize((125, 200))],
    [v2.RandomHorizontalFlip(p=1.0), v2.Resize(100), v2.RandomHorizontalFlip(p=1.0), v2.CenterCrop(90)],
], ids=["resize", "resize-crop-flip", "flip-resize-crop", "crop-flip-half", "flip-resize-flip"])
def test_keypoints_follow_the_geometry_as_v2_moves_them(coco, recipe):
    got = _targets(_loader(coco[0], recipe))
    checked = 0
    for image, ours in zip(coco[1], got):
        theirs = _sanitize(v2.Compose(recipe)(_sample(coco, image)))
        assert torch.equal(ours["labels"], theirs["labels"])
        torch.testing.assert_close(ours["boxes"], theirs["boxes"].as_subclass(torch.Tensor), atol=2e-3, rtol=0)
        size = theirs["image"].shape[-1], theirs["image"].shape[-2]
        checked += _compare(ours, theirs, size)
    assert checked >= 20


@pytest.mark.parametrize("flip", [0.0, 1.0])
def test_large_scale_jitter_moves_keypoints_as_v2_with_the_references_padding(coco, flip):
    recipe = [v2.ScaleJitter((200, 200), scale_range=(0.5, 0.5)), ops.FixedSizeCrop(200), v2.RandomHorizontalFlip(p=flip)]
    got = _targets(_loader(coco[0], recipe))
    checked = 0
    for image, ours in zip(coco[1], got):
        sample = recipe[0](_sample(coco, image))
        height, width = sample["image"].shape[-2:]
        padding = [0, 0, 200 - width, 200 - height]
        sample = {**sample, "image": v2.functional.pad(sample["image"], padding),
                  "boxes": v2.functional.pad(sample["boxes"], padding),
                  "keypoints": v2.functional.pad(sample["keypoints"], padding)}
        theirs = _sanitize(v2.RandomHorizontalFlip(p=flip)(sample))
        checked += _compare(ours, theirs, (200, 200))
    assert checked >= 20


def test_a_flip_swaps_left_and_right_as_the_references_do(coco):
    """With COCO's `flip_inds`: the references' points, one pixel to the left (they mirror a
    point to `width - x`, v2 and nostall to `width - 1 - x`)."""
    recipe = [v2.Resize((180, 240)), v2.RandomHorizontalFlip(p=1.0)]
    swapped = _targets(_loader(coco[0], recipe, keypoint_flip=FLIP))
    plain = _targets(_loader(coco[0], [v2.Resize((180, 240))]))
    checked = 0
    for ours, unflipped in zip(swapped, plain):
        reference = _flip_coco_person_keypoints(unflipped["keypoints"].clone(), 240)
        labelled = reference[..., 2] > 0
        assert torch.equal(ours["keypoints"][..., 2], reference[..., 2])
        expected = reference[..., 0] - 1
        torch.testing.assert_close(ours["keypoints"][..., 0][labelled], expected[labelled])
        torch.testing.assert_close(ours["keypoints"][..., 1], reference[..., 1])
        checked += int(labelled.sum())
    assert checked >= 100
    # Unflipped samples are not swapped.
    same = _targets(_loader(coco[0], [v2.Resize((180, 240))], keypoint_flip=FLIP))
    assert all(torch.equal(a["keypoints"], b["keypoints"]) for a, b in zip(same, plain))


def _inside(box, x, y, slack=3.0):
    return box[0] - slack <= x <= box[2] + slack and box[1] - slack <= y <= box[3] + slack


@pytest.mark.parametrize("recipe", [
    [v2.RandomResizedCrop(160, scale=(0.3, 1.0)), v2.RandomHorizontalFlip()],
    [v2.RandomZoomOut(fill={tv_tensors.Image: (123, 117, 104), "others": 0}), v2.RandomIoUCrop(),
     v2.RandomHorizontalFlip(), v2.Resize((200, 200))],
    [v2.ScaleJitter((192, 192)), ops.FixedSizeCrop(192), v2.RandomHorizontalFlip()],
], ids=["rrc-flip", "ssd", "lsj"])
def test_keypoints_stay_in_their_boxes_under_random_geometry_for_any_thread_count(coco, recipe):
    runs = [_targets(_loader(coco[0], [*recipe, v2.SanitizeBoundingBoxes()], seed=3, threads=t, keypoint_flip=FLIP))
            for t in (1, 2, 4)]
    for other in runs[1:]:
        assert all(torch.equal(a["keypoints"], b["keypoints"]) for a, b in zip(runs[0], other))
    checked = 0
    for target in runs[0]:
        for box, label, points in zip(target["boxes"].tolist(), target["labels"].tolist(), target["keypoints"]):
            if label != 1 or box[2] - box[0] < 8:
                continue
            for x, y, v in points.tolist():
                if v > 0:
                    # A box clamped by a crop no longer holds its points outside the
                    # output; those are not visible.
                    assert _inside(box, x, y), (box, x, y)
                    checked += 1
    assert checked >= 30


def test_webdataset_json_keypoints_give_the_coco_files(coco, tmp_path):
    path, images, annotations = coco
    root = path.parent.parent
    for form in ("coco", "torchvision"):
        folder = tmp_path / form
        folder.mkdir()
        with tarfile.open(folder / "shard-000000.tar", "w") as tar:
            for image in images:
                mine = [a for a in annotations if a["image_id"] == image["id"]]
                if form == "coco":
                    doc = {"annotations": mine}
                else:
                    doc = {"boxes": [[x, y, x + w, y + h] for x, y, w, h in (a["bbox"] for a in mine)],
                           "labels": [a["category_id"] for a in mine],
                           "keypoints": [np.reshape(a.get("keypoints", [0] * 51), (17, 3)).tolist() for a in mine]}
                for ext, data in [("png", (root / "val" / image["file_name"]).read_bytes()),
                                  ("json", json.dumps(doc).encode())]:
                    info = tarfile.TarInfo(f"{image['id']:04d}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        recipe = [v2.CenterCrop((300, 400)), v2.RandomHorizontalFlip(p=1.0), v2.Resize((90, 120))]
        fields = {"image": "png", "target": nostall.Field("json", kind="boxes", keypoints=17, keypoint_flip=FLIP)}
        from_json = _targets(nostall.Loader(str(folder), pipeline=v2.Compose(recipe), dtype="uint8", fields=fields,
                                            batch_size=4, shuffle=False))
        from_coco = _targets(_loader(path, recipe, keypoint_flip=FLIP))
        assert len(from_json) == len(from_coco) == len(images)
        for a, b in zip(from_json, from_coco):
            assert torch.equal(a["keypoints"], b["keypoints"]) and torch.equal(a["labels"], b["labels"]), form


def test_padded_keypoints_and_bad_ones(coco, tmp_path):
    batch = next(iter(_loader(coco[0], [v2.Resize((90, 120))], padded=True)))
    target = batch["target"]
    assert target["keypoints"].shape == (4, 128, 17, 3) and target["keypoints"].dtype == torch.float32
    assert (target["keypoints"][:, 3:] == 0).all()
    # Beside masks: the keypoints unchanged, the masks after them.
    fields = {"image": "image", "target": nostall.Field("coco", kind="boxes", keypoints=17, masks=True)}
    both = _targets(nostall.Loader(str(coco[0]), pipeline=[v2.Resize((90, 120))], dtype="uint8", fields=fields,
                                   batch_size=4, shuffle=False))
    alone = _targets(_loader(coco[0], [v2.Resize((90, 120))]))
    for a, b in zip(both, alone):
        assert torch.equal(a["keypoints"], b["keypoints"]) and a["masks"].shape == (len(b["labels"]), 90, 120)
    # Another count than the field's is the sample's error, naming the field.
    root = coco[0].parent.parent
    with tarfile.open(tmp_path / "shard-000000.tar", "w") as tar:
        doc = {"annotations": [{"bbox": [1, 1, 50, 50], "category_id": 1, "keypoints": [5, 5, 2] * 4}]}
        for ext, data in [("png", (root / "val" / "0000.png").read_bytes()), ("json", json.dumps(doc).encode())]:
            info = tarfile.TarInfo(f"0000.{ext}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    fields = {"image": "png", "target": nostall.Field("json", kind="boxes", keypoints=17)}
    loader = nostall.Loader(str(tmp_path), pipeline=[v2.Resize((36, 48))], dtype="uint8", fields=fields,
                            batch_size=1, shuffle=False)
    with pytest.raises(nostall.SampleError, match=r'field "target".*4 keypoints.*keypoints=17'):
        next(iter(loader))
    for bad, says in [({"keypoints": 17, "keypoint_flip": [1, 2, 0] + list(range(3, 17))}, "does not pair"),
                      ({"keypoint_flip": FLIP}, "without keypoints"),
                      ({"keypoints": 100_000}, "0 to 1000")]:
        with pytest.raises(nostall.ConfigError, match=says):
            nostall.Loader(str(coco[0]), pipeline=[v2.Resize((32, 32))],
                           fields={"image": "image", "target": nostall.Field("coco", kind="boxes", **bad)})
    # The settings survive pickling (Ray sends them so).
    import pickle
    field = nostall.Field("coco", kind="boxes", keypoints=17, keypoint_flip=FLIP)
    assert repr(pickle.loads(pickle.dumps(field))) == repr(field)
