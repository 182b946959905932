"""Many ``nostall node`` processes on this host, launched as torchrun launches a job's nodes.

Each process is one node of one rank (``RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE=1``,
``MASTER_ADDR=127.0.0.1``, ``MASTER_PORT``): node 0's peer service is the rendezvous at
``MASTER_PORT + 1``, the others listen on ports the system picks (``NOSTALL_PEER_LISTEN``
with port 0). The last node starts ``--late`` seconds after the others. The job runs
``--epochs`` epochs over the dataset with a partitioned cache (every node holds its
share and a little more) and locality-aware batches.

It checks that every process exits 0 and that each epoch delivered every sample of the
dataset once across the job (the plan pads the last batches: a sample may come twice,
never more than once per rank's padding), and writes one JSON object with:
- ``join_after_last_s``: from the late node's start until every node had joined;
- ``barrier_s``: per epoch, the longest and the median wait at node 0's barrier (with
  ``--epoch-barrier``; without it the nodes meet only at the end, and these are 0);
- ``finish_wait_s``: the longest and the median wait at that last meeting;
- ``epoch_s``: per epoch, the longest rank's epoch;
- ``largest_child_rss_mib``: the largest peak resident memory of one node process.

Usage (a release build, and a folder of photographs such as
``bench/make_photos.py --count 1024`` makes)::

    cargo build --release -p nostall-cli
    python3 bench/many_nodes.py --nodes 256 --dataset bench/data/photos1k --out bench/out/many
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=256)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--out", default="bench/out/many_nodes")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--late", type=float, default=5.0)
    parser.add_argument("--port", type=int, default=29400, help="MASTER_PORT")
    parser.add_argument("--binary", default="target/release/nostall")
    parser.add_argument("--epoch-barrier", action="store_true",
                        help="meet before each epoch, not only at the end")
    args = parser.parse_args()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for stale in list(out.glob("node*")) + list(out.glob("ids*")):
        stale.unlink()
    # One index, written before the nodes start, so that they all read it.
    subprocess.run([args.binary, "index", args.dataset], check=True, stdout=subprocess.DEVNULL)

    share = 100.0 / args.nodes * 1.5
    base = dict(os.environ)
    for name in [k for k in base if k.startswith("NOSTALL_")]:
        del base[name]
    base.update(
        NOSTALL_PEER_SECRET="the secret of the many-nodes run",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(args.port),
        WORLD_SIZE=str(args.nodes),
        LOCAL_WORLD_SIZE="1",
        LOCAL_RANK="0",
    )

    def start(rank: int) -> subprocess.Popen:
        env = dict(base, RANK=str(rank))
        if rank > 0:
            env["NOSTALL_PEER_LISTEN"] = "127.0.0.1:0"
        command = [
            args.binary, "node", args.dataset,
            "--epochs", str(args.epochs), "--batch-size", str(args.batch_size),
            "--cache-size", f"{share:.3f}%", "--size", "64",
            "--prep-threads", "1", "--fetch-threads", "1",
            "--ids", str(out / f"ids{rank}"), "--json", str(out / f"node{rank}.jsonl"),
        ] + (["--epoch-barrier"] if args.epoch_barrier else [])
        log = open(out / f"node{rank}.log", "w")
        return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=log)

    late = args.nodes - 1
    processes = {rank: start(rank) for rank in range(late)}
    time.sleep(args.late)
    last_started = time.monotonic()
    processes[late] = start(late)

    joined: dict[int, float] = {}
    while len(joined) < args.nodes:
        failed = [r for r, p in processes.items() if p.poll() not in (None, 0)]
        if failed:
            print(f"nodes {failed[:8]} failed before joining; see {out}/node*.log", file=sys.stderr)
            break
        for rank in range(args.nodes):
            if rank not in joined and "joined;" in (out / f"node{rank}.log").read_text():
                joined[rank] = time.monotonic() - last_started
        time.sleep(0.05)

    codes = {rank: process.wait() for rank, process in processes.items()}
    # Of the reaped children, the largest peak resident memory (not a sum).
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss

    bad = {r: c for r, c in codes.items() if c != 0}
    barriers, epochs = [], []
    for epoch in range(args.epochs):
        waits, seconds = [], []
        for rank in range(args.nodes):
            lines = (out / f"node{rank}.jsonl").read_text().splitlines() if rank not in bad else []
            if len(lines) > epoch:
                row = json.loads(lines[epoch])
                waits.append(row["barrier_s"])
                seconds.append(row["seconds"])
        barriers.append({"max": max(waits, default=0), "median": statistics.median(waits or [0])})
        epochs.append(max(seconds, default=0))

    finish = []
    for rank in range(args.nodes):
        found = re.search(r"every node finished \(([0-9.]+) s after this one\)",
                          (out / f"node{rank}.log").read_text())
        if found:
            finish.append(float(found.group(1)))

    samples = sum(1 for p in Path(args.dataset).rglob("*") if p.suffix.lower() in (".jpg", ".jpeg"))
    coverage = []
    for epoch in range(args.epochs):
        seen: Counter[int] = Counter()
        for rank in range(args.nodes):
            path = out / f"ids{rank}"
            lines = path.read_text().splitlines() if path.exists() else []
            if len(lines) > epoch:
                seen.update(int(i) for i in lines[epoch].split(":", 1)[1].split())
        coverage.append({
            "distinct": len(seen),
            "delivered": sum(seen.values()),
            "most_per_sample": max(seen.values(), default=0),
        })

    summary = {
        "nodes": args.nodes,
        "samples": samples,
        "epochs": args.epochs,
        "late_s": args.late,
        "all_exited_0": not bad,
        "failed": sorted(bad)[:16],
        "joined": len(joined),
        "join_after_last_s": round(max(joined.values(), default=float("nan")), 3),
        "barrier_s": barriers,
        "finish_wait_s": {"max": max(finish, default=0),
                          "median": statistics.median(finish or [0])},
        "epoch_s": epochs,
        "coverage": coverage,
        "largest_child_rss_mib": round(peak_kib / 1024, 1),
    }
    print(json.dumps(summary))
    ok = not bad and all(c["distinct"] == samples for c in coverage)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
