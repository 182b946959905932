#!/usr/bin/env bash
# The stall at epoch boundaries: a training step consuming at 0.9x the pipeline's rate,
# epochs run one after the other, with the next epoch started ahead (the loader's
# default, `overlap_epochs`) and without (each epoch starts with an empty pipeline).
#
# First the pipeline's own rate R is measured (`nostall bench`, no training step); then,
# alternating which goes first, `nostall bench --model-rate 0.9R` with and without
# overlap. Each run reports the data stall (time the simulated step waited for a batch)
# as a share of the wall time of epochs 1 to EPOCHS (epoch 0 warms the page cache), and
# the mean wait for each epoch's first batch: the boundary's own cost, which the stall
# share mixes with the steady state's (at 0.9x, a pipeline slowed by more than a tenth by
# other work on a shared machine stalls mid-epoch too).
#
# Data: the 2000 photographs of bench/compare.sh (bench/make_photos.py). Pipeline: the
# train preset, 2 prep threads, 2 fetch threads, batch 64, page cache warm.
#
# Usage: bash bench/epoch_boundary.sh [ROUNDS] [EPOCHS]     (defaults 3 and 5)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${1:-3}"
EPOCHS="${2:-5}"
DATA=bench/data/photos
bash bench/setup_env.sh >/dev/null
.venv-bench/bin/python bench/make_photos.py --out "$DATA" --count 2000 --seed 0 >/dev/null
cargo build --release -q -p nostall-cli
BENCH=(./target/release/nostall bench "$DATA" --threads 2 --no-floor --json)
rate=$("${BENCH[@]}" --epochs 2 | python3 -c 'import json, sys; print(json.load(sys.stdin)["images_per_s"])')
model=$(python3 -c "print(round(0.9 * $rate, 1))")
echo "pipeline alone: $rate images/s; simulated training step: $model images/s (0.9x)"
# Stall share of epochs 1..EPOCHS, and the samples prepared ahead in each.
STALL='
import json, sys
run = json.load(sys.stdin)
epochs = [e for e in run["per_epoch"] if e["epoch"] > 0]
stall = sum(e["stall_s"] for e in epochs) / sum(e["wall_s"] for e in epochs)
first = sum(e["first_wait_s"] for e in epochs) / len(epochs)
print(f"{100 * stall:.2f} {1e3 * first:.1f}", " ".join(str(e["prepared_ahead"]) for e in epochs))
'
measure() {
    local flag=$1
    "${BENCH[@]}" --epochs "$EPOCHS" --model-rate "$model" $flag | python3 -c "$STALL"
}
for round in $(seq 1 "$ROUNDS"); do
    if (( round % 2 )); then order=(off on); else order=(on off); fi
    for mode in "${order[@]}"; do
        if [[ $mode == on ]]; then flag=--overlap-epochs; else flag=; fi
        read -r stall first ahead <<<"$(measure "$flag")"
        echo "round $round, overlap $mode: data stall $stall% of epochs 1-$EPOCHS, first batch after $first ms on average; prepared ahead per epoch: $ahead"
    done
done
