"""nostall.Loader against torch DataLoader, side by side in one run, on the same files.

Both loaders produce float32 normalised NCHW torch tensors of the ImageNet training
pipeline (RandomResizedCrop(224), random horizontal flip, Normalize), batch 64:

* ``nostall``: ``nostall.Loader(data, batch_size=64, threads=2)``, tensors through DLPack.
* ``torch``: ``DataLoader(ImageFolder(data, torchvision transforms on PIL images),
  batch_size=64, shuffle=True, num_workers=2, persistent_workers=True)``.

Each runs in a fresh child process (a re-invocation of this script); this process samples
the child's whole process tree (child + DataLoader workers) every 20 ms and reports the
peak of the summed RSS. One warm-up epoch (which also warms the page cache), then
``--epochs`` measured epochs: images/s over those.

Then two figures of nostall alone:

* hand-off: the time of ``next(loader)`` when the batch is already prepared: tiny images
  (16x16), the whole epoch cached (``cache="100%"``) and prefetched (``prefetch`` > the
  epoch's batches), and a pause before timing so that every batch is waiting. What is left
  is the engine's hand-over plus the two DLPack exports to torch tensors.
* time to first batch once the index exists: ``Loader(...)`` plus the first ``next()``,
  with the defaults above (batch 64, 224x224, 2 threads).

Usage: ``python bench/compare.py [bench/data/photos] [--epochs 3] [--json out.json]``,
in a venv with nostall, torch, torchvision and psutil (``make python-test`` makes one:
``.venv-test``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Callable

import psutil

BATCH = 64


def run_nostall(data: str, epochs: int, threads: int) -> dict:
    import torch  # noqa: F401  (imported by both children: tensors are torch tensors)

    import nostall

    loader = nostall.Loader(data, batch_size=BATCH, threads=threads)
    for images, labels in loader:  # warm-up
        pass
    assert images.dtype.is_floating_point and images.shape[1:] == (3, 224, 224)
    n, started = 0, time.perf_counter()
    for _ in range(epochs):
        for images, labels in loader:
            n += len(labels)
    return {"images": n, "seconds": time.perf_counter() - started}


def train_transform() -> Any:
    """torchvision's ImageNet training pipeline on PIL images, as nostall's `train`."""
    from torchvision import transforms

    return transforms.Compose([
        transforms.RandomResizedCrop(224),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
    ])


def run_torch(data: str, epochs: int, threads: int) -> dict:
    import torch
    import torchvision
    from torch.utils.data import DataLoader

    torch.set_num_threads(1)
    dataset = torchvision.datasets.ImageFolder(data, transform=train_transform())
    loader = DataLoader(dataset, batch_size=BATCH, shuffle=True, num_workers=threads,
                        persistent_workers=True)
    for images, labels in loader:  # warm-up
        pass
    assert images.dtype == torch.float32 and images.shape[1:] == (3, 224, 224)
    n, started = 0, time.perf_counter()
    for _ in range(epochs):
        for images, labels in loader:
            n += len(labels)
    return {"images": n, "seconds": time.perf_counter() - started}


def tree_sum(proc: psutil.Process, of: Callable[[psutil.Process], int]) -> int:
    """`of` summed over `proc` and its descendants (those that exit meanwhile count 0)."""
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += of(p)
        except psutil.NoSuchProcess:
            pass
    return total


def tree_rss(proc: psutil.Process) -> int:
    return tree_sum(proc, lambda p: p.memory_info().rss)


def run_child(argv: list[str], name: str) -> dict:
    """Runs this interpreter on `argv` in a child process, sampling its process tree's RSS:
    the JSON of the child's last line of output, with `loader`, `images_per_s` and
    `peak_rss_mb` added."""
    child = subprocess.Popen([sys.executable, *argv], stdout=subprocess.PIPE, text=True)
    proc, peak = psutil.Process(child.pid), 0
    while child.poll() is None:
        try:
            peak = max(peak, tree_rss(proc))
        except psutil.NoSuchProcess:
            break
        time.sleep(0.02)
    out, _ = child.communicate()
    if child.returncode:
        raise SystemExit(f"{name} failed with exit code {child.returncode}")
    result = json.loads(out.strip().splitlines()[-1])
    result.update(loader=name, images_per_s=result["images"] / result["seconds"],
                  peak_rss_mb=peak / 1e6)
    return result


def measure(which: str, data: str, epochs: int, threads: int) -> dict:
    """Runs one loader in a child process, sampling its process tree's RSS."""
    return run_child([__file__, data, "--child", which, "--epochs", str(epochs),
                      "--threads", str(threads)], which)


def handoff(data: str, rounds: int = 5) -> dict:
    """Per-batch cost of next() when every batch of the epoch is already prepared."""
    import nostall

    loader = nostall.Loader(data, batch_size=BATCH, image_size=16, cache="100%",
                            prefetch=10_000, threads=2)
    for _ in loader:  # fills the cache
        pass
    per_batch = []
    for _ in range(rounds):
        it = iter(loader)
        time.sleep(0.5 + len(loader) * 0.01)  # let the loader prepare the whole epoch
        times = []
        while True:
            t = time.perf_counter_ns()
            try:
                images, labels = next(it)
            except StopIteration:
                break
            times.append(time.perf_counter_ns() - t)
            del images, labels
        per_batch.extend(times[:-1])  # the last is a partial batch
    return {"handoff_median_us": statistics.median(per_batch) / 1e3,
            "handoff_mean_us": statistics.fmean(per_batch) / 1e3,
            "handoff_p90_us": sorted(per_batch)[int(0.9 * len(per_batch))] / 1e3,
            "handoff_batches": len(per_batch)}


def first_batch(data: str, rounds: int = 5) -> dict:
    """Loader construction plus the first batch, the index already saved."""
    import nostall

    nostall.Loader(data)  # makes sure the index exists
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        loader = nostall.Loader(data, batch_size=BATCH, threads=2)
        images, labels = next(iter(loader))
        times.append(time.perf_counter() - t)
        del images, labels, loader
    return {"first_batch_median_ms": statistics.median(times) * 1e3,
            "first_batch_max_ms": max(times) * 1e3}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", nargs="?", default=os.path.join(os.path.dirname(__file__), "data", "photos"))
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--threads", type=int, default=2, help="nostall threads and DataLoader workers")
    p.add_argument("--child", choices=["nostall", "torch"], help=argparse.SUPPRESS)
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args()
    if args.child:
        run = run_nostall if args.child == "nostall" else run_torch
        print(json.dumps(run(args.data, args.epochs, args.threads)))
        return
    if not os.path.isdir(args.data):
        raise SystemExit(f"{args.data} is missing: build it with `python bench/make_photos.py`")
    results = {"data": args.data, "batch_size": BATCH, "threads": args.threads,
               "epochs": args.epochs, "cpus": os.cpu_count()}
    runs = [measure(which, args.data, args.epochs, args.threads) for which in ("nostall", "torch")]
    results["runs"] = runs
    nost, torch_ = runs
    results["speedup"] = nost["images_per_s"] / torch_["images_per_s"]
    results["memory_ratio"] = nost["peak_rss_mb"] / torch_["peak_rss_mb"]
    results.update(handoff(args.data))
    results.update(first_batch(args.data))
    for r in runs:
        print(f"{r['loader']:<8} {r['images_per_s']:8.0f} images/s   peak RSS {r['peak_rss_mb']:7.0f} MB")
    print(f"nostall / DataLoader: {results['speedup']:.2f}x images/s, "
          f"{results['memory_ratio']:.2f}x peak RSS")
    print(f"hand-off Rust -> torch tensor, per batch: median {results['handoff_median_us']:.1f} us, "
          f"mean {results['handoff_mean_us']:.1f} us, p90 {results['handoff_p90_us']:.1f} us "
          f"({results['handoff_batches']} batches)")
    print(f"time to first batch (index saved): median {results['first_batch_median_ms']:.1f} ms, "
          f"max {results['first_batch_max_ms']:.1f} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
