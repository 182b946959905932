"""COCO panoptic as a semantic segmentation dataset: each image's RGB PNG of segment ids
and its `segments_info` read as a label map (each pixel its segment's category), against a
NumPy conversion of the PNG as panopticapi's `panoptic2semantic_segmentation.py` makes it,
moved as torchvision.transforms.v2 moves a `Mask`, on the demo photographs."""

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
from PIL import Image  # noqa: E402

WIDTH, HEIGHT = 480, 360
COUNT = 10

#: COCO panoptic's categories (ids as COCO's, things and stuff), one not used.
CATEGORIES = [
    {"id": 1, "name": "person", "isthing": 1, "supercategory": "person", "color": [220, 20, 60]},
    {"id": 3, "name": "car", "isthing": 1, "supercategory": "vehicle", "color": [0, 0, 142]},
    {"id": 184, "name": "tree-merged", "isthing": 0, "supercategory": "plant", "color": [107, 142, 35]},
    {"id": 187, "name": "sky-other-merged", "isthing": 0, "supercategory": "sky", "color": [70, 130, 180]},
    {"id": 200, "name": "rug-merged", "isthing": 0, "supercategory": "floor", "color": [50, 50, 50]},
]

#: A segment id the PNGs hold and no `segments_info` lists: unlabelled, as panopticapi.
UNLISTED = 0x0A0B0C


def segment_ids(i):
    """Image i's segment ids (R + 256 G + 65536 B): sky above, a tree (ellipse), two cars
    and a person (rectangles), an unlisted region, unlabelled (0) stripes; and its
    `segments_info`."""
    y, x = np.mgrid[:HEIGHT, :WIDTH]
    ids = np.zeros((HEIGHT, WIDTH), np.uint32)
    # Ids that use all three channels, as COCO's (its ids are colours).
    sky, tree, car_a, car_b, person = (0x4682B4 + i, 0x6B8E23 + i, 0x00008E, 0x01008E, 0xDC143C)
    ids[: 120 + 3 * i] = sky
    ids[((x - 330) / 90.0) ** 2 + ((y - 180 - i) / 70.0) ** 2 <= 1] = tree
    ids[200:300, 20 + 7 * i:180 + 7 * i] = car_a
    ids[230:280, 190 + 5 * i:260 + 5 * i] = car_b
    ids[60:330, 400 - 3 * i:440 - 3 * i] = person
    ids[20:50, 20:90] = UNLISTED
    ids[::17] = 0
    ids[HEIGHT - 10:] = 0
    info = [(sky, 187), (tree, 184), (car_a, 3), (car_b, 3), (person, 1)]
    segments = [{"id": int(s), "category_id": c, "iscrowd": 0, "bbox": [0, 0, 1, 1], "area": int((ids == s).sum())}
                for s, c in info]
    return ids, segments


def rgb(ids):
    """The PNG's pixels of segment ids, as panopticapi's `id2rgb`."""
    return np.stack([ids % 256, ids // 256 % 256, ids // 65536], axis=-1).astype(np.uint8)


def semantic(png_pixels, segments):
    """The reference: panopticapi's conversion (`rgb2id`, then each listed segment's
    pixels its category, everything else 0)."""
    pan = png_pixels.astype(np.uint32)
    ids = pan[..., 0] + 256 * pan[..., 1] + 256 * 256 * pan[..., 2]
    out = np.zeros(ids.shape, np.uint8)
    for segment in segments:
        out[ids == segment["id"]] = segment["category_id"]
    return out


def _photographs(photos):
    return sorted(os.path.join(d, f) for d, _, names in os.walk(photos) for f in names if f.endswith(".jpg"))


def write_panoptic(photos, root, count=COUNT):
    """COCO's panoptic layout of ``count`` demo photographs: ``val2017/``,
    ``annotations/panoptic_val2017.json`` and ``annotations/panoptic_val2017/``. Returns
    the JSON's path and each image's (pixels, reference label map)."""
    (root / "val2017").mkdir(parents=True)
    (root / "annotations" / "panoptic_val2017").mkdir(parents=True)
    images, annotations, samples = [], [], []
    for i, path in enumerate(_photographs(photos)[:count]):
        image = Image.open(path).convert("RGB").resize((WIDTH, HEIGHT))
        stem = f"{i + 1:012d}"
        image.save(root / "val2017" / f"{stem}.png")
        ids, segments = segment_ids(i)
        Image.fromarray(rgb(ids), mode="RGB").save(root / "annotations" / "panoptic_val2017" / f"{stem}.png")
        images.append({"id": i + 1, "file_name": f"{stem}.png", "width": WIDTH, "height": HEIGHT})
        annotations.append({"image_id": i + 1, "file_name": f"{stem}.png", "segments_info": segments})
        samples.append((np.array(image), semantic(rgb(ids), segments)))
    path = root / "annotations" / "panoptic_val2017.json"
    path.write_text(json.dumps({"info": {}, "licenses": [], "images": images, "annotations": annotations,
                                "categories": CATEGORIES}))
    return path, samples


@pytest.fixture(scope="module")
def panoptic(photos, tmp_path_factory):
    return write_panoptic(photos, tmp_path_factory.mktemp("panoptic"))


def _loader(path, recipe, **kwargs):
    kwargs = {"dtype": "uint8", "batch_size": 4, "shuffle": False, **kwargs}
    return nostall.Loader(str(path), pipeline=v2.Compose(recipe),
                          fields={"image": "image", "mask": nostall.Field("mask", kind="mask")}, **kwargs)


def _masks(loader):
    return torch.cat([batch["mask"] for batch in loader])


def _v2_mask(recipe, pixels, labels):
    sample = {"image": tv_tensors.Image(torch.from_numpy(pixels).permute(2, 0, 1)),
              "mask": tv_tensors.Mask(torch.from_numpy(labels)[None])}
    return v2.Compose(recipe)(sample)["mask"].as_subclass(torch.Tensor)[0]


def test_the_label_map_is_panopticapis_conversion_of_the_png(panoptic):
    path, samples = panoptic
    masks = _masks(_loader(path, [v2.Resize((HEIGHT, WIDTH))]))
    assert masks.shape == (COUNT, HEIGHT, WIDTH) and masks.dtype == torch.uint8
    for got, (_, labels) in zip(masks, samples):
        np.testing.assert_array_equal(got.numpy(), labels)
        assert set(np.unique(labels)) == {0, 1, 3, 184, 187}
    # The unlisted segment's pixels are unlabelled.
    assert (masks[:, 20:50, 20:90] == 0).all()


@pytest.mark.parametrize("recipe", [
    [v2.Resize(96), v2.CenterCrop(80)],
    [v2.Resize((120, 90))],
    [v2.CenterCrop((200, 300)), v2.Resize((64, 64))],
    [v2.Resize(72), v2.CenterCrop((60, 70)), v2.RandomHorizontalFlip(p=1.0)],
], ids=["resize-crop", "resize", "crop-resize", "resize-crop-flip"])
def test_label_maps_follow_plain_geometry_as_v2_moves_a_mask(panoptic, recipe):
    """As `test_segmentation.py` compares a label map with v2's, and here exactly v2's
    (these chains round as v2 does at each step)."""
    path, samples = panoptic
    masks = _masks(_loader(path, recipe))
    for got, (pixels, labels) in zip(masks, samples):
        theirs = _v2_mask(recipe, pixels, labels)
        assert got.shape == theirs.shape
        assert torch.equal(got, theirs), (got == theirs).float().mean().item()


def _add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _grey_png(values):
    out = io.BytesIO()
    Image.fromarray(values.astype(np.uint8), mode="L").save(out, format="PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def coordinates(panoptic, tmp_path_factory):
    """The same photographs in a shard, each with four label maps of its pixels'
    coordinates (x and y, low and high bytes): read with the panoptic file's recipe and
    seed, they say which pixel of the image each output pixel was read from."""
    _, samples = panoptic
    root = tmp_path_factory.mktemp("coordinates")
    y, x = np.mgrid[:HEIGHT, :WIDTH]
    with tarfile.open(root / "shard-000000.tar", "w") as tar:
        for i, (pixels, _) in enumerate(samples):
            png = io.BytesIO()
            Image.fromarray(pixels).save(png, format="PNG")
            _add(tar, f"{i:04d}.png", png.getvalue())
            for name, values in [("xl", x % 256), ("xh", x // 256), ("yl", y % 256), ("yh", y // 256)]:
                _add(tar, f"{i:04d}.{name}.png", _grey_png(values))
    return root


def _read_from(root, recipe, **kwargs):
    """Per sample, the (y, x) of the image each output pixel was read from."""
    fields = {"image": "png", **{k: nostall.Field(f"{k}.png", kind="mask") for k in ("xl", "xh", "yl", "yh")}}
    loader = nostall.Loader(str(root), pipeline=v2.Compose(recipe), dtype="uint8", batch_size=4, shuffle=False,
                            fields=fields, **kwargs)
    out = []
    for batch in loader:
        xs = batch["xl"].long() + 256 * batch["xh"].long()
        ys = batch["yl"].long() + 256 * batch["yh"].long()
        out.extend(zip(ys, xs))
    return out


def _axis(read, out_size):
    """The crop (start, length) along one axis whose nearest resize to `out_size` reads
    `read` as torch's `nearest` does (`floor(i * (length / out_size))` in float32), or
    the closest."""
    best = None
    first, last = int(read[0]), int(read[-1])
    # floor((out_size - 1) * length / out_size) may fall short of length - 1 by length / out_size.
    longest = (last - first + 1) * out_size // (out_size - 1) + 2
    for length in range(max(last - first - 1, 1), longest + 1):
        scale = torch.tensor(length / out_size, dtype=torch.float32)
        index = first + torch.floor(torch.arange(out_size, dtype=torch.float32) * scale).long()
        misses = int((index != read).sum())
        if best is None or misses < best[0]:
            best = (misses, first, length)
    return best[1], best[2]


def test_random_resized_crop_and_flip_move_the_map_as_v2_moves_a_mask(panoptic, coordinates):
    """Under RandomResizedCrop and a flip: the panoptic map is the reference map read at
    the pixels the same draw reads (learnt from a shard of coordinate maps read with the
    same recipe and seed), and v2's resized crop and flip of the reference `Mask` at that
    draw; the same bytes for 1 and 2 threads."""
    path, samples = panoptic
    recipe = [v2.RandomResizedCrop(128, scale=(0.2, 1.0)), v2.RandomHorizontalFlip()]
    runs = [list(_loader(path, recipe, seed=7, threads=t)) for t in (1, 2)]
    for a, b in zip(*runs):
        assert torch.equal(a["mask"], b["mask"]) and torch.equal(a["image"], b["image"])
    masks = torch.cat([batch["mask"] for batch in runs[0]])
    read = _read_from(coordinates, recipe, seed=7, threads=1)
    flips = 0
    for got, (ys, xs), (_, labels) in zip(masks, read, samples):
        np.testing.assert_array_equal(got.numpy(), labels[ys.numpy(), xs.numpy()])
        flipped = bool(xs[0, 0] > xs[0, -1])
        columns = xs[0].flip(0) if flipped else xs[0]
        left, width = _axis(columns, 128)
        top, height = _axis(ys[:, 0], 128)
        mask = tv_tensors.Mask(torch.from_numpy(labels)[None])
        theirs = v2.functional.resized_crop(mask, top, left, height, width, [128, 128],
                                            interpolation=v2.InterpolationMode.NEAREST)
        if flipped:
            theirs = v2.functional.horizontal_flip(theirs)
        theirs = theirs.as_subclass(torch.Tensor)[0]
        assert torch.equal(got, theirs), (got == theirs).float().mean().item()
        flips += flipped
    assert 0 < flips < COUNT


def _bad_dataset(photos, root, damage):
    """The panoptic layout with image k damaged by `damage[k](png_path, entry)`."""
    path, samples = write_panoptic(photos, root, count=len(damage) + 1)
    data = json.loads(path.read_text())
    for entry, hurt in zip(data["annotations"], damage):
        hurt(root / "annotations" / "panoptic_val2017" / entry["file_name"], entry)
    path.write_text(json.dumps(data))
    return path


def _grey(png, entry):
    Image.open(png).convert("L").save(png)


def _small(png, entry):
    Image.open(png).crop((0, 0, 100, 80)).save(png)


def _unknown_category(png, entry):
    entry["segments_info"][1]["category_id"] = 99


def _missing(png, entry):
    png.unlink()


def test_bad_inputs_are_the_samples_errors_naming_the_file_and_image(photos, tmp_path):
    path = _bad_dataset(photos, tmp_path, [_grey, _small, _unknown_category, _missing])
    loader = _loader(path, [v2.Resize((36, 48))], on_error="skip", batch_size=1)
    assert sum(len(b["mask"]) for b in loader) == 1, "the sound image only"
    skipped = sorted(loader.skipped(), key=lambda s: s["sample_id"])
    assert [s["cause"] for s in skipped] == ["bad-targets"] * 4, skipped
    assert all('"mask"' in s["detail"] for s in skipped), skipped
    grey, small, category, missing = (s["detail"] for s in skipped)
    pngs = tmp_path / "annotations" / "panoptic_val2017"
    assert str(pngs / "000000000001.png") in grey and "RGB" in grey, grey
    assert str(pngs / "000000000002.png") in small and "100x80, its image 480x360" in small, small
    assert "panoptic_val2017.json" in category and "image 3" in category and "category 99" in category, category
    assert str(pngs / "000000000004.png") in missing, missing
    # Raised, the error names the file.
    with pytest.raises(nostall.SampleError, match="000000000001.png"):
        next(iter(_loader(path, [v2.Resize((36, 48))], batch_size=1)))


def test_files_a_label_map_cannot_follow_are_refused_when_opened(photos, tmp_path):
    path, _ = write_panoptic(photos, tmp_path, count=2)
    data = json.loads(path.read_text())
    data["categories"].append({"id": 256, "name": "beyond", "isthing": 0})
    path.write_text(json.dumps(data))
    with pytest.raises(nostall.ConfigError, match="category 256"):
        _loader(path, [v2.Resize((36, 48))])
    # An instances file read with a mask field: named, as not panoptic's format.
    instances = tmp_path / "annotations" / "instances_val2017.json"
    instances.write_text(json.dumps({"images": data["images"], "categories": data["categories"][:2],
                                     "annotations": [{"id": 1, "image_id": 1, "category_id": 1,
                                                      "bbox": [1, 2, 3, 4]}]}))
    with pytest.raises(nostall.ConfigError, match="instances_val2017.json.*panoptic"):
        _loader(instances, [v2.Resize((36, 48))])
