#!/usr/bin/env python3
"""Real recorded audio for the audio benchmarks: clips of Debian's Wesnoth music.

Debian's `wesnoth-1.16-music` package (GPL-2+, 40 orchestral tracks, Ogg Vorbis,
44.1 kHz stereo, about 2.2 hours) is downloaded with `apt-get download` (no root needed)
and unpacked; each track is cut into consecutive clips of 5 to 10 s (lengths drawn from
a fixed seed; `silence.ogg`, being silence, is left out), and the clips are written in
turn as FLAC, WAV (16-bit), Ogg Vorbis (q4) and MP3 (VBR V4) with ffmpeg: one class
directory per track.

    python3 bench/make_audio.py [--out bench/out/audio] [--jobs 2]

Writes OUT/clips/<track>/<n>.<ext> (every format) and OUT/lossless/<track>/ (links to
the WAV and FLAC clips: DALI's audio decoder aborts on MP3 and on some Ogg files cut by
ffmpeg, so comparisons with it use these). With --by-format, also one folder per format
for the per-format benchmarks (`bench/audio_floor.py`, `audio_compare.py --data`):
OUT/by-format/{flac16,wav,ogg,mp3}/ link to the clips of that format, and
OUT/by-format/{flac24,opus}/ hold the FLAC quarter's clips encoded again as 24-bit FLAC
and as Opus (128 kbit/s, libopus). Needs ffmpeg (`apt-get install
ffmpeg`). Idempotent: existing clips are kept.
"""

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PACKAGE = "wesnoth-1.16-music"
MUSIC = "usr/share/games/wesnoth/1.16/data/core/music"
FORMATS = {
    "flac": ["-c:a", "flac"],
    "wav": ["-c:a", "pcm_s16le"],
    "ogg": ["-c:a", "libvorbis", "-q:a", "4"],
    "mp3": ["-c:a", "libmp3lame", "-q:a", "4"],
}
SEED = 17
# The --by-format sets encoded again from the FLAC quarter's clips (from the clip, not
# cut from the track again: cut so, ffmpeg gives a few Opus clips a negative start, which
# opusfile, and so soundfile, refuses to open).
RECODE = {
    "flac24": ("flac", ["-c:a", "flac", "-sample_fmt", "s32", "-bits_per_raw_sample", "24"]),
    "opus": ("opus", ["-c:a", "libopus", "-b:a", "128k"]),
}
# The --by-format sets linked to the clips of one format.
LINKED = {"flac16": "flac", "wav": "wav", "ogg": "ogg", "mp3": "mp3"}


def tracks(cache: Path) -> list[Path]:
    """The package's tracks, downloading and unpacking it into `cache` once."""
    music = cache / MUSIC
    if not music.is_dir():
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run(["apt-get", "download", PACKAGE], cwd=cache, check=True)
        deb = next(cache.glob(f"{PACKAGE}_*.deb"))
        subprocess.run(["dpkg-deb", "-x", str(deb), str(cache)], check=True)
        deb.unlink()
    return sorted(p for p in music.glob("*.ogg") if p.name != "silence.ogg")


def duration(path: Path) -> float:
    out = subprocess.run(
        ["ffprobe", "-v", "error", "-show_entries", "format=duration", "-of", "csv=p=0", str(path)],
        check=True, capture_output=True, text=True,
    )
    return float(out.stdout.strip())


def plan(sources: list[Path]) -> list[tuple[Path, float, float, Path]]:
    """(track, start, length, clip path without extension) for every clip, in order."""
    rng = random.Random(SEED)
    clips = []
    n = 0
    for track in sources:
        total, start = duration(track), 0.0
        while True:
            length = rng.uniform(5.0, 10.0)
            if start + length > total:
                break
            clips.append((track, start, length, Path(track.stem) / f"{n:05d}"))
            start += length
            n += 1
    return clips


def cut(track: Path, start: float | None, length: float, out: Path, codec: list[str]) -> None:
    """Encodes `length` s of `track` from `start` to `out` (all of it when `start` is None)."""
    if out.exists():
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".part" + out.suffix)
    span = [] if start is None else ["-ss", f"{start:.3f}", "-t", f"{length:.3f}"]
    subprocess.run(
        ["ffmpeg", "-v", "error", "-y", *span, "-i", str(track), "-map_metadata", "-1", *codec,
         str(tmp)],
        check=True,
    )
    tmp.rename(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = Path(__file__).resolve().parent
    parser.add_argument("--out", type=Path, default=here / "out" / "audio")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--by-format", action="store_true",
                        help="also write OUT/by-format/<format>/ (see above)")
    args = parser.parse_args()
    if shutil.which("ffmpeg") is None:
        sys.exit("make_audio.py needs ffmpeg: apt-get install ffmpeg")
    cache = Path(os.environ.get("NOSTALL_AUDIO_CACHE", tempfile.gettempdir())) / "nostall-wesnoth"
    clips = plan(tracks(cache))
    formats = list(FORMATS)
    jobs = []
    for i, (track, start, length, rel) in enumerate(clips):
        ext = formats[i % len(formats)]
        jobs.append((track, start, length, args.out / "clips" / rel.with_suffix("." + ext), FORMATS[ext]))
    recoded = []
    for _, _, length, clip, _ in jobs:
        if args.by_format and clip.suffix == ".flac":
            for name, (suffix, codec) in RECODE.items():
                rel = clip.relative_to(args.out / "clips").with_suffix("." + suffix)
                recoded.append((clip, None, length, args.out / "by-format" / name / rel, codec))
    with ThreadPoolExecutor(args.jobs) as pool:
        for batch in (jobs, recoded):
            for future in [pool.submit(cut, *job) for job in batch]:
                future.result()
    lossless = args.out / "lossless"
    for _, _, _, out, _ in jobs:
        if out.parent.parent.name != "clips":
            continue
        links = [lossless] if out.suffix in (".wav", ".flac") else []
        if args.by_format:
            links += [args.out / "by-format" / name for name, ext in LINKED.items()
                      if out.suffix == "." + ext]
        for folder in links:
            link = folder / out.parent.name / out.name
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.exists():
                link.symlink_to(out.resolve())
    seconds = sum(length for _, _, length, _ in clips)
    print(f"{len(clips)} clips ({seconds / 3600:.2f} h) in {args.out / 'clips'}; "
          f"WAV and FLAC ones linked in {lossless}")


if __name__ == "__main__":
    main()
