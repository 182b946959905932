#!/usr/bin/env python3
"""Memory of a video loader over an epoch: the peak resident memory it adds, against its
batch buffers (issue 66's memory figure).

Each case runs in a child process: the Kinetics recipe (one 16-frame clip a video, short
side 256, random crop 224, flip, normalise, float32 batches of 8) with `threads=2` over a
folder of hard links to real footage; the process's peak RSS (VmHWM) is read before the
loader is made (nostall and torch imported) and again after a whole epoch. What the loader adds is compared with its
batch buffers (`prefetch` batches, twice with the next epoch overlapping) and the rest
divided by the threads: each thread's decoder (FFmpeg's reference frames at the video's
size), its RGB frame and the resampler's scratch.

Cases: 1080p (the benchmark's 1080p H.264 sets and the phone's native 1080p clip, each
linked 24 times: 120 videos, 15 batches) and 2160p (`sports2d` encoded at 3840 × 2160 by
Debian's ffmpeg, made here once, linked 80 times: 10 batches). Each epoch is longer than
the batch buffers (`2 × prefetch` batches), so that the peak covers a steady state.

    .venv-test/bin/python bench/video_memory.py [--data bench/out/videos]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

RESULT = "RESULT "
BATCH, FRAMES, THREADS, PREFETCH = 8, 16, 2, 4


def peak_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM")


def child(folder: str) -> dict:
    import nostall
    import torch  # noqa: F401 - imported before the baseline, as a training script has it
    from nostall import ops, video

    before = peak_kib()
    loader = nostall.Loader(folder, batch_size=BATCH, threads=THREADS, prefetch=PREFETCH, seed=1,
                            pipeline=[video.Clip(FRAMES), ops.Resize(256), ops.RandomCrop(224),
                                      ops.RandomHorizontalFlip(),
                                      ops.Normalize((0.45, 0.45, 0.45), (0.225, 0.225, 0.225))])
    batches = 0
    for clips, _ in loader:
        batches += 1
        del clips
    after = peak_kib()
    return {"before_kib": before, "after_kib": after, "batches": batches,
            "batch_bytes": BATCH * FRAMES * 3 * 224 * 224 * 4}


def four_k(data: Path) -> Path:
    out = data / "memory" / "sports2d-2160p.mp4"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-i", str(data / "sources" / "sports2d.mp4"), "-an",
                        "-vf", "scale=-2:2160", "-pix_fmt", "yuv420p", "-c:v", "libx264", "-preset", "veryfast",
                        "-crf", "23", "-g", "60", str(out)], check=True)
    return out


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        print(RESULT + json.dumps(child(sys.argv[2])), flush=True)
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).parent / "out" / "videos")
    args = parser.parse_args()
    cases = {
        "1080p": [p for s in ("h264-1080p-gop2s", "h264-1080p-gop10s", "phone-vfr")
                  for p in sorted((args.data / s).iterdir())],
        "2160p": [four_k(args.data)],
    }
    copies = {"1080p": 24, "2160p": 80}
    for name, files in cases.items():
        with tempfile.TemporaryDirectory() as folder:
            for i in range(copies[name]):
                for j, path in enumerate(files):
                    os.link(path, Path(folder) / f"{i:02d}-{j:02d}{path.suffix}")
            run = subprocess.run([sys.executable, __file__, "--child", folder], capture_output=True, text=True)
            line = next((l for l in run.stdout.splitlines() if l.startswith(RESULT)), None)
            if line is None:
                sys.exit(f"{name}: the child failed:\n{run.stdout}\n{run.stderr}")
            r = json.loads(line[len(RESULT):])
        added = (r["after_kib"] - r["before_kib"]) * 1024
        buffers = 2 * PREFETCH * r["batch_bytes"]
        rest = added - buffers
        print(f"{name}: {len(files) * copies[name]} videos, {r['batches']} batches of {BATCH}; peak RSS "
              f"{r['before_kib'] / 1024:.0f} MiB before the loader, {r['after_kib'] / 1024:.0f} MiB after the "
              f"epoch: +{added / 2**20:.0f} MiB; batch buffers (2 x prefetch {PREFETCH} x "
              f"{r['batch_bytes'] / 2**20:.1f} MiB) {buffers / 2**20:.0f} MiB; the rest "
              f"{rest / 2**20:.0f} MiB, {rest / THREADS / 2**20:.0f} MiB a thread", flush=True)


if __name__ == "__main__":
    main()
