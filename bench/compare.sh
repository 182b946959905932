#!/usr/bin/env bash
# nostall against PyTorch's DataLoader and NVIDIA DALI (CPU), side by side in one run.
#
# Data: 2000 real photographs cut from Debian's mate-backgrounds (GPL-2+) to ImageNet-like
# 500x375 / 375x500 JPEGs at quality 90 (bench/make_photos.py). Pipeline for all loaders:
# RandomResizedCrop(224), random horizontal flip, normalise, float32 NCHW, batch 64, page
# cache warm. Each figure is the rate over the measured epochs after one warm-up epoch.
#
# Usage: bash bench/compare.sh [EPOCHS]      (writes bench/out/compare.json and a table)
set -euo pipefail
cd "$(dirname "$0")/.."
EPOCHS="${1:-3}"
OUT=bench/out
mkdir -p "$OUT"
bash bench/setup_env.sh >/dev/null
PY=.venv-bench/bin/python
"$PY" bench/make_photos.py --out bench/data/photos --count 2000 --seed 0 >/dev/null
DATA=bench/data/photos
cargo build --release -q -p nostall-cli
rm -f "$OUT/compare.json"
for threads in 1 2; do
    ./target/release/nostall bench "$DATA" --threads "$threads" --epochs "$EPOCHS" --json >>"$OUT/compare.json"
done
"$PY" bench/baselines.py "$DATA" --loaders torch,dali --threads 2 --epochs "$((EPOCHS + 1))" --json "$OUT/compare.json" >/dev/null
"$PY" - "$OUT/compare.json" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
nostall = {r["threads"]: r for r in rows if r["loader"] == "nostall"}
base = {r["loader"]: r for r in rows if r["loader"] != "nostall"}
n2 = nostall[2]["images_per_s"]
print(f"{'loader (2 threads unless noted)':<44}{'images/s':>10}{'peak RSS MB':>13}{'nostall x':>11}")
print(f"{'nostall':<44}{n2:>10.0f}{nostall[2]['peak_rss_mb']:>13.0f}{1:>11.2f}")
print(f"{'nostall, 1 thread':<44}{nostall[1]['images_per_s']:>10.0f}{nostall[1]['peak_rss_mb']:>13.0f}{n2 / nostall[1]['images_per_s']:>11.2f}")
print(f"{'full-image decode only (floor), same run':<44}{nostall[2]['decode_floor_images_per_s']:>10.0f}{'':>13}{n2 / nostall[2]['decode_floor_images_per_s']:>11.2f}")
for name, label in [("torch", "PyTorch DataLoader, num_workers=2"), ("dali", "DALI CPU pipeline, num_threads=2")]:
    if name in base:
        r = base[name]
        print(f"{label:<44}{r['images_per_s']:>10.0f}{r['peak_rss_mb']:>13.0f}{n2 / r['images_per_s']:>11.2f}")
PY
