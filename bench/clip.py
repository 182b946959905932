"""Image-text training, CLIP style: nostall against webdataset + OpenCLIP, side by side.

Data (``--make``, idempotent): WebDataset shards in the layout LAION and DataComp ship,
``jpg`` + ``txt`` + ``json`` a sample, 250 samples a shard. The photographs are
``bench/data/photos`` (real photographs, ``bench/make_photos.py``); the captions are real
English sentences, 20 to 200 characters, of the Python documentation that ships with the
interpreter (``pydoc_data``), one a photograph in order: real text of a caption's length,
not a description of the photograph (nothing here depends on what it says). The ``json``
is LAION's metadata (key, caption, width, height, sha256).

The recipe is OpenCLIP's, taken as it is: ``open_clip.create_model_and_transforms
("ViT-B-32")``'s training transform (``RandomResizedCrop(224, scale=(0.9, 1.0),
bicubic)``, the RGB conversion, ``ToTensor``, ``Normalize``) and its tokenizer (77
tokens), batch 64:

* ``webdataset``: OpenCLIP's own pipeline as its ``training/data.py`` (``get_wds_dataset``)
  writes it: ``wds.DataPipeline`` of the shard list, shard shuffle, ``split_by_worker``,
  ``tarfile_to_samples``, sample shuffle, ``decode("pilrgb")``, ``rename(image=
  "jpg;png;jpeg;webp", text="txt")``, ``map_dict(image=transform, text=tokenize)``,
  ``to_tuple``, ``batched(64)``, in a ``WebLoader`` with 2 workers.
* ``nostall``: ``nostall.Loader(shards, batch_size=64, threads=2, pipeline=transform,
  fields={"image": "jpg;png;jpeg;webp", "text": nostall.Field("txt",
  tokenizer=nostall.Tokenizer(tokenizer, 77))})``: the same transform object, the captions
  tokenized in the engine.

The same from Parquet (``--format parquet``): the same photographs and captions as one
Parquet file written with ``datasets`` (``Dataset.from_dict`` with an ``Image`` feature,
the bytes embedded as ``push_to_hub`` embeds them, a ``caption`` string column, row groups
of 100 rows):

* ``datasets``: ``load_dataset("parquet", ...)`` with ``set_transform`` applying the same
  transform to each image (``datasets`` decodes it to PIL) and the same tokenizer to the
  captions, in a ``DataLoader(batch_size=64, shuffle=True, num_workers=2)``: what the
  ``datasets`` documentation shows.
* ``nostall-parquet``: ``nostall.Loader(file, pipeline=transform, fields={"image":
  "image", "text": nostall.Field("caption", tokenizer=...)})``.

Each loader runs in a fresh child process (this script again); the two alternate,
``--rounds`` times, and the figure is the ratio of the medians. A run: 8 batches of
warm-up, then ``--batches`` batches timed.

Usage: ``python bench/clip.py [--make] [--rounds 3] [--json out.json]`` in a venv with
nostall, torch, torchvision, open_clip_torch, webdataset, datasets and psutil
(``.venv-test`` plus ``pip install webdataset datasets``).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import statistics
import sys
import tarfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import run_child  # noqa: E402

BATCH = 64
THREADS = 2
PER_SHARD = 250
WARM_UP = 8


def captions(count: int) -> list[str]:
    """`count` English sentences of 20 to 200 characters (cycled if there are fewer)."""
    from pydoc_data.topics import topics

    text = " ".join(topics[k] for k in sorted(topics))
    found = [" ".join(s.split()) for s in re.split(r"(?<=[.!?])\s+", text)]
    found = [s for s in found if 20 <= len(s) <= 200]
    return [found[i % len(found)] for i in range(count)]


def make_shards(photos: str, out: str) -> None:
    """Writes the shards of `photos` (an ImageFolder) into `out`, unless already there."""
    from PIL import Image

    files = sorted(os.path.join(d, f) for d, _, names in os.walk(photos) for f in names if f.endswith(".jpg"))
    if not files:
        raise SystemExit(f"no photographs in {photos}: run bench/make_photos.py first")
    shards = (len(files) + PER_SHARD - 1) // PER_SHARD
    done = os.path.join(out, ".complete")
    if os.path.exists(done) and open(done).read() == f"{len(files)}\n":
        return
    os.makedirs(out, exist_ok=True)
    texts = captions(len(files))
    for s in range(shards):
        with tarfile.open(os.path.join(out, f"shard-{s:06d}.tar"), "w") as tar:
            for i in range(s * PER_SHARD, min((s + 1) * PER_SHARD, len(files))):
                key = f"{i:09d}"
                data = open(files[i], "rb").read()
                with Image.open(io.BytesIO(data)) as image:
                    width, height = image.size
                meta = {"key": key, "caption": texts[i], "width": width, "height": height,
                        "sha256": hashlib.sha256(data).hexdigest()}
                for ext, payload in (("jpg", data), ("txt", texts[i].encode()), ("json", json.dumps(meta).encode())):
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size = len(payload)
                    tar.addfile(info, io.BytesIO(payload))
    with open(done, "w") as f:
        f.write(f"{len(files)}\n")


def make_parquet(shards: str, out: str) -> None:
    """The shards' photographs and captions as one Parquet file written with `datasets`."""
    if os.path.exists(out):
        return
    from datasets import Dataset, Image
    from datasets.table import embed_table_storage

    images, texts = [], []
    for name in sorted(f for f in os.listdir(shards) if f.endswith(".tar")):
        with tarfile.open(os.path.join(shards, name)) as tar:
            members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
        for key in sorted({n.split(".")[0] for n in members}):
            images.append({"bytes": members[f"{key}.jpg"], "path": f"{key}.jpg"})
            texts.append(members[f"{key}.txt"].decode())
    ds = Dataset.from_dict({"image": images, "caption": texts}).cast_column("image", Image())
    ds = ds.with_format("arrow").map(embed_table_storage, batched=True).with_format(None)
    ds.to_parquet(out + ".part", batch_size=100)
    os.rename(out + ".part", out)


def open_clip_parts() -> tuple[Any, Any]:
    import open_clip

    _, transform, _ = open_clip.create_model_and_transforms("ViT-B-32", pretrained=None)
    return transform, open_clip.get_tokenizer("ViT-B-32")


def webdataset_loader(shards: str) -> Any:
    """OpenCLIP's training pipeline (training/data.py, get_wds_dataset, not resampled)."""
    import torch
    import webdataset as wds

    torch.set_num_threads(1)
    transform, tokenizer = open_clip_parts()
    urls = sorted(os.path.join(shards, f) for f in os.listdir(shards) if f.endswith(".tar"))
    pipeline = wds.DataPipeline(
        wds.SimpleShardList(urls),
        wds.shuffle(bufsize=2000, initial=500),
        wds.split_by_worker,
        wds.tarfile_to_samples(handler=wds.warn_and_continue),
        wds.shuffle(bufsize=5000, initial=1000),
        wds.decode("pilrgb", handler=wds.warn_and_continue),
        wds.rename(image="jpg;png;jpeg;webp", text="txt"),
        wds.map_dict(image=transform, text=lambda text: tokenizer(text)[0]),
        wds.to_tuple("image", "text"),
        wds.batched(BATCH, partial=False),
    )
    return wds.WebLoader(pipeline, batch_size=None, shuffle=False, num_workers=THREADS, persistent_workers=True)


def datasets_loader(parquet: str) -> Any:
    import torch
    from datasets import load_dataset
    from torch.utils.data import DataLoader

    torch.set_num_threads(1)
    transform, tokenizer = open_clip_parts()

    def prepare(batch: dict) -> dict:
        return {"image": [transform(image) for image in batch["image"]], "text": tokenizer(batch["caption"])}

    dataset = load_dataset("parquet", data_files=parquet, split="train")
    dataset.set_transform(prepare)
    return DataLoader(dataset, batch_size=BATCH, shuffle=True, num_workers=THREADS, persistent_workers=True,
                      drop_last=True)


def nostall_parquet_loader(parquet: str) -> Any:
    import nostall

    transform, tokenizer = open_clip_parts()
    text = nostall.Field("caption", tokenizer=nostall.Tokenizer(tokenizer, 77))
    return nostall.Loader(parquet, batch_size=BATCH, threads=THREADS, pipeline=transform, drop_last=True,
                          fields={"image": "image", "text": text})


def nostall_loader(shards: str) -> Any:
    import nostall

    transform, tokenizer = open_clip_parts()
    text = nostall.Field("txt", tokenizer=nostall.Tokenizer(tokenizer, 77))
    return nostall.Loader(shards, batch_size=BATCH, threads=THREADS, pipeline=transform, drop_last=True,
                          fields={"image": "jpg;png;jpeg;webp", "text": text})


def timed(loader: Any, batches: int, which: str) -> dict:
    """Samples a second over `batches` batches after `WARM_UP`, epochs run on as needed."""
    seen, n, started = 0, 0, 0.0
    while seen < WARM_UP + batches:
        for batch in loader:
            if which.startswith("nostall"):
                images, (texts, _) = batch["image"], batch["text"]
            elif which == "datasets":
                images, texts = batch["image"], batch["text"]
            else:
                images, texts = batch
            assert tuple(images.shape[1:]) == (3, 224, 224) and tuple(texts.shape) == (BATCH, 77)
            seen += 1
            if seen == WARM_UP:
                started = time.perf_counter()
            elif seen > WARM_UP:
                n += len(texts)
            if seen == WARM_UP + batches:
                break
    return {"images": n, "seconds": time.perf_counter() - started}


LOADERS = {"nostall": nostall_loader, "webdataset": webdataset_loader,
           "nostall-parquet": nostall_parquet_loader, "datasets": datasets_loader}


def parity(count: int) -> dict:
    """Token ids of every caption of the set: nostall's against the `tokenizers` package's
    (the same tokenizer.json) and OpenCLIP's own tokenizer."""
    import open_clip
    import tokenizers
    import torch

    import nostall
    from nostall._tokenizer import tokenizer_json

    texts = captions(count)
    simple = open_clip.get_tokenizer("ViT-B-32")
    ours, _ = nostall.Tokenizer(simple, 77)(texts)
    hf = tokenizers.Tokenizer.from_str(tokenizer_json(simple))
    hf.enable_truncation(77)
    hf.enable_padding(length=77, pad_id=0)
    theirs = torch.tensor([e.ids for e in hf.encode_batch(texts)])
    clip = simple(texts)
    return {"captions": len(texts),
            "differ_from_tokenizers": int((ours != theirs).any(dim=1).sum()),
            "differ_from_open_clip": int((ours != clip).any(dim=1).sum())}


def run(which: str, data: str, batches: int) -> dict:
    return timed(LOADERS[which](data), batches, which)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--photos", default="bench/data/photos")
    parser.add_argument("--shards", default="bench/data/clip-shards")
    parser.add_argument("--make", action="store_true", help="write the shards first (kept if complete)")
    parser.add_argument("--format", choices=["webdataset", "parquet"], default="webdataset")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=20, help="batches timed a run")
    parser.add_argument("--json")
    parser.add_argument("--child")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run(args.child, args.shards, args.batches)))
        return
    if args.make:
        make_shards(args.photos, args.shards)
    extra: dict[str, Any] = {}
    if args.format == "webdataset":
        with open(os.path.join(args.shards, ".complete")) as f:
            same = parity(int(f.read()))
        print(f"token ids of every caption: {same}", flush=True)
        extra["token_parity"] = same
    data, theirs, ours = args.shards, "webdataset", "nostall"
    if args.format == "parquet":
        data, theirs, ours = os.path.join(args.shards, "..", "clip.parquet"), "datasets", "nostall-parquet"
        make_parquet(args.shards, data)
    runs: dict[str, list[dict]] = {theirs: [], ours: []}
    for r in range(args.rounds):
        order = (theirs, ours) if r % 2 == 0 else (ours, theirs)
        for which in order:
            result = run_child([__file__, "--shards", data, "--child", which, "--batches",
                                str(args.batches)], which)
            runs[which].append(result)
            print(f"round {r + 1}: {which} {result['images_per_s']:.0f} samples/s, "
                  f"peak RSS {result['peak_rss_mb']:.0f} MB", flush=True)
    medians = {k: statistics.median(x["images_per_s"] for x in v) for k, v in runs.items()}
    rss = {k: statistics.median(x["peak_rss_mb"] for x in v) for k, v in runs.items()}
    ratio = medians[ours] / medians[theirs]
    print(f"clip ({args.format}): {ours} {medians[ours]:.0f} samples/s, {theirs} {medians[theirs]:.0f}: "
          f"{ratio:.2f}x; peak RSS {rss[ours]:.0f} vs {rss[theirs]:.0f} MB")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"data": os.path.abspath(data), "batch": BATCH, "threads": THREADS,
                       "batches_timed": args.batches, "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d"),
                       "runs": runs, "median_samples_per_s": medians, "median_peak_rss_mb": rss,
                       "ratio": ratio, **extra}, f, indent=1)


if __name__ == "__main__":
    main()
