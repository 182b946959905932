"""The agent's hand-off, and its memory over many epochs.

One job reads through the node agent (`share="auto"`) for many epochs at a training
step's pace; the agent's resident memory (VmRSS) is sampled after each epoch. Then the
hand-off is timed: a consumer much slower than the pipeline, so that every batch is there
before it is asked for, and `next()` is the hand-off alone, beside a job with its own
loader measured the same way. Through the agent, the loader's hand-off thread has
received the batch and made its objects (DLPack capsules, and `torch.from_dlpack` with
output="torch") during the step, and `next()` takes them; the job's own loader makes
them in `next()`. The consumer's
step either keeps its thread running (as a GPU step's kernel launches and
synchronisation do) or sleeps; after a sleep, the first instructions pay for the thread's
wake-up on a VM, whatever they do: every other step times a control instead, the same
`torch.from_dlpack` of a small NumPy array.

Usage: .venv-test/bin/python bench/agent_handoff.py [--epochs 20] [--step-ms 20]
  [--handoff-batches 30] [--handoff-step-ms 300]
  [--data bench/data/photos] [--batch 64]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def waits(loader, epochs, step_s, on_epoch=None):
    out = []
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        it = iter(loader)
        while True:
            t = time.perf_counter()
            try:
                images, labels = next(it)
            except StopIteration:
                break
            out.append(time.perf_counter() - t)
            del images, labels
            time.sleep(step_s)
        if on_epoch:
            on_epoch(epoch)
    return out


STEPS = {
    "torch": "a step of torch operations (a training step's are: torch's code stays cached)",
    "busy": "a step spinning in Python (torch's code leaves the caches)",
    "sleep": "a step that sleeps (the thread wakes up first)",
}


def step(kind, seconds):
    """The consumer's step: "torch" makes small torch tensors for its length, as a
    training step's operator calls do (torch's own code stays in the caches); "busy" spins
    in Python; "sleep" sleeps."""
    if kind == "sleep":
        time.sleep(seconds)
        return
    import torch

    x = torch.zeros(16)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        if kind == "torch":
            x = x + 1


def timed_handoff(args, loader, output, step_kind):
    """Medians (us) after each consumer step: `next()` with the batch ready; with
    output="dlpack", `torch.from_dlpack` of its images; and, as a control, the same call on
    a NumPy array (what any tensor pays at that point; the first call after the step)."""
    import numpy
    import torch

    seconds = args.handoff_step_ms / 1000
    control_array = numpy.zeros(4, dtype=numpy.float32)
    it = iter(loader)
    times = {"next": [], "from_dlpack": [], "control": []}
    for i in range(args.handoff_batches):
        step(step_kind, seconds)
        if i % 2:
            t = time.perf_counter()
            control = torch.from_dlpack(control_array)
            times["control"].append(time.perf_counter() - t)
            del control
            continue
        t = time.perf_counter()
        images, labels = next(it)
        times["next"].append(time.perf_counter() - t)
        if output == "dlpack":
            t = time.perf_counter()
            tensor = torch.from_dlpack(images)
            times["from_dlpack"].append(time.perf_counter() - t)
            del tensor
        del images, labels
    del it
    return {k: statistics.median(v) * 1e6 if v else float("nan") for k, v in times.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--step-ms", type=float, default=20.0)
    p.add_argument("--data", default=os.path.join(HERE, "data", "photos"))
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--handoff-batches", type=int, default=30)
    p.add_argument("--handoff-step-ms", type=float, default=300.0,
                   help="the consumer's step while the hand-off is timed: long enough that "
                   "the pipeline is ahead")
    args = p.parse_args()
    import nostall

    step_s = args.step_ms / 1000
    with tempfile.TemporaryDirectory() as tmp:
        socket = os.path.join(tmp, "run", "agent.sock")
        os.environ["NOSTALL_AGENT_SOCKET"] = socket
        import nostall.agent
        agent = nostall.agent.start(socket, idle=600)
        try:
            shared = nostall.Loader(args.data, batch_size=args.batch, share="auto")
            rss = []
            got = waits(shared, args.epochs, step_s, lambda e: rss.append(rss_mb(agent.pid)))
            # The first batch of each epoch may wait for the pipeline; the rest are staged.
            staged = sorted(got)[: int(len(got) * 0.9)]
            del shared
            own = nostall.Loader(args.data, batch_size=args.batch)
            own_waits = sorted(waits(own, 2, step_s))[: int(2 * len(got) / args.epochs * 0.9)]
            del own
            handoff = {}
            for step_kind in STEPS:
                for output in ("dlpack", "torch"):
                    for share in ("auto", None):
                        loader = nostall.Loader(args.data, batch_size=args.batch, share=share,
                                                output=output)
                        handoff[(step_kind, output, share)] = timed_handoff(
                            args, loader, output, step_kind)
                        del loader
        finally:
            agent.terminate()
            agent.wait(timeout=30)
    for step_kind, why in STEPS.items():
        print(f"after {why} ({args.handoff_step_ms} ms), medians of {args.handoff_batches}, us:")
        for share, name in (("auto", "through the agent"), (None, "own loader")):
            d = handoff[(step_kind, "dlpack", share)]
            t = handoff[(step_kind, "torch", share)]
            print(f"  {name:>17}: next() output='torch' {t['next']:.1f}; next() "
                  f"output='dlpack' {d['next']:.1f}, then torch.from_dlpack(images) "
                  f"{d['from_dlpack']:.1f}; control: torch.from_dlpack(a NumPy array) at the "
                  f"same point {t['control']:.1f}")
    med = statistics.median(staged) * 1e6
    print(f"next() over {args.epochs} epochs at a {args.step_ms} ms step: through the agent "
          f"median {med:.0f} us ({len(got)} batches), own loader "
          f"{statistics.median(own_waits) * 1e6:.0f} us")
    # What the configuration bounds: staging (512 MiB by default, in whole batches), the
    # group loader's batch buffers (prefetch 4, twice while epochs overlap) and the job's
    # credits: the batch it trains on, the one made ahead and one in the socket.
    batch_mb = args.batch * 3 * 224 * 224 * 4 / 1e6
    window = min(max(int(512 * 2**20 / (batch_mb * 1e6)), 2), 64)
    print(f"agent RSS after each epoch (MB): {' '.join(f'{r:.0f}' for r in rss)}; batch "
          f"buffers bounded by the configuration: ({window} staged + 8 + 3) x {batch_mb:.1f} "
          f"MB = {(window + 11) * batch_mb:.0f} MB")


if __name__ == "__main__":
    main()
