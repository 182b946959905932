"""CPU time by role: how much of a loader's CPU goes to fetching and how much to prep.

A scheduler that moves workers between fetch and prep can only gain where fetching
costs CPU that prep then lacks. This measures it: it runs `nostall bench` in one storage
setting at a time and samples every thread's time on a CPU (`/proc/PID/task/TID/schedstat`,
nanoseconds, every 10 ms), then sums it by the thread's name: `nostall-prep-*` (decode and
augment), `nostall-fetch-*` (reads: cache hits, files, tar members, S3 requests polled on
the reading thread), `nostall-worker-*` (builds since 2026-11-26: one pool whose workers
take either role, so their time is both roles' together; measure the split with a build
before it), `nostall-s3` (the S3 client's runtime: connections, TLS, bodies),
`nostall-warm-*` (a placement read ahead), and the rest (the consumer, the main thread).
It also reports the most threads the process had at once. A thread's last 10 ms before
it exits can be missed; each epoch's threads are new, so the
script reports the epochs' samples and keeps epochs long enough for that not to matter.

Settings (each optional, all by default): `files` (the page cache warm), `cold` (O_DIRECT
reads from the disk), `cache` (a MinIO cache holding the whole dataset: hits after the
warm-up epoch), `latency` (20 ms a read: 100-odd fetch threads, mostly waiting), `s3` (a
local s3s-fs serving a copy of the dataset; needs `s3s-fs` on the PATH or in ~/.cargo/bin).

Usage: python3 bench/role_cpu.py [--data bench/data/photos] [--epochs 3]
                                 [--settings files,cold,cache,latency,s3]
                                 [--nostall ./target/release/nostall]
"""

import argparse
import json
import os
import subprocess
import sys
import time

from s3_local import S3Server

NOSTALL = "./target/release/nostall"
ROLES = [("prep", "nostall-prep-"), ("fetch", "nostall-fetch-"), ("workers", "nostall-worker-"),
         ("s3 client", "nostall-s3"), ("warm", "nostall-warm-")]


def role(name):
    for label, prefix in ROLES:
        if name.startswith(prefix):
            return label
    return "other"


def thread_times(pid):
    """{tid: (name, ns on a CPU)} for the live threads of `pid`."""
    times = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return times
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                ns = int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            continue
        times[tid] = (name, ns)
    return times


def measure(cmd, env=None):
    """Runs `cmd`, sampling its threads; returns (bench JSON, CPU seconds by role, the most
    threads seen at once)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    last = {}
    most = 0
    while proc.poll() is None:
        live = thread_times(proc.pid)
        most = max(most, len(live))
        last.update(live)
        time.sleep(0.01)
    out, err = proc.communicate()
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{err}")
    by_role = {}
    for name, ns in last.values():
        by_role[role(name)] = by_role.get(role(name), 0.0) + ns / 1e9
    return json.loads(out), by_role, most


def dataset_samples(data):
    return sum(len([f for f in files if not f.startswith(".")]) for _, _, files in os.walk(data))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default="bench/data/photos")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--settings", default="files,cold,cache,latency,s3")
    parser.add_argument("--nostall", default=NOSTALL, help="the nostall binary to measure")
    args = parser.parse_args()
    if args.nostall == NOSTALL:
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "nostall-cli"], check=True)
    base = ["bench", "--threads", str(args.threads), "--no-floor", "--json",
            "--epochs", str(args.epochs)]
    settings = {
        "files": (args.data, []),
        "cold": (args.data, ["--cold"]),
        "cache": (args.data, ["--cache", "minio", "--cache-size", "100%"]),
        "latency": (args.data, ["--latency-ms", "20"]),
        "s3": (S3Server.url, []),
    }
    rows = []
    for name in args.settings.split(","):
        data, flags = settings[name]
        server = S3Server(args.data) if name == "s3" else None
        try:
            result, cpu, threads = measure([args.nostall, base[0], data, *base[1:], *flags],
                                           env=server.env() if server else None)
        finally:
            if server:
                server.stop()
        samples = dataset_samples(args.data) * (args.epochs + 1)  # the warm-up epoch too
        per_sample = {k: v / samples * 1e6 for k, v in cpu.items()}
        fetching = sum(per_sample.get(k, 0.0) for k in ("fetch", "s3 client"))
        rows.append(dict(setting=name, images_per_s=result["images_per_s"], threads=threads,
                         cpu_us_per_sample=per_sample,
                         fetch_share_of_loader_cpu=fetching / (fetching + per_sample["prep"])))
        print(json.dumps(rows[-1]), flush=True)
    print(f"\n{'setting':<10}{'images/s':>10}{'threads':>9}{'prep us':>10}{'fetch us':>10}"
          f"{'s3 us':>8}{'other us':>10}{'fetch share':>13}")
    for r in rows:
        c = r["cpu_us_per_sample"]
        print(f"{r['setting']:<10}{r['images_per_s']:>10.0f}{r['threads']:>9}{c.get('prep', 0):>10.1f}"
              f"{c.get('fetch', 0):>10.1f}{c.get('s3 client', 0):>8.1f}{c.get('other', 0):>10.1f}"
              f"{r['fetch_share_of_loader_cpu']:>13.1%}")


if __name__ == "__main__":
    main()
