"""Parquet files as Hugging Face's ``datasets`` writes them (pyarrow), for the tests: the
``image`` column a struct of ``bytes`` and ``path``, the ``label`` a ``ClassLabel``, the
features in the file's ``huggingface`` metadata."""

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq


def rows(photos):
    """The demo photographs, class by class (a conversion from class folders sorts so)."""
    classes = sorted(os.listdir(photos))
    out = []
    for label, cls in enumerate(classes):
        for name in sorted(os.listdir(os.path.join(photos, cls))):
            with open(os.path.join(photos, cls, name), "rb") as f:
                out.append((f.read(), f"{cls}/{name}", label))
    return out, classes


def write(path, rows, classes, row_group_size, metadata=True):
    image = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    table = pa.table(
        {
            "image": pa.array([{"bytes": b, "path": p} for b, p, _ in rows], type=image),
            "label": pa.array([label for _, _, label in rows], type=pa.int64()),
        }
    )
    if metadata:
        features = {
            "image": {"_type": "Image"},
            "label": {"names": classes, "_type": "ClassLabel"},
        }
        meta = {b"huggingface": json.dumps({"info": {"features": features}}).encode()}
        table = table.replace_schema_metadata(meta)
    pq.write_table(table, path, row_group_size=row_group_size)
