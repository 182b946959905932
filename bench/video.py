#!/usr/bin/env python3
"""Video loading side by side in one run: nostall against torchcodec on real footage
(`bench/make_videos.py` makes the sets).

Two measurements, each contender in a fresh child process, alternating, `--rounds` times:

* ``decode``: random 16-frame clips (consecutive frames), one decoding thread each,
  open + seek + 16 frames + RGB, frames per CPU-second of the whole process. nostall: a
  ``Loader`` with ``threads=1`` over a folder holding `--clips` hard links to the file,
  pipeline ``[Clip(16), CenterCrop(its size)]`` in uint8 (the frames as decoded).
  torchcodec: ``VideoDecoder(path, num_ffmpeg_threads=1, seek_mode="exact")`` opened per
  clip and ``get_frames_at`` the clip's 16 indices.
* ``recipe``: the Kinetics recipe, one 16-frame clip a video (stride 1), short side 256,
  random crop 224, flip, normalise, float32 ``[8, 16, 3, 224, 224]``, batch 8, over every
  file of the sets; samples/s of wall time over `--epochs` epochs after one warm-up epoch.
  nostall with ``threads=2``; torchcodec in a ``DataLoader(num_workers=2)`` whose
  dataset opens each file with one FFmpeg thread, draws a clip and applies
  ``v2.Resize(256)``, ``v2.RandomCrop(224)``, ``v2.RandomHorizontalFlip()``,
  ``v2.ToDtype(float32, scale=True)``, ``v2.Normalize`` to the ``[T, C, H, W]`` tensor.

    .venv-test/bin/python bench/video.py [--data bench/out/videos] [--rounds 3]

Needs torchcodec in the venv (`pip install torchcodec`: its wheels load the system FFmpeg).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULT = "RESULT "
FRAMES = 16
MEAN, STD = (0.45, 0.45, 0.45), (0.225, 0.225, 0.225)


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def decode_nostall(path: str, clips: int, seed: int) -> dict:
    import nostall
    from nostall import ops, video
    from torchcodec.decoders import VideoDecoder

    meta = VideoDecoder(path).metadata
    with tempfile.TemporaryDirectory() as folder:
        for i in range(clips):
            os.link(path, Path(folder) / f"{i:04d}{Path(path).suffix}")
        loader = nostall.Loader(folder, batch_size=1, threads=1, dtype="uint8", output="numpy", seed=seed,
                                pipeline=[video.Clip(FRAMES), ops.CenterCrop((meta.height, meta.width))])
        start = cpu()
        count = sum(len(x) for x, _ in loader)
        spent = cpu() - start
    return {"frames": count * FRAMES, "cpu": spent}


def decode_torchcodec(path: str, clips: int, seed: int) -> dict:
    from torchcodec.decoders import VideoDecoder

    n = VideoDecoder(path, seek_mode="exact").metadata.num_frames
    draws = random.Random(seed)
    start = cpu()
    for _ in range(clips):
        decoder = VideoDecoder(path, num_ffmpeg_threads=1, seek_mode="exact")
        first = draws.randrange(max(1, n - FRAMES + 1))
        decoder.get_frames_at([min(first + i, n - 1) for i in range(FRAMES)])
    return {"frames": clips * FRAMES, "cpu": cpu() - start}


def recipe_nostall(root: str, epochs: int) -> dict:
    import nostall
    from nostall import ops, video

    loader = nostall.Loader(root, batch_size=8, threads=2, output="torch", pipeline=[
        video.Clip(FRAMES), ops.Resize(256), ops.RandomCrop(224), ops.RandomHorizontalFlip(),
        ops.Normalize(MEAN, STD)])
    return timed(loader, epochs)


class TorchcodecClips:
    """A folder of class folders of videos, one random 16-frame clip a video, v2's
    transforms on the clip."""

    def __init__(self, root: str):
        import torch
        from torchvision.transforms import v2

        exts = (".mp4", ".mkv", ".webm", ".avi", ".mov")
        self.files = sorted(p for p in Path(root).rglob("*") if p.suffix in exts)
        classes = sorted({p.parent.name for p in self.files})
        self.labels = [classes.index(p.parent.name) for p in self.files]
        self.transform = v2.Compose([v2.Resize(256, antialias=True), v2.RandomCrop(224),
                                     v2.RandomHorizontalFlip(), v2.ToDtype(torch.float32, scale=True),
                                     v2.Normalize(MEAN, STD)])

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int):
        import torch
        from torchcodec.decoders import VideoDecoder

        decoder = VideoDecoder(str(self.files[i]), num_ffmpeg_threads=1, seek_mode="exact")
        n = decoder.metadata.num_frames
        first = int(torch.randint(max(1, n - FRAMES + 1), ()))
        clip = decoder.get_frames_at([min(first + k, n - 1) for k in range(FRAMES)]).data
        return self.transform(clip), self.labels[i]


def recipe_torchcodec(root: str, epochs: int) -> dict:
    import torch

    torch.set_num_threads(1)
    loader = torch.utils.data.DataLoader(TorchcodecClips(root), batch_size=8, shuffle=True, num_workers=2,
                                         persistent_workers=True)
    return timed(loader, epochs)


def timed(loader, epochs: int) -> dict:
    for _ in loader:  # warm-up epoch
        pass
    start, count = time.perf_counter(), 0
    for epoch in range(epochs):
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(epoch + 1)
        for x, _ in loader:
            assert tuple(x.shape[1:]) == (FRAMES, 3, 224, 224), x.shape
            count += len(x)
    return {"samples": count, "seconds": time.perf_counter() - start}


def child(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", json.dumps(args)], check=True,
                         capture_output=True, text=True)
    line = next(line for line in out.stdout.splitlines() if line.startswith(RESULT))
    return json.loads(line[len(RESULT):])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).parent / "out" / "videos")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clips", type=int, default=24)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--only", choices=["decode", "recipe"])
    parser.add_argument("--child")
    args = parser.parse_args()
    if args.child:
        kind, *rest = json.loads(args.child)
        print(RESULT + json.dumps(globals()[kind](*rest)))
        return
    sets = sorted(p for p in args.data.iterdir() if p.is_dir() and p.name not in ("sources", "memory"))
    if args.only != "recipe":
        print("| set | file | nostall frames/CPU-s | torchcodec frames/CPU-s | ratio |")
        print("|---|---|---|---|---|")
        for folder in sets:
            for path in sorted(folder.iterdir()):
                ratios, ours, theirs = [], [], []
                for round in range(args.rounds):
                    # Each round draws other clips (both contenders), so that no one set of
                    # places, with its pre-roll, decides the figure.
                    a = child(["decode_nostall", str(path), args.clips, round])
                    b = child(["decode_torchcodec", str(path), args.clips, round])
                    ours.append(a["frames"] / a["cpu"])
                    theirs.append(b["frames"] / b["cpu"])
                    ratios.append(ours[-1] / theirs[-1])
                print(f"| {folder.name} | {path.name} | {statistics.median(ours):.0f} | "
                      f"{statistics.median(theirs):.0f} | {statistics.median(ratios):.2f}× "
                      f"({', '.join(f'{r:.2f}' for r in ratios)}) |", flush=True)
    if args.only != "decode":
        with tempfile.TemporaryDirectory() as root:
            for folder in sets:
                (Path(root) / folder.name).mkdir()
                for path in folder.iterdir():
                    os.link(path, Path(root) / folder.name / path.name)
            ratios = []
            for _ in range(args.rounds):
                a = child(["recipe_nostall", root, args.epochs])
                b = child(["recipe_torchcodec", root, args.epochs])
                ratios.append((a["samples"] / a["seconds"]) / (b["samples"] / b["seconds"]))
                print(f"recipe: nostall {a['samples'] / a['seconds']:.2f} clips/s, torchcodec "
                      f"{b['samples'] / b['seconds']:.2f} clips/s: {ratios[-1]:.2f}×", flush=True)
            print(f"recipe median {statistics.median(ratios):.2f}×")


if __name__ == "__main__":
    main()
