"""Remote prep against the trainer's own cores alone and against Ray Data, side by side.

A trainer held to half a core (a CPU cgroup), and a Ray cluster of two worker nodes held
to 0.6 core each (``python/tests/ray_cluster.py``), on real photographs
(``bench/data/photos``, 2000 JPEGs of 500x375, ``bench/make_photos.py``), batch 64:

* ``local``: ``nostall.Loader(photos, pipeline=..., threads=1)``, the trainer's half core;
* ``remote``: the same with ``remote=nostall.Remote(actors=2, num_cpus=1, ...)``: one
  actor on each worker node, and the trainer's own loader;
* ``receive``: ``remote=`` with ``local=False``: the actors prepare everything, and the
  trainer's CPU per batch is what receiving a batch costs it;
* flags after the contender's name set what ``Remote``'s defaults would choose (for
  float32 batches ``ahead=True``, for uint8 ones ``ahead=False``; the trainer's loader
  never held back): ``-ahead`` / ``-noahead`` (``ahead=``: the actors starting each
  epoch once every part of the one before is given out) and ``-gated`` / ``-greedy``
  (``local_cpu=0.9`` or ``1.0``: the trainer's own loader takes a part only while its
  process uses at most 90% of its CPU, or whenever it is free); they combine
  (``remote-noahead-greedy``, the only behaviour before 2026-11-30);
* ``raydata``: Ray Data as its users write it (``read_images`` + ``map_batches`` of the
  same torchvision/timm transform in an actor pool on the worker nodes,
  ``iter_torch_batches``; ``bench/ray_data_baseline.py``).

Recipes: ``imagenet`` (RandomResizedCrop(224), flip, normalise: float32 out),
``imagenet-u8`` (the same crop and flip, uint8 out: normalised on the GPU) and ``timm`` (timm's
``create_transform(224, is_training=True, auto_augment="rand-m9-mstd0.5-inc1",
re_prob=0.25, interpolation="bicubic")``: nostall translates the same object). Each
contender runs in a process of its own in the trainer's cgroup, over the same cluster, one
after another; the figure is samples/s over ``--batches`` batches after ``--warmup``, and
the trainer process's CPU seconds per batch.

Run inside a network namespace of its own (Ray binds the machine's addresses otherwise):

    unshare -rn sh -c 'ip link set lo up && .venv-test/bin/python bench/remote.py'
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python" / "tests"))
sys.path.insert(0, str(HERE))

from ray_cluster import CpuCgroup, RayCluster, require_own_netns  # noqa: E402

PHOTOS = str(HERE / "data" / "photos")
BATCH = 64
SECRET = "nostall-bench-secret-0123456789"


def recipe_settings(recipe: str) -> dict[str, Any]:
    """nostall's settings of `recipe`."""
    if recipe == "timm":
        from recipes import pillow_posterize_to_zero_bits, timm_transform

        pillow_posterize_to_zero_bits()
        return {"pipeline": timm_transform()}
    if recipe == "imagenet-u8":
        from nostall import ops

        return {"pipeline": [ops.RandomResizedCrop(224), ops.RandomHorizontalFlip()], "dtype": "uint8"}
    return {"pipeline": "train"}


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(batches_of: Any, warmup: int, batches: int) -> dict[str, Any]:
    """Samples/s and the process's CPU per batch over `batches` after `warmup`."""
    seen = samples = 0
    started = cpu = first = 0.0
    begun = time.perf_counter()
    for labels_len in batches_of():
        seen += 1
        if seen == 1:
            first = time.perf_counter() - begun
        if seen == warmup:
            started, cpu = time.perf_counter(), cpu_seconds()
        elif seen > warmup:
            samples += labels_len
        if seen == warmup + batches:
            break
    wall = time.perf_counter() - started
    return {"samples_per_s": samples / wall, "cpu_per_batch_s": (cpu_seconds() - cpu) / batches,
            "first_batch_s": first}


def one(contender: str, recipe: str, address: str, warmup: int, batches: int) -> dict[str, Any]:
    """A contender's figures, in this process (already in the trainer's cgroup)."""
    if contender == "raydata":
        import ray_data_baseline

        got = ray_data_baseline.run(address, recipe, batches, photos=PHOTOS, warmup=warmup)
        return {"samples_per_s": got["samples_per_s"], "cpu_per_batch_s": got["driver_cpu_per_batch"],
                "first_batch_s": got.get("first_batch_s")}
    import ray

    import nostall

    settings: dict[str, Any] = dict(batch_size=BATCH, threads=1, drop_last=True, **recipe_settings(recipe))
    mode, *flags = contender.split("-")
    if mode in ("remote", "receive"):
        ray.init(address=address, _node_ip_address="127.0.0.1", logging_level="ERROR",
                 log_to_driver=False)
        ahead = True if "ahead" in flags else False if "noahead" in flags else None
        local_cpu = 1.0 if "greedy" in flags else 0.9 if "gated" in flags else None
        settings["remote"] = nostall.Remote(actors=2, num_cpus=1, resources={"nostall_prep": 1},
                                            local=mode == "remote", ahead=ahead, local_cpu=local_cpu)
    loader = nostall.Loader(PHOTOS, **settings)

    def batches_of() -> Any:
        while True:
            for _, labels in loader:
                yield len(labels)

    figures = measure(batches_of, warmup, batches)
    if contender != "local":
        figures["preparers"] = loader.metrics["remote"]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipes", default="imagenet,timm")
    parser.add_argument("--contenders", default="local,remote,raydata")
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--trainer-cores", type=float, default=0.5)
    parser.add_argument("--node-cores", type=float, default=0.6)
    parser.add_argument("--one", nargs=3, metavar=("CONTENDER", "RECIPE", "ADDRESS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ["NOSTALL_PEER_SECRET"] = SECRET
    if args.one:
        print(json.dumps(one(*args.one, args.warmup, args.batches)))
        return
    require_own_netns("the remote-prep bench")
    results: dict[str, Any] = {"trainer_cores": args.trainer_cores, "node_cores": args.node_cores,
                               "batch": BATCH, "photos": PHOTOS, "batches": args.batches}
    with RayCluster(workers=2, worker_cpus=1, cpu_quota=args.node_cores,
                    env={"NOSTALL_PEER_SECRET": SECRET}) as cluster:
        for recipe in args.recipes.split(","):
            for contender in args.contenders.split(","):
                trainer = CpuCgroup(f"nostall-bench-trainer-{os.getpid()}", args.trainer_cores)
                try:
                    # The child joins the trainer's cgroup before it imports anything.
                    join = (f"open({str(trainer.procs_file)!r}, 'w').write(str(__import__('os').getpid())); "
                            f"import runpy, sys; sys.argv = {[__file__, '--one', contender, recipe, cluster.address, '--warmup', str(args.warmup), '--batches', str(args.batches)]!r}; "
                            "runpy.run_path(sys.argv[0], run_name='__main__')")
                    run = subprocess.run([sys.executable, "-c", join], capture_output=True, text=True,
                                         timeout=1800, env={**os.environ, "PYTHONPATH": str(HERE.parent / "python")})
                finally:
                    trainer.remove()
                if run.returncode != 0:
                    results[f"{recipe}/{contender}"] = {"error": run.stderr[-2000:]}
                else:
                    results[f"{recipe}/{contender}"] = json.loads(run.stdout.strip().splitlines()[-1])
                print(recipe, contender, json.dumps(results[f"{recipe}/{contender}"]), flush=True)
    for recipe in args.recipes.split(","):
        base = results.get(f"{recipe}/local", {}).get("samples_per_s")
        for contender in ("remote", "raydata"):
            got = results.get(f"{recipe}/{contender}", {}).get("samples_per_s")
            if base and got:
                results[f"{recipe}/{contender}_vs_local"] = round(got / base, 2)
        remote = results.get(f"{recipe}/remote", {}).get("samples_per_s")
        raydata = results.get(f"{recipe}/raydata", {}).get("samples_per_s")
        if remote and raydata:
            results[f"{recipe}/remote_vs_raydata"] = round(remote / raydata, 2)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
