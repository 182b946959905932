#!/usr/bin/env python3
"""Crops from one-hour recordings against the same crops from five-second files.

Builds, from Debian's Wesnoth music (as `make_audio.py` fetches it), one hour of real
music (the tracks in order, 44.1 kHz stereo) as a 16-bit FLAC file and a 96 kbit/s Ogg
Opus file; cuts the same hour into 720 five-second files of each format; writes a
manifest (CSV) listing the hour's 720 five-second segments; then runs `nostall bench`
with the `m5` preset (a random 4 s crop of each sample, 8 kHz) on the manifest and on the
folder of files, alternately, and reports samples/s and the bytes read per sample.

    python3 bench/long_audio.py [--out bench/out/long] [--rounds 2] [--threads 2]

Needs ffmpeg and a release build of the CLI (`cargo build --release -p nostall-cli`).
Writes OUT/long_audio.json. Idempotent: existing files are kept.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_audio import tracks  # noqa: E402

HOUR = 3600
CLIP = 5
CODECS = {
    "flac": ["-c:a", "flac"],
    "opus": ["-c:a", "libopus", "-b:a", "96k"],
}


def ffmpeg(*args: str) -> None:
    subprocess.run(["ffmpeg", "-v", "error", "-y", *args], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def build(out: Path, jobs: int) -> None:
    """The hour in each format, its five-second files and its manifests."""
    out.mkdir(parents=True, exist_ok=True)
    hour = out / "hour.flac"
    if not hour.exists():
        cache = Path(os.environ.get("NOSTALL_AUDIO_CACHE", tempfile.gettempdir())) / "nostall-wesnoth"
        listing = out / "tracks.txt"
        listing.write_text("".join(f"file '{t}'\n" for t in tracks(cache)))
        ffmpeg("-f", "concat", "-safe", "0", "-i", str(listing), "-t", str(HOUR),
               "-ac", "2", "-ar", "44100", "-map_metadata", "-1", *CODECS["flac"],
               str(out / "part.flac"))
        (out / "part.flac").rename(hour)
    if not (out / "hour.opus").exists():
        ffmpeg("-i", str(hour), "-map_metadata", "-1", *CODECS["opus"], str(out / "part.opus"))
        (out / "part.opus").rename(out / "hour.opus")
    cuts = []
    for ext, codec in CODECS.items():
        folder = out / "five" / ext
        folder.mkdir(parents=True, exist_ok=True)
        for n in range(HOUR // CLIP):
            path = folder / f"{n:04d}.{ext}"
            if not path.exists():
                cuts.append((n, path, codec))
        manifest = out / f"hour_{ext}.csv"
        manifest.write_text("path,start,duration\n" + "".join(
            f"hour.{ext},{n * CLIP},{CLIP}\n" for n in range(HOUR // CLIP)))

    def cut(job):
        n, path, codec = job
        part = path.with_name(path.stem + ".part" + path.suffix)
        ffmpeg("-ss", str(n * CLIP), "-t", str(CLIP), "-i", str(hour), "-map_metadata", "-1",
               *codec, str(part))
        part.rename(path)

    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(cut, cuts))


def bench(cli: Path, data: Path, threads: int) -> dict:
    out = subprocess.run(
        [str(cli), "bench", "--preset", "m5", "--threads", str(threads), "--no-floor", str(data)],
        check=True, capture_output=True, text=True, cwd=data.parent,
    ).stdout
    rate = float(re.search(r"M5 pipeline, \d+ threads\s+([\d.]+)", out).group(1))
    epoch = re.findall(r"epoch \d+: (\d+) samples .*", out)[-1]
    storage = float(re.findall(r"([\d.]+) MB from storage", out)[-1])
    return {"samples_per_s": rate, "mb_per_sample": storage / int(epoch)}


def main() -> None:
    here = Path(__file__).resolve().parent
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=here / "out" / "long")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--cli", type=Path, default=here.parent / "target" / "release" / "nostall")
    args = parser.parse_args()
    out = args.out.resolve()
    build(out, args.jobs)
    results = {}
    for ext in CODECS:
        pair = {"segments": out / f"hour_{ext}.csv", "files": out / "five" / ext}
        runs = {name: [] for name in pair}
        for _ in range(args.rounds):
            for name, data in pair.items():
                runs[name].append(bench(args.cli, data, args.threads))
        ratios = [s["samples_per_s"] / f["samples_per_s"]
                  for s, f in zip(runs["segments"], runs["files"])]
        results[ext] = {
            "recording_mb": (out / f"hour.{ext}").stat().st_size / 1e6,
            "runs": runs,
            "segments_over_files": ratios,
        }
        print(f"{ext}: segments of the hour / five-second files: "
              + ", ".join(f"{r:.2f}" for r in ratios)
              + f"; MB per sample {runs['segments'][0]['mb_per_sample']:.3f} (segments), "
              f"{runs['files'][0]['mb_per_sample']:.3f} (files); the hour "
              f"{results[ext]['recording_mb']:.0f} MB")
    (out / "long_audio.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
