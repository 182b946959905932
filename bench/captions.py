"""Captions tokenized to 77 ids: nostall.Tokenizer against OpenCLIP's tokenizer and the
``tokenizers`` package, side by side in one process.

The texts: the sentences of the Python documentation's reference topics that ship with
the interpreter (``pydoc_data``; real English prose, 3 000-odd sentences), in batches of
64, on one thread each (nostall's tokenizer runs in the caller's thread; ``tokenizers``'
``encode_batch`` is asked for one thread through ``RAYON_NUM_THREADS=1``, as a
DataLoader worker would run it). The three alternate ``--rounds`` times; the figure is
each one's median rate in texts a second, and the ratios of the medians.

Usage: ``RAYON_NUM_THREADS=1 python bench/captions.py [--rounds 5] [--json out.json]`` in
a venv with nostall, open_clip_torch and tokenizers (``.venv-test``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import time

BATCH = 64
LENGTH = 77


def sentences() -> list[str]:
    from pydoc_data.topics import topics

    text = " ".join(topics[k] for k in sorted(topics))
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if len(s.strip()) >= 3]


def rate(tokenize, texts: list[str]) -> float:
    started = time.perf_counter()
    for at in range(0, len(texts), BATCH):
        tokenize(texts[at:at + BATCH])
    return len(texts) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json")
    args = parser.parse_args()
    if os.environ.get("RAYON_NUM_THREADS") != "1":
        raise SystemExit("run with RAYON_NUM_THREADS=1 (one thread for the tokenizers package)")

    import open_clip
    import tokenizers

    import nostall
    from nostall._tokenizer import tokenizer_json

    simple = open_clip.get_tokenizer("ViT-B-32")
    fresh_cache = dict(simple.cache)
    ours = nostall.Tokenizer(simple, LENGTH)
    hf = tokenizers.Tokenizer.from_str(tokenizer_json(simple))
    hf.enable_truncation(LENGTH)
    hf.enable_padding(length=LENGTH, pad_id=0)
    texts = sentences()
    contenders = {
        "nostall": ours,
        "open_clip": lambda batch: simple(batch, LENGTH),
        "tokenizers": hf.encode_batch,
    }
    rates: dict[str, list[float]] = {name: [] for name in contenders}
    for r in range(args.rounds):
        for name, tokenize in contenders.items():
            # OpenCLIP caches each word's BPE: a fresh cache a round, as a worker starts.
            if name == "open_clip":
                simple.cache = dict(fresh_cache)
            rates[name].append(rate(tokenize, texts))
        print(f"round {r + 1}: " + ", ".join(f"{n} {v[-1]:.0f}" for n, v in rates.items()), flush=True)
    medians = {name: statistics.median(v) for name, v in rates.items()}
    print(f"{len(texts)} texts, batch {BATCH}, {LENGTH} ids: " +
          ", ".join(f"{n} {m:.0f} texts/s" for n, m in medians.items()) +
          f"; nostall / open_clip {medians['nostall'] / medians['open_clip']:.2f}x, "
          f"nostall / tokenizers {medians['nostall'] / medians['tokenizers']:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"texts": len(texts), "batch": BATCH, "length": LENGTH, "rates": rates,
                       "medians": medians, "date": time.strftime("%Y-%m-%d")}, f, indent=1)


if __name__ == "__main__":
    main()
