"""COCO detection datasets in S3-compatible object storage, against a real server
(``s3s-fs``, as ``test_s3.py`` runs it): the annotation file and its images read from
``s3://`` deliver, batch by batch, what their local copy delivers (pixels, boxes, labels,
masks); what is wrong names the object; the parsed annotations are kept between opens
until the object changes."""

import json
import os
import shutil

import pytest
import torch

import nostall

v2 = pytest.importorskip("torchvision.transforms.v2")

from test_detection import FIELDS, write_coco  # noqa: E402
from test_detection_masks import write_coco as write_coco_with_masks  # noqa: E402
from test_s3 import ACCESS_KEY, SECRET_KEY, serving  # noqa: E402

MASKS = {"image": "image", "target": nostall.Field("coco", kind="boxes", masks=True)}


@pytest.fixture(scope="module")
def bucket(photos, tmp_path_factory):
    """An ``s3s-fs`` serving bucket ``coco``: ``detection/`` (test_detection's layout,
    ``annotations/instances_val.json`` beside ``val/``, 12 photographs), ``masks/``
    (test_detection_masks', polygons and RLEs), ``not-coco/`` (an annotation file that is
    JSON but not COCO's) and ``missing/`` (detection's, one image deleted). Yields the
    endpoint and the bucket's folder: the local copy."""
    root = tmp_path_factory.mktemp("s3")
    folder = root / "coco"
    write_coco(photos, folder / "detection")
    write_coco_with_masks(photos, folder / "masks")
    (folder / "not-coco" / "annotations").mkdir(parents=True)
    (folder / "not-coco" / "annotations" / "instances_val.json").write_text('{"images": "none"}')
    shutil.copytree(folder / "detection", folder / "missing")
    (folder / "missing" / "val" / "0003.jpg").unlink()
    with serving(root, root.parent / f"{root.name}-s3s-fs.log") as (endpoint, _):
        yield endpoint, folder


@pytest.fixture
def s3_env(bucket, monkeypatch, tmp_path):
    """The environment a user sets for the server (and no other AWS settings of this
    machine); the kept indexes in a folder of the test's own."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ENDPOINT_URL", bucket[0])
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("NOSTALL_CACHE_DIR", str(tmp_path / "cache"))
    return bucket[1]


def epochs(location, fields, recipe):
    """Two shuffled epochs of randomly augmented batches: (ids, images, targets) each."""
    loader = nostall.Loader(location, pipeline=v2.Compose(recipe), dtype="uint8", fields=fields,
                            batch_size=4, seed=5, threads=2, fetch_threads=2)
    return loader, [(list(loader.last_ids), batch["image"].clone(), batch["target"])
                    for _ in range(2) for batch in loader]


@pytest.mark.parametrize("dataset,fields,recipe", [
    ("detection", FIELDS, [v2.RandomResizedCrop(64, scale=(0.3, 1.0)), v2.RandomHorizontalFlip()]),
    ("masks", MASKS, [v2.RandomResizedCrop((48, 64), scale=(0.5, 1.0)), v2.RandomHorizontalFlip()]),
])
def test_a_coco_dataset_in_s3_delivers_what_its_local_copy_delivers(s3_env, dataset, fields, recipe):
    local, expected = epochs(str(s3_env / dataset / "annotations" / "instances_val.json"), fields, recipe)
    remote, got = epochs(f"s3://coco/{dataset}/annotations/instances_val.json", fields, recipe)
    assert remote.dataset_len == local.dataset_len == (12 if dataset == "detection" else 8)
    assert len(got) == len(expected) == 2 * local.dataset_len // 4
    for (ids, images, targets), (ids_local, images_local, targets_local) in zip(got, expected):
        assert ids == ids_local
        assert torch.equal(images, images_local)
        for target, target_local in zip(targets, targets_local, strict=True):
            assert target.keys() == target_local.keys() >= {"boxes", "labels"}
            for key in target:
                assert torch.equal(target[key], target_local[key]), key
    if dataset == "masks":
        assert any(t["masks"].any() for _, _, targets in got for t in targets)
    # The bytes came from the server (the second epoch's from the loader's cache).
    assert remote.metrics["storage"]["requests"] >= remote.dataset_len


def test_what_is_wrong_in_s3_names_the_object(s3_env):
    with pytest.raises(nostall.ConfigError,
                       match="s3://coco/not-coco/annotations/instances_val.json: not a COCO annotation file"):
        nostall.Loader("s3://coco/not-coco/annotations/instances_val.json", fields=FIELDS)
    with pytest.raises(nostall.ConfigError,
                       match="s3://coco/nowhere/annotations/instances_val.json: no such object"):
        nostall.Loader("s3://coco/nowhere/annotations/instances_val.json", fields=FIELDS)
    with pytest.raises(nostall.ConfigError, match="read it with fields"):
        nostall.Loader("s3://coco/detection/annotations/instances_val.json")
    # An image the bucket lacks: skipped, named by its key; the others delivered.
    loader = nostall.Loader("s3://coco/missing/annotations/instances_val.json", pipeline=[v2.Resize((40, 40))],
                            fields=FIELDS, batch_size=4, shuffle=False, on_error="skip")
    assert sum(len(b["target"]) for b in loader) == 11
    [skipped] = loader.skipped()
    assert skipped["location"] == "s3://coco/missing/val/0003.jpg"
    assert skipped["cause"] == "io" and "no such object" in skipped["detail"], skipped


def test_a_second_open_reads_the_kept_index_until_the_object_changes(s3_env, tmp_path):
    shutil.copytree(s3_env / "detection", s3_env / "kept")
    location = "s3://coco/kept/annotations/instances_val.json"
    nostall.Loader(location, fields=FIELDS)
    [kept] = (tmp_path / "cache").glob("*.coco-blob.idx")
    made = kept.stat()
    assert nostall.Loader(location, fields=FIELDS).dataset_len == 12
    again = kept.stat()
    assert (again.st_ino, again.st_mtime_ns) == (made.st_ino, made.st_mtime_ns)  # read, not made again
    # Another version of the object: parsed again, and the index made anew.
    path = s3_env / "kept" / "annotations" / "instances_val.json"
    data = json.loads(path.read_text())
    data["images"] = data["images"][:5]
    path.write_text(json.dumps(data))
    assert nostall.Loader(location, fields=FIELDS).dataset_len == 5
    assert kept.stat().st_ino != made.st_ino
