"""Members of a group going on without their node agent when it is stopped (SIGSTOP).

Two member processes (`nostall.Loader(..., share="auto")`) read one epoch through an agent
of their own; after ``--before`` batches the agent is stopped, for ``--stopped`` seconds.
Each member records how long it waited for each batch. A member's longest wait is how
long it took to give the agent up (the agent's lease, plus up to 0.1 s of polling) and
start its own threads; every batch must still arrive exactly once, as a loader of the
job's own would give it (checked against one).

Usage (the test venv, with nostall installed)::

    .venv-test/bin/python bench/agent_stopped.py --dataset DIR --lease 2 --stopped 10
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import nostall
import nostall.agent

MEMBER = textwrap.dedent("""
    import json, sys, time
    import nostall
    dataset, settings, before = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
    loader = nostall.Loader(dataset, share="auto", **settings)
    print("attached", flush=True)
    sys.stdin.readline()
    ids, waits = [], []
    asked = time.monotonic()
    for n, _ in enumerate(loader):
        waits.append(time.monotonic() - asked)
        ids.append(loader.last_ids)
        if n + 1 == before:
            print("paused", flush=True)
            sys.stdin.readline()
        asked = time.monotonic()
    print(json.dumps({"ids": ids, "waits": waits}), flush=True)
""")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--lease", type=float, default=2.0)
    parser.add_argument("--stopped", type=float, default=10.0)
    parser.add_argument("--before", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()
    settings = dict(batch_size=args.batch_size, pipeline="train", image_size=128, seed=3,
                    threads=2)
    own = nostall.Loader(args.dataset, **settings)
    expected = [own.last_ids for _ in own]

    with tempfile.TemporaryDirectory() as run:
        socket = Path(run) / "agent.sock"
        agent = nostall.agent.start(socket, staging="64MiB", lease=args.lease, idle=600)
        env = dict(os.environ, NOSTALL_AGENT_SOCKET=str(socket))
        members = [
            subprocess.Popen(
                [sys.executable, "-c", MEMBER, args.dataset, json.dumps(settings),
                 str(args.before)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True, env=env)
            for _ in range(2)
        ]
        try:
            for step in ("attached", "paused"):
                for p in members:
                    if step == "paused":
                        p.stdin.write("go\n")
                        p.stdin.flush()
                    line = p.stdout.readline().strip()
                    if line != step:
                        raise SystemExit(f"a member said {line!r}: {p.stderr.read()}")
            agent.send_signal(signal.SIGSTOP)
            stopped_at = time.monotonic()
            for p in members:
                p.stdin.write("go\n")
                p.stdin.flush()
            results = []
            for p in members:
                out, err = p.communicate(timeout=args.stopped + 600)
                finished = time.monotonic() - stopped_at
                got = json.loads(out)
                results.append({
                    "exit": p.returncode,
                    "exact": got["ids"] == expected,
                    "batches": len(got["ids"]),
                    "longest_wait_s": round(max(got["waits"]), 3),
                    "finished_after_stop_s": round(finished, 3),
                    "fell_back": "the node agent is lost" in err,
                })
            remaining = args.stopped - (time.monotonic() - stopped_at)
            if remaining > 0:
                time.sleep(remaining)
        finally:
            for p in members:
                p.kill()
            agent.send_signal(signal.SIGCONT)
            agent.terminate()
            agent.wait(timeout=30)
    print(json.dumps({"lease_s": args.lease, "stopped_s": args.stopped,
                      "members": results}, indent=1))
    return 0 if all(r["exit"] == 0 and r["exact"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
