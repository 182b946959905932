"""The loader's defaults against an exhaustive search of static configurations.

For each cell of a grid (emulated storage bandwidth and latency, a cache share, and a
training step consuming at a multiple of the pipeline's own rate), this runs `nostall
bench` with no thread settings (the defaults: reads in flight by Little's law), with
the old defaults (2 fetch threads fixed, prefetch 4), and with every static
configuration of a search space (fetch threads held fixed x prefetch), and reports the
defaults' rate against the best static one and against the old defaults. The best of
many noisy runs is biased upwards, so the defaults and the best static configuration are
then measured again, alternated, and their medians compared.

Data: the 2000 photographs of bench/compare.sh. Pipeline: the train preset, 2 prep
threads (the machine's cores), batch 64. Each run: one warm-up epoch (it fills the cache),
then EPOCHS measured epochs. The model rate is a multiple of the pipeline's own rate,
measured first (unthrottled, no step; through the S3 server for `--cells s3`).

With --prep 1,2,3 the static search also varies prep threads (the defaults keep the
machine's cores, what threads="auto" gives); without it prep is held at 2.

`--cells s3` reads through the S3 client from a local s3s-fs serving a copy of the
photographs (bench/s3_local.py): the cell where fetching costs the loader the most CPU
(bench/role_cpu.py), unthrottled and behind a 20 MB/s link, step at 2x and 0.5x.

`--storage`, `--latency` and `--cache` keep only the cells with those values (the grid in
pieces); `--steps 0.4,2` replaces the step multiples; `--busy-step` spends each training
step on a core instead of asleep (a training process whose own CPU competes with the
loader's: with `--prep 1,2`, whether fewer prep threads would serve it better);
`--subset 500` reads 500 of the photographs, the first of each class in turn (hard links
in bench/out/photos-500: the slow 5 MB/s cells in a quarter of the time).

Usage: python3 bench/grid.py [--cells quick|full|s3] [--storage 80,none] [--latency 20]
                             [--cache 0.35,1] [--steps 0.5,2] [--busy-step] [--subset 500]
                             [--epochs 1] [--confirm 3] [--prep 2] [--fetch 2,8,32,128]
                             [--out bench/out/grid.json]
"""

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import time

from s3_local import S3Server

NOSTALL = "./target/release/nostall"
DATA = "bench/data/photos"
FETCH = [2, 8, 32, 128]
PREFETCH = [2, 4, 8]


# Where the runs read, and the environment that lets them (set once the S3 server runs).
SOURCE = {"data": DATA, "env": None}


def bench(epochs, *flags, threads=2):
    cmd = [NOSTALL, "bench", SOURCE["data"], "--threads", str(threads), "--no-floor", "--json",
           "--epochs", str(epochs), *map(str, flags)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True,
                         env=SOURCE["env"]).stdout
    return json.loads(out)["images_per_s"]


def cells(kind):
    if kind == "quick":
        storage = [None, 20.0]
        latency = [0.0, 20.0]
        cache = [0.0]
        model = [2.0]
    elif kind == "s3":
        storage = [None, 20.0]
        latency = [0.0]
        cache = [0.0]
        model = [2.0, 0.5]
    else:
        storage = [5.0, 20.0, 80.0, None]
        latency = [0.0, 20.0]
        cache = [0.0, 0.35, 1.0]
        model = [0.5, 2.0]
    return list(itertools.product(storage, latency, cache, model))


def cell_flags(mbps, latency, cache, model_rate):
    flags = ["--model-rate", f"{model_rate:.1f}"]
    if mbps is not None:
        flags += ["--throttle-mbps", mbps]
    if latency:
        flags += ["--latency-ms", latency]
    if cache:
        flags += ["--cache", "minio", "--cache-size", f"{cache * 100:.0f}%"]
    return flags


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cells", choices=["quick", "full", "s3"], default="quick")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--out", default="bench/out/grid.json")
    parser.add_argument("--confirm", type=int, default=3,
                        help="rounds measuring the defaults and the best static again")
    parser.add_argument("--prep", default="2",
                        help="prep thread counts of the static search (comma-separated)")
    parser.add_argument("--storage", default=None,
                        help="only the cells of these storage rates (MB/s, comma-separated; "
                             "'none' for unthrottled): the grid in pieces")
    parser.add_argument("--latency", default=None,
                        help="only the cells of these latencies (ms, comma-separated)")
    parser.add_argument("--cache", default=None,
                        help="only the cells of these cache shares (0-1, comma-separated)")
    parser.add_argument("--steps", default=None,
                        help="the step's multiples of the pipeline's rate (comma-separated), "
                             "instead of the cells' own")
    parser.add_argument("--busy-step", action="store_true",
                        help="spend each training step on a core instead of asleep")
    parser.add_argument("--subset", type=int, default=None,
                        help="read only this many of the photographs (the first of each "
                             "class in turn), linked into bench/out/")
    parser.add_argument("--fetch", default=",".join(map(str, FETCH)),
                        help="fetch thread counts of the static search (comma-separated)")
    args = parser.parse_args()
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "nostall-cli"], check=True)
    if args.subset is not None:
        SOURCE["data"] = link_subset(DATA, args.subset)
    server = None
    if args.cells == "s3":
        server = S3Server(SOURCE["data"])
        SOURCE.update(data=S3Server.url, env=server.env())
    try:
        return run_cells(args, bench(2))
    finally:
        if server:
            server.stop()


def link_subset(data, count):
    """A folder of hard links to `count` of the photographs in `data`, taken from each
    class in turn so that every class keeps its share."""
    classes = sorted(c for c in os.listdir(data) if os.path.isdir(os.path.join(data, c)))
    files = {c: sorted(os.listdir(os.path.join(data, c))) for c in classes}
    out = os.path.join("bench", "out", f"photos-{count}")
    taken = 0
    for i in itertools.count():
        if taken == count or all(i >= len(f) for f in files.values()):
            break
        for c in classes:
            if taken < count and i < len(files[c]):
                os.makedirs(os.path.join(out, c), exist_ok=True)
                link = os.path.join(out, c, files[c][i])
                if not os.path.exists(link):
                    os.link(os.path.join(data, c, files[c][i]), link)
                taken += 1
    return out


def run_cells(args, pipeline):
    print(f"pipeline alone: {pipeline:.0f} images/s", flush=True)
    rows = []
    chosen = cells(args.cells)
    for axis, given in enumerate([args.storage, args.latency, args.cache]):
        if given is not None:
            wanted = {None if x == "none" else float(x) for x in given.split(",")}
            chosen = [cell for cell in chosen if cell[axis] in wanted]
    if args.steps is not None:
        steps = [float(x) for x in args.steps.split(",")]
        chosen = list(dict.fromkeys(cell[:3] + (step,) for cell in chosen for step in steps))
    for mbps, latency, cache, model in chosen:
        base = cell_flags(mbps, latency, cache, model * pipeline)
        if args.busy_step:
            base.append("--busy-step")
        started = time.time()
        auto = bench(args.epochs, *base)
        old = bench(args.epochs, *base, "--fetch-threads", 2, "--fixed-reads", "--fixed-prep")
        static = {}
        preps = [int(p) for p in args.prep.split(",")]
        fetches = [int(f) for f in args.fetch.split(",")]
        for prep, fetch, prefetch in itertools.product(preps, fetches, PREFETCH):
            static[f"prep {prep}, fetch {fetch}, prefetch {prefetch}"] = bench(
                args.epochs, *base, "--fetch-threads", fetch, "--fixed-reads", "--fixed-prep",
                "--prefetch", prefetch, threads=prep)
        best = max(static, key=static.get)
        # The best of many noisy runs is biased upwards: measure it again beside the
        # defaults, alternated, and compare the medians of those rounds.
        prep, fetch, prefetch = (int(x.split()[1]) for x in best.split(", "))
        again = {"defaults": [], "best": []}
        for round in range(args.confirm):
            order = ["defaults", "best"] if round % 2 == 0 else ["best", "defaults"]
            for which in order:
                flags = [] if which == "defaults" else [
                    "--fetch-threads", fetch, "--fixed-reads", "--fixed-prep", "--prefetch", prefetch]
                again[which].append(bench(args.epochs, *base, *flags,
                                          threads=2 if which == "defaults" else prep))
        median = {k: statistics.median(v) for k, v in again.items()}
        row = {
            "storage_mbps": mbps, "latency_ms": latency, "cache": cache, "model": model,
            "busy_step": args.busy_step,
            "defaults": auto, "old_defaults": old, "best_static": static[best],
            "best_static_config": best, "static": static, "confirm": again,
            "vs_best": median["defaults"] / median["best"], "vs_old": auto / old,
        }
        rows.append(row)
        storage = "unthrottled" if mbps is None else f"{mbps:g} MB/s"
        print(f"{storage}, {latency:g} ms, cache {cache:.0%}, model {model:g}x: defaults "
              f"{auto:.0f}/s, best static {static[best]:.0f}/s ({best}); again, "
              f"alternated ({args.confirm} rounds, medians): {median['defaults']:.0f} vs "
              f"{median['best']:.0f}/s -> {row['vs_best']:.3f}; old defaults {old:.0f}/s -> "
              f"{row['vs_old']:.2f}x "
              f"[{time.time() - started:.0f} s]", flush=True)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"pipeline": pipeline, "cells": rows}, f, indent=1)
    worst = min(r["vs_best"] for r in rows)
    print(f"worst cell: {worst:.3f} of the best static configuration")
    return 0


if __name__ == "__main__":
    sys.exit(main())
