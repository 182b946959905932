"""Detection recipes: nostall against torchvision's detection references in a DataLoader,
side by side.

The data: the benchmark's photographs (``bench/data/photos``, real photographs from
Debian's packages) as a COCO dataset. ``instances_photos.json`` gives each photograph
1 to 8 boxes (sizes 5-60% of the image's sides) of 1 of 10 categories, drawn from a
fixed seed: any annotations on real photographs serve, since the loaders' geometry is
what is measured. It is written under ``bench/out/detection`` beside a link to the
photographs, as COCO lays a dataset out.

The recipes, batch 32, 2 cores, torchvision's detection reference
``DetectionPresetTrain`` as written, with ``Resize((300, 300))`` after the flip so that a
batch is one tensor (SSD's own transform resizes on the GPU; here both loaders resize),
then ``PILToTensor``, ``ToDtype(float, scale=True)``, ``SanitizeBoundingBoxes()``:

* ``ssdlite``: ``RandomIoUCrop()``, ``RandomHorizontalFlip()``.
* ``ssd`` (SSD300): ``RandomPhotometricDistort()``, ``RandomZoomOut(fill=defaultdict(lambda:
  mean, {Mask: 0}))``, ``RandomIoUCrop()``, ``RandomHorizontalFlip()``.
* ``ssd-targets``: ``ssd``, then SSD300's training targets made from each image's
  boxes, as a training loop of its own would take them from its loader (torchvision's
  SSD makes them in ``forward``): torchvision's ``DefaultBoxGenerator`` boxes (8732),
  ``SSDMatcher(0.5)`` and ``BoxCoder((10, 10, 5, 5))`` in the DataLoader's workers, a
  step at the end of the ``Compose``; nostall's ``Field("coco", kind="boxes",
  anchors="ssd300")`` in the engine.
* ``maskrcnn-lsj``: Mask R-CNN's large-scale jitter with instance masks (the references'
  ``DetectionPresetTrain("lsj")``): ``ScaleJitter((1024, 1024))``, the references'
  ``FixedSizeCrop((1024, 1024), fill=mean)``, ``RandomHorizontalFlip()``; no resize after
  (the output is 1024 x 1024 already). Masks come from each box's polygon (an ellipse of 16
  points inside it): torchvision's wrapper makes them with pycocotools, nostall with its
  own rasteriser; ``max_boxes=8``, the most an image holds. The references' class is not
  in torchvision: ``FixedSizeCrop`` below is it, on v2's functionals.

  - ``torchvision``: ``CocoDetection`` wrapped by ``wrap_dataset_for_transforms_v2``
    (boxes and labels, and masks for ``maskrcnn-lsj``) with the v2 ``Compose``, in a DataLoader with 2 workers, batches
    collated as a stacked tensor and a list of target dicts.
  - ``nostall``: ``nostall.Loader("instances_photos.json", pipeline=Compose, fields={"image":
    "image", "target": Field("coco", kind="boxes")}, threads=2)``: the same ``Compose``,
    translated.

Each loader runs in a fresh child process; they alternate, ``--rounds`` times, and the
figure is the ratio of the medians. A run: 4 batches of warm-up, then ``--batches``
batches timed (epochs run on as needed).

Usage: ``python bench/detection.py [bench/data/photos] [--recipes ssd,ssdlite,ssd-targets] [--rounds 3]
[--batches 20] [--json out.json]`` in a venv with nostall, torch, torchvision and psutil (``.venv-test``),
and pycocotools for ``maskrcnn-lsj``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import run_child  # noqa: E402

BATCH = 32
THREADS = 2
WARM_UP = 4
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "out", "detection")


def write_annotations(photos: str) -> str:
    """The COCO file of ``photos`` (written once; its path)."""
    from PIL import Image

    path = os.path.join(OUT, "annotations", "instances_photos.json")
    if os.path.exists(path):
        return path
    os.makedirs(os.path.dirname(path), exist_ok=True)
    link = os.path.join(OUT, "photos")
    if not os.path.exists(link):
        os.symlink(os.path.abspath(photos), link)
    rng = random.Random(0)
    images, annotations = [], []
    names = sorted(os.path.relpath(os.path.join(d, f), photos)
                   for d, _, files in os.walk(photos) for f in files if f.lower().endswith((".jpg", ".jpeg")))
    for i, name in enumerate(names):
        with Image.open(os.path.join(photos, name)) as image:
            width, height = image.size
        images.append({"id": i + 1, "file_name": name, "width": width, "height": height})
        for _ in range(rng.randint(1, 8)):
            w, h = width * rng.uniform(0.05, 0.6), height * rng.uniform(0.05, 0.6)
            x, y = rng.uniform(0, width - w), rng.uniform(0, height - h)
            bbox = [round(v, 2) for v in (x, y, w, h)]
            annotations.append({"id": len(annotations) + 1, "image_id": i + 1, "category_id": rng.randint(1, 10),
                                "bbox": bbox, "iscrowd": 0, "area": w * h, "segmentation": [ellipse(bbox)]})
    categories = [{"id": c, "name": f"c{c}"} for c in range(1, 11)]
    with open(path, "w") as f:
        json.dump({"images": images, "annotations": annotations, "categories": categories}, f)
    return path


def ellipse(bbox: list[float]) -> list[float]:
    """16 points of the ellipse inside box ``bbox`` (x, y, w, h), as a COCO polygon."""
    x, y, w, h = bbox
    points = []
    for k in range(16):
        angle = 2 * math.pi * k / 16
        points += [round(x + w / 2 * (1 + math.cos(angle)), 2), round(y + h / 2 * (1 + math.sin(angle)), 2)]
    return points


def fixed_size_crop(size: int, fill: tuple) -> Any:
    """The detection references' ``FixedSizeCrop`` (``references/detection/transforms.py``)
    as a v2 transform: a window of at most ``size`` at one drawn place along both axes
    (the image, boxes and masks cropped, boxes clamped, empty ones dropped with their
    labels and masks), then padding at the right and the bottom."""
    import torch
    from torchvision import tv_tensors
    from torchvision.transforms.v2 import functional as F

    def crop(image: Any, target: dict) -> tuple:
        height, width = F.get_size(image)
        new_height, new_width = min(height, size), min(width, size)
        if (new_height, new_width) != (height, width):
            r = torch.rand(1)
            top, left = int(max(height - size, 0) * r), int(max(width - size, 0) * r)
            image = F.crop(image, top, left, new_height, new_width)
            boxes = F.crop(target["boxes"], top, left, new_height, new_width)
            valid = (boxes[:, 0] < boxes[:, 2]) & (boxes[:, 1] < boxes[:, 3])
            target = {**target, "boxes": tv_tensors.wrap(boxes[valid], like=boxes), "labels": target["labels"][valid],
                      "masks": F.crop(target["masks"], top, left, new_height, new_width)[valid]}
        padding = [0, 0, size - new_width, size - new_height]
        if padding[2] or padding[3]:
            image = F.pad(image, padding, fill=list(fill))
            target = {**target, "boxes": F.pad(target["boxes"], padding), "masks": F.pad(target["masks"], padding)}
        return image, target

    return crop


def recipe(name: str) -> Any:
    """torchvision's ``DetectionPresetTrain(name)`` with a resize to 300x300 after its
    flip, PIL images in (the reference's default backend)."""
    from collections import defaultdict

    import torch
    from torchvision import tv_tensors
    from torchvision.transforms import v2

    if name == "maskrcnn-lsj":
        lsj = [v2.ScaleJitter((1024, 1024)), fixed_size_crop(1024, (123, 117, 104)), v2.RandomHorizontalFlip(),
               v2.PILToTensor(), v2.ToDtype(torch.float, scale=True)]
        return v2.Compose([*lsj, v2.SanitizeBoundingBoxes()])
    steps = [v2.RandomIoUCrop(), v2.RandomHorizontalFlip()]
    if name in ("ssd", "ssd-targets"):
        fill = defaultdict(lambda: (123.0, 117.0, 104.0), {tv_tensors.Mask: 0})
        steps = [v2.RandomPhotometricDistort(), v2.RandomZoomOut(fill=fill), *steps]
    steps += [v2.Resize((300, 300)), v2.PILToTensor(), v2.ToDtype(torch.float, scale=True)]
    steps.append(v2.SanitizeBoundingBoxes())
    if name == "ssd-targets":
        steps.append(ssd_targets())
    return v2.Compose(steps)


def ssd_targets() -> Any:
    """A step that adds SSD300's training targets to a sample: each default box's class
    and offsets, as ``SSD.forward`` and ``compute_loss`` make them."""
    import torch
    from torchvision.models.detection._utils import BoxCoder, SSDMatcher
    from torchvision.models.detection.anchor_utils import DefaultBoxGenerator
    from torchvision.models.detection.image_list import ImageList

    generator = DefaultBoxGenerator([[2], [2, 3], [2, 3], [2, 3], [2], [2]],
                                    scales=[0.07, 0.15, 0.33, 0.51, 0.69, 0.87, 1.05], steps=[8, 16, 32, 64, 100, 300])
    grids = [torch.zeros(1, 1, g, g) for g in (38, 19, 10, 5, 3, 1)]
    anchors = generator(ImageList(torch.zeros(1, 3, 300, 300), [(300, 300)]), grids)[0]
    matcher, coder = SSDMatcher(0.5), BoxCoder(weights=(10.0, 10.0, 5.0, 5.0))

    def encode(image: Any, target: dict) -> tuple:
        from torchvision.ops import box_iou

        boxes = target["boxes"].as_subclass(torch.Tensor)
        classes = torch.zeros(len(anchors), dtype=torch.int64)
        offsets = torch.zeros(len(anchors), 4)
        if len(boxes):
            matched = matcher(box_iou(boxes, anchors))
            foreground = matched >= 0
            classes[foreground] = target["labels"][matched[foreground]]
            offsets[foreground] = coder.encode_single(boxes[matched[foreground]], anchors[foreground])
        return image, {**target, "anchor_labels": classes, "anchor_boxes": offsets}

    return encode


def collate(batch: list) -> tuple:
    import torch

    images, targets = zip(*batch)
    return torch.stack(images), list(targets)


def run(which: str, annotations: str, batches: int) -> dict:
    seen, n, started = 0, 0, 0.0
    which, name = which.split(":")
    if which == "torchvision":
        import torch
        from torchvision import datasets

        dataset = datasets.CocoDetection(os.path.join(OUT, "photos"), annotations, transforms=recipe(name))
        keys = ["boxes", "labels", "masks"] if name == "maskrcnn-lsj" else ["boxes", "labels"]
        dataset = datasets.wrap_dataset_for_transforms_v2(dataset, target_keys=keys)
        loader: Any = torch.utils.data.DataLoader(dataset, batch_size=BATCH, shuffle=True, num_workers=THREADS,
                                                  persistent_workers=True, drop_last=True, collate_fn=collate)
        batch_of = lambda batch: batch  # noqa: E731
    else:
        import nostall

        pipeline = recipe(name)
        target = nostall.Field("coco", kind="boxes")
        if name == "maskrcnn-lsj":
            # The references' FixedSizeCrop is not torchvision's: nostall's takes its place.
            steps = list(pipeline.transforms)
            steps[1] = nostall.ops.FixedSizeCrop(1024, fill=(123, 117, 104))
            pipeline = steps
            target = nostall.Field("coco", kind="boxes", max_boxes=8, masks=True)
        if name == "ssd-targets":
            # The targets' step is the field's anchors.
            pipeline = list(pipeline.transforms)[:-1]
            target = nostall.Field("coco", kind="boxes", anchors="ssd300")
        loader = nostall.Loader(annotations, pipeline=pipeline, batch_size=BATCH, threads=THREADS,
                                fields={"image": "image", "target": target})
        batch_of = lambda batch: (batch["image"], batch["target"])  # noqa: E731
    boxes = 0
    while seen < WARM_UP + batches:
        for batch in loader:
            images, targets = batch_of(batch)
            seen += 1
            if seen == WARM_UP:
                started = time.perf_counter()
            elif seen > WARM_UP:
                n += len(images)
                boxes += sum(len(t["boxes"]) for t in targets)
            if seen == WARM_UP + batches:
                break
    return {"images": n, "boxes": boxes, "seconds": time.perf_counter() - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", nargs="?", default="bench/data/photos")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=20, help="batches timed a run")
    parser.add_argument("--recipes", default="ssd,ssdlite")
    parser.add_argument("--json")
    parser.add_argument("--child")
    args = parser.parse_args()
    annotations = write_annotations(args.data)
    if args.child:
        print(json.dumps(run(args.child, annotations, args.batches)))
        return
    results: dict[str, Any] = {"data": os.path.abspath(args.data), "batch": BATCH, "threads": THREADS,
                               "batches_timed": args.batches, "cpus": os.cpu_count(),
                               "date": time.strftime("%Y-%m-%d"), "recipes": {}}
    for name in args.recipes.split(","):
        runs: dict[str, list[dict]] = {"torchvision": [], "nostall": []}
        for r in range(args.rounds):
            order = ("torchvision", "nostall") if r % 2 == 0 else ("nostall", "torchvision")
            for which in order:
                child = [__file__, args.data, "--child", f"{which}:{name}", "--batches", str(args.batches)]
                result = run_child(child, which)
                runs[which].append(result)
                print(f"{name} round {r + 1}: {which} {result['images_per_s']:.0f} images/s "
                      f"({result['boxes'] / result['images']:.1f} boxes an image), "
                      f"peak RSS {result['peak_rss_mb']:.0f} MB", flush=True)
        medians = {k: statistics.median(x["images_per_s"] for x in v) for k, v in runs.items()}
        ratio = medians["nostall"] / medians["torchvision"]
        print(f"{name}: nostall {medians['nostall']:.0f} images/s, torchvision {medians['torchvision']:.0f}: "
              f"{ratio:.2f}x", flush=True)
        results["recipes"][name] = {"runs": runs, "median_images_per_s": medians, "ratio": ratio}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
