#!/usr/bin/env python3
"""Correctness of nostall's audio operators against torchaudio (and libsoxr), on real clips.

For each clip (WAV and FLAC, which every decoder decodes to the same samples), the mono
mix is written as a float WAV and read back through nostall's `m5-val` pipeline (resample
44.1 kHz → 8 kHz, centre crop of 32 000) and compared with torchaudio's
`functional.resample` of the same samples, cropped the same way: the signal-to-noise
ratio of the difference, in dB. libsoxr's very-high-quality resampler (`soxr`, VHQ) is
compared with both, to show where each windowed-sinc filter stands.

Then torchaudio's 16 kHz resampling of each clip, cropped to 64 000 samples, is written as
a 16 kHz float WAV (which nostall passes through unresampled) and read through
`melspec-val`: nostall's log-mel output, exponentiated back, is compared with torchaudio's
`MelSpectrogram(16000, n_fft=400, hop_length=160, n_mels=64)` of the same samples,
computed in float64 (torchaudio's definition, exactly) and in float32 (what torchaudio
users get, whose FFT rounding is relative to each frame's energy): the largest relative
error over bins above 1e-6 of the clip's largest value.

    .venv-audio/bin/python bench/audio_check.py [--clips bench/out/audio/lossless] [--n 40]

Needs `bash bench/setup_env.sh audio` and nostall built into that venv (see
docs/audio.md).
"""

import argparse
import math
import sys
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr
import torch
import torchaudio

import nostall


def snr_db(reference: np.ndarray, other: np.ndarray) -> float:
    noise = np.sum((reference.astype(np.float64) - other) ** 2)
    signal = np.sum(reference.astype(np.float64) ** 2)
    return math.inf if noise == 0 else 10 * math.log10(signal / noise)


def centre(x: np.ndarray, length: int) -> np.ndarray:
    """nostall's CenterCrop: the middle `length` samples, zero-padded at the end."""
    start = max(len(x) - length, 0) // 2
    out = np.zeros(length, dtype=np.float32)
    kept = x[start:start + length]
    out[:len(kept)] = kept
    return out


def through_nostall(waves: list[np.ndarray], rate: int, pipeline: str) -> list[np.ndarray]:
    """Each wave written as a float WAV at `rate`, read back through `pipeline`."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "clips"
        folder.mkdir()
        for i, wave in enumerate(waves):
            sf.write(folder / f"{i:05d}.wav", wave, rate, subtype="FLOAT")
        loader = nostall.Loader(str(folder), pipeline=pipeline, batch_size=1,
                                shuffle=False, threads=2)
        return [batch.numpy().reshape(-1).copy() for batch, _ in loader]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clips", type=Path,
                        default=Path(__file__).resolve().parent / "out" / "audio" / "lossless")
    parser.add_argument("--n", type=int, default=40, help="clips compared")
    args = parser.parse_args()
    files = sorted(args.clips.rglob("*.wav")) + sorted(args.clips.rglob("*.flac"))
    files = sorted(files)[:: max(len(files) // args.n, 1)][: args.n]
    if not files:
        sys.exit(f"no WAV or FLAC clips under {args.clips}: run bench/make_audio.py")
    monos, rates = [], set()
    for f in files:
        data, rate = sf.read(f, dtype="float32", always_2d=True)
        monos.append(data.mean(axis=1, dtype=np.float32))
        rates.add(rate)
    assert rates == {44100}, rates

    ours = through_nostall(monos, 44100, "m5-val")
    vs_torch, vs_soxr, torch_vs_soxr = [], [], []
    for mono, got in zip(monos, ours):
        reference = torchaudio.functional.resample(torch.from_numpy(mono), 44100, 8000).numpy()
        soxr_out = soxr.resample(mono, 44100, 8000, quality="VHQ").astype(np.float32)
        reference, soxr_out = centre(reference, 32000), centre(soxr_out, 32000)
        vs_torch.append(snr_db(reference, got))
        vs_soxr.append(snr_db(soxr_out, got))
        torch_vs_soxr.append(snr_db(soxr_out, reference))

    mel = torchaudio.transforms.MelSpectrogram(16000, n_fft=400, hop_length=160, n_mels=64)
    mel64 = torchaudio.transforms.MelSpectrogram(16000, n_fft=400, hop_length=160,
                                                 n_mels=64).double()
    crops = [centre(torchaudio.functional.resample(torch.from_numpy(m), 44100, 16000).numpy(),
                    64000) for m in monos]
    ours = through_nostall(crops, 16000, "melspec-val")
    worst, worst32, vs32 = [], [], []

    def largest_relative(reference: np.ndarray, other: np.ndarray) -> float:
        kept = reference > 1e-6 * reference.max()
        return float(np.max(np.abs(other[kept] - reference[kept]) / reference[kept]))

    for crop, got in zip(crops, ours):
        reference = mel64(torch.from_numpy(crop).double()).numpy()
        single = mel(torch.from_numpy(crop)).numpy().astype(np.float64)
        mine = np.exp(got.astype(np.float64).reshape(reference.shape)) - 1e-6
        worst.append(largest_relative(reference, mine))
        worst32.append(largest_relative(reference, single))
        vs32.append(largest_relative(single, mine))

    def summary(values: list[float]) -> str:
        v = np.array(values)
        return f"min {v.min():.1f}, median {np.median(v):.1f} dB"

    print(f"{len(files)} clips from {args.clips} (44.1 kHz stereo, mixed to mono); "
          f"torch {torch.__version__}, torchaudio {torchaudio.__version__}, soxr {soxr.__version__}")
    print(f"resample 44.1 → 8 kHz, nostall vs torchaudio:   SNR {summary(vs_torch)}")
    print(f"resample 44.1 → 8 kHz, nostall vs soxr VHQ:     SNR {summary(vs_soxr)}")
    print(f"resample 44.1 → 8 kHz, torchaudio vs soxr VHQ:  SNR {summary(torch_vs_soxr)}")
    w, w32, v32 = np.array(worst), np.array(worst32), np.array(vs32)
    print("mel spectrogram, largest relative error per clip over bins above 1e-6 of the "
          "clip's largest (max / median):")
    print(f"  nostall vs torchaudio float64:     {w.max():.2e} / {np.median(w):.2e}")
    print(f"  nostall vs torchaudio float32:     {v32.max():.2e} / {np.median(v32):.2e}")
    print(f"  torchaudio float32 vs float64:     {w32.max():.2e} / {np.median(w32):.2e}")
    ok = min(vs_torch) >= 60 and w.max() <= 1e-4
    print("within the stated tolerances (SNR ≥ 60 dB, mel ≤ 1e-4 relative):", "yes" if ok else "NO")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
