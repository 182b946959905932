"""Semantic segmentation: a label map (a palette PNG, as VOC's) that follows the image's
geometry, against torchvision.transforms.v2 moving a `Mask`, on the demo photographs."""

import io
import os
import tarfile

import numpy as np
import pytest
import torch

import nostall
from nostall import ops

v2 = pytest.importorskip("torchvision.transforms.v2")
tv_tensors = pytest.importorskip("torchvision.tv_tensors")
from PIL import Image, ImageDraw  # noqa: E402

WIDTH, HEIGHT = 480, 360

#: The painted rectangle's class and colour (VOC's "aeroplane" is 1).
PAINTED, RED = 1, (250, 10, 10)


def label_map(i):
    """Image i's classes: background 0, an ellipse of class 2, the painted rectangle 1
    ringed by VOC's 255 ("void") border, a stripe of class 20 on the last rows."""
    y, x = np.mgrid[:HEIGHT, :WIDTH]
    labels = np.zeros((HEIGHT, WIDTH), np.uint8)
    labels[((x - 330) / 90.0) ** 2 + ((y - 200 - i) / 60.0) ** 2 <= 1] = 2
    x0, y0 = 40 + 9 * i, 50
    labels[y0 - 2:y0 + 122, x0 - 2:x0 + 162] = 255
    labels[y0:y0 + 120, x0:x0 + 160] = PAINTED
    labels[HEIGHT - 12:, :] = 20
    return labels, (x0, y0, x0 + 160, y0 + 120)


def _palette_png(labels):
    image = Image.fromarray(labels, mode="P")
    image.putpalette([v for k in range(256) for v in ((k * 37) % 256, (k * 91) % 256, (k * 53) % 256)])
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def _add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


@pytest.fixture(scope="module")
def shards(photos, tmp_path_factory):
    """A shard of 16 photographs (the rectangle painted red) with their palette label maps."""
    root = tmp_path_factory.mktemp("segmentation")
    paths = sorted(os.path.join(d, f) for d, _, names in os.walk(photos) for f in names if f.endswith(".jpg"))
    samples = []
    with tarfile.open(root / "shard-000000.tar", "w") as tar:
        for i, path in enumerate(paths[:16]):
            image = Image.open(path).convert("RGB").resize((WIDTH, HEIGHT))
            labels, rect = label_map(i)
            ImageDraw.Draw(image).rectangle([rect[0], rect[1], rect[2] - 1, rect[3] - 1], fill=RED)
            png = io.BytesIO()
            image.save(png, format="PNG")
            _add(tar, f"{i:04d}.jpg.png", png.getvalue())
            _add(tar, f"{i:04d}.seg.png", _palette_png(labels))
            samples.append((np.array(image), labels))
    return root, samples


def _loader(root, recipe, fill=None, **kwargs):
    field = nostall.Field("seg.png", kind="mask") if fill is None else nostall.Field("seg.png", kind="mask", fill=fill)
    return nostall.Loader(str(root), pipeline=v2.Compose(recipe), dtype="uint8", batch_size=4, shuffle=False,
                          fields={"image": "jpg.png", "mask": field}, **kwargs)


def _masks(loader):
    return torch.cat([batch["mask"] for batch in loader])


def test_a_label_map_at_the_images_size_is_its_palette_indices(shards):
    root, samples = shards
    masks = _masks(_loader(root, [v2.Resize((HEIGHT, WIDTH))]))
    assert masks.shape == (16, HEIGHT, WIDTH) and masks.dtype == torch.uint8
    for got, (_, labels) in zip(masks, samples):
        np.testing.assert_array_equal(got.numpy(), labels)


@pytest.mark.parametrize("recipe", [
    [v2.Resize(96), v2.CenterCrop(80), v2.RandomHorizontalFlip(p=1.0)],
    [v2.Resize((120, 90))],
    [v2.CenterCrop((200, 300)), v2.Resize((64, 64))],
    [v2.RandomHorizontalFlip(p=1.0), v2.Resize(72), v2.CenterCrop((60, 70))],
    [v2.CenterCrop((250, 400)), v2.RandomHorizontalFlip(p=1.0), v2.Resize((125, 200))],
    # One length to draw: v2's draw is nostall's.
    [v2.RandomResize(300, 301), v2.CenterCrop((280, 360))],
], ids=["resize-crop-flip", "resize", "crop-resize", "flip-resize-crop", "crop-flip-half", "random-resize"])
def test_label_maps_follow_the_geometry_as_v2_moves_a_mask(shards, recipe):
    root, samples = shards
    masks = _masks(_loader(root, recipe))
    exact = 0
    for got, (pixels, labels) in zip(masks, samples):
        sample = {"image": tv_tensors.Image(torch.from_numpy(pixels).permute(2, 0, 1)),
                  "mask": tv_tensors.Mask(torch.from_numpy(labels)[None])}
        theirs = v2.Compose(recipe)(sample)["mask"].as_subclass(torch.Tensor)[0]
        assert got.shape == theirs.shape
        agree = (got == theirs).float().mean().item()
        assert agree >= 0.995, agree
        exact += bool(torch.equal(got, theirs))
    assert exact >= 8


@pytest.mark.parametrize("flip", [0.0, 1.0])
def test_large_scale_jitter_pads_the_map_with_its_fill(shards, flip):
    root, samples = shards
    recipe = [v2.ScaleJitter((200, 200), scale_range=(0.5, 0.5)), ops.FixedSizeCrop(200), v2.RandomHorizontalFlip(p=flip)]
    masks = _masks(_loader(root, recipe, fill=255))
    for got, (pixels, labels) in zip(masks, samples):
        sample = recipe[0]({"image": tv_tensors.Image(torch.from_numpy(pixels).permute(2, 0, 1)),
                            "mask": tv_tensors.Mask(torch.from_numpy(labels)[None])})
        height, width = sample["mask"].shape[-2:]
        padded = v2.functional.pad(sample["mask"], [0, 0, 200 - width, 200 - height], fill=255)
        theirs = v2.RandomHorizontalFlip(p=flip)(padded).as_subclass(torch.Tensor)[0]
        assert torch.equal(got, theirs)
        assert (got[-1] == 255).all()


def test_pad_and_pad_if_needed_pad_the_map_with_its_fill(shards):
    """Pad moves the map with the image and fills the rest with the field's fill, as v2 pads
    a Mask with its own; RandomCrop's `pad_if_needed` gives a window of the map v2 pads."""
    root, samples = shards
    fill = {tv_tensors.Image: 0, tv_tensors.Mask: 255}
    recipe = [v2.Pad([3, 5, 7, 9], fill=fill), v2.CenterCrop((370, 488))]
    masks = _masks(_loader(root, recipe, fill=255))
    for got, (pixels, labels) in zip(masks, samples):
        sample = {"image": tv_tensors.Image(torch.from_numpy(pixels).permute(2, 0, 1)),
                  "mask": tv_tensors.Mask(torch.from_numpy(labels)[None])}
        theirs = v2.Compose(recipe)(sample)["mask"].as_subclass(torch.Tensor)[0]
        assert torch.equal(got, theirs)
        assert (got[0] == 255).all() and (got[-1] == 255).all()
    # 20 rows and columns short: each side padded by 20, a window of 21 × 21 places.
    masks = _masks(_loader(root, [v2.RandomCrop((380, 500), pad_if_needed=True, fill=fill)], fill=255))
    places = set()
    for got, (_, labels) in zip(masks, samples):
        padded = v2.functional.pad(torch.from_numpy(labels)[None], [20, 20, 20, 20], fill=255)[0]
        found = [(top, left) for top in range(21) for left in range(21)
                 if torch.equal(padded[top:top + 380, left:left + 500], got)]
        assert found, "a window of the padded map"
        places.add(found[0])
    assert len(places) > 1


@pytest.mark.parametrize("recipe", [
    [v2.RandomResizedCrop(128, scale=(0.2, 1.0)), v2.RandomHorizontalFlip()],
    [v2.RandomZoomOut(fill={tv_tensors.Image: (0, 0, 0), "others": 0}), v2.RandomHorizontalFlip(),
     v2.Resize((160, 160))],
    # The segmentation references' training recipe (v2), at a smaller scale.
    [v2.RandomResize(90, 360), v2.RandomHorizontalFlip(),
     v2.RandomCrop(160, pad_if_needed=True, fill={tv_tensors.Image: 0, tv_tensors.Mask: 254})],
], ids=["rrc-flip", "zoom-out", "references"])
def test_the_map_stays_on_the_pixels_it_labels_for_any_thread_count(shards, recipe):
    """Where the map says "painted" (away from its edge), the image is the paint; the same
    bytes for 1, 2 and 4 threads."""
    root, _ = shards
    runs = [list(_loader(root, recipe, seed=7, threads=t, fill=254)) for t in (1, 2, 4)]
    for other in runs[1:]:
        for a, b in zip(runs[0], other):
            assert torch.equal(a["mask"], b["mask"]) and torch.equal(a["image"], b["image"])
    checked = 0
    for batch in runs[0]:
        for image, mask in zip(batch["image"], batch["mask"]):
            painted = (mask == PAINTED).numpy()
            # Two pixels in from the edge of the painted region, in every direction.
            inner = painted.copy()
            for axis in (0, 1):
                for shift in (-2, 2):
                    inner &= np.roll(painted, shift, axis=axis)
            inner[:2], inner[-2:], inner[:, :2], inner[:, -2:] = False, False, False, False
            if inner.sum() == 0:
                continue
            pixels = image.permute(1, 2, 0).numpy()[inner].astype(int)
            assert (np.abs(pixels - RED) <= 12).all(), pixels[np.abs(pixels - RED).max(axis=1) > 12][:5]
            checked += 1
    assert checked >= 10


def test_bad_label_maps_are_the_samples_errors_naming_the_field(shards, tmp_path):
    root, samples = shards
    pixels, labels = samples[0]
    image = io.BytesIO()
    Image.fromarray(pixels).save(image, format="PNG")
    rgb = io.BytesIO()
    Image.fromarray(pixels).save(rgb, format="PNG")
    small = _palette_png(labels[:100, :100])
    with tarfile.open(tmp_path / "shard-000000.tar", "w") as tar:
        for k, seg in enumerate([rgb.getvalue(), small, _palette_png(labels)[:200], b""]):
            _add(tar, f"{k:04d}.jpg.png", image.getvalue())
            _add(tar, f"{k:04d}.seg.png", seg)
        _add(tar, "0004.jpg.png", image.getvalue())
    loader = _loader(tmp_path, [v2.Resize((36, 48))], on_error="skip")
    assert sum(len(b["mask"]) for b in loader) == 0
    skipped = loader.skipped()
    causes = sorted(s["cause"] for s in skipped)
    assert causes == ["bad-targets"] * 4 + ["missing-field"], skipped
    assert all('"mask"' in s["detail"] for s in skipped), skipped
    details = " ".join(s["detail"] for s in skipped)
    assert 'mode "L" or "P"' in details and "100x100 for an image of 480x360" in details


def test_settings_are_bounded_and_a_mix_is_refused(shards):
    root, _ = shards
    for field, says in [(nostall.Field("seg.png", kind="mask", max_bytes=1 << 40), "max_bytes"),
                        (nostall.Field("seg.png", kind="mask", keypoints=3), "keypoints")]:
        with pytest.raises(nostall.ConfigError, match=says):
            nostall.Loader(str(root), pipeline=[v2.Resize((32, 32))], fields={"image": "jpg.png", "mask": field})
    with pytest.raises((OverflowError, TypeError, ValueError)):
        nostall.Field("seg.png", kind="mask", fill=256)
    with pytest.raises(nostall.ConfigError, match="masks do not follow a mix"):
        _loader(root, [v2.Resize((32, 32))], mix=nostall.Mixup(num_classes=21))
    with pytest.raises(nostall.ConfigError, match="RandomIoUCrop"):
        _loader(root, [v2.RandomIoUCrop(), v2.Resize((32, 32))])


def _write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def train_ids(labels):
    """A Cityscapes-style map of training ids for ``labels``: another class for each
    (void, 255, kept), as `createTrainIdLabelImgs` maps label ids to 19 classes."""
    return np.where(labels == 255, 255, labels * 7 % 19).astype(np.uint8)


def write_layout(samples, root, layout):
    """``samples`` (pixels, labels) laid out under ``root`` as ``layout`` (``voc-split``,
    ``voc``, ``ade20k``, ``cityscapes``) publishes them, Cityscapes with its maps of
    training ids too. Returns the location to open, relative to ``root``, and which
    sample each one read from it is."""
    stems = [f"2007_{k:06d}" for k in range(len(samples))]
    for k, (stem, (pixels, labels)) in enumerate(zip(stems, samples)):
        image = io.BytesIO()
        Image.fromarray(pixels).save(image, format="JPEG" if layout != "cityscapes" else "PNG", quality=95)
        grey = io.BytesIO()
        Image.fromarray(labels, mode="L").save(grey, format="PNG")
        if layout.startswith("voc"):
            _write(root / "VOC2012" / "JPEGImages" / f"{stem}.jpg", image.getvalue())
            _write(root / "VOC2012" / "SegmentationClass" / f"{stem}.png", _palette_png(labels))
        elif layout == "ade20k":
            _write(root / "ADE" / "images" / "training" / f"ADE_train_{k:08d}.jpg", image.getvalue())
            _write(root / "ADE" / "annotations" / "training" / f"ADE_train_{k:08d}.png", grey.getvalue())
        else:
            city = ["aachen", "bremen"][k % 2]
            name = f"{city}_{k:06d}_000019"
            fine = root / "cs" / "gtFine" / "train" / city
            _write(root / "cs" / "leftImg8bit" / "train" / city / f"{name}_leftImg8bit.png", image.getvalue())
            _write(fine / f"{name}_gtFine_labelIds.png", grey.getvalue())
            _write(fine / f"{name}_gtFine_color.png", image.getvalue())
            trained = io.BytesIO()
            Image.fromarray(train_ids(labels), mode="L").save(trained, format="PNG")
            _write(fine / f"{name}_gtFine_labelTrainIds.png", trained.getvalue())
    if layout.startswith("voc"):
        # VOC's images without a map (most of JPEGImages) are not samples.
        _write(root / "VOC2012" / "JPEGImages" / "2008_000001.jpg", b"not read")
        split = ("\n".join(stems[1:]) + "\n").encode()
        _write(root / "VOC2012" / "ImageSets" / "Segmentation" / "train.txt", split)
    n = len(samples)
    return {
        "voc-split": ("VOC2012/ImageSets/Segmentation/train.txt", list(range(1, n))),
        "voc": ("VOC2012", list(range(n))),
        "ade20k": ("ADE/images/training", list(range(n))),
        # By city, then name.
        "cityscapes": ("cs/leftImg8bit/train", list(range(0, n, 2)) + list(range(1, n, 2))),
    }[layout]


@pytest.mark.parametrize("layout", ["voc-split", "voc", "ade20k", "cityscapes"])
def test_segmentation_folders_pair_each_image_with_its_map(shards, tmp_path, layout):
    """Pascal VOC, ADE20K and Cityscapes as they are laid out: each image with its map."""
    _, samples = shards
    location, expected = write_layout(samples[:4], tmp_path, layout)
    loader = nostall.Loader(str(tmp_path / location), pipeline=[v2.Resize((HEIGHT, WIDTH))], dtype="uint8",
                            batch_size=2, shuffle=False,
                            fields={"image": "image", "mask": nostall.Field("mask", kind="mask")})
    masks = _masks(loader)
    assert len(masks) == len(expected)
    for got, k in zip(masks, expected):
        np.testing.assert_array_equal(got.numpy(), samples[k][1])


def test_cityscapes_training_ids_are_read_as_the_member_labelTrainIds(shards, tmp_path):
    """A field of the member ``labelTrainIds`` reads Cityscapes' maps of training ids
    (``<name>_gtFine_labelTrainIds.png``) instead of its label ids; a missing one fails
    its sample, naming the file; another layout has none, and says so."""
    _, samples = shards
    location, order = write_layout(samples[:4], tmp_path, "cityscapes")
    missing = tmp_path / "cs" / "gtFine" / "train" / "bremen" / "bremen_000003_000019_gtFine_labelTrainIds.png"
    missing.unlink()
    fields = {"image": "image", "mask": nostall.Field("labelTrainIds", kind="mask", fill=255)}
    loader = nostall.Loader(str(tmp_path / location), pipeline=[v2.Resize((HEIGHT, WIDTH))], dtype="uint8",
                            batch_size=1, shuffle=False, fields=fields, on_error="skip")
    masks = _masks(loader)
    assert len(masks) == 3
    for got, k in zip(masks, order[:3]):
        np.testing.assert_array_equal(got.numpy(), train_ids(samples[k][1]))
    [skipped] = loader.skipped()
    assert skipped["cause"] == "bad-targets" and str(missing) in skipped["detail"], skipped
    location, _ = write_layout(samples[:2], tmp_path / "other", "ade20k")
    with pytest.raises(nostall.ConfigError, match="labelTrainIds maps are Cityscapes'"):
        nostall.Loader(str(tmp_path / "other" / location), pipeline=[v2.Resize((32, 32))], fields=fields)
