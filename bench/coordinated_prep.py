"""Coordinated prep: concurrent jobs over one dataset, each alone or through the agent.

N training jobs of a hyper-parameter search run at once on this node, each a Python
process iterating a `nostall.Loader` over the same dataset with the same pipeline and
seed, and a torch consumer whose step is emulated by a fixed sleep per batch (so that
the jobs' models do not compete with the loaders for the CPU).

Modes, alternated over rounds, each round fresh processes:
  alone    each job prepares every sample itself (share off, threads="auto")
  shared   share="auto": the jobs form one group in the node agent, each batch fetched
           and prepared once for all

Per mode: aggregate samples/s (all jobs' images over the time from the first job's start
to the last job's end, medians over rounds) and the bytes the jobs' processes (with the
agent's) read from the disk per epoch (/proc/<pid>/io read_bytes; the page cache is
dropped before each run when root or `sudo -n` may). With `--read cold` every read goes
to the disk (O_DIRECT), as from storage the node does not cache: then the bytes show
what each mode asks of storage.

Usage: .venv-test/bin/python bench/coordinated_prep.py [--jobs 4] [--epochs 2]
  [--rounds 2] [--step-ms 5] [--data bench/data/photos] [--pipeline train]
  [--batch 64] [--read cached|cold] [--json bench/out/coordinated_prep.json]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

JOB = r"""
import json, sys, time
import nostall
data, pipeline, batch, epochs, step, share, read = sys.argv[1:8]
kwargs = {"share": share} if share != "off" else {}
loader = nostall.Loader(data, batch_size=int(batch), pipeline=pipeline, seed=0, read=read,
                        **kwargs)
print("ready", flush=True)
sys.stdin.readline()
start = time.monotonic()
images = 0
for epoch in range(int(epochs)):
    loader.set_epoch(epoch)
    for x, y in loader:
        images += x.shape[0]
        time.sleep(float(step) / 1000)
end = time.monotonic()
print(json.dumps({"start": start, "end": end, "images": images}), flush=True)
"""


def read_bytes(pid):
    try:
        with open(f"/proc/{pid}/io") as f:
            for line in f:
                if line.startswith("read_bytes:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def storage_bytes(args, pids):
    """Bytes read from storage so far: the storage link's transmitted bytes when the
    storage runs in a network namespace, else the processes' reads from the disk."""
    if args.storage_netns:
        out = subprocess.run(["ip", "netns", "exec", args.storage_netns, "cat",
                              "/sys/class/net/eth0/statistics/tx_bytes"],
                             check=True, capture_output=True, text=True).stdout
        return int(out)
    return sum(read_bytes(p) for p in pids)


def drop_page_cache():
    """Empties the page cache (as root, or through `sudo -n`; else leaves it)."""
    command = ["sh", "-c", "sync; echo 1 > /proc/sys/vm/drop_caches"]
    if os.geteuid() != 0:
        command = ["sudo", "-n"] + command
    try:
        subprocess.run(command, check=False, stderr=subprocess.DEVNULL)
    except OSError:
        pass


def run(args, mode, socket):
    env = dict(os.environ, NOSTALL_AGENT_SOCKET=socket)
    agent = None
    if mode == "shared":
        import nostall.agent
        agent = nostall.agent.start(socket, idle=600)
    share = "auto" if mode == "shared" else "off"
    jobs = [subprocess.Popen([sys.executable, "-c", JOB, args.data, args.pipeline,
                              str(args.batch), str(args.epochs), str(args.step_ms), share,
                              args.read],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
            for _ in range(args.jobs)]
    for j in jobs:
        assert j.stdout.readline().strip() == "ready"
    # Drop the dataset from the page cache so that every mode reads it from the disk.
    drop_page_cache()
    pids = [j.pid for j in jobs] + ([agent.pid] if agent else [])
    before = storage_bytes(args, pids)
    for j in jobs:
        j.stdin.write("go\n")
        j.stdin.flush()
    results = []
    after = 0
    for j in jobs:
        line = j.stdout.readline()
        results.append(json.loads(line))
    after = storage_bytes(args, pids)
    for j in jobs:
        j.wait(timeout=60)
    if agent:
        agent.terminate()
        agent.wait(timeout=30)
    images = sum(r["images"] for r in results)
    span = max(r["end"] for r in results) - min(r["start"] for r in results)
    return {"images_per_s": images / span, "read_bytes_per_epoch": (after - before) / args.epochs}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=4)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--step-ms", type=float, default=5.0)
    p.add_argument("--data", default=os.path.join(HERE, "data", "photos"))
    p.add_argument("--pipeline", default="train")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--read", choices=["cached", "cold"], default="cached",
                   help="cold: every job reads around the page cache (O_DIRECT), as from "
                   "storage it does not hold")
    p.add_argument("--storage-netns", help="count storage bytes as those sent by eth0 of "
                   "this network namespace (where bench/coordinated_fetch.sh runs s3s-fs)")
    p.add_argument("--dataset-bytes", type=int,
                   help="the dataset's size (needed when --data is not a directory)")
    p.add_argument("--json", default=os.path.join(HERE, "out", "coordinated_prep.json"))
    args = p.parse_args()
    dataset_bytes = args.dataset_bytes or sum(
        os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(args.data) for f in fs
        if not f.startswith("."))
    figures = {"alone": [], "shared": []}
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o700)
        for r in range(args.rounds):
            for mode in ("alone", "shared"):
                socket = os.path.join(tmp, f"r{r}", "agent.sock")
                f = run(args, mode, socket)
                figures[mode].append(f)
                print(f"round {r} {mode:6}: {f['images_per_s']:8.0f} samples/s, "
                      f"{f['read_bytes_per_epoch'] / dataset_bytes:.2f}x the dataset read per epoch",
                      flush=True)
    med = {m: statistics.median(f["images_per_s"] for f in fs) for m, fs in figures.items()}
    reads = {m: statistics.median(f["read_bytes_per_epoch"] for f in fs) / dataset_bytes
             for m, fs in figures.items()}
    print(f"{args.jobs} jobs, {args.pipeline}, batch {args.batch}, step {args.step_ms} ms: "
          f"alone {med['alone']:.0f} samples/s, shared {med['shared']:.0f} samples/s "
          f"({med['shared'] / med['alone']:.2f}x); reads per epoch {reads['alone']:.2f}x vs "
          f"{reads['shared']:.2f}x the dataset")
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"args": vars(args), "rounds": figures, "images_per_s": med,
                   "reads_per_epoch": reads, "ratio": med["shared"] / med["alone"]}, f, indent=1)


if __name__ == "__main__":
    main()
