"""Segmentation datasets and COCO panoptic in S3-compatible object storage, against a real
server (``s3s-fs``, as ``test_detection_s3.py`` runs it): Pascal VOC, ADE20K, Cityscapes
(its label ids and its training ids) and a panoptic file read from ``s3://`` deliver,
batch by batch, what their local copies deliver; what is missing names the object."""

import os
import shutil

import numpy as np
import pytest
import torch

import nostall

v2 = pytest.importorskip("torchvision.transforms.v2")
from PIL import Image  # noqa: E402

from test_detection_s3 import s3_env  # noqa: E402,F401  (over this module's bucket)
from test_panoptic import write_panoptic  # noqa: E402
from test_s3 import serving  # noqa: E402
from test_segmentation import HEIGHT, WIDTH, label_map, write_layout  # noqa: E402

LAYOUTS = ["voc-split", "voc", "ade20k", "cityscapes"]


@pytest.fixture(scope="module")
def bucket(photos, tmp_path_factory):
    """An ``s3s-fs`` serving bucket ``seg``: each layout of ``LAYOUTS`` under its name
    (six photographs with their label maps), ``panoptic/`` (test_panoptic's layout) and
    ``missing/`` (VOC's, one label map and one image of its split deleted). Yields the endpoint and
    the bucket's folder: the local copy."""
    root = tmp_path_factory.mktemp("s3")
    folder = root / "seg"
    paths = sorted(os.path.join(d, f) for d, _, names in os.walk(photos) for f in names if f.endswith(".jpg"))
    samples = [(np.array(Image.open(path).convert("RGB").resize((WIDTH, HEIGHT))), label_map(i)[0])
               for i, path in enumerate(paths[:6])]
    for layout in LAYOUTS:
        write_layout(samples, folder / layout, layout)
    write_panoptic(photos, folder / "panoptic", count=6)
    shutil.copytree(folder / "voc", folder / "missing")
    (folder / "missing" / "VOC2012" / "SegmentationClass" / "2007_000002.png").unlink()
    (folder / "missing" / "VOC2012" / "JPEGImages" / "2007_000004.jpg").unlink()
    with serving(root, root.parent / f"{root.name}-s3s-fs.log") as (endpoint, _):
        yield endpoint, folder


def epochs(location, member, **kwargs):
    """Two shuffled epochs of randomly augmented batches: (ids, images, masks) each."""
    recipe = v2.Compose([v2.RandomResizedCrop((48, 64), scale=(0.3, 1.0)), v2.RandomHorizontalFlip()])
    loader = nostall.Loader(location, pipeline=recipe, dtype="uint8", batch_size=2, seed=3, threads=2,
                            fetch_threads=2, fields={"image": "image", "mask": nostall.Field(member, kind="mask")},
                            **kwargs)
    return loader, [(list(loader.last_ids), batch["image"].clone(), batch["mask"].clone())
                    for _ in range(2) for batch in loader]


@pytest.mark.parametrize("dataset,member", [(layout, "mask") for layout in LAYOUTS]
                         + [("cityscapes", "labelTrainIds"), ("panoptic", "mask")])
def test_a_segmentation_dataset_in_s3_delivers_what_its_local_copy_delivers(s3_env, dataset, member):
    location = {
        "voc-split": "voc/VOC2012/ImageSets/Segmentation/train.txt",
        "voc": "voc/VOC2012",
        "ade20k": "ade20k/ADE/images/training",
        "cityscapes": "cityscapes/cs/leftImg8bit/train",
        "panoptic": "panoptic/annotations/panoptic_val2017.json",
    }[dataset]
    local, expected = epochs(str(s3_env / location), member)
    remote, got = epochs(f"s3://seg/{location}", member)
    assert remote.dataset_len == local.dataset_len == (5 if dataset == "voc-split" else 6)
    assert len(got) == len(expected) > 0
    for (ids, images, masks), (ids_local, images_local, masks_local) in zip(got, expected):
        assert ids == ids_local
        assert torch.equal(images, images_local)
        assert torch.equal(masks, masks_local)


def test_what_a_store_lacks_fails_its_sample_naming_the_object(s3_env):
    """The split names a stem whose map and another whose image the bucket lacks."""
    loader = nostall.Loader("s3://seg/missing/VOC2012/ImageSets/Segmentation/train.txt",
                            pipeline=[v2.Resize((32, 32))], dtype="uint8", batch_size=2, shuffle=False,
                            fields={"image": "image", "mask": nostall.Field("mask", kind="mask")},
                            on_error="skip")
    assert sum(len(batch["mask"]) for batch in loader) == 3
    skipped = sorted((s["cause"], s["detail"]) for s in loader.skipped())
    assert [cause for cause, _ in skipped] == ["bad-targets", "io"], skipped
    assert "s3://seg/missing/VOC2012/SegmentationClass/2007_000002.png" in skipped[0][1], skipped
    assert "s3://seg/missing/VOC2012/JPEGImages/2007_000004.jpg" in skipped[1][1], skipped
    with pytest.raises(nostall.ConfigError, match="labelTrainIds maps are Cityscapes'"):
        epochs("s3://seg/voc/VOC2012", "labelTrainIds")
