"""nostall on a Hugging Face Parquet dataset against `datasets` + torchvision + DataLoader,
and against nostall on the same photographs as a class folder; side by side in one run.

All produce float32 normalised NCHW torch tensors of the ImageNet training pipeline
(RandomResizedCrop(224), random horizontal flip, Normalize), batch 64:

* ``nostall parquet``: ``nostall.Loader("x.parquet", batch_size=64, threads=2)``.
* ``nostall folder``: the same over the class folder the Parquet file was made from.
* ``datasets``: ``load_dataset("parquet", data_files=...)``, torchvision transforms on
  its PIL images (``set_transform``), ``DataLoader(batch_size=64, shuffle=True,
  num_workers=2, persistent_workers=True)``: what the `datasets` documentation shows.

Each runs in a fresh child process; this process samples the child's process tree every
20 ms for the peak of the summed RSS and reads the tree's bytes read (``read_chars``:
every byte read through a system call, from the page cache or the device). One warm-up
epoch, then ``--epochs`` measured epochs: images/s over those, and bytes read per epoch
in the first epoch (the warm-up; for nostall from before the loader is made, which opens
the dataset and starts that epoch) and the measured ones.

With ``--s3``, both nostall loaders read from a local S3-compatible server (s3s-fs, as in
the tests; ``bench/s3_local.py``) serving copies of the file and the folder, over the
S3 client (each photograph of the folder an object); ``datasets`` reads the local file
(it converts the file into its local Arrow cache before the first epoch wherever the
file comes from). The bytes read by the nostall loaders are then the bytes received
through the loopback interface while they run (``/proc/net/dev``: the server's answers
with their HTTP, and the requests; socket reads do not count in ``read_chars``, and the
server's own file reads need not be what it sent).

Usage: ``python bench/parquet.py bench/data/photos.parquet bench/data/photos
[--epochs 3] [--s3] [--json out.json]`` (``bench/make_parquet.py`` writes the Parquet
file; a venv with nostall, torch, torchvision, datasets and psutil).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import psutil

# The child runner, the process-tree sums, torchvision's pipeline and the batch size.
from compare import BATCH, run_child, train_transform, tree_sum
from s3_local import S3Server


OVER_LOOPBACK = "NOSTALL_BENCH_OVER_LOOPBACK"


def read_chars() -> int:
    """Bytes this process tree has read through system calls so far; reading from the
    local S3 server, the bytes received through the loopback interface."""
    if os.environ.get(OVER_LOOPBACK):
        with open("/proc/net/dev") as f:
            for line in f:
                name, _, counters = line.partition(":")
                if name.strip() == "lo":
                    return int(counters.split()[0])
    return tree_sum(psutil.Process(), lambda p: p.io_counters().read_chars)


def link_or_copy(src: str, dst: str) -> None:
    """`src` at `dst` too: a hard link, or a copy across file systems."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def run_nostall(data: str, epochs: int, threads: int) -> dict:
    import torch  # noqa: F401  (tensors are torch tensors)

    import nostall

    # From before the loader is made: it opens the dataset and starts its first epoch.
    before = read_chars()
    loader = nostall.Loader(data, batch_size=BATCH, threads=threads)
    for images, labels in loader:  # warm-up
        pass
    first = read_chars() - before
    assert images.dtype.is_floating_point and images.shape[1:] == (3, 224, 224)
    n, started, before = 0, time.perf_counter(), read_chars()
    for _ in range(epochs):
        for images, labels in loader:
            n += len(labels)
    return {"images": n, "seconds": time.perf_counter() - started,
            "first_epoch_read": first, "epoch_read": (read_chars() - before) / epochs}


def run_datasets(data: str, epochs: int, threads: int) -> dict:
    import torch
    from datasets import load_dataset
    from torch.utils.data import DataLoader

    torch.set_num_threads(1)
    transform = train_transform()

    def prepare(batch: dict) -> dict:
        batch["image"] = [transform(image.convert("RGB")) for image in batch["image"]]
        return batch

    dataset = load_dataset("parquet", data_files=data, split="train")
    dataset.set_transform(prepare)
    loader = DataLoader(dataset, batch_size=BATCH, shuffle=True, num_workers=threads,
                        persistent_workers=True)
    before = read_chars()
    for batch in loader:  # warm-up
        pass
    first = read_chars() - before
    assert batch["image"].dtype == torch.float32 and batch["image"].shape[1:] == (3, 224, 224)
    n, started, before = 0, time.perf_counter(), read_chars()
    for _ in range(epochs):
        for batch in loader:
            n += len(batch["label"])
    return {"images": n, "seconds": time.perf_counter() - started,
            "first_epoch_read": first, "epoch_read": (read_chars() - before) / epochs}


def measure(name: str, which: str, data: str, epochs: int, threads: int) -> dict:
    """Runs one loader in a child process, sampling its process tree's RSS."""
    return run_child([__file__, data, data, "--child", which, "--epochs", str(epochs),
                      "--threads", str(threads)], name)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("parquet")
    p.add_argument("folder")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--threads", type=int, default=2, help="nostall threads and DataLoader workers")
    p.add_argument("--s3", action="store_true",
                   help="nostall reads both from a local S3-compatible server")
    p.add_argument("--child", choices=["nostall", "datasets"], help=argparse.SUPPRESS)
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args()
    if args.child:
        run = run_nostall if args.child == "nostall" else run_datasets
        print(json.dumps(run(args.parquet, args.epochs, args.threads)))
        return
    size = os.path.getsize(args.parquet)
    parquet_at, folder_at, server = args.parquet, args.folder, None
    if args.s3:
        # Linked where it can be, not copied: the server copies what it serves.
        stage = tempfile.mkdtemp(prefix="nostall-parquet-")
        link_or_copy(args.parquet, os.path.join(stage, "data.parquet"))
        shutil.copytree(args.folder, os.path.join(stage, "folder"), copy_function=link_or_copy)
        server = S3Server(stage)
        shutil.rmtree(stage)
        os.environ.update(server.env())
        os.environ[OVER_LOOPBACK] = "1"
        parquet_at, folder_at = f"{S3Server.url}/data.parquet", f"{S3Server.url}/folder"
    try:
        runs = [
            measure("nostall parquet", "nostall", parquet_at, args.epochs, args.threads),
            measure("nostall folder", "nostall", folder_at, args.epochs, args.threads),
        ]
        # `datasets` reads the local file.
        os.environ.pop(OVER_LOOPBACK, None)
        runs.append(measure("datasets", "datasets", args.parquet, args.epochs, args.threads))
    finally:
        if server is not None:
            server.stop()
    results = {"parquet": parquet_at, "parquet_bytes": size, "folder": folder_at,
               "batch_size": BATCH, "threads": args.threads, "epochs": args.epochs,
               "cpus": os.cpu_count(), "runs": runs}
    parquet, folder, hf = runs
    results["parquet_vs_datasets"] = parquet["images_per_s"] / hf["images_per_s"]
    results["parquet_vs_folder"] = parquet["images_per_s"] / folder["images_per_s"]
    for r in runs:
        print(f"{r['loader']:<16} {r['images_per_s']:8.0f} images/s   peak RSS "
              f"{r['peak_rss_mb']:6.0f} MB   read: first epoch {r['first_epoch_read'] / size:5.2f}x, "
              f"then {r['epoch_read'] / size:5.2f}x the file per epoch")
    print(f"nostall parquet / datasets + DataLoader: {results['parquet_vs_datasets']:.2f}x; "
          f"/ nostall folder: {results['parquet_vs_folder']:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
