"""End to end on a GPU: does the loader keep a real training step fed, and with how many
CPU threads?

Models: torchvision ResNet-18 and ResNet-50 (random weights, SGD, bf16 autocast,
channels-last), batch 256 at 224x224. Feeds, each pulling batches onto the GPU:

- ``synthetic``: one batch already on the GPU, again and again: G, the rate the GPU takes
  images at when it never waits;
- ``nostall-cpu``: ``nostall.Loader(device="cuda", decode="cpu")``: JPEGs decoded by the
  prep threads (the crop's region only, DCT-scaled), 8-bit pixels copied from page-locked
  buffers on a side stream, normalised on the GPU;
- ``nostall-hybrid``: ``decode="auto"``: JPEGs of a megapixel or more decoded by nvJPEG
  on the GPU while the CPU falls behind;
- ``nostall-gpu``: ``decode="gpu"``: every JPEG decoded on the GPU;
- ``nostall-cpu-nice0``: as ``nostall-cpu`` with the prep threads at the training
  thread's CPU priority (``worker_nice=0``; with a device the default is 10 below it);
- ``dataloader``: torch's DataLoader over torchvision's ImageFolder, RandomResizedCrop,
  flip, ToTensor and Normalize on PIL images in ``threads`` worker processes;
- ``torchvision-gpu``: a DataLoader of ``threads`` workers reading the encoded bytes, then
  in the training process ``torchvision.io.decode_jpeg(list, device="cuda")`` (nvJPEG's
  batched decode, on the hardware decoder) and RandomResizedCrop and flip on the GPU.

Each run trains up to ``--steps`` steps (or ``--seconds``) after ``--warmup`` steps; its
rate is images over the wall time of the measured steps (GPU synchronised at both ends),
its data stall ``1 - rate / G`` (DS-Analyzer's measurement by difference), and the CPU it
used the cores its processes (workers included) kept busy over those steps. The decoders
alone are measured too: nvJPEG's batched decode of each set on the GPU, and nostall's
CPU decode (its feed with no model). Correctness first: the same seed through
``decode="cpu"`` and ``decode="gpu"`` gives the same samples, labels and augmentation;
the pixels differ by the decoders' rounding, reported as mean and 99.9th-percentile
absolute difference.

Usage: python3 bench/gpu_train.py DATA --json OUT.json [--threads 14]
DATA holds ``photos/``, ``mp1/``, ``mp2/`` and ``large/`` ImageFolders (bench/gpu_data.py
makes them); the part ``sizes`` feeds each decode path alone at 1-2 and 2-4 megapixels,
where the CPU's and the GPU's decoders cross.
Needs a CUDA GPU, torch, torchvision, psutil and nostall. Every part is timed and
written to the JSON file as it ends; a part that fails records its error and the rest
go on.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time
import traceback
from collections.abc import Callable, Generator
from typing import Any, Literal

import psutil
import torch
import torchvision
from torchvision import transforms
from torchvision.io import ImageReadMode, decode_jpeg
from torchvision.transforms.v2 import functional as F

import nostall

Decode = Literal["auto", "gpu", "cpu"]
MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]
Batches = Generator[tuple[torch.Tensor, torch.Tensor], None, None]


def forever(make: Callable[[], Any]) -> Batches:
    """Batches of epoch after epoch."""
    while True:
        yield from make()


class CpuClock:
    """CPU seconds of this process and its children (the DataLoader's workers)."""

    def __init__(self) -> None:
        self.me = psutil.Process()

    def read(self) -> float:
        total = sum(self.me.cpu_times()[:2])
        for child in self.me.children(recursive=True):
            try:
                total += sum(child.cpu_times()[:2])
            except psutil.Error:
                pass
        return total


def timed(step: Callable[[], float], steps: int, warmup: int, batch_size: int,
          seconds: float) -> dict[str, float]:
    """Images/s over up to `steps` calls of `step` (at most `seconds`) after `warmup`, the
    GPU synchronised at both ends; the cores the processes kept busy meanwhile; and the
    share of the time the training loop spent taking batches (each `step` returns it)."""
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    clock = CpuClock()
    cpu0, started = clock.read(), time.perf_counter()
    done, taking = 0, 0.0
    while done < steps and (done < 3 or time.perf_counter() - started < seconds):
        taking += step()
        done += 1
    torch.cuda.synchronize()
    wall = time.perf_counter() - started
    return {"images_per_s": done * batch_size / wall, "cores": (clock.read() - cpu0) / wall,
            "steps": done, "taking_batches": taking / wall}


def take(batches: Batches) -> tuple[torch.Tensor, torch.Tensor, float]:
    """The next batch, and the seconds the call took."""
    started = time.perf_counter()
    images, labels = next(batches)
    return images, labels, time.perf_counter() - started


def train(model: torch.nn.Module, batches: Batches, args: argparse.Namespace) -> dict[str, float]:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step() -> float:
        images, labels, took = take(batches)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return took
    return timed(step, args.steps, args.warmup, args.batch_size, args.seconds)


def feed(batches: Batches, args: argparse.Namespace) -> dict[str, float]:
    def step() -> float:
        return take(batches)[2]
    return timed(step, args.steps, args.warmup, args.batch_size, args.seconds)


def nostall_loader(data: str, threads: int, decode: Decode, args: argparse.Namespace,
                   seed: int = 0, shuffle: bool = True, nice: int | None = None,
                   min_pixels: int | None = None) -> nostall.Loader:
    size: dict[str, Any] = {} if min_pixels is None else {"gpu_decode_min_pixels": min_pixels}
    return nostall.Loader(data, batch_size=args.batch_size, threads=threads, seed=seed,
                          shuffle=shuffle, pipeline=nostall.imagenet_train(args.image_size),
                          device="cuda", decode=decode, drop_last=True, worker_nice=nice,
                          **size)


def nostall_batches(data: str, threads: int, decode: Decode, args: argparse.Namespace,
                    metrics: dict[str, Any], nice: int | None = None,
                    min_pixels: int | None = None) -> Batches:
    """The loader's batches; `metrics` gets its device figures (the share of large JPEGs
    the GPU decoded, for one) when they end."""
    loader = nostall_loader(data, threads, decode, args, nice=nice, min_pixels=min_pixels)
    try:
        yield from forever(lambda: loader)
    finally:
        metrics.update(loader.metrics.get("device", {}))


def dataloader_batches(data: str, threads: int, args: argparse.Namespace) -> Batches:
    """DataLoader over torchvision's ImageFolder, as its documentation writes it."""
    dataset = torchvision.datasets.ImageFolder(data, transforms.Compose([
        transforms.RandomResizedCrop(args.image_size), transforms.RandomHorizontalFlip(),
        transforms.ToTensor(), transforms.Normalize(MEAN, STD)]))
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, shuffle=True,
                                         num_workers=threads, pin_memory=True, drop_last=True,
                                         persistent_workers=True, prefetch_factor=4)

    def epoch() -> Batches:
        for images, labels in loader:
            yield (images.cuda(non_blocking=True).contiguous(memory_format=torch.channels_last),
                   labels.cuda(non_blocking=True))
    return forever(epoch)


def read_bytes(path: str) -> torch.Tensor:
    with open(path, "rb") as f:
        return torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)


def as_list(batch: list[tuple[torch.Tensor, int]]) -> tuple[list[torch.Tensor], torch.Tensor]:
    return [b[0] for b in batch], torch.tensor([b[1] for b in batch])


def torchvision_gpu_batches(data: str, threads: int, args: argparse.Namespace) -> Batches:
    """Encoded bytes from a DataLoader; decode, crop, flip and normalise on the GPU in the
    training process, as torchvision's documentation of batched GPU decoding writes it."""
    dataset = torchvision.datasets.DatasetFolder(data, loader=read_bytes, extensions=(".jpg",))
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, shuffle=True,
                                         num_workers=threads, drop_last=True,
                                         persistent_workers=True, prefetch_factor=4,
                                         collate_fn=as_list)
    crop = transforms.RandomResizedCrop(args.image_size)
    mean = torch.tensor(MEAN, device="cuda").view(1, 3, 1, 1)
    std = torch.tensor(STD, device="cuda").view(1, 3, 1, 1)

    def epoch() -> Batches:
        for encoded, labels in loader:
            images = decode_jpeg(encoded, mode=ImageReadMode.RGB, device="cuda")
            out = []
            for image in images:
                top, left, h, w = crop.get_params(image, list(crop.scale), list(crop.ratio))
                image = F.resized_crop(image, top, left, h, w, [args.image_size] * 2,
                                       antialias=True)
                if torch.rand(1).item() < 0.5:
                    image = F.horizontal_flip(image)
                out.append(image)
            batch = (torch.stack(out).float().div_(255) - mean) / std
            yield (batch.contiguous(memory_format=torch.channels_last),
                   labels.cuda(non_blocking=True))
    return forever(epoch)


def synthetic_batches(args: argparse.Namespace) -> Batches:
    images = torch.randn(args.batch_size, 3, args.image_size, args.image_size,
                         device="cuda").contiguous(memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (args.batch_size,), device="cuda")
    while True:
        yield images, labels


def make_feed(name: str, data: str, threads: int, args: argparse.Namespace,
              metrics: dict[str, Any]) -> Batches:
    if name.startswith("nostall-"):
        decode: dict[str, Decode] = {"nostall-cpu": "cpu", "nostall-hybrid": "auto",
                                     "nostall-gpu": "gpu"}
        # "-nice0": the prep threads at the training thread's priority (the default with
        # a device is 10 below it). "-min0", "-min1mp", "-min2mp": the hybrid with JPEGs of
        # any size, of at least one or two megapixels eligible for the GPU (the Loader's
        # default, the second, was the third before the runs of 2026-11-27).
        base, nice = (name[:-len("-nice0")], 0) if name.endswith("-nice0") else (name, None)
        base, _, least = base.partition("-min")
        min_pixels = {"": None, "0": 0, "1mp": 1_000_000, "2mp": 2_000_000}[least]
        return nostall_batches(data, threads, decode[base], args, metrics, nice, min_pixels)
    if name == "dataloader":
        return dataloader_batches(data, threads, args)
    if name == "torchvision-gpu":
        return torchvision_gpu_batches(data, threads, args)
    raise ValueError(name)


def decode_agreement(data: str, args: argparse.Namespace) -> dict[str, Any]:
    """The same seed through the CPU's decoder and the GPU's: same samples, labels and
    augmentation (the crops come from the same draws), pixels apart by rounding."""
    decoders: tuple[Decode, ...] = ("cpu", "gpu")
    loaders = {d: nostall_loader(data, 8, d, args, seed=7, shuffle=True) for d in decoders}
    diffs, same_ids, same_labels, batches = [], True, True, 0
    for (a, la), (b, lb) in zip(loaders["cpu"], loaders["gpu"]):
        same_ids &= loaders["cpu"].last_ids == loaders["gpu"].last_ids
        same_labels &= bool(torch.equal(la, lb))
        diffs.append(((a - b).abs() * torch.tensor(STD, device="cuda").view(1, 3, 1, 1) * 255)
                     .flatten())
        batches += 1
        if batches == 3:
            break
    d = torch.cat(diffs).float()
    return {"batches": batches, "same_samples": bool(same_ids), "same_labels": same_labels,
            "mean_abs_levels": d.mean().item(),
            "p999_abs_levels": torch.quantile(d[:: max(1, d.numel() // 1_000_000)], 0.999).item(),
            "max_abs_levels": d.max().item(),
            "gpu_metrics": loaders["gpu"].metrics.get("device")}


def decode_releases_the_gil(data: str) -> dict[str, Any]:
    """Whether another thread runs Python while torchvision's batched GPU decode runs (the
    stager's decoder thread relies on it): the other thread's loop count during the
    decode, against its count over the same time alone."""
    import threading

    files = [read_bytes(os.path.join(dp, f)) for dp, _, fs in os.walk(data) for f in fs
             if f.endswith(".jpg")][:128]
    decode_jpeg(files[:8], device="cuda")
    torch.cuda.synchronize()

    def count_for(seconds: float) -> int:
        n, end = 0, time.perf_counter() + seconds
        while time.perf_counter() < end:
            n += 1
        return n

    started = time.perf_counter()
    decode_jpeg(files, device="cuda")
    took = time.perf_counter() - started
    alone = count_for(took)
    counted: list[int] = []
    counter = threading.Thread(target=lambda: counted.append(count_for(took)))
    counter.start()
    decode_jpeg(files, device="cuda")
    counter.join()
    return {"decode_s": took, "loops_alone": alone, "loops_beside_decode": counted[0],
            "ratio": counted[0] / max(1, alone)}


def device_matches_host(data: str, args: argparse.Namespace) -> dict[str, Any]:
    """decode="cpu" on the device against the CPU loader's float32 output, same seed."""
    host = nostall.Loader(data, batch_size=args.batch_size, threads=8, seed=3,
                          pipeline=nostall.imagenet_train(args.image_size), drop_last=True)
    dev = nostall_loader(data, 8, "cpu", args, seed=3)
    (h, _), (d, _) = next(iter(host)), next(iter(dev))
    return {"max_abs": (h.cuda() - d).abs().max().item(),
            "channels_last": d.is_contiguous(memory_format=torch.channels_last),
            "dtype": str(d.dtype), "shape": list(d.shape)}


def nvjpeg_alone(data: str, count: int, group: int = 64) -> dict[str, float]:
    """nvJPEG's batched decode of `count` files of `data`, `group` at a time, images/s
    (files in memory)."""
    paths = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(data) for f in fs
                   if f.endswith(".jpg"))[:count]
    files = [read_bytes(p) for p in paths]
    decode_jpeg(files[:8], device="cuda")
    torch.cuda.synchronize()
    started = time.perf_counter()
    for i in range(0, len(files), group):
        decode_jpeg(files[i:i + group], device="cuda")
    torch.cuda.synchronize()
    return {"images_per_s": len(files) / (time.perf_counter() - started), "images": len(files),
            "group": group}


class Report:
    """The JSON result, written whole after every part."""

    def __init__(self, path: str, header: dict[str, Any]) -> None:
        self.path, self.result = path, dict(header)

    def part(self, key: str, run: Callable[[], Any]) -> Any:
        started = time.perf_counter()
        try:
            value = run()
        except Exception as e:  # noqa: BLE001 - one part's failure must not end the rest
            value = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-2000:]}
        gc.collect()
        node = self.result
        *parents, leaf = key.split("/")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
        print(f"{key} ({time.perf_counter() - started:.1f} s): {json.dumps(value)[:300]}",
              flush=True)
        with open(self.path, "w") as f:
            json.dump(self.result, f, indent=1)
        return value


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("data")
    p.add_argument("--json", required=True)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--threads", type=int, default=14)
    p.add_argument("--few-threads", type=int, default=4)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--seconds", type=float, default=6.0)
    p.add_argument("--warmup", type=int, default=6)
    p.add_argument("--large-warmup", type=int, default=10,
                   help="warm-up steps at 4-12 megapixels (decode=\"auto\" finds its share)")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--parts", default="check,decoders,photos,sizes,large")
    args = p.parse_args()
    torch.backends.cudnn.benchmark = True
    photos, large = os.path.join(args.data, "photos"), os.path.join(args.data, "large")
    report = Report(args.json, {
        "gpu": torch.cuda.get_device_name(), "cpus": os.cpu_count(), "torch": torch.__version__,
        "torchvision": torchvision.__version__, "nostall": nostall.__version__,
        "batch_size": args.batch_size, "threads": args.threads, "steps": args.steps,
        "seconds": args.seconds, "warmup": args.warmup})
    parts = set(args.parts.split(","))
    t = args.threads
    if "check" in parts:
        report.part("check/device_matches_host", lambda: device_matches_host(photos, args))
        report.part("check/decode_agreement_large", lambda: decode_agreement(large, args))
        report.part("check/decode_releases_the_gil", lambda: decode_releases_the_gil(large))
    if "decoders" in parts:
        report.part("decoders/nvjpeg_photos", lambda: nvjpeg_alone(photos, 1024, 128))
        for size in ("mp1", "mp2"):
            report.part(f"decoders/nvjpeg_{size}",
                        lambda: nvjpeg_alone(os.path.join(args.data, size), 256, 128))
        report.part("decoders/nvjpeg_large", lambda: nvjpeg_alone(large, 256, 128))
        report.part("decoders/nvjpeg_large_64", lambda: nvjpeg_alone(large, 256, 64))
    # The parts that feed nothing but the GPU (sizes, gpu-path) need no model.
    training = parts - {"check", "decoders", "sizes", "gpu-path"}
    models = {name: getattr(torchvision.models, name)().cuda().to(memory_format=torch.channels_last)
              for name in (("resnet18", "resnet50") if training else ())}
    for name, model in models.items():
        report.part(f"synthetic/{name}", lambda: train(model, synthetic_batches(args), args))

    def run(key: str, feed_name: str, data: str, threads: int, model: str | None) -> None:
        def go() -> dict[str, Any]:
            loader_metrics: dict[str, Any] = {}
            batches = make_feed(feed_name, data, threads, args, loader_metrics)
            try:
                if model is None:
                    result: dict[str, Any] = feed(batches, args)
                else:
                    result = train(models[model], batches, args)
            finally:
                batches.close()
                del batches
                gc.collect()
            if loader_metrics:
                result["loader"] = loader_metrics
            return result
        report.part(key, go)

    if "photos-r18" in parts:
        for threads in (t, 12):
            run(f"photos/resnet18/nostall-cpu-{threads}", "nostall-cpu", photos, threads,
                "resnet18")
    if "photos-nostall" in parts:
        run("photos/feed/nostall-cpu", "nostall-cpu", photos, t, None)
        run("photos/resnet18/nostall-cpu", "nostall-cpu", photos, t, "resnet18")
        run(f"photos/resnet50/nostall-cpu-{args.few_threads}", "nostall-cpu", photos,
            args.few_threads, "resnet50")
    if "photos" in parts:
        run("photos/feed/nostall-cpu", "nostall-cpu", photos, t, None)
        run(f"photos/feed/nostall-cpu-{args.few_threads}", "nostall-cpu", photos,
            args.few_threads, None)
        run("photos/feed/nostall-gpu", "nostall-gpu", photos, t, None)
        run("photos/feed/dataloader", "dataloader", photos, t, None)
        # The prep threads below the training thread's priority (the default) and at it,
        # in turn, twice.
        for turn in (1, 2):
            for feed_name in ("nostall-cpu", "nostall-cpu-nice0"):
                run(f"photos/resnet18/{feed_name}-{turn}", feed_name, photos, t, "resnet18")
        run("photos/resnet18/dataloader", "dataloader", photos, t, "resnet18")
        run(f"photos/resnet50/nostall-cpu-{args.few_threads}", "nostall-cpu", photos,
            args.few_threads, "resnet50")
        run("photos/resnet50/dataloader", "dataloader", photos, t, "resnet50")
    if "nice" in parts:
        # The prep threads' priority, 10 below the training thread's (the default with a
        # device) against the same (nice0), in turn.
        for turn in (1, 2):
            for feed_name in ("nostall-cpu", "nostall-cpu-nice0"):
                run(f"photos/resnet18/{feed_name}-{turn}", feed_name, photos, t, "resnet18")
                run(f"photos/resnet50/{feed_name}-{args.few_threads}-{turn}", feed_name,
                    photos, args.few_threads, "resnet50")
                run(f"large/feed/{feed_name}-{turn}", feed_name, large, t, None)
    if "small-hybrid" in parts:
        # Below the default size threshold: the hybrid with every JPEG eligible feeding
        # ResNet-18 at photographs' size, against the CPU alone, in turn; and at 1-2
        # megapixels with a threshold of one.
        for turn in (1, 2):
            for feed_name in ("nostall-cpu", "nostall-hybrid-min0"):
                run(f"photos/resnet18/{feed_name}-{turn}", feed_name, photos, t, "resnet18")
        run("photos/feed/nostall-hybrid-min0", "nostall-hybrid-min0", photos, t, None)
        mp1 = os.path.join(args.data, "mp1")
        for turn in (1, 2):
            for feed_name in ("nostall-cpu", "nostall-hybrid-min1mp"):
                run(f"mp1/feed/{feed_name}-{turn}", feed_name, mp1, t, None)
    if "gpu-path" in parts:
        # The GPU's path fed alone by size, and the hybrid with the default threshold
        # beside the CPU alone, in turn.
        for size in ("photos", "mp1", "mp2"):
            run(f"{size}/feed/nostall-gpu", "nostall-gpu", os.path.join(args.data, size), t,
                None)
        for size in ("mp1", "mp2"):
            for feed_name in ("nostall-cpu", "nostall-hybrid"):
                run(f"{size}/feed/{feed_name}", feed_name, os.path.join(args.data, size), t,
                    None)
    if "sizes" in parts:
        # Where the CPU's DCT-scaled decode of the crop stops beating the GPU's decoder:
        # each fed alone, at 1-2 and 2-4 megapixels (photographs' size and 4-12 are above).
        for size in ("mp1", "mp2"):
            for feed_name in ("nostall-cpu", "nostall-gpu", "nostall-hybrid"):
                run(f"{size}/feed/{feed_name}", feed_name, os.path.join(args.data, size), t,
                    None)
    if "large" in parts:
        args.warmup = args.large_warmup
        for feed_name in ("nostall-cpu", "nostall-hybrid", "nostall-gpu", "torchvision-gpu"):
            run(f"large/feed/{feed_name}", feed_name, large, t, None)
        for feed_name in ("nostall-cpu", "nostall-hybrid", "nostall-gpu", "torchvision-gpu"):
            run(f"large/resnet50/{feed_name}", feed_name, large, t, "resnet50")
        # Once more each, the CPU's and the hybrid's, for the spread between runs.
        for feed_name in ("nostall-cpu", "nostall-hybrid"):
            run(f"large/feed/{feed_name}-2", feed_name, large, t, None)
            run(f"large/resnet50/{feed_name}-2", feed_name, large, t, "resnet50")
    synthetic = report.result.get("synthetic", {})
    for section in ("photos", "large"):
        for name in ("resnet18", "resnet50"):
            runs = report.result.get(section, {}).get(name, {})
            g = synthetic.get(name, {}).get("images_per_s")
            for r in runs.values():
                if g and "images_per_s" in r:
                    r["stall"] = max(0.0, 1 - r["images_per_s"] / g)
    with open(args.json, "w") as f:
        json.dump(report.result, f, indent=1)
    print(json.dumps(report.result, indent=1))


if __name__ == "__main__":
    main()
