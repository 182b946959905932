#!/usr/bin/env python3
"""What torchcodec returns after a seek, against its own decoding from the start: the
peers' side of issue 66's correctness figures (nostall's side:
``cargo run --release -p nostall-video --example exactness -- VIDEO...``).

For each file: every frame decoded in order (``VideoDecoder`` iterated, one FFmpeg
thread), then ``--offsets`` single frames at random indices, each from a fresh decoder
(``get_frame_at``), in ``exact`` and ``approximate`` seek modes. A line per file and mode
says how many frames differ from the sequential decode, by how much, and whether the
frame count agrees.

    .venv-test/bin/python bench/video_exactness.py [--offsets 100] VIDEO...
"""

from __future__ import annotations

import argparse
import random

import torch


def check(path: str, offsets: int) -> list[str]:
    from torchcodec.decoders import VideoDecoder

    sequential = []
    try:
        for frame in VideoDecoder(path, num_ffmpeg_threads=1, seek_mode="exact"):
            sequential.append(frame)
    except Exception as e:  # noqa: BLE001 - the peer's failure is the finding
        return [f"{path}: decoding in order raised after {len(sequential)} frames ({type(e).__name__}: {e})"]
    n = len(sequential)
    lines = []
    for mode in ("exact", "approximate"):
        draws = random.Random(0x5EED)
        try:
            count = VideoDecoder(path, num_ffmpeg_threads=1, seek_mode=mode).metadata.num_frames
        except Exception as e:  # noqa: BLE001 - the peer's refusal is the finding
            lines.append(f"{path} [{mode}]: refused to open ({type(e).__name__}: {e})")
            continue
        differ, worst, failed, first = 0, 0, 0, None
        for _ in range(offsets):
            k = draws.randrange(n)
            try:
                got = VideoDecoder(path, num_ffmpeg_threads=1, seek_mode=mode).get_frame_at(k).data
            except Exception:  # noqa: BLE001
                failed += 1
                continue
            if got.shape != sequential[k].shape or not torch.equal(got, sequential[k]):
                differ += 1
                first = k if first is None else first
                if got.shape == sequential[k].shape:
                    worst = max(worst, int((got.int() - sequential[k].int()).abs().max()))
        verdict = "exact" if differ == failed == 0 else (
            f"{differ} differ (first: frame {first}, at most {worst} levels), {failed} raised")
        lines.append(f"{path} [{mode}]: {n} frames decoded in order, {count} in its metadata; "
                     f"{offsets} offsets: {verdict}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--offsets", type=int, default=100)
    parser.add_argument("videos", nargs="+")
    args = parser.parse_args()
    for path in args.videos:
        for line in check(path, args.offsets):
            print(line, flush=True)


if __name__ == "__main__":
    main()
