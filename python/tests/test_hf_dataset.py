"""A Hugging Face ``datasets.Dataset`` read natively: its Image column's Arrow buffers in
place (bytes or paths), its ClassLabel, its order after select and shuffle; one with a
transform of its own runs as user code, and says why."""

from __future__ import annotations

import pytest
import torch
import torchvision

import nostall

datasets = pytest.importorskip("datasets")

KW = dict(batch_size=8, pipeline="val", image_size=48, shuffle=False, threads=2)


def batches(loader):
    return [(x.clone(), y.clone(), tuple(loader.last_ids)) for x, y in loader]


@pytest.fixture(scope="module")
def folder(photos):
    return torchvision.datasets.ImageFolder(photos)


def hf(folder, by="bytes", labels=None):
    """The demo photographs as a ``datasets.Dataset``, in the ImageFolder's order: each
    image's encoded bytes in the Arrow table, or its path."""
    from datasets import ClassLabel, Dataset, Features, Image

    images = [{"bytes": open(p, "rb").read(), "path": None} if by == "bytes" else p
              for p, _ in folder.samples]
    label = ClassLabel(names=folder.classes)
    columns = {"image": images, "label": labels or [c for _, c in folder.samples]}
    return Dataset.from_dict(columns, features=Features({"image": Image(), "label": label}))


@pytest.mark.parametrize("by", ["bytes", "path"])
def test_a_datasets_dataset_is_read_natively_as_its_files_would_be(photos, folder, by):
    files = batches(nostall.Loader(photos, **KW))
    held = batches(nostall.Loader(hf(folder, by), **KW))
    assert len(held) == len(files) == 4
    for (x, y, ids), (x2, y2, ids2) in zip(files, held):
        assert torch.equal(x, x2) and torch.equal(y, y2) and ids == ids2


def test_select_and_shuffle_keep_the_datasets_order_and_labels(folder):
    ds = hf(folder).shuffle(seed=1).select(range(10))
    got = batches(nostall.Loader(ds, **KW))
    assert [len(y) for _, y, _ in got] == [8, 2]
    assert torch.cat([y for _, y, _ in got]).tolist() == ds["label"]
    whole = {ids: x for x, _, ids in batches(nostall.Loader(hf(folder), **dict(KW, batch_size=1)))}
    original = ds._indices.column(0).to_pylist()
    for x, _, ids in got:
        for row, i in enumerate(ids):
            assert torch.equal(x[row], whole[(original[i],)][0])
    shuffled = [batches(nostall.Loader(ds, **dict(KW, shuffle=True, seed=4, threads=n))) for n in (1, 2)]
    assert [ids for _, _, ids in shuffled[0]] == [ids for _, _, ids in shuffled[1]]


def test_labels_by_column_or_none_and_bad_columns_are_config_errors(folder):
    ds = hf(folder)
    unlabeled = nostall.Loader(ds, label_column="none", **KW)
    assert all((y == -1).all() for _, y in unlabeled)
    names = ds.cast_column("label", datasets.Value("int64")).map(
        lambda row: {"name": ["b", "a", "c", "d"][row["label"]]})
    by_name = batches(nostall.Loader(names, label_column="name", **KW))
    want = [sorted(["b", "a", "c", "d"]).index(["b", "a", "c", "d"][c]) for _, c in folder.samples]
    assert torch.cat([y for _, y, _ in by_name]).tolist() == want
    with pytest.raises(nostall.ConfigError, match="image_column='label'"):
        nostall.Loader(ds, image_column="label", **KW)
    with pytest.raises(nostall.ConfigError, match="label_column='nope'"):
        nostall.Loader(ds, label_column="nope", **KW)
    test_split = hf(folder, labels=[-1] * len(folder.samples))
    with pytest.raises(nostall.ConfigError, match="row 0 is -1"):
        nostall.Loader(test_split, **KW)


def test_a_damaged_or_missing_image_is_skipped_by_policy_naming_its_row(folder):
    from datasets import ClassLabel, Dataset, Features, Image

    good = [{"bytes": open(p, "rb").read(), "path": None} for p, _ in folder.samples[:7]]
    rows = good[:3] + [{"bytes": b"not a jpeg", "path": None}, None] + good[3:]
    ds = Dataset.from_dict({"image": rows, "label": [0] * len(rows)},
                           features=Features({"image": Image(), "label": ClassLabel(names=["x"])}))
    with pytest.raises(nostall.SampleError, match=r"datasets.Dataset\[3\]"):
        list(nostall.Loader(ds, **KW))
    skipping = nostall.Loader(ds, on_error="skip", **KW)
    assert sum(len(y) for _, y in skipping) == 7
    assert sum(skipping.metrics["skipped"].values()) == 2


def test_a_dataset_with_a_transform_function_runs_as_user_code_and_says_why(folder):
    import numpy as np

    def to_arrays(batch):
        return {"image": [np.asarray(im.convert("RGB").resize((16, 16)), dtype=np.uint8)
                          for im in batch["image"]], "label": batch["label"]}

    ds = hf(folder).with_transform(to_arrays)
    loader = nostall.DataLoader(ds, batch_size=8, num_workers=1)
    assert loader.metrics["path"]["path"] == "user code"
    assert "to_arrays" in loader.metrics["path"]["why"] and "pipeline=" in loader.metrics["path"]["why"]
    first = next(iter(loader))
    assert tuple(first["image"].shape) == (8, 16, 16, 3)


def test_analyze_reads_a_datasets_dataset_from_memory(folder):
    report = str(nostall.analyze(hf(folder), pipeline="val", image_size=48, step_ms=5, batch_size=8, budget=1,
                                 run_seconds=0.5, max_threads=2))
    assert "memory (Dataset)" in report and "datasets.Dataset[" in report
