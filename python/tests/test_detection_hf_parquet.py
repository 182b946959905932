"""Boxes from Hugging Face's nested detection column: `datasets` writes a detection
dataset's targets as a struct of lists (`objects: {id, area, bbox, category}`, as cppe-5
and detection-datasets/coco are published); a boxes field reads its `bbox` and `category`
lists in the format the field says they are stored in, and the boxes follow the recipe as
v2 moves them. A row whose lists are not boxes is that sample's error, naming the file,
row and field."""

import math
import pathlib

import datasets
import pyarrow.parquet as pq
import pytest
import torch
from PIL import Image
from torchvision import tv_tensors
from torchvision.transforms import v2

import nostall
from nostall import ops

SIZE = (64, 96)
CLASSES = ["coverall", "face_shield", "gloves", "goggles", "mask"]


def features():
    """cppe-5's features (`datasets`' object-detection tutorial)."""
    return datasets.Features({
        "image": datasets.Image(),
        "objects": datasets.Sequence({
            "id": datasets.Value("int64"),
            "area": datasets.Value("float32"),
            "bbox": datasets.Sequence(datasets.Value("float32"), length=4),
            "category": datasets.ClassLabel(names=CLASSES),
        }),
    })


def boxes_of(w, h, i):
    """Row `i`'s boxes (corners) inside a `w` × `h` image: none in row 5, three in odd rows."""
    if i == 5:
        return []
    boxes = [[10 + i, 20, w // 2, h // 2 + i], [5, 5 + i, 40 + i, 60]]
    return boxes + [[w // 3, h // 4, w - 7, h - 3 - i]] if i % 2 else boxes


def stored(box, form):
    x0, y0, x1, y1 = box
    return {"xyxy": [x0, y0, x1, y1], "xywh": [x0, y0, x1 - x0, y1 - y0],
            "cxcywh": [(x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0]}[form]


@pytest.fixture(scope="module")
def rows(photos):
    """Eight demo photographs, each with its size and boxes (corners) and labels."""
    out = []
    for i, path in enumerate(sorted(pathlib.Path(photos).rglob("*.jpg"))[:8]):
        w, h = Image.open(path).size
        boxes = boxes_of(w, h, i)
        out.append((path, (h, w), boxes, [(i + k) % len(CLASSES) for k in range(len(boxes))]))
    return out


def write(rows, path, form, change=None, writer="datasets"):
    """`rows` as `datasets` writes them (with `writer`'s settings), the boxes stored as
    `form`; `change(i, objects)` may alter row `i`'s objects."""
    images, objects = [], []
    for i, (photo, _, boxes, labels) in enumerate(rows):
        o = {"id": list(range(len(boxes))), "area": [float((b[2] - b[0]) * (b[3] - b[1])) for b in boxes],
             "bbox": [stored(b, form) for b in boxes], "category": labels}
        if change:
            change(i, o)
        images.append({"bytes": photo.read_bytes(), "path": photo.name})
        objects.append(o)
    dataset = datasets.Dataset.from_dict({"image": images, "objects": objects}, features=features())
    if writer == "datasets":
        dataset.to_parquet(str(path))
        return path
    # Row groups of 3 rows, pages of a few values (`datasets` writes dictionaries and
    # snappy; a tiny dictionary falls back to plain values), so that rows' levels cross
    # pages; v2 pages.
    dataset.to_parquet(str(path), batch_size=3, data_page_size=16, write_batch_size=2, dictionary_pagesize_limit=1,
                       data_page_version="2.0" if writer == "v2-plain-zstd" else "1.0")
    if writer == "v2-plain-zstd":
        # The same file (schema, metadata, row groups) again: no dictionaries, zstd.
        pq.write_table(pq.read_table(path), path, row_group_size=3, data_page_size=16, write_batch_size=2,
                       use_dictionary=False, data_page_version="2.0", compression="zstd")
    return path


def loader(path, **field):
    recipe = [ops.Resize(SIZE), ops.RandomHorizontalFlip(p=1.0)]
    on_error = field.pop("on_error", "error")
    return nostall.Loader(str(path), batch_size=8, shuffle=False, pipeline=recipe, on_error=on_error,
                          fields={"image": "image", "target": nostall.Field("objects", kind="boxes", **field)})


WRITERS = ["datasets", "small-pages", "v2-plain-zstd"]


@pytest.mark.parametrize("form", ["xywh", "xyxy"])
@pytest.mark.parametrize("writer", WRITERS)
def test_nested_boxes_follow_the_recipe_as_v2_moves_them(rows, tmp_path, form, writer):
    path = write(rows, tmp_path / "train.parquet", form, writer=writer)
    batch = next(iter(loader(path, stored_format=form)))
    assert batch["image"].shape[-2:] == SIZE
    for (_, canvas, boxes, labels), target in zip(rows, batch["target"]):
        assert target["labels"].tolist() == labels
        if not boxes:
            assert target["boxes"].shape == (0, 4)
            continue
        want = v2.Compose([v2.Resize(SIZE), v2.RandomHorizontalFlip(p=1.0)])(
            tv_tensors.BoundingBoxes(torch.tensor(boxes, dtype=torch.float32), format="XYXY", canvas_size=canvas))
        assert torch.allclose(target["boxes"], want.as_subclass(torch.Tensor), atol=2e-3), (target, want)


def test_the_stored_format_is_required_and_only_a_boxes_field_reads_a_struct(rows, tmp_path):
    path = write(rows, tmp_path / "train.parquet", "xywh")
    with pytest.raises(nostall.ConfigError, match=r'column "objects" is a struct of lists: give the boxes field '
                                                   r'stored_format="xyxy", "xywh" or "cxcywh"'):
        loader(path)
    with pytest.raises(nostall.ConfigError, match=r"a boxes field reads a struct of lists"):
        nostall.Loader(str(path), batch_size=8, pipeline=[ops.Resize(SIZE)],
                       fields={"image": "image", "target": nostall.Field("objects", kind="json")})
    with pytest.raises(nostall.ConfigError, match=r'has no list "labels" \(its fields: id, area, bbox, category\)'):
        loader(path, stored_format="xywh", label_subcolumn="labels")
    # Another list named as the labels: the objects' ids.
    batch = next(iter(loader(path, stored_format="xywh", label_subcolumn="id")))
    assert batch["target"][0]["labels"].tolist() == [0, 1]


def too_many(i, o):
    if i == 2:
        o["bbox"] = o["bbox"] * 3
        o["category"] = o["category"] * 3


def mismatched(i, o):
    if i == 2:
        o["category"] = o["category"][:1]


def not_a_number(i, o):
    if i == 2:
        o["bbox"][1][2] = math.nan


def no_labels(i, o):
    if i == 2:
        o["category"] = None


def a_null_box(i, o):
    if i == 2:
        o["bbox"][0] = None


@pytest.mark.parametrize("change, says", [
    (too_many, r'"bbox" holds more boxes than max_boxes=4'),
    (mismatched, r'2 boxes in "bbox" and 1 labels in "category"'),
    (not_a_number, r'box 1 of "bbox" is not four finite numbers'),
    (no_labels, r'"category" is not a list \(null\)'),
    (a_null_box, r'box 0 of "bbox" is not four finite numbers'),
])
def test_a_row_whose_lists_are_not_boxes_is_its_sample_error_naming_the_row(rows, tmp_path, change, says):
    path = write(rows, tmp_path / "bad.parquet", "xywh", change, writer="small-pages")
    with pytest.raises(nostall.SampleError, match=r'bad.parquet, row 2\): field "target": ' + says):
        next(iter(loader(path, stored_format="xywh", max_boxes=4)))
    skipping = loader(path, stored_format="xywh", max_boxes=4, on_error="skip")
    kept = [labels for i, (_, _, _, labels) in enumerate(rows) if i != 2]
    assert [t["labels"].tolist() for batch in skipping for t in batch["target"]] == kept


def test_boxes_are_the_same_for_one_and_two_threads(rows, tmp_path):
    path = write(rows, tmp_path / "train.parquet", "xywh", writer="small-pages")
    recipe = [ops.RandomResizedCrop(SIZE, scale=(0.5, 1.0)), ops.RandomHorizontalFlip()]

    def run(threads):
        it = nostall.Loader(str(path), batch_size=4, shuffle=False, pipeline=recipe, threads=threads, seed=5,
                            fields={"image": "image",
                                    "target": nostall.Field("objects", kind="boxes", stored_format="xywh")})
        return [(t["boxes"], t["labels"]) for batch in it for t in batch["target"]]

    one, two = run(1), run(2)
    assert len(one) == len(rows)
    for (b1, l1), (b2, l2) in zip(one, two):
        assert torch.equal(b1, b2) and torch.equal(l1, l2)


def test_a_list_of_structs_gives_the_same_boxes(rows, tmp_path):
    """`datasets`' `List({...})` (a list of one struct an object, as some detection datasets
    declare `objects`) holds the same lists one level down: the same targets."""
    listed = datasets.Features({
        "image": datasets.Image(),
        "objects": datasets.List({
            "bbox": datasets.List(datasets.Value("float32"), length=4),
            "category": datasets.ClassLabel(names=CLASSES),
        }),
    })
    images = [{"bytes": photo.read_bytes(), "path": photo.name} for photo, *_ in rows]
    objects = [[{"bbox": stored(b, "xywh"), "category": c} for b, c in zip(boxes, labels)]
               for _, _, boxes, labels in rows]
    path = tmp_path / "listed.parquet"
    datasets.Dataset.from_dict({"image": images, "objects": objects}, features=listed).to_parquet(str(path))
    struct = write(rows, tmp_path / "struct.parquet", "xywh")
    got = next(iter(loader(path, stored_format="xywh")))["target"]
    want = next(iter(loader(struct, stored_format="xywh")))["target"]
    assert len(got) == len(want) == len(rows)
    for g, w in zip(got, want):
        assert g["labels"].tolist() == w["labels"].tolist()
        assert torch.equal(g["boxes"], w["boxes"])
