"""Parquet datasets as Hugging Face's ``datasets`` writes them (pyarrow): the ``image``
column a struct of ``bytes`` and ``path``, the ``label`` a ``ClassLabel``, the features in
the file's ``huggingface`` metadata; read by ``Loader`` as the class folder they came from."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import nostall
from parquet_files import rows, write


def epoch(loader):
    ids, images, labels = [], [], []
    for batch_images, batch_labels in loader:
        ids.extend(loader.last_ids)
        images.append(np.asarray(batch_images))
        labels.extend(np.asarray(batch_labels).tolist())
    return ids, np.concatenate(images), labels


def test_a_datasets_file_gives_the_batches_of_its_class_folder(photos, tmp_path):
    data, classes = rows(photos)
    path = tmp_path / "train-00000-of-00001.parquet"
    write(path, data, classes, row_group_size=5)
    settings = dict(batch_size=8, pipeline="val", image_size=32, output="numpy", seed=3)
    parquet = nostall.Loader(str(path), **settings)
    folder = nostall.Loader(photos, **settings)
    assert parquet.classes == folder.classes == classes
    assert parquet.dataset_len == len(data)
    ids, images, labels = epoch(parquet)
    assert sorted(ids) == list(range(len(data)))
    assert labels == [data[i][2] for i in ids]
    # The same photograph gives the same pixels, from the file as from the folder.
    folder_ids, folder_images, _ = epoch(folder)
    by_id = {i: img for i, img in zip(folder_ids, folder_images)}
    for i, img in zip(ids, images):
        np.testing.assert_array_equal(img, by_id[i])


def test_the_memory_for_pages_is_part_of_the_budget(photos, tmp_path):
    data, classes = rows(photos)
    path = tmp_path / "train.parquet"
    write(path, data, classes, row_group_size=5)
    settings = dict(batch_size=8, pipeline="val", image_size=32, output="numpy")
    plan = nostall.Loader(str(path), memory="64MiB", **settings).memory_plan
    assert plan["groups"] == 16 << 20
    assert sum(plan[k] for k in ("batch_buffers", "readahead", "groups", "cache")) <= 64 << 20
    plan = nostall.Loader(str(path), memory="64MiB", group_memory="1MiB", **settings).memory_plan
    assert plan["groups"] == 1 << 20
    # Little room for pages: still every row once an epoch.
    loader = nostall.Loader(str(path), group_memory=200_000, **settings)
    for _ in range(2):
        ids, _, labels = epoch(loader)
        assert sorted(ids) == list(range(len(data)))
        assert labels == [data[i][2] for i in ids]


def test_a_state_saved_mid_epoch_resumes_exactly_with_pages_open(photos, tmp_path):
    data, classes = rows(photos)
    path = tmp_path / "train.parquet"
    write(path, data, classes, row_group_size=4)
    # Room for a few row groups only: the order keeps some open (not a permutation).
    settings = dict(batch_size=4, pipeline="val", image_size=32, output="numpy", seed=5,
                    group_memory=300_000)
    reference = nostall.Loader(str(path), **settings)
    reference.set_epoch(1)
    expected = epoch(reference)

    loader = nostall.Loader(str(path), **settings)
    loader.set_epoch(1)
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = loader.state_dict()
    del loader, it
    resumed = nostall.Loader(str(path), **settings)
    resumed.load_state_dict(state)
    ids, images, labels = epoch(resumed)
    assert ids == expected[0][12:]
    assert labels == expected[2][12:]
    np.testing.assert_array_equal(images, expected[1][12:])


def test_columns_named_by_the_user(photos, tmp_path):
    data, classes = rows(photos)
    path = tmp_path / "plain.parquet"
    table = pa.table(
        {
            "jpg": pa.array([b for b, _, _ in data], type=pa.binary()),
            "cls": pa.array([classes[label] for _, _, label in data], type=pa.string()),
        }
    )
    pq.write_table(table, path, row_group_size=7)
    loader = nostall.Loader(str(path), image_column="jpg", label_column="cls", batch_size=4,
                            pipeline="val", image_size=16, output="numpy")
    assert loader.classes == classes
    ids, _, labels = epoch(loader)
    assert labels == [data[i][2] for i in ids]
    unlabeled = nostall.Loader(str(path), image_column="jpg", label_column="none",
                               batch_size=4, pipeline="val", image_size=16, output="numpy")
    assert unlabeled.classes == []
    with pytest.raises(nostall.ConfigError, match="no column \"png\""):
        nostall.Loader(str(path), image_column="png")
    with pytest.raises(nostall.ConfigError, match="give one"):
        nostall.Loader(str(path), image_column="jpg", audio_column="jpg")


def test_a_truncated_file_is_an_error_naming_it(photos, tmp_path):
    data, classes = rows(photos)
    path = tmp_path / "cut.parquet"
    write(path, data, classes, row_group_size=5)
    content = path.read_bytes()
    path.write_bytes(content[: len(content) // 2])
    with pytest.raises(nostall.NostallError, match="cut.parquet"):
        nostall.Loader(str(path))
