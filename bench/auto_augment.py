"""RandAugment on the CPU: nostall against DALI's CPU pipeline, side by side in one run.

Both read the same photographs and make float32 CHW batches of 64 at 224 x 224, with 2
threads, through torchvision-style RandAugment (2 augmentations at magnitude 9 of 31 bins):

* ``nostall``: `nostall.Loader(data, batch_size=64, threads=2, pipeline=[RandomResizedCrop(224),
  RandomHorizontalFlip(), RandAugment(num_ops=2, magnitude=9), Normalize(ImageNet)])`.
* ``dali``: `fn.readers.file` → `fn.decoders.image_random_crop` (CPU) → `fn.resize(224)` →
  `auto_aug.rand_augment.rand_augment(n=2, m=9)` → `fn.crop_mirror_normalize` (flip,
  ImageNet normalisation, CHW float32), `device_id=None`, `num_threads=2`,
  `enable_conditionals=True` (DALI's CPU-only pipeline, which needs no GPU).

Each runs in a fresh child process, alternated ``--rounds`` times; a run: 8 batches of
warm-up, then ``--batches`` batches timed. The figure is the ratio of the medians.

Usage: ``python bench/auto_augment.py [bench/data/photos] [--rounds 3] [--json out.json]``
with nostall's venv (``.venv-test``, ``make python-test``) running this script and DALI's
(``.venv-bench``, ``bash bench/setup_env.sh``) given as ``--dali-python``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

BATCH, THREADS, WARM_UP = 64, 2, 8
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def run_nostall(data: str, batches: int) -> dict:
    import nostall
    from nostall import ops

    pipeline = [ops.RandomResizedCrop(224), ops.RandomHorizontalFlip(), ops.RandAugment(num_ops=2, magnitude=9),
                ops.Normalize(mean=MEAN, std=STD)]
    loader = nostall.Loader(data, batch_size=BATCH, threads=THREADS, pipeline=pipeline, output="numpy")

    def batches_of() -> Any:
        while True:
            for images, _ in loader:
                yield images

    return timed(batches_of(), batches)


def run_dali(data: str, batches: int) -> dict:
    import numpy as np
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.auto_aug import rand_augment

    @pipeline_def(batch_size=BATCH, num_threads=THREADS, device_id=None, seed=0, enable_conditionals=True)
    def train(root):
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="Reader")
        images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB)
        images = fn.resize(images, resize_x=224, resize_y=224)
        images = rand_augment.rand_augment(images, n=2, m=9, shape=[224, 224])
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW",
                                          mean=[m * 255 for m in MEAN], std=[s * 255 for s in STD],
                                          mirror=fn.random.coin_flip())
        return images, labels

    pipe = train(data)
    pipe.build()

    def batches_of() -> Any:
        while True:
            images, _ = pipe.run()
            yield np.asarray(images.as_tensor())

    return timed(batches_of(), batches)


def timed(batches_of: Any, batches: int) -> dict:
    for _ in range(WARM_UP):
        images = next(batches_of)
    assert images.shape[1:] == (3, 224, 224) and str(images.dtype) == "float32", images.shape
    started, n = time.perf_counter(), 0
    for _ in range(batches):
        n += len(next(batches_of))
    return {"images": n, "seconds": time.perf_counter() - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", nargs="?", default="bench/data/photos")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--dali-python", default=".venv-bench/bin/python")
    parser.add_argument("--json")
    parser.add_argument("--child")
    args = parser.parse_args()
    if args.child:
        run = run_nostall if args.child == "nostall" else run_dali
        print(json.dumps(run(args.data, args.batches)))
        return
    python = {"nostall": sys.executable, "dali": args.dali_python}
    runs: dict[str, list[float]] = {"nostall": [], "dali": []}
    for r in range(args.rounds):
        for which in (("nostall", "dali") if r % 2 == 0 else ("dali", "nostall")):
            out = subprocess.run([python[which], __file__, args.data, "--child", which, "--batches",
                                  str(args.batches)], check=True, capture_output=True, text=True).stdout
            result = json.loads(out.strip().splitlines()[-1])
            runs[which].append(result["images"] / result["seconds"])
            print(f"round {r + 1}: {which} {runs[which][-1]:.0f} images/s", flush=True)
    medians = {k: statistics.median(v) for k, v in runs.items()}
    ratio = medians["dali"] / medians["nostall"]
    print(f"RandAugment: nostall {medians['nostall']:.0f} images/s, DALI CPU {medians['dali']:.0f}: "
          f"DALI / nostall = {ratio:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"data": os.path.abspath(args.data), "batch": BATCH, "threads": THREADS,
                       "batches_timed": args.batches, "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d"),
                       "images_per_s": runs, "median": medians, "dali_over_nostall": ratio}, f, indent=1)


if __name__ == "__main__":
    main()
