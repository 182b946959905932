"""Storage that changes mid-run: the loader's defaults against the best static
configuration of each phase.

The emulated link runs at 80 MB/s, then 5 MB/s, then 80 MB/s again (`nostall bench
--throttle-phases 80:4,5:6,80`, timed from the loader's start, through epochs: the
phases follow the clock), with a training step at 2x the pipeline's unthrottled rate.
Each run reports the images/s delivered within each phase. Static configurations: fetch
threads held at 2, 8, 32 or 128 x prefetch 2, 4 or 8 (as bench/grid.py); for each phase
the best of them is found, then the defaults and that configuration are measured again,
alternated, and their per-phase medians compared.

Data: the 2000 photographs of bench/compare.sh. Pipeline: the train preset, 2 prep
threads, batch 64.

Usage: python3 bench/storage_switch.py [--confirm 3] [--out bench/out/storage_switch.json]
"""

import argparse
import itertools
import json
import statistics
import subprocess
import sys

NOSTALL = "./target/release/nostall"
DATA = "bench/data/photos"
PHASES = "80:4,5:6,80"
EPOCHS = 10  # about 4 s at 80 MB/s, 6 s at 5, then 4 s at 80 again
FETCH = [2, 8, 32, 128]
PREFETCH = [2, 4, 8]


def bench(*flags):
    cmd = [NOSTALL, "bench", DATA, "--threads", "2", "--no-floor", "--json", *map(str, flags)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def phases(model_rate, *flags):
    run = bench("--epochs", EPOCHS, "--throttle-phases", PHASES, "--model-rate",
                f"{model_rate:.1f}", *flags)
    return [p["images_per_s"] for p in run["phases"]]


def static_flags(config):
    fetch, prefetch = config
    return ["--fetch-threads", fetch, "--fixed-reads", "--fixed-prep", "--prefetch", prefetch]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--confirm", type=int, default=3)
    parser.add_argument("--out", default="bench/out/storage_switch.json")
    args = parser.parse_args()
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "nostall-cli"], check=True)
    pipeline = bench("--epochs", 2)["images_per_s"]
    model = 2 * pipeline
    print(f"pipeline alone: {pipeline:.0f} images/s; step at {model:.0f} images/s", flush=True)
    defaults = phases(model)
    static = {config: phases(model, *static_flags(config))
              for config in itertools.product(FETCH, PREFETCH)}
    names = [f"{mbps} MB/s" for mbps in [80, 5, 80]]
    best = [max(static, key=lambda c: static[c][i]) for i in range(len(names))]
    print(f"defaults: {', '.join(f'{r:.0f}' for r in defaults)} images/s by phase")
    for i, name in enumerate(names):
        print(f"  {name}: best static fetch {best[i][0]}, prefetch {best[i][1]}: "
              f"{static[best[i]][i]:.0f}/s", flush=True)
    # Again, alternated: the defaults and each phase's best static configuration.
    contenders = {"defaults": []}
    for config in set(best):
        contenders[config] = []
    for round in range(args.confirm):
        order = list(contenders)
        if round % 2:
            order.reverse()
        for who in order:
            flags = [] if who == "defaults" else static_flags(who)
            contenders[who].append(phases(model, *flags))
    rows = []
    for i, name in enumerate(names):
        mine = statistics.median(r[i] for r in contenders["defaults"])
        theirs = statistics.median(r[i] for r in contenders[best[i]])
        rows.append({"phase": name, "defaults": mine, "best_static": theirs,
                     "best_static_config": list(best[i]), "ratio": mine / theirs})
        print(f"{name}: defaults {mine:.0f}/s, best static {theirs:.0f}/s (fetch {best[i][0]}, "
              f"prefetch {best[i][1]}) -> {mine / theirs:.3f} (medians of {args.confirm}, "
              f"alternated)", flush=True)
    with open(args.out, "w") as f:
        json.dump({"pipeline": pipeline, "phases": PHASES, "rows": rows,
                   "search": {f"fetch {c[0]}, prefetch {c[1]}": r for c, r in static.items()},
                   "confirm": {str(k): v for k, v in contenders.items()}}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
