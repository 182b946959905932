"""Writes the Parquet fuzz seeds that Hugging Face `datasets` writes itself
(`fuzz/corpus/parquet/datasets-*.parquet`), over the image target's photographs.

- `datasets-imagefolder.parquet`: `load_dataset("imagefolder")` over a class folder of
  the JPEGs, the bytes embedded (as `push_to_hub` does: `embed_table_storage`), then
  `Dataset.to_parquet` with its defaults: in `datasets` 5, the image column PLAIN and
  uncompressed, the labels Snappy with a dictionary, content-defined chunking, the page
  index, and the `huggingface` schema metadata.
- `datasets-row-groups.parquet`: the same, two rows a row group.
- `datasets-from-dict.parquet`: `Dataset.from_dict` with the `Image`, `ClassLabel` and
  `Value("string")` features over the JPEGs and PNGs, each with its path and a caption.

Usage (offline; a venv with `datasets`, which brings `pyarrow`):
``python3 -m venv /tmp/fuzzvenv && /tmp/fuzzvenv/bin/pip install datasets pillow``, then
``/tmp/fuzzvenv/bin/python fuzz/make_parquet_seeds.py``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

FUZZ = Path(__file__).resolve().parent
IMAGES = FUZZ / "corpus" / "image"
OUT = FUZZ / "corpus" / "parquet"
# Seeds stay small: AFL mutates every byte of a seed, and large ones slow every execution.
MAX_SEED_BYTES = 20_000


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="nostall-parquet-seeds-"))
    # No hub: the cache goes to the scratch folder, and nothing is fetched.
    os.environ["HF_HOME"] = str(work / "hf")
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    from datasets import ClassLabel, Dataset, Features, Image, Value, load_dataset
    from datasets.table import embed_table_storage

    try:
        folder = work / "photos"
        classes = {
            "color": ["baseline-420.jpg", "baseline-444.jpg", "progressive.jpg", "restart.jpg"],
            "gray": ["gray.jpg", "cmyk.jpg"],
        }
        for label, names in classes.items():
            (folder / label).mkdir(parents=True)
            for name in names:
                shutil.copy(IMAGES / name, folder / label / name)
        ds = load_dataset("imagefolder", data_dir=str(folder), split="train")
        ds = ds.with_format("arrow").map(embed_table_storage, batched=True).with_format(None)
        ds.to_parquet(str(OUT / "datasets-imagefolder.parquet"))
        ds.to_parquet(str(OUT / "datasets-row-groups.parquet"), batch_size=2)

        names = sorted(p.name for p in IMAGES.iterdir())
        features = Features(
            {
                "image": Image(),
                "label": ClassLabel(names=["jpeg", "png"]),
                "caption": Value("string"),
            }
        )
        rows = {
            "image": [{"bytes": (IMAGES / n).read_bytes(), "path": n} for n in names],
            "label": [1 if n.endswith(".png") else 0 for n in names],
            "caption": [f"a small test image, {n}" for n in names],
        }
        Dataset.from_dict(rows, features=features).to_parquet(
            str(OUT / "datasets-from-dict.parquet")
        )
    finally:
        shutil.rmtree(work)
    for path in sorted(OUT.glob("datasets-*.parquet")):
        size = path.stat().st_size
        assert size < MAX_SEED_BYTES, f"{path} is {size} bytes"
        print(f"{path.relative_to(FUZZ.parent)}: {size} bytes")


if __name__ == "__main__":
    main()
