#!/usr/bin/env bash
# Caching on one node: nostall's MinIO cache against the page cache given the same memory,
# with storage throttled by the kernel, side by side in one run.
#
# Data: the 2000 real photographs of bench/make_photos.py (62 MB). Pipeline: the ImageNet
# training preset, batch 64, 2 prep threads, 4 fetch threads.
#
# Storage: the block device holding the data, limited to $MBPS MB/s of reads by a cgroup-v1
# blkio throttle (blkio.throttle.read_bps_device), so page-cache hits are free and misses
# cost real device reads at that rate. Before each run the dataset's pages are dropped
# from the page cache (posix_fadvise DONTNEED), so every run starts cold.
#
# Runs, each over $EPOCHS epochs after a first, cold epoch:
#   prep-bound   page cache warm, no throttle: the rate prep alone allows
#   minio        --cache minio --cache-size $CACHE_PCT%, throttled, in a cgroup-v1 memory
#                limit of the memory it needs (measured by a calibration run)
#   page cache   --cache none, throttled, in the same memory limit: the page cache gets
#                the room that MinIO's cache takes
#   minio 100%   --cache minio --cache-size 100%, throttled, memory for all of it
# Bytes from storage per epoch: the loader's source counters, and /proc/self/io read_bytes
# (what the block device actually delivered).
#
# Needs root (cgroups). Usage: bash bench/cache.sh   (writes bench/out/cache.json)
set -euo pipefail
cd "$(dirname "$0")/.."
EPOCHS="${EPOCHS:-4}"
MBPS="${MBPS:-50}"
CACHE_PCT="${CACHE_PCT:-35}"
OUT=bench/out
mkdir -p "$OUT"
bash bench/setup_env.sh >/dev/null
PY=.venv-bench/bin/python
"$PY" bench/make_photos.py --out bench/data/photos --count 2000 --seed 0 >/dev/null
DATA=bench/data/photos
cargo build --release -q -p nostall-cli
BIN=./target/release/nostall
COMMON=(--epochs "$EPOCHS" --no-floor --json --threads 2 --fetch-threads 4)

DEVICE="$(findmnt -n -o MAJ:MIN --target "$DATA" | tr -d ' ')"
GROUP="nostall-bench-$$"
BLKIO="/sys/fs/cgroup/blkio/$GROUP"
MEMORY="/sys/fs/cgroup/memory/$GROUP"
mkdir "$BLKIO" "$MEMORY"
cleanup() { rmdir "$BLKIO" "$MEMORY" 2>/dev/null || true; }
trap cleanup EXIT
echo "$DEVICE $((MBPS * 1000000))" >"$BLKIO/blkio.throttle.read_bps_device"

# Drops the dataset's pages from the page cache.
evict() {
    "$PY" - "$DATA" <<'PY'
import os, sys
for root, _, files in os.walk(sys.argv[1]):
    for name in files:
        fd = os.open(os.path.join(root, name), os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
PY
}

# Runs nostall bench in the throttled cgroup with the given memory limit (bytes or -1).
throttled() {
    local limit="$1"
    shift
    echo "$limit" >"$MEMORY/memory.limit_in_bytes"
    sh -c 'echo $$ >"$1/cgroup.procs"; echo $$ >"$2/cgroup.procs"; shift 2; exec "$@"' \
        sh "$BLKIO" "$MEMORY" "$BIN" bench "$DATA" "$@"
}

rm -f "$OUT/cache.json"
# Warm the page cache, then measure prep alone.
"$BIN" bench "$DATA" --epochs 1 --no-floor --json >/dev/null
"$BIN" bench "$DATA" "${COMMON[@]}" | sed 's/^{/{"run":"prep-bound",/' >>"$OUT/cache.json"

# Calibration: the memory the MinIO run needs: its own peak resident set (cache and the
# read-ahead that throttled storage calls for included), measured in an unlimited cold
# run, plus 8 MiB for what the kernel charges to the cgroup besides (page tables, slab).
# Both limited runs get exactly this; without a cache of its own, the page-cache run has
# that much more room for the page cache (a little more than MinIO's cache holds, since
# the cache's allocations carry some overhead: the comparison leans towards the page cache).
evict
peak_mb="$(throttled -1 --epochs 1 --no-floor --json --threads 2 --fetch-threads 4 \
    --cache minio --cache-size "$CACHE_PCT%" |
    "$PY" -c 'import json,sys; print(json.load(sys.stdin)["peak_rss_mb"])')"
dataset_bytes="$(du -sb "$DATA" | cut -f1)"
limit="$("$PY" -c "print(int(($peak_mb + 8) * 2**20))")"
evict
throttled "$limit" "${COMMON[@]}" --cache minio --cache-size "$CACHE_PCT%" |
    sed 's/^{/{"run":"minio",/' >>"$OUT/cache.json"

evict
throttled "$limit" "${COMMON[@]}" --cache none |
    sed "s/^{/{\"run\":\"page cache\",\"memory_limit_bytes\":$limit,/" >>"$OUT/cache.json"

evict
full="$("$PY" -c "print(int(($peak_mb + 8) * 2**20 + 1.1 * $dataset_bytes))")"
throttled "$full" "${COMMON[@]}" --cache minio --cache-size 100% |
    sed 's/^{/{"run":"minio 100%",/' >>"$OUT/cache.json"

"$PY" - "$OUT/cache.json" "$MBPS" "$CACHE_PCT" <<'PY'
import json, sys
runs = {r["run"]: r for r in map(json.loads, open(sys.argv[1]))}
mbps, pct = sys.argv[2], sys.argv[3]
dataset = runs["minio"]["per_epoch"][0]["dataset_bytes"]
def later(run, key):
    epochs = runs[run]["per_epoch"][1:]
    return sum(e[key] for e in epochs) / len(epochs)
print(f"dataset {dataset / 1e6:.1f} MB, storage {mbps} MB/s (blkio throttle), cache {pct}% of the dataset")
print(f"{'run':<14}{'images/s':>10}{'source bytes':>14}{'device bytes':>14}   (epochs >= 2, per epoch, share of the dataset)")
for name in ["prep-bound", "minio", "page cache", "minio 100%"]:
    r = runs[name]
    print(f"{name:<14}{later(name, 'images_per_s'):>10.0f}{later(name, 'storage_bytes') / dataset:>14.1%}"
          f"{later(name, 'device_read_bytes') / dataset:>14.1%}")
m, p = later("minio", "device_read_bytes"), later("page cache", "device_read_bytes")
print(f"minio reads {m / p:.2f}x the device bytes of the page cache, and runs "
      f"{later('minio', 'images_per_s') / later('page cache', 'images_per_s'):.2f}x as fast")
print(f"minio 100% runs at {later('minio 100%', 'images_per_s') / later('prep-bound', 'images_per_s'):.3f}x the prep-bound rate")
PY
