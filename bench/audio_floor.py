#!/usr/bin/env python3
"""Each audio format's decode-only rate: nostall against the C reference decoder, one
thread each, side by side in one run.

    python3 bench/audio_floor.py NAME=DIR [NAME=DIR ...] [--rounds 3]
        [--nostall target/release/nostall] [--json bench/out/audio_floor.json]

Each DIR holds clips of one format (e.g. the output of ``bench/make_audio.py
--split-formats``); NAME labels the row (``flac16``, ``flac24``, ``wav``, ``ogg``,
``mp3``, ``opus``). The C side is ``bench/decode_floor.c``, compiled here against the
system's libraries (Debian: ``apt-get install libflac-dev libsndfile1-dev libvorbis-dev
libmpg123-dev libopusfile-dev``): libFLAC, libsndfile (WAV), libvorbisfile, libmpg123
and opusfile over libopus, chosen by the files' extension; every file read into memory,
then decoded in full, every frame of every channel, to float. nostall's side is the decode
floor of ``nostall bench DIR --preset m5 --threads 1 --epochs 1 --json``: the same files
read into memory and decoded whole, every channel, to planar f32 (the m5 pipeline's rate
is printed beside it). The two alternate, ``--rounds`` times; medians are reported.

A ratio above 1 means nostall decodes faster; the issue's bar, "within 1.1x of the C
decoder's time", is a ratio of at least 0.91.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
CODECS = {".flac": "flac", ".wav": "wav", ".ogg": "ogg", ".oga": "ogg", ".mp3": "mp3",
          ".opus": "opus"}
# pkg-config names of the C libraries, for their versions.
LIBRARIES = ["flac", "sndfile", "vorbisfile", "libmpg123", "opusfile", "opus"]


def build_c(out: Path) -> Path:
    exe = out / "decode_floor"
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "flac", "sndfile", "vorbisfile",
                            "libmpg123", "opusfile"],
                           check=True, capture_output=True, text=True).stdout.split()
    subprocess.run(["cc", "-O2", "-o", str(exe), str(BENCH / "decode_floor.c"), *flags, "-lm"],
                   check=True)
    return exe


def versions() -> dict[str, str]:
    found = {}
    for lib in LIBRARIES:
        r = subprocess.run(["pkg-config", "--modversion", lib], capture_output=True, text=True)
        found[lib] = r.stdout.strip() or "?"
    return found


def files_of(folder: Path) -> tuple[str, list[str]]:
    files = sorted(str(p) for p in folder.rglob("*") if p.suffix.lower() in CODECS)
    if not files:
        sys.exit(f"no audio files under {folder}")
    codecs = {CODECS[Path(f).suffix.lower()] for f in files}
    if len(codecs) != 1:
        sys.exit(f"{folder} mixes formats ({sorted(codecs)}): give one folder per format")
    return codecs.pop(), files


def c_rate(exe: Path, codec: str, files: list[str]) -> tuple[float, int]:
    """Files decoded per second, and how many the library refused to open."""
    out = subprocess.run([str(exe), codec, "1", *files], check=True, capture_output=True,
                         text=True).stdout
    report = json.loads(out)
    return report["files_per_s"], report["refused"]


def nostall_rate(binary: str, folder: Path) -> tuple[float, float]:
    out = subprocess.run([binary, "bench", str(folder), "--preset", "m5", "--threads", "1",
                          "--epochs", "1", "--batch-size", "32", "--json"],
                         check=True, capture_output=True, text=True).stdout
    report = json.loads(out.strip().splitlines()[-1])
    return report["decode_floor_images_per_s"], report["images_per_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sets", nargs="+", metavar="NAME=DIR")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--nostall", default=str(REPO / "target/release/nostall"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    sets = []
    for spec in args.sets:
        name, _, folder = spec.partition("=")
        codec, files = files_of(Path(folder))
        sets.append((name, Path(folder), codec, files))
    with tempfile.TemporaryDirectory() as tmp:
        exe = build_c(Path(tmp))
        rows = []
        for name, folder, codec, files in sets:
            c, ours, m5 = [], [], []
            refused = 0
            for _ in range(args.rounds):
                rate, refused = c_rate(exe, codec, files)
                c.append(rate)
                floor, pipeline = nostall_rate(args.nostall, folder)
                ours.append(floor)
                m5.append(pipeline)
            row = {
                "set": name, "codec": codec, "files": len(files), "c_refused": refused,
                "c_files_per_s": statistics.median(c), "nostall_files_per_s": statistics.median(ours),
                "nostall_m5_clips_per_s": statistics.median(m5),
                "rounds": {"c": c, "nostall": ours, "m5": m5},
            }
            row["ratio"] = row["nostall_files_per_s"] / row["c_files_per_s"]
            rows.append(row)
            print(f"{name:8} {codec:5} {len(files):5} files   C {row['c_files_per_s']:8.1f}/s   "
                  f"nostall {row['nostall_files_per_s']:8.1f}/s   ratio {row['ratio']:.2f}   "
                  f"(m5 {row['nostall_m5_clips_per_s']:.1f} clips/s)"
                  + (f"  [C refused {refused}]" if refused else ""), flush=True)
    libs = versions()
    print("C libraries:", ", ".join(f"{k} {v}" for k, v in libs.items()))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"rows": rows, "libraries": libs}, indent=1))


if __name__ == "__main__":
    main()
