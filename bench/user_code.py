"""The user's own Python code: ``nostall.DataLoader`` against ``torch.utils.data.DataLoader``
on the same torchvision ``ImageFolder`` of real photographs, side by side.

Two recipes (batch 64, 224 px, ``num_workers`` the same for both):

* ``numpy``: RandomResizedCrop(224), RandomHorizontalFlip(), then ``Jitter`` (a class of
  the user's: a few NumPy lines on the PIL image, a random gain per channel drawn from
  NumPy's global generator), ToTensor(), Normalize(ImageNet). nostall cannot translate
  ``Jitter``: it runs the dataset's ``__getitem__`` in worker processes under the GIL
  (threads on a free-threaded interpreter).
* ``v2user``: torchvision.transforms.v2 on tensors (ToImage, RandomResizedCrop(224),
  RandomHorizontalFlip) with ``Gamma`` (a class of the user's: a random gamma in a few torch
  lines on the uint8 tensor, drawn from torch's global generator), ToDtype(float32, scale),
  Normalize: user code in worker processes, as ``numpy``.
* ``v2``: torchvision.transforms.v2 only (RandomResizedCrop, RandomHorizontalFlip,
  ColorJitter(0.4, 0.4, 0.4), ToImage, ToDtype(float32, scale), Normalize), which nostall
  translates: its own readers and operators, no Python per sample.
* ``hf``: the same photographs as a Hugging Face ``datasets.Dataset`` (each image's bytes
  in its Arrow table, as a Hub dataset's Parquet holds them). The DataLoader runs it as
  Hugging Face's image-classification guide does (``with_transform`` applying the ``v2``
  recipe to each batch's images); nostall reads its Arrow buffers in place with the ``v2``
  recipe translated (``nostall.Loader(ds, pipeline=...)``).
* ``wds``: the same photographs in WebDataset shards (``jpg`` and ``cls`` members, written
  once to ``<data>.shards``), read by a webdataset pipeline (``decode("pil")``,
  ``to_tuple("jpg", "cls")``, ``map_tuple`` of the ``v2`` recipe) through the DataLoader,
  and the same pipeline object through ``nostall.DataLoader``, which translates it.
* ``pyop``: nostall's own pipeline (RandomResizedCrop, RandomHorizontalFlip, Normalize)
  against the same with one ``ops.Python`` before Normalize (a gain per channel in a few
  NumPy lines on the 8-bit pixels, drawn from its generator), in the loader's threads or
  (``--ops-workers processes``) in worker processes; both nostall, the first in the
  baseline's place.

Each loader runs in a fresh child process (a re-invocation of this script); this process
samples the child's process tree (the child and its workers) for the peak of the summed
PSS (shared pages split between the processes that map them: ``bench/baselines.py``'s
``tree_memory``), and reads the peak the kernel charged to the tree's memory cgroup
(``ChargedMemory``, as root: it also counts the shared memory no process maps at an
instant, such as the DataLoader's batches queued between its workers and the main
process, which PSS misses). ``images_per_s`` is the rate over the epochs after the first (warm-up).
Rounds alternate the loaders, so that both see the same machine.

Usage (the test venv has torch and torchvision):
    .venv-test/bin/python bench/user_code.py bench/data/photos --recipes numpy,v2 \\
        --workers 2 --epochs 3 --rounds 2 --json bench/out/user_code.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from baselines import ChargedMemory, tree_memory  # noqa: E402

RESULT = "RESULT "
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


class Jitter:
    """A random gain per channel, in NumPy, on the PIL image: the user's own transform."""

    def __call__(self, image):
        import numpy as np
        from PIL import Image

        pixels = np.asarray(image, dtype=np.float32)
        gain = np.random.uniform(0.8, 1.2, size=3).astype(np.float32)
        return Image.fromarray(np.clip(pixels * gain, 0, 255).astype(np.uint8))


class Gamma:
    """A random gamma on the uint8 image tensor, in torch: the user's own v2-style transform."""

    def __call__(self, image):
        import torch

        gamma = 0.7 + 0.6 * torch.rand(()).item()
        return ((image.float() / 255).pow(gamma) * 255).round().to(torch.uint8)


def transform(recipe: str):
    if recipe == "numpy":
        from torchvision import transforms as T

        return T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), Jitter(), T.ToTensor(),
                          T.Normalize(MEAN, STD)])
    import torch
    from torchvision.transforms import v2

    if recipe == "v2user":
        return v2.Compose([v2.ToImage(), v2.RandomResizedCrop(224), v2.RandomHorizontalFlip(), Gamma(),
                           v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])
    return v2.Compose([v2.RandomResizedCrop(224), v2.RandomHorizontalFlip(), v2.ColorJitter(0.4, 0.4, 0.4),
                       v2.ToImage(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])


def gain(pixels, generator):
    """A random gain per channel on uint8[3, H, W] pixels: the user's few NumPy lines."""
    import numpy as np
    import torch

    g = (0.8 + 0.4 * torch.rand((3, 1, 1), generator=generator)).numpy()
    return np.clip(pixels.numpy() * g, 0, 255).astype(np.uint8)


def hf_dataset(root: str):
    """The ImageFolder at `root` as a ``datasets.Dataset`` holding each image's bytes."""
    import torchvision
    from datasets import ClassLabel, Dataset, Features, Image

    folder = torchvision.datasets.ImageFolder(root)
    images = []
    for path, _ in folder.samples:
        with open(path, "rb") as f:
            images.append({"bytes": f.read(), "path": None})
    features = Features({"image": Image(), "label": ClassLabel(names=folder.classes)})
    return Dataset.from_dict({"image": images, "label": [c for _, c in folder.samples]}, features=features)


def wds_shards(root: str) -> str:
    """The ImageFolder at `root` in WebDataset shards of 500 samples (written once), as
    webdataset's brace pattern."""
    import io
    import tarfile

    import torchvision

    samples = torchvision.datasets.ImageFolder(root).samples
    out = root.rstrip("/") + ".shards"
    count = (len(samples) + 499) // 500
    if not os.path.isdir(out):
        os.makedirs(out + ".part")
        for s in range(count):
            with tarfile.open(f"{out}.part/shard-{s:06d}.tar", "w") as tar:
                for i, (path, label) in enumerate(samples[s * 500:(s + 1) * 500]):
                    with open(path, "rb") as f:
                        members = (("jpg", f.read()), ("cls", str(label).encode()))
                    for ext, data in members:
                        info = tarfile.TarInfo(f"{s:02d}{i:05d}.{ext}")
                        info.size = len(data)
                        tar.addfile(info, io.BytesIO(data))
        os.rename(out + ".part", out)
    return f"{out}/shard-{{000000..{count - 1:06d}}}.tar"


def special_loader(args):
    """The loader of the ``hf``, ``wds`` and ``pyop`` recipes, and its path."""
    import torch

    import nostall
    from nostall import ops

    if args.recipe == "pyop":
        native = [ops.RandomResizedCrop(224), ops.RandomHorizontalFlip()]
        extra = [ops.Python(gain)] if args.child == "nostall" else []
        pipeline = native + extra + [ops.Normalize(MEAN, STD)]
        loader = nostall.Loader(args.data, batch_size=64, pipeline=pipeline, threads=args.workers, seed=0,
                                **({"workers": args.ops_workers} if extra else {}))
        return loader, {"path": f"native + ops.Python ({args.ops_workers})" if extra else "native"}
    if args.recipe == "wds":
        import webdataset as wds

        pipeline = (wds.WebDataset(wds_shards(args.data), shardshuffle=True).shuffle(1000).decode("pil")
                    .to_tuple("jpg", "cls").map_tuple(transform("v2"), None))
        if args.child == "torch":
            loader = torch.utils.data.DataLoader(pipeline, batch_size=64, num_workers=args.workers,
                                                 persistent_workers=True)
            return loader, {"path": "DataLoader over a webdataset pipeline"}
        loader = nostall.DataLoader(pipeline, batch_size=64, num_workers=args.workers, seed=0)
        return loader, loader.metrics["path"]
    dataset = hf_dataset(args.data)
    tf = transform("v2")
    if args.child == "torch":
        def apply(batch):
            return {"pixel_values": [tf(image.convert("RGB")) for image in batch["image"]],
                    "label": batch["label"]}

        def collate(rows):
            return (torch.stack([r["pixel_values"] for r in rows]), torch.tensor([r["label"] for r in rows]))

        loader = torch.utils.data.DataLoader(dataset.with_transform(apply), batch_size=64, shuffle=True,
                                             num_workers=args.workers, persistent_workers=True,
                                             collate_fn=collate)
        return loader, {"path": "DataLoader over with_transform"}
    loader = nostall.Loader(dataset, batch_size=64, pipeline=tf, threads=args.workers, seed=0)
    return loader, {"path": "datasets.Dataset read natively"}


def child(args) -> None:
    import torch
    import torchvision

    if args.recipe in ("hf", "wds", "pyop"):
        loader, path = special_loader(args)
    elif args.child == "torch":
        dataset = torchvision.datasets.ImageFolder(args.data, transform=transform(args.recipe))
        loader = torch.utils.data.DataLoader(dataset, batch_size=64, shuffle=True,
                                             num_workers=args.workers, persistent_workers=True)
        path = {"path": "DataLoader"}
    else:
        import nostall

        dataset = torchvision.datasets.ImageFolder(args.data, transform=transform(args.recipe))
        loader = nostall.DataLoader(dataset, batch_size=64, shuffle=True, num_workers=args.workers, seed=0)
        path = loader.metrics["path"]
    rates = []
    for epoch in range(args.epochs):
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(epoch)
        start, n = time.monotonic(), 0
        for images, labels in loader:
            assert images.shape[1:] == (3, 224, 224) and images.dtype == torch.float32
            n += len(labels)
        rates.append(n / (time.monotonic() - start))
    print(RESULT + json.dumps({"rates": rates, "path": path}), flush=True)


def measure(loader: str, recipe: str, args) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), args.data, "--child", loader, "--recipe", recipe,
           "--workers", str(args.workers), "--epochs", str(args.epochs), "--ops-workers", args.ops_workers]
    charged = ChargedMemory("nostall-bench")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, preexec_fn=charged.enter)
    peak_pss, last = 0.0, 0.0
    while proc.poll() is None:
        if time.monotonic() - last >= 0.5:
            peak_pss = max(peak_pss, tree_memory(proc.pid, pss=True)[1])
            last = time.monotonic()
        time.sleep(0.05)
    out = proc.stdout.read() if proc.stdout else ""
    peak_charged = charged.peak_mb()
    charged.close()
    if proc.returncode != 0:
        raise SystemExit(f"{loader} {recipe}: the child failed ({proc.returncode})")
    res = json.loads(next(line for line in out.splitlines() if line.startswith(RESULT))[len(RESULT):])
    steady = res["rates"][1:]
    return {"loader": loader, "recipe": recipe, "images_per_s": round(sum(steady) / len(steady), 1),
            "epoch_rates": [round(r, 1) for r in res["rates"]], "peak_pss_mb": round(peak_pss, 1),
            "peak_charged_mb": None if peak_charged is None else round(peak_charged, 1),
            "path": res["path"], "workers": args.workers}


def charged_ratio(runs: dict[str, list[dict]]) -> float | None:
    """nostall's median peak charged memory over the DataLoader's (None without cgroups)."""
    import statistics

    peaks = {k: [x["peak_charged_mb"] for x in v] for k, v in runs.items()}
    if any(p is None for v in peaks.values() for p in v):
        return None
    return round(statistics.median(peaks["nostall"]) / statistics.median(peaks["torch"]), 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data")
    ap.add_argument("--recipes", default="numpy,v2")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json")
    ap.add_argument("--child", choices=["torch", "nostall"])
    ap.add_argument("--recipe", default="numpy")
    ap.add_argument("--ops-workers", choices=["threads", "processes"], default="threads",
                    help="where the pyop recipe's ops.Python runs")
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    import platform

    results = []
    for recipe in args.recipes.split(","):
        runs: dict[str, list[dict]] = {"torch": [], "nostall": []}
        for r in range(args.rounds):
            order = ["torch", "nostall"] if r % 2 == 0 else ["nostall", "torch"]
            for loader in order:
                runs[loader].append(measure(loader, recipe, args))
                print(json.dumps(runs[loader][-1]), flush=True)
        best = {k: max(v, key=lambda x: x["images_per_s"]) for k, v in runs.items()}
        summary = {
            "recipe": recipe, "python": platform.python_version(),
            "gil": getattr(sys, "_is_gil_enabled", lambda: True)(),
            "speedup": round(best["nostall"]["images_per_s"] / best["torch"]["images_per_s"], 2),
            "pss_ratio": round(best["nostall"]["peak_pss_mb"] / best["torch"]["peak_pss_mb"], 2),
            "charged_ratio": charged_ratio(runs),
            "rounds": {k: [x["images_per_s"] for x in v] for k, v in runs.items()},
            "pss_mb": {k: [x["peak_pss_mb"] for x in v] for k, v in runs.items()},
            "charged_mb": {k: [x["peak_charged_mb"] for x in v] for k, v in runs.items()},
            "path": best["nostall"]["path"], "baseline": best["torch"]["path"], "workers": args.workers,
            "cpus": os.cpu_count(),
        }
        print(json.dumps(summary), flush=True)
        results.append(summary)
    if args.json:
        with open(args.json, "a") as f:
            for s in results:
                f.write(json.dumps(s) + "\n")


if __name__ == "__main__":
    main()
