"""Today's training recipes: nostall against the loaders their authors use, side by side.

timm's DeiT/ConvNeXt recipe, `create_transform(224, is_training=True,
auto_augment="rand-m9-mstd0.5-inc1", re_prob=0.25, interpolation="bicubic")` with MixUp 0.8 /
CutMix 1.0 and label smoothing 0.1, batch 64, float32:

* ``timm``: `DataLoader(ImageFolder(data, transform), batch_size=64, shuffle=True,
  num_workers=2, persistent_workers=True, drop_last=True)` with timm's `Mixup` applied to
  each batch in the training process, as timm's train.py does (without `--prefetcher`).
* ``nostall``: `nostall.Loader(data, batch_size=64, threads=2, pipeline=transform,
  mix=nostall.Mixup(...))`: the same `create_transform(...)` object, taken as it is
  (translated to nostall's operators: `TimmRandAugment`, `TimmRandomErasing`), mixed in the
  engine.

(With Pillow 13 timm's RandAugment crashes a worker now and then: it posterizes to 0 bits,
which Pillow 13 refuses; the timm run is given Pillow 12's behaviour, black, as nostall's.)

``timm-nomix`` is the same transform without MixUp/CutMix, as fine-tuning recipes run it:
timm's in the DataLoader against nostall's ``Loader(pipeline=transform)``.

DINO's multi-crop (2 global crops of 224, scale 0.4–1, and 8 local crops of 96, scale
0.05–0.4; flip, colour jitter 0.8, grayscale 0.2, Gaussian blur 1.0 / 0.1 / 0.5,
solarisation 0.2 on the second global crop), batch 64:

* ``dino``: DINO's own `DataAugmentationDINO` (its code, PIL transforms and PIL's blur and
  solarisation) over an `ImageFolder` in a DataLoader with 2 workers.
* ``nostall-dino``: the same views as ten nostall pipelines (`pipeline=[global1, global2] +
  [local] * 8`); the blur is torchvision's `GaussianBlur(9, sigma=(0.1, 2.0))`, as DINOv2
  writes it (PIL's blur takes a radius and sizes its own kernel).

torchvision's reference recipe (ResNet-50 "V2": `RandomResizedCrop(176)`, flip,
`TrivialAugmentWide`, `RandomErasing(0.1)`, MixUp 0.2 / CutMix 1.0), the same way with v2
transforms and v2's `MixUp`/`CutMix` in a `RandomChoice` on the batch:

* ``torchvision``: the v2 `Compose` on PIL images in a DataLoader with 2 workers.
* ``nostall-tv``: the same `Compose` given to `nostall.Loader`.

Each loader runs in a fresh child process (this script again); the loaders of a recipe
alternate, ``--rounds`` times, and the figure is the ratio of the medians. A run: 8 batches
of warm-up, then ``--batches`` batches timed (epochs run on as needed).

Usage: ``python bench/recipes.py [bench/data/photos] [--rounds 3] [--json out.json]``, in a
venv with nostall, torch, torchvision, timm and psutil (``make python-test`` makes one:
``.venv-test``). The photographs: ``python bench/make_photos.py --out bench/data/photos``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import run_child  # noqa: E402

BATCH = 64
THREADS = 2
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def classes(data: str) -> int:
    return sum(1 for entry in os.scandir(data) if entry.is_dir())


def timm_transform() -> Any:
    from timm.data import create_transform

    return create_transform(224, is_training=True, auto_augment="rand-m9-mstd0.5-inc1", re_prob=0.25,
                            interpolation="bicubic")


def pillow_posterize_to_zero_bits() -> None:
    """Pillow 13 refuses to posterize to 0 bits, which timm's RandAugment asks for now and
    then (`PosterizeIncreasing` near magnitude 10 with mstd 0.5): the worker dies. Pillow 12
    and earlier gave black, as nostall's `TimmRandAugment` does; this gives timm the same."""
    from PIL import Image, ImageOps

    posterize = ImageOps.posterize

    def posterize_any(image: Any, bits: int) -> Any:
        return Image.new(image.mode, image.size) if bits == 0 else posterize(image, bits)

    ImageOps.posterize = posterize_any


def timm_mixup(num_classes: int) -> dict:
    return dict(mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=0.1, num_classes=num_classes)


def torchvision_transform() -> Any:
    import torch
    from torchvision.transforms import v2

    return v2.Compose([
        v2.RandomResizedCrop(176), v2.RandomHorizontalFlip(), v2.TrivialAugmentWide(), v2.PILToTensor(),
        v2.ToDtype(torch.float, scale=True), v2.Normalize(MEAN, STD), v2.RandomErasing(0.1),
    ])


WARM_UP = 8


def timed(loader: Any, batches: int, mix: Any = None) -> dict:
    """Images a second over `batches` batches after `WARM_UP`, epochs run on as needed."""
    seen, n, started = 0, 0, 0.0
    while seen < WARM_UP + batches:
        for images, labels in loader:
            if mix is not None:
                images, labels = mix(images, labels)
            seen += 1
            if seen == WARM_UP:
                started = time.perf_counter()
            elif seen > WARM_UP:
                n += len(labels)
            if seen == WARM_UP + batches:
                break
    return {"images": n, "seconds": time.perf_counter() - started}


class DataAugmentationDINO:
    """``timm-nomix`` is the same transform without MixUp/CutMix, as fine-tuning recipes run it:
timm's in the DataLoader against nostall's ``Loader(pipeline=transform)``.

DINO's multi-crop (facebookresearch/dino, main_dino.py, with utils.GaussianBlur and
    utils.Solarization), as it is written there."""

    def __init__(self, global_crops_scale=(0.4, 1.0), local_crops_scale=(0.05, 0.4), local_crops_number=8):
        from PIL import Image
        from torchvision import transforms

        flip_and_color_jitter = transforms.Compose([
            transforms.RandomHorizontalFlip(p=0.5),
            transforms.RandomApply([transforms.ColorJitter(brightness=0.4, contrast=0.4, saturation=0.2, hue=0.1)],
                                   p=0.8),
            transforms.RandomGrayscale(p=0.2),
        ])
        normalize = transforms.Compose([transforms.ToTensor(), transforms.Normalize(MEAN, STD)])
        self.global_transfo1 = transforms.Compose([
            transforms.RandomResizedCrop(224, scale=global_crops_scale, interpolation=Image.BICUBIC),
            flip_and_color_jitter, PilBlur(1.0), normalize,
        ])
        self.global_transfo2 = transforms.Compose([
            transforms.RandomResizedCrop(224, scale=global_crops_scale, interpolation=Image.BICUBIC),
            flip_and_color_jitter, PilBlur(0.1), PilSolarization(0.2), normalize,
        ])
        self.local_crops_number = local_crops_number
        self.local_transfo = transforms.Compose([
            transforms.RandomResizedCrop(96, scale=local_crops_scale, interpolation=Image.BICUBIC),
            flip_and_color_jitter, PilBlur(p=0.5), normalize,
        ])

    def __call__(self, image):
        crops = [self.global_transfo1(image), self.global_transfo2(image)]
        crops += [self.local_transfo(image) for _ in range(self.local_crops_number)]
        return crops


class PilBlur:
    """DINO's utils.GaussianBlur: PIL's blur with a radius drawn from [0.1, 2], with p."""

    def __init__(self, p=0.5, radius_min=0.1, radius_max=2.0):
        self.prob, self.radius_min, self.radius_max = p, radius_min, radius_max

    def __call__(self, img):
        import random

        from PIL import ImageFilter

        if random.random() > self.prob:
            return img
        return img.filter(ImageFilter.GaussianBlur(radius=random.uniform(self.radius_min, self.radius_max)))


class PilSolarization:
    """DINO's utils.Solarization: PIL's solarize (threshold 128), with p."""

    def __init__(self, p):
        self.p = p

    def __call__(self, img):
        import random

        from PIL import ImageOps

        return ImageOps.solarize(img) if random.random() < self.p else img


def nostall_dino() -> list:
    from nostall import ops

    def view(size, scale, blur, solarize=0.0):
        return [
            ops.RandomResizedCrop(size, scale=scale, interpolation="bicubic"),
            ops.RandomHorizontalFlip(),
            ops.RandomApply([ops.ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8),
            ops.RandomGrayscale(p=0.2),
            ops.RandomApply([ops.GaussianBlur(9, sigma=(0.1, 2.0))], p=blur),
            ops.RandomSolarize(128, p=solarize),
            ops.Normalize(mean=MEAN, std=STD),
        ]

    return [view(224, (0.4, 1.0), 1.0), view(224, (0.4, 1.0), 0.1, 0.2)] + [view(96, (0.05, 0.4), 0.5)] * 8


def data_loader(data: str, transform: Any) -> Any:
    import torch
    import torchvision
    from torch.utils.data import DataLoader

    torch.set_num_threads(1)
    dataset = torchvision.datasets.ImageFolder(data, transform=transform)
    return DataLoader(dataset, batch_size=BATCH, shuffle=True, num_workers=THREADS, persistent_workers=True,
                      drop_last=True)


def run(which: str, data: str, batches: int) -> dict:
    import torch

    import nostall

    n = classes(data)
    if which == "timm":
        from timm.data import Mixup

        pillow_posterize_to_zero_bits()
        return timed(data_loader(data, timm_transform()), batches, Mixup(**timm_mixup(n)))
    if which == "nostall":
        loader = nostall.Loader(data, batch_size=BATCH, threads=THREADS, pipeline=timm_transform(),
                                mix=nostall.Mixup(**timm_mixup(n)))
        return timed(loader, batches)
    if which == "timm-nomix":
        pillow_posterize_to_zero_bits()
        return timed(data_loader(data, timm_transform()), batches)
    if which == "nostall-nomix":
        return timed(nostall.Loader(data, batch_size=BATCH, threads=THREADS, pipeline=timm_transform()), batches)
    if which == "torchvision":
        from torchvision.transforms import v2

        mix = v2.RandomChoice([v2.MixUp(alpha=0.2, num_classes=n), v2.CutMix(alpha=1.0, num_classes=n)])
        return timed(data_loader(data, torchvision_transform()), batches, mix)
    if which == "nostall-tv":
        # torchvision's recipe switches MixUp 0.2 / CutMix 1.0 half and half, no smoothing.
        loader = nostall.Loader(data, batch_size=BATCH, threads=THREADS, pipeline=torchvision_transform(),
                                mix=nostall.Mixup(mixup_alpha=0.2, cutmix_alpha=1.0, label_smoothing=0.0,
                                                  num_classes=n))
        images, _ = next(iter(loader))
        assert isinstance(images, torch.Tensor) and images.shape[1:] == (3, 176, 176)
        return timed(loader, batches)
    if which == "dino":
        return timed(data_loader(data, DataAugmentationDINO()), batches)
    if which == "nostall-dino":
        loader = nostall.Loader(data, batch_size=BATCH, threads=THREADS, pipeline=nostall_dino())
        views, _ = next(iter(loader))
        assert [tuple(v.shape[1:]) for v in views] == [(3, 224, 224)] * 2 + [(3, 96, 96)] * 8
        return timed(loader, batches)
    raise SystemExit(f"unknown loader {which}")


RECIPES = {"timm": ("timm", "nostall"), "timm-nomix": ("timm-nomix", "nostall-nomix"),
           "dino": ("dino", "nostall-dino"),
           "torchvision": ("torchvision", "nostall-tv")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", nargs="?", default="bench/data/photos")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--recipes", default="timm,dino,torchvision")
    parser.add_argument("--batches", type=int, default=20, help="batches timed a run")
    parser.add_argument("--json")
    parser.add_argument("--child")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run(args.child, args.data, args.batches)))
        return
    results: dict[str, Any] = {"data": os.path.abspath(args.data), "batch": BATCH, "threads": THREADS,
                               "batches_timed": args.batches,
                               "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d"), "recipes": {}}
    for recipe in args.recipes.split(","):
        theirs, ours = RECIPES[recipe]
        runs: dict[str, list[dict]] = {theirs: [], ours: []}
        for r in range(args.rounds):
            order = (theirs, ours) if r % 2 == 0 else (ours, theirs)
            for which in order:
                result = run_child([__file__, args.data, "--child", which, "--batches", str(args.batches)], which)
                runs[which].append(result)
                print(f"{recipe} round {r + 1}: {which} {result['images_per_s']:.0f} images/s, "
                      f"peak RSS {result['peak_rss_mb']:.0f} MB", flush=True)
        medians = {k: statistics.median(x["images_per_s"] for x in v) for k, v in runs.items()}
        ratio = medians[ours] / medians[theirs]
        print(f"{recipe}: {ours} {medians[ours]:.0f} images/s, {theirs} {medians[theirs]:.0f}: {ratio:.2f}x")
        results["recipes"][recipe] = {"runs": runs, "median_images_per_s": medians, "ratio": ratio}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
