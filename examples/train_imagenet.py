"""Train torchvision's ResNet-18 for a few steps on CPU, fed by nostall or by DataLoader.

    python examples/train_imagenet.py                          # nostall.Loader
    python examples/train_imagenet.py --loader torch           # DataLoader + torchvision/PIL
    torchrun --nproc_per_node=2 examples/train_imagenet.py     # two ranks, gloo, DDP

The two loaders feed the same loop: RandomResizedCrop, horizontal flip, ImageNet
normalisation, float32 NCHW batches. Under torchrun each rank reads its own shard: nostall
takes RANK / WORLD_SIZE from the environment, DataLoader needs a DistributedSampler.

Data: --data, else bench/data/photos when present (`python bench/make_photos.py`), else
the demo photographs built into nostall (written to a temporary folder).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torchvision

import nostall


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--loader", choices=["nostall", "torch"], default="nostall")
    p.add_argument("--data", help="an ImageFolder (default: bench/data/photos, else the demo photographs)")
    p.add_argument("--steps", type=int, default=5, help="training steps per rank")
    p.add_argument("--batch-size", type=int, default=16, help="per rank")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--threads", type=int, default=None,
                   help="nostall prep threads / DataLoader workers per rank (default: 2 / 2)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--check-shards", action="store_true",
                   help="gather every rank's sample ids and check that the shards are disjoint "
                        "and the step counts equal")
    return p.parse_args()


def default_data() -> str:
    photos = Path(__file__).resolve().parent.parent / "bench" / "data" / "photos"
    if photos.is_dir() and any(photos.iterdir()):
        return str(photos)
    return nostall.demo_photos()


def nostall_batches(args, rank: int, world: int):
    """(images, labels, (epoch, sample id) pairs) from nostall: the loader shards by RANK / WORLD_SIZE."""
    loader = nostall.Loader(args.data, batch_size=args.batch_size, image_size=args.image_size,
                            threads=args.threads, seed=0, drop_last=True)
    assert (loader.rank, loader.world_size) == (rank, world)

    def batches():
        epoch = 0
        while True:
            loader.set_epoch(epoch)
            for images, labels in loader:
                yield images, labels, [(epoch, i) for i in loader.last_ids]
            epoch += 1

    return batches(), len(loader), loader.classes


def torch_batches(args, rank: int, world: int):
    """The same batches from DataLoader with torchvision/PIL transforms and worker processes."""
    from torch.utils.data import DataLoader, DistributedSampler
    from torchvision import transforms

    transform = transforms.Compose([
        transforms.RandomResizedCrop(args.image_size),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
    ])
    dataset = torchvision.datasets.ImageFolder(args.data, transform=transform)
    sampler: DistributedSampler[int] = DistributedSampler(dataset, num_replicas=world, rank=rank,
                                                          shuffle=True, seed=0)
    workers = 2 if args.threads is None else args.threads
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, num_workers=workers,
                        drop_last=True, persistent_workers=workers > 0)

    def batches():
        epoch = 0
        while True:
            sampler.set_epoch(epoch)
            indices = list(sampler)
            for step, (images, labels) in enumerate(loader):
                yield images, labels, [(epoch, i) for i in indices[step * args.batch_size:(step + 1) * args.batch_size]]
            epoch += 1

    return batches(), len(loader), dataset.classes


def main() -> None:
    args = parse_args()
    args.data = args.data or default_data()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo")
    torch.manual_seed(0)
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))

    make = nostall_batches if args.loader == "nostall" else torch_batches
    batches, steps_per_epoch, classes = make(args, rank, world)
    model = torchvision.models.resnet18(num_classes=len(classes))
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    model.train()
    if rank == 0:
        print(f"{args.loader} loader, {world} rank(s), {args.data}: {len(classes)} classes, "
              f"{steps_per_epoch} steps per epoch per rank, batch {args.batch_size}", flush=True)

    seen, data_wait, started = [], 0.0, time.perf_counter()
    for step in range(args.steps):
        t = time.perf_counter()
        images, labels, ids = next(batches)
        data_wait += time.perf_counter() - t
        seen.extend(ids)  # (epoch, sample id): shards are disjoint within an epoch
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"rank {rank} step {step}: loss {loss.item():.4f}", flush=True)
    wall = time.perf_counter() - started
    print(f"rank {rank}: {args.steps} steps in {wall:.1f} s, waited {data_wait:.2f} s for data", flush=True)

    if args.check_shards:
        mine = {"rank": rank, "steps": args.steps, "steps_per_epoch": steps_per_epoch, "ids": seen}
        everyone: list[Any] = [mine]
        if world > 1:
            everyone = [None] * world
            dist.all_gather_object(everyone, mine)
        if rank == 0:
            sets = [set(map(tuple, r["ids"])) for r in everyone]
            disjoint = all(not (a & b) for i, a in enumerate(sets) for b in sets[i + 1:])
            equal = len({(r["steps"], r["steps_per_epoch"]) for r in everyone}) == 1
            for r in everyone:
                print(f"rank {r['rank']}: {r['steps']} steps of {r['steps_per_epoch']} per epoch, "
                      f"{len(r['ids'])} samples, first (epoch, id) {sorted(map(tuple, r['ids']))[:4]}")
            print(f"shards disjoint: {disjoint}; equal step counts: {equal}", flush=True)
            if not (disjoint and equal):
                raise SystemExit("shard check failed")
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
