"""Audio-text: a NeMo manifest's segments with their transcripts tokenized in the engine,
against the same manifest read without text.

Data (written by this script into ``--out``): a NeMo JSON-lines manifest of 2 000
segments of 1.5 s, cut from the two real recordings of the test set
(``crates/nostall/tests/recordings``: orchestral music, FLAC and Ogg Opus; Debian has no
recorded English speech with transcripts to take), each with a transcript: real English
sentences of 20 to 200 characters from the Python documentation (``pydoc_data``).

* ``text``: ``nostall.Loader(manifest, pipeline="melspec", fields={"audio": "audio",
  "text": nostall.Field("text", tokenizer=nostall.Tokenizer(tokenizer, 77))})``: log-mel
  spectrograms with the transcript's token ids (OpenCLIP's BPE tokenizer).
* ``plain``: ``nostall.Loader(manifest, pipeline="melspec")``.

Batch 64, 2 threads; each run in a fresh process, the two alternated ``--rounds`` times;
the figure is the ratio of the medians (goal: within 10%).

Usage: ``python bench/audio_text.py [--rounds 5] [--json out.json]`` (``.venv-test``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clip import captions  # noqa: E402
from compare import run_child  # noqa: E402

BATCH = 64
THREADS = 2
SEGMENTS = 2000
RECORDINGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crates", "nostall", "tests",
                          "recordings")


def make(out: str) -> str:
    os.makedirs(out, exist_ok=True)
    for name in ("battle.flac", "battle.opus"):
        with open(os.path.join(RECORDINGS, name), "rb") as src, open(os.path.join(out, name), "wb") as dst:
            dst.write(src.read())
    texts = captions(SEGMENTS)
    manifest = os.path.join(out, "train.json")
    with open(manifest, "w") as f:
        for i in range(SEGMENTS):
            ext = ("flac", "opus")[i % 2]
            start = round((i // 2) % 12 * 0.5, 2)
            f.write(json.dumps({"audio_filepath": f"battle.{ext}", "offset": start, "duration": 1.5,
                                "text": texts[i]}) + "\n")
    return manifest


def run(which: str, manifest: str, batches: int) -> dict:
    import nostall

    kwargs = dict(pipeline="melspec", batch_size=BATCH, threads=THREADS, drop_last=True)
    if which == "text":
        import open_clip

        tokenizer = nostall.Tokenizer(open_clip.get_tokenizer("ViT-B-32"), 77)
        loader = nostall.Loader(manifest, fields={"audio": "audio", "text": nostall.Field("text", tokenizer=tokenizer)},
                                **kwargs)
    else:
        loader = nostall.Loader(manifest, **kwargs)
    seen, n, started = 0, 0, 0.0
    while seen < 4 + batches:
        for batch in loader:
            seen += 1
            if seen == 4:
                started = time.perf_counter()
            elif seen > 4:
                n += BATCH
            if seen == 4 + batches:
                break
    return {"images": n, "seconds": time.perf_counter() - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="bench/out/audio_text")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=25)
    parser.add_argument("--json")
    parser.add_argument("--child")
    parser.add_argument("--manifest")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run(args.child, args.manifest, args.batches)))
        return
    manifest = make(args.out)
    runs: dict[str, list[dict]] = {"plain": [], "text": []}
    for r in range(args.rounds):
        for which in (("plain", "text") if r % 2 == 0 else ("text", "plain")):
            result = run_child([__file__, "--child", which, "--manifest", manifest, "--batches", str(args.batches)],
                               which)
            runs[which].append(result)
            print(f"round {r + 1}: {which} {result['images_per_s']:.0f} segments/s", flush=True)
    medians = {k: statistics.median(x["images_per_s"] for x in v) for k, v in runs.items()}
    ratio = medians["text"] / medians["plain"]
    print(f"audio-text: with transcripts {medians['text']:.0f} segments/s, without {medians['plain']:.0f}: {ratio:.3f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"manifest": os.path.abspath(manifest), "batch": BATCH, "threads": THREADS,
                       "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d"), "runs": runs,
                       "median_segments_per_s": medians, "ratio": ratio}, f, indent=1)


if __name__ == "__main__":
    main()
