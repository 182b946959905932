#!/usr/bin/env python3
"""What PyAV, decord, SPDL and torchcodec return after a seek: the peers' side of issue 66's
correctness figures (nostall's side:
``cargo run --release -p nostall-video --example exactness -- VIDEO...``).

The reference, one for all peers: every frame decoded in order from the file's start by
Debian's FFmpeg 5.1 (the FFmpeg nostall links), converted to RGB by its default filter
(SPDL's ``decode_packets`` over the whole file). Then ``--offsets`` frame indices, drawn
with a fixed seed from the reference's count and the same for every peer, each asked of a
fresh reader, one decoder thread, through the peer's random-access API as users write it:

- PyAV: ``container.seek`` (backward, to a key frame) to the stream's start time plus
  k / ``average_rate``, then decode forward and take the first frame at or after that
  time, less half a frame;
- decord: ``VideoReader(path).get_batch([k])``;
- SPDL: ``sample_decode_video(demux_video(path), [k])``;
- torchcodec: ``VideoDecoder(path, seek_mode=...).get_frame_at(k)``, exact and approximate.

A returned frame is right when no RGB value is more than 1 level from the reference's
frame k. Each peer also decodes the whole file in order ("in order"); where that is
further off, by at most 4 levels (a peer's own FFmpeg decoding a codec differently), its
frames after a seek are judged within as much, so that what is counted is the seek's error.
One markdown table out, with the versions; in a cell, "first k → frame j" is the first
wrong frame in the order of the draws, and the reference frame it is (within the
tolerance), if any.

    python bench/video_exactness.py [--offsets 100] [--out table.md] VIDEO...

Needs ``av``, ``decord``, ``spdl-io`` and ``torchcodec`` (docs/video.md says how the
figures were made).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import random
from fractions import Fraction
from pathlib import Path

import numpy as np

TOLERANCE = 1  # levels, as issue 66 states it
# The most another FFmpeg's decoder was seen to differ by (PyAV's on MPEG-4 Part 2: 2);
# an in-order decoding further off than this is wrong, not another decoder.
DECODER_SLACK = 4
PEERS = ("PyAV", "decord", "SPDL", "torchcodec exact", "torchcodec approximate")


def reference(path: str) -> list[np.ndarray]:
    import spdl.io

    return list(spdl.io.to_numpy(spdl.io.convert_frames(spdl.io.decode_packets(spdl.io.demux_video(path)))))


def pyav_open(path: str):
    import av

    container = av.open(path)
    stream = container.streams.video[0]
    stream.thread_count = 1
    return container, stream


def pyav_in_order(path: str):
    container, stream = pyav_open(path)
    with container:
        for frame in container.decode(stream):
            yield frame.to_ndarray(format="rgb24")


def pyav_at(path: str, k: int) -> np.ndarray | None:
    container, stream = pyav_open(path)
    with container:
        rate = stream.average_rate or stream.guessed_rate
        start = (stream.start_time or 0) * stream.time_base
        wanted = start + k / Fraction(rate)
        container.seek(int(wanted / stream.time_base), stream=stream)
        for frame in container.decode(stream):
            if frame.pts is None:
                raise ValueError("a decoded frame has no time")
            if frame.pts * stream.time_base >= wanted - 1 / (2 * Fraction(rate)):
                return frame.to_ndarray(format="rgb24")
    return None


def pyav_count(path: str) -> int:
    container, stream = pyav_open(path)
    with container:
        return stream.frames


def decord_reader(path: str):
    import decord

    return decord.VideoReader(path, num_threads=1)


def decord_in_order(path: str):
    reader = decord_reader(path)
    for start in range(0, len(reader), 16):
        yield from reader.get_batch(list(range(start, min(start + 16, len(reader))))).asnumpy()


def spdl_at(path: str, k: int) -> np.ndarray | None:
    import spdl.io

    frames = spdl.io.sample_decode_video(spdl.io.demux_video(path), [k])
    return spdl.io.to_numpy(spdl.io.convert_frames(frames[0])) if frames else None


def spdl_count(path: str) -> int:
    import spdl.io

    return len(spdl.io.demux_video(path))


def torchcodec_decoder(path: str, mode: str):
    from torchcodec.decoders import VideoDecoder

    return VideoDecoder(path, num_ffmpeg_threads=1, seek_mode=mode)


def torchcodec_in_order(path: str, mode: str):
    for frame in torchcodec_decoder(path, mode):
        yield frame.permute(1, 2, 0).numpy()


def torchcodec_at(path: str, k: int, mode: str) -> np.ndarray:
    return torchcodec_decoder(path, mode).get_frame_at(k).data.permute(1, 2, 0).numpy()


# Per peer: the frame count it claims, its decoding in order, and frame k after a seek.
API = {
    "PyAV": (pyav_count, pyav_in_order, pyav_at),
    "decord": (lambda p: len(decord_reader(p)), decord_in_order,
               lambda p, k: decord_reader(p).get_batch([k]).asnumpy()[0]),
    "SPDL": (spdl_count, None, spdl_at),  # its decoding in order is the reference
    "torchcodec exact": (lambda p: torchcodec_decoder(p, "exact").metadata.num_frames,
                         lambda p: torchcodec_in_order(p, "exact"), lambda p, k: torchcodec_at(p, k, "exact")),
    "torchcodec approximate": (lambda p: torchcodec_decoder(p, "approximate").metadata.num_frames,
                               lambda p: torchcodec_in_order(p, "approximate"),
                               lambda p, k: torchcodec_at(p, k, "approximate")),
}


def levels(a: np.ndarray, b: np.ndarray) -> int | None:
    """The largest difference in levels, None when the shapes differ."""
    return int(np.abs(a.astype(np.int16) - b.astype(np.int16)).max()) if a.shape == b.shape else None


def which(frame: np.ndarray, ref: list[np.ndarray], tolerance: int) -> str:
    """The reference frame a wrong frame is, if any."""
    hits = [j for j, r in enumerate(ref) if (d := levels(frame, r)) is not None and d <= tolerance]
    return f"frame {hits[0]}" if hits else "no frame"


def short(e: Exception) -> str:
    """An error in a line: the peers put their source positions first, what went wrong last."""
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text if len(text) <= 120 else '…' + text[-110:]}"


def in_order(peer: str, path: str, ref: list[np.ndarray], notes: dict[str, list[str]]) -> tuple[str, int]:
    """How the peer's decoding from the start compares with the reference, and its largest
    difference in levels over the frames both have."""
    if API[peer][1] is None:
        return "", 0
    got, worst = 0, 0
    try:
        for frame in API[peer][1](path):
            if got < len(ref):
                d = levels(frame, ref[got])
                worst = max(worst, 255 if d is None else d)
            got += 1
    except Exception as e:  # noqa: BLE001 - the peer's failure is the finding
        notes.setdefault(short(e), []).append(f"in order, after {got} frames")
        parts = [f"{got} then raised"]
    else:
        parts = [] if got == len(ref) else [f"{got} frames"]
    parts += [f"≤{worst} lv"] if worst > TOLERANCE else []
    return ("in order: " + ", ".join(parts) if parts else ""), worst


def seeks(peer: str, path: str, ref: list[np.ndarray], wanted: list[int], tolerance: int,
          notes: dict[str, list[str]]) -> str:
    """The peer's frames at the wanted indices against the reference."""
    wrong, raised, missing, worst, first = 0, 0, 0, 0, None
    for k in wanted:
        try:
            got = API[peer][2](path, k)
        except Exception as e:  # noqa: BLE001
            if raised == 0:
                notes.setdefault(short(e), []).append(f"frame {k}")
            raised += 1
            continue
        if got is None:
            missing += 1
            continue
        d = levels(got, ref[k])
        if d is None or d > tolerance:
            wrong += 1
            worst = max(worst, 255 if d is None else d)
            if first is None:
                first = f"{k} → {which(got, ref, tolerance)}"
    if wrong == raised == missing == 0:
        return "exact"
    parts = [f"**{wrong} wrong** (first {first}, ≤{worst} lv)"] if wrong else []
    parts += [f"{raised} raised"] if raised else []
    parts += [f"{missing} missing"] if missing else []
    return ", ".join(parts)


def row(path: str, offsets: int, notes: list[str]) -> str:
    name = "/".join(Path(path).parts[-2:])
    try:
        ref = reference(path)
    except Exception as e:  # noqa: BLE001
        notes.append(f"{name}: the reference decoding raised: {short(e)}")
        return f"| {name} | raised | " + " | ".join("" for _ in PEERS) + " |"
    if not ref:
        notes.append(f"{name}: the reference decoding gave no frame")
        return f"| {name} | 0 | " + " | ".join("" for _ in PEERS) + " |"
    draws = random.Random(0x5EED)
    wanted = [draws.randrange(len(ref)) for _ in range(offsets)]
    cells = []
    for peer in PEERS:
        peer_notes: dict[str, list[str]] = {}  # an error, where the peer raised it first
        try:
            count = str(API[peer][0](path))
        except Exception as e:  # noqa: BLE001
            peer_notes.setdefault(short(e), []).append("opening")
            count = "raised"
        order, off = in_order(peer, path, ref, peer_notes)
        # A peer whose own decoding from the start is off (another FFmpeg's decoder) is
        # judged within that much: what is counted is the seek's error.
        tolerance = off if TOLERANCE < off <= DECODER_SLACK else TOLERANCE
        verdict = seeks(peer, path, ref, wanted, tolerance, peer_notes)
        cells.append("; ".join(x for x in (verdict, f"says {count}", order) if x))
        notes += [f"{name}: {peer} ({', '.join(where)}): {e}" for e, where in peer_notes.items()]
    return f"| {name} | {len(ref)} | " + " | ".join(cells) + " |"


def versions() -> str:
    import subprocess

    import av
    import decord

    # decord's wheel carries its own FFmpeg; its library names tell which.
    ours = sorted(Path(decord.__file__).parent.parent.glob("decord.libs/libavcodec-*"))
    ours_version = ours[0].name.split(".so.")[-1] if ours else "?"
    system = subprocess.run(["ffmpeg", "-version"], check=True, capture_output=True, text=True).stdout.split()[2]
    return (f"PyAV {importlib.metadata.version('av')} (its FFmpeg {av.ffmpeg_version_info}), "
            f"decord {importlib.metadata.version('decord')} "
            f"(its libavcodec {ours_version}), "
            f"SPDL {importlib.metadata.version('spdl-io')} and torchcodec "
            f"{importlib.metadata.version('torchcodec')} (the system's FFmpeg {system})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--offsets", type=int, default=100)
    parser.add_argument("--out", type=Path, help="also write the table here")
    parser.add_argument("videos", nargs="+")
    args = parser.parse_args()
    notes: list[str] = []
    legend = (f"{args.offsets} frames a file at random indices; {versions()}. A cell: the frames "
              f"after a seek more than {TOLERANCE} level off the reference (or more than the peer's "
              "own decoding in order is), raised, or not returned; the frame count the peer claims; "
              "its decoding in order where that differs from the reference.")
    lines = [legend, "", "| file | frames from the start | " + " | ".join(PEERS) + " |",
             "|---|---|" + "---|" * len(PEERS)]
    print("\n".join(lines), flush=True)
    for path in args.videos:
        lines.append(row(path, args.offsets, notes))
        print(lines[-1], flush=True)
    if notes:
        lines += ["", "Errors (the first each peer raised in a file):", ""] + [f"- {n}" for n in notes]
        print("\n".join(lines[-len(notes) - 3:]))
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
