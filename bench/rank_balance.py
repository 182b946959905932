"""Load balance across the ranks of a node: two torchrun ranks whose batches differ in cost.

The job: `torchrun --standalone --nproc-per-node 2`, gloo, each iteration takes the next
batch from the rank's loader and all-reduces a small tensor (so that, as in data-parallel
training, every iteration waits for the slower rank; the model's step is left out, so
the job is data-bound). Each rank reads its own shard of photographs, as a job whose
shards are split by node (WebDataset's `split_by_node`) does: rank 0's are 1000x750
(bench/make_photos.py --scale 2), rank 1's the 500x375 set of bench/compare.sh. What
one batch costs each rank is measured first, each alone on one thread.

Modes, alternated over rounds, each round a fresh job:
  equal     threads="auto", balance_ranks=False: each rank half the cores (the split
            every loader makes today)
  balanced  the defaults: the ranks share the node's prep threads by demand
  all       threads = every core in each rank, no coordination (the kernel shares them)
  agent     share="auto": each rank's stream prepared by the node agent (a fresh one per
            job), which balances its threads between the ranks' streams by demand
  agent-all share="auto", balance_ranks=False: the agent gives each rank's stream every
            core (what it did before it balanced)

Figures per mode (medians over rounds): images/s of the job (both ranks), and per rank
the time per iteration spent waiting for its own batch and at the all-reduce.

Usage: python3 bench/rank_balance.py [--rounds 3] [--iterations 60] [--warmup 10]
  [--modes equal balanced all agent agent-all]
(with the test venv: .venv-test/bin/python bench/rank_balance.py)
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SMALL = os.path.join(HERE, "data", "photos")
LARGE = os.path.join(HERE, "data", "photos-large")
MODES = ["equal", "balanced", "all", "agent", "agent-all"]
BATCH = 64


def worker(args):
    import torch
    import torch.distributed as dist

    import nostall

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    data = [LARGE, SMALL][rank]
    kwargs = {
        "equal": {"balance_ranks": False},
        "balanced": {},
        "all": {"threads": len(os.sched_getaffinity(0))},
        "agent": {"share": "auto"},
        "agent-all": {"share": "auto", "balance_ranks": False},
    }[args.mode]
    loader = nostall.Loader(data, batch_size=BATCH, rank=0, world_size=1, seed=rank,
                            output="torch", **kwargs)

    def batches():
        while True:
            yield from loader

    it = batches()
    token = torch.zeros(1)
    for _ in range(args.warmup):
        next(it)
        dist.all_reduce(token)
    wait = reduce = 0.0
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    for _ in range(args.iterations):
        t0 = time.perf_counter()
        next(it)
        t1 = time.perf_counter()
        dist.all_reduce(token)
        t2 = time.perf_counter()
        wait += t1 - t0
        reduce += t2 - t1
    wall = time.perf_counter() - started
    used = resource.getrusage(resource.RUSAGE_SELF)
    cpu = used.ru_utime + used.ru_stime - cpu.ru_utime - cpu.ru_stime
    row = {"cpu_ms": 1e3 * cpu / args.iterations, "rank": rank, "wall": wall, "wait_ms": 1e3 * wait / args.iterations,
           "allreduce_ms": 1e3 * reduce / args.iterations,
           # The job's own loader's; through the agent, its threads are the agent's.
           "prep_threads": "-" if "share" in kwargs else loader.metrics["prep"]["threads"]}
    rows = [None, None]
    dist.all_gather_object(rows, row)
    if rank == 0:
        wall = max(r["wall"] for r in rows)
        print(json.dumps({"mode": args.mode, "images_per_s": 2 * BATCH * args.iterations / wall,
                          "ranks": rows}), flush=True)
    dist.destroy_process_group()


def alone(data):
    """One batch's cost on one core: images/s of this data alone on one thread."""
    out = subprocess.run(
        [os.path.join(ROOT, "target", "release", "nostall"), "bench", data, "--threads", "1",
         "--epochs", "1", "--no-floor", "--json"],
        check=True, capture_output=True, text=True).stdout
    return json.loads(out)["images_per_s"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=MODES, default="balanced")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=MODES,
                        help="the modes to run (equal, the reference, always runs)")
    parser.add_argument("--iterations", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--out", default=os.path.join(HERE, "out", "rank_balance.json"))
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    py = sys.executable
    subprocess.run([py, os.path.join(HERE, "make_photos.py"), "--out", LARGE, "--count",
                    "1000", "--seed", "1", "--scale", "2"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "nostall-cli"], check=True)
    costs = {"rank 0 (1000x750)": alone(LARGE), "rank 1 (500x375)": alone(SMALL)}
    for name, rate in costs.items():
        print(f"{name}, alone on one thread: {rate:.0f} images/s, "
              f"{1e3 * BATCH / rate:.1f} ms of one core a batch", flush=True)
    modes = ["equal"] + [m for m in args.modes if m != "equal"]
    results = {mode: [] for mode in modes}
    for round in range(args.rounds):
        order = modes if round % 2 == 0 else modes[::-1]
        for mode in order:
            with tempfile.TemporaryDirectory() as tmp:
                env = dict(os.environ)
                agent = None
                if mode.startswith("agent"):
                    import nostall.agent
                    env["NOSTALL_AGENT_SOCKET"] = os.path.join(tmp, "agent.sock")
                    agent = nostall.agent.start(env["NOSTALL_AGENT_SOCKET"], idle=600)
                try:
                    out = subprocess.run(
                        [py, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                         "2", __file__, "--worker", "--mode", mode, "--iterations",
                         str(args.iterations), "--warmup", str(args.warmup)],
                        check=True, capture_output=True, text=True, cwd=ROOT, env=env).stdout
                finally:
                    if agent is not None:
                        agent.terminate()
                        agent.wait(timeout=30)
            row = json.loads(out.strip().splitlines()[-1])
            results[mode].append(row)
            ranks = ", ".join(
                f"rank {r['rank']}: waits {r['wait_ms']:.0f} ms for its batch, "
                f"{r['allreduce_ms']:.0f} ms at the all-reduce, {r['cpu_ms']:.0f} ms of CPU, "
                f"{r['prep_threads']} prep threads at the end"
                for r in row["ranks"])
            print(f"round {round}, {mode}: {row['images_per_s']:.0f} images/s ({ranks})",
                  flush=True)
    median = {m: statistics.median(r["images_per_s"] for r in rows)
              for m, rows in results.items()}
    for mode in modes:
        print(f"{mode}: {median[mode]:.0f} images/s (median of {args.rounds}), "
              f"{median[mode] / median['equal']:.2f}x the equal split")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"alone": costs, "rounds": results, "median": median}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
