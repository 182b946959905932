"""Boxes from a Parquet column: a string column holding each image's targets as JSON
(torchvision's `{"boxes", "labels"}` or COCO's `{"annotations": [...]}`) is read by a boxes
field as a WebDataset JSON member is, and the boxes follow the recipe as v2 moves them; a
row whose targets are not JSON is that sample's error, naming the file, row and field."""

import json
import pathlib

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from PIL import Image
from torchvision import tv_tensors
from torchvision.transforms import v2

import nostall
from nostall import ops

SIZE = (64, 96)


def boxes_of(w, h, i):
    """Two boxes inside a `w` × `h` image, different for each row."""
    return [[10 + i, 20, w // 2, h // 2 + i], [5, 5 + i, 40 + i, 60]]


@pytest.fixture(scope="module")
def table(photos, tmp_path_factory):
    """A Parquet file of eight demo photographs with a `objects` column of JSON targets
    (COCO's form in odd rows), and each image's size and boxes."""
    rows, truth = [], []
    for i, path in enumerate(sorted(pathlib.Path(photos).rglob("*.jpg"))[:8]):
        w, h = Image.open(path).size
        boxes = boxes_of(w, h, i)
        if i % 2:
            objects = {"annotations": [{"bbox": [x0, y0, x1 - x0, y1 - y0], "category_id": 3 + k, "iscrowd": 0}
                                       for k, (x0, y0, x1, y1) in enumerate(boxes)]}
        else:
            objects = {"boxes": boxes, "labels": [3, 4]}
        rows.append({"image": {"bytes": path.read_bytes(), "path": path.name}, "label": i % 3,
                     "objects": json.dumps(objects)})
        truth.append(((h, w), boxes))
    out = tmp_path_factory.mktemp("pq") / "train.parquet"
    pq.write_table(pa.Table.from_pylist(rows), out)
    return out, truth


def test_json_targets_in_a_column_follow_the_recipe_as_v2_moves_them(table):
    path, truth = table
    recipe = [ops.Resize(SIZE), ops.RandomHorizontalFlip(p=1.0)]
    loader = nostall.Loader(str(path), batch_size=8, shuffle=False, pipeline=recipe,
                            fields={"image": "image", "target": nostall.Field("objects", kind="boxes")})
    batch = next(iter(loader))
    assert batch["image"].shape[-2:] == SIZE
    for (canvas, boxes), target in zip(truth, batch["target"]):
        want = v2.Compose([v2.Resize(SIZE), v2.RandomHorizontalFlip(p=1.0)])(
            tv_tensors.BoundingBoxes(torch.tensor(boxes, dtype=torch.float32), format="XYXY", canvas_size=canvas))
        assert torch.allclose(target["boxes"], want.as_subclass(torch.Tensor), atol=2e-3), (target, want)
        assert target["labels"].tolist() == [3, 4]


def test_a_row_whose_targets_are_not_json_is_its_sample_error_naming_the_row(table, tmp_path):
    path, _ = table
    rows = pq.read_table(path).to_pylist()
    rows[2]["objects"] = "{not json"
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pylist(rows), bad)
    fields = {"image": "image", "target": nostall.Field("objects", kind="boxes")}
    with pytest.raises(nostall.SampleError, match=r"bad.parquet, row 2\): field \"target\": not a JSON"):
        next(iter(nostall.Loader(str(bad), batch_size=8, shuffle=False, pipeline=[ops.Resize(SIZE)],
                                 fields=fields)))
    skipping = nostall.Loader(str(bad), batch_size=7, shuffle=False, pipeline=[ops.Resize(SIZE)],
                              fields=fields, on_error="skip")
    batch = next(iter(skipping))
    assert len(batch["target"]) == 7
