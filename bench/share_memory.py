"""Memory of a job reading through the node agent, over many epochs with a pause each.

A job (`nostall.Loader(..., share="auto")`) reads ``--epochs`` epochs through an agent of
its own, changes every batch in place (``images.sub_(0.5)``: each batch's private
copy-on-write mapping gets its own pages), and pauses ``--pause`` seconds after each
epoch, as a job that evaluates between epochs does. After each epoch it records its own
resident memory and mappings, and the agent's resident memory (and of it, the heap's and
the staging memfds'): all must stay flat (each batch's mapping is released with the
batch).

Usage (the test venv, with nostall installed)::

    .venv-test/bin/python bench/share_memory.py --dataset DIR --epochs 100 --pause 3
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import nostall
import nostall.agent


def status_kib(pid: int | str, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1])
    raise KeyError(field)


def mappings() -> int:
    return len(Path("/proc/self/maps").read_text().splitlines())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--pause", type=float, default=3.0)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as run:
        socket = Path(run) / "agent.sock"
        agent = nostall.agent.start(socket, staging="64MiB", lease=2.0, idle=600)
        try:
            os.environ["NOSTALL_AGENT_SOCKET"] = str(socket)
            loader = nostall.Loader(
                args.dataset, share="auto", batch_size=args.batch_size,
                pipeline="train", image_size=128, seed=0, threads=2,
            )
            rows = []
            started = time.monotonic()
            for epoch in range(args.epochs):
                batches = 0
                for images, _labels in loader:
                    images.sub_(0.5)
                    batches += 1
                    del images
                rows.append({
                    "epoch": epoch,
                    "batches": batches,
                    "job_rss_mib": round(status_kib("self", "VmRSS:") / 1024, 1),
                    "job_mappings": mappings(),
                    "agent_rss_mib": round(status_kib(agent.pid, "VmRSS:") / 1024, 1),
                    # Which pages: the heap's, or the staging memfds' (shared memory).
                    "agent_anon_mib": round(status_kib(agent.pid, "RssAnon:") / 1024, 1),
                    "agent_shmem_mib": round(status_kib(agent.pid, "RssShmem:") / 1024, 1),
                })
                print(json.dumps(rows[-1]), file=sys.stderr)
                time.sleep(args.pause)
            loader = None
        finally:
            agent.terminate()
            agent.wait()

    def spread(key: str, first: int) -> dict:
        values = [r[key] for r in rows[first:]]
        return {"first": rows[first][key], "last": values[-1], "max": max(values), "min": min(values)}

    # From epoch 2 on: the first epochs fill the agent's staging and the allocator's pools.
    settled = min(2, len(rows) - 1)
    print(json.dumps({
        "dataset": args.dataset,
        "epochs": args.epochs,
        "pause_s": args.pause,
        "batch_size": args.batch_size,
        "seconds": round(time.monotonic() - started, 1),
        "from_epoch": settled,
        "job_rss_mib": spread("job_rss_mib", settled),
        "job_mappings": spread("job_mappings", settled),
        "agent_rss_mib": spread("agent_rss_mib", settled),
        "agent_anon_mib": spread("agent_anon_mib", settled),
        "agent_shmem_mib": spread("agent_shmem_mib", settled),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
