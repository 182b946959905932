#!/usr/bin/env python3
"""Audio loaders side by side in one run, on the same real clips, batch 32, 2 threads.

Pipelines (same output shape in every loader):

* ``m5``: mono, resampled to 8 kHz, a random crop of 32 000 samples: ``[32, 1, 32000]``.
* ``melspec``: mono, 16 kHz, a random 64 000-sample crop, MelSpectrogram(n_fft=400,
  hop=160, 64 mels), log: ``[32, 64, 401]``.

Loaders:

* ``nostall``: ``nostall.Loader(data, pipeline=..., batch_size=32, threads=2)``.
* ``torch``: ``DataLoader(num_workers=2, persistent_workers=True, batch_size=32,
  shuffle=True)`` over a dataset that decodes with soundfile (libsndfile), mixes to mono,
  resamples with ``torchaudio.transforms.Resample`` (its kernel cached per source rate, as a
  careful user would), crops (zero-padding short clips) and, for ``melspec``, applies
  ``torchaudio.transforms.MelSpectrogram`` and ``log(x + 1e-6)``; one torch thread per
  worker.
* ``dali``: NVIDIA DALI on the CPU (``device_id=None``, ``num_threads=2``):
  ``readers.file`` → ``decoders.audio(downmix, sample_rate)`` → ``slice`` (random start,
  padded) → for ``melspec`` ``spectrogram`` → ``mel_filter_bank`` → ``to_decibels``. DALI's
  audio decoder aborts on MP3 and on some Ogg files cut by ffmpeg, so DALI and a second
  nostall run read only the WAV and FLAC clips (``--lossless``).

Each measurement runs in a fresh child process; one warm-up epoch, then ``--epochs``
measured epochs (clips/s over those). The loaders alternate, ``--rounds`` times, and the
median of the rounds is reported with every round's figure.

    .venv-audio/bin/python bench/audio_compare.py [--data bench/out/audio/clips]
        [--lossless bench/out/audio/lossless] [--rounds 2] [--json bench/out/audio.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

BATCH = 32
THREADS = 2
RESULT = "RESULT "
PIPELINES = {
    # name: (rate, crop length, mel)
    "m5": (8000, 32000, False),
    "melspec": (16000, 64000, True),
}
EXTENSIONS = (".wav", ".flac", ".ogg", ".mp3", ".opus")


def files_of(root: str) -> list[tuple[str, int]]:
    """(path, class index) of every clip under `root`, class folders sorted."""
    classes = sorted(p.name for p in Path(root).iterdir() if p.is_dir())
    return [(str(f), label) for label, c in enumerate(classes)
            for f in sorted((Path(root) / c).iterdir()) if f.suffix in EXTENSIONS]


def timed(epoch, epochs: int) -> tuple[int, float]:
    """Clips delivered and seconds taken by `epochs` passes of `epoch()` (an iterable of
    (audio, labels) batches), after one warm-up pass."""
    for _ in epoch():
        pass
    n, started = 0, time.perf_counter()
    for _ in range(epochs):
        for audio, labels in epoch():
            n += len(labels)
    return n, time.perf_counter() - started


def run_nostall(data: str, pipeline: str, epochs: int) -> tuple[int, float]:
    import nostall

    loader = nostall.Loader(data, pipeline=pipeline, batch_size=BATCH, threads=THREADS)
    return timed(lambda: loader, epochs)


class Clips:
    """The torch baseline's dataset (module level, so that workers can pickle it)."""

    def __init__(self, files, pipeline):
        self.files, (self.rate, self.length, self.mel) = files, PIPELINES[pipeline]
        self.resamplers, self.melspec = {}, None

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        import soundfile
        import torch
        import torchaudio

        path, label = self.files[i]
        data, rate = soundfile.read(path, dtype="float32", always_2d=True)
        x = torch.from_numpy(data.T).mean(0, keepdim=True)
        if rate != self.rate:
            if rate not in self.resamplers:
                self.resamplers[rate] = torchaudio.transforms.Resample(rate, self.rate)
            x = self.resamplers[rate](x)
        n = x.shape[1]
        if n > self.length:
            start = int(torch.randint(0, n - self.length + 1, ()))
            x = x[:, start:start + self.length]
        else:
            x = torch.nn.functional.pad(x, (0, self.length - n))
        if self.mel:
            if self.melspec is None:
                self.melspec = torchaudio.transforms.MelSpectrogram(
                    self.rate, n_fft=400, hop_length=160, n_mels=64)
            x = torch.log(self.melspec(x[0]) + 1e-6)
        return x, label


def run_torch(data: str, pipeline: str, epochs: int) -> tuple[int, float]:
    import torch
    from torch.utils.data import DataLoader

    torch.set_num_threads(1)
    loader = DataLoader(Clips(files_of(data), pipeline), batch_size=BATCH, shuffle=True,
                        num_workers=THREADS, persistent_workers=True,
                        worker_init_fn=lambda _: torch.set_num_threads(1))
    return timed(lambda: loader, epochs)


def run_dali(data: str, pipeline: str, epochs: int) -> tuple[int, float]:
    from nvidia.dali import fn, pipeline_def, types

    rate, length, mel = PIPELINES[pipeline]

    @pipeline_def(batch_size=BATCH, num_threads=THREADS, device_id=None, seed=0)
    def build():
        encoded, label = fn.readers.file(file_root=data, random_shuffle=True, name="files")
        audio, _ = fn.decoders.audio(encoded, dtype=types.FLOAT, downmix=True,
                                     sample_rate=rate)
        # A random start in the first 30% of the clip, padded past its end: the same work
        # as an exact random crop.
        audio = fn.slice(audio, rel_start=fn.random.uniform(range=[0.0, 0.3], shape=[1]),
                         shape=[length], axes=[0], out_of_bounds_policy="pad")
        if mel:
            spec = fn.spectrogram(audio, nfft=400, window_length=400, window_step=160)
            audio = fn.to_decibels(fn.mel_filter_bank(spec, sample_rate=rate, nfilter=64))
        return audio, label

    pipe = build()
    pipe.build()
    per_epoch = pipe.epoch_size("files")
    batches = -(-per_epoch // BATCH)
    return timed(lambda: (pipe.run() for _ in range(batches)), epochs)


LOADERS = {"nostall": run_nostall, "torch": run_torch, "dali": run_dali}


def measure(loader: str, data: str, pipeline: str, epochs: int) -> float:
    """Clips/s of `loader` in a child process."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", loader, "--pipeline",
           pipeline, "--data", data, "--epochs", str(epochs)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    n, seconds = json.loads(next(l for l in out.splitlines() if l.startswith(RESULT))[len(RESULT):])
    return n / seconds


def main() -> None:
    here = Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(here / "out" / "audio" / "clips"))
    ap.add_argument("--lossless", default=str(here / "out" / "audio" / "lossless"))
    ap.add_argument("--pipelines", default="m5,melspec")
    ap.add_argument("--epochs", type=int, default=1, help="measured epochs after a warm-up")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", help="append the results to this file as one JSON line")
    ap.add_argument("--no-dali", action="store_true",
                    help="nostall and the DataLoader on --data only (one format's folder)")
    ap.add_argument("--child", choices=sorted(LOADERS), help=argparse.SUPPRESS)
    ap.add_argument("--pipeline", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        n, seconds = LOADERS[args.child](args.data, args.pipeline, args.epochs)
        print(RESULT + json.dumps([n, seconds]), flush=True)
        return

    runs = [("nostall", "data"), ("torch", "data"), ("nostall", "lossless"), ("dali", "lossless")]
    if args.no_dali:
        runs = runs[:2]
    results = {}
    for pipeline in args.pipelines.split(","):
        rates = {run: [] for run in runs}
        for _ in range(args.rounds):
            for loader, which in runs:
                data = args.data if which == "data" else args.lossless
                rates[(loader, which)].append(measure(loader, data, pipeline, args.epochs))
        med = {k: statistics.median(v) for k, v in rates.items()}
        results[pipeline] = {
            f"{loader}/{which}": {"clips_per_s": round(med[(loader, which)], 1),
                                  "rounds": [round(r, 1) for r in rates[(loader, which)]]}
            for loader, which in runs
        }
        results[pipeline]["nostall_vs_torch"] = round(med[("nostall", "data")] / med[("torch", "data")], 2)
        print(f"{pipeline}: " + ", ".join(f"{loader} ({which}) {med[(loader, which)]:.1f} clips/s"
                                         for loader, which in runs))
        print(f"  nostall / DataLoader+torchaudio: {results[pipeline]['nostall_vs_torch']}x")
        if not args.no_dali:
            results[pipeline]["nostall_vs_dali"] = round(
                med[("nostall", "lossless")] / med[("dali", "lossless")], 2)
            print(f"  nostall / DALI (WAV+FLAC): {results[pipeline]['nostall_vs_dali']}x")
    record = {"batch_size": BATCH, "threads": THREADS, "epochs": args.epochs,
              "rounds": args.rounds, "data": args.data, "lossless": args.lossless,
              "clips": len(files_of(args.data)),
              "lossless_clips": None if args.no_dali else len(files_of(args.lossless)),
              "cpus": os.cpu_count(), "results": results}
    print(json.dumps(record))
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
