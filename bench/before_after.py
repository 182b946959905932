"""Two builds of nostall measured side by side: did a change leave the figures as they were?

A change that renovates (moves code, adds seams) must leave every figure no worse. This
runs the measurements of `make bench`, the grid, the audio comparison and coordinated prep
with each build in turn, alternating builds within each measurement (the machine is shared
and noisy: a ratio of two runs side by side is the figure, never a run against an old
number), and writes one JSON file and a table of after / before.

A build is a folder holding `nostall` (the release binary) and `pylib/` (its release wheel
installed with `pip install --no-deps --target BUILD/pylib WHEEL`); the Python runs put
`pylib` first on PYTHONPATH, so that their jobs, and an agent they start, are that build's.

Measurements (data: bench/make_photos.py's 2 000 photographs, bench/make_audio.py's clips):
  bench-2t, bench-1t     `nostall bench PHOTOS --threads N --epochs 3 --no-floor` (make
                         bench's rows, without the decode floor)
  grid-unthrottled-2x    `nostall bench --model-rate 7000 --epochs 1`: the grid's
                         unthrottled cell, a training step at about twice the pipeline
  grid-20mbps-20ms       `nostall bench` with the defaults behind a 20 MB/s, 20 ms link
                         (one of the grid's cells), 2 epochs
  grid-cache-35          `nostall bench` with a 35% minio cache, 3 epochs
  audio-m5, audio-mel    `bench/audio_compare.py`'s nostall child (batch 32, 2 threads)
  coordinated-4          `bench/coordinated_prep.py --jobs 4 --rounds 1`: alone, shared

Usage: .venv-test/bin/python bench/before_after.py BEFORE AFTER [--rounds 1]
         [--photos bench/data/photos] [--audio bench/out/audio/clips]
         [--only bench-2t,...] [--json bench/out/before_after.json]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PY = sys.executable


def env_for(build):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(build, "pylib") + os.pathsep + env.get("PYTHONPATH", "")
    return env


def nostall_bench(build, photos, *flags):
    cmd = [os.path.join(build, "nostall"), "bench", photos, "--json", "--no-floor", *flags]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["images_per_s"]


def audio(build, clips, pipeline):
    cmd = [PY, os.path.join(HERE, "audio_compare.py"), "--child", "nostall",
           "--pipeline", pipeline, "--data", clips, "--epochs", "1"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True,
                         env=env_for(build)).stdout
    line = next(l for l in out.splitlines() if l.startswith("RESULT"))
    n, seconds = json.loads(line[len("RESULT"):])
    return n / seconds


def coordinated(build, photos):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "c.json")
        cmd = [PY, os.path.join(HERE, "coordinated_prep.py"), "--jobs", "4", "--rounds", "1",
               "--data", photos, "--json", out]
        subprocess.run(cmd, check=True, capture_output=True, text=True, env=env_for(build))
        with open(out) as f:
            med = json.load(f)["images_per_s"]
    return med


MEASURES = {
    "bench-2t": lambda b, a: nostall_bench(b, a.photos, "--threads", "2", "--epochs", "3"),
    "bench-1t": lambda b, a: nostall_bench(b, a.photos, "--threads", "1", "--epochs", "3"),
    "grid-unthrottled-2x": lambda b, a: nostall_bench(
        b, a.photos, "--threads", "2", "--model-rate", "7000", "--epochs", "1"),
    "grid-20mbps-20ms": lambda b, a: nostall_bench(
        b, a.photos, "--throttle-mbps", "20", "--latency-ms", "20", "--epochs", "2"),
    "grid-cache-35": lambda b, a: nostall_bench(
        b, a.photos, "--cache", "minio", "--cache-size", "35%", "--epochs", "3"),
    "audio-m5": lambda b, a: audio(b, a.audio, "m5"),
    "audio-mel": lambda b, a: audio(b, a.audio, "melspec"),
    "coordinated-4": lambda b, a: coordinated(b, a.photos),
}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("before")
    p.add_argument("after")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--photos", default=os.path.join(HERE, "data", "photos"))
    p.add_argument("--audio", default=os.path.join(HERE, "out", "audio", "clips"))
    p.add_argument("--only", help="comma-separated names of measurements to run")
    p.add_argument("--json", default=os.path.join(HERE, "out", "before_after.json"))
    args = p.parse_args()
    names = args.only.split(",") if args.only else list(MEASURES)
    results = {}
    for name in names:
        runs = {"before": [], "after": []}
        for r in range(args.rounds):
            # Alternate which build goes first, so that neither always runs second.
            order = ("before", "after") if r % 2 == 0 else ("after", "before")
            for which in order:
                runs[which].append(MEASURES[name](getattr(args, which), args))
        results[name] = runs
        print(f"{name}: before {runs['before']}, after {runs['after']}", flush=True)
    print(f"\n{'measurement':<22}{'before':>16}{'after':>16}{'after/before':>14}")
    for name, runs in results.items():
        for key in (["alone", "shared"] if isinstance(runs["before"][0], dict) else [None]):
            pick = (lambda v: v[key]) if key else (lambda v: v)
            b = statistics.median(pick(v) for v in runs["before"])
            a = statistics.median(pick(v) for v in runs["after"])
            label = f"{name} {key}" if key else name
            print(f"{label:<22}{b:>16.1f}{a:>16.1f}{a / b:>14.3f}")
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"before": args.before, "after": args.after, "rounds": args.rounds,
                   "cpus": os.cpu_count(), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
