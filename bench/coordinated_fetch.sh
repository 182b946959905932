#!/usr/bin/env bash
# Coordinated prep when fetch is the bottleneck: four jobs on this node read the same
# dataset from S3 storage behind one slow link, each alone or through the node agent.
#
#   root namespace: the jobs (and the agent) ── veth ── namespace nostall-store:
#     10.78.0.1                                          10.78.0.2, s3s-fs on :9000,
#                                                        tc htb on its egress (MBPS)
#
# Storage is a real S3-compatible server (s3s-fs) serving a copy of the dataset, its link
# limited by tc to MBPS megabytes/s (10^6; TCP payload gets about 95% of it); the jobs
# keep no cache, so every epoch reads storage. bench/coordinated_prep.py runs the jobs and
# counts the bytes the storage side sent (eth0's tx_bytes in its namespace).
#
# Usage: bash bench/coordinated_fetch.sh [--mbps 20] [--jobs 4] [--rounds 2] [--epochs 2]
#   [--data bench/data/photos] [--pipeline train] [--batch 64]
# Needs root (a namespace, tc), iproute2, s3s-fs (make deps) and the test venv
# (.venv-test, made by make python-test).
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(dirname "$HERE")"
MBPS=20 JOBS=4 ROUNDS=2 EPOCHS=2 DATA="$HERE/data/photos" PIPELINE=train BATCH=64
while [ $# -gt 0 ]; do
    case "$1" in
        --mbps) MBPS="$2"; shift 2 ;;
        --jobs) JOBS="$2"; shift 2 ;;
        --rounds) ROUNDS="$2"; shift 2 ;;
        --epochs) EPOCHS="$2"; shift 2 ;;
        --data) DATA="$2"; shift 2 ;;
        --pipeline) PIPELINE="$2"; shift 2 ;;
        --batch) BATCH="$2"; shift 2 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "needs root (a network namespace, tc)" >&2; exit 2; }
NS=nostall-store HOST_IF=nostall-st0 HOST_IP=10.78.0.1 STORE_IP=10.78.0.2 PORT=9000
ACCESS_KEY=nostall SECRET_KEY=nostall-bench-secret BUCKET=nostall
S3S_FS="${S3S_FS:-$(command -v s3s-fs || echo "${CARGO_HOME:-$HOME/.cargo}/bin/s3s-fs")}"
PY="$ROOT/.venv-test/bin/python"
WORK="$(mktemp -d /tmp/nostall-fetch.XXXXXX)"

cleanup() {
    ip netns pids "$NS" 2>/dev/null | xargs -r kill 2>/dev/null || true
    ip netns del "$NS" 2>/dev/null || true
    ip link del "$HOST_IF" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
cleanup_stale() { ip netns del "$NS" 2>/dev/null || true; ip link del "$HOST_IF" 2>/dev/null || true; }
cleanup_stale

ip netns add "$NS"
ip link add "$HOST_IF" type veth peer name eth0 netns "$NS"
ip addr add "$HOST_IP/24" dev "$HOST_IF"
ip link set "$HOST_IF" up
ip netns exec "$NS" ip link set lo up
ip netns exec "$NS" ip addr add "$STORE_IP/24" dev eth0
ip netns exec "$NS" ip link set eth0 up
kbit="$(awk -v m="$MBPS" 'BEGIN {printf "%d", m * 8000 + 0.5}')"
burst="$(awk -v m="$MBPS" 'BEGIN {b = int(m * 1e6 / 100); printf "%d", b < 32768 ? 32768 : b}')"
ip netns exec "$NS" tc qdisc add dev eth0 root handle 1: htb default 1
ip netns exec "$NS" tc class add dev eth0 parent 1: classid 1:1 htb rate "${kbit}kbit" \
    ceil "${kbit}kbit" burst "$burst" cburst "$burst" quantum 15140

name="$(basename "$(realpath "$DATA")")"
mkdir -p "$WORK/root/$BUCKET"
cp -r "$(realpath "$DATA")" "$WORK/root/$BUCKET/$name"
find "$WORK/root/$BUCKET/$name" -name '.*' -type f -delete
bytes="$(find "$WORK/root/$BUCKET/$name" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')"
ip netns exec "$NS" "$S3S_FS" --host "$STORE_IP" --port "$PORT" --access-key "$ACCESS_KEY" \
    --secret-key "$SECRET_KEY" "$WORK/root" </dev/null >"$WORK/s3s-fs.log" 2>&1 &
for _ in $(seq 200); do
    if bash -c "exec 3<>/dev/tcp/$STORE_IP/$PORT" 2>/dev/null; then break; fi
    sleep 0.1
done
echo "storage: s3s-fs at http://$STORE_IP:$PORT, s3://$BUCKET/$name ($((bytes / 1000000)) MB), link ${MBPS} MB/s" >&2

env -u http_proxy -u https_proxy -u HTTP_PROXY -u HTTPS_PROXY -u all_proxy -u ALL_PROXY \
    AWS_ENDPOINT_URL="http://$STORE_IP:$PORT" AWS_ACCESS_KEY_ID="$ACCESS_KEY" \
    AWS_SECRET_ACCESS_KEY="$SECRET_KEY" AWS_REGION=us-east-1 \
    "$PY" "$HERE/coordinated_prep.py" --data "s3://$BUCKET/$name" --dataset-bytes "$bytes" \
    --storage-netns "$NS" --jobs "$JOBS" --rounds "$ROUNDS" --epochs "$EPOCHS" \
    --pipeline "$PIPELINE" --batch "$BATCH" --json "$HERE/out/coordinated_fetch-$PIPELINE.json"
