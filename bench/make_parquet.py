"""Writes a class folder of photographs (or audio clips) as a Hugging Face Parquet dataset,
with `datasets`.

`load_dataset("imagefolder")` (class-sorted, as the folder is), the photographs' bytes
embedded in the `image` column (as `push_to_hub` does: `embed_table_storage`), then
`Dataset.to_parquet` with row groups of `--rows` (100: what `datasets` wrote for image
data before 5.x, whose default aims at row groups of ~100 MB instead).

`--audio` reads a class folder of audio clips (`load_dataset("audiofolder")`: an `audio`
column of the `Audio` feature; writing it needs `torchcodec`). `--repeat N` writes every
photograph N times (still sorted by class): a dataset of many row groups, for the
shuffle measures of ``examples/parquet_shuffle.rs``.

Usage: ``python bench/make_parquet.py bench/data/photos bench/data/photos.parquet``
(in a venv with `datasets`: ``pip install datasets``).
"""

from __future__ import annotations

import argparse

import pyarrow.parquet as pq
from datasets import concatenate_datasets, load_dataset
from datasets.table import embed_table_storage


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder")
    parser.add_argument("out")
    parser.add_argument("--rows", type=int, default=100, help="rows per row group")
    parser.add_argument("--repeat", type=int, default=1, help="each photograph this often")
    parser.add_argument("--audio", action="store_true", help="a folder of audio clips")
    args = parser.parse_args()
    column = "audio" if args.audio else "image"
    ds = load_dataset(f"{column}folder", data_dir=args.folder, split="train")
    if args.repeat > 1:
        ds = concatenate_datasets([ds] * args.repeat).sort("label")
    ds = ds.with_format("arrow").map(embed_table_storage, batched=True).with_format(None)
    ds.to_parquet(args.out, batch_size=args.rows)
    meta = pq.ParquetFile(args.out).metadata
    first = pq.ParquetFile(args.out).read_row_group(0).column(column)[0]
    assert first["bytes"].as_py(), "the samples' bytes are embedded"
    print(
        f"{args.out}: {meta.num_rows} rows in {meta.num_row_groups} row groups, "
        f"features {ds.features}"
    )


if __name__ == "__main__":
    main()
