"""Throughput of reference data loaders on the standard ImageNet training pipeline.

Measures images/s and peak memory of, on an ImageFolder dataset of JPEGs:

* ``torch``: ``torch.utils.data.DataLoader`` over
  ``torchvision.datasets.ImageFolder`` with RandomResizedCrop(224),
  RandomHorizontalFlip(), ToTensor(), Normalize(ImageNet mean/std);
  batch 64, shuffle=True, num_workers=THREADS, persistent_workers=False,
  ``torch.set_num_threads(1)`` in the main process.
* ``dali``: an NVIDIA DALI pipeline run entirely on the CPU
  (``device_id=None``, num_threads=THREADS, batch 64):
  readers.file(random_shuffle=True) -> decoders.image_random_crop(cpu, RGB)
  -> resize(224x224) -> crop_mirror_normalize(FLOAT, CHW, ImageNet mean/std
  in 0-255 scale, mirror=random.coin_flip()).

Both produce float32 normalized NCHW batches of 64x3x224x224 (the last torch
batch of an epoch is partial).  One epoch is ceil(N/64) batches; DALI's
reader wraps around instead of emitting a partial batch, so a DALI "epoch"
holds ceil(N/64)*64 images.  Throughput counts the images actually
delivered.  Epoch 1 (including DataLoader/pipeline construction) is warm-up
and reported separately; ``images_per_s`` is the rate over epochs 2..E.
The page cache is warmed (every file read once) before each loader.

Each loader runs in a fresh child process (a re-invocation of this script),
so imports and memory of one loader do not leak into the other; this
process samples the child's process tree (child + DataLoader workers)
every 50 ms: ``peak_rss_mb`` is the peak of the summed RSS (shared pages
of forked workers counted once per process), ``peak_pss_mb`` the peak of
the summed PSS (shared pages split; sampled every 0.5 s).
``images_per_cpu_s`` divides the same images by the user+system CPU time
the child and its (reaped) workers spent in epochs 2..E: a measure of
efficiency independent of how many cores were free.  ``other_cpu_cores`` is
the average CPU load from *other* processes during the run (machine busy
time minus this process and the child tree, in cores): well above ~0.1
means the figures were disturbed by something else running.

Usage (bench venv, see setup_env.sh):
    .venv-bench/bin/python bench/baselines.py bench/data/photos \\
        --loaders torch,dali --threads 2 --epochs 2 --json bench/out/baselines.json
On a shared machine add ``--wait-idle 600 --retries 5`` to start each run in
a quiet moment and re-run those disturbed by other processes.

One JSON line per loader goes to stdout (and is appended to --json):
{"loader", "images_per_s", "epochs", "threads", "peak_rss_mb", ...extras}.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import subprocess
import sys
import time

BATCH_SIZE = 64
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
SEED = 0
RESULT_PREFIX = "RESULT "
IDLE_CORES = 0.1      # "idle" = other processes use less than this many cores
IDLE_WINDOW_S = 5.0


# --------------------------------------------------------------------------- data

def list_images(root: str) -> list[str]:
    files = []
    for dp, _, names in os.walk(root):
        files.extend(os.path.join(dp, n) for n in names if n.lower().endswith((".jpg", ".jpeg")))
    return sorted(files)


def cpu_seconds() -> float:
    """User+system CPU time of this process and its reaped children."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def self_cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def system_busy_seconds() -> float:
    """Non-idle CPU time of the whole machine so far, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = v
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def wait_idle(max_wait: float) -> bool:
    """Wait (up to max_wait s) for a window with < IDLE_CORES busy cores."""
    deadline = time.monotonic() + max_wait
    while True:
        b0 = system_busy_seconds()
        time.sleep(IDLE_WINDOW_S)
        if (system_busy_seconds() - b0) / IDLE_WINDOW_S < IDLE_CORES:
            return True
        if time.monotonic() >= deadline:
            print("machine still busy; measuring anyway", file=sys.stderr)
            return False


def warm_page_cache(files: list[str]) -> int:
    total = 0
    for f in files:
        with open(f, "rb") as fh:
            total += len(fh.read())
    return total


# ------------------------------------------------------------------------ loaders

def run_torch(root: str, threads: int, epochs: int) -> dict:
    import torch
    import torchvision
    from torchvision import datasets, transforms

    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    tf = transforms.Compose([
        transforms.RandomResizedCrop(224),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(MEAN, STD),
    ])
    ds = datasets.ImageFolder(root, transform=tf)
    loader = torch.utils.data.DataLoader(
        ds, batch_size=BATCH_SIZE, shuffle=True, num_workers=threads,
        persistent_workers=False)
    rss_before = tree_memory(os.getpid())[0]

    epoch_images, epoch_seconds, epoch_cpu = [], [], []
    for epoch in range(epochs):
        n = 0
        t0, c0 = time.perf_counter(), cpu_seconds()
        for x, y in loader:  # a fresh set of workers per epoch (persistent_workers=False)
            if n == 0 and epoch == 0:
                check_batch(tuple(x.shape), str(x.dtype), "torch.float32")
            n += x.shape[0]
        epoch_seconds.append(time.perf_counter() - t0)
        epoch_cpu.append(cpu_seconds() - c0)
        epoch_images.append(n)
    return dict(epoch_images=epoch_images, epoch_seconds=epoch_seconds, epoch_cpu=epoch_cpu,
                rss_before_mb=rss_before,
                versions={"torch": torch.__version__, "torchvision": torchvision.__version__},
                start_method=torch.multiprocessing.get_start_method(),
                dataset_size=len(ds))


def run_dali(root: str, threads: int, epochs: int) -> dict:
    import numpy as np
    import nvidia.dali as dali
    from nvidia.dali import fn, pipeline_def, types

    @pipeline_def(batch_size=BATCH_SIZE, num_threads=threads, device_id=None, seed=SEED)
    def imagenet_train(file_root):
        jpegs, labels = fn.readers.file(file_root=file_root, random_shuffle=True, name="Reader")
        images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB)
        images = fn.resize(images, resize_x=224, resize_y=224)
        images = fn.crop_mirror_normalize(
            images, dtype=types.FLOAT, output_layout="CHW",
            mean=[m * 255 for m in MEAN], std=[s * 255 for s in STD],
            mirror=fn.random.coin_flip())
        return images, labels

    rss_before = tree_memory(os.getpid())[0]
    epoch_images, epoch_seconds, epoch_cpu = [], [], []
    pipe = None
    size = batches = None
    for epoch in range(epochs):
        n = 0
        t0, c0 = time.perf_counter(), cpu_seconds()
        if pipe is None:  # construction counts towards the warm-up epoch
            pipe = imagenet_train(root)
            pipe.build()
            size = pipe.epoch_size("Reader")
            batches = math.ceil(size / BATCH_SIZE)
        for _ in range(batches):
            images, labels = pipe.run()
            # CPU outputs are complete when run() returns; view them as one
            # dense array (zero-copy when contiguous) and read from it.
            arr = np.asarray(images.as_tensor())
            if n == 0 and epoch == 0:
                check_batch(arr.shape, str(arr.dtype), "float32")
            float(arr[-1, -1, -1, -1])
            n += len(images)
        epoch_seconds.append(time.perf_counter() - t0)
        epoch_cpu.append(cpu_seconds() - c0)
        epoch_images.append(n)
    return dict(epoch_images=epoch_images, epoch_seconds=epoch_seconds, epoch_cpu=epoch_cpu,
                rss_before_mb=rss_before, versions={"nvidia-dali": dali.__version__},
                dataset_size=size)


LOADERS = {"torch": run_torch, "dali": run_dali}


def check_batch(shape, dtype: str, want_dtype: str) -> None:
    if tuple(shape) != (BATCH_SIZE, 3, 224, 224) or dtype != want_dtype:
        raise RuntimeError(f"unexpected batch {tuple(shape)} {dtype}")


# ------------------------------------------------------------------------ memory

def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _pss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    return 0.0


def tree_memory(pid: int, pss: bool = False) -> tuple[float, float]:
    """(summed RSS, summed PSS or 0) in MiB over pid and all its descendants."""
    import psutil
    try:
        procs = [psutil.Process(pid)]
        procs += procs[0].children(recursive=True)
    except psutil.NoSuchProcess:
        return 0.0, 0.0
    rss = pss_total = 0.0
    for p in procs:
        try:
            rss += _rss_mb(p.pid)
            if pss:
                pss_total += _pss_mb(p.pid)
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            pass  # a worker exited between listing and reading
    return rss, pss_total



class ChargedMemory:
    """The peak of the memory the kernel charges to a process tree: a memory cgroup of
    its own (v1's ``memory.max_usage_in_bytes`` or v2's ``memory.peak``), entered by the
    child before it runs (``enter`` as ``preexec_fn``). Unlike summed PSS sampled now and
    then, it counts shared memory that no process maps at the instant (a DataLoader's
    batches in flight between its workers and the main process are file descriptors in a
    queue) and every peak between samples; it leaves out pages charged before (shared
    libraries and files already in the page cache). ``peak_mb`` is None where no cgroup
    can be made (not root, no memory controller)."""

    def __init__(self, name: str):
        self.dir = None
        for root, peak in (("/sys/fs/cgroup/memory", "memory.max_usage_in_bytes"),
                           ("/sys/fs/cgroup", "memory.peak")):
            try:
                if os.path.isdir(root) and os.access(root, os.W_OK):
                    path = os.path.join(root, f"{name}-{os.getpid()}")
                    os.makedirs(path, exist_ok=True)
                    if os.path.exists(os.path.join(path, peak)):
                        self.dir, self.peak_file = path, peak
                        break
                    os.rmdir(path)
            except OSError:
                continue

    def enter(self) -> None:
        """Moves the calling process (a child before its exec) into the cgroup."""
        if self.dir is not None:
            with open(os.path.join(self.dir, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))

    def peak_mb(self) -> float | None:
        if self.dir is None:
            return None
        with open(os.path.join(self.dir, self.peak_file)) as f:
            return int(f.read()) / 2**20

    def close(self) -> None:
        """Removes the cgroup (its processes have ended)."""
        if self.dir is not None:
            try:
                os.rmdir(self.dir)
            except OSError:
                pass


# ------------------------------------------------------------------------ driver

def child_main(args) -> int:
    res = LOADERS[args.child](args.data, args.threads, args.epochs)
    print(RESULT_PREFIX + json.dumps(res), flush=True)
    return 0


def measure(loader: str, args) -> dict:
    files = list_images(args.data)
    if not files:
        raise SystemExit(f"no JPEG files under {args.data}")
    nbytes = warm_page_cache(files)
    cmd = [sys.executable, os.path.abspath(__file__), args.data, "--child", loader,
           "--threads", str(args.threads), "--epochs", str(args.epochs)]
    load_before = os.getloadavg()
    busy0, own0, t0 = system_busy_seconds(), self_cpu_seconds(), time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    peak_rss = peak_pss = 0.0
    last_pss = 0.0
    while True:
        # wait4 also returns the CPU time of the child and its reaped workers.
        pid, status, child_ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        now = time.monotonic()
        want_pss = now - last_pss >= 0.5
        rss, pss = tree_memory(proc.pid, pss=want_pss)
        peak_rss = max(peak_rss, rss)
        if want_pss:
            peak_pss = max(peak_pss, pss)
            last_pss = now
        time.sleep(0.05)
    wall = time.monotonic() - t0
    child_cpu = child_ru.ru_utime + child_ru.ru_stime
    other_cpu = system_busy_seconds() - busy0 - child_cpu - (self_cpu_seconds() - own0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    out = proc.stdout.read()
    if proc.returncode != 0:
        raise SystemExit(f"{loader}: child failed with exit code {proc.returncode}")
    res = json.loads(next(l for l in out.splitlines() if l.startswith(RESULT_PREFIX))
                     [len(RESULT_PREFIX):])
    imgs, secs = res.pop("epoch_images"), res.pop("epoch_seconds")
    cpu = res.pop("epoch_cpu")
    steady_imgs, steady_secs = sum(imgs[1:]), sum(secs[1:])
    return {
        "loader": loader,
        "images_per_s": round(steady_imgs / steady_secs, 1) if steady_secs else None,
        "epochs": args.epochs,
        "threads": args.threads,
        "peak_rss_mb": round(peak_rss, 1),
        "peak_pss_mb": round(peak_pss, 1),
        "rss_before_mb": round(res.pop("rss_before_mb"), 1),
        "warmup_images_per_s": round(imgs[0] / secs[0], 1),
        "epoch_images": imgs,
        "epoch_seconds": [round(s, 3) for s in secs],
        "epoch_cpu_seconds": [round(c, 3) for c in cpu],
        "images_per_cpu_s": round(steady_imgs / sum(cpu[1:]), 1) if sum(cpu[1:]) else None,
        "batch_size": BATCH_SIZE,
        "dataset": os.path.abspath(args.data),
        "dataset_files": len(files),
        "dataset_mb": round(nbytes / 1e6, 1),
        "loadavg_before": [round(x, 2) for x in load_before],
        "other_cpu_cores": round(max(other_cpu, 0.0) / wall, 2),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        **res,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", help="ImageFolder root (class subdirectories of JPEGs)")
    ap.add_argument("--loaders", default="torch,dali", help="comma list of: " + ",".join(LOADERS))
    ap.add_argument("--threads", type=int, default=2,
                    help="torch num_workers / DALI num_threads (default 2)")
    ap.add_argument("--epochs", type=int, default=2, help="epochs, the first is warm-up (default 2)")
    ap.add_argument("--json", help="append one JSON line per loader to this file")
    ap.add_argument("--wait-idle", type=float, default=0.0, metavar="S",
                    help="before each run, wait up to S seconds for the machine to be idle "
                         f"(< {IDLE_CORES} busy cores over {IDLE_WINDOW_S:.0f} s); default 0")
    ap.add_argument("--retries", type=int, default=0,
                    help=f"re-run a measurement disturbed by other load (other_cpu_cores > "
                         f"{IDLE_CORES}) up to this many times, keeping the least disturbed")
    ap.add_argument("--child", choices=sorted(LOADERS), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.epochs < 2:
        ap.error("--epochs must be >= 2 (epoch 1 is warm-up)")
    if args.child:
        return child_main(args)

    loaders = [l.strip() for l in args.loaders.split(",") if l.strip()]
    for l in loaders:
        if l not in LOADERS:
            ap.error(f"unknown loader {l!r}")
    for l in loaders:
        best = None
        for attempt in range(args.retries + 1):
            if args.wait_idle > 0:
                wait_idle(args.wait_idle)
            res = measure(l, args)
            if best is None or res["other_cpu_cores"] < best["other_cpu_cores"]:
                best = res
            if res["other_cpu_cores"] <= IDLE_CORES:
                break
            print(f"{l}: run disturbed by other load ({res['other_cpu_cores']} cores, "
                  f"{res['images_per_s']} images/s)", file=sys.stderr)
        best["attempts"] = attempt + 1
        line = json.dumps(best)
        print(line, flush=True)
        if args.json:
            os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
            with open(args.json, "a") as f:
                f.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
