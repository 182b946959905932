"""Ray Data, the competitor baseline: images/s of a Ray Data input pipeline on a real Ray cluster.

Why: nostall's distributed mode is meant for the same job as Ray Data's usual image recipe:
preprocessing on CPU nodes, batches consumed by a trainer elsewhere. This measures that
recipe as Ray's documentation writes it, on the cluster `python/tests/ray_cluster.py` starts
(a head node standing for the trainer, with 0 CPUs, and worker nodes carrying the custom
resource ``nostall_prep``):

1. ``ray.data.read_images(paths, include_paths=True, mode="RGB", shuffle="files")``: read
   tasks that decode the JPEGs (PIL) on the worker nodes (the head has no CPUs);
2. ``map_batches(Transform, compute=ActorPoolStrategy(size=N), num_cpus=...,
   resources={"nostall_prep": ...})``:
   an actor pool on the worker nodes applying the torchvision / timm transform to each image
   (``PIL.Image.fromarray`` → transform → float32 CHW), label from the class folder;
3. ``iter_torch_batches(batch_size=64, device="cpu")`` on the driver, which runs on the
   head node.

Recipes (both float32, 224x224, batch 64):

* ``imagenet``: torchvision v2 ``RandomResizedCrop(224)``, ``RandomHorizontalFlip()``,
  ``PILToTensor()``, ``ToDtype(float32, scale=True)``, ``Normalize(ImageNet mean/std)``;
* ``timm``: ``timm.data.create_transform(224, is_training=True,
  auto_augment="rand-m9-mstd0.5-inc1", interpolation="bicubic", re_prob=0.25)`` (with
  Pillow 13 its RandAugment may posterize to 0 bits, which Pillow 13 refuses; the actors get
  Pillow 12's behaviour, black, as bench/recipes.py gives timm).

``samples_per_s`` counts the samples of ``batches`` batches after ``warmup`` batches, in
one pass over the data: ``paths`` is the photographs' list repeated as often as needed for
that (each new pass over a Ray dataset starts its pipeline anew, new actors included, about
15 s here: ``first_batch_s``, the wait for the first batch, shows that cost). The warm-up is
long (20 batches) because Ray Data runs ahead while the pipeline starts and the first
batches come from what it has buffered: over batches 8-18 it shows about 1.4 times its
steady rate. ``driver_cpu_per_batch`` is the user+system CPU time of the driver process
(all its threads: Ray's core worker and Ray Data's iterator) in the timed window, per
batch: the cost the loader puts on the trainer's process.

All the nodes run on this machine, so the window's CPU is accounted for too:
``machine_busy_cores`` (all cores busy, /proc/stat); from ``__main__``, ``head_cores``,
the head node's processes (GCS, raylet, and the actors Ray Data puts there: its stats,
autoscaling and usage actors, work on the trainer's machine besides the driver's) and
``workers_cores``, the worker nodes'; and ``other_cores``, the rest less the driver: well
above 0.1 means something else on the machine disturbed the figures.

Ray listens on all interfaces, so this script refuses to run outside a network namespace
of its own with only loopback in it. Run it from the repository root as

    unshare -rn sh -c 'ip link set lo up && .venv-test/bin/python bench/ray_data_baseline.py --recipe timm --batches 20'

(options: ``--workers 2 --worker-cpus 1 --cpu-quota 0.6 --warmup 20``; prints one JSON
object; about 50 s for 10 batches: 9 s cluster start, 20 s to the first batch). As a
library: ``run(address, recipe, batches, ...)`` against a running cluster. Needs ray[data],
torch, torchvision, timm, and pydantic (``iter_torch_batches`` imports ``ray.train``, which
refuses to load without it).
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import resource
import sys
import time
from collections import Counter
from typing import Any, Callable, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DEFAULT_PHOTOS = os.path.join(HERE, "data", "photos")
BATCH = 64
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
RECIPES = ("imagenet", "imagenet-u8", "timm")
PREP_RESOURCE = "nostall_prep"  # the custom resource of RayCluster's worker nodes


def make_transform(recipe: str) -> Any:
    """The per-image transform of `recipe`: a PIL image in, a float32 CHW tensor out."""
    if recipe == "imagenet":
        import torch
        from torchvision.transforms import v2

        return v2.Compose([
            v2.RandomResizedCrop(224), v2.RandomHorizontalFlip(), v2.PILToTensor(),
            v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD),
        ])  # fmt: skip
    if recipe == "imagenet-u8":
        # The same crop and flip, uint8 out: normalised on the GPU, as DALI and FFCV users do.
        from torchvision.transforms import v2

        return v2.Compose([v2.RandomResizedCrop(224), v2.RandomHorizontalFlip(), v2.PILToTensor()])
    if recipe == "timm":
        from timm.data import create_transform

        return create_transform(224, is_training=True, auto_augment="rand-m9-mstd0.5-inc1",
                                interpolation="bicubic", re_prob=0.25)  # fmt: skip
    raise ValueError(f"unknown recipe {recipe!r}; one of {RECIPES}")


def _pillow_posterize_to_zero_bits() -> None:
    """Pillow 13 refuses ``posterize(image, 0)``, which timm's RandAugment asks for now and
    then; Pillow 12 and earlier gave black. Give the actors the old behaviour."""
    from PIL import Image, ImageOps

    posterize = ImageOps.posterize
    if getattr(posterize, "_zero_bits_ok", False):
        return

    def posterize_any(image: Any, bits: int) -> Any:
        return Image.new(image.mode, image.size) if bits == 0 else posterize(image, bits)

    posterize_any._zero_bits_ok = True  # type: ignore[attr-defined]
    ImageOps.posterize = posterize_any


class Transform:
    """The actor of the pool: decoded images (HWC uint8) and paths in, a float32 NCHW batch
    and int64 labels out."""

    def __init__(self, recipe: str, classes: list[str]) -> None:
        import torch

        torch.set_num_threads(1)
        if recipe == "timm":
            _pillow_posterize_to_zero_bits()
        self.transform = make_transform(recipe)
        self.label = {name: i for i, name in enumerate(classes)}

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        import numpy as np
        import torch
        from PIL import Image

        images = [self.transform(Image.fromarray(image)) for image in batch["image"]]
        labels = [self.label[os.path.basename(os.path.dirname(p))] for p in batch["path"]]
        return {
            "image": torch.stack(images).numpy(),
            "label": np.asarray(labels, dtype=np.int64),
        }


def _cpu_s() -> float:
    """User+system CPU seconds of this process, all its threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _machine_busy_s() -> float:
    """CPU seconds the whole machine has been busy (all cores, /proc/stat), to tell how
    many cores were at work during a window: the cluster's and anybody else's."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def run(
    address: Optional[str],
    recipe: str,
    batches: int,
    *,
    photos: str = DEFAULT_PHOTOS,
    warmup: int = 20,
    concurrency: Optional[int] = None,
    actor_cpus: float = 0.5,
    read_cpus: float = 0.5,
    map_batch_size: int = BATCH,
    prefetch_batches: int = 1,
    batch_size: int = BATCH,
    cpu_meters: Optional[dict[str, Callable[[], float]]] = None,
) -> dict[str, Any]:
    """Measure Ray Data on `recipe` over the cluster at `address` (``ray.init`` is called
    unless the driver is connected already, and shut down again if it was called here).

    `concurrency` actors (default: one per node with the ``nostall_prep`` resource), each
    asking `actor_cpus` CPUs and a sliver of ``nostall_prep`` (so they run on worker nodes
    only); read tasks ask `read_cpus`. With 1-CPU worker nodes the defaults leave room for
    one read task beside each actor (actors asking a whole CPU would starve the reads).
    `cpu_meters`: name → CPU seconds used so far by some processes (e.g. ``{"head":
    lambda: cluster.cpu_seconds("head")}``), each reported as ``<name>_cores`` over the
    window; ``other_cores`` is then the machine's busy cores less the driver and these.
    """
    import ray
    from ray.data import ActorPoolStrategy, DataContext

    if recipe not in RECIPES:
        raise ValueError(f"unknown recipe {recipe!r}; one of {RECIPES}")
    own_driver = not ray.is_initialized()
    if own_driver:
        ray.init(address=address, _node_ip_address="127.0.0.1", log_to_driver=False)
    try:
        # Actors and remote functions defined here go by value: the worker nodes cannot
        # import this file (bench/ is on nobody's sys.path there).
        if __name__ != "__main__":  # __main__ goes by value anyway
            import ray.cloudpickle

            ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

        prep_nodes = [n for n in ray.nodes() if n["Alive"] and n["Resources"].get(PREP_RESOURCE, 0) > 0]
        if not prep_nodes:
            raise RuntimeError(f"no alive node carries the resource {PREP_RESOURCE!r}")
        if concurrency is None:
            concurrency = len(prep_nodes)
        ctx = DataContext.get_current()
        ctx.enable_progress_bars = False
        ctx.print_on_execution_start = False

        classes = sorted(e.name for e in os.scandir(photos) if e.is_dir())
        files = sorted(glob.glob(os.path.join(photos, "*", "*.jpg")))
        if not files:
            raise FileNotFoundError(f"no class-folder JPEGs in {photos}")
        # Enough for the pipeline to be still reading and mapping when the window ends (it
        # buffers ahead: were the data to run out, the last batches would come from that).
        repeats = math.ceil(2 * (warmup + batches + 16) * batch_size / len(files))
        sliver = {PREP_RESOURCE: 0.01}
        ds = ray.data.read_images(
            files * repeats, include_paths=True, mode="RGB", shuffle="files", num_cpus=read_cpus,
            resources=sliver,
        ).map_batches(
            Transform, fn_constructor_args=(recipe, classes), batch_size=map_batch_size,
            compute=ActorPoolStrategy(size=concurrency), num_cpus=actor_cpus, resources=sliver,
            batch_format="numpy",
        )  # fmt: skip

        seen = samples = 0
        t0 = time.perf_counter()
        first_batch_s = 0.0
        window: dict[str, float] = {}
        placement: Optional[list[int]] = None

        meters = dict(cpu_meters or {})

        def marks() -> dict[str, float]:
            out = {"t": time.perf_counter(), "driver": _cpu_s(), "busy": _machine_busy_s()}
            out.update({name: meter() for name, meter in meters.items()})
            return out

        start = marks()
        for batch in ds.iter_torch_batches(batch_size=batch_size, device="cpu",
                                           prefetch_batches=prefetch_batches, drop_last=True):  # fmt: skip
            images, labels = batch["image"], batch["label"]
            assert images.shape[1:] == (3, 224, 224) and (images.dtype.is_floating_point or recipe == "imagenet-u8")
            seen += 1
            if seen == 1:
                first_batch_s = time.perf_counter() - t0
            if seen == warmup:
                start = marks()
            elif seen > warmup:
                samples += len(labels)
            if seen == warmup + batches:
                end = marks()
                window = {k: end[k] - start[k] for k in end}
                # Asked while the actor pool is alive: leaving the loop stops it.
                placement = _actor_placement(prep_nodes)
                break
        if not window:
            raise RuntimeError(f"the pass over {len(files)} x {repeats} photos ended after {seen} batches")
        seconds = window["t"]
        result = {
            "loader": "ray-data",
            "recipe": recipe,
            "batches": batches,
            "warmup": warmup,
            "batch_size": batch_size,
            "samples": samples,
            "seconds": round(seconds, 3),
            "samples_per_s": round(samples / seconds, 2),
            "driver_cpu_per_batch": round(window["driver"] / batches, 4),
            "driver_cores": round(window["driver"] / seconds, 2),
            "first_batch_s": round(first_batch_s, 3),
            "machine_busy_cores": round(window["busy"] / seconds, 2),
            "machine_cores": os.cpu_count(),
            "concurrency": concurrency,
            "actor_cpus": actor_cpus,
            "read_cpus": read_cpus,
            "prep_nodes": len(prep_nodes),
            "actors_per_node": placement,
            "ray": ray.__version__,
        }
        for name in meters:
            result[f"{name}_cores"] = round(window[name] / seconds, 2)
        if meters:
            other = window["busy"] - window["driver"] - sum(window[name] for name in meters)
            result["other_cores"] = round(other / seconds, 2)
        return result
    finally:
        if own_driver:
            ray.shutdown()


def _actor_placement(prep_nodes: list[dict]) -> Optional[list[int]]:
    """How many of this job's live `Transform` actors each prep node holds, in node order
    (from the GCS's actor table: the state API needs the full dashboard, not started)."""
    import ray
    from ray._private import state

    try:
        job = ray.get_runtime_context().get_job_id()
        actors = state.actors().values()
    except Exception:
        return None
    per_node = Counter(
        a["Address"]["NodeID"] for a in actors
        if a["JobID"] == job and a["State"] == "ALIVE" and "Transform" in a["ActorClassName"]
    )  # fmt: skip
    return [per_node.get(n["NodeID"], 0) for n in prep_nodes]


def main() -> None:
    sys.path.insert(0, os.path.join(REPO, "python", "tests"))
    from ray_cluster import RayCluster, in_own_netns  # noqa: E402

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recipe", choices=RECIPES, default="imagenet")
    ap.add_argument("--batches", type=int, default=20, help="batches timed, after --warmup")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--photos", default=DEFAULT_PHOTOS)
    ap.add_argument("--workers", type=int, default=2, help="worker (prep) nodes")
    ap.add_argument("--worker-cpus", type=int, default=1, help="--num-cpus of each worker node")
    ap.add_argument("--cpu-quota", type=float, default=None,
                    help="cores each worker node may use (CPU cgroup), e.g. 0.6; default: no limit")
    ap.add_argument("--concurrency", type=int, default=None, help="actors; default one per worker node")
    ap.add_argument("--actor-cpus", type=float, default=0.5)
    ap.add_argument("--read-cpus", type=float, default=0.5)
    ap.add_argument("--object-store-mb", type=int, default=1024, help="object store of each node")
    ap.add_argument("--json", help="also write the result here")
    args = ap.parse_args()

    if not in_own_netns():
        sys.exit(
            "ray_data_baseline.py: refusing to run outside a network namespace of its own (Ray "
            "listens on all interfaces). Run:\n  unshare -rn sh -c 'ip link set lo up && "
            ".venv-test/bin/python bench/ray_data_baseline.py --recipe timm --batches 20'"
        )
    t0 = time.perf_counter()
    with RayCluster(workers=args.workers, worker_cpus=args.worker_cpus, cpu_quota=args.cpu_quota,
                    object_store_bytes=args.object_store_mb * 1024**2) as cluster:  # fmt: skip
        result = run(cluster.address, args.recipe, args.batches, photos=args.photos, warmup=args.warmup,
                     concurrency=args.concurrency, actor_cpus=args.actor_cpus, read_cpus=args.read_cpus,
                     cpu_meters={"head": lambda: cluster.cpu_seconds("head"),
                                 "workers": lambda: cluster.cpu_seconds("workers")})  # fmt: skip
        result["cluster"] = {"workers": args.workers, "worker_cpus": args.worker_cpus,
                             "cpu_quota": args.cpu_quota, "startup_s": round(cluster.startup_s, 2)}  # fmt: skip
    result["wall_s"] = round(time.perf_counter() - t0, 2)
    text = json.dumps(result)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
