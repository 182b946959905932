"""Validation of `nostall analyze`: predicted against measured throughput over a grid.

Data: 2000 real photographs (bench/make_photos.py: crops of Debian's mate-backgrounds,
GPL-2+, 500x375 JPEG q90). Storage: the files, read through the page cache, behind
nostall's emulated link at two bandwidths (the link stands for a slow disk or network
store). Pipeline: the ImageNet training preset at 224, batch 64.

1. For each bandwidth, `nostall analyze --no-run` measures the rates once (F through the
   link, P(1) and P(2) with the data in memory, C) and saves them.
2. For every cell of cache {0, 25, 50, 100%} x prep threads {1, 2} x bandwidth x model
   rate, `nostall analyze --rates` predicts from those saved rates and then runs the
   real loader (after one cache-filling epoch when a cache is on) for one full epoch,
   fed to a simulated model. The three model rates are set per cell from the predicted
   rate of the input pipeline alone (R): none (the pipeline's own bottleneck: fetch or
   prep), 1.25 R (still data-bound, with compute overlapping), 0.6 R (model-bound).
3. The recommendation: at the lower bandwidth with 2 threads and a model rate the
   storage cannot feed, runs with the recommended cache x* and with x*/2, to see the
   data stall vanish and not.

Usage: python3 bench/analyze_grid.py [--bandwidths 10,30] [--out bench/out/analyze_grid.json]
Prints a Markdown table (docs/analyze.md holds the last one) and the error summary.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NOSTALL = REPO / "target" / "release" / "nostall"
DATA = REPO / "bench" / "data" / "photos"


def sh(*cmd: str) -> str:
    return subprocess.run(cmd, cwd=REPO, check=True, capture_output=True, text=True).stdout


def analyze(tmp: Path, name: str, *args: str) -> dict:
    out = tmp / f"{name}.json"
    sh(str(NOSTALL), "analyze", str(DATA), "--warm", "--quiet", "--json", str(out),
       "--html", str(tmp / f"{name}.html"), *args)
    return json.loads(out.read_text())


def cache_args(share: float) -> list[str]:
    if share == 0:
        return ["--cache", "none"]
    return ["--cache", "minio", "--cache-size", f"{100 * share:g}%"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bandwidths", default="10,30", help="MB/s of the emulated storage")
    ap.add_argument("--out", default="bench/out/analyze_grid.json")
    args = ap.parse_args()
    sh("bash", "bench/setup_env.sh")
    sh(str(REPO / ".venv-bench/bin/python"), "bench/make_photos.py", "--out", str(DATA),
       "--count", "2000", "--seed", "0")
    sh("cargo", "build", "--release", "-q", "-p", "nostall-cli")
    bandwidths = [float(b) for b in args.bandwidths.split(",")]
    cells, checks = [], []
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        for mbps in bandwidths:
            link = ["--throttle-mbps", f"{mbps:g}"]
            measured = analyze(tmp, f"rates{mbps:g}", *link, "--no-run", "--no-model",
                               "--max-threads", "2", "--budget", "30")
            rates_file = tmp / f"rates{mbps:g}.json"
            print(f"{mbps:g} MB/s: P = {[round(p) for p in measured['rates']['prep']]}, "
                  f"F = {measured['rates']['storage_bytes_per_s'] / 1e6:.1f} MB/s", file=sys.stderr)
            for share in (0.0, 0.25, 0.5, 1.0):
                for threads in (1, 2):
                    common = [*link, *cache_args(share), "--threads", str(threads),
                              "--rates", str(rates_file)]
                    alone = analyze(tmp, "alone", *common, "--no-run", "--no-model")
                    pipeline = alone["prediction"]["throughput"]
                    for label, factor in (("none", None), ("1.25 R", 1.25), ("0.6 R", 0.6)):
                        model = ["--no-model"] if factor is None else \
                            ["--model-rate", f"{factor * pipeline:.1f}"]
                        r = analyze(tmp, "cell", *common, *model, "--run-epochs", "1",
                                    "--run-seconds", "0")
                        cell = {
                            "mbps": mbps, "cache": share, "threads": threads, "model": label,
                            "model_rate": r["rates"]["model"],
                            "bottleneck": r["prediction"]["bottleneck"],
                            "predicted": r["prediction"]["throughput"],
                            "measured": r["observed"]["images_per_s"],
                            "predicted_stall": r["prediction"]["prep_stall_share"]
                            + r["prediction"]["fetch_stall_share"],
                            "measured_stall": r["observed"]["stall_share"],
                            "hit_share": r["observed"]["cache_hit_share"],
                        }
                        cell["error"] = cell["measured"] / cell["predicted"] - 1
                        cells.append(cell)
                        print(json.dumps(cell), file=sys.stderr)
        # The recommendation, at the lower bandwidth: a model twice as fast as storage.
        mbps = min(bandwidths)
        rates_file = tmp / f"rates{mbps:g}.json"
        base = ["--throttle-mbps", f"{mbps:g}", "--threads", "2", "--rates", str(rates_file)]
        storage = json.loads(rates_file.read_text())["rates"]
        per_sample = storage["dataset_bytes"] / storage["samples"]
        model_rate = min(2 * storage["storage_bytes_per_s"] / per_sample, 0.8 * storage["prep"][1])
        plan = analyze(tmp, "plan", *base, "--model-rate", f"{model_rate:.1f}", "--no-run")
        x_star = plan["advice"]["smallest_cache"]
        for label, share in (("x*", math.ceil(100 * x_star) / 100), ("x*/2", x_star / 2)):
            r = analyze(tmp, "check", *base, *cache_args(share), "--model-rate",
                        f"{model_rate:.1f}", "--run-epochs", "1", "--run-seconds", "0")
            checks.append({"run": label, "cache": share, "model_rate": model_rate,
                           "x_star": x_star, "measured_stall": r["observed"]["stall_share"],
                           "predicted_fetch_stall": r["prediction"]["fetch_stall_share"],
                           "measured": r["observed"]["images_per_s"]})
    out = REPO / args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"cells": cells, "recommendation": checks}, indent=1))
    print("| storage MB/s | cache | threads | model | bottleneck | predicted img/s | measured img/s | error | stall predicted / measured |")
    print("|---|---|---|---|---|---|---|---|---|")
    for c in cells:
        print(f"| {c['mbps']:g} | {100 * c['cache']:.0f}% | {c['threads']} | {c['model']} | "
              f"{c['bottleneck']} | {c['predicted']:.0f} | {c['measured']:.0f} | "
              f"{100 * c['error']:+.1f}% | {100 * c['predicted_stall']:.1f}% / "
              f"{100 * c['measured_stall']:.1f}% |")
    errors = [abs(c["error"]) for c in cells]
    print(f"\n{len(cells)} cells: median |error| {100 * statistics.median(errors):.1f}%, "
          f"max {100 * max(errors):.1f}%, within 10%: {sum(e <= 0.10 for e in errors)}/{len(errors)}")
    print("\n| run | cache | model img/s | measured img/s | data stall measured | fetch stall predicted |")
    print("|---|---|---|---|---|---|")
    for c in checks:
        print(f"| {c['run']} (x* = {100 * c['x_star']:.1f}%) | {100 * c['cache']:.1f}% | "
              f"{c['model_rate']:.0f} | {c['measured']:.0f} | {100 * c['measured_stall']:.1f}% | "
              f"{100 * c['predicted_fetch_stall']:.1f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
