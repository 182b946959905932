#!/usr/bin/env bash
# The multi-host testbed of issue 6: N hosts on one machine, each a network namespace, with
# storage behind a bandwidth limit, running one nostall job together (`nostall node`).
#
# Topology (everything is named nostall-*, and lives in namespaces of its own):
#
#   nostall-h0 (10.77.0.10) ──veth──┐
#   nostall-h1 (10.77.0.11) ──veth──┤  bridge nostall-br in       ┌── veth ── nostall-storage
#   ...                             ├─ namespace nostall-sw ──────┘   (10.77.0.254, s3s-fs on :9000,
#   nostall-hN-1            ──veth──┘                                  tc htb on its egress)
#
# Only the 10.77.0.0/24 addresses configured inside those namespaces, and each namespace's
# own loopback, are ever used. The root namespace is not modified at all: the veth pairs
# are created inside nostall-sw and their far ends moved straight into the other namespaces,
# the bridge is inside nostall-sw, and no namespace has a default route (so nothing in it
# can reach any other address, even by mistake). Proxy variables are unset for the jobs.
#
# Storage: s3s-fs serving a copy of the dataset (bucket `nostall`, prefix = the data
# directory's name), its egress limited by tc (htb) on the storage side of its link, so
# all hosts share the limit as they would share one storage server's NIC, each guaranteed
# an equal share.
# Links between hosts are not limited (--peer-mbps limits each host's egress if wanted).
#
# Why 12.5 MB/s by default, a quarter of the issue's example of 50 MB/s: the 4 hosts share
# the 2 cores of the VM the testbed was written on, where 4 real hosts would have their own
# cores (2 each, say), so together they prepare about a quarter of what 4 real hosts would.
# The comparison needs storage to be the bottleneck of the job without partitioned caching
# (with a 30% local cache, about 70% of its reads still go to storage) and not of the job
# with it. Scaling the storage limit with the cores per host keeps that balance: 50 MB/s
# for 4 hosts of 2 cores each is 12.5 MB/s for 4 hosts on 2 shared cores. Measured with
# --check on that VM (1 prep thread and 4 fetch threads per host, 60 MB of photographs):
# 4 hosts reading over S3 at once with no limit (--mbps 1000) were CPU-bound at about 1630
# images/s together (49 MB/s: decode, HTTP and s3s-fs share the 2 cores), so with 50 MB/s
# storage would never be the bottleneck and no cache could speed the job up; from their
# caches the same 4 hosts prepare 3200-3400 images/s; at 12.5 MB/s, storage delivers 392
# images/s (11.85 MB/s of payload). With more cores per host, raise --mbps in proportion.
#
# Runs, one after the other, all hosts of a run at once (--modes):
#   partitioned  --peers ADDR0,...: each host caches --cache of the dataset, its part of
#                the partitioned cache; misses go to the holding peer, then storage;
#                locality-aware batches (each rank takes the samples its host holds)
#   barrier      partitioned, the nodes meeting before each epoch (--epoch-barrier), as every
#                run did before 2026-11-27: each epoch then waits for the slowest host
#   plain        the same with --plain: partitioned caching with the plain plan (each rank
#                a fixed slice of every global batch), the baseline of locality-aware loading
#   nopeers      --no-peers --world N, --cache-size --cache: each host alone with a local
#                MinIO cache of the same size (no partitioned caching)
#   frequency    the same with --cache-policy frequency: each host caches the samples its
#                rank reads most often over the job's epochs (NoPFS), read ahead
#                in the background, beside the epochs' reads
#   frequency-before  the same with --prefill: the placement is read before the first
#                epoch (NoPFS's setting, which the simulator simulates); the summary
#                gives the time and bytes that took
#   local        --no-peers --world N, --cache-size 100% --prefill: the whole dataset cached
#                locally (filled before the first epoch), the ceiling of caching
#   agent        partitioned, through each host's node agent (`nostall agent` in the host's
#                namespace, `nostall node --share auto`): the agent joins the job for the
#                host and prepares its local ranks' batches, which reach them in shared
#                memory; with --ranks-per-host 2 the ranks do not read their host's part
#                over loopback TCP as in `partitioned` (the summary's "local TCP MB")
# --ranks-per-host R runs R ranks (processes) per host: the job has HOSTS x R ranks, each
# writing its own file (rank g = host x R + local rank), which the summary lists as hosts.
# Each writes $OUT/MODE/hostG.jsonl (one object per epoch) and hostG.log; then
# bench/testbed_summary.py prints per epoch and per host throughput, bytes from storage,
# from peers, served and stall time, the aggregate per mode and epoch, and the issue's
# ratios (writes $OUT/summary.json).
#
# --check builds the testbed without running jobs: checks that every host reaches storage
# and every other host, that s3s-fs answers from every host, and measures what the tc limit
# delivers with 1 and with all hosts downloading the dataset at once (curl, SigV4).
#
# --loopback runs the same jobs without root and without veth: the script re-executes itself
# in a network namespace of its own inside a user namespace (`unshare -rn`, as an
# unprivileged user may), where the hosts are processes on 127.0.0.1 (host i's peer
# service on port 7700 + i), storage is s3s-fs on 127.0.0.1:9000, and tc on that
# namespace's loopback limits what storage sends (a u32 filter on its source port; the
# hosts share the limit as TCP shares it, without the per-host classes). For machines
# whose kernel has no veth, or where no root is to be had; nothing outside the namespace
# is touched, and it vanishes with the script.
#
# Needs root (namespaces, tc) unless --loopback, iproute2, curl (for --check), python3,
# s3s-fs (make deps).
# Usage: bash bench/testbed.sh [--hosts 4] [--mbps 12.5] [--cache 30%] [--epochs 4] ...
#        bash bench/testbed.sh --check      bash bench/testbed.sh --clean     (see --help)
set -euo pipefail
cd "$(dirname "$0")/.."

# ---- configuration --------------------------------------------------------------------

HOSTS=4
MBPS=12.5
CACHE=30%
EPOCHS=4
DATA=bench/data/photos
MODES="partitioned plain nopeers local"
RANKS_PER_HOST=1
OUT=bench/out/testbed
BATCH=64
PREP_THREADS=1
FETCH_THREADS=4
STEP_MS=
NODE_ARGS=
PEER_MBPS=
TIMEOUT=1800
BIN=./target/release/nostall
ACTION=run
LOOPBACK=0

SUBNET=10.77.0          # a private /24, configured only inside the namespaces
SW_NS=nostall-sw
ST_NS=nostall-storage
BRIDGE=nostall-br
STORAGE_IP=$SUBNET.254   # 127.0.0.1 with --loopback
S3_PORT=9000
PEER_PORT=7700
BUCKET=nostall
ACCESS_KEY=nostall-testbed
SECRET_KEY=nostall-testbed-secret

usage() {
    cat <<EOF
Usage: bash bench/testbed.sh [OPTIONS]

  --hosts N           hosts (network namespaces), 1..200          [$HOSTS]
  --mbps MBPS         storage bandwidth limit, MB/s (10^6 bytes)   [$MBPS]
  --cache SIZE        per-host cache for partitioned and nopeers   [$CACHE]
  --epochs E          epochs per run                              [$EPOCHS]
  --data DIR          dataset to copy into storage                [$DATA]
  --modes "M ..."     runs, of partitioned barrier plain nopeers frequency frequency-before local agent [$MODES]
  --ranks-per-host R  ranks (processes) per host                  [$RANKS_PER_HOST]
  --out DIR           results: MODE/hostI.jsonl, .log, summary    [$OUT]
  --batch-size B      per-host batch size                         [$BATCH]
  --prep-threads P    prep threads per host                       [$PREP_THREADS]
  --fetch-threads F   fetch threads per host                      [$FETCH_THREADS]
  --step-ms MS        emulated training step per batch (passed on) [none]
  --node-args "A ..." more arguments for every node, e.g. "--group-memory 4MiB" [none]
  --peer-mbps MBPS    also limit each host's egress (peer traffic) [no limit]
  --timeout S         give up on a run after S seconds            [$TIMEOUT]
  --bin PATH          the nostall binary                          [$BIN]
  --loopback          hosts as processes on 127.0.0.1 in a namespace of this user's own
                      (no root, no veth; see above)
  --check             build the testbed, check it and measure the storage limit, no jobs
  --clean             remove leftovers of an earlier run (namespaces nostall-*) and exit
  -h, --help          this help
EOF
}

die() { echo "testbed: $*" >&2; exit 1; }
log() { echo "testbed: $*" >&2; }

parse_args() {
    while [ $# -gt 0 ]; do
        case "$1" in
            --hosts) HOSTS="$2"; shift ;;
            --mbps) MBPS="$2"; shift ;;
            --cache) CACHE="$2"; shift ;;
            --epochs) EPOCHS="$2"; shift ;;
            --data) DATA="$2"; shift ;;
            --modes) MODES="$2"; shift ;;
            --ranks-per-host) RANKS_PER_HOST="$2"; shift ;;
            --out) OUT="$2"; shift ;;
            --batch-size) BATCH="$2"; shift ;;
            --prep-threads) PREP_THREADS="$2"; shift ;;
            --fetch-threads) FETCH_THREADS="$2"; shift ;;
            --step-ms) STEP_MS="$2"; shift ;;
            --node-args) NODE_ARGS="$2"; shift ;;
            --peer-mbps) PEER_MBPS="$2"; shift ;;
            --timeout) TIMEOUT="$2"; shift ;;
            --bin) BIN="$2"; shift ;;
            --check) ACTION=check ;;
            --loopback) LOOPBACK=1 ;;
            --clean) ACTION=clean ;;
            -h|--help) usage; exit 0 ;;
            *) usage >&2; die "unknown argument: $1" ;;
        esac
        shift
    done
    [[ "$HOSTS" =~ ^[0-9]+$ ]] && [ "$HOSTS" -ge 1 ] && [ "$HOSTS" -le 200 ] \
        || die "--hosts must be 1..200, not $HOSTS"
    [[ "$MBPS" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--mbps must be a number (MB/s), not $MBPS"
    [ -z "$PEER_MBPS" ] || [[ "$PEER_MBPS" =~ ^[0-9]+(\.[0-9]+)?$ ]] \
        || die "--peer-mbps must be a number (MB/s), not $PEER_MBPS"
    [[ "$EPOCHS" =~ ^[0-9]+$ ]] && [ "$EPOCHS" -ge 1 ] || die "--epochs must be >= 1"
    [[ "$RANKS_PER_HOST" =~ ^[0-9]+$ ]] && [ "$RANKS_PER_HOST" -ge 1 ] && [ "$RANKS_PER_HOST" -le 16 ] \
        || die "--ranks-per-host must be 1..16, not $RANKS_PER_HOST"
    for mode in $MODES; do
        case "$mode" in partitioned|barrier|plain|nopeers|frequency|frequency-before|local|agent) ;; *) die "unknown mode: $mode" ;; esac
    done
}

host_ns() { echo "nostall-h$1"; }
host_ip() { if [ "$LOOPBACK" = 1 ]; then echo 127.0.0.1; else echo "$SUBNET.$((10 + $1))"; fi; }
# Where host $1's peer service listens.
host_peer() {
    if [ "$LOOPBACK" = 1 ]; then echo "127.0.0.1:$((PEER_PORT + $1))"; else echo "$(host_ip "$1"):$PEER_PORT"; fi
}
# (With --loopback, in a subshell, as for `in_ns ... &`, the command replaces it: `$!` is
# then the command's pid, as `ip netns exec` makes it, for `wait` and `kill`.)
in_ns() {
    local ns="$1"
    shift
    if [ "$LOOPBACK" = 0 ]; then
        ip netns exec "$ns" "$@"
    elif [ "$BASH_SUBSHELL" -gt 0 ]; then
        exec "$@"
    else
        "$@"
    fi
}
# Runs a command on host $1 (in its namespace, or in the one namespace of --loopback).
in_host() { local i="$1"; shift; in_ns "$(host_ns "$i")" "$@"; }

s3s_fs_bin() {
    if [ -n "${S3S_FS:-}" ]; then echo "$S3S_FS"; return; fi
    local candidate="${CARGO_HOME:-$HOME/.cargo}/bin/s3s-fs"
    if [ -x "$candidate" ]; then echo "$candidate"; return; fi
    command -v s3s-fs || die "s3s-fs is not installed: run \`make deps\` or set S3S_FS"
}

# ---- leftovers and teardown -----------------------------------------------------------

leftovers() {
    [ "$LOOPBACK" = 0 ] || return 0
    ip netns list | awk '{print $1}' | grep '^nostall-' || true
}

# Ends every process inside namespace $1 (TERM, then KILL after 3 s), by pid.
kill_ns_processes() {
    local ns="$1" pids pid i
    pids="$(ip netns pids "$ns" 2>/dev/null || true)"
    [ -n "$pids" ] || return 0
    for pid in $pids; do kill -TERM "$pid" 2>/dev/null || true; done
    for i in $(seq 30); do
        pids="$(ip netns pids "$ns" 2>/dev/null || true)"
        [ -n "$pids" ] || return 0
        sleep 0.1
    done
    for pid in $pids; do kill -KILL "$pid" 2>/dev/null || true; done
    sleep 0.2
}

remove_namespaces() {
    local ns
    for ns in $(leftovers); do kill_ns_processes "$ns"; done
    # Deleting a namespace deletes its end of each veth pair, and so the pair.
    for ns in $(leftovers); do ip netns del "$ns" 2>/dev/null || log "could not delete $ns"; done
}

OWNED=0          # set once this run has created its namespaces: only then may it remove them
WORK=            # temporary directory (the storage copy)
JOB_PIDS=()
AGENT_PIDS=()
STORAGE_PID=     # s3s-fs (--loopback: its namespace is not removed, so it is stopped by pid)

teardown() {
    local status=$?
    trap - EXIT INT TERM
    local pid
    for pid in "${JOB_PIDS[@]}" "${AGENT_PIDS[@]}" $STORAGE_PID; do kill -TERM "$pid" 2>/dev/null || true; done
    if [ "$OWNED" = 1 ]; then
        remove_namespaces
        [ -z "$(leftovers)" ] || log "left behind: $(leftovers | tr '\n' ' ')"
    fi
    [ -z "$WORK" ] || rm -rf "$WORK"
    exit "$status"
}

on_signal() { log "interrupted: tearing the testbed down"; exit 130; }

refuse_leftovers() {
    local found
    found="$(leftovers)"
    [ -z "$found" ] || die "leftovers of an earlier run (or a run in progress): $(echo $found).
  Remove them with: bash bench/testbed.sh --clean"
}

# ---- building the testbed -------------------------------------------------------------

# Limits the egress of eth0 in namespace $1 to $2 MB/s (10^6 bytes; tc counts whole
# Ethernet frames, so TCP payload gets about 95% of it), shared fairly by the destinations
# $3...: htb, a parent class of that rate and ceiling, below it one class per destination
# (selected by a u32 filter on the destination address) guaranteed an equal share and
# allowed to borrow up to the whole, as if storage served its clients in turn. (This
# kernel has no fq_codel or sfq; htb, tbf, pfifo and u32 are enough.) Burst: 10 ms of the
# rate, at least 32 KiB.
limit_egress() {
    local ns="$1" mbps="$2" kbit share burst n i=0 dst
    shift 2
    n=$#
    kbit="$(awk -v m="$mbps" 'BEGIN {printf "%d", m * 8000 + 0.5}')"
    share="$(awk -v m="$mbps" -v n="$n" 'BEGIN {s = int(m * 8000 / n); printf "%d", s < 8 ? 8 : s}')"
    burst="$(awk -v m="$mbps" 'BEGIN {b = int(m * 1e6 / 100); printf "%d", b < 32768 ? 32768 : b}')"
    local limit=(rate "${kbit}kbit" ceil "${kbit}kbit" burst "$burst" cburst "$burst" quantum 15140)
    in_ns "$ns" tc qdisc add dev eth0 root handle 1: htb default 99
    in_ns "$ns" tc class add dev eth0 parent 1: classid 1:1 htb "${limit[@]}"
    # Anything else (ARP, say): a small guaranteed share, the whole rate when idle.
    in_ns "$ns" tc class add dev eth0 parent 1:1 classid 1:99 htb rate 8kbit ceil "${kbit}kbit" \
        burst "$burst" cburst "$burst" quantum 15140
    for dst in "$@"; do
        in_ns "$ns" tc class add dev eth0 parent 1:1 classid "1:$((100 + i))" htb rate "${share}kbit" \
            ceil "${kbit}kbit" burst "$burst" cburst "$burst" quantum 15140
        in_ns "$ns" tc filter add dev eth0 parent 1: protocol ip prio 1 u32 \
            match ip dst "$dst/32" flowid "1:$((100 + i))"
        i=$((i + 1))
    done
}

# Namespace $2 joins the bridge through a veth pair: nostall-sw side "$1", other side eth0
# with address $3/24. Both ends are created in nostall-sw and one moved: the root namespace
# never holds either.
attach() {
    local port="$1" ns="$2" addr="$3"
    ip netns add "$ns"
    in_ns "$SW_NS" ip link add "$port" type veth peer name eth0 netns "$ns"
    in_ns "$SW_NS" ip link set "$port" master "$BRIDGE" up
    in_ns "$ns" ip link set lo up
    in_ns "$ns" ip addr add "$addr/24" dev eth0
    in_ns "$ns" ip link set eth0 up
}

# --loopback: this namespace's loopback, storage's traffic (from port $S3_PORT) limited to
# $MBPS MB/s by one htb class, everything else unlimited. Bursts are at least a loopback
# frame (64 KiB).
build_loopback() {
    local kbit burst
    kbit="$(awk -v m="$MBPS" 'BEGIN {printf "%d", m * 8000 + 0.5}')"
    burst="$(awk -v m="$MBPS" 'BEGIN {b = int(m * 1e6 / 100); printf "%d", b < 131072 ? 131072 : b}')"
    ip link set lo up
    tc qdisc add dev lo root handle 1: htb default 10 r2q 1000
    tc class add dev lo parent 1: classid 1:10 htb rate 100gbit quantum 200000
    tc class add dev lo parent 1: classid 1:20 htb rate "${kbit}kbit" ceil "${kbit}kbit" \
        burst "$burst" cburst "$burst" quantum 65536
    tc filter add dev lo parent 1: protocol ip prio 1 u32 match ip sport "$S3_PORT" 0xffff flowid 1:20
    log "network: --loopback, $HOSTS hosts on 127.0.0.1 (peer ports $PEER_PORT..$((PEER_PORT + HOSTS - 1)));" \
        "storage at 127.0.0.1:$S3_PORT limited to $MBPS MB/s" \
        "(tc: $(tc class show dev lo classid 1:20 | sed 's/.*prio 0 //'))"
}

build_network() {
    if [ "$LOOPBACK" = 1 ]; then build_loopback; return; fi
    ip netns add "$SW_NS"
    OWNED=1
    in_ns "$SW_NS" ip link set lo up
    in_ns "$SW_NS" ip link add "$BRIDGE" type bridge
    in_ns "$SW_NS" ip link set "$BRIDGE" up
    attach st "$ST_NS" "$STORAGE_IP"
    local i
    for i in $(seq 0 $((HOSTS - 1))); do
        attach "h$i" "$(host_ns "$i")" "$(host_ip "$i")"
    done
    # All hosts share one limit: it sits on the storage side's egress, before the bridge.
    local all_hosts=()
    for i in $(seq 0 $((HOSTS - 1))); do all_hosts+=("$(host_ip "$i")"); done
    limit_egress "$ST_NS" "$MBPS" "${all_hosts[@]}"
    if [ -n "$PEER_MBPS" ]; then
        for i in $(seq 0 $((HOSTS - 1))); do
            limit_egress "$(host_ns "$i")" "$PEER_MBPS" "${all_hosts[@]}"
        done
    fi
    log "network: $SW_NS (bridge $BRIDGE), $ST_NS $STORAGE_IP, $HOSTS hosts" \
        "$(host_ip 0)..$(host_ip $((HOSTS - 1))); storage egress limited to $MBPS MB/s" \
        "(tc: $(in_ns "$ST_NS" tc class show dev eth0 classid 1:1 | sed 's/.*prio 0 //'))"
}

# Copies the dataset into a storage root and serves it with s3s-fs from nostall-storage.
start_storage() {
    [ -d "$DATA" ] || die "no dataset at $DATA (bench/make_photos.py makes the default one)"
    local bin name
    bin="$(s3s_fs_bin)"
    name="$(basename "$(realpath "$DATA")")"
    WORK="$(mktemp -d /tmp/nostall-testbed.XXXXXX)"
    mkdir -p "$WORK/root/$BUCKET"
    cp -r "$(realpath "$DATA")" "$WORK/root/$BUCKET/$name"
    find "$WORK/root/$BUCKET/$name" -name '.*' -type f -delete   # markers, saved indexes
    # The ETags s3s-fs would have stored on upload: without them it hashes a whole object
    # for every GET, ranged ones too (a Parquet page read would cost the file's hash).
    python3 bench/s3_local.py etags "$WORK/root"
    SOURCE="s3://$BUCKET/$name"
    DATASET_BYTES="$(find "$WORK/root/$BUCKET/$name" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')"
    DATASET_FILES="$(find "$WORK/root/$BUCKET/$name" -type f | wc -l)"
    in_ns "$ST_NS" "$bin" --host "$STORAGE_IP" --port "$S3_PORT" \
        --access-key "$ACCESS_KEY" --secret-key "$SECRET_KEY" "$WORK/root" \
        </dev/null >"$WORK/s3s-fs.log" 2>&1 &
    STORAGE_PID=$!
    local i
    for i in $(seq 200); do
        if in_ns "$ST_NS" bash -c "exec 3<>/dev/tcp/$STORAGE_IP/$S3_PORT" 2>/dev/null; then
            log "storage: s3s-fs at http://$STORAGE_IP:$S3_PORT serving $SOURCE" \
                "($DATASET_FILES files, $((DATASET_BYTES / 1000000)) MB)"
            return 0
        fi
        sleep 0.1
    done
    cat "$WORK/s3s-fs.log" >&2
    die "s3s-fs does not listen on $STORAGE_IP:$S3_PORT after 20 s"
}

# The environment of every job: the S3 endpoint and keys, no other AWS setting of this
# machine, no proxy.
job_env() {
    local args=(env) name
    for name in $(compgen -e); do
        case "$name" in
            AWS_*|http_proxy|https_proxy|HTTP_PROXY|HTTPS_PROXY|all_proxy|ALL_PROXY|no_proxy|NO_PROXY)
                args+=(-u "$name") ;;
        esac
    done
    args+=(AWS_ENDPOINT_URL="http://$STORAGE_IP:$S3_PORT" AWS_ACCESS_KEY_ID="$ACCESS_KEY"
           AWS_SECRET_ACCESS_KEY="$SECRET_KEY" AWS_REGION=us-east-1)
    printf '%s\n' "${args[@]}"
}

# ---- checks and measurements (--check) -------------------------------------------------

# Every host reaches storage's S3 port and every other host: a TCP connection to a port
# nobody listens on is refused at once when the address is reachable, and times out (or
# fails with no route) when it is not.
check_reachability() {
    if [ "$LOOPBACK" = 1 ]; then log "reachability: --loopback, one address"; return; fi
    local i targets=("$STORAGE_IP:$S3_PORT") j
    for j in $(seq 0 $((HOSTS - 1))); do targets+=("$(host_ip "$j"):1"); done
    for i in $(seq 0 $((HOSTS - 1))); do
        in_ns "$(host_ns "$i")" python3 - "$(host_ip "$i")" "${targets[@]}" <<'PY' \
            || die "host $i cannot reach every address (see above)"
import socket, sys
me, bad = sys.argv[1], []
for target in sys.argv[2:]:
    host, port = target.rsplit(":", 1)
    if host == me:
        continue
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
        ok = port != "1"
    except ConnectionRefusedError:
        ok = True
    except OSError as e:
        ok = False
        print(f"  {me} -> {target}: {e}", file=sys.stderr)
    if not ok:
        bad.append(target)
sys.exit(1 if bad else 0)
PY
    done
    log "reachability: every host reaches storage and the $((HOSTS - 1)) other hosts"
}

# Every host can list the bucket over S3 (signed requests).
check_s3() {
    local i out
    mapfile -t env_args < <(job_env)
    for i in $(seq 0 $((HOSTS - 1))); do
        out="$(in_ns "$(host_ns "$i")" "${env_args[@]}" curl -sS --fail --max-time 10 \
            --aws-sigv4 "aws:amz:us-east-1:s3" --user "$ACCESS_KEY:$SECRET_KEY" \
            -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "http://$STORAGE_IP:$S3_PORT/$BUCKET?list-type=2&max-keys=1")" \
            || die "host $i: S3 list of $BUCKET failed"
        grep -q '<Key>' <<<"$out" || die "host $i: S3 list of $BUCKET returned no key: $out"
    done
    log "s3: every host lists s3://$BUCKET/ (SigV4, keys $ACCESS_KEY)"
}

# Hosts 0..$1-1 each download every object of the dataset at once ($FETCH_THREADS requests
# in flight per host); prints the MB/s the hosts got together and each host's.
measure_download() {
    local k="$1" i name urls t0 t1
    name="$(basename "$SOURCE")"
    urls="$WORK/urls.curl"
    (cd "$WORK/root/$BUCKET" && find "$name" -type f | sort) | awk -v base="http://$STORAGE_IP:$S3_PORT/$BUCKET/" \
        '{printf "url = \"%s%s\"\noutput = \"/dev/null\"\n", base, $0}' >"$urls"
    mapfile -t env_args < <(job_env)
    local pids=()
    t0="$(date +%s.%N)"
    for i in $(seq 0 $((k - 1))); do
        in_host "$i" "${env_args[@]}" bash -c '
            t0=$(date +%s.%N)
            curl -sS --fail --parallel --parallel-max "$1" --aws-sigv4 "aws:amz:us-east-1:s3" \
                --user "$2" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" --no-progress-meter \
                -w "%{size_download}\n" -K "$3" 2>"$4.err" | awk "{s += \$1} END {print s + 0}" >"$4"
            [ ! -s "$4.err" ] || { cat "$4.err" >&2; exit 1; }
            echo "$t0 $(date +%s.%N)" >>"$4"' _ "$FETCH_THREADS" "$ACCESS_KEY:$SECRET_KEY" \
            "$urls" "$WORK/dl.$k.$i" &
        pids+=($!)
    done
    for i in "${pids[@]}"; do wait "$i" || die "a download failed"; done
    t1="$(date +%s.%N)"
    local total=0 line per=""
    for i in $(seq 0 $((k - 1))); do
        mapfile -t line <"$WORK/dl.$k.$i"
        total=$((total + line[0]))
        per+="$(awk -v b="${line[0]}" -v t="${line[1]}" 'BEGIN {split(t, a, " "); printf " %.2f", b / 1e6 / (a[2] - a[1])}')"
    done
    awk -v k="$k" -v b="$total" -v t0="$t0" -v t1="$t1" -v per="$per" -v lim="$MBPS" 'BEGIN {
        printf "download: %d host(s) at once: %.1f MB in %.2f s = %.2f MB/s together (limit %s), per host MB/s:%s\n",
            k, b / 1e6, t1 - t0, b / 1e6 / (t1 - t0), lim, per }'
}

# `nostall bench` over S3 from hosts 0..$1-1 at once, 1 warm-up + 1 measured epoch of the
# whole dataset, loader cache $2: none (both epochs from storage: images/s and MB/s the
# limit allows), or 100% (the measured epoch from memory: what the hosts' shared cores
# prepare, the ceiling of the `local` mode).
measure_bench() {
    local k="$1" cache="$2" i pids=() cache_args=(--cache none)
    [ "$cache" = none ] || cache_args=(--cache minio --cache-size "$cache")
    mapfile -t env_args < <(job_env)
    for i in $(seq 0 $((k - 1))); do
        in_host "$i" "${env_args[@]}" "$BIN" bench "$SOURCE" --threads "$PREP_THREADS" \
            --fetch-threads "$FETCH_THREADS" --epochs 1 --no-floor --json "${cache_args[@]}" \
            >"$WORK/bench.$k.$i.json" 2>"$WORK/bench.$k.$i.err" &
        pids+=($!)
    done
    for i in "${pids[@]}"; do wait "$i" || { cat "$WORK"/bench.*.err >&2; die "nostall bench failed"; }; done
    # (the files are overwritten by the next measurement of the same host count)
    python3 - "$k" "$DATASET_FILES" "$MBPS" "$cache" "$WORK"/bench."$k".*.json <<'PY'
import json, sys
k, files, limit, cache = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
last = [json.loads(open(p).read().strip().splitlines()[-1])["per_epoch"][-1] for p in sys.argv[5:]]
rates = [e["images_per_s"] for e in last]
mbps = [e["images_per_s"] * e["storage_bytes"] / files / 1e6 for e in last]
if cache != "none":
    print(f"nostall bench --cache minio --cache-size {cache}: {k} host(s) at once, measured epoch "
          f"from the cache: images/s per host {' '.join(f'{r:.0f}' for r in rates)} (together "
          f"{sum(rates):.0f}), storage bytes {sum(e['storage_bytes'] for e in last)}")
    sys.exit()
print(f"nostall bench: {k} host(s) at once, measured epoch from storage: images/s per host "
      f"{' '.join(f'{r:.0f}' for r in rates)} (together {sum(rates):.0f}), MB/s per host "
      f"{' '.join(f'{m:.2f}' for m in mbps)} (together {sum(mbps):.2f}, limit {limit})")
PY
}

check() {
    check_reachability
    check_s3
    measure_download 1
    [ "$HOSTS" -eq 1 ] || measure_download "$HOSTS"
    if [ -x "$BIN" ]; then
        measure_bench 1 none
        [ "$HOSTS" -eq 1 ] || measure_bench "$HOSTS" none
        measure_bench "$HOSTS" 100%
    else
        log "no $BIN: skipping the nostall bench measurements"
    fi
}

# ---- the jobs --------------------------------------------------------------------------

require_node() {
    [ -x "$BIN" ] || die "no nostall binary at $BIN (cargo build --release -p nostall-cli)"
    "$BIN" node --help >/dev/null 2>&1 \
        || die "$BIN has no \`node\` subcommand (issue 6): build a nostall that has it"
}

# Starts host $1's node agent (mode agent) in its namespace, socket $2, log $3; returns
# once it listens.
start_agent() {
    local i="$1" sock="$2" log="$3" n
    in_host "$i" "${env_args[@]}" "$BIN" agent --socket "$sock" --idle 600 \
        </dev/null >"$log" 2>&1 &
    AGENT_PIDS+=($!)
    for n in $(seq 300); do
        [ -S "$sock" ] && return 0
        sleep 0.1
    done
    die "host $i: the agent does not listen at $sock after 30 s (see $log)"
}

# Runs mode $1 on every host at once; results in $OUT/$1/hostG.{jsonl,log}, G the rank.
# When a host fails, the others would wait at the next barrier for ever: they are stopped.
run_mode() {
    local mode="$1" i j g peers="" dir="$OUT/$1" args ranks=$((HOSTS * RANKS_PER_HOST)) agent_env
    for i in $(seq 0 $((HOSTS - 1))); do peers+="${peers:+,}$(host_peer "$i")"; done
    rm -rf "$dir"
    mkdir -p "$dir"
    mapfile -t env_args < <(job_env)
    local secret
    secret="$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
    JOB_PIDS=()
    AGENT_PIDS=()
    log "$mode: $HOSTS hosts x $RANKS_PER_HOST ranks, $EPOCHS epochs ..."
    for i in $(seq 0 $((HOSTS - 1))); do
        agent_env=()
        if [ "$mode" = agent ]; then
            agent_env=(NOSTALL_AGENT_SOCKET="$WORK/agent-h$i/agent.sock")
            start_agent "$i" "$WORK/agent-h$i/agent.sock" "$dir/agent$i.log"
        fi
        for j in $(seq 0 $((RANKS_PER_HOST - 1))); do
            g=$((i * RANKS_PER_HOST + j))
            args=("$SOURCE" --epochs "$EPOCHS" --batch-size "$BATCH"
                  --prep-threads "$PREP_THREADS" --fetch-threads "$FETCH_THREADS"
                  --json "$dir/host$g.jsonl")
            local ranked=(--node "$i" --local-rank "$j" --ranks-per-node "$RANKS_PER_HOST")
            case "$mode" in
                partitioned) args+=("${ranked[@]}" --peers "$peers" --cache-size "$CACHE") ;;
                barrier) args+=("${ranked[@]}" --peers "$peers" --cache-size "$CACHE" --epoch-barrier) ;;
                plain) args+=("${ranked[@]}" --peers "$peers" --cache-size "$CACHE" --plain) ;;
                agent) args+=("${ranked[@]}" --peers "$peers" --cache-size "$CACHE" --share auto) ;;
                nopeers) args+=(--node "$g" --no-peers --world "$ranks" --cache-size "$CACHE") ;;
                frequency) args+=(--node "$g" --no-peers --world "$ranks" --cache-size "$CACHE" --cache-policy frequency) ;;
                frequency-before) args+=(--node "$g" --no-peers --world "$ranks" --cache-size "$CACHE" --cache-policy frequency --prefill) ;;
                local) args+=(--node "$g" --no-peers --world "$ranks" --cache-size 100% --prefill) ;;
            esac
            [ -z "$STEP_MS" ] || args+=(--step-ms "$STEP_MS")
            # shellcheck disable=SC2206 # split into arguments on purpose
            [ -z "$NODE_ARGS" ] || args+=($NODE_ARGS)
            echo "host $i: NOSTALL_PEER_SECRET=... ${agent_env[*]} $BIN node ${args[*]}" >"$dir/host$g.log"
            in_host "$i" "${env_args[@]}" "${agent_env[@]}" NOSTALL_PEER_SECRET="$secret" \
                "$BIN" node "${args[@]}" </dev/null >>"$dir/host$g.log" 2>&1 &
            JOB_PIDS+=($!)
        done
    done
    local start=$SECONDS failed="" pid status running
    while :; do
        running=0
        for i in "${!JOB_PIDS[@]}"; do
            pid="${JOB_PIDS[$i]}"
            [ -n "$pid" ] || continue
            if kill -0 "$pid" 2>/dev/null; then running=$((running + 1)); continue; fi
            status=0; wait "$pid" || status=$?
            JOB_PIDS[$i]=""
            [ "$status" = 0 ] || failed+=" rank$i(exit $status)"
        done
        [ "$running" -gt 0 ] || break
        if [ -n "$failed" ] || [ $((SECONDS - start)) -ge "$TIMEOUT" ]; then
            [ -n "$failed" ] || failed=" timeout after ${TIMEOUT}s"
            if [ "$LOOPBACK" = 1 ]; then
                for pid in "${JOB_PIDS[@]}"; do [ -z "$pid" ] || kill -KILL "$pid" 2>/dev/null || true; done
            else
                for i in $(seq 0 $((HOSTS - 1))); do kill_ns_processes "$(host_ns "$i")"; done
            fi
            for pid in "${JOB_PIDS[@]}"; do [ -z "$pid" ] || wait "$pid" 2>/dev/null || true; done
            break
        fi
        sleep 0.5
    done
    JOB_PIDS=()
    # The agents leave their jobs' nodes once every node is done; then they are stopped.
    for pid in "${AGENT_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
    AGENT_PIDS=()
    if [ -n "$failed" ]; then
        for g in $(seq 0 $((ranks - 1))); do
            echo "---- $dir/host$g.log (last lines)" >&2; tail -5 "$dir/host$g.log" >&2
        done
        die "$mode failed:$failed"
    fi
    log "$mode: done in $((SECONDS - start)) s"
}

# ---- main ------------------------------------------------------------------------------

main() {
    parse_args "$@"
    if [ "$LOOPBACK" = 1 ] && [ -z "${NOSTALL_TESTBED_INSIDE:-}" ]; then
        # A user namespace mapping this user to root, and a network namespace of its own.
        exec unshare -rn env NOSTALL_TESTBED_INSIDE=1 bash "$0" "$@"
    fi
    [ "$(id -u)" = 0 ] || die "needs root (network namespaces, tc), or --loopback"
    [ "$LOOPBACK" = 0 ] || STORAGE_IP=127.0.0.1
    if [ "$ACTION" = clean ]; then
        local found
        found="$(leftovers)"
        if [ -z "$found" ]; then log "nothing to clean"; exit 0; fi
        log "removing $(echo $found) and the processes inside them"
        remove_namespaces
        [ -z "$(leftovers)" ] || die "could not remove: $(leftovers | tr '\n' ' ')"
        exit 0
    fi
    refuse_leftovers
    [ "$ACTION" = check ] || require_node
    trap teardown EXIT
    trap on_signal INT TERM
    build_network
    start_storage
    if [ "$ACTION" = check ]; then
        check
        return
    fi
    mkdir -p "$OUT"
    for mode in $MODES; do run_mode "$mode"; done
    local predicted=()
    case " $MODES " in
        *" nopeers "*|*" frequency "*|*" frequency-before "*)
            # What the cache simulator predicts for each host's cache alone, the same plan
            # (seed 0, the hosts as ranks), for the summary to set beside the hit rates.
            "$BIN" simulate cache --samples "$DATASET_FILES" --workers "$HOSTS" \
                --cache "${CACHE%\%}" --epochs "$EPOCHS" --seed 0 --policy minio,frequency \
                --csv "$OUT/simulated.csv" >/dev/null
            predicted=(--predicted "$OUT/simulated.csv") ;;
    esac
    python3 bench/testbed_summary.py --out "$OUT" --modes "$MODES" --hosts "$((HOSTS * RANKS_PER_HOST))" \
        --dataset-bytes "$DATASET_BYTES" --mbps "$MBPS" --cache "$CACHE" "${predicted[@]}"
}

main "$@"
