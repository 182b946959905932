"""A loader's first batch: how long a training script waits for it.

A fresh `Loader` per measurement (fresh threads and fresh batch buffers), the script's
set-up between making it and asking for the first batch emulated by a sleep (a real one
builds its model and moves it to the GPU: seconds). Three ways, alternated round by round:

- `prepared`: the default; the loader starts epoch 0 as it is made (`overlap_epochs`).
- `at iter`: `overlap_epochs=False`: epoch 0 starts when the loop asks for it, paying for
  the threads' start and the first touch of fresh batch buffers.
- `one batch`: the same loader's next epoch, also started when asked for, its buffers
  reused: the time to prepare one batch from an empty pipeline, the floor the issue
  names.

Also `prepared, no set-up`: the default asked at once (the work started at construction
has had no head start).

Usage: .venv-test/bin/python bench/first_batch.py [--data bench/data/photos]
  [--batch 64] [--threads 2] [--setup-s 0.5] [--rounds 6]
"""

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def first_wait(loader, epoch):
    loader.set_epoch(epoch)
    t = time.perf_counter()
    it = iter(loader)
    next(it)
    return time.perf_counter() - t, it


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=os.path.join(HERE, "data", "photos"))
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--setup-s", type=float, default=0.5)
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args()
    import nostall

    def make(**kw):
        return nostall.Loader(args.data, batch_size=args.batch, pipeline="train",
                              threads=args.threads, output="numpy", **kw)

    # Warms the page cache and the index, so that every round reads the same way.
    warm = make(overlap_epochs=False)
    for _ in warm:
        pass
    del warm

    got = {"prepared": [], "prepared, no set-up": [], "at iter": [], "one batch": []}
    for round_ in range(args.rounds):
        order = ["prepared", "at iter", "prepared, no set-up"]
        if round_ % 2:
            order.reverse()
        for mode in order:
            loader = make(overlap_epochs=mode != "at iter")
            if mode != "prepared, no set-up":
                time.sleep(args.setup_s)
            wait, it = first_wait(loader, 0)
            got[mode].append(wait)
            if mode == "at iter":
                for _ in it:
                    pass
                wait, it = first_wait(loader, 1)
                got["one batch"].append(wait)
            del it, loader
    print(f"{args.data}, batch {args.batch}, {args.threads} prep threads, set-up "
          f"{args.setup_s * 1e3:.0f} ms, {args.rounds} rounds; first next() in ms, "
          f"median (min-max):")
    for mode, waits in got.items():
        ms = [w * 1e3 for w in waits]
        print(f"  {mode:>20}: {statistics.median(ms):7.2f} ({min(ms):.2f}-{max(ms):.2f})")


if __name__ == "__main__":
    sys.exit(main())
