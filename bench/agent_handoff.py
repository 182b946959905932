"""The agent's hand-off, and its memory over many epochs.

One job reads through the node agent (`share="auto"`) for many epochs at a training
step's pace; the agent's resident memory (VmRSS) is sampled after each epoch. Then the
hand-off is timed: a consumer much slower than the pipeline (a sleep per batch), so that
every batch is there before it is asked for, and `next()` is the hand-off alone (the
batch's header read from the socket, its buffer mapped once, DLPack capsules, and
`torch.from_dlpack` with output="torch"), beside a job with its own loader measured the
same way.

Usage: .venv-test/bin/python bench/agent_handoff.py [--epochs 20] [--step-ms 20]
  [--handoff-batches 30] [--handoff-step-ms 100]
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


def waits(loader, epochs, step, on_epoch=None):
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
            time.sleep(step)
        if on_epoch:
            on_epoch(epoch)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--step-ms", type=float, default=20.0)
    p.add_argument("--data", default=os.path.join(HERE, "data", "photos"))
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--handoff-batches", type=int, default=30)
    p.add_argument("--handoff-step-ms", type=float, default=100.0,
                   help="the consumer's step while the hand-off is timed: long enough that "
                   "the pipeline is ahead")
    args = p.parse_args()
    import nostall

    step = args.step_ms / 1000
    with tempfile.TemporaryDirectory() as tmp:
        socket = os.path.join(tmp, "run", "agent.sock")
        os.environ["NOSTALL_AGENT_SOCKET"] = socket
        import nostall.agent
        agent = nostall.agent.start(socket, idle=600)
        try:
            shared = nostall.Loader(args.data, batch_size=args.batch, share="auto")
            rss = []
            got = waits(shared, args.epochs, step, lambda e: rss.append(rss_mb(agent.pid)))
            # The first batch of each epoch may wait for the pipeline; the rest are staged.
            staged = sorted(got)[: int(len(got) * 0.9)]
            del shared
            own = nostall.Loader(args.data, batch_size=args.batch)
            own_waits = sorted(waits(own, 2, step))[: int(2 * len(got) / args.epochs * 0.9)]
            del own
            handoff = {}
            for output in ("dlpack", "torch"):
                for share in ("auto", None):
                    loader = nostall.Loader(args.data, batch_size=args.batch, share=share,
                                            output=output)
                    it = iter(loader)
                    times = []
                    for _ in range(args.handoff_batches):
                        time.sleep(args.handoff_step_ms / 1000)
                        t = time.perf_counter()
                        batch = next(it)
                        times.append(time.perf_counter() - t)
                        del batch
                    del it, loader
                    handoff[(output, share)] = statistics.median(times) * 1e6
            # The hand-off proper: a batch already in memory becoming a torch tensor.
            import torch
            for share in ("auto", None):
                loader = nostall.Loader(args.data, batch_size=args.batch, share=share,
                                        output="dlpack")
                it = iter(loader)
                times = []
                for _ in range(args.handoff_batches):
                    images, labels = next(it)
                    t = time.perf_counter()
                    tensor = torch.from_dlpack(images)
                    times.append(time.perf_counter() - t)
                    del tensor, images, labels
                del it, loader
                handoff[("from_dlpack", share)] = statistics.median(times) * 1e6
        finally:
            agent.terminate()
            agent.wait(timeout=30)
    print(f"a batch's images into a torch tensor (torch.from_dlpack), medians: from the "
          f"agent's shared memory {handoff[('from_dlpack', 'auto')]:.1f} us, from the job's "
          f"own loader {handoff[('from_dlpack', None)]:.1f} us")
    for output in ("dlpack", "torch"):
        print(f"next() with output={output!r}, batch ready: through the agent "
              f"{handoff[(output, 'auto')]:.0f} us, own loader {handoff[(output, None)]:.0f} us "
              f"(medians of {args.handoff_batches})")
    med = statistics.median(staged) * 1e6
    print(f"next() over {args.epochs} epochs at a {args.step_ms} ms step: through the agent "
          f"median {med:.0f} us ({len(got)} batches), own loader "
          f"{statistics.median(own_waits) * 1e6:.0f} us")
    # What the configuration bounds: staging (512 MiB by default, in whole batches), the
    # group loader's batch buffers (prefetch 4, twice while epochs overlap) and the batch
    # each job has asked for ahead.
    batch_mb = args.batch * 3 * 224 * 224 * 4 / 1e6
    window = min(max(int(512 * 2**20 / (batch_mb * 1e6)), 2), 64)
    print(f"agent RSS after each epoch (MB): {' '.join(f'{r:.0f}' for r in rss)}; batch "
          f"buffers bounded by the configuration: ({window} staged + 8 + 1) x {batch_mb:.1f} MB "
          f"= {(window + 9) * batch_mb:.0f} MB")


if __name__ == "__main__":
    main()
