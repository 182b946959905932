#!/usr/bin/env bash
# What serving live metrics costs: `nostall bench` without and with the Prometheus
# endpoint, alternated in one run (which goes first alternates too). One Python process
# scrapes the endpoint's address once a second for the whole script (Prometheus's
# default is once a minute, 15 s in most setups), so that its own CPU falls on both
# kinds of run alike: without the endpoint its requests are refused, with it they are
# answered. The loader's counters are kept either way; what differs is the serving.
#
# Data: the 2000 photographs of bench/compare.sh (bench/make_photos.py). Pipeline: the
# train preset, 2 threads, batch 64, page cache warm; each figure is the rate over the
# measured epochs after one warm-up epoch.
#
# Usage: bash bench/metrics_overhead.sh [ROUNDS] [EPOCHS]     (defaults 10 and 5)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${1:-10}"
EPOCHS="${2:-5}"
DATA=bench/data/photos
bash bench/setup_env.sh >/dev/null
.venv-bench/bin/python bench/make_photos.py --out "$DATA" --count 2000 --seed 0 >/dev/null
cargo build --release -q -p nostall-cli
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
rate() { python3 -c 'import json, sys; print(json.loads(sys.stdin.read())["images_per_s"])'; }
SCRAPER='
import sys, time, urllib.request
while True:
    time.sleep(1)
    try:
        urllib.request.urlopen(sys.argv[1], timeout=5).read()
    except OSError:
        pass
'
python3 -c "$SCRAPER" "http://127.0.0.1:$PORT/metrics" >/dev/null 2>&1 &
scraper=$!
trap 'kill "$scraper" 2>/dev/null || true' EXIT
plain() { ./target/release/nostall bench "$DATA" --epochs "$EPOCHS" --no-floor --json | rate; }
# The endpoint's own CPU, beside the whole process's: the thread "nostall-metrics" and the
# process in /proc, read until the process exits (exited loader threads count in the
# process's figures).
WATCH='
import os, sys, time
pid, last = sys.argv[1], (0, 0)
ticks = lambda stat: sum(int(x) for x in stat.rsplit(")", 1)[1].split()[11:13])
while True:
    try:
        total = ticks(open(f"/proc/{pid}/stat").read())
        mine = 0
        for tid in os.listdir(f"/proc/{pid}/task"):
            stat = open(f"/proc/{pid}/task/{tid}/stat").read()
            if "(nostall-metrics)" in stat:
                mine = ticks(stat)
        last = (mine, total)
    except (OSError, ValueError, IndexError):
        break
    time.sleep(0.1)
print(*last)
'
cpu_endpoint=0 cpu_total=0
served() {
    local out
    out=$(mktemp)
    ./target/release/nostall bench "$DATA" --epochs "$EPOCHS" --no-floor --json \
        --metrics-addr "127.0.0.1:$PORT" >"$out" &
    local bench=$!
    read -r mine total < <(python3 -c "$WATCH" "$bench")
    wait "$bench"
    cpu_endpoint=$((cpu_endpoint + mine)) cpu_total=$((cpu_total + total))
    rate <"$out"
    rm -f "$out"
}
TMP_RATE=$(mktemp)
without=() with=()
for round in $(seq "$ROUNDS"); do
    # Which goes first alternates, so that a drift of the shared machine falls on both.
    if ((round % 2)); then
        without+=("$(plain)")
        served >"$TMP_RATE"; with+=("$(cat "$TMP_RATE")")
    else
        served >"$TMP_RATE"; with+=("$(cat "$TMP_RATE")")
        without+=("$(plain)")
    fi
    echo "round $round: without ${without[-1]} images/s, with ${with[-1]} images/s"
done
rm -f "$TMP_RATE"
echo "endpoint thread CPU: $cpu_endpoint of the process's $cpu_total clock ticks (1 tick = 10 ms) over the runs with it"
python3 - "${without[*]}" "${with[*]}" <<'PY'
import sys
without, with_ = ([float(x) for x in a.split()] for a in sys.argv[1:3])
a, b = sum(without) / len(without), sum(with_) / len(with_)
ratios = sorted(w / o for o, w in zip(without, with_))
median = ratios[len(ratios) // 2] if len(ratios) % 2 else sum(ratios[len(ratios) // 2 - 1:][:2]) / 2
print(f"mean without {a:.0f}, with {b:.0f} images/s: with / without = {b / a:.3f}; "
      f"per round median {median:.3f}, from {ratios[0]:.3f} to {ratios[-1]:.3f}")
PY
