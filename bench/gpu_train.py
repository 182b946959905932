"""End to end on a GPU: does the loader keep a real training step fed?

For each model (torchvision ResNet-18 and ResNet-50, random weights, SGD, bf16 autocast,
channels-last), three runs one after the other in one process:

- ``model``: the training step alone on batches already on the GPU: G, the rate the
  GPU ingests images at when it never waits;
- ``nostall``: ``nostall.Loader`` (RandomResizedCrop, flip; uint8 HWC batches, moved to
  the GPU and normalised there), ``threads`` prep threads;
- ``torch``: ``torch.utils.data.DataLoader`` with torchvision's RandomResizedCrop, flip,
  ToTensor and Normalize on PIL images, ``num_workers=threads``, pinned memory.

and, before the models, each loader alone: its batches pulled onto the GPU with no
training step (``feed``, images/s), the most it can give a model.

Each run trains ``--steps`` steps after ``--warmup`` steps; its rate is images over the
wall time of the measured steps (the GPU synchronised at both ends), and its data stall
is ``1 - rate / G``: the share of the time the GPU waited for data (DS-Analyzer's
measurement by difference). Prints one JSON object.

Usage: python3 bench/gpu_train.py DATA [--batch-size 256] [--threads 14] [--steps 40]
DATA is an ImageFolder of photographs (bench/make_photos.py makes one). Needs a CUDA GPU,
torch, torchvision and nostall.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torchvision
from torchvision import transforms

import nostall

MEAN = torch.tensor([0.485, 0.456, 0.406]) * 255
STD = torch.tensor([0.229, 0.224, 0.225]) * 255


def forever(make: Callable[[], Any]) -> Iterator[Any]:
    """Batches of epoch after epoch."""
    while True:
        yield from make()


def images_per_s(step: Callable[[], None], steps: int, warmup: int, batch_size: int) -> float:
    """Images per second over `steps` calls of `step` after `warmup` ones, the GPU
    synchronised at both ends of the timed calls (every run is timed this same way)."""
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return steps * batch_size / (time.perf_counter() - started)


def train(model: torch.nn.Module, batches: Iterator[tuple[torch.Tensor, torch.Tensor]],
          steps: int, warmup: int, batch_size: int) -> float:
    """Images per second over `steps` training steps after `warmup` ones."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step() -> None:
        images, labels = next(batches)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return images_per_s(step, steps, warmup, batch_size)


def nostall_batches(data: str, batch_size: int, threads: int, size: int):
    """nostall's uint8 HWC batches, normalised on the GPU into channels-last float."""
    loader = nostall.Loader(data, batch_size=batch_size, threads=threads, fetch_threads=4,
                            pipeline=[nostall.ops.RandomResizedCrop(size),
                                      nostall.ops.RandomHorizontalFlip()],
                            dtype="uint8", layout="HWC", drop_last=True)
    mean, std = MEAN.cuda().view(1, 3, 1, 1), STD.cuda().view(1, 3, 1, 1)

    def epoch():
        for images, labels in loader:
            images = images.cuda(non_blocking=True).permute(0, 3, 1, 2).float()
            images = ((images - mean) / std).contiguous(memory_format=torch.channels_last)
            yield images, labels.cuda(non_blocking=True)
    return forever(epoch)


def torch_batches(data: str, batch_size: int, threads: int, size: int):
    """DataLoader over torchvision's ImageFolder, as its documentation writes it."""
    dataset = torchvision.datasets.ImageFolder(data, transforms.Compose([
        transforms.RandomResizedCrop(size), transforms.RandomHorizontalFlip(),
        transforms.ToTensor(), transforms.Normalize((0.485, 0.456, 0.406),
                                                    (0.229, 0.224, 0.225))]))
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=True,
                                         num_workers=threads, pin_memory=True, drop_last=True,
                                         persistent_workers=True, prefetch_factor=4)

    def epoch():
        for images, labels in loader:
            yield (images.cuda(non_blocking=True).contiguous(memory_format=torch.channels_last),
                   labels.cuda(non_blocking=True))
    return forever(epoch)


def feed(batches: Iterator[tuple[torch.Tensor, torch.Tensor]], steps: int, warmup: int,
         batch_size: int) -> float:
    """Images per second of the batches alone, on the GPU, over `steps` after `warmup`."""
    def step() -> None:
        next(batches)
    return images_per_s(step, steps, warmup, batch_size)


def synthetic_batches(batch_size: int, size: int):
    images = torch.randn(batch_size, 3, size, size, device="cuda").contiguous(
        memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (batch_size,), device="cuda")
    while True:
        yield images, labels


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("data")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--models", default="resnet18,resnet50")
    args = p.parse_args()
    torch.backends.cudnn.benchmark = True
    result: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(), "cpus": os.cpu_count(), "torch": torch.__version__,
        "nostall": nostall.__version__, "batch_size": args.batch_size, "threads": args.threads,
        "steps": args.steps, "images": sum(len(f) for _, _, f in os.walk(args.data)),
        "feed": {}, "models": {}}
    for run, make in [("nostall", nostall_batches), ("torch", torch_batches)]:
        batches = make(args.data, args.batch_size, args.threads, args.image_size)
        result["feed"][run] = feed(batches, args.steps, args.warmup, args.batch_size)
        print(f"feed {run}: {result['feed'][run]:.0f} images/s", flush=True)
    for name in args.models.split(","):
        model = getattr(torchvision.models, name)().cuda().to(memory_format=torch.channels_last)
        rates = {}
        for run, batches in [
            ("model", synthetic_batches(args.batch_size, args.image_size)),
            ("nostall", nostall_batches(args.data, args.batch_size, args.threads, args.image_size)),
            ("torch", torch_batches(args.data, args.batch_size, args.threads, args.image_size)),
        ]:
            rates[run] = train(model, batches, args.steps, args.warmup, args.batch_size)
            print(f"{name} {run}: {rates[run]:.0f} images/s", flush=True)
        result["models"][name] = {
            "images_per_s": rates,
            "stall": {run: max(0.0, 1 - rates[run] / rates["model"]) for run in ("nostall", "torch")},
        }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
